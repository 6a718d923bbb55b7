// The CUDA AdamW step against the CPU reference (skipped without a GPU). Tolerance
// |gpu - cpu| <= 1e-6 + 1e-5 |cpu|: the same float operations, which nvcc may contract into
// FMAs, and the device sqrtf.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/cuda_ops.h"
#include "kernels/cuda_test_util.h"
#include "kernels/kernels_test_util.h"
#include "kernels/optimizer.h"

namespace meshsim::kernels {
namespace {

using namespace testing;  // kernels_test_util.h and cuda_test_util.h

TEST(OptimizerCuda, AdamWStepsMatchCpu) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  using testing::cuda_error;
  using testing::DeviceBuffer;
  using testing::synchronize;
  const AdamW hp{.lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{4099}, (std::size_t{1} << 22) + 3})
    for (const std::size_t pad : {0, 1}) {  // pad 1: misaligned, the scalar path
      SCOPED_TRACE("n " + std::to_string(n) + " pad " + std::to_string(pad));
      auto p = random_vector(n, 1);
      std::vector<float> m(n, 0.f), v(n, 0.f);
      DeviceBuffer<float> d_p(p, pad), d_m(m, pad), d_v(v, pad), d_g(n, pad);
      for (int t = 1; t <= 3; ++t) {
        const auto g = random_vector(n, 10 + static_cast<std::uint32_t>(t));
        adamw_step_cpu(p.data(), g.data(), m.data(), v.data(), n, hp, t);
        d_g.upload(g);
        ASSERT_EQ(cuda_error(adamw_step_cuda(d_p.get(), d_g.get(), d_m.get(), d_v.get(), n, hp, t, nullptr)), "");
      }
      ASSERT_EQ(synchronize(), "");
      expect_near_all(d_p.download(), p, 1e-6, 1e-5, "p");
      expect_near_all(d_m.download(), m, 1e-7, 1e-5, "m");
      expect_near_all(d_v.download(), v, 1e-9, 1e-5, "v");
    }
  EXPECT_NE(cuda_error(adamw_step_cuda(nullptr, nullptr, nullptr, nullptr, 4, hp, 0, nullptr)), "") << "step 0";
#endif
}

}  // namespace
}  // namespace meshsim::kernels
