// cuda.dca: DCAe (dca.h) on the GPU, the steps of cpu/dca_cpu.c in the same order through the
// same functions. One thread block per instance, its subsystems a thread each for their own
// links (the velocity maps, the handle equations by the symbolic ABA, the accelerations), the
// tree's levels between them with a block barrier each: the velocity maps up and the velocities
// down a thread per node; the assembly up and the boundary conditions down a group of lanes per
// node (a warp at the upper levels, fewer lanes where a level has more nodes than the block has
// warps), the join's entries spread over the group's lanes with a warp barrier between stages.
// The dependent path: a subsystem's links three times, then the tree's depth twice.
#include "dca.h"
#include "gpu_internal.h"

#define DCA_MAX_THREADS 1024
#define DCA_MAX_SUBSYSTEMS DCA_MAX_THREADS  // a thread per subsystem

// the GPU's nanosecond clock at the end of a phase (instance 0, thread 0), when profiling
__device__ __forceinline__ void dca_mark(unsigned long long* marks, int* k) {
  if (marks && blockIdx.x == 0 && threadIdx.x == 0 && *k < 64) marks[*k] = cfd_gpu_clock_ns();
  (*k)++;
}

// lanes per node for a level of `count` nodes on T threads: 32, halved while the groups would not
// cover the level
__device__ __forceinline__ int dca_lanes(int count, int T) {
  int lanes = 32;
  while (lanes > 1 && count * lanes > T) lanes /= 2;
  return lanes;
}

__global__ void __launch_bounds__(DCA_MAX_THREADS)
dca_kernel(cfd_chain c, int p, const int* __restrict__ starts, const double* __restrict__ q,
           const double* __restrict__ qd, const double* __restrict__ tau,
           const double* __restrict__ extra, double* qacc, double* work, size_t stride, int* flag,
           unsigned long long* marks) {
  int n = c.n, t = threadIdx.x, T = blockDim.x, mk = 0;
  size_t b = blockIdx.x;
  dca_mark(marks, &mk);
  const double *qb = q + b * n, *qdb = qd + b * n, *taub = tau + b * n;
  const double* exb = extra ? extra + b * n : NULL;
  double* L = work + b * stride;
  double* tree = L + (size_t)n * CFD_DCA_LINK;
  double* leaf = tree + (2 * (size_t)p + CFD_DCA_MAX_LEVELS) * CFD_DCA_NODE;
  int first[CFD_DCA_MAX_LEVELS], count[CFD_DCA_MAX_LEVELS], top = cfd_dca_levels(p, first, count);
#define NODE_AT(l, j) (tree + (size_t)(first[l] + (j)) * CFD_DCA_NODE)
  // 1. velocity maps, up the tree, velocities down it
  if (t < p)
    cfd_dca_velocity_map(&c, starts[t], starts[t + 1], qb, qdb, L + (size_t)CFD_DCA_LINK * starts[t],
                         NODE_AT(0, t) + DCA_NODE_FK);
  __syncthreads();
  for (int l = 1; l <= top; l++) {
    if (t < count[l]) {
      double *left = NODE_AT(l - 1, 2 * t), *node = NODE_AT(l, t);
      if (2 * t + 1 < count[l - 1])
        cfd_abs_fk_compose(NODE_AT(l - 1, 2 * t + 1) + DCA_NODE_FK, left + DCA_NODE_FK, node + DCA_NODE_FK);
      else
        for (int k = 0; k < 18; k++) node[DCA_NODE_FK + k] = left[DCA_NODE_FK + k];
    }
    __syncthreads();
  }
  if (t < 6) NODE_AT(top, 0)[DCA_NODE_V + t] = 0;  // the world at rest
  __syncthreads();
  for (int l = top; l >= 1; l--) {
    if (t < count[l]) {
      double *node = NODE_AT(l, t), *left = NODE_AT(l - 1, 2 * t);
      for (int k = 0; k < 6; k++) left[DCA_NODE_V + k] = node[DCA_NODE_V + k];
      if (2 * t + 1 < count[l - 1])
        cfd_dca_velocity_apply(left + DCA_NODE_FK, node + DCA_NODE_V, NODE_AT(l - 1, 2 * t + 1) + DCA_NODE_V);
    }
    __syncthreads();
  }
  dca_mark(marks, &mk);
  // 2. each subsystem's handle equations, assembled up the tree
  if (t < p) {
    double* node = NODE_AT(0, t);
    if (cfd_dca_leaf(&c, starts[t], starts[t + 1], t == p - 1, qdb, taub, exb, node + DCA_NODE_V,
                     L + (size_t)CFD_DCA_LINK * starts[t], node + DCA_NODE_H, leaf + (size_t)CFD_DCA_SCRATCH * t))
      cfd_gpu_raise(flag, CFD_ERR_SINGULAR);
  }
  __syncthreads();
  dca_mark(marks, &mk);
  for (int l = 1; l <= top; l++) {
    int lanes = dca_lanes(count[l], T), g = t / lanes, lane = t % lanes;
    int here = g < count[l], two = here && 2 * g + 1 < count[l - 1];
    double *node = here ? NODE_AT(l, g) : NULL, *left = here ? NODE_AT(l - 1, 2 * g) : NULL;
    double* right = two ? NODE_AT(l - 1, 2 * g + 1) : NULL;
    double* s = here ? node + DCA_NODE_S : NULL;
    if (two) cfd_dca_join_rhs(left + DCA_NODE_H, right + DCA_NODE_H, s, s + 36, lane, lanes);
    else if (here)
      for (int k = lane; k < CFD_DCA_HANDLE; k += lanes) node[DCA_NODE_H + k] = left[DCA_NODE_H + k];
    __syncwarp();
    if (two && lane == 0 && cfd_dca_join_factor(s, s + 114)) cfd_gpu_raise(flag, CFD_ERR_SINGULAR);
    __syncwarp();
    if (two) cfd_dca_join_solve(s, s + 114, s + 36, node + DCA_NODE_J, lane, lanes);
    __syncwarp();
    if (two) cfd_dca_join_y(right + DCA_NODE_H, node + DCA_NODE_J, lane, lanes);
    __syncwarp();
    if (two) cfd_dca_join_handles(left + DCA_NODE_H, right + DCA_NODE_H, node + DCA_NODE_J, node + DCA_NODE_H, lane, lanes);
    __syncthreads();
  }
  dca_mark(marks, &mk);
  // 3. the boundary conditions down the tree, and each subsystem's accelerations
  if (t == 0) {
    double* root = NODE_AT(top, 0);
    cfd_dca_base_input(&c, L, root + DCA_NODE_A);
    for (int k = 0; k < 6; k++) root[DCA_NODE_F + k] = 0;
  }
  __syncthreads();
  for (int l = top; l >= 1; l--) {
    int lanes = dca_lanes(count[l], T), g = t / lanes, lane = t % lanes;
    if (g < count[l]) {
      double *node = NODE_AT(l, g), *left = NODE_AT(l - 1, 2 * g);
      if (2 * g + 1 < count[l - 1]) {
        double* right = NODE_AT(l - 1, 2 * g + 1);
        cfd_dca_disassemble(node + DCA_NODE_J, node + DCA_NODE_A, node + DCA_NODE_F, left + DCA_NODE_A,
                            left + DCA_NODE_F, right + DCA_NODE_A, right + DCA_NODE_F, lane, lanes);
      } else {
        for (int k = lane; k < 12; k += lanes) left[DCA_NODE_A + k] = node[DCA_NODE_A + k];  // A, f
      }
    }
    __syncthreads();
  }
  dca_mark(marks, &mk);
  if (t < p) {
    double* node = NODE_AT(0, t);
    cfd_dca_finish(&c, starts[t], starts[t + 1], L + (size_t)CFD_DCA_LINK * starts[t], node + DCA_NODE_A,
                   node + DCA_NODE_F, qacc + b * n);
  }
  dca_mark(marks, &mk);
#undef NODE_AT
}

// The rule: about 256 subsystems, at least CFD_DCA_LINKS_DEFAULT links each (within 1% of the
// fastest of 1 to 64 links per subsystem on chains of 1024 to 16384 links: bench --only dca,
// bench/results/h100_dca.txt)
int cfd_gpu_dca_links(const cfd_gpu* g) {
  if (g->alg != CFD_GPU_DCA) return 0;
  int rule = g->n / 256 > CFD_DCA_LINKS_DEFAULT ? g->n / 256 : CFD_DCA_LINKS_DEFAULT;
  int m = g->tune.dca_links > 0 ? g->tune.dca_links : rule;
  int least = (g->n + DCA_MAX_SUBSYSTEMS - 1) / DCA_MAX_SUBSYSTEMS;  // a thread per subsystem
  return m < least ? least : m;
}

size_t cfd_gpu_dca_doubles(int n, int m) {
  int p = (n + m - 1) / m;  // at most (cfd_abs_partition's blocks have at least m links)
  return cfd_dca_doubles(n, p < DCA_MAX_SUBSYSTEMS ? p : DCA_MAX_SUBSYSTEMS);
}

cudaError_t cfd_gpu_launch_dca(cfd_gpu* g, int B, const double* q, const double* qd,
                               const double* tau, const double* extra, double* qacc) {
  int n = g->n, m = cfd_gpu_dca_links(g);
  if (m != g->dca_links) {  // the partition for this many links per subsystem, once per choice
    int* starts = (int*)malloc(sizeof(int) * (n + 1));
    if (!starts) return cudaErrorMemoryAllocation;
    int p = cfd_abs_partition(g->scan_can_end, n, m, starts);
    cudaError_t e = cudaStreamSynchronize(g->stream);  // (a launch may still read the old one)
    if (!e) e = cudaMemcpy(g->dca_starts, starts, sizeof(int) * (n + 1), cudaMemcpyHostToDevice);
    free(starts);
    if (e) return e;
    g->dca_links = m, g->dca_p = p;
  }
  int p = g->dca_p, T = 32;
  while (T < 32 * p && T < DCA_MAX_THREADS) T *= 2;  // a warp per node at the first join level
  dca_kernel<<<B, T, 0, g->stream>>>(g->chain, p, g->dca_starts, q, qd, tau, extra, qacc, g->work,
                                     cfd_gpu_dca_doubles(n, m), cfd_gpu_error_flag(g),
                                     g->tune.profile ? g->marks : (unsigned long long*)NULL);
  return cudaGetLastError();
}
