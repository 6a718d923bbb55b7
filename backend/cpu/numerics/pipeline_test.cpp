// Pipeline 1F1B against the single-rank step: loss, logits, every stage's gradients.
#include "backend/cpu/numerics/pipeline.h"

#include <gtest/gtest.h>

#include "backend/cpu/numerics/test_util.h"
#include "core/error.h"

namespace meshsim::numerics {
namespace {

ModelConfig small(int layers) {
  ModelConfig c = testing::small_config(44);
  c.layers = layers;
  return c;
}

std::vector<PpStep> run_pp(const ModelConfig& cfg, int p, int m) {
  const Batch batch = make_batch(cfg, 13);
  return testing::run_group(
      p, [&](int r, Comm& pp) { return pipeline_step(cfg, pp_stage_params(cfg, p, r), batch, pp, m); });
}

void check_pp(const ModelConfig& cfg, int p, int m) {
  const StepResult ref = reference_step(cfg, init_params(cfg), make_batch(cfg, 13));
  const std::vector<PpStep> steps = run_pp(cfg, p, m);
  if (::testing::Test::HasFailure()) return;
  TensorMap all;
  for (int s = 0; s < p; ++s) {
    EXPECT_NEAR(steps[s].loss, ref.loss, 1e-5 * ref.loss) << "stage " << s;
    for (const auto& [name, g] : steps[s].grads) {
      // a tensor held by two stages (the tied table) must agree after their all-reduce
      if (all.count(name)) {
        EXPECT_EQ(all.at(name).data, g.data) << name << " on stage " << s;
      }
      all.emplace(name, g);
    }
  }
  EXPECT_EQ(all.size(), ref.grads.size());
  testing::expect_close(steps[p - 1].logits.data, ref.logits.data, "logits");
  testing::expect_maps_close(all, ref.grads, "grads");
}

TEST(Pipeline1F1B, TwoStagesFourMicrobatchesMatchSingleRank) { check_pp(small(2), 2, 4); }
TEST(Pipeline1F1B, FourStagesFourMicrobatchesMatchSingleRank) { check_pp(small(4), 4, 4); }
TEST(Pipeline1F1B, FourStagesTwoMicrobatchesMatchSingleRank) { check_pp(small(4), 4, 2); }
TEST(Pipeline1F1B, UntiedOutputMatchesSingleRank) {
  ModelConfig cfg = small(2);
  cfg.tied = false;
  check_pp(cfg, 2, 2);
}

TEST(Pipeline1F1B, RunsTheOneForwardOneBackwardOrder) {
  const std::vector<PpStep> steps = run_pp(small(3), 3, 4);
  auto joined = [](const std::vector<std::string>& ops) {
    std::string s;
    for (const auto& o : ops) s += (s.empty() ? "" : " ") + o;
    return s;
  };
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(joined(steps[0].ops), "F0 F1 F2 B0 F3 B1 B2 B3");
  EXPECT_EQ(joined(steps[1].ops), "F0 F1 B0 F2 B1 F3 B2 B3");
  EXPECT_EQ(joined(steps[2].ops), "F0 B0 F1 B1 F2 B2 F3 B3");
}

TEST(Pipeline1F1B, RejectsUnevenSplits) {
  EXPECT_THROW(validate_pp(small(3), 2, 2), Error);
  EXPECT_THROW(validate_pp(small(2), 2, 3), Error);
  EXPECT_NO_THROW(validate_pp(small(4), 4, 4));
}

}  // namespace
}  // namespace meshsim::numerics
