// Inverse dynamics as scans ([SCAN] section III; the scans are in id_scan.cuh, shared with the
// fused CFA kernel), one thread block per instance.
#include "id_scan.cuh"
#include "gpu_internal.h"

#define ID_MAX_THREADS 256

__global__ void id_kernel(cfd_chain c, const double* __restrict__ q, const double* __restrict__ qd,
                          const double* __restrict__ qdd, double* __restrict__ tau_out,
                          double* __restrict__ work, long work_stride) {
  extern __shared__ double sh[];
  long b = blockIdx.x, n = c.n;
  id_chain(c, q + b * n, qd + b * n, qdd ? qdd + b * n : NULL, tau_out + b * n,
           work + b * work_stride, sh, threadIdx.x, blockDim.x);
}

cudaError_t cfd_gpu_launch_id(cfd_gpu* g, int B, const double* q, const double* qd,
                              const double* qdd, double* tau, double* work, long work_stride) {
  int T = cfd_pow2_threads(g->n, ID_MAX_THREADS);
  size_t shmem = sizeof(double) * ID_SHARED_DOUBLES(T);
  id_kernel<<<B, T, shmem, g->stream>>>(g->chain, q, qd, qdd, tau, work, work_stride);
  return cudaGetLastError();
}
