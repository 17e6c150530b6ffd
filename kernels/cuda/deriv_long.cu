// The forward dynamics' derivatives of long chains and large trees on the GPU (past the warp
// kernel's 32 dofs; cuda/deriv.cu dispatches): an instance at a time, id_deriv.h's stages with a
// block's threads over the links (the sums along the tree a component per thread), the O(n^2)
// mass matrix and right-hand sides a thread per entry, and M's Cholesky factor and the n x (2n + nu)
// solve by cuSOLVER. Subtrees are index ranges [j, last[j]] (MuJoCo numbers bodies depth first;
// checked here), so an entry's ancestry is two comparisons.
#include <stdio.h>

#include <cusolverDn.h>

#include "deriv_instance.h"
#include "gpu_internal.h"

#define LONG_THREADS 512

struct cfd_gpu_deriv_long {
  int n, nu, lwork;
  cusolverDnHandle_t solver;
  double *scratch, *work;  // deriv_instance.h's scratch (X column-major, n x cols), potrf's work
  int *ints, *info;        // last[] and the preorder check's verdict; potrf's and potrs' info
};

void cfd_gpu_deriv_long_free(cfd_gpu_deriv_long* L) {
  if (!L) return;
  if (L->solver) cusolverDnDestroy(L->solver);
  cudaFree(L->scratch);
  cudaFree(L->work);
  cudaFree(L->ints);
  cudaFree(L->info);
  free(L);
}

__device__ static int anc_or_self(const int* last, int a, int b) { return a <= b && b <= last[a]; }

// The accelerations and wrenches at qdd (NULL: zero) over the block: cfd_idd_accel's stages
__device__ static void block_accel(const cfd_chain* c, const double* qd, const double* qdd, double* w) {
  int n = c->n, t = threadIdx.x;
  for (int i = t; i < n; i += blockDim.x) cfd_idd_link_acc(c, i, qd, qdd, w);
  __syncthreads();
  if (t < 6) {
    double a0[6];
    cfd_idd_a0(c, a0);
    cfd_idd_tree_sum(c, w, CFD_IDD_A, t, t + 1, a0);
  }
  __syncthreads();
  for (int i = t; i < n; i += blockDim.x) cfd_idd_link_wrench(i, w);
  __syncthreads();
  if (t < 6) cfd_idd_subtree_sum(c, w, CFD_IDD_LINK, CFD_IDD_F, t, t + 1);
  __syncthreads();
}

// Instance b: applied forces, kinematics, bias, composites; last[] and the preorder check (ints[n])
__global__ void __launch_bounds__(LONG_THREADS)
long_first(cfd_chain c, cfd_rollout_params p, int b, const double* x, const double* u, double* base,
           int* ints, unsigned long long* flag) {
  int n = p.n, nu = p.nu, t = threadIdx.x, T = blockDim.x;
  cfd_deriv_scratch s;
  cfd_deriv_scratch_at(&s, n, nu, base, NULL);
  const double* xb = x + (size_t)b * 2 * n;
  const double* v = xb + n;
  const double* ub = u ? u + (size_t)b * nu : NULL;
  for (int i = t; i < n; i += T) {
    const double* P = p.rows ? p.rows + CFD_RP_COUNT * i : NULL;  // a limit's row (rollout_step.h)
    if (P && P[CFD_RP_LIMITED] && (xb[i] - P[CFD_RP_LO] < P[CFD_RP_MARGIN] || P[CFD_RP_HI] - xb[i] < P[CFD_RP_MARGIN]))
      cfd_gpu_deriv_fail(flag, 2, b);
    cfd_deriv_applied_dof(&p, i, xb, v, ub, 0, &s);
  }
  __syncthreads();
  for (int i = t; i < n; i += T) cfd_idd_local_pose(&c, i, s.q, s.w);
  if (t == 32) {  // (beside the poses' warp) subtree ranges, and whether the order is depth first
    int* last = ints;
    int ok = 1;
    for (int i = 0; i < n; i++) last[i] = i;
    for (int i = n - 1; i >= 0; i--) {
      int par = c.parent[i];
      if (par >= 0 && last[i] > last[par]) last[par] = last[i];
    }
    for (int i = 1; i < n && ok; i++) {  // depth first: i's parent is i - 1 or one of its ancestors
      int par = c.parent[i], k = i - 1;
      if (par < 0) continue;
      while (k > par) k = c.parent[k];
      ok = k == par;
    }
    ints[n] = ok;
  }
  __syncthreads();
  if (t < 32)
    for (int i = 0; i < n; i++) {  // the poses down the tree, a link at a time
      if (t < 12) cfd_idd_compose_entry(&c, i, t, s.w);
      __syncwarp();
    }
  __syncthreads();
  for (int i = t; i < n; i += T) cfd_idd_link_world(&c, i, v, s.w);
  __syncthreads();
  if (t < 6) cfd_idd_tree_sum(&c, s.w, CFD_IDD_V, t, t + 1, NULL);
  __syncthreads();
  for (int i = t; i < n; i += T) cfd_idd_link_momentum(i, s.w);
  __syncthreads();
  block_accel(&c, v, NULL, s.w);
  for (int i = t; i < n; i += T) {
    const double* L = s.w + CFD_IDD_LINK * i;
    s.bias[i] = cfd_dot6(L + CFD_IDD_S, L + CFD_IDD_F);
    s.qacc[i] = s.tau[i] - s.bias[i];
    cfd_idd_comp_link(i, s.w, s.cw);
  }
  __syncthreads();
  for (int k = t; k < CFD_IDD_PV; k += T) cfd_idd_subtree_sum(&c, s.cw, CFD_IDD_COMP, 0, k, k + 1);
  __syncthreads();
  for (int i = t; i < n; i += T) cfd_idd_comp_pq(i, s.w, s.cw);
}

// M + diag, a thread an entry (symmetric: row- and column-major alike)
__global__ void long_mass(cfd_chain c, int nu, double* base, const int* last) {
  int n = c.n;
  long e = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= (long)n * n) return;
  cfd_deriv_scratch s;
  cfd_deriv_scratch_at(&s, n, nu, base, NULL);
  int i = (int)(e / n), j = (int)(e % n);
  double mij = anc_or_self(last, i, j) ? cfd_idd_mass_entry(s.w, s.cw, i, j)
             : anc_or_self(last, j, i) ? cfd_idd_mass_entry(s.w, s.cw, j, i) : 0;
  s.M[e] = mij + (i == j ? c.armature[i] + s.diag[i] : 0);
}

// The accelerations at qacc and the columns' seeds (in the links' inertia slots)
__global__ void __launch_bounds__(LONG_THREADS)
long_second(cfd_chain c, int nu, const double* x, int b, double* base) {
  int n = c.n;
  cfd_deriv_scratch s;
  cfd_deriv_scratch_at(&s, n, nu, base, NULL);
  const double* v = x + (size_t)b * 2 * n + n;
  block_accel(&c, v, s.qacc, s.w);
  for (int t = threadIdx.x; t < 2 * n; t += blockDim.x) {
    int j = t < n ? t : t - n;
    cfd_idd_seed_part(&c, s.w, s.cw, j, -1, t >= n, s.w + CFD_IDD_LINK * j + CFD_IDD_I);
  }
}

// The right-hand sides, a thread an entry, column-major (n x cols): d tau / dx - d ID / dx
__global__ void long_rhs(cfd_chain c, cfd_rollout_params p, int cols, double* base, const int* last) {
  int n = c.n, nu = p.nu;
  long e = (long)blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= (long)n * cols) return;
  cfd_deriv_scratch s;
  cfd_deriv_scratch_at(&s, n, nu, base, NULL);
  int col = (int)(e / n), i = (int)(e % n);
  double r;
  if (col < 2 * n) {
    int j = col < n ? col : col - n, below = anc_or_self(last, j, i), above = !below && anc_or_self(last, i, j);
    double eq = 0, ev = 0;
    if (below || above) cfd_idd_entry(s.w, s.cw, s.w + CFD_IDD_LINK * j + CFD_IDD_I, -1, i, j, below, &eq, &ev);
    r = col < n ? eq + (i == j ? s.dq[j] : 0) : ev + (i == j ? s.dv[j] : 0);
  } else {
    int a = col - 2 * n;
    r = s.du[(long)nu * i + a] - (p.act_dof[a] == i ? s.ddiag[a] * s.qacc[i] : 0);
  }
  s.X[e] = r;
}

// The solution (column-major) into instance b's row-major blocks
__global__ void long_out(int n, int nu, const double* base, int b, double* Dq, double* Dv, double* Du) {
  long e = (long)blockIdx.x * blockDim.x + threadIdx.x;
  cfd_deriv_scratch s;
  cfd_deriv_scratch_at(&s, n, nu, (double*)base, NULL);
  if (e < (long)n * n) {
    int i = (int)(e / n), j = (int)(e % n);
    if (Dq) Dq[(size_t)b * n * n + e] = s.X[(long)j * n + i];
    if (Dv) Dv[(size_t)b * n * n + e] = s.X[(long)(n + j) * n + i];
  }
  if (Du && e < (long)n * nu) {
    int i = (int)(e / nu), a = (int)(e % nu);
    Du[(size_t)b * n * nu + e] = s.X[(long)(2 * n + a) * n + i];
  }
}

// A factorisation's or solve's failure, and a tree not depth first, into the flags
__global__ void long_check(const int* info, const int* ints, int n, int b, unsigned long long* flag) {
  if (info[0] || info[1]) cfd_gpu_deriv_fail(flag, 1, b);
  if (!ints[n]) cfd_gpu_deriv_fail(flag, 3, b);
}

static int fail(char* err, int size, const char* what, const char* why) {
  snprintf(err, size, "GPU derivatives (long chains): %s: %s", what, why);
  return 1;
}

int cfd_gpu_deriv_long_run(cfd_gpu_deriv_long** slot, const cfd_chain* c, const cfd_rollout_params* p,
                           cudaStream_t stream, int B, const double* x, const double* u, double* Dq,
                           double* Dv, double* Du, unsigned long long* flag, char* err, int err_size) {
  int n = p->n, nu = p->nu, cols = 2 * n + nu;
  cfd_gpu_deriv_long* L = *slot;
  cudaError_t e = cudaSuccess;
  if (!L) {
    L = (cfd_gpu_deriv_long*)calloc(1, sizeof *L);
    if (!L) return fail(err, err_size, "setting up", "out of host memory");
    L->n = n, L->nu = nu;
    if (cusolverDnCreate(&L->solver) != CUSOLVER_STATUS_SUCCESS) {
      free(L);
      return fail(err, err_size, "setting up", "cusolverDnCreate failed");
    }
    e = cudaMalloc(&L->scratch, sizeof(double) * cfd_deriv_doubles(n, nu));
    if (!e) e = cudaMalloc(&L->ints, sizeof(int) * (n + 1));
    if (!e) e = cudaMalloc(&L->info, 2 * sizeof(int));
    if (!e) e = cudaMemset(L->info, 0, 2 * sizeof(int));
    cfd_deriv_scratch s;
    cfd_deriv_scratch_at(&s, n, nu, L->scratch, NULL);
    if (!e && cusolverDnDpotrf_bufferSize(L->solver, CUBLAS_FILL_MODE_LOWER, n, s.M, n, &L->lwork))
      e = cudaErrorUnknown;
    if (!e) e = cudaMalloc(&L->work, sizeof(double) * (L->lwork > 0 ? L->lwork : 1));
    if (e) {
      cfd_gpu_deriv_long_free(L);
      return fail(err, err_size, "out of device memory", cudaGetErrorString(e));
    }
    *slot = L;
  }
  if (cusolverDnSetStream(L->solver, stream)) return fail(err, err_size, "cuSOLVER", "setting the stream");
  cfd_deriv_scratch s;
  cfd_deriv_scratch_at(&s, n, nu, L->scratch, NULL);
  long nn = (long)n * n, nc = (long)n * cols;
  for (int b = 0; b < B; b++) {
    long_first<<<1, LONG_THREADS, 0, stream>>>(*c, *p, b, x, u, L->scratch, L->ints, flag);
    long_mass<<<(unsigned)((nn + 255) / 256), 256, 0, stream>>>(*c, nu, L->scratch, L->ints);
    if (cusolverDnDpotrf(L->solver, CUBLAS_FILL_MODE_LOWER, n, s.M, n, L->work, L->lwork, L->info) ||
        cusolverDnDpotrs(L->solver, CUBLAS_FILL_MODE_LOWER, n, 1, s.M, n, s.qacc, n, L->info + 1))
      return fail(err, err_size, "cuSOLVER", "potrf or potrs failed to launch");
    long_second<<<1, LONG_THREADS, 0, stream>>>(*c, nu, x, b, L->scratch);
    long_rhs<<<(unsigned)((nc + 255) / 256), 256, 0, stream>>>(*c, *p, cols, L->scratch, L->ints);
    int first = Dq ? 0 : Dv ? n : 2 * n, last = Du ? cols : Dv ? 2 * n : n;
    if (first < last &&
        cusolverDnDpotrs(L->solver, CUBLAS_FILL_MODE_LOWER, n, last - first, s.M, n, s.X + (long)first * n,
                         n, L->info + 1))
      return fail(err, err_size, "cuSOLVER", "potrs failed to launch");
    long_check<<<1, 1, 0, stream>>>(L->info, L->ints, n, b, flag);
    long m = nn > (long)n * nu ? nn : (long)n * nu;
    long_out<<<(unsigned)((m + 255) / 256), 256, 0, stream>>>(n, nu, L->scratch, b, Dq, Dv, Du);
    e = cudaGetLastError();
    if (e) return fail(err, err_size, "a kernel", cudaGetErrorString(e));
  }
  return 0;
}
