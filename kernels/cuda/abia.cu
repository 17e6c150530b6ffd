// cuda.abia: the articulated-body algorithm on the GPU for B states of one chain. Which kernel
// runs is one rule, cfd_gpu_abia_rule (below), by the chain's length and the batch:
//   - a thread per instance, for batches large enough to fill the GPU: short chains in world
//     coordinates (aba_world.h), longer ones the link-frame sweeps of aba_core.h in lean mode
//     (14 numbers a link kept between sweeps, the rest recomputed: that scratch is DRAM traffic);
//     each instance's scratch interleaved with its neighbours' (entry k of instance b at
//     work[k * B + b]) so that a warp's accesses coalesce;
//   - a group of lanes per instance, for batches of up to a few thousand: a link per lane in world
//     coordinates for short chains (aba_world_lanes.cuh), a warp in blocks of 32 links up to 256
//     links (aba_world_blocks.cuh), 8 lanes in link frames beyond (aba_lanes.cuh);
//   - scans over blocks of links, a cluster of thread blocks per instance, for long chains in
//     small batches (abia_scan.cu), ball and free joints among them too;
//   - on a tree, or with ball joints otherwise, a thread per instance: in world coordinates up to
//     ABIA_WT_MAX_N links (aba_world_tree.h), in link frames beyond (aba_tree.h).
// Kernels measured and dropped are in bench/variants/.
#include "aba_core.h"
#include "aba_tree.h"
#include "aba_world_tree.h"
#include "aba_lanes.cuh"
#include "aba_world.h"
#include "aba_world_blocks.cuh"
#include "aba_world_lanes.cuh"
#include "gpu_internal.h"

#define ABIA_THREADS 128
// Left alone, the compiler keeps 168 registers per thread: 3 blocks per SM, too few warps to hide
// the latency of the serial sweeps. Capping at 128 (4 blocks) trades a few spills for occupancy;
// tighter caps spill far more and lose.
#define ABIA_MIN_BLOCKS 4

// The rule's bounds (cfd_gpu_abia_rule)
#define ABIA_WORLD_MAX_N 32   // world coordinates, a thread or a link per lane: chains up to this
#define ABIA_WL_MAX_B 8192    // a link per lane, up to this batch (past it a thread per instance)
#define ABIA_LANES_MAX_B 4096 // 8 lanes per instance in link frames, up to this batch
#define ABIA_WB_MAX_N 256     // world coordinates in blocks of 32 links: chains up to this (their
                              // rounding grows with the chain's extent)
#define ABIA_WB_MAX_B 4096    // a warp per instance, up to this batch
#define ABIA_WW_MAX_B 64      // a warp per block of 32 links, up to this batch (past it the idle
                              // warps cost more than they save)
#define ABIA_SCAN_FROM_N 128  // the scans, from this length on where the world warps would run
#define ABIA_SCAN_MAX_B 512   // the scans for chains past ABIA_WB_MAX_N, up to this batch
#define ABIA_BALL_SCAN_FROM_N 30    // one chain with ball or free joints: the scans from this length
#define ABIA_BALL_SCAN_MAX_B 1024   // up to this batch (past it the tree kernels),
#define ABIA_BALL_SCAN_LONG_N 100   // and from this length
#define ABIA_BALL_SCAN_LONG_MAX_B 4096  // up to this one
#define ABIA_WT_MAX_N 64      // trees in world coordinates up to this many links (rounding grows
                              // with the tree's extent; link frames past it)

__global__ void __launch_bounds__(ABIA_THREADS, ABIA_MIN_BLOCKS)
abia_kernel(cfd_chain c, int B, const double* __restrict__ q, const double* __restrict__ qd,
            const double* __restrict__ tau, const double* __restrict__ extra,
            double* __restrict__ qacc, double* __restrict__ work, int* error) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  long o = (long)b * c.n;
  int st = cfd_aba_core_ex(&c, q + o, qd + o, tau + o, extra ? extra + o : NULL, qacc + o, 1,
                           work + b, B, 1);
  if (st) cfd_gpu_raise(error, st);
}

// A tree, or ball joints: aba_tree.h's sweeps, a thread per instance, scratch interleaved.
__global__ void __launch_bounds__(ABIA_THREADS)
abia_tree_kernel(cfd_chain c, int B, const double* __restrict__ q, const double* __restrict__ qd,
                 const double* __restrict__ tau, const double* __restrict__ extra,
                 double* __restrict__ qacc, double* __restrict__ work, int* error) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  long o = (long)b * c.n;
  int st = cfd_aba_tree(&c, q + o, qd + o, tau + o, extra ? extra + o : NULL, qacc + o, 1, work + b, B);
  if (st) cfd_gpu_raise(error, st);
}

// A tree up to ABIA_WT_MAX_N links: the world-coordinate sweeps (aba_world_tree.h), as
// abia_world_kernel takes chains: 7 numbers a link kept (and a slot per branch point), the model,
// the tree's parents, kinds and plan copied into shared memory. ABIA_WT_MIN_BLOCKS blocks per SM
// bound its registers (-D to measure another: bench/results/LOG.md).
#ifndef ABIA_WT_MIN_BLOCKS
#define ABIA_WT_MIN_BLOCKS 2
#endif
template <bool JF>
__global__ void __launch_bounds__(ABIA_THREADS, ABIA_WT_MIN_BLOCKS)
abia_world_tree_kernel(cfd_chain c, const int* __restrict__ plan, int B, const double* __restrict__ q,
                       const double* __restrict__ qd, const double* __restrict__ tau,
                       const double* __restrict__ extra, double* __restrict__ qacc,
                       double* __restrict__ work, int* error) {
  extern __shared__ double model[];
  int n = c.n;
  int* ints = (int*)(model + CFD_MODEL_SHARED_DOUBLES(n));
  for (int j = threadIdx.x; j < n; j += blockDim.x) ints[j] = c.parent[j], ints[n + j] = c.kind[j];
  for (int j = threadIdx.x; j <= n; j += blockDim.x) ints[2 * n + j] = plan[j];
  cfd_model_to_shared(c, model);
  c.parent = ints;
  c.kind = ints + n;
  __syncthreads();
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  long o = (long)b * n;
  int st = cfd_aba_world_tree(&c, JF, ints + 2 * n, q + o, qd + o, tau + o,
                              extra ? extra + o : NULL, qacc + o, 1, work + b, B);
  if (st) cfd_gpu_raise(error, st);
}

// Long chains in batches too small to fill the GPU with a thread per instance (each thread would
// walk the whole chain on one thread's latency, with most schedulers idle): a group of 8 lanes
// per instance (aba_lanes.cuh), the per-link arrays in global memory (instance-major, so that a
// group's accesses stay together).
#define ABIA_LANES_BLOCK 64

__global__ void __launch_bounds__(ABIA_LANES_BLOCK)
abia_lanes_kernel(cfd_chain c, int B, const double* __restrict__ q, const double* __restrict__ qd,
                  const double* __restrict__ tau, const double* __restrict__ extra,
                  double* __restrict__ qacc, double* __restrict__ work, int* error, int use_xch) {
  int n = c.n, lane = threadIdx.x % CFD_LANES;
  long slot = (long)blockIdx.x * (ABIA_LANES_BLOCK / CFD_LANES) + threadIdx.x / CFD_LANES, b = slot;
  bool active = b < B;  // idle groups run along on instance B - 1's inputs, in their own slot
  if (!active) b = B - 1;  // (the scratch has CFD_LANES spare): the shuffles need every lane
  long o = b * n;
  cfd_lanes_links L = cfd_lanes_links_at(work + slot * CFD_LANES_LINK_DOUBLES * n, n);
  for (int i = lane; i < n; i += CFD_LANES)
    cfd_aba_link(&c, i, q[o + i], 0, NULL, L.R + 9 * i, L.p + 3 * i, NULL, NULL);
  __syncwarp();
  cfd_lanes_velocities(c, lane, qd + o, L);
  __shared__ __align__(16) double xch[ABIA_LANES_BLOCK / CFD_LANES][CFD_LANES_XCH];
  bool bad = cfd_lanes_backward(c, lane, tau + o, extra ? extra + o : NULL, L,
                                use_xch ? xch[threadIdx.x / CFD_LANES] : NULL);
  if (lane == 0 && active) {
    if (bad) cfd_gpu_raise(error, CFD_ERR_SINGULAR);
    else cfd_lanes_accelerations(c, L, qacc + o);
  }
}

// Short chains in large batches, where a thread per instance fills the GPU: the ABA in world
// coordinates (aba_world.h), which passes each articulated inertia to the parent by addition
// instead of a 6x6 congruence, keeps 7 numbers per link instead of 14 and takes sin/cos once per
// sweep instead of a pose per sweep; on the chain in joint frames (JF) where it has them, so that a
// pose is a few multiply-adds. The scratch lives in local memory and the model is copied into
// shared memory, out of the way of the scratch in L1 (otherwise a thread's loads stall on L1).
template <bool JF>
__global__ void __launch_bounds__(ABIA_THREADS, ABIA_MIN_BLOCKS)
abia_world_kernel(cfd_chain c, int B, const double* __restrict__ q, const double* __restrict__ qd,
                  const double* __restrict__ tau, const double* __restrict__ extra,
                  double* __restrict__ qacc, int* error) {
  extern __shared__ double model[];
  cfd_model_to_shared(c, model);
  __syncthreads();
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  long o = (long)b * c.n;
  double w[ABIA_WORLD_MAX_N * CFD_ABW_LINK_DOUBLES];
  int st = cfd_aba_world(&c, JF, q + o, qd + o, tau + o, extra ? extra + o : NULL, qacc + o, 1, w, 1);
  if (st) cfd_gpu_raise(error, st);
}

static void launch_world_local(cfd_gpu* g, int blocks, int B, const double* q, const double* qd,
                               const double* tau, const double* extra, double* qacc, int* error) {
  size_t shared = sizeof(double) * CFD_MODEL_SHARED_DOUBLES(g->n);
  if (g->chain_jf.home_R)
    abia_world_kernel<true><<<blocks, ABIA_THREADS, shared, g->stream>>>(g->chain_jf, B, q, qd, tau,
                                                                        extra, qacc, error);
  else
    abia_world_kernel<false><<<blocks, ABIA_THREADS, shared, g->stream>>>(g->chain, B, q, qd, tau,
                                                                         extra, qacc, error);
}

// Short chains in batches up to a few thousand: the world-coordinate ABA by a group of W lanes per
// instance, a link per lane, all in registers (aba_world_lanes.cuh; the rollouts' kernel too).
// Past ABIA_WL_MAX_B a thread per instance fills the GPU and wins.
#define ABIA_WL_BLOCK 64

template <int W>
__global__ void __launch_bounds__(ABIA_WL_BLOCK)
abia_world_lanes_kernel(cfd_chain c, int B, const double* __restrict__ q,
                        const double* __restrict__ qd, const double* __restrict__ tau,
                        const double* __restrict__ extra, double* __restrict__ qacc, int* error) {
  int n = c.n, lane = threadIdx.x % W;
  long b = ((long)blockIdx.x * ABIA_WL_BLOCK + threadIdx.x) / W;
  bool active = b < B;     // idle groups run along on instance B - 1's inputs (the shuffles need
  if (!active) b = B - 1;  // every lane of the warp) and write nothing
  bool link = lane < n;
  long o = b * n + (link ? lane : 0);
  const cfd_wl_link L = cfd_wl_link_of(c, lane);
  bool bad = false;
  double qa = cfd_wl_qacc<W>(L, n, lane, c.gravity, link ? q[o] : 0, link ? qd[o] : 0,
                             link ? tau[o] : 0, link && extra ? extra[o] : 0, &bad);
  if (active && link) qacc[o] = qa;
  if (active && bad) cfd_gpu_raise(error, CFD_ERR_SINGULAR);
}

static void launch_world_lanes(cfd_gpu* g, int B, const double* q, const double* qd,
                               const double* tau, const double* extra, double* qacc, int* error) {
  int n = g->n, W = n <= 4 ? 4 : n <= 8 ? 8 : n <= 16 ? 16 : 32;
  unsigned blocks = (unsigned)(((long)B * W + ABIA_WL_BLOCK - 1) / ABIA_WL_BLOCK);
#define WL_LAUNCH(w)                                                                               \
  abia_world_lanes_kernel<w><<<blocks, ABIA_WL_BLOCK, 0, g->stream>>>(g->chain_jf, B, q, qd, tau, \
                                                                     extra, qacc, error)
  if (W == 4) WL_LAUNCH(4);
  else if (W == 8) WL_LAUNCH(8);
  else if (W == 16) WL_LAUNCH(16);
  else WL_LAUNCH(32);
#undef WL_LAUNCH
}

// Longer chains, one or a few of them (and batches up to a few thousand): a warp per instance,
// the world-coordinate ABA in blocks of 32 links (aba_world_blocks.cuh), the per-link scratch in
// global memory, read back by the lane that wrote it. Up to ABIA_WB_MAX_N links: its rounding
// grows with the chain's extent, where the lanes in link frames keep theirs.
__global__ void __launch_bounds__(32)
abia_world_blocks_kernel(cfd_chain c, int B, const double* __restrict__ q,
                         const double* __restrict__ qd, const double* __restrict__ tau,
                         const double* __restrict__ extra, double* __restrict__ qacc,
                         double* __restrict__ work, int* error) {
  long b = blockIdx.x, o = b * c.n;
  bool bad = cfd_awb_qacc(c, q + o, qd + o, tau + o, extra ? extra + o : NULL, qacc + o,
                          work + b * CFD_AWB_LINK_DOUBLES * (long)c.n);
  if (bad && threadIdx.x == 0) cfd_gpu_raise(error, CFD_ERR_SINGULAR);  // bad: the warp's vote
}

// One chain or a few: a warp per block of 32 links (cfd_awb_qacc_warps), so that what each block
// can do without the others runs on all of them at once; the turns still go block after block.
// Up to ABIA_WW_MAX_B states: past that the idle warps cost more than they save.
__global__ void __launch_bounds__(32 * CFD_AWB_MAX_WARPS)
abia_world_warps_kernel(cfd_chain c, int B, const double* __restrict__ q,
                        const double* __restrict__ qd, const double* __restrict__ tau,
                        const double* __restrict__ extra, double* __restrict__ qacc, int* error) {
  long b = blockIdx.x, o = b * c.n;
  bool bad = cfd_awb_qacc_warps<false>(c, q + o, qd + o, tau + o, extra ? extra + o : NULL,
                                       qacc + o, NULL);
  if (bad && (threadIdx.x & 31) == 0) cfd_gpu_raise(error, CFD_ERR_SINGULAR);  // the warp's vote
}

// The split call's kernel (cfd_gpu_fd_begin and _finish), a thread block per state, which stays
// on its SMs from one call to the next: a launch and its start cost a short chain's step a large
// share of its time. It talks to the host through
// page-locked memory alone:
//   ctrl[0] the host's latest call: 2 x its number (calls up to `last` are done) + whether the
//   states have the diagonal term (one word: one read across the bus), ctrl[1] stop, ctrl[2] set
//   by the kernel as it leaves;
//   in: q, qd (tau's slot), extra, [B][n] each, as cfd_gpu_fd_begin packs them;
//   factors: each state's factors and status (aba_world_tau.h), every cfd_awt_doubles(n);
//   done + (3 + nb) b, state b's (nb: its blocks of 32 links): [0] the call number once its
//   factors and status are there, [1], [2] its start and end times (globaltimer ns), [3 + k] the
//   call number once block k's factors are there (k > 0; block 0's come with [0]).
// It leaves when asked to, when no call has come for ABIA_SPLIT_IDLE_NS, or (between calls) once
// it has run for life_ns (ABIA_SPLIT_LIFE_NS: under any watchdog that limits a kernel's time;
// 0: after its first call, cfd_gpu_tuning.split_relaunch); the host launches it again at the next
// call.
#define ABIA_SPLIT_IDLE_NS 2000000ull
#define ABIA_SPLIT_LIFE_NS 100000000ull

__global__ void __launch_bounds__(32 * CFD_AWB_MAX_WARPS)
abia_split_kernel(cfd_chain c, int B, const double* in, double* __restrict__ factors,
                  unsigned long long* done, volatile unsigned long long* ctrl,
                  unsigned long long last, unsigned long long life_ns) {
  __shared__ double state[3][32 * CFD_AWB_MAX_WARPS];  // this block's q, qd, extra
  __shared__ unsigned long long call;
  __shared__ int with_extra;
  const int n = c.n;
  const long b = blockIdx.x, bn = (long)B * n;
  const unsigned long long born = cfd_gpu_clock_ns();
  unsigned long long idle = born;
  for (bool served = false;; served = true) {
    if (threadIdx.x == 0) {
      unsigned long long w = ctrl[0], t = idle;
      while (w >> 1 == last && t - idle < ABIA_SPLIT_IDLE_NS && (!served || t - born < life_ns) &&
             !ctrl[1]) {
        t = cfd_gpu_clock_ns();
        w = ctrl[0];
      }
      call = w >> 1 != last && !ctrl[1] ? w >> 1 : 0;
      with_extra = (int)(w & 1);
      __threadfence_system();  // the states are read after the call
      if (!call) ctrl[2] = 1;
    }
    __syncthreads();
    const unsigned long long s = call;
    if (!s) return;
    const unsigned long long t0 = cfd_gpu_clock_ns();
    const bool ex = with_extra;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {  // fetched again: no cached line of the last call
      state[0][i] = __ldcv(in + b * n + i);
      state[1][i] = __ldcv(in + bn + b * n + i);
      state[2][i] = ex ? __ldcv(in + 3 * bn + b * n + i) : 0;
    }
    __syncthreads();
    unsigned long long* mine = done + (3 + (n + 31) / 32) * b;
    cfd_awb_qacc_warps<true>(c, state[0], state[1], NULL, ex ? state[2] : NULL, NULL,
                             factors + b * cfd_awt_doubles(n), mine + 3, s);
    if (threadIdx.x == 0) {  // every thread's factors are out (fenced, then a barrier)
      mine[1] = t0;
      mine[2] = cfd_gpu_clock_ns();
      __threadfence_system();
      *(volatile unsigned long long*)mine = s;
    }
    last = s;
    idle = cfd_gpu_clock_ns();
  }
}

// The rule: cuda.abia's kernel for B states of g's chain. A chain in joint frames (hinges and
// slides without pitch: chain_jf) takes the world-coordinate kernels; their rounding grows with
// the chain's extent, so past ABIA_WB_MAX_N links the link-frame kernels take over. In order:
// short chains in batches up to a few thousand, a link per lane; up to ABIA_SCAN_FROM_N links in
// a few states, a warp per block of 32 links (past that the scans' shorter depth wins); long
// chains in batches up to ABIA_SCAN_MAX_B, the scans over blocks of links; chains up to 256
// links in batches up to 4096, a warp per instance; any chain in such batches, 8 lanes in link
// frames; beyond, a thread per instance fills the GPU (world coordinates for short chains). One
// chain with ball or free joints takes the scans from ABIA_BALL_SCAN_FROM_N links up to the
// ABIA_BALL_SCAN_* batches (the tree kernel's thread per instance runs each link in turn: 10 to
// 100 times slower on one long chain), the tree kernels past them; a branching tree, the tree
// kernels.
// The measurements behind each bound: docs/RESULTS.md, bench/results/LOG.md.
cfd_abia_kernel cfd_gpu_abia_rule(const cfd_gpu* g, int B) {
  const int n = g->n, jf = g->chain_jf.home_R != NULL;
  if (g->tree && g->one_chain && n >= ABIA_BALL_SCAN_FROM_N &&
      (B <= ABIA_BALL_SCAN_MAX_B || (n >= ABIA_BALL_SCAN_LONG_N && B <= ABIA_BALL_SCAN_LONG_MAX_B)))
    return CFD_ABIA_SCAN;
  if (g->tree) return n <= ABIA_WT_MAX_N ? CFD_ABIA_WORLD_TREE : CFD_ABIA_TREE;
  if (jf && n <= ABIA_WORLD_MAX_N && B <= ABIA_WL_MAX_B) return CFD_ABIA_WORLD_LANES;
  if (jf && n <= ABIA_WB_MAX_N && B <= ABIA_WW_MAX_B)
    return n > ABIA_SCAN_FROM_N ? CFD_ABIA_SCAN : CFD_ABIA_WORLD_WARPS;
  if (n > ABIA_WB_MAX_N && B <= ABIA_SCAN_MAX_B) return CFD_ABIA_SCAN;
  if (jf && n <= ABIA_WB_MAX_N && B <= ABIA_WB_MAX_B) return CFD_ABIA_WORLD_WARP;
  if (B <= ABIA_LANES_MAX_B) return CFD_ABIA_LANES;
  return n <= ABIA_WORLD_MAX_N ? CFD_ABIA_WORLD_THREAD : CFD_ABIA_THREAD;
}

// A kernel forced through the tuning, replaced where it cannot run on g's chain (too long, or
// without joint frames); an unknown number: the rule.
static cfd_abia_kernel abia_forced(const cfd_gpu* g, int B, int k) {
  const int n = g->n, jf = g->chain_jf.home_R != NULL;
  if (g->tree && k == CFD_ABIA_SCAN && g->one_chain) return CFD_ABIA_SCAN;
  if (g->tree) return k == CFD_ABIA_TREE || n > ABIA_WT_MAX_N ? CFD_ABIA_TREE : CFD_ABIA_WORLD_TREE;
  switch (k) {
    case CFD_ABIA_THREAD: case CFD_ABIA_LANES: case CFD_ABIA_SCAN: return (cfd_abia_kernel)k;
    case CFD_ABIA_WORLD_THREAD: return n <= ABIA_WORLD_MAX_N ? CFD_ABIA_WORLD_THREAD : CFD_ABIA_THREAD;
    case CFD_ABIA_WORLD_LANES: return jf && n <= ABIA_WORLD_MAX_N ? CFD_ABIA_WORLD_LANES : CFD_ABIA_LANES;
    case CFD_ABIA_WORLD_WARP: return jf ? CFD_ABIA_WORLD_WARP : CFD_ABIA_LANES;
    case CFD_ABIA_WORLD_WARPS:
      return !jf ? CFD_ABIA_LANES : n > 32 * CFD_AWB_MAX_WARPS ? CFD_ABIA_WORLD_WARP : CFD_ABIA_WORLD_WARPS;
  }
  return cfd_gpu_abia_rule(g, B);
}

static cfd_abia_kernel abia_kernel_for(const cfd_gpu* g, int B) {
  return g->tune.abia_kernel ? abia_forced(g, B, g->tune.abia_kernel) : cfd_gpu_abia_rule(g, B);
}

// A split call (cfd_gpu_fd_begin) takes the world warps kernel's factors for chains in joint
// frames up to ABIA_WB_MAX_N links (a chain up to 32 links is one block: the same kernel on one
// warp), up to ABIA_WW_MAX_B states: tau's share is then a host sweep (aba_world_tau.h, O(n) per
// state), with no second launch and no second round trip. Forced, only where the world warps are.
int cfd_gpu_abia_splits(const cfd_gpu* g, int B) {
  if (g->tree || !g->maps_host || B > ABIA_WW_MAX_B || g->tune.abia_launch) return 0;
  if (g->tune.abia_kernel) return abia_forced(g, B, g->tune.abia_kernel) == CFD_ABIA_WORLD_WARPS;
  return g->chain_jf.home_R && g->n <= ABIA_WB_MAX_N;
}

// A split call that the world warps' resident kernel does not take (cfd_gpu_abia_splits) takes the
// scan kernel's two launches where a plain launch of B states would run the scans.
int cfd_gpu_abia_scan_splits(const cfd_gpu* g, int B) {
  return !g->tune.abia_launch && !cfd_gpu_abia_splits(g, B) && abia_kernel_for(g, B) == CFD_ABIA_SCAN;
}

int cfd_gpu_abia_split_kind(const cfd_gpu* g, int B) {
  if (g->alg != CFD_GPU_ABIA || !cfd_gpu_fd_splits(g, B)) return 0;
  return cfd_gpu_abia_splits(g, B) ? 1 : 2;
}

cudaError_t cfd_gpu_launch_abia_split(cfd_gpu* g, int B, const double* in, double* factors,
                                      unsigned long long* done, unsigned long long* ctrl,
                                      unsigned long long last) {
  abia_split_kernel<<<B, 32 * ((g->n + 31) / 32), 0, g->stream>>>(
      g->chain_jf, B, in, factors, done, ctrl, last, g->tune.split_relaunch ? 0 : ABIA_SPLIT_LIFE_NS);
  cudaError_t e = cudaGetLastError();
  if (!e) g->split_launches++;
  return e;
}

cudaError_t cfd_gpu_launch_abia(cfd_gpu* g, int B, const double* q, const double* qd,
                                const double* tau, const double* extra, double* qacc) {
  int* error = cfd_gpu_error_flag(g);
  if (g->tune.abia_launch) {  // a kernel from bench/variants
    g->abia_ran = CFD_ABIA_RULE;
    return (cudaError_t)g->tune.abia_launch(g, B, q, qd, tau, extra, qacc);
  }
  const cfd_abia_kernel k = abia_kernel_for(g, B);
  const int blocks = (B + ABIA_THREADS - 1) / ABIA_THREADS;
  g->abia_ran = k;
  switch (k) {
    case CFD_ABIA_SCAN:
      return cfd_gpu_launch_abia_scan(g, B, q, qd, tau, extra, qacc, error, ABS_WHOLE);
    case CFD_ABIA_WORLD_WARPS:
      abia_world_warps_kernel<<<B, 32 * ((g->n + 31) / 32), 0, g->stream>>>(
          g->chain_jf, B, q, qd, tau, extra, qacc, error);
      break;
    case CFD_ABIA_WORLD_WARP:
      abia_world_blocks_kernel<<<B, 32, 0, g->stream>>>(g->chain_jf, B, q, qd, tau, extra, qacc,
                                                        g->work, error);
      break;
    case CFD_ABIA_WORLD_LANES: launch_world_lanes(g, B, q, qd, tau, extra, qacc, error); break;
    case CFD_ABIA_WORLD_THREAD: launch_world_local(g, blocks, B, q, qd, tau, extra, qacc, error); break;
    case CFD_ABIA_LANES: {
      int groups = ABIA_LANES_BLOCK / CFD_LANES;
      abia_lanes_kernel<<<(B + groups - 1) / groups, ABIA_LANES_BLOCK, 0, g->stream>>>(
          g->chain, B, q, qd, tau, extra, qacc, g->work, error, !g->tune.lanes_shuffle);
      break;
    }
    case CFD_ABIA_TREE:
      abia_tree_kernel<<<blocks, ABIA_THREADS, 0, g->stream>>>(g->chain, B, q, qd, tau, extra, qacc,
                                                               g->work, error);
      break;
    case CFD_ABIA_WORLD_TREE: {
      size_t shared = sizeof(double) * CFD_MODEL_SHARED_DOUBLES(g->n) + sizeof(int) * (3 * g->n + 1);
      if (g->chain_jf.home_R)  // in joint frames: a hinge's pose and screw in a few multiply-adds
        abia_world_tree_kernel<true><<<blocks, ABIA_THREADS, shared, g->stream>>>(
            g->chain_jf, g->tree_plan, B, q, qd, tau, extra, qacc, g->work, error);
      else
        abia_world_tree_kernel<false><<<blocks, ABIA_THREADS, shared, g->stream>>>(
            g->chain, g->tree_plan, B, q, qd, tau, extra, qacc, g->work, error);
      break;
    }
    default:
      abia_kernel<<<blocks, ABIA_THREADS, 0, g->stream>>>(g->chain, B, q, qd, tau, extra, qacc,
                                                          g->work, error);
  }
  return cudaGetLastError();
}
