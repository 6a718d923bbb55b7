// Test helpers for the CUDA kernel tests (kernels/*_cuda_test.cpp): the skip reason where no
// GPU is present, RAII device buffers whose every CUDA status is checked (a failure is a test
// failure naming the call), and kernel status text.
//
//   if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
//   DeviceBuffer<float> d_x(x), d_y(x.size());
//   ASSERT_EQ(cuda_error(gelu_forward_cuda(d_x.get(), d_y.get(), x.size(), nullptr)), "");
//   ASSERT_EQ(synchronize(), "");
//   std::vector<float> y = d_y.download();
//
// Builds without CUDA get only gpu_skip_reason(), which then always names the reason. The
// kernels are linked into the tests and probed on the CUDA runtime directly, not through the
// CUDA plugin (backend/cuda/plugin.h), so a GPU is found wherever the test program runs.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#if defined(MESHSIM_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace meshsim::kernels::testing {

// "" when device 0 can run kernels; else "no GPU present (why)".
inline std::string gpu_skip_reason() {
#if defined(MESHSIM_HAVE_CUDA)
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e == cudaSuccess && count > 0) return "";
  const std::string why = e != cudaSuccess ? cudaGetErrorString(e) : "the CUDA runtime reports no device";
#else
  const std::string why = "this build has no CUDA toolkit";
#endif
  return "no GPU present (" + why + "); the CUDA kernels are compared with the CPU references only on a GPU";
}

#if defined(MESHSIM_HAVE_CUDA)

// "" for cudaSuccess (0), else "cudaErrorX: description".
inline std::string cuda_error(int code) {
  if (code == 0) return "";
  const auto e = static_cast<cudaError_t>(code);
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

// Waits for the device and returns its status text ("" when every kernel ran cleanly).
inline std::string synchronize() { return cuda_error(static_cast<int>(cudaDeviceSynchronize())); }

// n elements of T on device 0, plus `pad` leading elements so get() can be deliberately
// misaligned (pad = 1 float: the pointer is 4 but not 16-byte aligned).
template <class T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(std::size_t n, std::size_t pad = 0) : n_(n), pad_(pad) {
    check(cudaMalloc(&base_, (n + pad + 1) * sizeof(T)), "cudaMalloc");
  }
  explicit DeviceBuffer(const std::vector<T>& host, std::size_t pad = 0) : DeviceBuffer(host.size(), pad) {
    upload(host);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (base_ != nullptr) check(cudaFree(base_), "cudaFree");
  }

  T* get() const { return base_ == nullptr ? nullptr : base_ + pad_; }
  std::size_t size() const { return n_; }

  void upload(const std::vector<T>& host) {
    if (host.size() != n_) {
      ADD_FAILURE() << "DeviceBuffer::upload: " << host.size() << " elements into " << n_;
      return;
    }
    if (base_ != nullptr && n_ > 0)
      check(cudaMemcpy(get(), host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy to device");
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    if (base_ != nullptr && n_ > 0)
      check(cudaMemcpy(host.data(), get(), n_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    return host;
  }

 private:
  static void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) ADD_FAILURE() << what << ": " << cudaGetErrorName(e) << ": " << cudaGetErrorString(e);
  }

  std::size_t n_ = 0, pad_ = 0;
  T* base_ = nullptr;
};

#endif  // MESHSIM_HAVE_CUDA

}  // namespace meshsim::kernels::testing
