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

const char* to_string(DType t) {
  switch (t) {
    case DType::Bf16:
      return "bf16";
    case DType::Fp16:
      return "fp16";
    case DType::Fp32:
      return "fp32";
  }
  return "?";
}

int dtype_bytes(DType t) { return t == DType::Fp32 ? 4 : 2; }

GpuApi& real_gpu_api() { return cuda_plugin().gpu_api(); }

}  // namespace meshsim::cuda
