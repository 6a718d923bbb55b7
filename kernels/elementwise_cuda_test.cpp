// GeLU, SwiGLU and bias CUDA kernels against the CPU references (skipped without a GPU).
//
// Tolerance: |gpu - cpu| <= 1e-5 + 1e-5 |cpu| for the element-wise ops (tanhf/expf on the
// device are within 2 ulp, and nvcc contracts a * b + c into FMAs); 1e-3 + 1e-4 |cpu| for
// dbias (a column sum over rows in a different order).
#include <gtest/gtest.h>

#include <string>
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

}  // namespace
}  // namespace meshsim::kernels
