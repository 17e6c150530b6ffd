// The forward dynamics' derivatives of a batch of states on the GPU (paper 003's layout): a warp
// per instance, its working set (deriv_instance.h's scratch) in shared memory, the instance's
// links, matrix entries and right-hand sides spread over the lanes. The stages are id_deriv.h's
// per-link and per-entry functions, the CPU's; the sums along the tree run a component per lane,
// the Cholesky factor a row per lane, the solves a column per lane, each entry's operations in
// the CPU's order. Up to 32 dofs (an ancestor set is a 32-bit mask) and 32 controls; past them
// cuda/deriv_long.cu takes an instance at a time. (The first design, a thread per instance, is
// bench/variants/deriv_variants.cu.)
#include <stdio.h>

#include "deriv_instance.h"
#include "gpu_internal.h"

#define FULL 0xffffffffu

// An instance's shared memory in doubles: the scratch, x, u and the n ancestor masks. (Column j's
// seed goes in link j's inertia, free once the accelerations at qacc are done.)
static __host__ __device__ long warp_doubles(int n, int nu) {
  return cfd_deriv_doubles(n, nu) + 2 * n + nu + (n + 1) / 2;
}

// The accelerations and wrenches at qdd (NULL: zero) across the warp: cfd_idd_accel's stages
static __device__ void warp_accel(const cfd_chain* c, const double* qd, const double* qdd, double* w,
                                  int lane) {
  int n = c->n;
  for (int i = lane; i < n; i += 32) cfd_idd_link_acc(c, i, qd, qdd, w);
  __syncwarp();
  if (lane < 6) {
    double a0[6];
    cfd_idd_a0(c, a0);
    cfd_idd_tree_sum(c, w, CFD_IDD_A, lane, lane + 1, a0);
  }
  __syncwarp();
  for (int i = lane; i < n; i += 32) cfd_idd_link_wrench(i, w);
  __syncwarp();
  if (lane < 6) cfd_idd_subtree_sum(c, w, CFD_IDD_LINK, CFD_IDD_F, lane, lane + 1);
  __syncwarp();
}

// A lane's walk over the entries (i, j) of an n x m matrix, row-major, from entry `lane` in steps of
// 32, without a division per step
struct entry_walk {
  int i, j, di, dj, m;
  __device__ entry_walk(int lane, int m_) : i(lane / m_), j(lane % m_), di(32 / m_), dj(32 % m_), m(m_) {}
  __device__ void next() {
    i += di, j += dj;
    if (j >= m) j -= m, i++;
  }
};

// A failing instance (its system singular, or at a joint limit) into the flag (cfd_gpu_deriv_fail)
__global__ void __launch_bounds__(96)
deriv_warp_kernel(cfd_chain c, cfd_rollout_params p, int B, int per_block,
                  const double* __restrict__ x, const double* __restrict__ u, double* Dq, double* Dv,
                  double* Du, unsigned long long* flag) {
  extern __shared__ double smem[];
  int lane = threadIdx.x & 31, b = blockIdx.x * per_block + (threadIdx.x >> 5);
  if (b >= B) return;  // (the whole warp)
  int n = p.n, nu = p.nu, cols = 2 * n + nu;
  double* base = smem + (threadIdx.x >> 5) * warp_doubles(n, nu);
  cfd_deriv_scratch s;
  cfd_deriv_scratch_at(&s, n, nu, base, NULL);
  double* xs = base + cfd_deriv_doubles(n, nu);
  double* us = xs + 2 * n;
  unsigned* anc = (unsigned*)(us + nu);  // bit k of anc[i]: k is i or an ancestor of i
  const double* v = xs + n;
  for (int k = lane; k < 2 * n; k += 32) xs[k] = x[(size_t)b * 2 * n + k];
  for (int k = lane; u && k < nu; k += 32) us[k] = u[(size_t)b * nu + k];
  int limit = 0;
  for (int i = lane; i < n; i += 32) {
    unsigned m = 0;
    for (int k = i; k >= 0; k = c.parent[k]) m |= 1u << k;
    anc[i] = m;
    const double* P = p.rows ? p.rows + CFD_RP_COUNT * i : NULL;  // a limit's row (rollout_step.h)
    double xi = x[(size_t)b * 2 * n + i];
    limit |= P && P[CFD_RP_LIMITED] && (xi - P[CFD_RP_LO] < P[CFD_RP_MARGIN] || P[CFD_RP_HI] - xi < P[CFD_RP_MARGIN]);
  }
  if (__any_sync(FULL, limit)) {
    if (lane == 0) cfd_gpu_deriv_fail(flag, 2, b);
    return;
  }
  __syncwarp();
  for (int i = lane; i < n; i += 32) cfd_deriv_applied_dof(&p, i, xs, v, u ? us : NULL, 0, &s);
  __syncwarp();

  // kinematics, bias forces (ID at qdd = 0), composites, M + diag: cfd_deriv_solve's first half
  for (int i = lane; i < n; i += 32) cfd_idd_local_pose(&c, i, s.q, s.w);
  __syncwarp();
  for (int i = 0; i < n; i++) {  // the poses down the tree, a link at a time, an entry per lane
    if (lane < 12) cfd_idd_compose_entry(&c, i, lane, s.w);
    __syncwarp();
  }
  for (int i = lane; i < n; i += 32) cfd_idd_link_world(&c, i, v, s.w);
  __syncwarp();
  if (lane < 6) cfd_idd_tree_sum(&c, s.w, CFD_IDD_V, lane, lane + 1, NULL);
  __syncwarp();
  for (int i = lane; i < n; i += 32) cfd_idd_link_momentum(i, s.w);
  __syncwarp();
  warp_accel(&c, v, NULL, s.w, lane);
  for (int i = lane; i < n; i += 32) {
    const double* L = s.w + CFD_IDD_LINK * i;
    s.bias[i] = cfd_dot6(L + CFD_IDD_S, L + CFD_IDD_F);
    cfd_idd_comp_link(i, s.w, s.cw);
  }
  __syncwarp();
  for (int k = lane; k < CFD_IDD_PV; k += 32) cfd_idd_subtree_sum(&c, s.cw, CFD_IDD_COMP, 0, k, k + 1);
  __syncwarp();
  for (int i = lane; i < n; i += 32) cfd_idd_comp_pq(i, s.w, s.cw);
  __syncwarp();
  for (entry_walk e(lane, n); e.i < n; e.next()) {
    int i = e.i, j = e.j;
    double mij = (anc[j] >> i) & 1 ? cfd_idd_mass_entry(s.w, s.cw, i, j)
               : (anc[i] >> j) & 1 ? cfd_idd_mass_entry(s.w, s.cw, j, i) : 0;
    s.M[n * i + j] = mij + (i == j ? c.armature[i] + s.diag[i] : 0);
  }
  __syncwarp();

  // Cholesky (cfd_chol_factor's operations): per column the pivot on lane 0, then a row per lane
  for (int j = 0; j < n; j++) {
    double d = 0;
    if (lane == 0) {
      d = s.M[j * n + j];
      for (int k = 0; k < j; k++) d -= s.M[j * n + k] * s.M[j * n + k];
      if (d > 0) d = sqrt(d), s.M[j * n + j] = d;
    }
    d = __shfl_sync(FULL, d, 0);
    if (!(d > 0)) {
      if (lane == 0) cfd_gpu_deriv_fail(flag, 1, b);
      return;
    }
    double inv = 1 / d;
    for (int i = j + 1 + lane; i < n; i += 32) {
      double t = s.M[i * n + j];
      for (int k = 0; k < j; k++) t -= s.M[i * n + k] * s.M[j * n + k];
      s.M[i * n + j] = t * inv;
    }
    if (lane == 0) s.inv[j] = inv;
    __syncwarp();
  }
  if (lane == 0) {
    for (int i = 0; i < n; i++) s.qacc[i] = s.tau[i] - s.bias[i];
    cfd_deriv_chol_solve_col(s.M, s.inv, n, s.qacc, 0, 1);
  }
  __syncwarp();

  // ID's derivatives at (q, qd, qacc): the seeds' halves a lane each, then the entries, with the
  // applied forces' derivatives (cfd_deriv_solve's right-hand sides)
  warp_accel(&c, v, s.qacc, s.w, lane);
  for (int t = lane; t < 2 * n; t += 32) {
    int j = t < n ? t : t - n;
    cfd_idd_seed_part(&c, s.w, s.cw, j, -1, t >= n, s.w + CFD_IDD_LINK * j + CFD_IDD_I);
  }
  __syncwarp();
  for (entry_walk e(lane, n); e.i < n; e.next()) {
    int i = e.i, j = e.j, below = (anc[i] >> j) & 1, above = (anc[j] >> i) & 1;
    double eq = 0, ev = 0;
    if (below || above) cfd_idd_entry(s.w, s.cw, s.w + CFD_IDD_LINK * j + CFD_IDD_I, -1, i, j, below, &eq, &ev);
    s.X[cols * i + j] = eq + (i == j ? s.dq[j] : 0);
    s.X[cols * i + n + j] = ev + (i == j ? s.dv[j] : 0);
  }
  if (nu)
    for (entry_walk e(lane, nu); e.i < n; e.next()) {
      int i = e.i, a = e.j;
      s.X[cols * i + 2 * n + a] = s.du[nu * i + a] - (p.act_dof[a] == i ? s.ddiag[a] * s.qacc[i] : 0);
    }
  __syncwarp();
  int first = Dq ? 0 : Dv ? n : 2 * n, last = Du ? cols : Dv ? 2 * n : n;
  for (int col = first + lane; col < last; col += 32) cfd_deriv_chol_solve_col(s.M, s.inv, n, s.X, col, cols);
  __syncwarp();
  for (entry_walk e(lane, n); e.i < n; e.next()) {
    size_t o = (size_t)b * n * n + (size_t)n * e.i + e.j;
    if (Dq) Dq[o] = s.X[cols * e.i + e.j];
    if (Dv) Dv[o] = s.X[cols * e.i + n + e.j];
  }
  if (Du && nu)
    for (entry_walk e(lane, nu); e.i < n; e.next())
      Du[(size_t)b * n * nu + (size_t)nu * e.i + e.j] = s.X[cols * e.i + 2 * n + e.j];
}

cudaError_t cfd_gpu_deriv_flag_reset(unsigned long long* flag, cudaStream_t stream) {
  cudaError_t e = cudaMemsetAsync(flag, 0, sizeof *flag, stream);
  return e ? e : cudaStreamSynchronize(stream);
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
  unsigned long long* flag;  // cfd_gpu_deriv_fail's
  cfd_gpu_rollout_model(r, &c, &p, &device, &stream, &flag);
  int n = p.n, nu = p.nu;
  int warp = n <= 32 && nu <= 32;  // else an instance at a time (cuda/deriv_long.cu)
  cudaError_t e = cudaSetDevice(device);
  if (e) return fail(err, err_size, "selecting the device", e);
  size_t nx = (size_t)B * 2 * n, nuu = (size_t)B * nu, nqq = (size_t)B * n * n, nqu = (size_t)B * n * nu;
  const double *dx = x, *du_in = u;
  double *dq = Dq, *dv = Dv, *dU = Du;
  if (where == CFD_HOST) {  // staging: the context's block, one copy up; the outputs come back after
    size_t total = nx + (u ? nuu : 0) + (Dq ? nqq : 0) + (Dv ? nqq : 0) + (Du ? nqu : 0);
    double* at = cfd_gpu_rollout_deriv_stage(r, total ? total : 1);
    if (!at) return fail(err, err_size, "out of device memory for the batch", cudaErrorMemoryAllocation);
    dx = at, at += nx;
    if (u) du_in = at, at += nuu;
    if (Dq) dq = at, at += nqq;
    if (Dv) dv = at, at += nqq;
    if (Du) dU = at, at += nqu;
    e = cudaMemcpyAsync((void*)dx, x, sizeof(double) * nx, cudaMemcpyHostToDevice, stream);
    if (!e && u) e = cudaMemcpyAsync((void*)du_in, u, sizeof(double) * nuu, cudaMemcpyHostToDevice, stream);
    if (e) return fail(err, err_size, "copying the states up", e);
  }
  if (!warp) {
    if (cfd_gpu_deriv_long_run(cfd_gpu_rollout_deriv_long(r), &c, &p, stream, B, dx, du_in, dq, dv, dU,
                               flag, err, err_size)) {
      cfd_gpu_deriv_flag_reset(flag, stream);  // (what ran before the failure may have set it)
      return 1;
    }
  } else {
    // warps (instances) per block: up to 3 within the default 48 KB, or one that opts in to more.
    // (Holding the registers to six such blocks an SM spilled and gained nothing measurable:
    // docs/DESIGN.md 4.18.)
    size_t bytes = sizeof(double) * warp_doubles(n, nu);
    int per_block = bytes > 48 * 1024 ? 1 : (int)(48 * 1024 / bytes) < 3 ? (int)(48 * 1024 / bytes) : 3;
    if (bytes > 48 * 1024)
      e = cudaFuncSetAttribute(deriv_warp_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    int blocks = (B + per_block - 1) / per_block;
    if (!e) {
      deriv_warp_kernel<<<blocks, 32 * per_block, bytes * per_block, stream>>>(c, p, B, per_block, dx, du_in, dq, dv, dU, flag);
      e = cudaGetLastError();
    }
  }
  unsigned long long* got = cfd_gpu_rollout_deriv_flag_host(r);
  *got = 0;
  if (!e) e = cudaMemcpyAsync(got, flag, sizeof *got, cudaMemcpyDeviceToHost, stream);
  if (!e && where == CFD_HOST) {
    if (Dq) e = cudaMemcpyAsync(Dq, dq, sizeof(double) * nqq, cudaMemcpyDeviceToHost, stream);
    if (!e && Dv) e = cudaMemcpyAsync(Dv, dv, sizeof(double) * nqq, cudaMemcpyDeviceToHost, stream);
    if (!e && Du) e = cudaMemcpyAsync(Du, dU, sizeof(double) * nqu, cudaMemcpyDeviceToHost, stream);
  }
  if (!e) e = cudaStreamSynchronize(stream);
  if (e) {
    fail(err, err_size, "the batch", e);
    cfd_gpu_deriv_flag_reset(flag, stream);  // (for the next batch, where the context survives)
    return 1;
  }
  if (*got) {
    int status = (int)(*got >> 32), which = 0x7fffffff - (int)(*got & 0xffffffffu);
    e = cfd_gpu_deriv_flag_reset(flag, stream);
    if (e) return fail(err, err_size, "resetting the status", e);
    snprintf(err, err_size, "GPU derivatives: instance %d: %s", which,
             status == 3 ? "the links are not numbered depth first (the long chains' kernels need "
                           "subtrees as index ranges)"
             : status == 2 ? "a joint at its limit (an active constraint row: the derivatives of the "
                             "constrained step are not done yet)"
                           : "the joint-space system is singular");
    return 1;
  }
  return 0;
}
