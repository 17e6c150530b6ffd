// deriv_variants.h: GPU derivative kernels measured and dropped (deriv_variants.cu), for the
// benchmark.
#ifndef CHAINFD_DERIV_VARIANTS_H
#define CHAINFD_DERIV_VARIANTS_H

#include "gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

// The first design, a thread per instance running deriv_instance.h with its scratch in local
// memory, on device arrays (the library's cfd_gpu_deriv_batch's contract, CFD_DEVICE); up to 16
// dofs and controls
int cfd_variant_deriv_thread(cfd_gpu_rollout* r, int B, const double* x, const double* u,
                             double* Dq, double* Dv, double* Du, char* err, int err_size);

#ifdef __cplusplus
}
#endif

#endif  // CHAINFD_DERIV_VARIANTS_H
