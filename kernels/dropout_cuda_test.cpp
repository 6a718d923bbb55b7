// Philox dropout CUDA kernels against the CPU reference (skipped without a GPU): the outputs
// must be bit-identical (same Philox bits, same keep test, one float multiply), for any
// offset, alignment and drop probability, so a recomputed forward reproduces the mask. The
// fused dropout-add (float) equals dropout_forward_cpu then reduce_sum_cpu bit for bit (the
// kernel's multiply and add are __fmul_rn / __fadd_rn: no FMA contraction). bf16 dropout and
// dropout-add equal to_bf16 of that float result on the widened inputs, bit for bit (the same
// mask, the same float operations, one rounding).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda_ops.h"
#include "kernels/cuda_test_util.h"
#include "kernels/dropout.h"
#include "kernels/kernels_test_util.h"
#include "kernels/reduce.h"

namespace meshsim::kernels {
namespace {

using namespace testing;  // kernels_test_util.h and cuda_test_util.h

#if defined(MESHSIM_HAVE_CUDA)
void expect_bitwise_equal(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < got.size() && bad < 5; ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
      ++bad;
    }
}
#endif

TEST(DropoutCuda, BitIdenticalToCpu) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  const std::uint64_t seed = 0x0123456789abcdefull;
  for (const std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{1027}, (std::size_t{1} << 21) + 3})
    for (const std::uint64_t offset :
         {std::uint64_t{0}, std::uint64_t{3}, std::uint64_t{8}, (std::uint64_t{1} << 33) + 1})
      for (const float p : {0.f, 0.1f, 0.5f, 1.f})
        for (const std::size_t pad : {0, 1}) {
          SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(offset) + " p " + std::to_string(p) +
                       " pad " + std::to_string(pad));
          auto x = random_vector(n, 1, -3.f, 3.f), dy = random_vector(n, 2);
          std::vector<float> y(n), dx(n);
          dropout_forward_cpu(x.data(), y.data(), n, p, seed, offset);
          dropout_backward_cpu(dy.data(), dx.data(), n, p, seed, offset);
          DeviceBuffer<float> d_x(x, pad), d_dy(dy, pad), d_y(n, pad), d_dx(n, pad);
          ASSERT_EQ(cuda_error(dropout_forward_cuda(d_x.get(), d_y.get(), n, p, seed, offset, nullptr)), "");
          ASSERT_EQ(cuda_error(dropout_backward_cuda(d_dy.get(), d_dx.get(), n, p, seed, offset, nullptr)), "");
          ASSERT_EQ(synchronize(), "");
          expect_bitwise_equal(d_y.download(), y, "y");
          expect_bitwise_equal(d_dx.download(), dx, "dx");
        }
#endif
}

TEST(DropoutCuda, SlicesAndInPlaceReproduceTheWholeMask) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  const std::size_t n = 10001;
  const std::uint64_t seed = 42, offset = 77;
  auto x = random_vector(n, 3);
  std::vector<float> whole(n);
  dropout_forward_cpu(x.data(), whole.data(), n, 0.3f, seed, offset);
  // Two shards [0, 4099) and [4099, n) at offset + start, in place on the device.
  DeviceBuffer<float> d_x(x);
  ASSERT_EQ(cuda_error(dropout_forward_cuda(d_x.get(), d_x.get(), 4099, 0.3f, seed, offset, nullptr)), "");
  ASSERT_EQ(cuda_error(
                dropout_forward_cuda(d_x.get() + 4099, d_x.get() + 4099, n - 4099, 0.3f, seed, offset + 4099, nullptr)),
            "");
  ASSERT_EQ(synchronize(), "");
  expect_bitwise_equal(d_x.download(), whole, "sharded in place");
#endif
}

#if defined(MESHSIM_HAVE_CUDA)
// The CPU pair the fused kernel must reproduce: y = dropout(x); y += residual.
std::vector<float> dropout_add_cpu(const std::vector<float>& x, const std::vector<float>& residual, float p,
                                   std::uint64_t seed, std::uint64_t offset) {
  std::vector<float> y(x.size());
  dropout_forward_cpu(x.data(), y.data(), x.size(), p, seed, offset);
  reduce_sum_cpu(y.data(), residual.data(), y.size());
  return y;
}
#endif

TEST(DropoutCuda, DropoutAddBitIdenticalToCpuPair) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  const std::uint64_t seed = 0x0123456789abcdefull;
  for (const std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{1027}, (std::size_t{1} << 21) + 3})
    for (const std::uint64_t offset : {std::uint64_t{0}, std::uint64_t{3}, (std::uint64_t{1} << 33) + 1})
      for (const float p : {0.f, 0.1f, 1.f})
        for (const std::size_t pad : {0, 1}) {
          SCOPED_TRACE("n " + std::to_string(n) + " offset " + std::to_string(offset) + " p " + std::to_string(p) +
                       " pad " + std::to_string(pad));
          auto x = random_vector(n, 1, -3.f, 3.f), res = random_vector(n, 2, -3.f, 3.f);
          const std::vector<float> want = dropout_add_cpu(x, res, p, seed, offset);
          DeviceBuffer<float> d_x(x, pad), d_res(res, pad), d_y(n, pad);
          ASSERT_EQ(
              cuda_error(dropout_add_forward_cuda(d_x.get(), d_res.get(), d_y.get(), n, p, seed, offset, nullptr)), "");
          ASSERT_EQ(synchronize(), "");
          expect_bitwise_equal(d_y.download(), want, "y");
          // In place on the residual stream (y aliases residual), as a transformer block does.
          ASSERT_EQ(
              cuda_error(dropout_add_forward_cuda(d_x.get(), d_res.get(), d_res.get(), n, p, seed, offset, nullptr)),
              "");
          ASSERT_EQ(synchronize(), "");
          expect_bitwise_equal(d_res.download(), want, "y in place (residual)");
        }
#endif
}

TEST(DropoutCuda, Bf16DropoutAndDropoutAddAreRoundedCpuResults) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  const std::uint64_t seed = 0x0123456789abcdefull;
  for (const std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{1027}, (std::size_t{1} << 21) + 3})
    for (const std::uint64_t offset :
         {std::uint64_t{0}, std::uint64_t{3}, std::uint64_t{8}, (std::uint64_t{1} << 33) + 1})
      for (const float p : {0.f, 0.1f, 0.5f, 1.f})
        for (const std::size_t pad : {0, 1}) {
          SCOPED_TRACE("bf16 n " + std::to_string(n) + " offset " + std::to_string(offset) + " p " + std::to_string(p) +
                       " pad " + std::to_string(pad));
          const auto x = to_bf16_vector(random_vector(n, 1, -3.f, 3.f)), dy = to_bf16_vector(random_vector(n, 2));
          const auto res = to_bf16_vector(random_vector(n, 3, -3.f, 3.f));
          const auto xf = to_float_vector(x), dyf = to_float_vector(dy), resf = to_float_vector(res);
          std::vector<float> y(n), dx(n);
          dropout_forward_cpu(xf.data(), y.data(), n, p, seed, offset);
          dropout_backward_cpu(dyf.data(), dx.data(), n, p, seed, offset);
          const std::vector<float> yadd = dropout_add_cpu(xf, resf, p, seed, offset);
          DeviceBuffer<bf16> d_x(x, pad), d_dy(dy, pad), d_res(res, pad), d_y(n, pad), d_dx(n, pad), d_yadd(n, pad);
          ASSERT_EQ(cuda_error(dropout_forward_cuda(d_x.get(), d_y.get(), n, p, seed, offset, nullptr)), "");
          ASSERT_EQ(cuda_error(dropout_backward_cuda(d_dy.get(), d_dx.get(), n, p, seed, offset, nullptr)), "");
          ASSERT_EQ(
              cuda_error(dropout_add_forward_cuda(d_x.get(), d_res.get(), d_yadd.get(), n, p, seed, offset, nullptr)),
              "");
          ASSERT_EQ(synchronize(), "");
          expect_bf16_bits_equal(d_y.download(), to_bf16_vector(y), "y");
          expect_bf16_bits_equal(d_dx.download(), to_bf16_vector(dx), "dx");
          expect_bf16_bits_equal(d_yadd.download(), to_bf16_vector(yadd), "dropout-add y");
        }
#endif
}

}  // namespace
}  // namespace meshsim::kernels
