// rollout_internal.h: what the benchmarks and tests reach inside a chainfd_rollout (not public).
#ifndef CHAINFD_ROLLOUT_INTERNAL_H
#define CHAINFD_ROLLOUT_INTERNAL_H

#include "chainfd_rollout.h"
#include "gpu.h"

// Sets the tuning of each of r's GPU contexts (NULL: the defaults). 0, or 1 with a message; a CPU
// rollout has none to set.
int cfd_rollout_set_tuning(chainfd_rollout* r, const cfd_gpu_tuning* t, char* err, int err_size);
// Steps r's GPU contexts have taken by the scan kernel, all runs.
long cfd_rollout_scan_steps(const chainfd_rollout* r);
// r's chain and step parameters (rollout_step.h), for the derivatives (core/deriv.c) that share
// the rollouts' model and checks
struct cfd_rollout_params;
const cfd_chain* cfd_rollout_chain(const chainfd_rollout* r);
const struct cfd_rollout_params* cfd_rollout_params_of(const chainfd_rollout* r);
// A CPU rollout's forward dynamics at the state x (qpos, qvel in the chain's coordinates) under
// ctrl, the constraint rows solved from scratch: their scratch (rollout_step.h's CFD_RR layout,
// stride 1: the zones, D and aref of each), valid until r's next use, or NULL without rows;
// *status the ABA's
const double* cfd_rollout_cpu_rows(chainfd_rollout* r, const double* x, const double* ctrl, int* status);
// r's GPU context on its device (NULL for a CPU rollout; the first of several)
cfd_gpu_rollout* cfd_rollout_gpu(const chainfd_rollout* r);

#endif  // CHAINFD_ROLLOUT_INTERNAL_H
