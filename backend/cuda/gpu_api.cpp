// Names of the GpuApi enums; real_gpu_api(), which asks the CUDA plugin (plugin.h).
#include "backend/cuda/gpu_api.h"

#include "backend/cuda/plugin.h"

namespace meshsim::cuda {

const char* to_string(Lib lib) {
  switch (lib) {
    case Lib::Cuda:
      return "CUDA";
    case Lib::Nccl:
      return "NCCL";
    case Lib::Cublas:
      return "cuBLAS";
  }
  return "?";
}

GpuApi& real_gpu_api() { return cuda_plugin().gpu_api(); }

}  // namespace meshsim::cuda
