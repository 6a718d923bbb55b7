#include "kernels/reduce.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda_test_util.h"

namespace meshsim::kernels {
namespace {

TEST(ReduceCpu, AddsElementwise) {
  std::vector<float> a = {1, 2, 3}, b = {10, 20, 30};
  reduce_sum_cpu(a.data(), b.data(), a.size());
  EXPECT_EQ(a, (std::vector<float>{11, 22, 33}));
}

TEST(ReduceCuda, MaxIsBitIdenticalToCpu) {
  if (const std::string why = testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  const std::size_t n = (1 << 20) + 5;
  std::vector<float> a(n), b(n);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1, 1);
  for (auto& x : a) x = u(rng);
  for (auto& x : b) x = u(rng);
  a[0] = -std::numeric_limits<float>::infinity();
  b[1] = -std::numeric_limits<float>::infinity();
  testing::DeviceBuffer<float> d_a(a), d_b(b);
  reduce_max_cpu(a.data(), b.data(), n);
  ASSERT_EQ(testing::cuda_error(reduce_max_cuda(d_a.get(), d_b.get(), n, nullptr)), "");
  ASSERT_EQ(testing::synchronize(), "");
  EXPECT_EQ(d_a.download(), a);
#endif
}

}  // namespace
}  // namespace meshsim::kernels
