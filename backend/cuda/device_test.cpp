// The CUDA plugin's device self-tests (device.h): the reduction and the memory-bound pass run
// through the plugin on device 0 and must equal the CPU references bit for bit. They skip,
// saying why, where no GPU (or no plugin) is found.
#include "backend/cuda/device.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "kernels/reduce.h"
#include "kernels/stream_pass.h"

namespace meshsim::cuda {
namespace {

TEST(PluginDevice, ReduceMatchesCpuReference) {
  const DeviceInfo info = probe_devices();
  if (info.count == 0) GTEST_SKIP() << "no GPU present (" << info.reason << "); CPU reference tested only";
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  const std::size_t n = (1 << 20) + 3;
  std::vector<float> a(n), b(n);
  for (auto& x : a) x = u(rng);
  for (auto& x : b) x = u(rng);
  std::vector<float> want = a;
  kernels::reduce_sum_cpu(want.data(), b.data(), n);
  std::vector<float> got(n);
  ASSERT_EQ(reduce_on_device(a, b, got), "");
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want[i]) << i;
}

TEST(PluginDevice, StreamPassMatchesCpuReference) {
  const DeviceInfo info = probe_devices();
  if (info.count == 0) GTEST_SKIP() << "no GPU present (" << info.reason << "); CPU reference tested only";
  const std::size_t n = (1 << 20) + 5;
  std::vector<float> in(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i % 97) - 48.0f;
  std::vector<float> want(n), got;
  kernels::stream_pass_cpu(want.data(), in.data(), n, 0.25f);
  ASSERT_EQ(stream_pass_on_device(in, 0.25f, got), "");
  ASSERT_EQ(got.size(), n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want[i]) << i;
}

}  // namespace
}  // namespace meshsim::cuda
