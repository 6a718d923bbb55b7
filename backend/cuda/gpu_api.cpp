// Names of the GpuApi enums; the stand-in for real_gpu_api() in builds without CUDA and NCCL.
#include "backend/cuda/gpu_api.h"

#include "core/error.h"

namespace meshsim::cuda {

const char* to_string(Lib lib) {
  switch (lib) {
    case Lib::Cuda: return "CUDA";
    case Lib::Nccl: return "NCCL";
    case Lib::Cublas: return "cuBLAS";
  }
  return "?";
}

const char* to_string(DType t) {
  switch (t) {
    case DType::Bf16: return "bf16";
    case DType::Fp16: return "fp16";
    case DType::Fp32: return "fp32";
  }
  return "?";
}

int dtype_bytes(DType t) { return t == DType::Fp32 ? 4 : 2; }

#if !(defined(MESHSIM_HAVE_CUDA) && defined(MESHSIM_HAVE_NCCL))
GpuApi& real_gpu_api() {
#if defined(MESHSIM_HAVE_CUDA)
  throw Error("backend cuda: this build found no NCCL (nccl.h, libnccl); rebuild with NCCL (see README, On a GPU machine)");
#else
  throw Error("backend cuda: this build has no CUDA toolkit");
#endif
}
#endif

}  // namespace meshsim::cuda
