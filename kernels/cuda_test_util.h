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
// bf16 twins (every bf16 overload in cuda_ops.h): inputs are random floats rounded to bf16
// (to_bf16_vector); the reference is the float CPU reference run on the same inputs widened
// (to_float_vector); each bf16 output is held to expect_bf16_near_all (tolerance derived there).
//
// Builds without CUDA get only gpu_skip_reason() and the bf16 helpers; gpu_skip_reason() then
// always names the reason. The
// kernels are linked into the tests and probed on the CUDA runtime directly, not through the
// CUDA plugin (backend/cuda/plugin.h), so a GPU is found wherever the test program runs.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/bf16.h"

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

// ---- bf16 -------------------------------------------------------------------------------

inline std::vector<bf16> to_bf16_vector(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_bf16(v[i]);
  return out;
}
inline std::vector<float> to_float_vector(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = to_float(v[i]);
  return out;
}

// The tolerance of a bf16 output b against the float reference w (the CPU reference on the
// widened bf16 inputs), given the float CUDA test's tolerance atol + rtol |w| for that kernel:
//
//   |b - w| <= atol + rtol |w| + 2^-7 (|w| + atol)
//
// Why: the bf16 kernel computes exactly what the float kernel computes on those inputs, a
// float g with |g - w| <= atol + rtol |w| (the float test's claim), then narrows once:
// b = to_bf16(g), |b - g| <= 2^-8 |g| (half a bf16 ulp: 8 significant bits; ulp(g) <= 2^-7 |g|).
// With |g| <= |w| + atol + rtol |w|, the triangle inequality gives
//   |b - w| <= atol + rtol |w| + 2^-8 ((1 + rtol) |w| + atol),
// which the 2^-7 term covers for rtol <= 1 with a factor 2 to spare: one bf16 ulp of |w|,
// since g and w may sit on either side of a rounding boundary (so b may be the bf16 next to
// to_bf16(w)), not the half ulp a single rounding of w itself would move. The atol inside the
// bracket matters only where w is near 0 (b then is the narrowed g, within atol (1 + 2^-8)).
// Statistics and parameter gradients that stay float (mean, rstd, stats, lse, dgamma, dbeta)
// keep the float tolerance unchanged.
constexpr double kBf16Ulp = 0x1p-7;
inline double bf16_tolerance(double want, double atol, double rtol) {
  return atol + rtol * std::abs(want) + kBf16Ulp * (std::abs(want) + atol);
}

template <class Want>
void expect_bf16_near_all(const std::vector<bf16>& got, const Want& want, double atol, double rtol,
                          const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double g = to_float(got[i]), w = want[i];
    if (!(std::abs(g - w) <= bf16_tolerance(w, atol, rtol))) {
      ADD_FAILURE() << what << "[" << i << "]: got " << g << " (bf16), want " << w << " (float reference)";
      ++bad;
    }
  }
}

// Bit-for-bit equality of bf16 results (dropout: to_bf16 of the float reference exactly).
inline void expect_bf16_bits_equal(const std::vector<bf16>& got, const std::vector<bf16>& want,
                                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < got.size() && bad < 5; ++i)
    if (got[i].bits != want[i].bits) {
      ADD_FAILURE() << what << "[" << i << "]: got " << to_float(got[i]) << " (0x" << std::hex << got[i].bits
                    << "), want " << to_float(want[i]) << " (0x" << want[i].bits << std::dec << ")";
      ++bad;
    }
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
