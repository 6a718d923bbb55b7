// GeLU, SwiGLU and bias CUDA kernels against the CPU references (skipped without a GPU).
//
// Tolerance: |gpu - cpu| <= 1e-5 + 1e-5 |cpu| for the element-wise ops (tanhf/expf on the
// device are within 2 ulp, and nvcc contracts a * b + c into FMAs); 1e-3 + 1e-4 |cpu| for
// dbias (a column sum over rows in a different order). bf16 GeLU and SwiGLU: bf16 inputs, the
// float reference on them widened, outputs within that tolerance plus one bf16 ulp
// (bf16_tolerance, cuda_test_util.h; CudaTestUtil.Bf16Tolerance... checks that bound on the
// host, with or without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda_ops.h"
#include "kernels/cuda_test_util.h"
#include "kernels/elementwise.h"
#include "kernels/kernels_test_util.h"

namespace meshsim::kernels {
namespace {

using namespace testing;  // kernels_test_util.h and cuda_test_util.h

#if defined(MESHSIM_HAVE_CUDA)
constexpr double kTol = 1e-5;
#endif

TEST(ElementwiseCuda, GeluMatchesCpu) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{4099}, (std::size_t{1} << 22) + 3})
    for (const std::size_t pad : {0, 1}) {
      SCOPED_TRACE("n " + std::to_string(n) + " pad " + std::to_string(pad));
      auto x = random_vector(n, 1, -6.f, 6.f), dy = random_vector(n, 2);
      std::vector<float> y(n), dx(n);
      gelu_forward_cpu(x.data(), y.data(), n);
      gelu_backward_cpu(dy.data(), x.data(), dx.data(), n);
      DeviceBuffer<float> d_x(x, pad), d_dy(dy, pad), d_y(n, pad), d_dx(n, pad);
      ASSERT_EQ(cuda_error(gelu_forward_cuda(d_x.get(), d_y.get(), n, nullptr)), "");
      ASSERT_EQ(cuda_error(gelu_backward_cuda(d_dy.get(), d_x.get(), d_dx.get(), n, nullptr)), "");
      ASSERT_EQ(synchronize(), "");
      expect_near_all(d_y.download(), y, kTol, kTol, "y");
      expect_near_all(d_dx.download(), dx, kTol, kTol, "dx");
      // In place (y aliases x), as the header allows.
      ASSERT_EQ(cuda_error(gelu_forward_cuda(d_x.get(), d_x.get(), n, nullptr)), "");
      ASSERT_EQ(synchronize(), "");
      expect_near_all(d_x.download(), y, kTol, kTol, "y in place");
    }
#endif
}

TEST(ElementwiseCuda, SwigluMatchesCpuSeparateAndFused) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  struct Case {
    std::int64_t rows, cols;
    bool fused;
  };
  for (const Case c :
       {Case{3, 5, false}, Case{3, 5, true}, Case{64, 256, false}, Case{64, 256, true}, Case{512, 2816, true}}) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + " cols " + std::to_string(c.cols) + (c.fused ? " fused" : ""));
    const std::int64_t ld = c.fused ? 2 * c.cols : c.cols;
    const std::size_t in_n = c.rows * ld, out_n = c.rows * c.cols;
    // Fused: one [rows, 2 cols] tensor, a = first half, b = second half; else two tensors.
    auto a = random_vector(in_n, 3, -4.f, 4.f), b = random_vector(in_n, 4), dout = random_vector(out_n, 5);
    const float* pb = c.fused ? a.data() + c.cols : b.data();
    std::vector<float> out(out_n), da(in_n), db(in_n);
    float* pdb = c.fused ? da.data() + c.cols : db.data();
    swiglu_forward_cpu(a.data(), pb, ld, out.data(), c.rows, c.cols);
    swiglu_backward_cpu(dout.data(), a.data(), pb, ld, da.data(), pdb, c.rows, c.cols);

    DeviceBuffer<float> d_a(a), d_b(b), d_dout(dout), d_out(out_n), d_da(std::vector<float>(in_n, 0.f)),
        d_db(std::vector<float>(in_n, 0.f));
    const float* gb = c.fused ? d_a.get() + c.cols : d_b.get();
    float* gdb = c.fused ? d_da.get() + c.cols : d_db.get();
    ASSERT_EQ(cuda_error(swiglu_forward_cuda(d_a.get(), gb, ld, d_out.get(), c.rows, c.cols, nullptr)), "");
    ASSERT_EQ(
        cuda_error(swiglu_backward_cuda(d_dout.get(), d_a.get(), gb, ld, d_da.get(), gdb, c.rows, c.cols, nullptr)),
        "");
    ASSERT_EQ(synchronize(), "");
    expect_near_all(d_out.download(), out, kTol, kTol, "out");
    // Fused: da holds da and db in its two halves; separate: two full tensors.
    expect_near_all(d_da.download(), da, kTol, kTol, c.fused ? "da|db" : "da");
    if (!c.fused) expect_near_all(d_db.download(), db, kTol, kTol, "db");
  }
#endif
}

TEST(ElementwiseCuda, BiasForwardBackwardMatchCpu) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{3, 5}, {100, 64}, {2048, 1000}}) {
    SCOPED_TRACE("rows " + std::to_string(rows) + " cols " + std::to_string(cols));
    const std::size_t n = rows * cols;
    auto y = random_vector(n, 6), bias = random_vector(cols, 7), dy = random_vector(n, 8);
    auto dbias0 = random_vector(cols, 9);
    DeviceBuffer<float> d_y(y), d_bias(bias), d_dy(dy), d_dbias(dbias0);
    std::vector<float> dbias = dbias0;
    add_bias_cpu(y.data(), bias.data(), rows, cols);
    bias_backward_cpu(dy.data(), dbias.data(), rows, cols);
    ASSERT_EQ(cuda_error(add_bias_cuda(d_y.get(), d_bias.get(), rows, cols, nullptr)), "");
    ASSERT_EQ(cuda_error(bias_backward_cuda(d_dy.get(), d_dbias.get(), rows, cols, nullptr)), "");
    ASSERT_EQ(synchronize(), "");
    expect_near_all(d_y.download(), y, kTol, kTol, "y");
    expect_near_all(d_dbias.download(), dbias, 1e-3, 1e-4, "dbias (accumulated)");
  }
#endif
}

// Runs everywhere (no GPU needed): the bf16 tolerance of cuda_test_util.h admits every
// narrowing of a float within the float tolerance, and not a result three bf16 ulps off.
TEST(CudaTestUtil, Bf16ToleranceCoversOneNarrowingOfAFloatWithinTheFloatTolerance) {
  const auto w = random_vector(100000, 21, -1.f, 1.f);
  const auto mag = random_vector(w.size(), 22, -20.f, 20.f);
  for (const auto& [atol, rtol] : {std::pair<double, double>{1e-5, 1e-5}, {1e-4, 1e-3}, {1e-7, 1e-5}, {0.0, 0.0}})
    for (std::size_t i = 0; i < w.size(); ++i) {
      const double want = static_cast<double>(w[i]) * std::exp2(static_cast<double>(mag[i]));
      for (const double sign : {-1.0, 1.0}) {
        // The float kernel's worst allowed result, then the bf16 kernel's one narrowing of it.
        const auto g = static_cast<float>(want + sign * 0.999 * (atol + rtol * std::abs(want)));
        const double b = to_float(to_bf16(g));
        ASSERT_LE(std::abs(b - want), bf16_tolerance(want, atol, rtol)) << "want " << want << " g " << g;
      }
      // Three bf16 ulps beyond to_bf16(want), away from zero, is outside: at least 2.5 ulps
      // > 2.5 * 2^-8 |want| from want, more than the tolerance's (2^-7 + rtol) |want| + atol
      // (1 + 2^-7) with rtol <= 1e-3 and atol <= 1e-4 |want|.
      if (std::abs(want) > 1e4 * atol && want != 0.0) {
        const bf16 near = to_bf16(static_cast<float>(want));
        const double off = to_float(bf16{static_cast<std::uint16_t>(near.bits + 3)});
        if (std::isfinite(off)) {
          EXPECT_GT(std::abs(off - want), bf16_tolerance(want, atol, rtol)) << "want " << want;
        }
      }
    }
}

TEST(ElementwiseCuda, Bf16GeluMatchesCpu) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  // pad = 1 bf16: 2 bytes off, the scalar path; n % 8 != 0: the vector path's (eight bf16 a
  // load) scalar tail.
  for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{4099}, (std::size_t{1} << 22) + 3})
    for (const std::size_t pad : {0, 1}) {
      SCOPED_TRACE("bf16 n " + std::to_string(n) + " pad " + std::to_string(pad));
      const auto x = to_bf16_vector(random_vector(n, 1, -6.f, 6.f)), dy = to_bf16_vector(random_vector(n, 2));
      const auto xf = to_float_vector(x), dyf = to_float_vector(dy);
      std::vector<float> y(n), dx(n);
      gelu_forward_cpu(xf.data(), y.data(), n);
      gelu_backward_cpu(dyf.data(), xf.data(), dx.data(), n);
      DeviceBuffer<bf16> d_x(x, pad), d_dy(dy, pad), d_y(n, pad), d_dx(n, pad);
      ASSERT_EQ(cuda_error(gelu_forward_cuda(d_x.get(), d_y.get(), n, nullptr)), "");
      ASSERT_EQ(cuda_error(gelu_backward_cuda(d_dy.get(), d_x.get(), d_dx.get(), n, nullptr)), "");
      ASSERT_EQ(synchronize(), "");
      expect_bf16_near_all(d_y.download(), y, kTol, kTol, "y");
      expect_bf16_near_all(d_dx.download(), dx, kTol, kTol, "dx");
      ASSERT_EQ(cuda_error(gelu_forward_cuda(d_x.get(), d_x.get(), n, nullptr)), "");
      ASSERT_EQ(synchronize(), "");
      expect_bf16_near_all(d_x.download(), y, kTol, kTol, "y in place");
    }
#endif
}

TEST(ElementwiseCuda, Bf16SwigluMatchesCpuSeparateAndFused) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  struct Case {
    std::int64_t rows, cols;
    bool fused;
  };
  // cols 5: scalar; 12 fused: cols % 4 == 0 but b = a + 12 bf16 is only 8-byte aligned, scalar;
  // 20: four bf16 per load (rows of 40 bytes: 16-byte aligned every other row, so not eight);
  // 256 and 2816: eight bf16 per load (fused b at 512 / 5632 bytes: 16-byte aligned).
  for (const Case c : {Case{3, 5, false}, Case{3, 5, true}, Case{7, 12, true}, Case{4, 20, false}, Case{64, 256, false},
                       Case{64, 256, true}, Case{512, 2816, true}}) {
    SCOPED_TRACE("bf16 rows " + std::to_string(c.rows) + " cols " + std::to_string(c.cols) + (c.fused ? " fused" : ""));
    const std::int64_t ld = c.fused ? 2 * c.cols : c.cols;
    const std::size_t in_n = c.rows * ld, out_n = c.rows * c.cols;
    const auto a = to_bf16_vector(random_vector(in_n, 3, -4.f, 4.f)), b = to_bf16_vector(random_vector(in_n, 4));
    const auto dout = to_bf16_vector(random_vector(out_n, 5));
    const auto af = to_float_vector(a), bf = to_float_vector(b), doutf = to_float_vector(dout);
    const float* pb = c.fused ? af.data() + c.cols : bf.data();
    std::vector<float> out(out_n), da(in_n), db(in_n);
    float* pdb = c.fused ? da.data() + c.cols : db.data();
    swiglu_forward_cpu(af.data(), pb, ld, out.data(), c.rows, c.cols);
    swiglu_backward_cpu(doutf.data(), af.data(), pb, ld, da.data(), pdb, c.rows, c.cols);

    DeviceBuffer<bf16> d_a(a), d_b(b), d_dout(dout), d_out(out_n), d_da(std::vector<bf16>(in_n, bf16{})),
        d_db(std::vector<bf16>(in_n, bf16{}));
    const bf16* gb = c.fused ? d_a.get() + c.cols : d_b.get();
    bf16* gdb = c.fused ? d_da.get() + c.cols : d_db.get();
    ASSERT_EQ(cuda_error(swiglu_forward_cuda(d_a.get(), gb, ld, d_out.get(), c.rows, c.cols, nullptr)), "");
    ASSERT_EQ(
        cuda_error(swiglu_backward_cuda(d_dout.get(), d_a.get(), gb, ld, d_da.get(), gdb, c.rows, c.cols, nullptr)),
        "");
    ASSERT_EQ(synchronize(), "");
    expect_bf16_near_all(d_out.download(), out, kTol, kTol, "out");
    expect_bf16_near_all(d_da.download(), da, kTol, kTol, c.fused ? "da|db" : "da");
    if (!c.fused) expect_bf16_near_all(d_db.download(), db, kTol, kTol, "db");
  }
#endif
}

}  // namespace
}  // namespace meshsim::kernels
