// block_scan.cuh: scans across the threads of one block and across the blocks of one thread-block
// cluster, for the scan-based recursions (id_scan.cuh). Each thread contributes one element (its
// run of links' total) in shared memory; a block's total then reaches the blocks after it in the
// cluster through distributed shared memory, so a chain spread over up to 16 SMs needs one cluster
// barrier per scan. A kernel launched without clusters is a cluster of one block.
#ifndef CHAINFD_BLOCK_SCAN_CUH
#define CHAINFD_BLOCK_SCAN_CUH

#include <cooperative_groups.h>

#include "cfd_math.h"

#define CFD_MAX_CLUSTER 16

// The cluster's barrier, then the block's: the second costs next to nothing after the first, and
// states the block-level ordering of shared memory in the form compute-sanitizer's racecheck
// follows (it does not model cluster barriers).
static __device__ __forceinline__ void cluster_sync(const cooperative_groups::cluster_group& cl) {
  cl.sync();
  __syncthreads();
}

// a <- a o b for poses stored as 12 numbers (R row-major, then p)
static __device__ __forceinline__ void pose_compose(const double* a, const double* b, double* out) {
  double R[9], p[3];
  cfd_se3_mul(a, a + 9, b, b + 9, R, p);
  for (int k = 0; k < 9; k++) out[k] = R[k];
  for (int k = 0; k < 3; k++) out[9 + k] = p[k];
}

static __device__ __forceinline__ void pose_identity(double* a) {
  for (int k = 0; k < 12; k++) a[k] = (k == 0 || k == 4 || k == 8) ? 1.0 : 0.0;
}

// The block scans run in two stages: within each warp by shuffles (no barrier), then across the
// warps through the warps' totals in shared memory (three barriers, where a shared-memory
// Hillis-Steele scan needs two per step). Any block size; a partial last warp takes part with the
// lanes it has.
static __device__ __forceinline__ int warp_width() {
  int left = (int)blockDim.x - (int)(threadIdx.x & ~31u);
  return left < 32 ? left : 32;
}
static __device__ __forceinline__ unsigned warp_mask(int width) {
  return width == 32 ? 0xffffffffu : (1u << width) - 1;
}

// Inclusive scan of the per-thread poses in sh[t*12..]: afterwards sh[t] = sh[0] o ... o sh[t].
static __device__ void block_scan_poses(double* sh) {
  int t = threadIdx.x, lane = t & 31, warp = t >> 5, width = warp_width();
  unsigned mask = warp_mask(width);
  double mine[12];
  for (int k = 0; k < 12; k++) mine[k] = sh[12 * t + k];
  for (int d = 1; d < width; d <<= 1) {
    double other[12], tmp[12];
    for (int k = 0; k < 12; k++) other[k] = __shfl_up_sync(mask, mine[k], d);
    pose_compose(other, mine, tmp);
    if (lane >= d)
      for (int k = 0; k < 12; k++) mine[k] = tmp[k];
  }
  for (int k = 0; k < 12; k++) sh[12 * t + k] = mine[k];  // each thread its own slot
  __syncthreads();
  double before[12];  // the warps before this one, composed in order
  pose_identity(before);
  for (int w = 0; w < warp; w++) {
    double tmp[12];
    pose_compose(before, sh + 12 * (32 * w + 31), tmp);
    for (int k = 0; k < 12; k++) before[k] = tmp[k];
  }
  __syncthreads();
  if (warp > 0) pose_compose(before, mine, sh + 12 * t);
  __syncthreads();
}

// Inclusive sum scan of width-w vectors in sh (reverse: sums from the last thread down).
static __device__ void block_scan_sum(double* sh, int w, bool reverse) {
  int t = threadIdx.x, T = blockDim.x, lane = t & 31, warp = t >> 5, width = warp_width();
  int nwarps = (T + 31) >> 5;
  unsigned mask = warp_mask(width);
  double mine[36];
  for (int k = 0; k < w; k++) mine[k] = sh[w * t + k];
  for (int d = 1; d < width; d <<= 1) {
    bool take = reverse ? lane + d < width : lane >= d;
    for (int k = 0; k < w; k++) {
      double o = reverse ? __shfl_down_sync(mask, mine[k], d) : __shfl_up_sync(mask, mine[k], d);
      if (take) mine[k] += o;
    }
  }
  for (int k = 0; k < w; k++) sh[w * t + k] = mine[k];
  __syncthreads();
  // the totals of the warps ahead in scan order: each warp's first lane (reverse) or last
  double ahead[36];
  for (int k = 0; k < w; k++) ahead[k] = 0;
  int w0 = reverse ? warp + 1 : 0, w1 = reverse ? nwarps : warp;
  for (int v = w0; v < w1; v++) {
    const double* tot = sh + w * (reverse ? 32 * v : 32 * v + 31);  // v < warp: a whole warp
    for (int k = 0; k < w; k++) ahead[k] += tot[k];
  }
  __syncthreads();
  if (w1 > w0)
    for (int k = 0; k < w; k++) sh[w * t + k] = mine[k] + ahead[k];
  __syncthreads();
}

// After block_scan_poses(sh) in every block of the cluster: the composition of the totals of the
// blocks ranked before this one (the identity in the first). tot: CFD_MAX_CLUSTER * 12 shared
// doubles. sh must stay unwritten until the cluster's next barrier (callers alternate buffers).
static __device__ void cluster_pose_prefix(const double* sh, double* tot, double out[12]) {
  namespace cg = cooperative_groups;
  cg::cluster_group cl = cg::this_cluster();
  int r = (int)cl.block_rank(), t = threadIdx.x, T = blockDim.x;
  pose_identity(out);
  if (cl.num_blocks() == 1) return;
  cluster_sync(cl);
  if (t < r) {
    const double* src = cl.map_shared_rank(sh, t) + 12 * (T - 1);
    for (int k = 0; k < 12; k++) tot[12 * t + k] = src[k];
  }
  __syncthreads();
  for (int j = 0; j < r; j++) {
    double tmp[12];
    pose_compose(out, tot + 12 * j, tmp);
    for (int k = 0; k < 12; k++) out[k] = tmp[k];
  }
}

// After block_scan_sum(sh, w, reverse) in every block: the sum of the totals of the blocks before
// this one in scan order (ranks below, or above when reverse). Same rules as cluster_pose_prefix.
static __device__ void cluster_sum_prefix(const double* sh, double* tot, int w, bool reverse,
                                          double* out) {
  namespace cg = cooperative_groups;
  cg::cluster_group cl = cg::this_cluster();
  int r = (int)cl.block_rank(), R = (int)cl.num_blocks(), t = threadIdx.x, T = blockDim.x;
  for (int k = 0; k < w; k++) out[k] = 0;
  if (R == 1) return;
  cluster_sync(cl);
  int before = reverse ? R - 1 - r : r;  // blocks ahead in scan order
  if (t < before) {
    int src_rank = reverse ? r + 1 + t : t;
    const double* src = cl.map_shared_rank(sh, src_rank) + w * (reverse ? 0 : T - 1);
    for (int k = 0; k < w; k++) tot[w * t + k] = src[k];
  }
  __syncthreads();
  for (int j = 0; j < before; j++)
    for (int k = 0; k < w; k++) out[k] += tot[w * j + k];
}

#endif  // CHAINFD_BLOCK_SCAN_CUH
