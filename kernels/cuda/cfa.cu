// CFA on the GPU: the steps of cpu/cfa_cpu.c with every per-link loop run in parallel (grid:
// links x instances), through the same per-link functions (cfa_blocks.h):
//   bias (scan-based ID, id.cu) -> blocks of P^T K P -> system rows -> ceil(log2 n) levels of
//   odd-even elimination -> block-diagonal solve -> qdd from the f-rows.
// J_i^-1, P_i and sigma_i are constant in link frames and uploaded once (gpu.cu).
#include "cfa_blocks.h"
#include "gpu_internal.h"

#define CFA_THREADS 64

// per-instance scratch after the ID's: D0 U0 D U D2 U2 (36n each), R R2 (6n each), frow 18n,
// tau_d n, dj n, and the elimination's multipliers (72n per level)
#define CFA_OFF_D0(n) CFD_ID_WORK(n)

struct cfa_views {
  double *D0, *U0, *D, *U, *D2, *U2, *R, *R2, *frow, *taud, *dj, *EK;
};

__device__ __forceinline__ cfa_views cfa_views_of(double* w, int n) {
  cfa_views v;
  v.D0 = w + CFA_OFF_D0(n);
  v.U0 = v.D0 + 36 * n;
  v.D = v.U0 + 36 * n;
  v.U = v.D + 36 * n;
  v.D2 = v.U + 36 * n;
  v.U2 = v.D2 + 36 * n;
  v.R = v.U2 + 36 * n;
  v.R2 = v.R + 6 * n;
  v.frow = v.R2 + 6 * n;
  v.taud = v.frow + 18 * n;
  v.dj = v.taud + n;
  v.EK = v.dj + n;
  return v;
}

__global__ void cfa_blocks_kernel(cfd_chain c, const double* __restrict__ jinv,
                                  const double* __restrict__ basis, const double* __restrict__ tau,
                                  const double* __restrict__ extra,
                                  const double* __restrict__ bias, double* work, long stride) {
  int n = c.n, i = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (i >= n) return;
  double* w = work + (long)b * stride;
  cfa_views v = cfa_views_of(w, n);
  const double* lp = w;  // local poses from the ID
  double G[36];
  if (i > 0) cfd_ad_inv_mat(lp + 12 * i, lp + 12 * i + 9, G);
  cfd_cfa_diag_block(jinv + 36 * i, i ? jinv + 36 * (i - 1) : NULL, i ? G : NULL, basis + 36 * i,
                     v.D0 + 36 * i);
  if (i + 1 < n) {
    cfd_ad_inv_mat(lp + 12 * (i + 1), lp + 12 * (i + 1) + 9, G);
    cfd_cfa_upper_block(jinv + 36 * i, G, basis + 36 * i, basis + 36 * (i + 1), v.U0 + 36 * i);
  }
  v.taud[i] = tau[(long)b * n + i] - bias[(long)b * n + i];
  v.dj[i] = c.armature[i] + (extra ? extra[(long)b * n + i] : 0);
}

__global__ void cfa_system_kernel(int n, const double* __restrict__ sigma, double* work, long stride) {
  int i = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (i >= n) return;
  cfa_views v = cfa_views_of(work + (long)b * stride, n);
  cfd_cfa_system_row(i, n, v.D0, v.U0, v.dj, sigma, v.taud, v.D, v.U, v.R, v.frow);
}

// One level; `flip` selects which buffer pair is this level's input. refine: the right-hand side
// alone, with the multipliers the first solve stored.
__global__ void cfa_oee_kernel(int n, int s, int level, int flip, int refine, double* work,
                               long stride, int* error) {
  int i = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (i >= n) return;
  cfa_views v = cfa_views_of(work + (long)b * stride, n);
  double *D = v.D, *U = v.U, *R = v.R, *Dn = v.D2, *Un = v.U2, *Rn = v.R2;
  if (flip) {
    D = v.D2; U = v.U2; R = v.R2; Dn = v.D; Un = v.U; Rn = v.R;
  }
  double* E = v.EK + (size_t)72 * n * level + 72 * i;
  if (refine) cfd_oee_rhs(i, s, n, E, E + 36, R, Rn);
  else if (cfd_oee_update(i, s, n, D, U, R, Dn, Un, Rn, E, E + 36)) atomicExch(error, CFD_ERR_SINGULAR);
}

// The block-diagonal system after the last level: factor (first solve) and solve.
__global__ void cfa_solve_kernel(int n, int flip, int refine, double* work, long stride, int* error) {
  int i = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (i >= n) return;
  cfa_views v = cfa_views_of(work + (long)b * stride, n);
  double* D = flip ? v.D2 : v.D;
  double* R = flip ? v.R2 : v.R;
  if (!refine && cfd_chol_factor(D + 36 * i, 6, 6)) {
    atomicExch(error, CFD_ERR_SINGULAR);
    return;
  }
  cfd_chol_solve(D + 36 * i, 6, 6, R + 6 * i, 1, 1);
}

// |x| as an integer that orders like the double (x >= 0), for atomicMax
__device__ __forceinline__ unsigned long long abs_bits(double x) {
  return (unsigned long long)__double_as_longlong(fabs(x));
}

// qdd from the f-rows; add: a refinement's correction. The last two steps record per instance the
// correction's size in norms[3b + slot] (slot 0: the step before the last, 1: the last) and the
// last step qacc's size in norms[3b + 2].
__global__ void cfa_qdd_kernel(int n, int flip, const double* __restrict__ sigma, double* work,
                               long stride, double* qacc, int add, unsigned long long* norms,
                               int slot) {
  int i = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (i >= n) return;
  cfa_views v = cfa_views_of(work + (long)b * stride, n);
  double x = cfd_cfa_qdd(i, n, v.frow, flip ? v.R2 : v.R, sigma[i]);
  double* out = qacc + (long)b * n + i;
  *out = add ? *out + x : x;
  if (norms) {
    atomicMax(norms + 3 * b + slot, abs_bits(x));
    if (slot == 1) atomicMax(norms + 3 * b + 2, abs_bits(*out));
  }
}

// refuse instances whose last correction is not small (cpu/cfa_cpu.c, step 6)
__global__ void cfa_accept_kernel(int B, int have_prev, const unsigned long long* norms, int* error) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  double prev = have_prev ? __longlong_as_double((long long)norms[3 * b]) : INFINITY;
  double corr = __longlong_as_double((long long)norms[3 * b + 1]);
  double size = __longlong_as_double((long long)norms[3 * b + 2]);
  if (!cfd_cfa_converged(corr, prev, size)) atomicExch(error, CFD_ERR_INACCURATE);
}

// tau_d of a refinement step: the residual, from the [B][n] array into each instance's view
__global__ void cfa_taud_kernel(int n, const double* __restrict__ r, double* work, long stride) {
  int i = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (i >= n) return;
  cfa_views_of(work + (long)b * stride, n).taud[i] = r[(long)b * n + i];
}

// the refinement's right-hand side from the residual (already in taud)
__global__ void cfa_rhs_row_kernel(int n, const double* __restrict__ sigma, double* work, long stride) {
  int i = blockIdx.x * blockDim.x + threadIdx.x, b = blockIdx.y;
  if (i >= n) return;
  cfa_views v = cfa_views_of(work + (long)b * stride, n);
  cfd_cfa_rhs_row(i, n, v.D0, v.U0, v.dj, sigma, v.taud, v.R);
}

// steps 3-5 of cpu/cfa_cpu.c; refine: a further right-hand side with the stored elimination
static void cfa_solve(cfd_gpu* g, int B, long stride, double* qacc, int refine,
                      unsigned long long* norms, int slot) {
  int n = g->n;
  int* error = g->info + g->capacity;
  dim3 grid((n + CFA_THREADS - 1) / CFA_THREADS, B);
  if (refine) cfa_rhs_row_kernel<<<grid, CFA_THREADS, 0, g->stream>>>(n, g->sigma, g->work, stride);
  else cfa_system_kernel<<<grid, CFA_THREADS, 0, g->stream>>>(n, g->sigma, g->work, stride);
  int flip = 0, level = 0;
  for (int s = 1; s < n; s *= 2, flip ^= 1, level++)
    cfa_oee_kernel<<<grid, CFA_THREADS, 0, g->stream>>>(n, s, level, flip, refine,
                                                        g->work, stride, error);
  cfa_solve_kernel<<<grid, CFA_THREADS, 0, g->stream>>>(n, flip, refine, g->work, stride, error);
  cfa_qdd_kernel<<<grid, CFA_THREADS, 0, g->stream>>>(n, flip, g->sigma, g->work, stride, qacc,
                                                      refine, norms, slot);
}

cudaError_t cfd_gpu_launch_cfa(cfd_gpu* g, int B, const double* q, const double* qd,
                               const double* tau, const double* extra, double* qacc) {
  int n = g->n;
  long stride = (long)cfd_gpu_work_per_instance(CFD_GPU_CFA, n);
  cudaError_t e = cfd_gpu_launch_id(g, B, q, qd, NULL, g->bias, g->work, stride);
  if (e) return e;
  dim3 grid((n + CFA_THREADS - 1) / CFA_THREADS, B);
  cfa_blocks_kernel<<<grid, CFA_THREADS, 0, g->stream>>>(g->chain, g->jinv, g->basis, tau, extra,
                                                         g->bias, g->work, stride);
  cfa_solve(g, B, stride, qacc, 0, NULL, 0);
  // the last two steps' correction sizes, per instance, in the (otherwise unused) pointer array
  unsigned long long* norms = (unsigned long long*)g->ptrs;
  int steps = cfd_cfa_refine_steps;
  if (steps > 0) cudaMemsetAsync(norms, 0, sizeof(unsigned long long) * 3 * B, g->stream);
  for (int step = 0; step < cfd_cfa_refine_steps; step++) {  // step 6 of cpu/cfa_cpu.c
    e = cfd_gpu_launch_id(g, B, q, qd, qacc, g->bias, g->work, stride);
    if (e) return e;
    e = cfd_gpu_launch_residual(g, B, tau, extra, g->bias, qacc, g->resid);
    if (e) return e;
    cfa_taud_kernel<<<grid, CFA_THREADS, 0, g->stream>>>(n, g->resid, g->work, stride);
    int slot = step == steps - 1 ? 1 : step == steps - 2 ? 0 : -1;
    cfa_solve(g, B, stride, qacc, 1, slot >= 0 ? norms : NULL, slot);
    if (slot == 1)
      cfa_accept_kernel<<<(B + 127) / 128, 128, 0, g->stream>>>(B, steps > 1, norms,
                                                                g->info + g->capacity);
  }
  return cudaGetLastError();
}
