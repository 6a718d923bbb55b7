#include "kernels/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/kernels_test_util.h"

namespace meshsim::kernels {
namespace {

using namespace testing;  // kernels_test_util.h

TEST(Gelu, ForwardMatchesTanhFormulaAndKnownValues) {
  auto x = random_vector(200, 1, -6.f, 6.f);
  x.insert(x.end(), {0.f, 1.f, -1.f});
  std::vector<float> y(x.size());
  gelu_forward_cpu(x.data(), y.data(), x.size());
  std::vector<double> want(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    want[i] = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  }
  expect_near_all(y, want, 1e-6, 1e-5, "gelu");
  EXPECT_EQ(y[200], 0.f);
  EXPECT_NEAR(y[201], 0.841192, 1e-5);   // GeLU-tanh(1)
  EXPECT_NEAR(y[202], -0.158808, 1e-5);  // GeLU-tanh(-1)
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  auto x = random_vector(64, 2, -4.f, 4.f);
  const auto w = random_vector(64, 3);
  std::vector<float> y(64), dx(64);
  auto loss = [&] {
    gelu_forward_cpu(x.data(), y.data(), x.size());
    return weighted_sum(y, w);
  };
  gelu_backward_cpu(w.data(), x.data(), dx.data(), x.size());
  expect_near_all(dx, numeric_grad(loss, x, 1e-3f), 1e-3, 1e-3, "dx");
}

TEST(SwiGlu, FusedAndTwoTensorLayoutsAgreeWithFormula) {
  const std::int64_t rows = 3, cols = 5;
  const auto fused = random_vector(rows * 2 * cols, 4, -3.f, 3.f);  // [a | b] per row
  std::vector<float> a(rows * cols), b(rows * cols);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t j = 0; j < cols; ++j) {
      a[r * cols + j] = fused[r * 2 * cols + j];
      b[r * cols + j] = fused[r * 2 * cols + cols + j];
    }
  std::vector<float> out1(rows * cols), out2(rows * cols);
  swiglu_forward_cpu(fused.data(), fused.data() + cols, 2 * cols, out1.data(), rows, cols);
  swiglu_forward_cpu(a.data(), b.data(), cols, out2.data(), rows, cols);
  EXPECT_EQ(out1, out2);
  std::vector<double> want(rows * cols);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = a[i] / (1 + std::exp(-double(a[i]))) * b[i];
  expect_near_all(out1, want, 1e-6, 1e-5, "swiglu");
}

TEST(SwiGlu, BackwardMatchesFiniteDifferencesInFusedLayout) {
  const std::int64_t rows = 4, cols = 6;
  auto x = random_vector(rows * 2 * cols, 5, -3.f, 3.f);
  const auto w = random_vector(rows * cols, 6);
  std::vector<float> out(rows * cols), dx(x.size(), 99.f);
  auto loss = [&] {
    swiglu_forward_cpu(x.data(), x.data() + cols, 2 * cols, out.data(), rows, cols);
    return weighted_sum(out, w);
  };
  swiglu_backward_cpu(w.data(), x.data(), x.data() + cols, 2 * cols, dx.data(), dx.data() + cols, rows, cols);
  expect_near_all(dx, numeric_grad(loss, x, 1e-3f), 1e-3, 1e-3, "dx");
}

TEST(Bias, AddAndAccumulatedGradientMatchNaive) {
  const std::int64_t rows = 7, cols = 130;  // more than one column block
  auto y = random_vector(rows * cols, 7);
  const auto y0 = y, bias = random_vector(cols, 8), dy = random_vector(rows * cols, 9);
  add_bias_cpu(y.data(), bias.data(), rows, cols);
  std::vector<float> dbias(cols, 2.f);
  bias_backward_cpu(dy.data(), dbias.data(), rows, cols);
  for (std::int64_t j = 0; j < cols; ++j) {
    double s = 2;
    for (std::int64_t r = 0; r < rows; ++r) {
      EXPECT_FLOAT_EQ(y[r * cols + j], y0[r * cols + j] + bias[j]);
      s += dy[r * cols + j];
    }
    EXPECT_NEAR(dbias[j], s, 1e-5);
  }
}

}  // namespace
}  // namespace meshsim::kernels
