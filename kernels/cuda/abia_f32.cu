// ABIA in single precision: abia.cu's kernel with the shared headers compiled for float. The
// headers are written once against `double`; here that name means float for this file alone, and
// the chain type gets its own name. Inputs and outputs stay double (converted per thread), so the
// batch API is the same; the error this costs is measured by tests/test_gpu.c and the benchmark.
// This file sees only the float world: it includes no double-typed chainfd header, and gpu.cu
// calls it through cfd_launch_abia_f32 (plain C types).
#include <cuda_runtime.h>
#include <string.h>

#define double float
#define cfd_chain cfd_chain_f32
#include "aba_core.h"
#undef cfd_chain
#undef double

#define ABIA_F32_THREADS 128

__global__ void __launch_bounds__(ABIA_F32_THREADS, 4)
abia_f32_kernel(cfd_chain_f32 c, int B, const double* __restrict__ q, const double* __restrict__ qd,
                const double* __restrict__ tau, const double* __restrict__ extra,
                double* __restrict__ qacc, float* __restrict__ work, int* error) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= B) return;
  int n = c.n;
  float* w = work + b;  // interleaved: entry k of instance b at w[k * B]
  float* qf = w + (long)CFD_ABA_LINK_DOUBLES_LEAN * n * B;
  float* qdf = qf + (long)n * B;
  float* tf = qdf + (long)n * B;
  float* ef = tf + (long)n * B;
  float* af = ef + (long)n * B;
  long o = (long)b * n;
  for (int i = 0; i < n; i++) {
    qf[(long)i * B] = (float)q[o + i];
    qdf[(long)i * B] = (float)qd[o + i];
    tf[(long)i * B] = (float)tau[o + i];
    if (extra) ef[(long)i * B] = (float)extra[o + i];
  }
  int st = cfd_aba_core_ex(&c, qf, qdf, tf, extra ? ef : NULL, af, B, w, B, 1);
  if (st) {
    *(volatile int*)error = st;  // (as cfd_gpu_raise: the flag may be host memory)
    return;
  }
  for (int i = 0; i < n; i++) qacc[o + i] = af[(long)i * B];
}

extern "C" cudaError_t cfd_launch_abia_f32(const float* chain, int n, const double* gravity, int B,
                                           const double* q, const double* qd, const double* tau,
                                           const double* extra, double* qacc, float* work,
                                           int* error, cudaStream_t stream) {
  cfd_chain_f32 c;
  memset(&c, 0, sizeof(c));
  c.n = n;  // chain: R 9n, p 3n, S 6n, J 36n, armature n
  c.home_R = (float*)chain;
  c.home_p = c.home_R + 9 * n;
  c.screw = c.home_p + 3 * n;
  c.inertia = c.screw + 6 * n;
  c.armature = c.inertia + 36 * n;
  for (int k = 0; k < 3; k++) c.gravity[k] = (float)gravity[k];
  int blocks = (B + ABIA_F32_THREADS - 1) / ABIA_F32_THREADS;
  abia_f32_kernel<<<blocks, ABIA_F32_THREADS, 0, stream>>>(c, B, q, qd, tau, extra, qacc, work, error);
  return cudaGetLastError();
}
