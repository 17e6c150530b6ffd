// block_scan.cuh: scans across the threads of one block, for the scan-based recursions (id.cu,
// jsiia.cu). Each thread contributes one element (its run of links' total) in shared memory.
#ifndef CHAINFD_BLOCK_SCAN_CUH
#define CHAINFD_BLOCK_SCAN_CUH

#include "cfd_math.h"

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

// Inclusive scan of the per-thread poses in sh[t*12..]: afterwards sh[t] = sh[0] o ... o sh[t].
static __device__ void block_scan_poses(double* sh) {
  int t = threadIdx.x, T = blockDim.x;
  for (int d = 1; d < T; d <<= 1) {
    double mine[12], other[12];
    for (int k = 0; k < 12; k++) mine[k] = sh[12 * t + k];
    if (t >= d)
      for (int k = 0; k < 12; k++) other[k] = sh[12 * (t - d) + k];
    __syncthreads();
    if (t >= d) pose_compose(other, mine, sh + 12 * t);
    __syncthreads();
  }
}

// Inclusive sum scan of width-w vectors in sh (reverse: sums from the last thread down).
static __device__ void block_scan_sum(double* sh, int w, bool reverse) {
  int t = threadIdx.x, T = blockDim.x;
  int pos = reverse ? T - 1 - t : t;  // position in scan order
  for (int d = 1; d < T; d <<= 1) {
    double other[36];
    bool take = pos >= d;
    int src = reverse ? t + d : t - d;
    if (take)
      for (int k = 0; k < w; k++) other[k] = sh[w * src + k];
    __syncthreads();
    if (take)
      for (int k = 0; k < w; k++) sh[w * t + k] += other[k];
    __syncthreads();
  }
}

#endif  // CHAINFD_BLOCK_SCAN_CUH
