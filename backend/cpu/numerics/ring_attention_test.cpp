// Context parallelism (ring attention, LSE merge, load-balanced chunks) against the
// single-rank step: loss, logits, every gradient.
#include "backend/cpu/numerics/ring_attention.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "backend/cpu/numerics/test_util.h"
#include "core/error.h"

namespace meshsim::numerics {
namespace {
using testing::run_world;

ModelConfig small() {
  ModelConfig c = testing::small_config(55);
  c.seq = 16, c.batch = 2;
  return c;
}

void check_cp(const ModelConfig& cfg, int c) {
  const Batch batch = make_batch(cfg, 17);
  const StepResult ref = reference_step(cfg, init_params(cfg), batch);
  const std::vector<CpStep> steps =
      testing::run_group(c, [&](int, Comm& cp) { return context_parallel_step(cfg, init_params(cfg), batch, cp); });
  if (::testing::Test::HasFailure()) return;
  std::vector<float> logits(ref.logits.data.size(), NAN);
  const std::int64_t V = cfg.vocab;
  for (int r = 0; r < c; ++r) {
    EXPECT_NEAR(steps[r].loss, ref.loss, 1e-5 * ref.loss) << "rank " << r;
    testing::expect_maps_close(steps[r].grads, ref.grads, "grads rank " + std::to_string(r));
    for (std::size_t i = 0; i < steps[r].rows.size(); ++i)
      std::copy_n(steps[r].logits.data.begin() + i * V, V, logits.begin() + steps[r].rows[i] * V);
  }
  testing::expect_close(logits, ref.logits.data, "logits (every row covered once)");
}

TEST(RingAttention, TwoRanksMatchSingleRank) { check_cp(small(), 2); }
TEST(RingAttention, FourRanksMatchSingleRank) { check_cp(small(), 4); }

TEST(RingAttention, ChunksAreLoadBalancedAndCoverTheSequence) {
  const ModelConfig cfg = small();
  EXPECT_EQ(cp_rows(cfg, 2, 0).front(), 0);
  std::vector<std::int64_t> all;
  for (int r = 0; r < 4; ++r) {
    const auto rows = cp_rows(cfg, 4, r);
    // rank r: chunks r and 7 - r of 2-token chunks; causal work, the keys each query sees
    // (position + 1), is (4r + 3) + (4(7 - r) + 3) = 34 per sequence on every rank
    std::int64_t work = 0;
    for (auto g : rows) work += g % cfg.seq + 1;
    EXPECT_EQ(work, cfg.batch * 34) << "rank " << r;
    all.insert(all.end(), rows.begin(), rows.end());
  }
  std::sort(all.begin(), all.end());
  for (std::int64_t i = 0; i < cfg.tokens(); ++i) EXPECT_EQ(all[i], i);
}

// A ring that skipped the log-sum-exp merge (kept only the last block) or dropped the
// causal offsets would not match; here: the attention of the local chunks alone (no ring)
// is far outside the tolerance.
TEST(RingAttention, AttentionWithoutTheRingWouldFail) {
  ModelConfig cfg = small();
  const Batch batch = make_batch(cfg, 17);
  const StepResult ref = reference_step(cfg, init_params(cfg), batch);
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  std::vector<CpStep> steps(1);
  // a "group" of one rank over the 2-rank rows: each chunk sees only itself and its partner
  testing::expect_no_errors(run_world(1, [&](int, cpu::Transport& t) {
    Comm solo(t, {0}, reg);
    RingAttention attn(solo, cfg.heads, cfg.head_dim(), cfg.batch, cfg.seq / 4);
    const TensorMap params = init_params(cfg);
    LocalFfn ffn(cfg, params);
    StepResult part = rows_step(cfg, params, batch, cp_rows(cfg, 2, 1), attn, ffn);
    steps[0].logits = part.logits;
    steps[0].rows = cp_rows(cfg, 2, 1);
  }));
  std::vector<float> want;
  for (auto g : steps[0].rows)
    want.insert(want.end(), ref.logits.data.begin() + g * cfg.vocab, ref.logits.data.begin() + (g + 1) * cfg.vocab);
  EXPECT_GT(testing::worst_ratio(steps[0].logits.data, want), 100.0);
}

TEST(RingAttention, RejectsSequenceThatDoesNotSplit) {
  ModelConfig cfg = small();
  cfg.seq = 12;
  EXPECT_THROW(validate_cp(cfg, 4), Error);
  EXPECT_NO_THROW(validate_cp(cfg, 3));
}

}  // namespace
}  // namespace meshsim::numerics
