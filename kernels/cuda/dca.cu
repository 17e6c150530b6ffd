// cuda.dca: DCAe (dca.h) on the GPU, the steps of cpu/dca_cpu.c through the same functions. An
// instance is a thread-block cluster of up to 16 blocks of W warps, a warp per subsystem (its
// links' poses over its lanes, its sweeps on its first lane, the working set in shared memory),
// and the assembly tree's nodes in the shared memory of the
// block that holds their first subsystem: the levels within a block with a block barrier each,
// the levels across blocks (a node's right half in another block, read and written through
// distributed shared memory) with a cluster barrier each. The dependent path: a subsystem's links
// (velocities, two sweeps, the accelerations) and the tree's depth four times (velocity maps up,
// velocities down, assembly up, boundary conditions down).
#include <cooperative_groups.h>

#include "dca.h"
#include "gpu_internal.h"

namespace cg = cooperative_groups;

#define DCA_MAX_WARPS 16     // warps (subsystems) per thread block
#define DCA_MAX_CLUSTER 16   // thread blocks per instance
#define DCA_MAX_SUBSYSTEMS (DCA_MAX_WARPS * DCA_MAX_CLUSTER)
#define DCA_SMEM_MAX (227 * 1024)

// the GPU's nanosecond clock at the end of a phase (instance 0, its first block, thread 0)
__device__ __forceinline__ void dca_mark(unsigned long long* marks, int* k) {
  if (marks && blockIdx.x == 0 && threadIdx.x == 0 && *k < 64) marks[*k] = cfd_gpu_clock_ns();
  (*k)++;
}

// The tree's node (l, j) lives in the block that holds its first subsystem, j 2^l (its owner), in
// slot: level 0 .. lw (2^lw = W) a block's own subtree, level by level; above, one slot a level.
struct dca_tree {
  int W, lw, top, first[CFD_DCA_MAX_LEVELS], count[CFD_DCA_MAX_LEVELS];
  double* nodes;  // this block's
  __device__ int owner(int l, int j) const { return (j << l) / W; }
  __device__ int slot(int l, int j) const {
    if (l > lw) return 2 * W - 1 + (l - lw - 1);
    int off = 0;
    for (int k = 0; k < l; k++) off += W >> k;
    return off + j - owner(l, j) * (W >> l);
  }
  __device__ double* at(const cg::cluster_group& cl, int l, int j) const {
    int o = owner(l, j);
    double* base = o == (int)cl.block_rank() ? nodes : cl.map_shared_rank(nodes, o);
    return base + (size_t)slot(l, j) * CFD_DCA_NODE;
  }
  // the node of level l this block's warp w processes (-1: none)
  __device__ int mine(int l, int rank, int w) const {
    int j = l <= lw ? rank * (W >> l) + w : (w == 0 && ((rank << lw) % (1 << l)) == 0 ? (rank << lw) >> l : -1);
    return l <= lw && w >= (W >> l) ? -1 : j >= 0 && j < count[l] ? j : -1;
  }
};

__device__ __forceinline__ void dca_level_sync(const cg::cluster_group& cl, int l, int lw) {
  if (l > lw) cl.sync();
  else __syncthreads();
}

__global__ void __launch_bounds__(32 * DCA_MAX_WARPS)
dca_kernel(cfd_chain c, int p, int W, int Lmax, const int* __restrict__ starts,
           const double* __restrict__ q, const double* __restrict__ qd,
           const double* __restrict__ tau, const double* __restrict__ extra, double* qacc,
           double* work, size_t stride, int shared_records, int leaf_lanes, int* flag,
           unsigned long long* marks) {
  extern __shared__ double smem[];
  cg::cluster_group cl = cg::this_cluster();
  int n = c.n, rank = (int)cl.block_rank(), CL = (int)cl.num_blocks(), mk = 0;
  int w = threadIdx.x >> 5, lane = threadIdx.x & 31;
  size_t b = blockIdx.x / CL;
  dca_mark(marks, &mk);
  const double *qb = q + b * n, *qdb = qd + b * n, *taub = tau + b * n;
  const double* exb = extra ? extra + b * n : NULL;
  dca_tree T;
  T.W = W;
  T.lw = 0;
  while ((1 << T.lw) < W) T.lw++;
  T.top = cfd_dca_levels(p, T.first, T.count);
  double* s = smem + (size_t)CFD_DCA_SCRATCH * w;
  T.nodes = smem + (size_t)CFD_DCA_SCRATCH * W;
  int k = rank * W + w, here = k < p;
  int a = here ? starts[k] : 0, e = here ? starts[k + 1] : 0, last = k == p - 1;
  double* L = shared_records ? T.nodes + (size_t)(2 * W + 4) * CFD_DCA_NODE + (size_t)w * (Lmax + 1) * CFD_DCA_LINK
                             : work + b * stride + (size_t)(a + k) * CFD_DCA_LINK;
  double* leaf = here ? T.at(cl, 0, k) : NULL;  // (level 0: this block's own)
  // 1. poses and velocity maps, up the tree; the velocities down it
  if (here) {
    cfd_dca_poses(&c, a, e, last, qb, L, lane, 32);
    __syncwarp();
    if (lane == 0) cfd_dca_velocity_map(&c, a, e, qdb, L, leaf + DCA_NODE_FK);
  }
  __syncthreads();
  for (int l = 1; l <= T.top; l++) {
    dca_level_sync(cl, l, T.lw);
    int j = T.mine(l, rank, w);
    if (j >= 0 && lane == 0) {
      double *node = T.at(cl, l, j), *left = T.at(cl, l - 1, 2 * j);
      if (2 * j + 1 < T.count[l - 1])
        cfd_abs_fk_compose(T.at(cl, l - 1, 2 * j + 1) + DCA_NODE_FK, left + DCA_NODE_FK, node + DCA_NODE_FK);
      else
        for (int x = 0; x < 18; x++) node[DCA_NODE_FK + x] = left[DCA_NODE_FK + x];
    }
  }
  __syncthreads();
  if (rank == 0 && threadIdx.x < 6) T.at(cl, T.top, 0)[DCA_NODE_V + threadIdx.x] = 0;  // at rest
  __syncthreads();
  // (down the tree a barrier after each level: a cluster barrier where its right halves lie in
  // other blocks)
  for (int l = T.top; l >= 1; l--) {
    int j = T.mine(l, rank, w);
    if (j >= 0 && lane == 0) {
      double *node = T.at(cl, l, j), *left = T.at(cl, l - 1, 2 * j);
      for (int x = 0; x < 6; x++) left[DCA_NODE_V + x] = node[DCA_NODE_V + x];
      if (2 * j + 1 < T.count[l - 1])
        cfd_dca_velocity_apply(left + DCA_NODE_FK, node + DCA_NODE_V, T.at(cl, l - 1, 2 * j + 1) + DCA_NODE_V);
    }
    dca_level_sync(cl, l, T.lw);
  }
  __syncthreads();
  dca_mark(marks, &mk);
  // 2. each subsystem's handle equations by its warp, assembled up the tree
  // (on the warp's first lane unless leaf_lanes: the stages spread over the warp's 32 lanes gave
  // NaN on the device for some chains, where the same stages on 32 host threads with barriers do
  // not; unresolved, docs/LOG.md)
  if (here && leaf_lanes) {
    int bad = 0;
    CFD_DCA_LEAF(&c, a, e, last, qdb, taub, exb, leaf + DCA_NODE_V, L, leaf + DCA_NODE_H, s, lane, 32,
                 __syncwarp(), bad);
    if (bad && lane == 0) cfd_gpu_raise(flag, CFD_ERR_SINGULAR);
  } else if (here && lane == 0) {
    int bad = 0;
    CFD_DCA_LEAF(&c, a, e, last, qdb, taub, exb, leaf + DCA_NODE_V, L, leaf + DCA_NODE_H, s, 0, 1,
                 (void)0, bad);
    if (bad) cfd_gpu_raise(flag, CFD_ERR_SINGULAR);
  }
  __syncthreads();
  dca_mark(marks, &mk);
  for (int l = 1; l <= T.top; l++) {
    dca_level_sync(cl, l, T.lw);
    int j = T.mine(l, rank, w);
    // (every lane of every warp reaches each __syncwarp: j is the warp's)
    double *node = j >= 0 ? T.at(cl, l, j) : NULL, *left = j >= 0 ? T.at(cl, l - 1, 2 * j) : NULL;
    int two = j >= 0 && 2 * j + 1 < T.count[l - 1];
    double* right = two ? T.at(cl, l - 1, 2 * j + 1) : NULL;
    double* js = node ? node + DCA_NODE_S : NULL;
    if (two) cfd_dca_join_rhs(left + DCA_NODE_H, right + DCA_NODE_H, js, js + 36, lane, 32);
    else if (j >= 0)
      for (int x = lane; x < CFD_DCA_HANDLE; x += 32) node[DCA_NODE_H + x] = left[DCA_NODE_H + x];
    __syncwarp();
    if (two && lane == 0 && cfd_dca_join_factor(js, js + 114)) cfd_gpu_raise(flag, CFD_ERR_SINGULAR);
    __syncwarp();
    if (two) cfd_dca_join_solve(js, js + 114, js + 36, node + DCA_NODE_J, lane, 32);
    __syncwarp();
    if (two) cfd_dca_join_y(right + DCA_NODE_H, node + DCA_NODE_J, lane, 32);
    __syncwarp();
    if (two)
      cfd_dca_join_handles(left + DCA_NODE_H, right + DCA_NODE_H, node + DCA_NODE_J, node + DCA_NODE_H, lane, 32);
  }
  __syncthreads();
  dca_mark(marks, &mk);
  // 3. the boundary conditions down the tree, and each subsystem's accelerations
  if (rank == 0 && threadIdx.x == 0) {
    double* root = T.at(cl, T.top, 0);
    cfd_dca_base_input(&c, L, root + DCA_NODE_A);  // (block 0, warp 0: link 0's records)
    for (int x = 0; x < 6; x++) root[DCA_NODE_F + x] = 0;
  }
  __syncthreads();
  for (int l = T.top; l >= 1; l--) {
    int j = T.mine(l, rank, w);
    if (j >= 0) {
      double *node = T.at(cl, l, j), *left = T.at(cl, l - 1, 2 * j);
      if (2 * j + 1 < T.count[l - 1]) {
        double* right = T.at(cl, l - 1, 2 * j + 1);
        cfd_dca_disassemble(node + DCA_NODE_J, node + DCA_NODE_A, node + DCA_NODE_F, left + DCA_NODE_A,
                            left + DCA_NODE_F, right + DCA_NODE_A, right + DCA_NODE_F, lane, 32);
      } else {
        for (int x = lane; x < 12; x += 32) left[DCA_NODE_A + x] = node[DCA_NODE_A + x];  // A, f
      }
    }
    dca_level_sync(cl, l, T.lw);
  }
  __syncthreads();
  dca_mark(marks, &mk);
  if (here && lane == 0) cfd_dca_finish(&c, a, e, L, leaf + DCA_NODE_A, leaf + DCA_NODE_F, qacc + b * n);
  dca_mark(marks, &mk);
}

// The rule: about 256 subsystems, at least CFD_DCA_LINKS_DEFAULT links each
int cfd_gpu_dca_links(const cfd_gpu* g) {
  if (g->alg != CFD_GPU_DCA) return 0;
  int least = (g->n + DCA_MAX_SUBSYSTEMS - 1) / DCA_MAX_SUBSYSTEMS;  // a warp per subsystem
  int m = g->tune.dca_links > 0 ? g->tune.dca_links : CFD_DCA_LINKS_DEFAULT;
  return m < least ? least : m;
}

size_t cfd_gpu_dca_doubles(int n, int m) {  // the records, where they do not fit shared memory
  int p = (n + m - 1) / m;  // at most (cfd_abs_partition's blocks have at least m links)
  return ((size_t)n + (p < DCA_MAX_SUBSYSTEMS ? p : DCA_MAX_SUBSYSTEMS)) * CFD_DCA_LINK;
}

// shared memory of a block of W warps: the warps' working sets, the tree's slots, the records
static size_t dca_smem(int W, int Lmax, int shared_records) {
  return sizeof(double) * ((size_t)CFD_DCA_SCRATCH * W + (size_t)(2 * W + 4) * CFD_DCA_NODE +
                           (shared_records ? (size_t)W * (Lmax + 1) * CFD_DCA_LINK : 0));
}

cudaError_t cfd_gpu_launch_dca(cfd_gpu* g, int B, const double* q, const double* qd,
                               const double* tau, const double* extra, double* qacc) {
  int n = g->n, m = cfd_gpu_dca_links(g);
  cudaError_t e = cudaSuccess;
  if (m != g->dca_links) {  // the partition for this many links per subsystem, once per choice
    if (!g->dca_links) {
      e = cudaFuncSetAttribute(dca_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
      if (!e) e = cudaFuncSetAttribute(dca_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, DCA_SMEM_MAX);
      if (e) return e;
    }
    int* starts = (int*)malloc(sizeof(int) * (n + 1));
    if (!starts) return cudaErrorMemoryAllocation;
    int p, W, CL, Lmax, sh;
    for (int mm = m;; mm *= 2) {  // longer subsystems while the device cannot hold the cluster
      p = cfd_abs_partition(g->scan_can_end, n, mm, starts), Lmax = 0;
      for (int k = 0; k < p; k++) Lmax = starts[k + 1] - starts[k] > Lmax ? starts[k + 1] - starts[k] : Lmax;
      for (W = 1; W < p && W < DCA_MAX_WARPS; W *= 2) {
      }
      CL = (p + W - 1) / W;
      sh = dca_smem(W, Lmax, 1) <= DCA_SMEM_MAX;
      cudaLaunchConfig_t cfg = {};
      cudaLaunchAttribute attr[1];
      cfg.blockDim = dim3(32 * W);
      cfg.gridDim = dim3(CL);
      cfg.dynamicSmemBytes = dca_smem(W, Lmax, sh);
      cfg.attrs = attr;
      cfg.numAttrs = 1;
      attr[0].id = cudaLaunchAttributeClusterDimension;
      attr[0].val.clusterDim.x = CL;
      attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
      int clusters = 0;
      if (CL == 1 || (cudaOccupancyMaxActiveClusters(&clusters, dca_kernel, &cfg) == cudaSuccess && clusters > 0))
        break;
      cudaGetLastError();
    }
    e = cudaStreamSynchronize(g->stream);  // (a launch may still read the old partition)
    if (!e) e = cudaMemcpy(g->dca_starts, starts, sizeof(int) * (n + 1), cudaMemcpyHostToDevice);
    free(starts);
    if (e) return e;
    g->dca_links = m, g->dca_p = p, g->dca_warps = W, g->dca_lmax = Lmax, g->dca_cluster = CL;
    g->dca_shared_records = sh;
  }
  int W = g->dca_warps, CL = g->dca_cluster;
  cudaLaunchConfig_t cfg = {};
  cudaLaunchAttribute attr[1];
  cfg.blockDim = dim3(32 * W);
  cfg.gridDim = dim3((unsigned)(CL * (long)B));
  cfg.dynamicSmemBytes = dca_smem(W, g->dca_lmax, g->dca_shared_records);
  cfg.stream = g->stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = CL;
  attr[0].val.clusterDim.y = attr[0].val.clusterDim.z = 1;
  return cudaLaunchKernelEx(&cfg, dca_kernel, g->chain, g->dca_p, W, g->dca_lmax,
                            (const int*)g->dca_starts, q, qd, tau, extra, qacc, g->work,
                            cfd_gpu_dca_doubles(n, m), g->dca_shared_records, g->tune.dca_leaf_lanes,
                            cfd_gpu_error_flag(g),
                            g->tune.profile ? g->marks : (unsigned long long*)NULL);
}
