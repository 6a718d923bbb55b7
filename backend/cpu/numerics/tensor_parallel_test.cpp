// Megatron TP and TP + SP against the single-rank step: loss, logits, every gradient.
#include "backend/cpu/numerics/tensor_parallel.h"

#include <gtest/gtest.h>

#include "backend/cpu/numerics/test_util.h"
#include "core/error.h"

namespace meshsim::numerics {
namespace {

ModelConfig small() {
  ModelConfig c = testing::small_config(33);
  c.batch = 2;
  return c;
}

struct TpRun {
  std::vector<TpStep> steps;
};

TpRun run_tp(const ModelConfig& cfg, int t, bool sp) {
  const Batch batch = make_batch(cfg, 9);
  TpRun run;
  run.steps = testing::run_group(
      t, [&](int r, Comm& tp) { return tensor_parallel_step(cfg, tp_shard_params(cfg, t, r), batch, tp, sp); });
  return run;
}

std::vector<float> assemble_logits(const ModelConfig& cfg, const TpRun& run) {
  const int t = int(run.steps.size());
  const std::int64_t T = cfg.tokens(), V = cfg.vocab, Vl = V / t;
  std::vector<float> full(T * V);
  for (int r = 0; r < t; ++r)
    for (std::int64_t i = 0; i < T; ++i)
      for (std::int64_t j = 0; j < Vl; ++j) full[i * V + r * Vl + j] = run.steps[r].logits.data[i * Vl + j];
  return full;
}

void check_tp(ModelConfig cfg, int t, bool sp) {
  const StepResult ref = reference_step(cfg, init_params(cfg), make_batch(cfg, 9));
  const TpRun run = run_tp(cfg, t, sp);
  if (::testing::Test::HasFailure()) return;
  std::vector<TensorMap> grads;
  for (int r = 0; r < t; ++r) {
    EXPECT_NEAR(run.steps[r].loss, ref.loss, 1e-5 * ref.loss) << "rank " << r;
    grads.push_back(run.steps[r].grads);
  }
  testing::expect_close(assemble_logits(cfg, run), ref.logits.data, "logits");
  testing::expect_maps_close(tp_assemble(cfg, grads), ref.grads, "grads");
}

TEST(TensorParallel, TwoRanksMatchSingleRank) { check_tp(small(), 2, false); }
TEST(TensorParallel, FourRanksMatchSingleRank) { check_tp(small(), 4, false); }
TEST(TensorParallel, FourRanksUntiedOutputMatchesSingleRank) {
  ModelConfig cfg = small();
  cfg.tied = false;
  check_tp(cfg, 4, false);
}
TEST(SequenceParallel, TwoRanksMatchSingleRank) { check_tp(small(), 2, true); }
TEST(SequenceParallel, FourRanksMatchSingleRank) { check_tp(small(), 4, true); }

// The shards really are partitions of the full tensors: tp_assemble of the initial shards
// is the full model, and a wrong assignment of shards to ranks (rank order reversed) is
// detected far outside the tolerance, for parameters and for gradients.
TEST(TensorParallel, WrongShardAssignmentWouldFail) {
  const ModelConfig cfg = small();
  const TensorMap full = init_params(cfg);
  std::vector<TensorMap> shards{tp_shard_params(cfg, 2, 0), tp_shard_params(cfg, 2, 1)};
  EXPECT_EQ(testing::worst_map_ratio(tp_assemble(cfg, shards), full), 0.0);
  std::swap(shards[0], shards[1]);
  EXPECT_GT(testing::worst_map_ratio(tp_assemble(cfg, shards), full), 100.0);
  const TpRun run = run_tp(cfg, 2, true);
  const StepResult ref = reference_step(cfg, full, make_batch(cfg, 9));
  EXPECT_GT(testing::worst_map_ratio(tp_assemble(cfg, {run.steps[1].grads, run.steps[0].grads}), ref.grads), 100.0);
}

TEST(TensorParallel, RejectsSizesThatDoNotDivide) {
  ModelConfig cfg = small();
  EXPECT_THROW(validate_tp(cfg, 3, false), Error);  // heads 4
  cfg.heads = 8;
  cfg.ffn = 36;
  EXPECT_THROW(validate_tp(cfg, 8, false), Error);  // ffn
  cfg = small();
  cfg.seq = 7;
  EXPECT_NO_THROW(validate_tp(cfg, 2, false));
  EXPECT_THROW(validate_tp(cfg, 4, true), Error);  // 14 token rows over 4
}

}  // namespace
}  // namespace meshsim::numerics
