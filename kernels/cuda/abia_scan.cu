// ABIA for one long chain (or a few) as scans over blocks of links (aba_scan.h; its CPU twin is
// cpu/abia_scan_cpu.c, the same steps in the same order): a thread block per chain, a thread per
// block of links. Each thread runs its own links' sweeps; what the blocks hand each other
// (velocities, articulated inertias as Riccati maps, bias forces, accelerations) comes from
// Hillis-Steele scans across the threads, ceil(log2 blocks) steps each, through global memory (L1
// and L2: a Riccati map is 108 numbers, too many for shared memory at 256 blocks). So a chain's
// sequential depth is its links per block plus a few dozen map compositions, where the sweeps of
// the other kernels take every link in turn; and unlike CFA it stays accurate at any length.
#include "aba_scan.h"
#include "gpu_internal.h"

// Up to 256 blocks (a thread may then keep 255 registers: the compositions hold several 6x6
// matrices); longer chains get longer blocks.
#define ABS_MAX_THREADS 256
#define ABS_DEFAULT_LINKS 16  // bench --only scan: 200 to 2048 links best at 16 to 32

int cfd_gpu_abia_scan_links = 0;  // gpu_tuning.h: 0 = ABS_DEFAULT_LINKS, or n / 128 past 2048

// Each step its own function, so that each gets the registers it needs (inlined into one kernel,
// the largest step's pressure spilled the others)
__device__ __noinline__ int abs_maps(const cfd_chain* c, int s, int e, const double* q,
                                     const double* qd, const double* extra, double* links,
                                     double* fk, double* ric) {
  return cfd_abs_block_maps(c, s, e, q, qd, extra, links, fk, ric);
}
__device__ __noinline__ int abs_inertias(const cfd_chain* c, int s, int e, const double* qd,
                                         const double* tau, const double* extra,
                                         const double* Vin, const double* Cin, double* links,
                                         double* aff, double* keep) {
  return cfd_abs_block_inertias(c, s, e, qd, tau, extra, Vin, Cin, links, aff, keep);
}
__device__ __noinline__ int abs_step(int kind, int b, int nb, int k, const double* in, double* out) {
  return cfd_abs_scan_step(kind, b, nb, k, in, out);
}

// One scan over the nb elements in buf[cur], every thread of the block taking part (b >= nb:
// barriers only); returns the buffer holding the result.
__device__ int abs_scan(int kind, int b, int nb, double* buf0, double* buf1, int cur, int* bad) {
  for (int k = 1; k < nb; k *= 2, cur ^= 1) {
    if (b < nb) *bad |= abs_step(kind, b, nb, k, cur ? buf1 : buf0, cur ? buf0 : buf1);
    __syncthreads();
  }
  return cur;
}

__global__ void __launch_bounds__(ABS_MAX_THREADS)
abia_scan_kernel(cfd_chain c, const int* __restrict__ starts, int nb, const double* __restrict__ q,
                 const double* __restrict__ qd, const double* __restrict__ tau,
                 const double* __restrict__ extra, double* __restrict__ qacc, double* work,
                 long stride, int* error) {
  int n = c.n, b = threadIdx.x;
  long o = (long)blockIdx.x * n;
  q += o, qd += o, tau += o, qacc += o;
  if (extra) extra += o;
  double* links = work + (long)blockIdx.x * stride;
  double* fk0 = links + (long)CFD_ABS_LINK * n;
  double* fk1 = fk0 + CFD_ABS_FK * nb;
  double* ric0 = fk1 + CFD_ABS_FK * nb;
  double* ric1 = ric0 + CFD_ABS_RIC * nb;
  double* aff0 = ric1 + CFD_ABS_RIC * nb;
  double* aff1 = aff0 + CFD_ABS_AFF * nb;
  double* keep = aff1 + CFD_ABS_AFF * nb;
  bool mine = b < nb;
  int s = mine ? starts[b] : 0, e = mine ? starts[b + 1] : 0, bad = 0;
  // 1. the blocks' velocity and inertia maps, then both scans
  if (mine)
    bad |= abs_maps(&c, s, e, q, qd, extra, links, fk0 + CFD_ABS_FK * b,
                              ric0 + CFD_ABS_RIC * b);
  __syncthreads();
  int f = abs_scan(CFD_ABS_SCAN_FK, b, nb, fk0, fk1, 0, &bad);
  int r = abs_scan(CFD_ABS_SCAN_RIC, b, nb, ric0, ric1, 0, &bad);
  double* fkr = f ? fk1 : fk0;
  double* ricr = r ? ric1 : ric0;
  // 2. the blocks' inertias from what they are handed, and their bias maps; the bias scan
  if (mine)
    bad |= abs_inertias(&c, s, e, qd, tau, extra,
                                  b > 0 ? fkr + CFD_ABS_FK * (b - 1) + 12 : NULL,
                                  b + 1 < nb ? ricr + CFD_ABS_RIC * (b + 1) : NULL, links,
                                  aff0 + CFD_ABS_AFF * b, keep + 36 * b);
  __syncthreads();
  int p = abs_scan(CFD_ABS_SCAN_BIAS, b, nb, aff0, aff1, 0, &bad);
  double* affp = p ? aff1 : aff0;
  double* affo = p ? aff0 : aff1;
  // 3. the blocks' u_i and acceleration maps (into the other buffer); the acceleration scan
  if (mine)
    cfd_abs_block_bias(&c, s, e, tau, b + 1 < nb ? affp + CFD_ABS_AFF * (b + 1) + 36 : NULL, links,
                       keep + 36 * b, affo + CFD_ABS_AFF * b);
  __syncthreads();
  int a = abs_scan(CFD_ABS_SCAN_ACC, b, nb, aff0, aff1, p ^ 1, &bad);
  double* affa = a ? aff1 : aff0;
  // 4. the blocks' accelerations
  if (mine)
    cfd_abs_block_qacc(&c, s, e, b > 0 ? affa + CFD_ABS_AFF * (b - 1) + 36 : NULL, links, qacc);
  if (bad) atomicExch(error, CFD_ERR_SINGULAR);
}

cudaError_t cfd_gpu_launch_abia_scan(cfd_gpu* g, int B, const double* q, const double* qd,
                                     const double* tau, const double* extra, double* qacc,
                                     int* error) {
  int n = g->n;
  int m = cfd_gpu_abia_scan_links > 0 ? cfd_gpu_abia_scan_links : ABS_DEFAULT_LINKS;
  int least = (n + ABS_MAX_THREADS - 1) / ABS_MAX_THREADS;  // at most 256 blocks
  if (!cfd_gpu_abia_scan_links && m < (n + 127) / 128) m = (n + 127) / 128;
  if (m < least) m = least;
  cudaError_t e = cudaSuccess;
  if (m != g->scan_links) {  // the partition, once per block length (the stream is idle first:
    int* starts = (int*)malloc(sizeof(int) * (n + 1));  // an earlier launch may still read it)
    if (!starts) return cudaErrorMemoryAllocation;
    int nb = cfd_abs_partition(g->scan_can_end, n, m, starts);
    e = cudaStreamSynchronize(g->stream);
    if (!e) e = cudaMemcpy(g->scan_starts, starts, sizeof(int) * (n + 1), cudaMemcpyHostToDevice);
    free(starts);
    if (e) return e;
    g->scan_links = m;
    g->scan_nb = nb;
  }
  int nb = g->scan_nb;
  long stride = (long)CFD_ABS_LINK * n + (long)CFD_ABS_BLOCK * nb;
  if ((size_t)stride * B > g->scan_doubles) {
    e = cudaStreamSynchronize(g->stream);
    if (!e) e = cudaFree(g->scan_work);
    g->scan_work = NULL;
    g->scan_doubles = 0;
    if (!e) e = cudaMalloc(&g->scan_work, sizeof(double) * (size_t)stride * B);
    if (e) return e;
    g->scan_doubles = (size_t)stride * B;
  }
  int threads = (nb + 31) / 32 * 32;
  abia_scan_kernel<<<B, threads, 0, g->stream>>>(g->chain, g->scan_starts, nb, q, qd, tau, extra,
                                                 qacc, g->scan_work, stride, error);
  return cudaGetLastError();
}
