// Mixed precision (ModelConfig::bf16, docs/numerics.md "bf16"): data and pipeline
// parallelism against the single-rank bf16 step.
//
// What makes the comparison exact: in bf16 mode every op is row-local and the GEMMs sum each
// element in index order (matmul), so a rank that pushes some token rows through the same
// bf16 weights computes every activation of those rows bit for bit as the single rank does,
// and every bf16 rounding lands the same way. What may differ is only fp32: the parameter
// gradients (main gradients), which DP sums per rank and then all-reduces, and PP sums per
// micro-batch, in another order. So: logits equal, gradients within the fp32 tolerance. A
// gradient reduced in bf16 (what mixed precision must not do) is ~40x outside it.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/numerics/data_parallel.h"
#include "backend/cpu/numerics/pipeline.h"
#include "backend/cpu/numerics/test_util.h"
#include "core/error.h"
#include "kernels/bf16.h"

namespace meshsim::numerics {
namespace {
using testing::expect_close;
using testing::expect_maps_close;

ModelConfig bf16_config(std::uint64_t seed, int layers = 2) {
  ModelConfig c = testing::small_config(seed);
  c.layers = layers;
  c.bf16 = true;
  return c;
}

bool all_bf16(const std::vector<float>& v) {
  for (float x : v)
    if (kernels::to_float(kernels::to_bf16(x)) != x) return false;
  return true;
}

TEST(Bf16, StepComputesWithBf16WeightsAndKeepsFp32MainGradients) {
  const ModelConfig cfg = bf16_config(3);
  const TensorMap masters = init_params(cfg);
  const Batch batch = make_batch(cfg, 4);
  try {
    reference_step(cfg, masters, batch);
    ADD_FAILURE() << "fp32 masters were accepted as bf16 weights";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bf16_copy"), std::string::npos) << e.what();
  }
  const StepResult s = reference_step(cfg, bf16_copy(masters), batch);
  EXPECT_TRUE(all_bf16(s.logits.data)) << "logits are a bf16 GEMM's output";
  // The main gradients accumulate in fp32: the wide ones hold values no bf16 holds.
  EXPECT_FALSE(all_bf16(s.grads.at("l0.attn.wqkv").data));
  EXPECT_FALSE(all_bf16(s.grads.at("embed").data));
  // bf16 activations move the step, within what 8 significant bits allow over two layers
  // (not a derived bound: a check that the same model runs, not another).
  ModelConfig fp32 = cfg;
  fp32.bf16 = false;
  const StepResult f = reference_step(fp32, bf16_copy(masters), batch);
  EXPECT_NE(s.loss, f.loss);
  EXPECT_NEAR(s.loss, f.loss, 0.05 * f.loss);
}

TEST(Bf16, MoeAndRingAttentionSaySoInsteadOfRunningFp32) {
  ModelConfig cfg = bf16_config(3);
  cfg.moe.experts = 2;
  EXPECT_THROW(validate(cfg), Error);
}

void check_dp_bf16(int d, ZeroStage stage) {
  const ModelConfig cfg = bf16_config(21);
  const TensorMap masters = init_params(cfg);
  const Batch batch = make_batch(cfg, 5);
  const StepResult ref = reference_step(cfg, bf16_copy(masters), batch);
  const TensorMap ref_updated = reference_adam_step(cfg, masters, ref.grads, kNumericsAdam);
  const std::vector<DpStep> steps = testing::run_group(
      d, [&](int, Comm& dp) { return data_parallel_step(cfg, masters, batch, dp, stage, kNumericsAdam); });
  const std::int64_t V = cfg.vocab, rows = std::int64_t(cfg.batch / d) * cfg.seq;
  for (int r = 0; r < d; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_NEAR(steps[r].loss, ref.loss, 1e-5 * ref.loss);
    EXPECT_EQ(steps[r].logits.data,
              std::vector<float>(ref.logits.data.begin() + r * rows * V, ref.logits.data.begin() + (r + 1) * rows * V))
        << "a rank's bf16 logits are the single rank's bits";
    if (stage != ZeroStage::Two) expect_maps_close(steps[r].grads, ref.grads, "fp32 main gradients");
    // The updated fp32 masters; as in data_parallel_test, elements whose reference gradient
    // is rounding noise (|g| < 1e-7: Adam's first step is +-lr by its sign) are left out.
    TensorMap got = steps[r].updated;
    for (auto& [name, t] : got)
      for (std::size_t i = 0; i < t.data.size(); ++i)
        if (std::abs(ref.grads.at(name).data[i]) < 1e-7f) t.data[i] = ref_updated.at(name).data[i];
    expect_maps_close(got, ref_updated, "updated fp32 masters");
    EXPECT_FALSE(all_bf16(steps[r].updated.at("l1.mlp.w1").data)) << "masters stay fp32";
  }
}

TEST(Bf16, DataParallelTwoRanksMatchesSingleRank) { check_dp_bf16(2, ZeroStage::None); }
TEST(Bf16, DataParallelZero1FourRanksMatchesSingleRankAdamStep) { check_dp_bf16(4, ZeroStage::One); }
TEST(Bf16, DataParallelZero2TwoRanksMatchesSingleRankAdamStep) { check_dp_bf16(2, ZeroStage::Two); }

// The tolerance tells fp32 main gradients from bf16 ones: the same gradients rounded to
// bf16 (a reduction in bf16 rounds at least that much) are far outside it.
TEST(Bf16, GradientsReducedInBf16WouldFail) {
  const ModelConfig cfg = bf16_config(21);
  const StepResult ref = reference_step(cfg, bf16_copy(init_params(cfg)), make_batch(cfg, 5));
  EXPECT_GT(testing::worst_map_ratio(bf16_copy(ref.grads), ref.grads), 10.0);
}

void check_pp_bf16(int layers, int p, int m) {
  const ModelConfig cfg = bf16_config(44, layers);
  const Batch batch = make_batch(cfg, 13);
  const StepResult ref = reference_step(cfg, bf16_copy(init_params(cfg)), batch);
  const std::vector<PpStep> steps = testing::run_group(
      p, [&](int r, Comm& pp) { return pipeline_step(cfg, bf16_copy(pp_stage_params(cfg, p, r)), batch, pp, m); });
  TensorMap all;
  for (int s = 0; s < p; ++s) {
    EXPECT_NEAR(steps[s].loss, ref.loss, 1e-5 * ref.loss) << "stage " << s;
    for (const auto& [name, g] : steps[s].grads) all.emplace(name, g);
  }
  EXPECT_EQ(steps[p - 1].logits.data, ref.logits.data) << "the last stage's bf16 logits are the single rank's bits";
  expect_maps_close(all, ref.grads, "fp32 main gradients");
}

TEST(Bf16, PipelineTwoStagesFourMicrobatchesMatchesSingleRank) { check_pp_bf16(2, 2, 4); }
TEST(Bf16, PipelineFourStagesTwoMicrobatchesMatchesSingleRank) { check_pp_bf16(4, 4, 2); }

TEST(Bf16, PipelineRejectsFp32Weights) {
  const ModelConfig cfg = bf16_config(44);
  const auto errors = testing::run_world(2, [&](int r, cpu::Transport& t) {
    Comm pp(t, {0, 1}, AlgorithmRegistry::builtin());
    pipeline_step(cfg, pp_stage_params(cfg, 2, r), make_batch(cfg, 13), pp, 2);
  });
  for (const auto& e : errors) EXPECT_NE(e.find("bf16_copy"), std::string::npos) << e;
}

}  // namespace
}  // namespace meshsim::numerics
