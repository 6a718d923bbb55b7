#include "kernels/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/kernels_test_util.h"

namespace meshsim::kernels {
namespace {

using namespace testing;  // kernels_test_util.h

// The first step from zero moments: m^ = g and v^ = g^2, so the step is lr * sign(g) (up to
// eps) on top of the decay: p' = p (1 - lr wd) - lr g / (|g| + eps).
TEST(AdamW, FirstStepIsTheSignOfTheGradientTimesLr) {
  const std::size_t n = 1000;
  auto p = random_vector(n, 1), g = random_vector(n, 2, -3.f, 3.f);
  const auto p0 = p;
  std::vector<float> m(n, 0.f), v(n, 0.f);
  const AdamW hp{.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  adamw_step_cpu(p.data(), g.data(), m.data(), v.data(), n, hp, 1);
  std::vector<double> want_p(n), want_m(n), want_v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const double gi = g[i];
    want_p[i] = p0[i] * (1 - 0.01 * 0.1) - 0.01 * gi / (std::abs(gi) + 1e-8);
    want_m[i] = 0.1 * gi;
    want_v[i] = 0.05 * gi * gi;
  }
  expect_near_all(p, want_p, 1e-6, 1e-5, "p");
  expect_near_all(m, want_m, 1e-7, 1e-5, "m");
  expect_near_all(v, want_v, 1e-7, 1e-5, "v");
}

// Worked by hand: p = 1, g = 0.5, lr = 0.1, no decay: m = 0.05, v = 0.0125, m^ = 0.5,
// v^ = 0.25, p' = 1 - 0.1 * 0.5 / 0.5 = 0.9. A zero gradient leaves only the decoupled
// decay: p' = 2 (1 - 0.1 * 0.5) = 1.9.
TEST(AdamW, HandWorkedSteps) {
  float p = 1.f, g = 0.5f, m = 0.f, v = 0.f;
  adamw_step_cpu(&p, &g, &m, &v, 1, {.lr = 0.1f, .weight_decay = 0.f}, 1);
  EXPECT_NEAR(p, 0.9f, 1e-6);
  EXPECT_NEAR(m, 0.05f, 1e-7);
  EXPECT_NEAR(v, 0.0125f, 1e-7);
  float q = 2.f, zero = 0.f, mq = 0.f, vq = 0.f;
  adamw_step_cpu(&q, &zero, &mq, &vq, 1, {.lr = 0.1f, .weight_decay = 0.5f}, 1);
  EXPECT_FLOAT_EQ(q, 1.9f);
}

// Ten steps with a new gradient each against a serial double-precision evaluation of the
// update formula, bias corrections 1 - beta^t included.
TEST(AdamW, StepsMatchASerialDoubleReference) {
  const std::size_t n = 70001;  // several oneTBB chunks and a ragged end
  const AdamW hp{.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .weight_decay = 0.01f};
  auto p = random_vector(n, 3);
  std::vector<float> m(n, 0.f), v(n, 0.f);
  std::vector<double> rp(p.begin(), p.end()), rm(n, 0.0), rv(n, 0.0);
  for (int t = 1; t <= 10; ++t) {
    const auto g = random_vector(n, 100 + static_cast<std::uint32_t>(t));
    adamw_step_cpu(p.data(), g.data(), m.data(), v.data(), n, hp, t);
    const double b1 = hp.beta1, b2 = hp.beta2, lr = hp.lr;
    for (std::size_t i = 0; i < n; ++i) {
      rm[i] = b1 * rm[i] + (1 - b1) * g[i];
      rv[i] = b2 * rv[i] + (1 - b2) * double(g[i]) * g[i];
      const double mh = rm[i] / (1 - std::pow(b1, t)), vh = rv[i] / (1 - std::pow(b2, t));
      rp[i] = rp[i] * (1 - lr * double(hp.weight_decay)) - lr * mh / (std::sqrt(vh) + double(hp.eps));
    }
  }
  expect_near_all(p, rp, 1e-6, 1e-5, "p after 10 steps");
  expect_near_all(m, rm, 1e-7, 1e-4, "m after 10 steps");
  expect_near_all(v, rv, 1e-9, 1e-4, "v after 10 steps");
}

}  // namespace
}  // namespace meshsim::kernels
