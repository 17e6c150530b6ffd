// The GPU back ends' names, for builds with and without CUDA alike.
#include "gpu.h"

const char* cfd_gpu_algorithm_name(cfd_gpu_algorithm alg) {
  switch (alg) {
    case CFD_GPU_ABIA: return "cuda.abia";
    case CFD_GPU_JSIIA: return "cuda.jsiia";
    case CFD_GPU_CFA: return "cuda.cfa";
    case CFD_GPU_DCA: return "cuda.dca";
    case CFD_GPU_ABIA_F32: return "cuda.abia.f32";
  }
  return "cuda.?";
}
