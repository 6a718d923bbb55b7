#include "kernels/norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/kernels_test_util.h"
#include "kernels/reduce.h"

namespace meshsim::kernels {
namespace {

using namespace testing;  // kernels_test_util.h

constexpr float kEps = 1e-5f;

TEST(LayerNorm, ForwardMatchesTextbookFormula) {
  const std::int64_t rows = 5, h = 37;
  auto x = random_vector(rows * h, 1, -2.f, 3.f);
  const auto gamma = random_vector(h, 2), beta = random_vector(h, 3);
  std::vector<float> y(rows * h), mean(rows), rstd(rows);
  layernorm_forward_cpu(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows, h, kEps);
  std::vector<double> want_y(rows * h), want_mean(rows), want_rstd(rows);
  for (std::int64_t r = 0; r < rows; ++r) {
    double s = 0, s2 = 0;
    for (std::int64_t j = 0; j < h; ++j) s += x[r * h + j];
    want_mean[r] = s / h;
    for (std::int64_t j = 0; j < h; ++j) s2 += std::pow(x[r * h + j] - want_mean[r], 2);
    want_rstd[r] = 1 / std::sqrt(s2 / h + kEps);
    for (std::int64_t j = 0; j < h; ++j)
      want_y[r * h + j] = (x[r * h + j] - want_mean[r]) * want_rstd[r] * gamma[j] + beta[j];
  }
  expect_near_all(y, want_y, 1e-5, 1e-5, "y");
  expect_near_all(mean, want_mean, 1e-6, 1e-6, "mean");
  expect_near_all(rstd, want_rstd, 1e-6, 1e-5, "rstd");
}

TEST(RmsNorm, ForwardMatchesTextbookFormula) {
  const std::int64_t rows = 5, h = 37;
  const auto x = random_vector(rows * h, 11, -2.f, 3.f), gamma = random_vector(h, 12);
  std::vector<float> y(rows * h), rstd(rows);
  rmsnorm_forward_cpu(x.data(), gamma.data(), y.data(), rstd.data(), rows, h, kEps);
  std::vector<double> want_y(rows * h), want_rstd(rows);
  for (std::int64_t r = 0; r < rows; ++r) {
    double s2 = 0;
    for (std::int64_t j = 0; j < h; ++j) s2 += std::pow(x[r * h + j], 2);
    want_rstd[r] = 1 / std::sqrt(s2 / h + kEps);
    for (std::int64_t j = 0; j < h; ++j) want_y[r * h + j] = x[r * h + j] * want_rstd[r] * gamma[j];
  }
  expect_near_all(y, want_y, 1e-5, 1e-5, "y");
  expect_near_all(rstd, want_rstd, 1e-6, 1e-5, "rstd");
}

// A row of equal values x = c: E[x^2] = c^2, so y = gamma * c / sqrt(c^2 + eps), about gamma * sign(c)
// (LayerNorm would give beta: the centring is what RMSNorm leaves out).
TEST(RmsNorm, ConstantRowKeepsItsSign) {
  const std::int64_t h = 8;
  std::vector<float> x(h, -3.f), gamma(h, 2.f), y(h), rstd(1);
  rmsnorm_forward_cpu(x.data(), gamma.data(), y.data(), rstd.data(), 1, h, kEps);
  for (float v : y) EXPECT_NEAR(v, -2.0 * 3 / std::sqrt(9 + kEps), 1e-6);
  EXPECT_NEAR(rstd[0], 1 / std::sqrt(9 + kEps), 1e-7);
}

TEST(RmsNorm, BackwardMatchesFiniteDifferencesAndAccumulatesDgamma) {
  const std::int64_t rows = 4, h = 11;
  auto x = random_vector(rows * h, 14, -2.f, 2.f);
  auto gamma = random_vector(h, 15, 0.5f, 1.5f);
  const auto w = random_vector(rows * h, 16);  // dy
  std::vector<float> y(rows * h), rstd(rows);
  auto loss = [&] {
    rmsnorm_forward_cpu(x.data(), gamma.data(), y.data(), rstd.data(), rows, h, kEps);
    return weighted_sum(y, w);
  };
  loss();
  std::vector<float> dx(rows * h), dgamma(h, 1.f);  // prior contents: accumulated onto
  rmsnorm_backward_cpu(w.data(), x.data(), gamma.data(), rstd.data(), dx.data(), dgamma.data(), rows, h);
  auto want_dg = numeric_grad(loss, gamma);
  for (auto& v : want_dg) v += 1;
  expect_near_all(dx, numeric_grad(loss, x, 1e-3f), 2e-3, 1e-2, "dx");
  expect_near_all(dgamma, want_dg, 2e-3, 1e-2, "dgamma");
}

TEST(LayerNorm, BackwardMatchesFiniteDifferencesAndAccumulatesParamGrads) {
  const std::int64_t rows = 4, h = 11;
  auto x = random_vector(rows * h, 4, -2.f, 2.f);
  auto gamma = random_vector(h, 5, 0.5f, 1.5f), beta = random_vector(h, 6);
  const auto w = random_vector(rows * h, 7);  // dy
  std::vector<float> y(rows * h), mean(rows), rstd(rows);
  auto loss = [&] {
    layernorm_forward_cpu(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows, h, kEps);
    return weighted_sum(y, w);
  };
  loss();
  std::vector<float> dx(rows * h), dgamma(h, 1.f), dbeta(h, -1.f);  // prior contents: accumulated onto
  layernorm_backward_cpu(w.data(), x.data(), gamma.data(), mean.data(), rstd.data(), dx.data(), dgamma.data(),
                         dbeta.data(), rows, h);
  auto want_dg = numeric_grad(loss, gamma), want_db = numeric_grad(loss, beta);
  for (auto& v : want_dg) v += 1;
  for (auto& v : want_db) v -= 1;
  expect_near_all(dx, numeric_grad(loss, x, 1e-3f), 2e-3, 1e-2, "dx");
  expect_near_all(dgamma, want_dg, 2e-3, 1e-2, "dgamma");
  expect_near_all(dbeta, want_db, 2e-3, 1e-2, "dbeta");
}

// Splitting every row over q ranks and summing the partial statistics (the all-reduce
// along a mesh row) reproduces the whole LayerNorm, forward and backward.
TEST(LayerNorm2D, SplitOverQRanksEqualsWhole) {
  const std::int64_t rows = 6, q = 4, hl = 9, h = q * hl;
  const auto x = random_vector(rows * h, 8, -1.f, 2.f);
  const auto gamma = random_vector(h, 9), beta = random_vector(h, 10), dy = random_vector(rows * h, 11);
  std::vector<float> y(rows * h), mean(rows), rstd(rows), dx(rows * h), dg(h, 0.f), db(h, 0.f);
  layernorm_forward_cpu(x.data(), gamma.data(), beta.data(), y.data(), mean.data(), rstd.data(), rows, h, kEps);
  layernorm_backward_cpu(dy.data(), x.data(), gamma.data(), mean.data(), rstd.data(), dx.data(), dg.data(), db.data(),
                         rows, h);

  auto slice = [&](const std::vector<float>& full, std::int64_t k) {  // columns of rank k
    std::vector<float> s(rows * hl);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < hl; ++j) s[r * hl + j] = full[r * h + k * hl + j];
    return s;
  };
  std::vector<std::vector<float>> xs, dys;
  std::vector<float> stats(2 * rows, 0.f), part(2 * rows);
  for (std::int64_t k = 0; k < q; ++k) {
    xs.push_back(slice(x, k));
    dys.push_back(slice(dy, k));
    layernorm2d_stats_cpu(xs[k].data(), part.data(), rows, hl);
    reduce_sum_cpu(stats.data(), part.data(), part.size());
  }
  std::vector<float> dstats(2 * rows, 0.f);
  std::vector<std::vector<float>> means(q, std::vector<float>(rows)), rstds = means;
  for (std::int64_t k = 0; k < q; ++k) {
    std::vector<float> yl(rows * hl);
    layernorm2d_apply_cpu(xs[k].data(), stats.data(), gamma.data() + k * hl, beta.data() + k * hl, yl.data(),
                          means[k].data(), rstds[k].data(), rows, hl, h, kEps);
    expect_near_all(yl, slice(y, k), 1e-5, 1e-4, "y slice");
    expect_near_all(means[k], mean, 1e-6, 1e-5, "mean");
    expect_near_all(rstds[k], rstd, 1e-6, 1e-4, "rstd");
    layernorm2d_backward_stats_cpu(dys[k].data(), xs[k].data(), gamma.data() + k * hl, means[k].data(), rstds[k].data(),
                                   part.data(), rows, hl);
    reduce_sum_cpu(dstats.data(), part.data(), part.size());
  }
  for (std::int64_t k = 0; k < q; ++k) {
    std::vector<float> dxl(rows * hl), dgl(hl, 0.f), dbl(hl, 0.f);
    layernorm2d_backward_apply_cpu(dys[k].data(), xs[k].data(), gamma.data() + k * hl, means[k].data(), rstds[k].data(),
                                   dstats.data(), dxl.data(), dgl.data(), dbl.data(), rows, hl, h);
    expect_near_all(dxl, slice(dx, k), 1e-4, 1e-3, "dx slice");
    expect_near_all(dgl, std::vector<float>(dg.begin() + k * hl, dg.begin() + (k + 1) * hl), 1e-4, 1e-3, "dgamma");
    expect_near_all(dbl, std::vector<float>(db.begin() + k * hl, db.begin() + (k + 1) * hl), 1e-5, 1e-5, "dbeta");
  }
}

}  // namespace
}  // namespace meshsim::kernels
