// abia_variants.h: cuda.abia kernels measured and dropped (abia_variants.cu), for the benchmark.
#ifndef CHAINFD_ABIA_VARIANTS_H
#define CHAINFD_ABIA_VARIANTS_H

#include "gpu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int (*cfd_abia_launch_fn)(cfd_gpu* g, int B, const double* q, const double* qd,
                                  const double* tau, const double* extra, double* qacc);

// The launch of dropped kernel `variant` (2 local lean, 3 local full, 6 world global) for chains of
// n links, to set as cfd_gpu_tuning.abia_launch; NULL where it cannot run (or no such variant).
cfd_abia_launch_fn cfd_variant_abia(int variant, int n);

#ifdef __cplusplus
}
#endif

#endif  // CHAINFD_ABIA_VARIANTS_H
