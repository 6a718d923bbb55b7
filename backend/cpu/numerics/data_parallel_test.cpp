// DP and ZeRO-1/2 against the single-rank step: loss, logits, gradients, updated parameters.
#include "backend/cpu/numerics/data_parallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "backend/cpu/numerics/test_util.h"
#include "core/error.h"

namespace meshsim::numerics {
namespace {
using testing::expect_close;
using testing::expect_maps_close;
using testing::run_world;

ModelConfig small() { return testing::small_config(21); }

void check_dp(int d, ZeroStage stage) {
  const ModelConfig cfg = small();
  const TensorMap params = init_params(cfg);
  const Batch batch = make_batch(cfg, 5);
  const kernels::AdamW adam = kNumericsAdam;
  const StepResult ref = reference_step(cfg, params, batch);
  const TensorMap ref_updated = reference_adam_step(cfg, params, ref.grads, adam);
  const std::vector<float> ref_flat = flatten(cfg, ref.grads);
  const std::vector<DpStep> steps =
      testing::run_group(d, [&](int, Comm& dp) { return data_parallel_step(cfg, params, batch, dp, stage, adam); });
  const std::int64_t V = cfg.vocab, rows = std::int64_t(cfg.batch / d) * cfg.seq;
  for (int r = 0; r < d; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_NEAR(steps[r].loss, ref.loss, 1e-5 * ref.loss);
    expect_close(
        steps[r].logits.data,
        std::vector<float>(ref.logits.data.begin() + r * rows * V, ref.logits.data.begin() + (r + 1) * rows * V),
        "logits");
    if (stage != ZeroStage::Two) expect_maps_close(steps[r].grads, ref.grads, "grads");
    // the rank's gradient shard (ZeRO-2: all it ever holds) against the reference slice
    const std::int64_t b = steps[r].shard_begin;
    std::vector<float> want(steps[r].grad_shard.size(), 0.f);
    for (std::size_t i = 0; i < want.size(); ++i)
      if (b + std::int64_t(i) < std::int64_t(ref_flat.size())) want[i] = ref_flat[b + i];
    expect_close(steps[r].grad_shard, want, "gradient shard");
    // Adam's first step is lr * g / (|g| + eps): where the reference gradient is rounding
    // noise (the key bias: softmax ignores a per-query constant, so its gradient is exactly
    // zero in exact arithmetic), the sign of the noise, which depends on summation order,
    // decides +-lr. Those elements are left out; every other element must agree.
    TensorMap got = steps[r].updated;
    for (auto& [name, t] : got) {
      const auto w = ref_updated.find(name);
      const auto g = ref.grads.find(name);
      if (w == ref_updated.end() || g == ref.grads.end()) continue;
      for (std::size_t i = 0; i < t.data.size(); ++i)
        if (std::abs(g->second.data[i]) < 1e-7f) t.data[i] = w->second.data[i];
    }
    expect_maps_close(got, ref_updated, "updated parameters");
  }
}

TEST(DataParallel, TwoRanksMatchSingleRank) { check_dp(2, ZeroStage::None); }
TEST(DataParallel, Zero1FourRanksMatchesSingleRankAdamStep) { check_dp(4, ZeroStage::One); }
TEST(DataParallel, Zero2TwoRanksMatchesSingleRankAdamStep) { check_dp(2, ZeroStage::Two); }
TEST(DataParallel, Zero2FourRanksMatchesSingleRankAdamStep) { check_dp(4, ZeroStage::Two); }

// The comparison can fail: one rank's gradients before the all-reduce (what a missing
// all-reduce would leave) are far outside the tolerance, and so is the Adam step on them.
TEST(DataParallel, MissingAllReduceWouldFail) {
  const ModelConfig cfg = small();
  const TensorMap params = init_params(cfg);
  const Batch batch = make_batch(cfg, 5);
  const StepResult ref = reference_step(cfg, params, batch);
  LocalAttention attn(cfg.heads, cfg.head_dim(), cfg.seq);
  LocalFfn ffn(cfg, params);
  const StepResult half = partial_step(cfg, params, batch, 0, cfg.batch / 2, attn, ffn);
  EXPECT_GT(testing::worst_map_ratio(half.grads, ref.grads), 100.0);
  EXPECT_GT(testing::worst_map_ratio(reference_adam_step(cfg, params, half.grads, kNumericsAdam),
                                     reference_adam_step(cfg, params, ref.grads, kNumericsAdam)),
            100.0);
}

TEST(DataParallel, RejectsBatchThatDoesNotSplit) {
  ModelConfig cfg = small();
  cfg.batch = 3;
  const TensorMap params = init_params(cfg);
  const Batch batch = make_batch(cfg, 5);
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  const auto errors = run_world(2, [&](int, cpu::Transport& t) {
    Comm dp(t, {0, 1}, reg);
    data_parallel_step(cfg, params, batch, dp, ZeroStage::None, kNumericsAdam);
  });
  for (const auto& e : errors) EXPECT_NE(e.find("does not split over 2 ranks"), std::string::npos) << e;
}

}  // namespace
}  // namespace meshsim::numerics
