#include "kernels/stream_pass.h"

#include <gtest/gtest.h>

#include <vector>

#include "backend/cuda/device.h"

namespace meshsim::kernels {
namespace {

TEST(StreamPassCpu, ScalesEveryValue) {
  const std::vector<float> in = {1, -2, 3.5f};
  std::vector<float> out(3, 0);
  stream_pass_cpu(out.data(), in.data(), in.size(), 0.5f);
  EXPECT_EQ(out, (std::vector<float>{0.5f, -1, 1.75f}));
}

TEST(StreamPassCuda, MatchesCpuReference) {
  const cuda::DeviceInfo info = cuda::probe_devices();
  if (info.count == 0) GTEST_SKIP() << "no GPU present (" << info.reason << "); CPU reference tested only";
#if defined(MESHSIM_HAVE_CUDA)
  const std::size_t n = (1 << 20) + 5;
  std::vector<float> in(n);
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i % 97) - 48.0f;
  std::vector<float> want(n), got;
  stream_pass_cpu(want.data(), in.data(), n, 0.25f);
  ASSERT_EQ(cuda::stream_pass_on_device(in, 0.25f, got), "");
  ASSERT_EQ(got.size(), n);
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], want[i]) << i;
#endif
}

}  // namespace
}  // namespace meshsim::kernels
