// The forward dynamics' derivatives of a batch of states on the GPU: a thread per instance
// running deriv_instance.h (the CPU's code) with its scratch in local memory, sized by a template
// bound on the dofs. A first design: paper 003's (the working set in shared memory, the
// instance's links spread over a block's threads) is the next step (docs/DESIGN.md 4.18).
#include <stdio.h>

#include "deriv_instance.h"
#include "gpu_internal.h"

// An instance's local scratch for up to N dofs and U controls
template <int N, int U>
struct deriv_local {
  double d[(CFD_IDD_LINK + CFD_IDD_COMP + 9) * N + N * N + N * (2 * N + U) + N * U + U];
  int i[N];
};

// status: 0, 1 (an instance's system singular), 2 (an instance at a joint limit); the lowest such
// instance in *which
template <int N, int U>
__global__ void __launch_bounds__(128)
deriv_kernel(cfd_chain c, cfd_rollout_params p, int B, const double* __restrict__ x,
             const double* __restrict__ u, double* Dq, double* Dv, double* Du, int* status,
             int* which) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  int n = p.n, nu = p.nu, cols = 2 * n + nu;
  deriv_local<N, U> L;
  cfd_deriv_scratch s;
  cfd_deriv_scratch_at(&s, n, nu, L.d, L.i);
  const double* xb = x + (size_t)b * 2 * n;
  for (int i = 0; i < n && p.rows; i++) {  // a limit's row (rollout_step.h's test)
    const double* P = p.rows + CFD_RP_COUNT * i;
    if (P[CFD_RP_LIMITED] && (xb[i] - P[CFD_RP_LO] < P[CFD_RP_MARGIN] || P[CFD_RP_HI] - xb[i] < P[CFD_RP_MARGIN])) {
      atomicMax(status, 2);
      atomicMin(which, b);
      return;
    }
  }
  cfd_deriv_applied(&p, xb, xb + n, u ? u + (size_t)b * nu : NULL, 0, &s);
  if (cfd_deriv_solve(&c, &p, xb + n, Dq != NULL, Dv != NULL, Du != NULL, &s)) {
    atomicMax(status, 1);
    atomicMin(which, b);
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

static int fail(char* err, int size, const char* what, cudaError_t e) {
  snprintf(err, size, "GPU derivatives: %s: %s", what, cudaGetErrorString(e));
  return 1;
}

int cfd_gpu_deriv_batch(cfd_gpu_rollout* r, int B, const double* x, const double* u, double* Dq,
                        double* Dv, double* Du, cfd_memory where, char* err, int err_size) {
  cfd_chain c;
  cfd_rollout_params p;
  int device;
  cudaStream_t stream;
  int* flags;  // status, instance
  cfd_gpu_rollout_model(r, &c, &p, &device, &stream, &flags);
  int n = p.n, nu = p.nu;
  if (n > 16 || nu > 16) {
    snprintf(err, err_size, "GPU derivatives: %d dofs and %d controls: the GPU takes up to 16 of "
             "each so far (the CPU takes any)", n, nu);
    return 1;
  }
  cudaError_t e = cudaSetDevice(device);
  if (e) return fail(err, err_size, "selecting the device", e);
  size_t nx = (size_t)B * 2 * n, nuu = (size_t)B * nu, nqq = (size_t)B * n * n, nqu = (size_t)B * n * nu;
  const double *dx = x, *du_in = u;
  double *dq = Dq, *dv = Dv, *dU = Du, *block = NULL;
  if (where == CFD_HOST) {  // staging: one block, one copy up; the outputs come back after
    size_t total = nx + (u ? nuu : 0) + (Dq ? nqq : 0) + (Dv ? nqq : 0) + (Du ? nqu : 0);
    e = cudaMalloc(&block, sizeof(double) * (total ? total : 1));
    if (e) return fail(err, err_size, "out of device memory for the batch", e);
    double* at = block;
    dx = at, at += nx;
    if (u) du_in = at, at += nuu;
    if (Dq) dq = at, at += nqq;
    if (Dv) dv = at, at += nqq;
    if (Du) dU = at, at += nqu;
    e = cudaMemcpyAsync((void*)dx, x, sizeof(double) * nx, cudaMemcpyHostToDevice, stream);
    if (!e && u) e = cudaMemcpyAsync((void*)du_in, u, sizeof(double) * nuu, cudaMemcpyHostToDevice, stream);
    if (e) {
      cudaFree(block);
      return fail(err, err_size, "copying the states up", e);
    }
  }
  e = cudaMemsetAsync(flags, 0, sizeof(int), stream);
  if (!e) e = cudaMemsetAsync(flags + 1, 0x7f, sizeof(int), stream);  // (atomicMin from a large int)
  if (!e) {
    int threads = 128, blocks = (B + threads - 1) / threads;
    if (n <= 8 && nu <= 8)
      deriv_kernel<8, 8><<<blocks, threads, 0, stream>>>(c, p, B, dx, du_in, dq, dv, dU, flags, flags + 1);
    else
      deriv_kernel<16, 16><<<blocks, threads, 0, stream>>>(c, p, B, dx, du_in, dq, dv, dU, flags, flags + 1);
    e = cudaGetLastError();
  }
  int got[2] = {0, 0};
  if (!e) e = cudaMemcpyAsync(got, flags, sizeof got, cudaMemcpyDeviceToHost, stream);
  if (!e && where == CFD_HOST) {
    if (Dq) e = cudaMemcpyAsync(Dq, dq, sizeof(double) * nqq, cudaMemcpyDeviceToHost, stream);
    if (!e && Dv) e = cudaMemcpyAsync(Dv, dv, sizeof(double) * nqq, cudaMemcpyDeviceToHost, stream);
    if (!e && Du) e = cudaMemcpyAsync(Du, dU, sizeof(double) * nqu, cudaMemcpyDeviceToHost, stream);
  }
  if (!e) e = cudaStreamSynchronize(stream);
  cudaFree(block);
  if (e) return fail(err, err_size, "the batch", e);
  if (got[0]) {
    snprintf(err, err_size, "GPU derivatives: instance %d: %s", got[1],
             got[0] == 2 ? "a joint at its limit (an active constraint row: the derivatives of the "
                           "constrained step are not done yet)"
                         : "the joint-space system is singular");
    return 1;
  }
  return 0;
}
