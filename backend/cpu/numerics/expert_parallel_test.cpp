// Expert parallelism (top-k routing, uneven all-to-all dispatch and combine) against the
// single-rank MoE step: loss, logits, every gradient (experts gathered from their owners).
#include "backend/cpu/numerics/expert_parallel.h"

#include <gtest/gtest.h>

#include "backend/cpu/numerics/test_util.h"
#include "core/error.h"

namespace meshsim::numerics {
namespace {

ModelConfig small(int top_k) {
  ModelConfig c = testing::small_config(66);
  c.ffn = 24;
  c.moe = {.experts = 4, .top_k = top_k};
  return c;
}

void check_ep(const ModelConfig& cfg, int e) {
  const Batch batch = make_batch(cfg, 19);
  const StepResult ref = reference_step(cfg, init_params(cfg), batch);
  const std::vector<EpStep> steps = testing::run_group(
      e, [&](int r, Comm& ep) { return expert_parallel_step(cfg, ep_rank_params(cfg, e, r), batch, ep); });
  if (::testing::Test::HasFailure()) return;
  TensorMap all;
  const std::int64_t rows = std::int64_t(cfg.batch / e) * cfg.seq * cfg.vocab;
  bool uneven = false;
  for (int r = 0; r < e; ++r) {
    EXPECT_NEAR(steps[r].loss, ref.loss, 1e-5 * ref.loss) << "rank " << r;
    testing::expect_close(
        steps[r].logits.data,
        std::vector<float>(ref.logits.data.begin() + r * rows, ref.logits.data.begin() + (r + 1) * rows),
        "logits rank " + std::to_string(r));
    for (const auto& [name, g] : steps[r].grads) all.emplace(name, g);  // non-expert: rank 0's copy
    for (const auto& d : steps[r].dispatched)
      for (auto n : d) uneven |= n != d[0];
  }
  EXPECT_TRUE(uneven) << "the router should send different numbers of rows to different ranks";
  EXPECT_EQ(all.size(), ref.grads.size());
  testing::expect_maps_close(all, ref.grads, "grads");
}

TEST(ExpertParallel, TwoRanksTop2MatchSingleRank) { check_ep(small(2), 2); }
TEST(ExpertParallel, FourRanksTop2MatchSingleRank) { check_ep(small(2), 4); }
TEST(ExpertParallel, FourRanksTop1MatchSingleRank) { check_ep(small(1), 4); }

TEST(ExpertParallel, RejectsBadLayouts) {
  EXPECT_THROW(validate_ep(small(2), 3), Error);  // 4 experts over 3
  ModelConfig dense = small(2);
  dense.moe.experts = 0;
  EXPECT_THROW(validate_ep(dense, 2), Error);
  ModelConfig odd = small(2);
  odd.batch = 2;
  EXPECT_THROW(validate_ep(odd, 4), Error);
}

}  // namespace
}  // namespace meshsim::numerics
