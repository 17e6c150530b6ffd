// ABIA for one long chain (or a few) as scans over blocks of links (aba_scan.h; its CPU twin is
// cpu/abia_scan_cpu.c, the same steps in the same order). A group of 8 lanes per block of links
// (aba_scan_lanes.cuh), 16 groups per thread block (32 past 4096 links), up to 16 thread blocks per chain in
// one cluster (16 SMs): each group runs its own links' sweeps, and what the blocks hand each other
// (velocities, articulated inertias as Riccati maps, bias forces, accelerations) comes from
// Hillis-Steele scans across the groups, ceil(log2 blocks) steps each, the maps in global memory
// (L2) between cluster barriers. A chain's sequential depth is its links per block plus a few
// dozen map compositions, where the sweeps of the other kernels take every link in turn; and
// unlike CFA it stays accurate at any length.
#include <cooperative_groups.h>

#include "aba_scan_lanes.cuh"
#include "block_scan.cuh"
#include "gpu_internal.h"

namespace cg = cooperative_groups;

// 16 groups (128 threads) per thread block, so that a thread may keep 255 registers (with 64
// groups on one SM they spilled, and the SM's double-precision units were the limit), 32 past
// 4096 links; up to 16 thread blocks per cluster: up to 256 blocks of links (512 past 4096
// links), longer chains get longer blocks.
#define ABS_CTA_GROUPS 32  // at most (launch bound); 16 by default (cfd_gpu_abia_scan_groups)
#define ABS_DEFAULT_LINKS 4  // bench --only scan: 512 and 1023 links best at 2 to 4
#define ABS_WORK_BUDGET ((size_t)4 << 30)  // bytes of scratch per launch (as gpu.cu's batches)

int cfd_gpu_abia_scan_links = 0;  // gpu_tuning.h
int cfd_gpu_abia_scan_chosen = 0;
int cfd_gpu_abia_scan_groups = 0;  // gpu_tuning.h: 0 = 16 groups per thread block
int cfd_gpu_abia_scan_profile = 0;
__device__ unsigned long long abs_marks[64];

// the GPU's nanosecond clock at the end of a phase (after its barrier), instance 0, thread 0
__device__ __forceinline__ void abs_mark(int profile, int* k) {
  if (profile && blockIdx.x == 0 && threadIdx.x == 0 && *k < 64) abs_marks[*k] = cfd_gpu_clock_ns();
  (*k)++;
}

int cfd_gpu_abia_scan_phases(double* us, int max) {
  unsigned long long t[64];
  if (cudaMemcpyFromSymbol(t, abs_marks, sizeof t)) return 0;
  return cfd_gpu_phases_from_marks(t, us, max);
}

// One scan over the nb elements in buf[cur], every thread of the cluster taking part; returns the
// buffer holding the result.
__device__ int abs_scan(int kind, int b, int nb, int j, double* buf0, double* buf1, int cur,
                        double* sm, int* bad) {
  cg::cluster_group cl = cg::this_cluster();
  for (int k = 1; k < nb; k *= 2, cur ^= 1) {
    *bad |= abs_lanes_step(kind, b, nb, k, cur ? buf1 : buf0, cur ? buf0 : buf1, j, sm);
    cluster_sync(cl);
  }
  return cur;
}

__global__ void __launch_bounds__(ABS_GROUP * ABS_CTA_GROUPS)
abia_scan_kernel(cfd_chain c, const int* __restrict__ starts, int nb, const double* __restrict__ q,
                 const double* __restrict__ qd, const double* __restrict__ tau,
                 const double* __restrict__ extra, double* __restrict__ qacc, double* work,
                 long stride, int* error, int profile) {
  extern __shared__ double shared[];
  int mk = 0;
  abs_mark(profile, &mk);
  cg::cluster_group cl = cg::this_cluster();
  int CL = (int)cl.num_blocks(), groups = blockDim.x / ABS_GROUP;
  int n = c.n, j = threadIdx.x % ABS_GROUP;
  int b = (int)cl.block_rank() * groups + threadIdx.x / ABS_GROUP;  // the group's block of links
  double* sm = shared + ABS_SHARED * (threadIdx.x / ABS_GROUP);
  long inst = blockIdx.x / CL, o = inst * n;
  q += o, qd += o, tau += o, qacc += o;
  if (extra) extra += o;
  double* links = work + inst * stride;
  double* fk0 = links + (long)CFD_ABS_LINK * n;
  double* fk1 = fk0 + CFD_ABS_FK * nb;
  double* ric0 = fk1 + CFD_ABS_FK * nb;
  double* ric1 = ric0 + CFD_ABS_RIC * nb;
  double* aff0 = ric1 + CFD_ABS_RIC * nb;
  double* aff1 = aff0 + CFD_ABS_AFF * nb;
  double* keep = aff1 + CFD_ABS_AFF * nb;
  bool mine = b < nb;
  int s = mine ? starts[b] : 0, len = mine ? starts[b + 1] - s : 0, bad = 0;
  // 1. the blocks' velocity and inertia maps, then both scans
  bad |= abs_lanes_maps(c, s, len, j, q, qd, extra, links, fk0 + CFD_ABS_FK * b,
                        ric0 + CFD_ABS_RIC * b, sm);
  cluster_sync(cl);
  abs_mark(profile, &mk);  // maps
  int f = 0, r = 0;
  for (int k = 1; k < nb; k *= 2, f ^= 1, r ^= 1) {  // both steps' copies in flight at once
    abs_lanes_fetch(CFD_ABS_SCAN_FK, b, nb, k, f ? fk1 : fk0, j, sm);
    abs_lanes_fetch(CFD_ABS_SCAN_RIC, b, nb, k, r ? ric1 : ric0, j, sm);
    abs_stage_wait();
    __syncwarp();
    abs_lanes_compose(CFD_ABS_SCAN_FK, b, nb, k, f ? fk0 : fk1, j, sm);
    bad |= abs_lanes_compose(CFD_ABS_SCAN_RIC, b, nb, k, r ? ric0 : ric1, j, sm);
    cluster_sync(cl);
  }
  abs_mark(profile, &mk);  // velocity and Riccati scans
  double* fkr = f ? fk1 : fk0;
  double* ricr = r ? ric1 : ric0;
  // 2. the blocks' inertias from what they are handed, and their bias maps; the bias scan
  bad |= abs_lanes_inertias(c, s, len, j, qd, tau, extra,
                            mine && b > 0 ? fkr + CFD_ABS_FK * (b - 1) + 12 : NULL,
                            mine && b + 1 < nb ? ricr + CFD_ABS_RIC * (b + 1) : NULL, links,
                            aff0 + CFD_ABS_AFF * b, keep + 36 * b, sm);
  cluster_sync(cl);
  abs_mark(profile, &mk);  // inertias
  int p = abs_scan(CFD_ABS_SCAN_BIAS, b, nb, j, aff0, aff1, 0, sm, &bad);
  abs_mark(profile, &mk);  // bias scan
  double* affp = p ? aff1 : aff0;
  double* affo = p ? aff0 : aff1;
  // 3. the blocks' u_i and acceleration maps (into the other buffer): 6-vectors, on one lane; the
  // acceleration scan
  if (mine && j == 0)
    cfd_abs_block_bias(&c, s, s + len, tau, b + 1 < nb ? affp + CFD_ABS_AFF * (b + 1) + 36 : NULL,
                       links, keep + 36 * b, affo + CFD_ABS_AFF * b);
  cluster_sync(cl);
  abs_mark(profile, &mk);  // bias
  int a = abs_scan(CFD_ABS_SCAN_ACC, b, nb, j, aff0, aff1, p ^ 1, sm, &bad);
  abs_mark(profile, &mk);  // acceleration scan
  double* affa = a ? aff1 : aff0;
  // 4. the blocks' accelerations
  if (mine && j == 0)
    cfd_abs_block_qacc(&c, s, s + len, b > 0 ? affa + CFD_ABS_AFF * (b - 1) + 36 : NULL, links,
                       qacc);
  if (profile) cluster_sync(cl);
  abs_mark(profile, &mk);  // accelerations
  if (bad) cfd_gpu_raise(error, CFD_ERR_SINGULAR);
}

cudaError_t cfd_gpu_launch_abia_scan(cfd_gpu* g, int B, const double* q, const double* qd,
                                     const double* tau, const double* extra, double* qacc,
                                     int* error) {
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
    e = cudaFuncSetAttribute(abia_scan_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (!e)  // past 48 KiB needs the opt-in: the largest layout's
      e = cudaFuncSetAttribute(abia_scan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               (int)(sizeof(double) * ABS_SHARED * ABS_CTA_GROUPS));
    if (e) return e;
    int cl = CFD_MAX_CLUSTER;
    for (;; cl /= 2) {
      attr[0].val.clusterDim.x = cl;
      cfg.gridDim = dim3(cl);
      cfg.blockDim = dim3(ABS_GROUP * ABS_CTA_GROUPS);
      cfg.dynamicSmemBytes = sizeof(double) * ABS_SHARED * ABS_CTA_GROUPS;
      int clusters = 0;
      e = cudaOccupancyMaxActiveClusters(&clusters, abia_scan_kernel, &cfg);
      if (cl == 1 || (e == cudaSuccess && clusters > 0)) break;
      cudaGetLastError();
    }
    g->scan_max_cluster = cl;
  }
  // groups per thread block (whole warps): 16, or 32 past 4096 links, where halving the blocks'
  // length gains more than the SM's 8 warps lose (16,384 links: 341 against 431 us)
  int G = cfd_gpu_abia_scan_groups > 0 && cfd_gpu_abia_scan_groups <= ABS_CTA_GROUPS
              ? cfd_gpu_abia_scan_groups / 4 * 4 : n > 4096 ? 32 : 16;
  if (G < 4) G = 4;
  // links per block: 4 for one chain or a few, 8 from 32 chains on (B = 64, 1023 links: 413
  // against 614 us; fewer groups, less contention for the SMs)
  int m = cfd_gpu_abia_scan_links > 0 ? cfd_gpu_abia_scan_links
          : B >= 32 ? 2 * ABS_DEFAULT_LINKS : ABS_DEFAULT_LINKS;
  int most = G * g->scan_max_cluster, least = (n + most - 1) / most;
  if (m < least) m = least;
  // the partition for m links per block: two are kept (one chain and a batch of 32 or more use
  // different lengths, and a caller may alternate), a new one made and uploaded in stream order in
  // place of the older (a launch before it may still read it)
  int slot = m == g->scan_links[0] ? 0 : m == g->scan_links[1] ? 1 : -1;
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
    g->scan_oldest = slot ^ 1;
  }
  cfd_gpu_abia_scan_chosen = m;
  int nb = g->scan_nb[slot];
  const int* part = g->scan_starts + (size_t)slot * (n + 1);
  long stride = (long)CFD_ABS_LINK * n + (long)CFD_ABS_BLOCK * nb;
  // instances per launch: the scratch of a chunk within ABS_WORK_BUDGET (a huge forced batch runs
  // in chunks rather than failing to allocate)
  long chunk = (long)(ABS_WORK_BUDGET / (sizeof(double) * (size_t)stride));
  if (chunk < 1) chunk = 1;
  if (chunk > B) chunk = B;
  if ((size_t)stride * chunk > g->scan_doubles) {
    e = cudaStreamSynchronize(g->stream);
    if (!e) e = cudaFree(g->scan_work);
    g->scan_work = NULL;
    g->scan_doubles = 0;
    if (!e) e = cudaMalloc(&g->scan_work, sizeof(double) * (size_t)stride * chunk);
    if (e) return e;
    g->scan_doubles = (size_t)stride * chunk;
  }
  // the fewest thread blocks that give each block of links a group, whole warps each
  int CL = (nb + G - 1) / G;
  int groups = ((nb + CL - 1) / CL + 3) / 4 * 4;
  attr[0].val.clusterDim.x = CL;
  cfg.blockDim = dim3(ABS_GROUP * groups);
  cfg.dynamicSmemBytes = sizeof(double) * ABS_SHARED * groups;
  for (long b0 = 0; b0 < B && !e; b0 += chunk) {
    long nc = B - b0 < chunk ? B - b0 : chunk, o = b0 * n;
    cfg.gridDim = dim3((unsigned)(CL * nc));
    e = cudaLaunchKernelEx(&cfg, abia_scan_kernel, g->chain, part, nb,
                           q + o, qd + o, tau + o, extra ? extra + o : NULL, qacc + o,
                           g->scan_work, stride, error, cfd_gpu_abia_scan_profile);
  }
  return e;
}
