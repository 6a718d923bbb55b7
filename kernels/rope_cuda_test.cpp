// RoPE CUDA kernels against the CPU reference (skipped without a GPU).
//
// Tolerance: |gpu - cpu| <= 1e-5 + 1e-5 |cpu| (each output is two products and a sum, in float
// on both sides; the GPU may fuse them into an FMA). bf16: the same on the widened inputs plus
// one bf16 ulp of the result (bf16_tolerance, cuda_test_util.h).
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "kernels/cuda_ops.h"
#include "kernels/cuda_test_util.h"
#include "kernels/kernels_test_util.h"
#include "kernels/rope.h"

namespace meshsim::kernels {
namespace {

using namespace testing;  // kernels_test_util.h and cuda_test_util.h

#if defined(MESHSIM_HAVE_CUDA)
constexpr double kTol = 1e-5;

// Shapes: head dims 128 and 64 (the vector path: 8 bf16 or 4 floats per load), 6 and 10 (the
// scalar path), one head and the grouped-query layout's 72 (64 query + 8 key heads a token).
template <class T>
void check_rope(std::int64_t tokens, std::int64_t heads, std::int64_t d, std::size_t pad) {
  constexpr bool kBf16 = sizeof(T) == 2;
  SCOPED_TRACE(std::string(kBf16 ? "bf16" : "float") + " rope tokens " + std::to_string(tokens) + " heads " +
               std::to_string(heads) + " d " + std::to_string(d) + " pad " + std::to_string(pad));
  const std::int64_t rows = tokens * heads;
  const std::size_t n = rows * d;
  auto round = [&](std::vector<float> v) { return kBf16 ? to_float_vector(to_bf16_vector(v)) : v; };
  const auto x = round(random_vector(n, 31, -2.f, 2.f)), dy = round(random_vector(n, 32));
  std::vector<float> cs(tokens * d), y(n), dx(n);
  rope_table_cpu(cs.data(), tokens, d, 4096, 10000.0);
  rope_forward_cpu(x.data(), cs.data(), y.data(), rows, heads, d);
  rope_backward_cpu(dy.data(), cs.data(), dx.data(), rows, heads, d);
  auto as_t = [&](const std::vector<float>& v) {
    if constexpr (kBf16)
      return to_bf16_vector(v);
    else
      return v;
  };
  auto expect = [&](const std::vector<T>& got, const std::vector<float>& want, const char* what) {
    if constexpr (kBf16)
      expect_bf16_near_all(got, want, kTol, kTol, what);
    else
      expect_near_all(got, want, kTol, kTol, what);
  };
  DeviceBuffer<T> d_x(as_t(x), pad), d_dy(as_t(dy), pad), d_y(n, pad), d_dx(n, pad);
  DeviceBuffer<float> d_cs(cs);
  ASSERT_EQ(cuda_error(rope_forward_cuda(d_x.get(), d_cs.get(), d_y.get(), rows, heads, d, nullptr)), "");
  ASSERT_EQ(cuda_error(rope_backward_cuda(d_dy.get(), d_cs.get(), d_dx.get(), rows, heads, d, nullptr)), "");
  ASSERT_EQ(synchronize(), "");
  expect(d_y.download(), y, "y");
  expect(d_dx.download(), dx, "dx");
  // In place, as the outputs may alias the input.
  ASSERT_EQ(cuda_error(rope_forward_cuda(d_x.get(), d_cs.get(), d_x.get(), rows, heads, d, nullptr)), "");
  ASSERT_EQ(synchronize(), "");
  expect(d_x.download(), y, "y in place");
}
#endif

TEST(RopeCuda, ForwardBackwardMatchCpuFloatAndBf16) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  for (const auto& [tokens, heads, d] :
       {std::array<std::int64_t, 3>{7, 1, 128}, {33, 72, 128}, {16, 5, 64}, {9, 3, 6}, {4, 2, 10}}) {
    check_rope<float>(tokens, heads, d, 0);
    check_rope<bf16>(tokens, heads, d, 0);
  }
  check_rope<float>(5, 4, 128, 1);  // misaligned: the scalar path
  check_rope<bf16>(5, 4, 128, 1);
#endif
}

TEST(RopeCuda, OddHeadDimIsRefused) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  DeviceBuffer<float> x(15), cs(15);
  EXPECT_NE(rope_forward_cuda(x.get(), cs.get(), x.get(), 3, 1, 5, nullptr), 0);
#endif
}

}  // namespace
}  // namespace meshsim::kernels
