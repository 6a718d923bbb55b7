// The reference model checked against itself: its backward against central finite
// differences of its loss (so the truth the distributed tests compare with is trustworthy),
// its determinism, and its errors on misuse.
#include "backend/cpu/numerics/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"

namespace meshsim::numerics {
namespace {

ModelConfig tiny() {
  ModelConfig c;
  c.layers = 2, c.hidden = 8, c.heads = 2, c.seq = 4, c.batch = 2, c.vocab = 11, c.ffn = 12;
  c.dropout = 0.2f, c.seed = 3;
  return c;
}

// For every parameter tensor W: the directional derivative of the loss along a random +-1
// direction d, (L(W + eps d) - L(W - eps d)) / 2 eps, against sum(grad * d). The loss is fp32
// (~1e-7 relative), so eps = 3e-3 keeps the rounding noise near 1e-4 while the truncation
// error O(eps^2) stays below 1%; the tolerance is 1% of the derivative plus 5e-4. Top-k
// routing is piecewise constant, so the MoE check uses a smaller step (a step that flips a
// token's experts makes the loss jump) and a tolerance scaled to its larger rounding noise.
void check_against_finite_differences(const ModelConfig& cfg, float eps = 3e-3f, double atol = 5e-4) {
  TensorMap params = init_params(cfg);
  const Batch batch = make_batch(cfg, 11);
  const StepResult ref = reference_step(cfg, params, batch);
  std::mt19937 rng(5);
  int checked = 0;
  for (auto& [name, w] : params) {
    std::vector<float> d(w.data.size());
    for (auto& x : d) x = (rng() & 1) ? 1.f : -1.f;
    const std::vector<float> keep = w.data;
    for (std::size_t i = 0; i < d.size(); ++i) w.data[i] = keep[i] + eps * d[i];
    const double up = reference_step(cfg, params, batch).loss;
    for (std::size_t i = 0; i < d.size(); ++i) w.data[i] = keep[i] - eps * d[i];
    const double down = reference_step(cfg, params, batch).loss;
    w.data = keep;
    const double fd = (up - down) / (2.0 * eps);
    double an = 0;
    const auto& g = ref.grads.at(name).data;
    for (std::size_t i = 0; i < d.size(); ++i) an += double(g[i]) * d[i];
    EXPECT_NEAR(an, fd, 1e-2 * std::abs(fd) + atol) << name;
    ++checked;
  }
  EXPECT_EQ(checked, int(init_params(cfg).size()));
}

TEST(ReferenceModel, BackwardMatchesFiniteDifferencesDense) { check_against_finite_differences(tiny()); }

TEST(ReferenceModel, BackwardMatchesFiniteDifferencesUntied) {
  ModelConfig cfg = tiny();
  cfg.tied = false;
  check_against_finite_differences(cfg);
}

TEST(ReferenceModel, BackwardMatchesFiniteDifferencesMoe) {
  ModelConfig cfg = tiny();
  cfg.moe = {.experts = 4, .top_k = 2};
  check_against_finite_differences(cfg, 1e-3f, 2e-3);
}

// The finite-difference check can fail: a gradient with one element perturbed is caught.
TEST(ReferenceModel, FiniteDifferenceCheckDetectsAWrongGradient) {
  const ModelConfig cfg = tiny();
  TensorMap params = init_params(cfg);
  const Batch batch = make_batch(cfg, 11);
  StepResult ref = reference_step(cfg, params, batch);
  auto& w = params.at("l0.attn.wo");
  std::vector<float> d(w.data.size(), 1.f);
  const float eps = 3e-3f;
  const auto keep = w.data;
  for (std::size_t i = 0; i < d.size(); ++i) w.data[i] = keep[i] + eps;
  const double up = reference_step(cfg, params, batch).loss;
  for (std::size_t i = 0; i < d.size(); ++i) w.data[i] = keep[i] - eps;
  const double down = reference_step(cfg, params, batch).loss;
  const double fd = (up - down) / (2.0 * eps);
  double an = 0;
  auto g = ref.grads.at("l0.attn.wo").data;
  g[3] += 0.05f;  // a plausible-size error in one element
  for (float x : g) an += x;
  EXPECT_GT(std::abs(an - fd), 1e-2 * std::abs(fd) + 5e-4);
}

TEST(ReferenceModel, DeterministicAndSeeded) {
  ModelConfig cfg = tiny();
  const Batch batch = make_batch(cfg, 11);
  const StepResult a = reference_step(cfg, init_params(cfg), batch);
  const StepResult b = reference_step(cfg, init_params(cfg), batch);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.logits.data, b.logits.data);
  for (const auto& [name, g] : a.grads) EXPECT_EQ(g.data, b.grads.at(name).data) << name;
  cfg.seed = 4;
  EXPECT_NE(reference_step(cfg, init_params(cfg), batch).loss, a.loss);
  // The loss starts near log(V) (random init), a sanity check on the scale.
  EXPECT_NEAR(a.loss, std::log(11.0), 1.0);
}

TEST(ReferenceModel, InitBlockIsASliceOfTheFullTensor) {
  const ModelConfig cfg = tiny();
  const TensorMap full = init_params(cfg);
  const Tensor blk = init_block(cfg, "l1.attn.wqkv", 2, 5, 7, 13);
  const Tensor& w = full.at("l1.attn.wqkv");
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 6; ++c) EXPECT_EQ(blk.data[r * 6 + c], w.data[(r + 2) * w.cols + c + 7]);
  EXPECT_THROW(init_block(cfg, "l1.attn.wqkv", 0, 9, 0, 1), Error);
  EXPECT_THROW(init_block(cfg, "l7.attn.wqkv", 0, 1, 0, 1), Error);
}

TEST(ReferenceModel, RejectsBadConfigs) {
  ModelConfig cfg = tiny();
  cfg.heads = 3;
  EXPECT_THROW(validate(cfg), Error);
  cfg = tiny();
  cfg.moe = {.experts = 2, .top_k = 3};
  EXPECT_THROW(validate(cfg), Error);
  cfg = tiny();
  cfg.dropout = 1.f;
  EXPECT_THROW(validate(cfg), Error);
  cfg = tiny();
  Batch short_batch = make_batch(cfg, 1);
  short_batch.ids.pop_back();
  EXPECT_THROW(reference_step(cfg, init_params(cfg), short_batch), Error);
}

}  // namespace
}  // namespace meshsim::numerics
