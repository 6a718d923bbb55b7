#include "kernels/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/kernels_test_util.h"

namespace meshsim::kernels {
namespace {

using namespace testing;  // kernels_test_util.h

TEST(Rope, TableHoldsCosAndSinOfPositionTimesFrequency) {
  const std::int64_t tokens = 6, d = 8, seq = 4;
  std::vector<float> cs(tokens * d);
  rope_table_cpu(cs.data(), tokens, d, seq, 10000.0);
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t i = 0; i < d / 2; ++i) {
      const double a = static_cast<double>(t % seq) / std::pow(10000.0, 2.0 * i / d);  // i = 0: the position itself
      EXPECT_NEAR(cs[t * d + i], std::cos(a), 1e-7) << t << "," << i;
      EXPECT_NEAR(cs[t * d + d / 2 + i], std::sin(a), 1e-7) << t << "," << i;
    }
}

// Hand-worked: d = 2 (one pair), one head, a quarter turn: (1, 2) -> (-2, 1); position 0 is the identity.
TEST(Rope, HandWorkedQuarterTurnAndIdentityAtPositionZero) {
  const std::vector<float> cs = {1.f, 0.f, 0.f, 1.f};  // token 0: angle 0; token 1: angle pi/2
  const std::vector<float> x = {1.f, 2.f, 1.f, 2.f};
  std::vector<float> y(4);
  rope_forward_cpu(x.data(), cs.data(), y.data(), 2, 1, 2);
  EXPECT_EQ(y, (std::vector<float>{1.f, 2.f, -2.f, 1.f}));
}

// Every row is turned, pair (i, i + d/2) by its token's angle i: lengths of pairs are kept, the
// heads of one token share their angles, and the backward undoes the forward (a rotation's
// transpose is its inverse).
TEST(Rope, RotatesPairsByTheTokensAnglesAndTheBackwardInvertsIt) {
  const std::int64_t tokens = 5, heads = 3, d = 16, rows = tokens * heads;
  std::vector<float> cs(tokens * d);
  rope_table_cpu(cs.data(), tokens, d, 4096, 10000.0);
  const auto x = random_vector(rows * d, 21);
  std::vector<float> y(rows * d), back(rows * d);
  rope_forward_cpu(x.data(), cs.data(), y.data(), rows, heads, d);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t i = 0; i < d / 2; ++i) {
      const std::int64_t a = r * d + i, b = a + d / 2;
      EXPECT_NEAR(std::hypot(y[a], y[b]), std::hypot(x[a], x[b]), 1e-6);
      const double angle = (r / heads) / std::pow(10000.0, 2.0 * i / d);
      EXPECT_NEAR(std::atan2(std::sin(std::atan2(y[b], y[a]) - std::atan2(x[b], x[a]) - angle),
                             std::cos(std::atan2(y[b], y[a]) - std::atan2(x[b], x[a]) - angle)),
                  0.0, 1e-5)
          << "row " << r << " pair " << i;
    }
  rope_backward_cpu(y.data(), cs.data(), back.data(), rows, heads, d);
  expect_near_all(back, x, 1e-6, 1e-6, "backward(forward(x))");
}

// The backward is the gradient of the forward: d(w . rope(x))/dx by finite differences.
TEST(Rope, BackwardMatchesFiniteDifferences) {
  const std::int64_t tokens = 3, heads = 2, d = 6, rows = tokens * heads;
  std::vector<float> cs(tokens * d);
  rope_table_cpu(cs.data(), tokens, d, 2, 500000.0);
  auto x = random_vector(rows * d, 22);
  const auto w = random_vector(rows * d, 23);
  std::vector<float> y(rows * d), dx(rows * d);
  auto loss = [&] {
    rope_forward_cpu(x.data(), cs.data(), y.data(), rows, heads, d);
    return weighted_sum(y, w);
  };
  rope_backward_cpu(w.data(), cs.data(), dx.data(), rows, heads, d);
  expect_near_all(dx, numeric_grad(loss, x, 1e-2f), 1e-4, 1e-4, "dx");
}

}  // namespace
}  // namespace meshsim::kernels
