// JSIIA on the GPU ([GPUFD] eq. 7): bias by the scan-based ID (id.cu), then M in the world
// frame, where the composite inertias are suffix sums and every entry is independent:
//   Ic_i = sum_{k>=i} J^w_k,   M_ij = S^w_i^T Ic_{max(i,j)} S^w_j (+ armature, extra on i = j)
// then Cholesky: cuSOLVER (potrf/potrs, their batched forms for many instances), or, for small
// matrices, one thread per instance factorising in its own registers and cache (cfd_chol_*).
#include "block_scan.cuh"
#include "cfd_math.h"
#include "gpu_internal.h"

#define IC_MAX_THREADS 64
#define JSIIA_SMALL_N 16  // at or below: the one-thread-per-instance Cholesky

// per-instance scratch after the ID's: Ic 36n, M n*n (column-major), rhs n
#define JS_OFF_IC(n) CFD_ID_WORK(n)
#define JS_OFF_M(n) (JS_OFF_IC(n) + (size_t)36 * (n))
#define JS_OFF_RHS(n) (JS_OFF_M(n) + (size_t)(n) * (n))

__global__ void jsiia_ic_kernel(cfd_chain c, double* work, long stride) {
  extern __shared__ double sh[];
  int n = c.n, b = blockIdx.x, t = threadIdx.x, T = blockDim.x;
  int L = (n + T - 1) / T, i0 = min(n, t * L), i1 = min(n, i0 + L);
  double* w = work + (long)b * stride;
  const double* wp = w + 12 * n;
  double* Ic = w + JS_OFF_IC(n);
  double acc[36];
  for (int k = 0; k < 36; k++) acc[k] = 0;
  for (int i = i1 - 1; i >= i0; i--) {
    double Jw[36];
    cfd_inertia_to_parent(wp + 12 * i, wp + 12 * i + 9, c.inertia + 36 * i, Jw);
    for (int k = 0; k < 36; k++) Ic[36 * i + k] = acc[k] += Jw[k];
  }
  for (int k = 0; k < 36; k++) sh[36 * t + k] = acc[k];
  __syncthreads();
  block_scan_sum(sh, 36, true);
  if (t + 1 < T)
    for (int i = i0; i < i1; i++)
      for (int k = 0; k < 36; k++) Ic[36 * i + k] += sh[36 * (t + 1) + k];
}

__global__ void jsiia_m_kernel(cfd_chain c, int B, const double* __restrict__ tau,
                               const double* __restrict__ extra, const double* __restrict__ bias,
                               double* work, long stride) {
  int n = c.n, i = blockIdx.x * blockDim.x + threadIdx.x, j = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= n || j >= n) return;
  for (int b = blockIdx.z; b < B; b += gridDim.z) {
    double* w = work + (long)b * stride;
    const double* Sw = w + 24 * n;
    const double* Ic = w + JS_OFF_IC(n) + 36 * (i > j ? i : j);
    double F[6];
    cfd_mat6_vec(Ic, Sw + 6 * j, F);
    double m = cfd_dot6(Sw + 6 * i, F);
    if (i == j) {
      m += c.armature[i] + (extra ? extra[(long)b * n + i] : 0);
      w[JS_OFF_RHS(n) + i] = tau[(long)b * n + i] - bias[(long)b * n + i];
    }
    w[JS_OFF_M(n) + (size_t)j * n + i] = m;
  }
}

// factor (first pass) or reuse the factor (refinement), solve, write or add qacc
__global__ void jsiia_small_solve_kernel(int n, int B, double* work, long stride, double* qacc,
                                         int refine, int* error) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  double* w = work + (long)b * stride;
  double* M = w + JS_OFF_M(n);
  double* x = w + JS_OFF_RHS(n);
  if (!refine && cfd_chol_factor(M, n, n)) {
    cfd_gpu_raise(error, CFD_ERR_SINGULAR);
    return;
  }
  cfd_chol_solve(M, n, n, x, 1, 1);
  for (int i = 0; i < n; i++) qacc[(long)b * n + i] = (refine ? qacc[(long)b * n + i] : 0) + x[i];
}

// the refinement residual into each instance's right-hand side slot
__global__ void jsiia_rhs_kernel(int n, int B, const double* __restrict__ r, double* work, long stride) {
  int i = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (i < n && b < B) work[(long)b * stride + JS_OFF_RHS(n) + i] = r[(long)b * n + i];
}

__global__ void jsiia_pointers_kernel(int n, int B, double* work, long stride, double** ptrs) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  ptrs[b] = work + (long)b * stride + JS_OFF_M(n);
  ptrs[B + b] = work + (long)b * stride + JS_OFF_RHS(n);
}

__global__ void jsiia_gather_kernel(int n, int B, const double* work, long stride, double* qacc,
                                    int add) {
  int i = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (i >= n || b >= B) return;
  double x = work[(long)b * stride + JS_OFF_RHS(n) + i];
  qacc[(long)b * n + i] = (add ? qacc[(long)b * n + i] : 0) + x;
}

// One solve with the factor in M (factor = 1: form it first); writes or (refine) adds qacc.
static int jsiia_solve(cfd_gpu* g, int B, long stride, double* qacc, int refine, const char** what) {
  int n = g->n;
  int* error = cfd_gpu_error_flag(g);
  int* potrs_info = g->info + g->capacity + 1;  // device, unread: potrs fails only on bad arguments
  if (n <= JSIIA_SMALL_N) {
    jsiia_small_solve_kernel<<<(B + 127) / 128, 128, 0, g->stream>>>(n, B, g->work, stride, qacc,
                                                                     refine, error);
    *what = "kernel launch";
    return cudaGetLastError() != cudaSuccess;
  }
  cusolverStatus_t st;
  if (B == 1) {
    double* M = g->work + JS_OFF_M(n);
    double* x = g->work + JS_OFF_RHS(n);
    *what = "cusolverDnDpotrf";
    if (!refine) {
      st = cusolverDnDpotrf(g->solver, CUBLAS_FILL_MODE_LOWER, n, M, n, g->solver_work,
                            g->solver_lwork, g->info);
      if (st != CUSOLVER_STATUS_SUCCESS) return 1;
    }
    *what = "cusolverDnDpotrs";
    st = cusolverDnDpotrs(g->solver, CUBLAS_FILL_MODE_LOWER, n, 1, M, n, x, n, potrs_info);
    if (st != CUSOLVER_STATUS_SUCCESS) return 1;
  } else {
    if (!refine) {
      jsiia_pointers_kernel<<<(B + 127) / 128, 128, 0, g->stream>>>(n, B, g->work, stride, g->ptrs);
      *what = "cusolverDnDpotrfBatched";
      st = cusolverDnDpotrfBatched(g->solver, CUBLAS_FILL_MODE_LOWER, n, g->ptrs, n, g->info, B);
      if (st != CUSOLVER_STATUS_SUCCESS) return 1;
    }
    *what = "cusolverDnDpotrsBatched";
    st = cusolverDnDpotrsBatched(g->solver, CUBLAS_FILL_MODE_LOWER, n, 1, g->ptrs, n, g->ptrs + B, n,
                                 potrs_info, B);
    if (st != CUSOLVER_STATUS_SUCCESS) return 1;
  }
  dim3 ggrid((n + 127) / 128, B);
  jsiia_gather_kernel<<<ggrid, 128, 0, g->stream>>>(n, B, g->work, stride, qacc, refine);
  *what = "kernel launch";
  return cudaGetLastError() != cudaSuccess;
}

int cfd_gpu_launch_jsiia(cfd_gpu* g, int B, const double* q, const double* qd, const double* tau,
                         const double* extra, double* qacc, const char** what) {
  int n = g->n;
  long stride = (long)cfd_gpu_work_per_instance(CFD_GPU_JSIIA, n);
  *what = "kernel launch";
  if (cfd_gpu_launch_id(g, B, q, qd, NULL, g->bias, g->work, stride)) return 1;
  int T = cfd_pow2_threads(n, IC_MAX_THREADS);
  jsiia_ic_kernel<<<B, T, sizeof(double) * 36 * T, g->stream>>>(g->chain, g->work, stride);
  dim3 mblock(16, 16), mgrid((n + 15) / 16, (n + 15) / 16, B < 65535 ? B : 65535);
  jsiia_m_kernel<<<mgrid, mblock, 0, g->stream>>>(g->chain, B, tau, extra, g->bias, g->work, stride);
  if (cudaGetLastError()) return 1;
  if (jsiia_solve(g, B, stride, qacc, 0, what)) return 1;
  // one step of iterative refinement against the inverse dynamics, as cpu/jsiia_cpu.c
  if (cfd_gpu_launch_id(g, B, q, qd, qacc, g->bias, g->work, stride)) return 1;
  if (cfd_gpu_launch_residual(g, B, tau, extra, g->bias, qacc, g->resid)) return 1;
  dim3 rgrid((n + 127) / 128, B);
  jsiia_rhs_kernel<<<rgrid, 128, 0, g->stream>>>(n, B, g->resid, g->work, stride);
  return jsiia_solve(g, B, stride, qacc, 1, what);
}
