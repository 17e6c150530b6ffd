// cuda.abia kernels measured and dropped, kept so that the benchmark can run them beside the
// library's (chainfd-bench-gpu --only abia). Each runs in place of the library's kernel through
// cfd_gpu_tuning.abia_launch, on the context's buffers and stream. Why each lost: bench/results/LOG.md.
//   2 "local lean", 3 "local full": a thread per instance, the link-frame ABA (aba_core.h) with its
//     scratch in local memory, lean (poses recomputed) or full (each pose computed once), for chains
//     up to VARIANT_LOCAL_MAX_N links. Local memory stays in L1 only while few threads run: in
//     small batches the lanes kernels win, in large ones the lean kernel with global scratch.
//   6 "world global": the world-coordinate ABA (aba_world.h), a thread per instance, scratch and
//     model in global memory, for chains of any length: past 32 links its rounding grows with the
//     chain's extent, and the link-frame kernels win in time too.
#include "aba_core.h"
#include "aba_world.h"
#include "abia_variants.h"
#include "gpu_internal.h"

#define VARIANT_THREADS 128
#define VARIANT_MIN_BLOCKS 4
#define VARIANT_LOCAL_MAX_N 16

template <int LEAN>
__global__ void __launch_bounds__(VARIANT_THREADS, VARIANT_MIN_BLOCKS)
abia_local_kernel(cfd_chain c, int B, const double* __restrict__ q, const double* __restrict__ qd,
                  const double* __restrict__ tau, const double* __restrict__ extra,
                  double* __restrict__ qacc, int* error) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  double w[VARIANT_LOCAL_MAX_N * (LEAN ? CFD_ABA_LINK_DOUBLES_LEAN : CFD_ABA_LINK_DOUBLES)];
  long o = (long)b * c.n;
  int st = cfd_aba_core_ex(&c, q + o, qd + o, tau + o, extra ? extra + o : NULL, qacc + o, 1, w, 1,
                           LEAN);
  if (st) cfd_gpu_raise(error, st);
}

template <bool JF>
__global__ void __launch_bounds__(VARIANT_THREADS, VARIANT_MIN_BLOCKS)
abia_world_global_kernel(cfd_chain c, int B, const double* __restrict__ q,
                         const double* __restrict__ qd, const double* __restrict__ tau,
                         const double* __restrict__ extra, double* __restrict__ qacc,
                         double* __restrict__ work, int* error) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  long o = (long)b * c.n;
  int st = cfd_aba_world(&c, JF, q + o, qd + o, tau + o, extra ? extra + o : NULL, qacc + o, 1,
                         work + b, B);
  if (st) cfd_gpu_raise(error, st);
}

template <int V>
static int launch(cfd_gpu* g, int B, const double* q, const double* qd, const double* tau,
                  const double* extra, double* qacc) {
  int blocks = (B + VARIANT_THREADS - 1) / VARIANT_THREADS, *error = cfd_gpu_error_flag(g);
  if (V == 2 || V == 3) {
    if (g->n > VARIANT_LOCAL_MAX_N) return (int)cudaErrorInvalidValue;
    abia_local_kernel<V == 2><<<blocks, VARIANT_THREADS, 0, g->stream>>>(g->chain, B, q, qd, tau,
                                                                        extra, qacc, error);
  } else if (g->chain_jf.home_R) {
    abia_world_global_kernel<true><<<blocks, VARIANT_THREADS, 0, g->stream>>>(
        g->chain_jf, B, q, qd, tau, extra, qacc, g->work, error);
  } else {
    abia_world_global_kernel<false><<<blocks, VARIANT_THREADS, 0, g->stream>>>(
        g->chain, B, q, qd, tau, extra, qacc, g->work, error);
  }
  return (int)cudaGetLastError();
}

cfd_abia_launch_fn cfd_variant_abia(int variant, int n) {
  switch (variant) {
    case 2: return n <= VARIANT_LOCAL_MAX_N ? launch<2> : NULL;
    case 3: return n <= VARIANT_LOCAL_MAX_N ? launch<3> : NULL;
    case 6: return launch<6>;
  }
  return NULL;
}
