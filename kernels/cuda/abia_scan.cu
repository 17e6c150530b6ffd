// ABIA for one long chain (or a few) as scans over blocks of links (aba_scan.h; its CPU twin is
// cpu/abia_scan_cpu.c, the same steps in the same order, its scans flat where these are in two
// levels: the same compositions grouped otherwise, apart by rounding). A group of 8 lanes per
// block of links (aba_scan_lanes.cuh), 16 groups per thread block (32 past 4096 links), up to 16
// thread blocks per chain in one cluster (16 SMs): each group runs its own links' sweeps, and
// what the blocks hand each other (velocities, articulated inertias as Riccati maps, bias forces,
// accelerations) comes from scans across the groups (abs_scan): within each thread block in
// shared memory, then across the cluster's thread blocks through distributed shared memory, two
// cluster barriers a scan. A chain's sequential depth is its links per block plus a few dozen map
// compositions, where the sweeps of the other kernels take every link in turn; and unlike CFA it
// stays accurate at any length.
#include <cooperative_groups.h>

#include "aba_scan_lanes.cuh"
#include "block_scan.cuh"
#include "gpu_internal.h"

namespace cg = cooperative_groups;

// 16 groups (128 threads) per thread block, so that a thread may keep 255 registers (with 64
// groups on one SM they spilled, and the SM's double-precision units were the limit), 32 past
// 4096 links; up to 16 thread blocks per cluster: up to 256 blocks of links (512 past 4096
// links), longer chains get longer blocks.
#define ABS_CTA_GROUPS 32  // at most (launch bound); 16 by default (cfd_gpu_tuning.scan_groups)
#define ABS_DEFAULT_LINKS 2  // one chain (the shortest blocks: the scans' depth dominates)
// global scratch per block of links, after CFD_ABS_LINK per link (abia_scan_kernel: v_fk ... keep)
#define ABS_VALUES (6 + 36 + 6 + 6 + 36)
// double2 per lane to copy the widest element (108 doubles; every width even, every element at a
// multiple of 16 bytes)
#define ABS_COPY ((CFD_ABS_RIC / 2 + ABS_GROUP - 1) / ABS_GROUP)
#define ABS_WORK_BUDGET ((size_t)4 << 30)  // bytes of scratch per launch (as gpu.cu's batches)

// the GPU's nanosecond clock at the end of a phase (after its barrier), instance 0, thread 0, into
// the context's marks (NULL when not profiling)
__device__ __forceinline__ void abs_mark(unsigned long long* marks, int* k) {
  if (marks && blockIdx.x == 0 && threadIdx.x == 0 && *k < 64) marks[*k] = cfd_gpu_clock_ns();
  (*k)++;
}

// A scan in two levels. The groups of a thread block scan their blocks' elements in shared
// memory (a block barrier per step); each thread block's total then reaches the others through
// distributed shared memory, after one cluster barrier, and every thread block scans the (at most
// 16) totals itself, a group each (the launch gives a thread block at least as many groups as the
// cluster has thread blocks); last, each group applies what the blocks beyond its thread block
// hand on to its own result, and stores the value its block of links hands on (vals). Two cluster
// barriers a scan (the second the caller's, before the values are read), where a Hillis-Steele scan across
// the cluster needs one a step and a trip to L2 for every element. Up to two scans at once (the
// velocity and Riccati scans, which are independent): the same steps, barriers shared.
struct abs_scan_io {
  int kind;
  double *E0, *E1;  // shared: the thread block's elements, [groups][width] each
  double *T0, *T1;  // shared: the cluster's thread blocks' totals, [CFD_MAX_CLUSTER][width] each
  double* vals;     // global: per block of links, the value it hands on
  // (selected, not indexed: an indexed pair would live in local memory)
  __device__ double* E(int i) const { return i ? E1 : E0; }
  __device__ double* T(int i) const { return i ? T1 : T0; }
};

__device__ __forceinline__ bool abs_inward(int kind) {
  return kind == CFD_ABS_SCAN_RIC || kind == CFD_ABS_SCAN_BIAS;
}

// One Hillis-Steele step for element g of n (the thread block's elements or the cluster's
// totals), from in into out: g composed with the element k further on (inward kinds) or back.
__device__ __forceinline__ int abs_step(const abs_scan_io& io, const double* in, double* out,
                                        int g, int n, int k, int j, double* sm) {
  int w = cfd_abs_width(io.kind), o = abs_inward(io.kind) ? g + k : g - k;
  return abs_lanes_combine(io.kind, in + w * g, o >= 0 && o < n ? in + w * o : NULL, out + w * g,
                           j, g < n, sm);
}

// A group's copy of n2 double2 from another thread block's shared memory: every load in flight
// before the first store (restrict: the compiler may hoist them), one trip to the other SM where a
// loop of load-then-store waits a trip per element
__device__ __forceinline__ void abs_copy(const double2* __restrict__ src, double2* __restrict__ dst,
                                         int n2, int j) {
#pragma unroll
  for (int u = 0; u < ABS_COPY; u++)
    if (j + ABS_GROUP * u < n2) dst[j + ABS_GROUP * u] = src[j + ABS_GROUP * u];
}

template <int NK>
__device__ __forceinline__ int abs_scan(abs_scan_io (&io)[NK], int g, int groups, int nb, int j,
                                        double* sm) {
  cg::cluster_group cl = cg::this_cluster();
  int rank = (int)cl.block_rank(), CL = (int)cl.num_blocks(), b = rank * groups + g, bad = 0;
  int here = nb - rank * groups < groups ? nb - rank * groups : groups;  // this block's groups
  // 1. within the thread block: E[cur][g] = own o ... o the farthest of this thread block's
  int cur = 0;
  for (int k = 1; k < groups; k *= 2, cur ^= 1) {
#pragma unroll
    for (int x = 0; x < NK; x++)
      bad |= abs_step(io[x], io[x].E(cur), io[x].E(cur ^ 1), g, here, k, j, sm);
    __syncthreads();
  }
  int t = 0;
  if (CL > 1) {
    // 2. the thread blocks' totals (the group nearest the far end of each), then their scan
    cl.sync();
    if (g < CL) {
      int there = nb - g * groups < groups ? nb - g * groups : groups;
#pragma unroll
      for (int x = 0; x < NK; x++) {
        int w = cfd_abs_width(io[x].kind), at = abs_inward(io[x].kind) ? 0 : there - 1;
        abs_copy((const double2*)cl.map_shared_rank(io[x].E(cur) + w * at, g),
                 (double2*)(io[x].T0 + w * g), w / 2, j);
      }
    }
    __syncthreads();
    for (int k = 1; k < CL; k *= 2, t ^= 1) {
#pragma unroll
      for (int x = 0; x < NK; x++)
        bad |= abs_step(io[x], io[x].T(t), io[x].T(t ^ 1), g, CL, k, j, sm);
      __syncthreads();
    }
  }
  // 3. what the thread blocks beyond this one hand on (none in a cluster of one), applied to each
  // group's own result
#pragma unroll
  for (int x = 0; x < NK; x++) {
    int w = cfd_abs_width(io[x].kind), o = abs_inward(io[x].kind) ? rank + 1 : rank - 1;
    const double* in = o >= 0 && o < CL ? io[x].T(t) + w * o + abs_value_at(io[x].kind) : NULL;
    int vw = abs_value_width(io[x].kind);
    bad |= abs_lanes_value(io[x].kind, io[x].E(cur) + w * g, in, io[x].vals + (long)vw * b, j,
                           g < here, sm);
  }
  return bad;
}

// doubles of shared memory for a thread block of G groups: each group's scratch, then the
// elements of the velocity and Riccati scans (the bias and acceleration scans reuse the Riccati
// room), then the totals (room for the largest cluster: sized by the launch's, the kernel spilled
// more registers)
__host__ __device__ constexpr int abs_shared_doubles(int G) {
  return G * (ABS_SCRATCH + 2 * (CFD_ABS_RIC + CFD_ABS_FK)) +
         CFD_MAX_CLUSTER * 2 * (CFD_ABS_RIC + CFD_ABS_FK);
}

// STAGE: ABS_WHOLE, or a split call's ABS_BEGIN or ABS_FINISH (gpu_internal.h), each compiled on
// its own (a run-time stage cost the whole kernel 11 registers)
template <int STAGE>
__global__ void __launch_bounds__(ABS_GROUP * ABS_CTA_GROUPS)
abia_scan_kernel(cfd_chain c, const int* __restrict__ starts, int nb, const double* __restrict__ q,
                 const double* __restrict__ qd, const double* __restrict__ tau,
                 const double* __restrict__ extra, double* __restrict__ qacc, double* work,
                 long stride, int* error, int error_each, unsigned long long* profile) {
  extern __shared__ double shared[];
  int mk = 0;
  abs_mark(profile, &mk);
  cg::cluster_group cl = cg::this_cluster();
  int CL = (int)cl.num_blocks(), groups = blockDim.x / ABS_GROUP;
  int n = c.n, j = threadIdx.x % ABS_GROUP, g = threadIdx.x / ABS_GROUP;
  int b = (int)cl.block_rank() * groups + g;  // the group's block of links
  double* sm = shared + ABS_SCRATCH * g;
  double* ric_e = shared + ABS_SCRATCH * groups;  // (the affine scans': the same room)
  double* fk_e = ric_e + 2 * CFD_ABS_RIC * groups;
  double* ric_t = fk_e + 2 * CFD_ABS_FK * groups;
  double* fk_t = ric_t + 2 * CFD_ABS_RIC * CFD_MAX_CLUSTER;
  long inst = blockIdx.x / CL, o = inst * n;
  q += o, qd += o, tau += o, qacc += o;
  if (extra) extra += o;
  double* links = work + inst * stride;
  if (error_each) error += inst;
  double* v_fk = links + (long)CFD_ABS_LINK * n;  // per block of links: its last link's velocity,
  double* v_ric = v_fk + 6 * nb;                   // the inertia its first hands on,
  double* v_bias = v_ric + 36 * nb;                // the bias force,
  double* v_acc = v_bias + 6 * nb;                 // its last link's acceleration,
  double* keep = v_acc + 6 * nb;                   // and its bias map's L
  bool mine = b < nb;
  int s = mine ? starts[b] : 0, len = mine ? starts[b + 1] - s : 0, bad = 0;
  // 1. the blocks' velocity and inertia maps, then both scans (a split call's first launch: what
  // the scans leave is in global memory, v_fk, v_ric and the links' records)
  if (STAGE != ABS_FINISH) {
    bad |= abs_lanes_maps(c, s, len, j, q, qd, extra, links, fk_e + CFD_ABS_FK * g,
                          ric_e + CFD_ABS_RIC * g, sm);
    __syncthreads();
    abs_mark(profile, &mk);  // maps
    {
      abs_scan_io io[2] = {
          {CFD_ABS_SCAN_FK, fk_e, fk_e + CFD_ABS_FK * groups, fk_t,
           fk_t + CFD_ABS_FK * CFD_MAX_CLUSTER, v_fk},
          {CFD_ABS_SCAN_RIC, ric_e, ric_e + CFD_ABS_RIC * groups, ric_t,
           ric_t + CFD_ABS_RIC * CFD_MAX_CLUSTER, v_ric}};
      bad |= abs_scan<2>(io, g, groups, nb, j, sm);
    }
    cluster_sync(cl);
    abs_mark(profile, &mk);  // velocity and Riccati scans
    if (STAGE == ABS_BEGIN) {
      if (bad) cfd_gpu_raise(error, CFD_ERR_SINGULAR);
      return;
    }
  }
  // 2. the blocks' inertias from what they are handed, and their bias maps; the bias scan
  double* aff_e[2] = {ric_e, ric_e + CFD_ABS_AFF * groups};
  double* aff_t[2] = {ric_t, ric_t + CFD_ABS_AFF * CFD_MAX_CLUSTER};
  bad |= abs_lanes_inertias(c, s, len, j, qd, tau, extra, mine && b > 0 ? v_fk + 6 * (b - 1) : NULL,
                            mine && b + 1 < nb ? v_ric + 36 * (b + 1) : NULL, links,
                            aff_e[0] + CFD_ABS_AFF * g, keep + 36 * b, sm);
  __syncthreads();
  abs_mark(profile, &mk);  // inertias
  {
    abs_scan_io io[1] = {{CFD_ABS_SCAN_BIAS, aff_e[0], aff_e[1], aff_t[0], aff_t[1], v_bias}};
    bad |= abs_scan<1>(io, g, groups, nb, j, sm);
  }
  cluster_sync(cl);
  abs_mark(profile, &mk);  // bias scan
  // 3. the blocks' u_i (a lane per link), then their acceleration maps and each link's share of
  // qdd (the sweep out's seven parts on seven lanes); the acceleration scan
  if (mine)
    for (int i = s + j; i < s + len; i += ABS_GROUP)
      cfd_abs_block_u(i, i + 1, b + 1 < nb ? v_bias + 6 * (b + 1) : NULL, links);
  __syncwarp();
  if (mine && j < 7) {
    double out[6];
    cfd_abs_block_out(&c, s, s + len, j, links, out);
    cfd_abs_acc_map_part(s, j, keep + 36 * b, out, aff_e[0] + CFD_ABS_AFF * g);
  }
  __syncthreads();
  abs_mark(profile, &mk);  // bias
  {
    abs_scan_io io[1] = {{CFD_ABS_SCAN_ACC, aff_e[0], aff_e[1], aff_t[0], aff_t[1], v_acc}};
    bad |= abs_scan<1>(io, g, groups, nb, j, sm);
  }
  cluster_sync(cl);
  abs_mark(profile, &mk);  // acceleration scan
  // 4. the blocks' accelerations: every link at once, a lane each
  if (mine)
    for (int i = s + j; i < s + len; i += ABS_GROUP)
      cfd_abs_block_qacc(i, i + 1, b > 0 ? v_acc + 6 * (b - 1) : NULL, links, qacc);
  if (profile) cluster_sync(cl);
  abs_mark(profile, &mk);  // accelerations
  if (bad) cfd_gpu_raise(error, CFD_ERR_SINGULAR);
}

static int abs_clamp(int x, int lo, int hi) { return x < lo ? lo : x > hi ? hi : x; }

typedef void (*abs_kernel_fn)(cfd_chain, const int*, int, const double*, const double*,
                              const double*, const double*, double*, double*, long, int*, int,
                              unsigned long long*);
static abs_kernel_fn abs_kernel(int stage) {
  return stage == ABS_BEGIN ? abia_scan_kernel<ABS_BEGIN>
         : stage == ABS_FINISH ? abia_scan_kernel<ABS_FINISH> : abia_scan_kernel<ABS_WHOLE>;
}

static cudaError_t launch_scan(cfd_gpu* g, int B, const double* q, const double* qd,
                               const double* tau, const double* extra, double* qacc, int* error,
                               int error_each, int stage) {
  int n = g->n;
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.stream = g->stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  cudaError_t e = cudaSuccess;
  if (!g->scan_max_cluster) {  // once: the largest cluster the device schedules (16 needs a GPC)
    for (int s = ABS_WHOLE; s <= ABS_FINISH && !e; s++) {
      e = cudaFuncSetAttribute(abs_kernel(s), cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
      if (!e)  // past 48 KiB needs the opt-in: the largest layout's
        e = cudaFuncSetAttribute(abs_kernel(s), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)(sizeof(double) * abs_shared_doubles(ABS_CTA_GROUPS)));
    }
    if (e) return e;
    int cl = CFD_MAX_CLUSTER;
    for (;; cl /= 2) {
      attr[0].val.clusterDim.x = cl;
      cfg.gridDim = dim3(cl);
      cfg.blockDim = dim3(ABS_GROUP * ABS_CTA_GROUPS);
      cfg.dynamicSmemBytes = sizeof(double) * abs_shared_doubles(ABS_CTA_GROUPS);
      int clusters = 0;
      e = cudaOccupancyMaxActiveClusters(&clusters, abs_kernel(ABS_WHOLE), &cfg);
      if (cl == 1 || (e == cudaSuccess && clusters > 0)) break;
      cudaGetLastError();
    }
    g->scan_max_cluster = cl;
  }
  // groups per thread block (whole warps): 16, or 32 past 4096 links, where halving the blocks'
  // length gains more than the SM's 8 warps lose
  int G = g->tune.scan_groups > 0 && g->tune.scan_groups <= ABS_CTA_GROUPS
              ? g->tune.scan_groups / 4 * 4 : n > 4096 ? 32 : 16;
  if (G < 4) G = 4;
  // links per block: 2 for one chain (raised below by the 256-block limit: 3 from 513 links, 4
  // from 769); a batch takes longer blocks, fewer of them, as its many clusters keep the GPU busy
  // where one chain's scans cannot: about n / 128 (2 to 8) from 2 chains, n / 32 (8 to 32) from
  // 32 (chainfd-bench-gpu --only scan; docs/RESULTS.md)
  int m = g->tune.scan_links > 0 ? g->tune.scan_links
          : B >= 32 ? abs_clamp((n + 16) / 32, 8, 32)
          : B >= 2 ? abs_clamp((n + 64) / 128, 2, 8)
                   : ABS_DEFAULT_LINKS;
  int most = G * g->scan_max_cluster, least = (n + most - 1) / most;
  if (m < least) m = least;
  // the partition for m links per block: CFD_SCAN_PARTITIONS are kept (one chain, a few and many
  // use different lengths, and a caller may alternate), a new one made and uploaded in stream
  // order in place of the oldest (a launch before it may still read it)
  int slot = -1;
  for (int k = 0; k < CFD_SCAN_PARTITIONS; k++)
    if (m == g->scan_links[k]) slot = k;
  if (slot < 0) {
    slot = g->scan_oldest;
    int* starts = (int*)malloc(sizeof(int) * (n + 1));
    if (!starts) return cudaErrorMemoryAllocation;
    int nb = cfd_abs_partition(g->scan_can_end, n, m, starts);
    // (from pageable memory the call returns once starts is staged: it may be freed then)
    e = cudaMemcpyAsync(g->scan_starts + (size_t)slot * (n + 1), starts, sizeof(int) * (n + 1),
                        cudaMemcpyHostToDevice, g->stream);
    free(starts);
    g->scan_links[slot] = 0;
    if (e) return e;
    g->scan_links[slot] = m;
    g->scan_nb[slot] = nb;
    g->scan_oldest = (slot + 1) % CFD_SCAN_PARTITIONS;
  }
  g->scan_links_ran = m;
  int nb = g->scan_nb[slot];
  const int* part = g->scan_starts + (size_t)slot * (n + 1);
  long stride = (long)CFD_ABS_LINK * n + (long)ABS_VALUES * nb;
  // instances per launch: the scratch of a chunk within ABS_WORK_BUDGET (a huge forced batch runs
  // in chunks rather than failing to allocate)
  long chunk = (long)(ABS_WORK_BUDGET / (sizeof(double) * (size_t)stride));
  if (chunk < 1) chunk = 1;
  if (chunk > B) chunk = B;
  if (stage != ABS_WHOLE && chunk < B) return cudaErrorInvalidValue;  // (a split's launches share it)
  if ((size_t)stride * chunk > g->scan_doubles) {
    e = cudaStreamSynchronize(g->stream);
    if (!e) e = cudaFree(g->scan_work);
    g->scan_work = NULL;
    g->scan_doubles = 0;
    if (!e) e = cudaMalloc(&g->scan_work, sizeof(double) * (size_t)stride * chunk);
    if (e) return e;
    g->scan_doubles = (size_t)stride * chunk;
  }
  // the fewest thread blocks that give each block of links a group, whole warps each, and at
  // least as many groups per thread block as thread blocks (each group takes one total in
  // abs_scan; only a forced G below 16 needs the second step)
  int CL = (nb + G - 1) / G;
  int groups = ((nb + CL - 1) / CL + 3) / 4 * 4;
  if (groups < CL) {
    groups = (CL + 3) / 4 * 4;
    CL = (nb + groups - 1) / groups;
  }
  attr[0].val.clusterDim.x = CL;
  cfg.blockDim = dim3(ABS_GROUP * groups);
  cfg.dynamicSmemBytes = sizeof(double) * abs_shared_doubles(groups);
  for (long b0 = 0; b0 < B && !e; b0 += chunk) {
    long nc = B - b0 < chunk ? B - b0 : chunk, o = b0 * n;
    cfg.gridDim = dim3((unsigned)(CL * nc));
    e = cudaLaunchKernelEx(&cfg, abs_kernel(stage), g->chain, part, nb,
                           q + o, qd + o, tau + o, extra ? extra + o : NULL, qacc + o,
                           g->scan_work, stride, error_each ? error + b0 : error, error_each,
                           g->tune.profile ? g->marks : (unsigned long long*)NULL);
  }
  return e;
}

cudaError_t cfd_gpu_launch_abia_scan(cfd_gpu* g, int B, const double* q, const double* qd,
                                     const double* tau, const double* extra, double* qacc,
                                     int* error, int stage) {
  return launch_scan(g, B, q, qd, tau, extra, qacc, error, 0, stage);
}

cudaError_t cfd_gpu_launch_abia_scan_each(cfd_gpu* g, int B, const double* q, const double* qd,
                                          const double* tau, const double* extra, double* qacc,
                                          int* errors) {
  return launch_scan(g, B, q, qd, tau, extra, qacc, errors, 1, ABS_WHOLE);
}
