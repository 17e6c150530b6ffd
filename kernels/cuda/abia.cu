// ABIA on the GPU for many instances: one thread per instance runs the structured
// articulated-body sweeps of aba_core.h (the CPU fast path's code) in its lean mode: a thread keeps
// 14 numbers per link between sweeps and recomputes the rest, since that scratch is DRAM traffic. The model is shared by every
// thread (read-only, broadcast from cache); each instance's per-link scratch is interleaved with
// its neighbours' (entry k of instance b at work[k * B + b]) so a warp's accesses coalesce.
#include "aba_core.h"
#include "gpu_internal.h"

#define ABIA_THREADS 128
// Left alone, the compiler keeps 168 registers per thread: 3 blocks per SM, too few warps to hide
// the latency of the serial sweeps. Capping at 128 (4 blocks) trades a few spills for occupancy.
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
  if (st) atomicExch(error, st);
}

// Short chains in batches up to a few thousand: the scratch in local memory instead (a per-thread
// array the hardware interleaves and caches in L1), in full (not lean) mode, so that each link's
// pose is computed once instead of three times. On the H100 (bench --only abia,
// h100_abia_variants.txt): arm7 B = 4096 9.5e7 FD/s against 8.1e7 global lean; from B = 16384 on,
// where L1 no longer holds every thread's scratch, global lean wins (5.9e8 against 4.1e8 at 65536).
// Full mode with global scratch (measured once, in that file) never wins, 200 links included.
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
  if (st) atomicExch(error, st);
}

int cfd_gpu_abia_variant = 0;  // 0: chosen by n; 1: global lean; 2: local lean; 3: local full

cudaError_t cfd_gpu_launch_abia(cfd_gpu* g, int B, const double* q, const double* qd,
                                const double* tau, const double* extra, double* qacc) {
  int blocks = (B + ABIA_THREADS - 1) / ABIA_THREADS;
  int* error = g->info + g->capacity;
  int variant = cfd_gpu_abia_variant ? cfd_gpu_abia_variant
                : g->n <= ABIA_LOCAL_MAX_N && B <= 8192 ? 3 : 1;
  if (g->n > ABIA_LOCAL_MAX_N) variant = 1;
  if (variant == 2)
    abia_local_kernel<1><<<blocks, ABIA_THREADS, 0, g->stream>>>(g->chain, B, q, qd, tau, extra, qacc, error);
  else if (variant == 3)
    abia_local_kernel<0><<<blocks, ABIA_THREADS, 0, g->stream>>>(g->chain, B, q, qd, tau, extra, qacc, error);
  else
    abia_kernel<<<blocks, ABIA_THREADS, 0, g->stream>>>(g->chain, B, q, qd, tau, extra, qacc, g->work,
                                                        error);
  return cudaGetLastError();
}
