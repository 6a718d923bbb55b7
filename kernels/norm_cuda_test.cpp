// LayerNorm CUDA kernels against the CPU references (skipped without a GPU).
//
// Tolerance: |gpu - cpu| <= 1e-4 + 1e-4 |cpu| for y, dx, mean, rstd, stats (the GPU sums in
// float, the references in double); 1e-3 + 1e-4 |cpu| for dgamma/dbeta (sums over rows).
// bf16 overloads: bf16 inputs, the float reference on them widened; bf16 outputs (y, dx) within
// that tolerance plus one bf16 ulp (bf16_tolerance, cuda_test_util.h); mean, rstd, stats,
// dstats, dgamma, dbeta are float and keep the float tolerance.
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "kernels/cuda_ops.h"
#include "kernels/cuda_test_util.h"
#include "kernels/kernels_test_util.h"
#include "kernels/norm.h"

namespace meshsim::kernels {
namespace {

using namespace testing;  // kernels_test_util.h and cuda_test_util.h

#if defined(MESHSIM_HAVE_CUDA)
constexpr double kTol = 1e-4, kSumAtol = 1e-3;

// Shapes cover: h % 4 != 0 (scalar path), register rows of K = 1..8 vectors per thread, more
// than 256 threads per row, h beyond the register path in shared memory (float4 and scalar;
// 12288 in the default 48 KiB, 16384 and 40000 asking for more, the backward's 2h floats of
// 40000 past any GPU's: the loop), and past shared memory (70000: the global-memory loop).
struct Shape {
  std::int64_t rows, h;
};
const Shape kShapes[] = {{3, 5},    {7, 64},    {33, 1000}, {16, 1024}, {9, 8192},
                         {6, 3001}, {4, 12288}, {2, 16384}, {3, 40000}, {2, 70000}};

void check_forward_and_backward(std::int64_t rows, std::int64_t h, std::size_t pad) {
  SCOPED_TRACE("rows " + std::to_string(rows) + " h " + std::to_string(h) + " pad " + std::to_string(pad));
  const std::size_t n = rows * h;
  auto x = random_vector(n, 1, -2.f, 3.f), dy = random_vector(n, 2);
  auto gamma = random_vector(h, 3, 0.5f, 1.5f), beta = random_vector(h, 4);
  auto dgamma0 = random_vector(h, 5), dbeta0 = random_vector(h, 6);  // accumulate onto these
  std::vector<float> y(n), mean(rows), rstd(rows), dx(n), dgamma = dgamma0, dbeta = dbeta0;
  layernorm_forward_cpu(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows, h, 1e-5f);
  layernorm_backward_cpu(dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(), dx.data(), dgamma.data(),
                         dbeta.data(), rows, h);

  DeviceBuffer<float> d_x(x, pad), d_dy(dy, pad), d_gamma(gamma), d_beta(beta), d_y(n, pad), d_mean(rows), d_rstd(rows),
      d_dx(n, pad), d_dgamma(dgamma0), d_dbeta(dbeta0);
  ASSERT_EQ(cuda_error(layernorm_forward_cuda(d_x.get(), d_gamma.get(), d_beta.get(), d_y.get(), d_mean.get(),
                                              d_rstd.get(), rows, h, 1e-5f, nullptr)),
            "");
  ASSERT_EQ(synchronize(), "");
  expect_near_all(d_y.download(), y, kTol, kTol, "y");
  expect_near_all(d_mean.download(), mean, kTol, kTol, "mean");
  expect_near_all(d_rstd.download(), rstd, kTol, kTol, "rstd");
  // The backward reads the CPU's mean/rstd so it is compared on identical inputs.
  d_mean.upload(mean);
  d_rstd.upload(rstd);
  ASSERT_EQ(cuda_error(layernorm_backward_cuda(d_dy.get(), d_x.get(), d_gamma.get(), d_mean.get(), d_rstd.get(),
                                               d_dx.get(), d_dgamma.get(), d_dbeta.get(), rows, h, nullptr)),
            "");
  ASSERT_EQ(synchronize(), "");
  expect_near_all(d_dx.download(), dx, kTol, kTol, "dx");
  expect_near_all(d_dgamma.download(), dgamma, kSumAtol, kTol, "dgamma");
  expect_near_all(d_dbeta.download(), dbeta, kSumAtol, kTol, "dbeta");
}

// The bf16 overloads on the same shapes (and paths: register rows, shared-memory rows, the
// loop; pad = 1 bf16 puts every row pointer 2 bytes off, so W = 1).
void check_forward_and_backward_bf16(std::int64_t rows, std::int64_t h, std::size_t pad) {
  SCOPED_TRACE("bf16 rows " + std::to_string(rows) + " h " + std::to_string(h) + " pad " + std::to_string(pad));
  const std::size_t n = rows * h;
  const auto x = to_bf16_vector(random_vector(n, 1, -2.f, 3.f)), dy = to_bf16_vector(random_vector(n, 2));
  const auto gamma = to_bf16_vector(random_vector(h, 3, 0.5f, 1.5f)), beta = to_bf16_vector(random_vector(h, 4));
  const auto xf = to_float_vector(x), dyf = to_float_vector(dy), gf = to_float_vector(gamma),
             bf = to_float_vector(beta);
  auto dgamma0 = random_vector(h, 5), dbeta0 = random_vector(h, 6);  // float, accumulated onto
  std::vector<float> y(n), mean(rows), rstd(rows), dx(n), dgamma = dgamma0, dbeta = dbeta0;
  layernorm_forward_cpu(xf.data(), gf.data(), bf.data(), y.data(), mean.data(), rstd.data(), rows, h, 1e-5f);
  layernorm_backward_cpu(dyf.data(), xf.data(), gf.data(), mean.data(), rstd.data(), dx.data(), dgamma.data(),
                         dbeta.data(), rows, h);

  DeviceBuffer<bf16> d_x(x, pad), d_dy(dy, pad), d_gamma(gamma), d_beta(beta), d_y(n, pad), d_dx(n, pad);
  DeviceBuffer<float> d_mean(rows), d_rstd(rows), d_dgamma(dgamma0), d_dbeta(dbeta0);
  ASSERT_EQ(cuda_error(layernorm_forward_cuda(d_x.get(), d_gamma.get(), d_beta.get(), d_y.get(), d_mean.get(),
                                              d_rstd.get(), rows, h, 1e-5f, nullptr)),
            "");
  ASSERT_EQ(synchronize(), "");
  expect_bf16_near_all(d_y.download(), y, kTol, kTol, "y");
  expect_near_all(d_mean.download(), mean, kTol, kTol, "mean");
  expect_near_all(d_rstd.download(), rstd, kTol, kTol, "rstd");
  d_mean.upload(mean);
  d_rstd.upload(rstd);
  ASSERT_EQ(cuda_error(layernorm_backward_cuda(d_dy.get(), d_x.get(), d_gamma.get(), d_mean.get(), d_rstd.get(),
                                               d_dx.get(), d_dgamma.get(), d_dbeta.get(), rows, h, nullptr)),
            "");
  ASSERT_EQ(synchronize(), "");
  expect_bf16_near_all(d_dx.download(), dx, kTol, kTol, "dx");
  expect_near_all(d_dgamma.download(), dgamma, kSumAtol, kTol, "dgamma");
  expect_near_all(d_dbeta.download(), dbeta, kSumAtol, kTol, "dbeta");
}

// RMSNorm (the LayerNorm kernels with no mean and no beta) on every shape and path, float and
// bf16 (T), against the float reference on the same (widened) inputs; bf16 outputs within the
// float tolerance plus one bf16 ulp.
template <class T>
void check_rmsnorm(std::int64_t rows, std::int64_t h, std::size_t pad) {
  constexpr bool kBf16 = sizeof(T) == 2;
  SCOPED_TRACE(std::string(kBf16 ? "bf16" : "float") + " rmsnorm rows " + std::to_string(rows) + " h " +
               std::to_string(h) + " pad " + std::to_string(pad));
  const std::size_t n = rows * h;
  auto round = [&](std::vector<float> v) { return kBf16 ? to_float_vector(to_bf16_vector(v)) : v; };
  const auto x = round(random_vector(n, 1, -2.f, 3.f)), dy = round(random_vector(n, 2)),
             gamma = round(random_vector(h, 3, 0.5f, 1.5f));
  const auto dgamma0 = random_vector(h, 5);
  std::vector<float> y(n), rstd(rows), dx(n), dgamma = dgamma0;
  rmsnorm_forward_cpu(x.data(), gamma.data(), y.data(), rstd.data(), rows, h, 1e-5f);
  rmsnorm_backward_cpu(dy.data(), x.data(), gamma.data(), rstd.data(), dx.data(), dgamma.data(), rows, h);
  auto as_t = [&](const std::vector<float>& v) {
    if constexpr (kBf16)
      return to_bf16_vector(v);
    else
      return v;
  };
  DeviceBuffer<T> d_x(as_t(x), pad), d_dy(as_t(dy), pad), d_gamma(as_t(gamma)), d_y(n, pad), d_dx(n, pad);
  DeviceBuffer<float> d_rstd(rows), d_dgamma(dgamma0);
  ASSERT_EQ(
      cuda_error(rmsnorm_forward_cuda(d_x.get(), d_gamma.get(), d_y.get(), d_rstd.get(), rows, h, 1e-5f, nullptr)), "");
  ASSERT_EQ(synchronize(), "");
  auto expect = [&](const std::vector<T>& got, const std::vector<float>& want, const char* what) {
    if constexpr (kBf16)
      expect_bf16_near_all(got, want, kTol, kTol, what);
    else
      expect_near_all(got, want, kTol, kTol, what);
  };
  expect(d_y.download(), y, "y");
  expect_near_all(d_rstd.download(), rstd, kTol, kTol, "rstd");
  d_rstd.upload(rstd);
  ASSERT_EQ(cuda_error(rmsnorm_backward_cuda(d_dy.get(), d_x.get(), d_gamma.get(), d_rstd.get(), d_dx.get(),
                                             d_dgamma.get(), rows, h, nullptr)),
            "");
  ASSERT_EQ(synchronize(), "");
  expect(d_dx.download(), dx, "dx");
  expect_near_all(d_dgamma.download(), dgamma, kSumAtol, kTol, "dgamma");
}
#endif

TEST(NormCuda, ForwardBackwardMatchCpu) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  for (const Shape& s : kShapes) check_forward_and_backward(s.rows, s.h, 0);
#endif
}

TEST(NormCuda, MisalignedPointersTakeTheScalarPath) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  check_forward_and_backward(5, 1024, 1);
  check_forward_and_backward(3, 40000, 1);
#endif
}

TEST(NormCuda, TwoDPiecesMatchCpu) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  // One rank's slice (h_local of h columns); the "all-reduced" stats come from the CPU over
  // the full row so both sides apply identical inputs.
  for (const auto& [rows, h_local, q] : {std::array<std::int64_t, 3>{3, 5, 2}, {17, 256, 4}, {8, 2048, 2}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " h_local " + std::to_string(h_local));
    const std::int64_t h = h_local * q;
    const std::size_t n = rows * h_local;
    auto x = random_vector(n, 11, -1.f, 2.f), dy = random_vector(n, 12);
    auto gamma = random_vector(h_local, 13), beta = random_vector(h_local, 14);
    auto dgamma0 = random_vector(h_local, 15), dbeta0 = random_vector(h_local, 16);

    std::vector<float> stats(2 * rows);
    layernorm2d_stats_cpu(x.data(), stats.data(), rows, h_local);
    DeviceBuffer<float> d_x(x), d_stats(2 * rows);
    ASSERT_EQ(cuda_error(layernorm2d_stats_cuda(d_x.get(), d_stats.get(), rows, h_local, nullptr)), "");
    ASSERT_EQ(synchronize(), "");
    expect_near_all(d_stats.download(), stats, kTol, kTol, "stats");

    // Pretend the other q - 1 ranks hold the same values: global sums are q times the local ones.
    std::vector<float> global(2 * rows);
    for (std::size_t i = 0; i < global.size(); ++i) global[i] = static_cast<float>(q) * stats[i];
    std::vector<float> y(n), mean(rows), rstd(rows);
    layernorm2d_apply_cpu(x.data(), global.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows,
                          h_local, h, 1e-5f);
    DeviceBuffer<float> d_global(global), d_gamma(gamma), d_beta(beta), d_y(n), d_mean(rows), d_rstd(rows);
    ASSERT_EQ(cuda_error(layernorm2d_apply_cuda(d_x.get(), d_global.get(), d_gamma.get(), d_beta.get(), d_y.get(),
                                                d_mean.get(), d_rstd.get(), rows, h_local, h, 1e-5f, nullptr)),
              "");
    ASSERT_EQ(synchronize(), "");
    expect_near_all(d_y.download(), y, kTol, kTol, "y");
    expect_near_all(d_mean.download(), mean, kTol, kTol, "mean");
    expect_near_all(d_rstd.download(), rstd, kTol, kTol, "rstd");

    std::vector<float> dstats(2 * rows);
    layernorm2d_backward_stats_cpu(dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(), dstats.data(), rows,
                                   h_local);
    d_mean.upload(mean);
    d_rstd.upload(rstd);
    DeviceBuffer<float> d_dy(dy), d_dstats(2 * rows);
    ASSERT_EQ(cuda_error(layernorm2d_backward_stats_cuda(d_dy.get(), d_x.get(), d_gamma.get(), d_mean.get(),
                                                         d_rstd.get(), d_dstats.get(), rows, h_local, nullptr)),
              "");
    ASSERT_EQ(synchronize(), "");
    expect_near_all(d_dstats.download(), dstats, kTol, kTol, "dstats");

    for (auto& v : dstats) v *= static_cast<float>(q);
    std::vector<float> dx(n), dgamma = dgamma0, dbeta = dbeta0;
    layernorm2d_backward_apply_cpu(dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(), dstats.data(),
                                   dx.data(), dgamma.data(), dbeta.data(), rows, h_local, h);
    d_dstats.upload(dstats);
    DeviceBuffer<float> d_dx(n), d_dgamma(dgamma0), d_dbeta(dbeta0);
    ASSERT_EQ(cuda_error(layernorm2d_backward_apply_cuda(d_dy.get(), d_x.get(), d_gamma.get(), d_mean.get(),
                                                         d_rstd.get(), d_dstats.get(), d_dx.get(), d_dgamma.get(),
                                                         d_dbeta.get(), rows, h_local, h, nullptr)),
              "");
    ASSERT_EQ(synchronize(), "");
    expect_near_all(d_dx.download(), dx, kTol, kTol, "dx");
    expect_near_all(d_dgamma.download(), dgamma, kSumAtol, kTol, "dgamma");
    expect_near_all(d_dbeta.download(), dbeta, kSumAtol, kTol, "dbeta");
  }
#endif
}

TEST(NormCuda, Bf16ForwardBackwardMatchCpu) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  for (const Shape& s : kShapes) check_forward_and_backward_bf16(s.rows, s.h, 0);
  check_forward_and_backward_bf16(5, 1024, 1);
  check_forward_and_backward_bf16(3, 12288, 1);
  check_forward_and_backward_bf16(3, 40000, 1);
#endif
}

TEST(NormCuda, Bf16TwoDPiecesMatchCpu) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  for (const auto& [rows, h_local, q] : {std::array<std::int64_t, 3>{3, 5, 2}, {17, 256, 4}, {8, 2048, 2}}) {
    SCOPED_TRACE("bf16 rows " + std::to_string(rows) + " h_local " + std::to_string(h_local));
    const std::int64_t h = h_local * q;
    const std::size_t n = rows * h_local;
    const auto x = to_bf16_vector(random_vector(n, 11, -1.f, 2.f)), dy = to_bf16_vector(random_vector(n, 12));
    const auto gamma = to_bf16_vector(random_vector(h_local, 13)), beta = to_bf16_vector(random_vector(h_local, 14));
    const auto xf = to_float_vector(x), dyf = to_float_vector(dy), gf = to_float_vector(gamma),
               bf = to_float_vector(beta);
    auto dgamma0 = random_vector(h_local, 15), dbeta0 = random_vector(h_local, 16);

    std::vector<float> stats(2 * rows);
    layernorm2d_stats_cpu(xf.data(), stats.data(), rows, h_local);
    DeviceBuffer<bf16> d_x(x);
    DeviceBuffer<float> d_stats(2 * rows);
    ASSERT_EQ(cuda_error(layernorm2d_stats_cuda(d_x.get(), d_stats.get(), rows, h_local, nullptr)), "");
    ASSERT_EQ(synchronize(), "");
    expect_near_all(d_stats.download(), stats, kTol, kTol, "stats");

    std::vector<float> global(2 * rows);
    for (std::size_t i = 0; i < global.size(); ++i) global[i] = static_cast<float>(q) * stats[i];
    std::vector<float> y(n), mean(rows), rstd(rows);
    layernorm2d_apply_cpu(xf.data(), global.data(), gf.data(), bf.data(), y.data(), mean.data(), rstd.data(), rows,
                          h_local, h, 1e-5f);
    DeviceBuffer<bf16> d_gamma(gamma), d_beta(beta), d_y(n);
    DeviceBuffer<float> d_global(global), d_mean(rows), d_rstd(rows);
    ASSERT_EQ(cuda_error(layernorm2d_apply_cuda(d_x.get(), d_global.get(), d_gamma.get(), d_beta.get(), d_y.get(),
                                                d_mean.get(), d_rstd.get(), rows, h_local, h, 1e-5f, nullptr)),
              "");
    ASSERT_EQ(synchronize(), "");
    expect_bf16_near_all(d_y.download(), y, kTol, kTol, "y");
    expect_near_all(d_mean.download(), mean, kTol, kTol, "mean");
    expect_near_all(d_rstd.download(), rstd, kTol, kTol, "rstd");

    std::vector<float> dstats(2 * rows);
    layernorm2d_backward_stats_cpu(dyf.data(), xf.data(), gf.data(), mean.data(), rstd.data(), dstats.data(), rows,
                                   h_local);
    d_mean.upload(mean);
    d_rstd.upload(rstd);
    DeviceBuffer<bf16> d_dy(dy);
    DeviceBuffer<float> d_dstats(2 * rows);
    ASSERT_EQ(cuda_error(layernorm2d_backward_stats_cuda(d_dy.get(), d_x.get(), d_gamma.get(), d_mean.get(),
                                                         d_rstd.get(), d_dstats.get(), rows, h_local, nullptr)),
              "");
    ASSERT_EQ(synchronize(), "");
    expect_near_all(d_dstats.download(), dstats, kTol, kTol, "dstats");

    for (auto& v : dstats) v *= static_cast<float>(q);
    std::vector<float> dx(n), dgamma = dgamma0, dbeta = dbeta0;
    layernorm2d_backward_apply_cpu(dyf.data(), xf.data(), gf.data(), mean.data(), rstd.data(), dstats.data(), dx.data(),
                                   dgamma.data(), dbeta.data(), rows, h_local, h);
    d_dstats.upload(dstats);
    DeviceBuffer<bf16> d_dx(n);
    DeviceBuffer<float> d_dgamma(dgamma0), d_dbeta(dbeta0);
    ASSERT_EQ(cuda_error(layernorm2d_backward_apply_cuda(d_dy.get(), d_x.get(), d_gamma.get(), d_mean.get(),
                                                         d_rstd.get(), d_dstats.get(), d_dx.get(), d_dgamma.get(),
                                                         d_dbeta.get(), rows, h_local, h, nullptr)),
              "");
    ASSERT_EQ(synchronize(), "");
    expect_bf16_near_all(d_dx.download(), dx, kTol, kTol, "dx");
    expect_near_all(d_dgamma.download(), dgamma, kSumAtol, kTol, "dgamma");
    expect_near_all(d_dbeta.download(), dbeta, kSumAtol, kTol, "dbeta");
  }
#endif
}

TEST(NormCuda, RmsNormMatchesCpuFloatAndBf16) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  for (const Shape& s : kShapes) {
    check_rmsnorm<float>(s.rows, s.h, 0);
    check_rmsnorm<bf16>(s.rows, s.h, 0);
  }
  check_rmsnorm<float>(5, 1024, 1);
  check_rmsnorm<bf16>(3, 8192, 1);
  check_rmsnorm<bf16>(3, 40000, 1);
#endif
}

}  // namespace
}  // namespace meshsim::kernels
