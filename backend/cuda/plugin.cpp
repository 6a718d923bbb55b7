// The CUDA plugin's entry point (plugin.h): libmeshsim_cuda.so exports meshsim_cuda_plugin
// and nothing else (plugin.map). Also device.h's CUDA parts: GPU discovery and the device
// self-tests, which main-side device.cpp forwards here.
#include "backend/cuda/plugin.h"

#include <cublas_api.h>
#ifdef MESHSIM_HAVE_CUDNN
#include <cudnn_version.h>
#endif
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>
#include <vector>

#include "backend/cuda/device_cudart.h"
#include "kernels/reduce.h"
#include "kernels/stream_pass.h"

namespace meshsim::cuda {

GpuApi& plugin_gpu_api();  // gpu_api_real.cpp

namespace {

std::string check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return "";
  return std::string(what) + ": " + cudaGetErrorString(e);
}

std::string reduce_on_device_cuda(const std::vector<float>& a, const std::vector<float>& b, std::vector<float>& out) {
  const std::size_t n = a.size();
  out.assign(n, 0.0f);
  float* da = nullptr;
  float* db = nullptr;
  std::string err = check(cudaMalloc(&da, n * sizeof(float)), "cudaMalloc");
  if (err.empty()) err = check(cudaMalloc(&db, n * sizeof(float)), "cudaMalloc");
  if (err.empty()) err = check(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  if (err.empty()) err = check(cudaMemcpy(db, b.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  if (err.empty()) err = check(static_cast<cudaError_t>(kernels::reduce_sum_cuda(da, db, n, nullptr)), "reduce_sum");
  if (err.empty()) err = check(cudaMemcpy(out.data(), da, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(da);
  cudaFree(db);
  return err;
}

std::string stream_pass_on_device_cuda(const std::vector<float>& in, float scale, std::vector<float>& out) {
  const std::size_t n = in.size();
  out.assign(n, 0.0f);
  float* din = nullptr;
  float* dout = nullptr;
  std::string err = check(cudaMalloc(&din, n * sizeof(float)), "cudaMalloc");
  if (err.empty()) err = check(cudaMalloc(&dout, n * sizeof(float)), "cudaMalloc");
  if (err.empty()) err = check(cudaMemcpy(din, in.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  if (err.empty())
    err = check(static_cast<cudaError_t>(kernels::stream_pass_cuda(dout, din, n, scale, nullptr)), "stream_pass");
  if (err.empty()) err = check(cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(din);
  cudaFree(dout);
  return err;
}

// "CUDA runtime 13.0, cuBLAS 13.1.0, NCCL 2.28.3": the headers the plugin was compiled with.
std::string libraries() {
  return "CUDA runtime " + std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10) +
         ", cuBLAS " + std::to_string(CUBLAS_VER_MAJOR) + "." + std::to_string(CUBLAS_VER_MINOR) + "." +
         std::to_string(CUBLAS_VER_PATCH) + ", NCCL " + std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) +
         "." + std::to_string(NCCL_PATCH)
#ifdef MESHSIM_HAVE_CUDNN
         + ", cuDNN " + std::to_string(CUDNN_MAJOR) + "." + std::to_string(CUDNN_MINOR) + "." +
         std::to_string(CUDNN_PATCHLEVEL) + " (its header; the library loads at run time)"
#endif
      ;
}

}  // namespace
}  // namespace meshsim::cuda

extern "C" const MeshsimCudaPlugin* meshsim_cuda_plugin(int /*abi_version*/) {
  namespace c = meshsim::cuda;
  static const std::string libraries = c::libraries();
  static const MeshsimCudaPlugin table{
      .abi_version = c::kCudaPluginAbi,
      .libraries = libraries.c_str(),
      .gpu_api = &c::plugin_gpu_api,
      .probe_devices = &c::probe_devices_cudart,
      .reduce_on_device = &c::reduce_on_device_cuda,
      .stream_pass_on_device = &c::stream_pass_on_device_cuda,
  };
  return &table;
}
