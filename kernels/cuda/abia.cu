// ABIA on the GPU for many instances. Large batches (past 8192 for chains up to 32 links in joint
// frames, past 4096 for the others): one thread per instance. Chains up to 32 links take the ABA
// in world coordinates (aba_world.h, below); longer ones the structured
// articulated-body sweeps of aba_core.h in its lean mode: a thread keeps 14 numbers per link
// between sweeps and recomputes the rest, since that scratch is DRAM traffic. The model is shared
// by every thread (read-only, broadcast from cache); each instance's per-link scratch is
// interleaved with its neighbours' (entry k of instance b at work[k * B + b]) so a warp's accesses
// coalesce. Batches up to a few thousand: a group of lanes per instance (below): in world
// coordinates, a link per lane, for chains up to 32 links; a warp in blocks of 32 links in world
// coordinates up to 256 links; for longer ones, up to B = 512 scans over blocks of links, a
// cluster of thread blocks per instance (abia_scan.cu), then 8 lanes in link frames.
#include "aba_core.h"
#include "aba_lanes.cuh"
#include "aba_world.h"
#include "aba_world_blocks.cuh"
#include "aba_world_lanes.cuh"
#include "gpu_internal.h"

#define ABIA_THREADS 128
// Left alone, the compiler keeps 168 registers per thread: 3 blocks per SM, too few warps to hide
// the latency of the serial sweeps. Capping at 128 (4 blocks) trades a few spills for occupancy;
// tighter caps spill far more and lose (measured once with 6 and 8 blocks per SM: arm7, B = 65536,
// 2.0e8 and 1.5e8 FD/s against 5.75e8).
#define ABIA_MIN_BLOCKS 4

__global__ void __launch_bounds__(ABIA_THREADS, ABIA_MIN_BLOCKS) abia_kernel(cfd_chain c, int B, const double* __restrict__ q,
                            const double* __restrict__ qd, const double* __restrict__ tau,
                            const double* __restrict__ extra, double* __restrict__ qacc,
                            double* __restrict__ work, int* error) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  long o = (long)b * c.n;
  int st = cfd_aba_core_ex(&c, q + o, qd + o, tau + o, extra ? extra + o : NULL, qacc + o, 1,
                           work + b, B, 1);
  if (st) cfd_gpu_raise(error, st);
}

// Short chains in batches of a few thousand: the scratch in local memory instead (a per-thread
// array the hardware interleaves and caches in L1), in full (not lean) mode, so that each link's
// pose is computed once instead of three times. On the H100 (bench --only abia,
// h100_abia_variants.txt): arm7 B = 4096 1.06e8 FD/s against 8.3e7 global lean (the lanes
// kernels below are faster there); at B = 65536, where L1 no longer holds every thread's scratch,
// global lean wins (6.1e8 against 4.1e8). Full mode with global scratch (measured once, in that
// file's first version) never won, 200 links included.
#define ABIA_LOCAL_MAX_N 16

template <int LEAN>
__global__ void __launch_bounds__(ABIA_THREADS, ABIA_MIN_BLOCKS)
abia_local_kernel(cfd_chain c, int B, const double* __restrict__ q, const double* __restrict__ qd,
                  const double* __restrict__ tau, const double* __restrict__ extra,
                  double* __restrict__ qacc, int* error) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  double w[ABIA_LOCAL_MAX_N * (LEAN ? CFD_ABA_LINK_DOUBLES_LEAN : CFD_ABA_LINK_DOUBLES)];
  long o = (long)b * c.n;
  int st = cfd_aba_core_ex(&c, q + o, qd + o, tau + o, extra ? extra + o : NULL, qacc + o, 1, w, 1,
                           LEAN);
  if (st) cfd_gpu_raise(error, st);
}

// Long chains in batches too small to fill the GPU with a thread per instance (200 links, B =
// 1024: 32 warps for 528 schedulers, each walking 200 links on one thread's latency): a group of
// 8 lanes per instance (aba_lanes.cuh), the per-link arrays in global memory (instance-major, so
// that a group's accesses stay together). On the H100 (bench --only abia, h100_abia_variants.txt):
// 200 links, B = 1024: 692 us against 1015 us (global lean); short chains gain too (arm7, B = 1024:
// 31.9 against 38.5 us, local full; the world lanes below: 22.1). Up to B = 4096; from 16384 on a
// thread per instance fills the GPU and wins.
#define ABIA_LANES_BLOCK 64
#define ABIA_LANES_MAX_B 4096

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
// pose is a few multiply-adds. LOCAL (up to ABIA_WORLD_MAX_N links): the scratch in local memory
// and the model copied into shared memory, out of the way of the scratch in L1 (a thread's loads
// stalled on L1 for half its time, ncu, B = 65536); otherwise both in global memory.
#define ABIA_WORLD_MAX_N 32

template <bool LOCAL, bool JF>
__global__ void __launch_bounds__(ABIA_THREADS, ABIA_MIN_BLOCKS)
abia_world_kernel(cfd_chain c, int B, const double* __restrict__ q, const double* __restrict__ qd,
                  const double* __restrict__ tau, const double* __restrict__ extra,
                  double* __restrict__ qacc, double* __restrict__ work, int* error) {
  extern __shared__ double model[];
  int n = c.n;
  if (LOCAL) {
    cfd_model_to_shared(c, model);
    __syncthreads();
  }
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  long o = (long)b * n;
  double w[LOCAL ? ABIA_WORLD_MAX_N * CFD_ABW_LINK_DOUBLES : 1];
  int st = cfd_aba_world(&c, JF, q + o, qd + o, tau + o, extra ? extra + o : NULL, qacc + o, 1,
                         LOCAL ? w : work + b, LOCAL ? 1 : B);
  if (st) cfd_gpu_raise(error, st);
}

template <bool LOCAL>
static void launch_world(cfd_gpu* g, int blocks, int B, const double* q, const double* qd,
                         const double* tau, const double* extra, double* qacc, int* error) {
  size_t shared = LOCAL ? sizeof(double) * CFD_MODEL_SHARED_DOUBLES(g->n) : 0;
  if (g->chain_jf.home_R)
    abia_world_kernel<LOCAL, true><<<blocks, ABIA_THREADS, shared, g->stream>>>(
        g->chain_jf, B, q, qd, tau, extra, qacc, g->work, error);
  else
    abia_world_kernel<LOCAL, false><<<blocks, ABIA_THREADS, shared, g->stream>>>(
        g->chain, B, q, qd, tau, extra, qacc, g->work, error);
}

// Short chains in batches up to a few thousand: the world-coordinate ABA by a group of W lanes per
// instance, a link per lane, all in registers (aba_world_lanes.cuh; the rollouts' kernel). On the
// H100 (bench --only abia, h100_abia_variants.txt), per call: arm7 B = 4096 20.5 us against 31.3
// for world local; 16 links B = 4096 30.2 against 63.3. At B = 16384 it ties on arm7 (36.8 against
// 38.3) and loses on 16 links (71.5 against 55.0): past 8192 a thread per instance fills the GPU.
#define ABIA_WL_BLOCK 64
#define ABIA_WL_MAX_B 8192

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
// global memory, read back by the lane that wrote it. On the H100 (bench --only abia), 200 links:
// B = 1 107 us against 502 for the 8 lanes in link frames, B = 1024 261 against 704, B = 4096 868
// against 976. Up to 256 links: its rounding grows with the chain (a tiled chain of 1024 links:
// up to 4.5e-9 against the reference, where the lanes in link frames stay within 1e-9; 200
// links: 4e-11, the tests' bound 1e-10).
#define ABIA_WB_MAX_B 4096
#define ABIA_WB_MAX_N 256

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
// On the H100 (bench --only abia), 200 links: B = 1 82 us against 92 for a warp per instance, B =
// 64 80 against 96; from B = 256 on the idle warps cost more than they save (145 against 111).
// Kernel time at B = 1 against one warp: 40 and 64 links even (22, 30 us), 96 links 39 against
// 40, 128 47 against 52, 160 56 against 64, 256 84 against 97.
#define ABIA_WW_MAX_B 64

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
// on its SMs from one call to the next: a launch costs the host about 5 us and the call another
// 5 to 10 before the kernel starts, at 200 links a sixth of a step. It talks to the host through
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
// 0: after its first call); the host launches it again at the next call.
#define ABIA_SPLIT_IDLE_NS 2000000ull
#define ABIA_SPLIT_LIFE_NS 100000000ull
int cfd_gpu_split_resident = 1;  // gpu_tuning.h

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

int cfd_gpu_abia_variant = 0;  // as gpu_tuning.h says: 0 chosen by (n, B), else 1 ... 10
int cfd_gpu_abia_ran = 0;

// The kernel for B states of g's chain (gpu_tuning.h's numbering).
// Longer chains, one or a few hundred: scans over blocks of links (abia_scan.cu), up to 16
// thread blocks per instance. On the H100 (bench --only scan, h100_abia_scan.txt), against the
// 8 lanes in link frames: 1023 links B = 1 115 against 2614 us, B = 64 404 against 2761, B =
// 512 2339 against 4584; 16,384 links B = 1 326 against 49,600.
#define ABIA_SCAN_MAX_B 512
static int abia_world_variant(const cfd_gpu* g, int B) {
  // beyond the lanes' batches: world coordinates for short chains (arm7, B = 65536: 58 us a call
  // against 107 for global lean, h100_abia_variants.txt), global lean for longer ones, whose
  // rounding in world coordinates grows with their extent (aba_world.h)
  int jf_short = g->n <= ABIA_WORLD_MAX_N && g->chain_jf.home_R;
  int variant = cfd_gpu_abia_variant ? cfd_gpu_abia_variant
                : jf_short && B <= ABIA_WL_MAX_B ? 7
                : g->chain_jf.home_R && g->n <= ABIA_WB_MAX_N && B <= ABIA_WW_MAX_B ? 9
                : g->n > ABIA_WB_MAX_N && B <= ABIA_SCAN_MAX_B ? 10
                : g->chain_jf.home_R && g->n <= ABIA_WB_MAX_N && B <= ABIA_WB_MAX_B ? 8
                : B <= ABIA_LANES_MAX_B ? 4
                : g->n <= ABIA_WORLD_MAX_N ? 5 : 1;
  if (g->n > ABIA_LOCAL_MAX_N && (variant == 2 || variant == 3)) variant = 1;
  if (g->n > ABIA_WORLD_MAX_N && variant == 5) variant = 6;
  if (variant == 7 && !jf_short) variant = 4;
  if (variant == 8 && !g->chain_jf.home_R) variant = 4;
  if (variant == 9 && g->n > 32 * CFD_AWB_MAX_WARPS) variant = 8;  // one warp for any length
  if (variant == 9 && !g->chain_jf.home_R) variant = 4;
  return variant;
}

// The kernel for a launch: the scans (abia_scan.cu) where the world warps would run more than
// ABIA_SCAN_FROM_N links (bench --only scan, same run: 200 links B = 1 61 against 76 us, 256
// links 62 against 91, B = 64 77 against 92; at 128 the two tie, 55 against 56 and below the
// world warps win). A split call keeps the world warps' resident kernel where abia_world_variant
// takes it (cfd_gpu_abia_splits: up to 256 links); past that the scans run in two launches
// (cfd_gpu_abia_scan_splits).
#define ABIA_SCAN_FROM_N 128
static int abia_variant(const cfd_gpu* g, int B) {
  int variant = abia_world_variant(g, B);
  if (variant == 9 && !cfd_gpu_abia_variant && g->n > ABIA_SCAN_FROM_N)  // (9: B <= 64)
    variant = 10;
  return variant;
}

// A split call (cfd_gpu_fd_begin) takes the world warps kernel's factors where that kernel would
// solve these states, and for chains up to 32 links (one block: the same kernel on one warp)
// where the world lanes would, up to ABIA_WW_MAX_B states: tau's share is then a host sweep
// (aba_world_tau.h, O(n) per state), with no second launch and no second round trip.
int cfd_gpu_abia_splits(const cfd_gpu* g, int B) {
  int v = abia_world_variant(g, B);
  return g->maps_host && B <= ABIA_WW_MAX_B && (v == 9 || (v == 7 && !cfd_gpu_abia_variant));
}

// A split call that the world warps' resident kernel does not take (cfd_gpu_abia_splits) takes the
// scan kernel's two launches where a plain launch of B states would run the scans.
int cfd_gpu_abia_scan_splits(const cfd_gpu* g, int B) {
  return !cfd_gpu_abia_splits(g, B) && abia_variant(g, B) == 10;
}

int cfd_gpu_abia_split_kind(const cfd_gpu* g, int B) {
  if (g->alg != CFD_GPU_ABIA || !cfd_gpu_fd_splits(g, B)) return 0;
  return cfd_gpu_abia_splits(g, B) ? 1 : 2;
}

cudaError_t cfd_gpu_launch_abia_split(cfd_gpu* g, int B, const double* in, double* factors,
                                      unsigned long long* done, unsigned long long* ctrl,
                                      unsigned long long last) {
  abia_split_kernel<<<B, 32 * ((g->n + 31) / 32), 0, g->stream>>>(
      g->chain_jf, B, in, factors, done, ctrl, last, cfd_gpu_split_resident ? ABIA_SPLIT_LIFE_NS : 0);
  cudaError_t e = cudaGetLastError();
  if (!e) g->split_launches++;
  return e;
}

cudaError_t cfd_gpu_launch_abia(cfd_gpu* g, int B, const double* q, const double* qd,
                                const double* tau, const double* extra, double* qacc) {
  int blocks = (B + ABIA_THREADS - 1) / ABIA_THREADS;
  int* error = cfd_gpu_error_flag(g);
  int variant = abia_variant(g, B);
  cfd_gpu_abia_ran = variant;
  if (variant == 10) return cfd_gpu_launch_abia_scan(g, B, q, qd, tau, extra, qacc, error, ABS_WHOLE);
  if (variant == 9)
    abia_world_warps_kernel<<<B, 32 * ((g->n + 31) / 32), 0, g->stream>>>(
        g->chain_jf, B, q, qd, tau, extra, qacc, error);
  else if (variant == 8)
    abia_world_blocks_kernel<<<B, 32, 0, g->stream>>>(g->chain_jf, B, q, qd, tau, extra, qacc,
                                                      g->work, error);
  else if (variant == 7) launch_world_lanes(g, B, q, qd, tau, extra, qacc, error);
  else if (variant == 5) launch_world<true>(g, blocks, B, q, qd, tau, extra, qacc, error);
  else if (variant == 6) launch_world<false>(g, blocks, B, q, qd, tau, extra, qacc, error);
  else if (variant == 4) {
    int groups = ABIA_LANES_BLOCK / CFD_LANES;
    abia_lanes_kernel<<<(B + groups - 1) / groups, ABIA_LANES_BLOCK, 0, g->stream>>>(
        g->chain, B, q, qd, tau, extra, qacc, g->work, error, cfd_gpu_lanes_xch);
  } else if (variant == 2)
    abia_local_kernel<1><<<blocks, ABIA_THREADS, 0, g->stream>>>(g->chain, B, q, qd, tau, extra, qacc, error);
  else if (variant == 3)
    abia_local_kernel<0><<<blocks, ABIA_THREADS, 0, g->stream>>>(g->chain, B, q, qd, tau, extra, qacc, error);
  else
    abia_kernel<<<blocks, ABIA_THREADS, 0, g->stream>>>(g->chain, B, q, qd, tau, extra, qacc, g->work,
                                                        error);
  return cudaGetLastError();
}
