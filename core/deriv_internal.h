// deriv_internal.h: what `chainfd check --derivatives` reaches inside a chainfd_deriv (not public).
#ifndef CHAINFD_DERIV_INTERNAL_H
#define CHAINFD_DERIV_INTERNAL_H

#include "chainfd_deriv.h"

// qacc at d's state and controls by the long-double-refined reference (cfd_fd_reference), with
// the applied forces of chainfd_deriv_qacc: the function the check differences. 0, or 1 with a
// message.
int cfd_deriv_reference_qacc(chainfd_deriv* dv, const mjModel* m, const mjData* d, double* qacc,
                             char* err, int err_size);

#endif  // CHAINFD_DERIV_INTERNAL_H
