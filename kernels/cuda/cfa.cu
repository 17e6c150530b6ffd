// CFA on the GPU: the steps of cpu/cfa_cpu.c, through the same per-link functions (cfa_blocks.h),
// in one kernel launch for the whole solve and its iterative refinement. Each instance is one
// thread-block cluster (up to 16 blocks on 16 SMs; compute capability 9.0+); its threads share the
// chain's links:
//   bias by the scan-based ID (id_scan.cuh: runs of links per thread)
//   -> blocks of P^T K P -> system rows                       (links in turn per thread)
//   -> ceil(log2 n) levels of odd-even elimination            (a thread per row of an equation)
//   -> block-diagonal solve -> qdd from the f-rows             (links in turn per thread)
//   -> refinement steps: ID with qdd, residual, the stored elimination on the new right-hand side
// with a cluster barrier between steps (a hardware barrier: far cheaper than a kernel launch per
// step, which is what a links x instances grid would need). Work stays in global memory; for
// chains up to a few thousand links it lives in L2. J_i^-1, P_i and sigma_i are constant in link
// frames and uploaded once (gpu.cu).
#include <cooperative_groups.h>

#include "cfa_blocks.h"
#include "gpu_internal.h"
#include "id_scan.cuh"

namespace cg = cooperative_groups;

// Block sizes up to 384 (n >= ~1000: a row per thread on 16 SMs), compiled twice: bounded by
// 256 threads, a thread may hold 255 registers, enough for two 6x6 factors at once with few spills
// (ptxas: 72 bytes, against about 1 KB with 168 registers); bounded by 384, 168.
#define CFA_MAX_THREADS 384
#define CFA_SMALL_THREADS 256
#define CFA_SOLO_ID_LINKS 1  // links per thread up to which one block runs the ID alone

// the GPU's nanosecond clock, read by one thread at the end of each phase when profiling (marks:
// the context's 64 words, NULL when not profiling)
__device__ __forceinline__ void cfa_mark(unsigned long long* marks, int gt, int* k) {
  if (!marks) return;
  if (gt == 0 && blockIdx.x == 0 && *k < 64) marks[*k] = cfd_gpu_clock_ns();
  (*k)++;
}

// per-instance scratch after the ID's: D0 U0 D U D2 U2 (36n each), R R2 (6n each), frow 18n,
// tau_d n, dj n, and the elimination's multipliers (72n per level)
struct cfa_views {
  double *D0, *U0, *D, *U, *D2, *U2, *R, *R2, *frow, *taud, *dj, *EK;
};

__device__ __forceinline__ cfa_views cfa_views_of(double* w, int n) {
  cfa_views v;
  v.D0 = w + CFD_ID_WORK(n);
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

// |x| as an integer that orders like the double (x >= 0), for atomicMax
__device__ __forceinline__ unsigned long long abs_bits(double x) {
  return (unsigned long long)__double_as_longlong(fabs(x));
}

// max over the warp, then one atomic per warp into the cluster's accumulator
__device__ __forceinline__ void cluster_max(unsigned long long* acc, double x) {
  unsigned long long bits = abs_bits(x);
  for (int o = 16; o > 0; o >>= 1) {
    unsigned long long other = __shfl_xor_sync(0xffffffffu, bits, o);
    bits = other > bits ? other : bits;
  }
  if ((threadIdx.x & 31) == 0) atomicMax(acc, bits);
}

// The per-link steps deal links round the cluster's blocks (link i to block i mod CL): all SMs
// share them, where the ID's contiguous runs would leave most of them idle for short chains.
__device__ __forceinline__ int cfa_link_thread(const cg::cluster_group& cl) {
  return (int)(threadIdx.x * cl.num_blocks() + cl.block_rank());
}

// Steps 3-5 of cpu/cfa_cpu.c for the right-hand side in v.taud, by the GT threads of the cluster.
// refine: a further right-hand side with the stored elimination (multipliers in EK, final factors
// in D or D2), qdd added to qacc. acc (the instance's accumulators in global memory, or NULL):
// the max of the correction goes to acc[slot], of qacc to acc[2 + slot].
__device__ void cfa_solve(int n, const double* __restrict__ sigma, const cfa_views& v, double* qacc,
                          int refine, unsigned long long* acc, int slot, int gt, int GT, int* error,
                          unsigned long long* profile, int* mk) {
  cg::cluster_group cl = cg::this_cluster();
  int lt = cfa_link_thread(cl);
  for (int i = lt; i < n; i += GT) {
    if (refine) cfd_cfa_rhs_row(i, n, v.D0, v.U0, v.dj, sigma, v.taud, v.R);
    else cfd_cfa_system_row(i, n, v.D0, v.U0, v.dj, sigma, v.taud, v.D, v.U, v.R, v.frow);
  }
  cluster_sync(cl);
  cfa_mark(profile, gt, mk);  // right-hand side
  int flip = 0, level = 0;
  for (int s = 1; s < n; s *= 2, flip ^= 1, level++) {
    double *D = v.D, *U = v.U, *R = v.R, *Dn = v.D2, *Un = v.U2, *Rn = v.R2;
    if (flip) {
      D = v.D2; U = v.U2; R = v.R2; Dn = v.D; Un = v.U; Rn = v.R;
    }
    if (refine) {
      for (int e = gt; e < 6 * n; e += GT) {  // a thread per row
        int i = e / 6;
        double* E = v.EK + (size_t)72 * n * level + 72 * i;
        cfd_oee_rhs_row(i, s, n, e % 6, E, E + 36, R, Rn);
      }
    } else {
      // a thread per row; it factors both neighbours itself, in straight-line code so that the
      // two dependency chains interleave. A missing neighbour is stood in for by a block whose
      // coupling is zero (U_i when there is no i + s, U_{n-1} when there is no i - s): its terms
      // are exact zeros.
      for (int e = gt; e < 6 * n; e += GT) {
        int i = e / 6, row = e % 6;
        double* E = v.EK + (size_t)72 * n * level + 72 * i;
        int jn = i + s < n ? i + s : i, jp = i >= s ? i - s : n - 1;
        double Ln[36], Lp[36];
        int bad = cfd_oee_factor(D, jn, Ln) | cfd_oee_factor(D, jp, Lp);
        cfd_oee_rowacc a;
        cfd_oee_row_begin(i, row, D, R, &a);
        cfd_oee_row_next(row, Ln, U + 36 * i, R + 6 * jn, &a);
        cfd_oee_row_prev(row, Lp, U + 36 * jp, R + 6 * jp, &a);
        if (bad) cfd_gpu_raise(error, CFD_ERR_SINGULAR);
        cfd_oee_row_end(i, s, n, row, U, &a, Dn, Un, Rn, E, E + 36);
      }
    }
    cluster_sync(cl);
  }
  cfa_mark(profile, gt, mk);  // the levels
  double* D = flip ? v.D2 : v.D;  // block diagonal now
  double* R = flip ? v.R2 : v.R;
  for (int i = lt; i < n; i += GT) {
    if (!refine && cfd_chol6_factor_rdiag(D + 36 * i)) cfd_gpu_raise(error, CFD_ERR_SINGULAR);
    else cfd_chol6_solve_rdiag(D + 36 * i, R + 6 * i);
  }
  cluster_sync(cl);
  cfa_mark(profile, gt, mk);  // block-diagonal solve
  // every thread of a warp takes part in the reductions (x = 0 past the last link)
  for (int base = 0; base < n; base += GT) {
    int i = base + lt;
    double x = 0, total = 0;
    if (i < n) {
      x = cfd_cfa_qdd(i, n, v.frow, R, sigma[i]);
      total = refine ? qacc[i] + x : x;
      qacc[i] = total;
    }
    if (acc) {
      cluster_max(acc + slot, x);
      cluster_max(acc + 2 + slot, total);
    }
  }
}

template <int MAX_THREADS>
__global__ void __launch_bounds__(MAX_THREADS)
cfa_kernel(cfd_chain c, const double* __restrict__ jinv, const double* __restrict__ basis,
           const double* __restrict__ sigma, const double* __restrict__ q,
           const double* __restrict__ qd, const double* __restrict__ tau,
           const double* __restrict__ extra, double* qacc, double* idout, double* work,
           long stride, int steps, unsigned long long* norms, int* error, unsigned long long* profile, int phase) {
  extern __shared__ double sh[];
  cg::cluster_group cl = cg::this_cluster();
  int CL = (int)cl.num_blocks(), n = c.n;
  int gt = (int)cl.block_rank() * blockDim.x + threadIdx.x, GT = CL * blockDim.x;
  long b = blockIdx.x / CL;
  const double* qb = q + b * n;
  const double* qdb = qd + b * n;
  const double* tb = tau + b * n;  // unused in phase CFA_BEGIN
  const double* eb = extra ? extra + b * n : NULL;
  double* out = qacc + b * n;
  double* id = idout + b * n;
  double* w = work + b * stride;
  cfa_views v = cfa_views_of(w, n);
  unsigned long long* acc = norms + 4 * b;  // the refinement's norms, two steps' worth

  int mk = 0, lt = cfa_link_thread(cl);
  // The ID on one block when that leaves it a link per thread: a scan across the cluster costs a
  // cluster barrier, the dearest step of this kernel (about a microsecond; ncu: 40% of the time
  // at n = 200 went to them). With more links per thread the serial sweeps cost more than the
  // barriers save (chainfd-bench-gpu --only cfa)
  bool solo = n <= CFA_SOLO_ID_LINKS * (int)blockDim.x;
  bool id_here = !solo || cl.block_rank() == 0;
  int id_gt = solo ? (int)threadIdx.x : gt, id_GT = solo ? (int)blockDim.x : GT;
  cfa_mark(profile, gt, &mk);  // start
  if (phase == CFA_FINISH) {
    // a split call's second launch: the elimination is stored from CFA_BEGIN; tau_d now, then
    // the same solve through it, as refinement does
    for (int i = lt; i < n; i += GT) {
      v.taud[i] = tb[i] - id[i];
      out[i] = 0;
    }
    cluster_sync(cl);
    cfa_solve(n, sigma, v, out, 1, NULL, -1, gt, GT, error, profile, &mk);
    cfa_mark(profile, gt, &mk);  // qdd
  } else {
    // 1. tau_d = tau - bias
    if (id_here) id_chain(c, qb, qdb, NULL, id, w, sh, id_gt, id_GT, false, solo);
    cluster_sync(cl);
    cfa_mark(profile, gt, &mk);  // ID
    // 2. per-link blocks of P^T K P from the ID's local poses
    const double* lp = w;
    for (int e = lt; e < 2 * n; e += GT) {  // two threads per link: its diagonal block, its upper
      int i = e < n ? e : e - n;
      double G[36];
      if (e < n) {
        if (i > 0) cfd_ad_inv_mat(lp + 12 * i, lp + 12 * i + 9, G);
        cfd_cfa_diag_block(jinv + 36 * i, i ? jinv + 36 * (i - 1) : NULL, i ? G : NULL,
                           basis + 36 * i, v.D0 + 36 * i);
        v.taud[i] = phase == CFA_BEGIN ? 0 : tb[i] - id[i];
        v.dj[i] = c.armature[i] + (eb ? eb[i] : 0);
      } else if (i + 1 < n) {
        cfd_ad_inv_mat(lp + 12 * (i + 1), lp + 12 * (i + 1) + 9, G);
        cfd_cfa_upper_block(jinv + 36 * i, G, basis + 36 * i, basis + 36 * (i + 1), v.U0 + 36 * i);
      }
    }
    cluster_sync(cl);
    cfa_mark(profile, gt, &mk);  // blocks
    // a split call's first launch eliminates on a zero right-hand side: its factors are what counts
    cfa_solve(n, sigma, v, out, 0, NULL, -1, gt, GT, error, profile, &mk);
    cfa_mark(profile, gt, &mk);  // qdd
    if (phase == CFA_BEGIN) return;
  }
  // 6. refinement: r = tau - ID(q, qd, qdd) - D qdd through the stored elimination, until the
  // error left is at rounding level (cfd_cfa_done) or the steps run out
  double prev = INFINITY;
  if (steps > 0) cluster_sync(cl);  // qacc complete before the ID reads it (then: each step's end)
  for (int step = 0, done = 0; step < steps && !done; step++) {
    int slot = step % 2;  // this step's norms; the other pair holds the previous step's
    if (id_here) id_chain(c, qb, qdb, out, id, w, sh, id_gt, id_GT, true, solo);  // q, qd as in 1.
    cluster_sync(cl);
    cfa_mark(profile, gt, &mk);  // ID
    if (gt == 0) acc[slot] = acc[2 + slot] = 0;  // last read two steps ago
    for (int i = lt; i < n; i += GT) v.taud[i] = tb[i] - id[i] - v.dj[i] * out[i];
    cluster_sync(cl);
    cfa_solve(n, sigma, v, out, 1, acc, slot, gt, GT, error, profile, &mk);
    cluster_sync(cl);
    cfa_mark(profile, gt, &mk);  // qdd
    double corr = __longlong_as_double((long long)__ldcg(acc + slot));  // L2: where the atomics are
    double size = __longlong_as_double((long long)__ldcg(acc + 2 + slot));
    done = cfd_cfa_done(corr, prev, size);  // every thread reads the same: all stop together
    // refuse a result whose estimated error left is not small (cpu/cfa_cpu.c, step 6)
    if ((done || step == steps - 1) && gt == 0 && !cfd_cfa_converged(corr, prev, size))
      cfd_gpu_raise(error, CFD_ERR_INACCURATE);
    prev = corr;
  }
}

// Threads per block and blocks per cluster: a thread per row of each equation (6n), spread over
// up to 16 SMs per chain: for a few chains the most SMs (16: per-link steps and barriers shared
// by more of them), for many the fewest blocks that give a thread a row, so that more clusters run
// at once (chainfd-bench-gpu --only cfa). cfd_gpu_tuning's cfa_threads and cfa_cluster override.
static void cfa_layout(const cfd_gpu* g, int n, int B, int* T, int* CL) {
  int rows = 6 * n;
  int cl = B <= 8 ? CFD_MAX_CLUSTER : (rows + 127) / 128;
  if (cl > CFD_MAX_CLUSTER) cl = CFD_MAX_CLUSTER;
  int t = ((rows + cl - 1) / cl + 31) / 32 * 32;
  if (t < 64) t = 64;
  if (t > CFA_MAX_THREADS) t = CFA_MAX_THREADS;
  *T = g->tune.cfa_threads ? g->tune.cfa_threads : t;
  *CL = g->tune.cfa_cluster ? g->tune.cfa_cluster : cl;
}

cudaError_t cfd_gpu_launch_cfa(cfd_gpu* g, int B, const double* q, const double* qd,
                               const double* tau, const double* extra, double* qacc, int phase) {
  int n = g->n, T, CL;
  cfa_layout(g, n, B, &T, &CL);
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.blockDim = dim3(T);
  cfg.dynamicSmemBytes = sizeof(double) * ID_SHARED_DOUBLES(T);
  cfg.stream = g->stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  auto kernel = T <= CFA_SMALL_THREADS ? cfa_kernel<CFA_SMALL_THREADS> : cfa_kernel<CFA_MAX_THREADS>;
  if (g->cfa_threads != T || g->cfa_asked != CL) {  // once per layout: what the device schedules
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    // past 48 KiB needs the opt-in; the largest layout's, so that every context's launch fits
    if (!e) e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)(sizeof(double) * ID_SHARED_DOUBLES(CFA_MAX_THREADS)));
    if (e) return e;
    g->cfa_asked = CL;
    for (;; CL = (CL + 1) / 2) {  // 16 blocks need a whole GPC free
      attr[0].val.clusterDim.x = CL;
      cfg.gridDim = dim3(CL);
      int clusters = 0;
      e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg);
      if (CL == 1 || (e == cudaSuccess && clusters > 0)) break;
      cudaGetLastError();
    }
    g->cfa_threads = T;
    g->cfa_cluster = CL;
  }
  CL = g->cfa_cluster;
  attr[0].val.clusterDim.x = CL;
  cfg.gridDim = dim3((unsigned)(CL * (long)B));
  long stride = (long)cfd_gpu_work_per_instance(CFD_GPU_CFA, n);
  return cudaLaunchKernelEx(&cfg, kernel, g->chain, (const double*)g->jinv,
                            (const double*)g->basis, (const double*)g->sigma, q, qd, tau, extra,
                            qacc, g->bias, g->work, stride, cfd_gpu_cfa_steps(g),
                            (unsigned long long*)g->ptrs, cfd_gpu_error_flag(g),
                            g->tune.profile ? g->marks : (unsigned long long*)NULL, phase);
}
