#include "backend/cuda/device.h"

#include <cstdlib>

#if defined(MESHSIM_HAVE_CUDA)
#include <cuda_runtime.h>

#include "kernels/reduce.h"
#include "kernels/stream_pass.h"
#endif

namespace meshsim::cuda {

int local_device(int rank, int devices, const std::function<const char*(const char*)>& getenv) {
  int local = rank;
  for (const char* v : {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MESHSIM_LOCAL_RANK"}) {
    const char* text = getenv(v);
    if (text == nullptr || *text == '\0') continue;
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (*end == '\0' && value >= 0) {
      local = static_cast<int>(value);
      break;
    }
  }
  return devices > 0 ? local % devices : 0;
}

#if defined(MESHSIM_HAVE_CUDA)
namespace {
std::string check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return "";
  return std::string(what) + ": " + cudaGetErrorString(e);
}
}  // namespace

DeviceInfo probe_devices() {
  DeviceInfo info;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    info.reason = cudaGetErrorString(e);
    return info;
  }
  info.count = n;
  if (n == 0) info.reason = "the CUDA runtime reports no device";
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) == cudaSuccess) info.names.emplace_back(p.name);
  }
  return info;
}

std::string reduce_on_device(const std::vector<float>& a, const std::vector<float>& b, std::vector<float>& out) {
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

std::string stream_pass_on_device(const std::vector<float>& in, float scale, std::vector<float>& out) {
  const std::size_t n = in.size();
  out.assign(n, 0.0f);
  float* din = nullptr;
  float* dout = nullptr;
  std::string err = check(cudaMalloc(&din, n * sizeof(float)), "cudaMalloc");
  if (err.empty()) err = check(cudaMalloc(&dout, n * sizeof(float)), "cudaMalloc");
  if (err.empty()) err = check(cudaMemcpy(din, in.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
  if (err.empty()) err = check(static_cast<cudaError_t>(kernels::stream_pass_cuda(dout, din, n, scale, nullptr)), "stream_pass");
  if (err.empty()) err = check(cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  cudaFree(din);
  cudaFree(dout);
  return err;
}
#else
DeviceInfo probe_devices() {
  DeviceInfo info;
  info.reason = "this build has no CUDA toolkit";
  return info;
}

std::string reduce_on_device(const std::vector<float>&, const std::vector<float>&, std::vector<float>&) {
  return "this build has no CUDA toolkit";
}

std::string stream_pass_on_device(const std::vector<float>&, float, std::vector<float>&) {
  return "this build has no CUDA toolkit";
}
#endif

}  // namespace meshsim::cuda
