#include "kernels/stream_pass.h"

#include <gtest/gtest.h>

#include <vector>

namespace meshsim::kernels {
namespace {

TEST(StreamPassCpu, ScalesEveryValue) {
  const std::vector<float> in = {1, -2, 3.5f};
  std::vector<float> out(3, 0);
  stream_pass_cpu(out.data(), in.data(), in.size(), 0.5f);
  EXPECT_EQ(out, (std::vector<float>{0.5f, -1, 1.75f}));
}

}  // namespace
}  // namespace meshsim::kernels
