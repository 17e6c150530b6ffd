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

cudaError_t cfd_gpu_launch_abia(cfd_gpu* g, int B, const double* q, const double* qd,
                                const double* tau, const double* extra, double* qacc) {
  int blocks = (B + ABIA_THREADS - 1) / ABIA_THREADS;
  abia_kernel<<<blocks, ABIA_THREADS, 0, g->stream>>>(g->chain, B, q, qd, tau, extra, qacc, g->work,
                                                      g->info + g->capacity);
  return cudaGetLastError();
}
