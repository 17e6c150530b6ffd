// Dropped GPU derivative kernels (deriv_variants.h), kept to be measured beside the library's.
//
// Thread per instance: each thread runs deriv_instance.h, the CPU's code, with its scratch in local
// memory sized by a template bound on the dofs. No spills, but a 7-dof instance's working set
// (about 12 KB) times the threads resident overflows L1, and one instance is a long dependent
// chain on one thread: the batch is latency bound (bench/results/h100_deriv_first.txt). The
// library's kernel spreads an instance over a warp with the working set in shared memory.
#include <stdio.h>

#include "deriv_instance.h"
#include "deriv_variants.h"
#include "gpu_internal.h"

template <int N, int U>
struct deriv_local {
  double d[(CFD_IDD_LINK + CFD_IDD_COMP + 9) * N + N * N + N * (2 * N + U) + N * U + U];
  int i[N];
};

template <int N, int U>
__global__ void __launch_bounds__(128)
deriv_thread_kernel(cfd_chain c, cfd_rollout_params p, int B, const double* __restrict__ x,
                    const double* __restrict__ u, double* Dq, double* Dv, double* Du,
                    unsigned long long* flag) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  int n = p.n, nu = p.nu, cols = 2 * n + nu;
  deriv_local<N, U> L;
  cfd_deriv_scratch s;
  cfd_deriv_scratch_at(&s, n, nu, L.d, L.i);
  const double* xb = x + (size_t)b * 2 * n;
  cfd_deriv_applied(&p, xb, xb + n, u ? u + (size_t)b * nu : NULL, 0, &s);
  if (cfd_deriv_solve(&c, &p, xb + n, Dq != NULL, Dv != NULL, Du != NULL, &s)) {
    cfd_gpu_deriv_fail(flag, 1, b);
    return;
  }
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < n; j++) {
      if (Dq) Dq[((size_t)b * n + i) * n + j] = s.X[cols * i + j];
      if (Dv) Dv[((size_t)b * n + i) * n + j] = s.X[cols * i + n + j];
    }
    for (int a = 0; a < nu && Du; a++) Du[((size_t)b * n + i) * nu + a] = s.X[cols * i + 2 * n + a];
  }
}

extern "C" int cfd_variant_deriv_thread(cfd_gpu_rollout* r, int B, const double* x, const double* u,
                                        double* Dq, double* Dv, double* Du, char* err, int err_size) {
  cfd_chain c;
  cfd_rollout_params p;
  int device;
  cudaStream_t stream;
  unsigned long long* flag;  // at rest (0) between batches
  cfd_gpu_rollout_model(r, &c, &p, &device, &stream, &flag);
  if (p.n > 16 || p.nu > 16) {
    snprintf(err, err_size, "deriv thread variant: up to 16 dofs and controls");
    return 1;
  }
  cudaSetDevice(device);
  int threads = 128, blocks = (B + threads - 1) / threads;
  if (p.n <= 8 && p.nu <= 8)
    deriv_thread_kernel<8, 8><<<blocks, threads, 0, stream>>>(c, p, B, x, u, Dq, Dv, Du, flag);
  else
    deriv_thread_kernel<16, 16><<<blocks, threads, 0, stream>>>(c, p, B, x, u, Dq, Dv, Du, flag);
  unsigned long long got = 0;
  cudaError_t e = cudaGetLastError();
  if (!e) e = cudaMemcpyAsync(&got, flag, sizeof got, cudaMemcpyDeviceToHost, stream);
  if (!e) e = cudaStreamSynchronize(stream);
  if (e || got) {
    cfd_gpu_deriv_flag_reset(flag, stream);
    snprintf(err, err_size, "deriv thread variant: %s", e ? cudaGetErrorString(e) : "singular");
    return 1;
  }
  return 0;
}
