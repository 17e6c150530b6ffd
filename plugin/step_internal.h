// step_internal.h: what the benchmarks and tests reach inside a chainfd_stepper (not public).
#ifndef CHAINFD_STEP_INTERNAL_H
#define CHAINFD_STEP_INTERNAL_H

#include "chainfd.h"
#include "gpu.h"

// The tuning of the stepper's GPU context (NULL: the defaults), kept for any context it makes
// later. 0, or 1 with a message.
int cfd_stepper_set_gpu_tuning(chainfd_stepper* s, const cfd_gpu_tuning* t, char* err,
                               int err_size);

#endif  // CHAINFD_STEP_INTERNAL_H
