// Mixed precision (ModelConfig::bf16, docs/numerics.md "bf16"): every parallel strategy
// against the single-rank bf16 step. DP/ZeRO, PP and EP exactly (below); TP/SP, ring
// attention and SUMMA's products against bounds derived from bf16's rounding.
//
// What makes the DP, PP and EP comparisons exact: in bf16 mode every op is row-local and the GEMMs sum each
// element in index order (matmul), so a rank that pushes some token rows through the same
// bf16 weights computes every activation of those rows bit for bit as the single rank does,
// and every bf16 rounding lands the same way. What may differ is only fp32: the parameter
// gradients (main gradients), which DP sums per rank and then all-reduces, and PP sums per
// micro-batch, in another order. So: logits equal, gradients within the fp32 tolerance. A
// gradient reduced in bf16 (what mixed precision must not do) is more than 10x outside it.
//
// Tensor (and sequence) parallelism splits sums: a row-parallel GEMM's partial is rounded to
// bf16 on each rank and the partials are summed in bf16, where one rank rounds the whole sum
// once. Such a difference then flips later roundings, so these tests compare block by block:
// both sides of a residual block get the same bf16 input and output gradient, and each
// element of the output, the input gradient and the LayerNorm gradients must lie within a
// bound derived from bf16's unit roundoff u = 2^-8 (docs/numerics.md, "bf16"):
//   - the split sum s = sum_k a_k b_k over K terms on t ranks, against the single rank's,
//     differs by at most c(t, K) A, A = sum_k |a_k b_k|, c = 2t u + (2K + t) 2^-24 (the t
//     partials' roundings, t-1 bf16 adds, one rounding on the single rank, fp32's order);
//   - forward: the bias, dropout (scale 1/(1-p)) and residual add, then one rounding on each
//     side: |out_tp - out_ref| <= (c A + 2u (A + |b|)) / (1-p) + u (|out_tp| + |out_ref|);
//   - backward: the split sum is the LayerNorm input gradient dxn; the LayerNorm backward is
//     linear in dxn (dx = rstd (g dxn - mean(g dxn) - xhat mean(g dxn xhat))), so its error is
//     that map applied to the bound in absolute values; then two roundings (LayerNorm's output,
//     the residual add); dgamma and dbeta get the bound summed over rows;
//   - every GEMM weight gradient sees the same bf16 operands on both sides: fp32 tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/numerics/data_parallel.h"
#include "backend/cpu/numerics/expert_parallel.h"
#include "backend/cpu/numerics/pipeline.h"
#include "backend/cpu/numerics/ring_attention.h"
#include "backend/cpu/numerics/summa.h"
#include "backend/cpu/numerics/tensor_parallel.h"
#include "backend/cpu/numerics/test_util.h"
#include "core/bf16.h"
#include "core/error.h"
#include "kernels/elementwise.h"

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
    if (round_to_bf16(x) != x) return false;
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

// Expert parallelism moves token rows between ranks (all-to-all copies, exact) and computes
// each row with the same expert weights; the router runs in fp32. So, as DP: logits bit for
// bit, gradients (experts' summed over tokens from every rank) within the fp32 tolerance.
void check_ep_bf16(int e, int top_k) {
  ModelConfig cfg = bf16_config(66);
  cfg.ffn = 24;
  cfg.moe = {.experts = 4, .top_k = top_k};
  const Batch batch = make_batch(cfg, 19);
  const StepResult ref = reference_step(cfg, bf16_copy(init_params(cfg)), batch);
  EXPECT_TRUE(all_bf16(ref.logits.data));
  const std::vector<EpStep> steps = testing::run_group(
      e, [&](int r, Comm& ep) { return expert_parallel_step(cfg, bf16_copy(ep_rank_params(cfg, e, r)), batch, ep); });
  const std::int64_t rows = std::int64_t(cfg.batch / e) * cfg.seq * cfg.vocab;
  TensorMap all;
  for (int r = 0; r < e; ++r) {
    EXPECT_NEAR(steps[r].loss, ref.loss, 1e-5 * ref.loss) << "rank " << r;
    EXPECT_EQ(steps[r].logits.data,
              std::vector<float>(ref.logits.data.begin() + r * rows, ref.logits.data.begin() + (r + 1) * rows))
        << "rank " << r << ": bf16 logits are the single rank's bits";
    for (const auto& [name, g] : steps[r].grads) all.emplace(name, g);
  }
  EXPECT_EQ(all.size(), ref.grads.size());
  expect_maps_close(all, ref.grads, "fp32 main gradients");
}

TEST(Bf16, ExpertParallelTwoRanksTop2MatchesSingleRank) { check_ep_bf16(2, 2); }
TEST(Bf16, ExpertParallelFourRanksTop1MatchesSingleRank) { check_ep_bf16(4, 1); }
TEST(Bf16, ExpertParallelFourRanksTop2MatchesSingleRank) { check_ep_bf16(4, 2); }

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

// ---- tensor and sequence parallelism, block by block ------------------------------------------
constexpr double kU = 0x1p-8;     // bf16's unit roundoff
constexpr double kU32 = 0x1p-24;  // fp32's

double split_sum_factor(int t, std::int64_t K) { return 2.0 * t * kU + (2.0 * double(K) + t) * kU32; }

// sum_k |a_ik| |b_kj| for a [m, K] and b [K, n] (b_t: b stored [n, K]).
std::vector<double> abs_product(const std::vector<float>& a, std::int64_t m, std::int64_t K, const float* b,
                                std::int64_t n, bool b_t) {
  std::vector<double> out(static_cast<std::size_t>(m * n), 0.0);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t q = 0; q < K; ++q)
        out[i * n + j] += std::fabs(double(a[i * K + q])) * std::fabs(double(b_t ? b[j * K + q] : b[q * n + j]));
  return out;
}

struct TpBf16Ratios {
  double out = 0, dx = 0, ln_grads = 0;  // worst |got - want| / bound (<= 1 passes)
  double weight_grads = 0;               // worst ratio to the fp32 tolerance
};

// The single rank's block and the t ranks' (tp_block_step) on the same bf16 input;
// `rank0_shard_everywhere` hands every rank rank 0's shard (a wrong layout: the would-fail test).
TpBf16Ratios compare_tp_block(int t, bool sp, TpBlock block, bool rank0_shard_everywhere = false) {
  const ModelConfig cfg = bf16_config(31);
  const int l = 1;
  const bool att = block == TpBlock::Attention;
  const TensorMap W = bf16_copy(init_params(cfg));
  const std::int64_t T = cfg.tokens(), h = cfg.hidden, f = cfg.ffn, Tl = sp ? T / t : T;
  std::mt19937 gen(7u + 10u * t + (sp ? 100u : 0u) + (att ? 0u : 1000u));
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  std::vector<float> x(T * h), dy(T * h);
  for (float& v : x) v = round_to_bf16(2.f * uni(gen));
  for (float& v : dy) v = round_to_bf16(0.01f * uni(gen));

  // the single rank
  const auto rows = row_range(0, T);
  LayerCache c;
  TensorMap g = zeros_like(W);
  std::vector<float> out(T * h), dx(T * h);
  LocalAttention attn(cfg.heads, cfg.head_dim(), cfg.seq, true);
  LocalFfn ffn(cfg, W);
  if (att) {
    attention_block_forward(cfg, W, l, rows, x.data(), attn, c);
    out = c.x1;
    attention_block_backward(cfg, W, l, c, dy.data(), dx.data(), attn, g);
  } else {
    ffn_block_forward(cfg, W, l, rows, x.data(), out.data(), ffn, c);
    ffn_block_backward(cfg, W, l, c, dy.data(), dx.data(), ffn, g);
  }

  // the t ranks, their rows concatenated
  const std::vector<TpBlockStep> steps = testing::run_group(t, [&](int r, Comm& tp) {
    const std::int64_t r0 = sp ? r * Tl : 0;
    const std::vector<float> xs(x.begin() + r0 * h, x.begin() + (r0 + Tl) * h);
    const std::vector<float> dys(dy.begin() + r0 * h, dy.begin() + (r0 + Tl) * h);
    return tp_block_step(cfg, bf16_copy(tp_shard_params(cfg, t, rank0_shard_everywhere ? 0 : r)), l, block, tp, sp, xs,
                         dys);
  });
  std::vector<float> got_out, got_dx;
  std::vector<TensorMap> shards;
  for (int r = 0; r < t; ++r) {
    const std::int64_t n = sp ? Tl * h : 0;  // TP: every rank holds all rows; take rank 0's
    if (sp || r == 0) {
      got_out.insert(got_out.end(), steps[r].out.begin(), steps[r].out.begin() + (sp ? n : T * h));
      got_dx.insert(got_dx.end(), steps[r].dx.begin(), steps[r].dx.begin() + (sp ? n : T * h));
    }
    shards.push_back(steps[r].grads);
  }
  if (got_out.size() != out.size() || got_dx.size() != dx.size()) return {INFINITY, INFINITY, INFINITY, INFINITY};
  const TensorMap got_g = tp_assemble(cfg, shards);

  const float p = cfg.dropout;
  const double D = 1.0 / (1.0 - p);
  const std::string L = "l1.";
  TpBf16Ratios res;
  // forward: the row-parallel GEMM (proj: ctx Wo over K = h; fc2: act W2 over K = f)
  const std::vector<float>& op = att ? c.ctx : static_cast<const MlpSaved&>(*c.ffn).act;
  const std::int64_t Kf = att ? h : f;
  const std::vector<double> A = abs_product(op, T, Kf, W.at(L + (att ? "attn.wo" : "mlp.w2")).p(), h, false);
  const float* bias = W.at(L + (att ? "attn.bo" : "mlp.b2")).p();
  for (std::int64_t i = 0; i < T * h; ++i) {
    const double bound = D * (split_sum_factor(t, Kf) * A[i] + 2 * kU * (A[i] + std::fabs(bias[i % h]))) * 1.01 +
                         kU * (std::fabs(out[i]) + std::fabs(got_out[i])) + 1e-30;
    res.out = std::max(res.out, std::fabs(double(got_out[i]) - out[i]) / bound);
  }
  // backward: the operand of the split sum dxn (attention: dqkv Wqkv^T over K = 3h; MLP:
  // dpre W1^T over K = f), recomputed from the single rank's cache
  std::vector<float> dop;
  std::int64_t Kb = 0;
  if (att) {
    std::vector<float> da = dy, dctx(T * h);
    dropout_rows_backward(da.data(), rows, h, p, dropout_key(cfg.seed, l, 0));
    round_bf16(da);
    linear_backward(da.data(), c.ctx.data(), T, h, W.at(L + "attn.wo").p(), h, dctx.data(), nullptr, nullptr, true);
    dop.resize(T * 3 * h);
    attn.backward(*c.attn, dctx.data(), T, dop.data());
    Kb = 3 * h;
  } else {
    const auto& ms = static_cast<const MlpSaved&>(*c.ffn);
    std::vector<float> dm = dy;
    dropout_rows_backward(dm.data(), rows, h, p, dropout_key(cfg.seed, l, 1));
    round_bf16(dm);
    dop.resize(T * f);
    linear_backward(dm.data(), ms.act.data(), T, f, W.at(L + "mlp.w2").p(), h, dop.data(), nullptr, nullptr, true);
    kernels::gelu_backward_cpu(dop.data(), ms.pre.data(), dop.data(), dop.size());
    round_bf16(dop);
    Kb = f;
  }
  const std::vector<double> Ab = abs_product(dop, T, Kb, W.at(L + (att ? "attn.wqkv" : "mlp.w1")).p(), h, true);
  const std::vector<float>& xin = att ? c.x : c.x1;
  const std::vector<float>&mu = att ? c.mu1 : c.mu2, &rs = att ? c.rs1 : c.rs2;
  const float* gamma = W.at(L + (att ? "ln1.g" : "ln2.g")).p();
  std::vector<double> dg(h, 0.0), db(h, 0.0);  // bounds on the LayerNorm gradients
  for (std::int64_t i = 0; i < T; ++i) {
    // e: the split sum's bound plus fp32's rounding of the LayerNorm backward over it
    std::vector<double> e(h), xhat(h);
    double m1 = 0, m2 = 0;
    for (std::int64_t j = 0; j < h; ++j) {
      e[j] = (split_sum_factor(t, Kb) + 64 * kU32) * Ab[i * h + j];
      xhat[j] = (double(xin[i * h + j]) - mu[i]) * rs[i];
      m1 += std::fabs(gamma[j]) * e[j] / double(h);
      m2 += std::fabs(gamma[j]) * e[j] * std::fabs(xhat[j]) / double(h);
      dg[j] += e[j] * std::fabs(xhat[j]);
      db[j] += e[j];
    }
    for (std::int64_t j = 0; j < h; ++j) {
      const std::int64_t k = i * h + j;
      const double E = rs[i] * (std::fabs(gamma[j]) * e[j] + m1 + std::fabs(xhat[j]) * m2) * 1.01;
      const double bound = E + 2 * kU * (std::fabs(dx[k]) * (1 + kU) + std::fabs(dy[k]) + E) +
                           kU * (std::fabs(dx[k]) + std::fabs(got_dx[k])) + 1e-30;
      res.dx = std::max(res.dx, std::fabs(double(got_dx[k]) - dx[k]) / bound);
    }
  }
  for (const char* leaf : {"ln1.g", "ln1.b", "ln2.g", "ln2.b"}) {
    const std::string name = L + leaf;
    if ((leaf[2] == '1') != att) continue;
    const bool is_g = leaf[4] == 'g';
    const std::vector<float>&want = g.at(name).data, &have = got_g.at(name).data;
    double scale = 0;
    for (float v : want) scale = std::max(scale, double(std::fabs(v)));
    for (std::int64_t j = 0; j < h; ++j) {
      const double bound =
          (is_g ? dg[j] : db[j]) * 1.01 + testing::kRtol * std::fabs(want[j]) + testing::kAtol * scale + 1e-30;
      res.ln_grads = std::max(res.ln_grads, std::fabs(double(have[j]) - want[j]) / bound);
    }
  }
  for (const char* leaf : att ? std::vector<const char*>{"attn.wqkv", "attn.bqkv", "attn.wo", "attn.bo"}
                              : std::vector<const char*>{"mlp.w1", "mlp.b1", "mlp.w2", "mlp.b2"})
    res.weight_grads = std::max(res.weight_grads, testing::worst_ratio(got_g.at(L + leaf).data, g.at(L + leaf).data));
  if (std::getenv("NUMERICS_PRINT_RATIO"))
    std::printf("bf16 tp t=%d sp=%d %s: out %.3g dx %.3g ln %.3g weights %.3g\n", t, int(sp), att ? "attention" : "mlp",
                res.out, res.dx, res.ln_grads, res.weight_grads);
  return res;
}

void check_tp_bf16(int t, bool sp, TpBlock block) {
  const TpBf16Ratios r = compare_tp_block(t, sp, block);
  EXPECT_LE(r.out, 1.0) << "block output outside the derived bf16 bound";
  EXPECT_LE(r.dx, 1.0) << "input gradient outside the derived bf16 bound";
  EXPECT_LE(r.ln_grads, 1.0) << "LayerNorm gradients outside the derived bound";
  EXPECT_LE(r.weight_grads, 1.0) << "GEMM weight gradients outside the fp32 tolerance";
}

TEST(Bf16, TensorParallelTwoRanksAttentionBlockWithinItsRoundings) { check_tp_bf16(2, false, TpBlock::Attention); }
TEST(Bf16, TensorParallelTwoRanksMlpBlockWithinItsRoundings) { check_tp_bf16(2, false, TpBlock::Mlp); }
TEST(Bf16, TensorParallelFourRanksAttentionBlockWithinItsRoundings) { check_tp_bf16(4, false, TpBlock::Attention); }
TEST(Bf16, TensorParallelFourRanksMlpBlockWithinItsRoundings) { check_tp_bf16(4, false, TpBlock::Mlp); }
TEST(Bf16, SequenceParallelTwoRanksAttentionBlockWithinItsRoundings) { check_tp_bf16(2, true, TpBlock::Attention); }
TEST(Bf16, SequenceParallelFourRanksMlpBlockWithinItsRoundings) { check_tp_bf16(4, true, TpBlock::Mlp); }

// The bounds tell a right layout from a wrong one: with rank 0's shard on every rank (heads
// and FFN columns counted twice, others missing) the block's output and input gradient fall
// far outside them.
TEST(Bf16, TensorParallelWrongShardsWouldFail) {
  for (TpBlock b : {TpBlock::Attention, TpBlock::Mlp}) {
    const TpBf16Ratios r = compare_tp_block(2, false, b, /*rank0_shard_everywhere=*/true);
    EXPECT_GT(r.out, 10.0);
    EXPECT_GT(r.dx, 10.0);
  }
}

// The whole bf16 TP step runs (loss, logits and gradients against the single rank's within
// what the layers' bf16 roundings allow is what the block tests above derive; here: the
// step runs end to end, the loss agrees to 1%, and fp32 weights are refused).
TEST(Bf16, TensorParallelStepRunsAndRefusesFp32Weights) {
  const ModelConfig cfg = bf16_config(31);
  const Batch batch = make_batch(cfg, 9);
  const StepResult ref = reference_step(cfg, bf16_copy(init_params(cfg)), batch);
  for (bool sp : {false, true}) {
    const std::vector<TpStep> steps = testing::run_group(2, [&](int r, Comm& tp) {
      return tensor_parallel_step(cfg, bf16_copy(tp_shard_params(cfg, 2, r)), batch, tp, sp);
    });
    for (const TpStep& s : steps) EXPECT_NEAR(s.loss, ref.loss, 0.01 * ref.loss) << "sp " << sp;
  }
  const auto errors = testing::run_world(2, [&](int r, cpu::Transport& t) {
    Comm tp(t, {0, 1}, AlgorithmRegistry::builtin());
    tensor_parallel_step(cfg, tp_shard_params(cfg, 2, r), batch, tp, false);
  });
  for (const auto& e : errors) EXPECT_NE(e.find("bf16_copy"), std::string::npos) << e;
}

// ---- context parallelism: ring attention against the single rank's attention --------------
// Same bf16 q, k, v and output gradient on both sides (every other op of the layer is
// token-local, so the attention core is where the two runs differ). Ring attention rounds
// each block pair's output and dq/dk/dv to bf16 and merges / accumulates in fp32; the single
// rank rounds each once. Per head and query row i (p: the softmax probabilities, dS = p (dP -
// D), D = sum dO O, dP = dO v), with eps = 64 fp32 roundings:
//   o:  (u + eps) sum_k p_ik |v_k| + u (|o_ring| + |o_ref|)           (sum_b w_b = 1)
//   the backward reads each side's own O: D differs by sum |dO| |dO_ring - O_ref| (measured),
//   dS by p dD + eps p |dP - D|;
//   dq: scale (sum_k |ddS| |k| + (u + eps) sum_k |dS| |k|) + u (|dq_ring| + |dq_ref|),
//   dk likewise over queries, dv: (u + 2 eps) sum_i p |dO| + its two roundings.
struct CpCore {
  std::vector<float> ctx, dqkv;  // this rank's rows (cp_rows order)
};

double compare_ring_attention(int c, bool hand_rank0_everything = false) {
  const ModelConfig cfg = bf16_config(77);
  const std::int64_t T = cfg.tokens(), h = cfg.hidden, S = cfg.seq, H = cfg.heads, D = cfg.head_dim();
  std::mt19937 gen(11u + c);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  std::vector<float> qkv(T * 3 * h), dctx(T * h);
  for (float& v : qkv) v = round_to_bf16(2.f * uni(gen));
  for (float& v : dctx) v = round_to_bf16(0.1f * uni(gen));
  LocalAttention local(int(H), int(D), int(S), true);
  std::vector<float> ctx(T * h), dqkv(T * 3 * h);
  const auto saved = local.forward(qkv.data(), T, ctx.data());
  local.backward(*saved, dctx.data(), T, dqkv.data());

  const std::vector<CpCore> ranks = testing::run_group(c, [&](int r, Comm& cp) {
    const std::vector<std::int64_t> rows = cp_rows(cfg, c, hand_rank0_everything ? 0 : r);
    std::vector<float> q_in, d_in;
    for (std::int64_t g : rows) {
      q_in.insert(q_in.end(), qkv.begin() + g * 3 * h, qkv.begin() + (g + 1) * 3 * h);
      d_in.insert(d_in.end(), dctx.begin() + g * h, dctx.begin() + (g + 1) * h);
    }
    RingAttention ring(cp, int(H), int(D), cfg.batch, int(S / (2 * c)), true);
    CpCore out{std::vector<float>(rows.size() * h), std::vector<float>(rows.size() * 3 * h)};
    const auto s = ring.forward(q_in.data(), std::int64_t(rows.size()), out.ctx.data());
    ring.backward(*s, d_in.data(), std::int64_t(rows.size()), out.dqkv.data());
    return out;
  });
  std::vector<float> rctx(T * h), rdqkv(T * 3 * h);
  for (int r = 0; r < c; ++r) {
    const std::vector<std::int64_t> rows = cp_rows(cfg, c, r);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      std::copy_n(ranks[r].ctx.begin() + i * h, h, rctx.begin() + rows[i] * h);
      std::copy_n(ranks[r].dqkv.begin() + i * 3 * h, 3 * h, rdqkv.begin() + rows[i] * 3 * h);
    }
  }

  const double eps = 64 * kU32, scale = 1.0 / std::sqrt(double(D));
  double worst = 0;
  auto check = [&](float got, float want, double bound) {
    worst = std::max(worst, std::fabs(double(got) - want) / (bound + kU * (std::fabs(got) + std::fabs(want)) + 1e-30));
  };
  for (std::int64_t b = 0; b < cfg.batch; ++b)
    for (std::int64_t hd = 0; hd < H; ++hd) {
      // element d of row s of Q / K / V / O / dO of this head
      auto at = [&](const std::vector<float>& m, std::int64_t ld, std::int64_t part, std::int64_t s, std::int64_t d) {
        return double(m[(b * S + s) * ld + part * h + hd * D + d]);
      };
      std::vector<double> dq_b(S * D, 0), dk_b(S * D, 0), dv_b(S * D, 0);
      for (std::int64_t i = 0; i < S; ++i) {
        std::vector<double> p(i + 1), dP(i + 1);
        double mx = -INFINITY, z = 0, Dref = 0, dD = 0;
        for (std::int64_t k = 0; k <= i; ++k) {
          double dot = 0;
          for (std::int64_t d = 0; d < D; ++d) dot += at(qkv, 3 * h, 0, i, d) * at(qkv, 3 * h, 1, k, d);
          p[k] = dot * scale;
          mx = std::max(mx, p[k]);
        }
        for (auto& v : p) z += (v = std::exp(v - mx));
        for (auto& v : p) v /= z;
        for (std::int64_t d = 0; d < D; ++d) {
          double pv = 0;
          for (std::int64_t k = 0; k <= i; ++k) pv += p[k] * std::fabs(at(qkv, 3 * h, 2, k, d));
          check(float(at(rctx, h, 0, i, d)), float(at(ctx, h, 0, i, d)), (kU + eps) * pv * 1.01);
          const double dO = at(dctx, h, 0, i, d), O = at(ctx, h, 0, i, d);
          Dref += dO * O;
          dD += std::fabs(dO) * (std::fabs(at(rctx, h, 0, i, d) - O) + eps * std::fabs(O));
        }
        for (std::int64_t k = 0; k <= i; ++k) {
          for (std::int64_t d = 0; d < D; ++d) dP[k] += at(dctx, h, 0, i, d) * at(qkv, 3 * h, 2, k, d);
          const double dS = p[k] * (dP[k] - Dref);
          const double ddS = p[k] * dD + eps * p[k] * (std::fabs(dP[k]) + std::fabs(Dref));
          for (std::int64_t d = 0; d < D; ++d) {
            dq_b[i * D + d] += scale * (ddS * std::fabs(at(qkv, 3 * h, 1, k, d)) +
                                        (kU + eps) * std::fabs(dS) * std::fabs(at(qkv, 3 * h, 1, k, d)));
            dk_b[k * D + d] += scale * (ddS * std::fabs(at(qkv, 3 * h, 0, i, d)) +
                                        (kU + eps) * std::fabs(dS) * std::fabs(at(qkv, 3 * h, 0, i, d)));
            dv_b[k * D + d] += (kU + 2 * eps) * p[k] * std::fabs(at(dctx, h, 0, i, d));
          }
        }
      }
      for (std::int64_t s = 0; s < S; ++s)
        for (std::int64_t d = 0; d < D; ++d)
          for (int part = 0; part < 3; ++part) {
            const double bound = (part == 0 ? dq_b : part == 1 ? dk_b : dv_b)[s * D + d] * 1.01;
            check(float(at(rdqkv, 3 * h, part, s, d)), float(at(dqkv, 3 * h, part, s, d)), bound);
          }
    }
  if (std::getenv("NUMERICS_PRINT_RATIO")) std::printf("bf16 ring attention c=%d: %.3g of the bound\n", c, worst);
  return worst;
}

TEST(Bf16, RingAttentionTwoRanksWithinItsRoundings) { EXPECT_LE(compare_ring_attention(2), 1.0); }
TEST(Bf16, RingAttentionFourRanksWithinItsRoundings) { EXPECT_LE(compare_ring_attention(4), 1.0); }
// Every rank holding rank 0's chunks (so some chunks are never attended) is far outside.
TEST(Bf16, RingAttentionWrongChunksWouldFail) { EXPECT_GT(compare_ring_attention(2, true), 10.0); }

// The whole bf16 CP step runs end to end (loss within 1% of the single rank's: a sanity
// check; the derived bound is the attention core's, above).
TEST(Bf16, ContextParallelStepRuns) {
  const ModelConfig cfg = bf16_config(77);
  const Batch batch = make_batch(cfg, 3);
  const StepResult ref = reference_step(cfg, bf16_copy(init_params(cfg)), batch);
  const std::vector<CpStep> steps = testing::run_group(
      2, [&](int, Comm& cp) { return context_parallel_step(cfg, bf16_copy(init_params(cfg)), batch, cp); });
  for (const CpStep& s : steps) EXPECT_NEAR(s.loss, ref.loss, 0.01 * ref.loss);
}

// ---- 2D SUMMA: its three products against the single rank's GEMMs -------------------------
// The products are where the mesh's arithmetic differs from one rank's (the 2D LayerNorm's
// fp32 statistics are checked in fp32 by summa_test.cpp; in bf16 only its output is rounded,
// as the single rank's). On the same bf16 blocks, per element, A = sum_k |a_k b_k|:
//   A B   (fp32 panels, summed in panel order):   2K 2^-24 A          (fp32's order only)
//   A B^T (partials rounded, reduced in bf16):    c(q, K) A           (as tensor parallelism's)
//   A^T B (weight gradients, fp32):               2K 2^-24 A
double worst_of(const std::vector<float>& got, const std::vector<float>& want, const std::vector<double>& bound) {
  double w = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    w = std::max(w, std::fabs(double(got[i]) - want[i]) / (bound[i] + 1e-30));
  return w;
}

void check_summa_products(int q) {
  const std::int64_t T = 24, K = 18, N = 12;  // every size divides by 2 and 3
  std::mt19937 gen(5u + q);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  auto random = [&](std::int64_t rows, std::int64_t cols) {
    Tensor m(rows, cols);
    for (float& x : m.data) x = round_to_bf16(uni(gen));
    return m;
  };
  const Tensor A = random(T, K), B = random(K, N), C = random(T, N);
  const std::vector<float>&a = A.data, &b = B.data, &c = C.data;
  struct Out {
    Tensor ab, abt, atb;
  };
  const std::vector<Out> out = testing::run_group(q * q, [&](int, Comm& mesh) {
    SummaMesh M = summa_mesh(mesh, q);
    Out o;
    o.ab = Tensor(T / q, N / q);
    auto blk = [&](const Tensor& full) { return summa_block(full, q, M.i, M.j); };
    summa_ab(M, blk(A), blk(B), o.ab, true);     // [T,K][K,N]
    o.abt = summa_abt(M, blk(C), blk(B), true);  // [T,N][K,N]^T
    o.atb = summa_atb(M, blk(A), blk(C), true);  // [T,K]^T[T,N]
    return o;
  });
  auto gather = [&](Tensor Out::*field) {
    std::vector<Tensor> blocks;
    for (const Out& o : out) blocks.push_back(o.*field);
    return summa_assemble(blocks, q);
  };
  // the single rank: in-order fp32 GEMMs; A B^T rounded, as its bf16 GEMM writes it
  std::vector<float> ab(T * N), abt(T * K), atb(K * N);
  matmul(true, kernels::Trans::No, kernels::Trans::No, T, N, K, a.data(), K, b.data(), N, 0.f, ab.data(), N);
  matmul(true, kernels::Trans::No, kernels::Trans::Yes, T, K, N, c.data(), N, b.data(), N, 0.f, abt.data(), K);
  round_bf16(abt);
  matmul(true, kernels::Trans::Yes, kernels::Trans::No, K, N, T, a.data(), K, c.data(), N, 0.f, atb.data(), N);
  auto scaled = [](std::vector<double> v, double f) {
    for (double& x : v) x *= f * 1.01;
    return v;
  };
  const double r_ab = worst_of(gather(&Out::ab), ab, scaled(abs_product(a, T, K, b.data(), N, false), 2.0 * K * kU32));
  const std::vector<double> abt_bound = scaled(abs_product(c, T, N, b.data(), K, true), split_sum_factor(q, N));
  const double r_abt = worst_of(gather(&Out::abt), abt, abt_bound);
  std::vector<float> at(K * T);  // a^T, for the bound of A^T B
  for (std::int64_t i = 0; i < T; ++i)
    for (std::int64_t k = 0; k < K; ++k) at[k * T + i] = a[i * K + k];
  const double r_atb =
      worst_of(gather(&Out::atb), atb, scaled(abs_product(at, K, T, c.data(), N, false), 2.0 * T * kU32));
  if (std::getenv("NUMERICS_PRINT_RATIO"))
    std::printf("bf16 summa q=%d: AB %.3g  AB^T %.3g  A^TB %.3g of the bound\n", q, r_ab, r_abt, r_atb);
  EXPECT_LE(r_ab, 1.0);
  EXPECT_LE(r_abt, 1.0);
  EXPECT_LE(r_atb, 1.0);
  // The bounds can fail: rank 0's and rank 1's blocks of A B^T swapped are far outside.
  std::vector<Tensor> swapped;
  for (const Out& o : out) swapped.push_back(o.abt);
  std::swap(swapped[0], swapped[1]);
  EXPECT_GT(worst_of(summa_assemble(swapped, q), abt, abt_bound), 10.0);
}

TEST(Bf16, SummaProductsOnTwoByTwoMeshWithinTheirRoundings) { check_summa_products(2); }
TEST(Bf16, SummaProductsOnThreeByThreeMeshWithinTheirRoundings) { check_summa_products(3); }

// The bf16 MLP block runs on the mesh end to end. Its 2D LayerNorm's statistics differ from
// the single rank's in fp32, which can flip a bf16 rounding of the normalized input and then
// of everything after it, so the whole block is a sanity check (within 2% of the largest
// output), not a derived bound: the bounds are the products', above.
TEST(Bf16, Summa2DMlpBlockRuns) {
  ModelConfig cfg = bf16_config(77, 1);
  cfg.batch = 3, cfg.ffn = 48;
  const MlpBlockData data = mlp_block_data(cfg, 23);
  EXPECT_TRUE(all_bf16(data.x.data));
  const MlpBlockResult ref = reference_mlp_block(cfg, data);
  const std::vector<MlpBlockResult> res =
      testing::run_group(4, [&](int, Comm& mesh) { return summa_mlp_block(cfg, data, mesh, 2); });
  std::vector<Tensor> ys;
  for (const auto& r : res) ys.push_back(r.y);
  const std::vector<float> y = summa_assemble(ys, 2);
  EXPECT_TRUE(all_bf16(y));
  double scale = 0, worst = 0;
  for (float v : ref.y.data) scale = std::max(scale, double(std::fabs(v)));
  for (std::size_t i = 0; i < y.size(); ++i) worst = std::max(worst, std::fabs(double(y[i]) - ref.y.data[i]));
  EXPECT_LE(worst, 0.02 * scale);
}

}  // namespace
}  // namespace meshsim::numerics
