// Memory model against the closed forms of docs/math.md section 11 (Korthikanti et al. 2022),
// written out independently here. GPT-3 175B, one sequence per micro-batch:
//   s = 2048, b = 1, h = 12288, a = 96, t = 8, L = 96, V = 51200, P = 2 (so 5as/h = 80).
#include "schedule/memory.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

namespace meshsim {
namespace {

constexpr double s = 2048, b = 1, h = 12288, a = 96, t = 8, L = 96, V = 51200;
constexpr double sbh = s * b * h;

ParallelSpec layout(int tp, bool sp, RecomputeMode mode) {
  ParallelSpec p;
  p.tp = tp;
  p.sp = sp;
  p.recompute.mode = mode;
  return p;
}

Bytes layer(int tp, bool sp, RecomputeMode mode) {
  return layer_activation_bytes(model_preset("gpt3-175b"), layout(tp, sp, mode));
}

Bytes item(const std::vector<MemoryItem>& items, const std::string& name) {
  for (const MemoryItem& i : items)
    if (i.name == name) return i.bytes;
  ADD_FAILURE() << "no item " << name;
  return -1;
}

// One test per row of the table in docs/math.md section 11.
TEST(ActivationTable, None) {
  EXPECT_EQ(layer(1, false, RecomputeMode::None), static_cast<Bytes>(sbh * (34 + 5 * a * s / h)));
}
TEST(ActivationTable, TensorParallel) {
  EXPECT_EQ(layer(8, false, RecomputeMode::None), static_cast<Bytes>(sbh * (10 + 24 / t + 5 * a * s / (h * t))));
}
TEST(ActivationTable, TensorAndSequenceParallel) {
  EXPECT_EQ(layer(8, true, RecomputeMode::None), static_cast<Bytes>(sbh / t * (34 + 5 * a * s / h)));
}
TEST(ActivationTable, TensorParallelSelective) {
  EXPECT_EQ(layer(8, false, RecomputeMode::Selective), static_cast<Bytes>(sbh * (10 + 24 / t)));
}
TEST(ActivationTable, TensorSequenceParallelSelective) {
  EXPECT_EQ(layer(8, true, RecomputeMode::Selective), static_cast<Bytes>(34 * sbh / t));
}
TEST(ActivationTable, Full) {
  EXPECT_EQ(layer(1, false, RecomputeMode::Full), static_cast<Bytes>(2 * sbh));
  EXPECT_EQ(layer(8, false, RecomputeMode::Full), static_cast<Bytes>(2 * sbh));
}
TEST(ActivationTable, FullWithSequenceParallel) {
  EXPECT_EQ(layer(8, true, RecomputeMode::Full), static_cast<Bytes>(2 * sbh / t));
}

TEST(ActivationItems, GptLayerBlocks) {
  // Attention 11sbh + 5as^2b, MLP 19sbh, two LayerNorm inputs 4sbh.
  const auto items = layer_activation_items(model_preset("gpt3-175b"), layout(1, false, RecomputeMode::None));
  EXPECT_EQ(items.size(), 14u);
  Bytes attn = 0, mlp = 0, norms = 0;
  for (const MemoryItem& i : items) {
    EXPECT_EQ(i.category, "activations");
    EXPECT_FALSE(i.formula.empty());
    if (i.name.find("layernorm") != std::string::npos)
      norms += i.bytes;
    else if (i.name.rfind("attn.", 0) == 0)
      attn += i.bytes;
    else if (i.name.rfind("mlp.", 0) == 0)
      mlp += i.bytes;
  }
  EXPECT_EQ(attn, static_cast<Bytes>(11 * sbh + 5 * a * s * s * b));
  EXPECT_EQ(mlp, static_cast<Bytes>(19 * sbh));
  EXPECT_EQ(norms, static_cast<Bytes>(4 * sbh));
  EXPECT_EQ(item(items, "attn.softmax_output"), static_cast<Bytes>(2 * a * s * s * b));
  EXPECT_EQ(item(items, "attn.softmax_dropout_mask"), static_cast<Bytes>(a * s * s * b));
  EXPECT_EQ(item(items, "mlp.gelu_input"), static_cast<Bytes>(8 * sbh));
}

TEST(Pipeline, FirstStageHoldsLLayersPlain1F1B) {
  const ModelSpec m = model_preset("gpt3-175b");
  ParallelSpec p = layout(8, true, RecomputeMode::None);
  p.pp = 4;
  p.microbatches = 8;
  EXPECT_EQ(inflight_chunks(p, 0), 4);
  EXPECT_EQ(inflight_chunks(p, 3), 1);
  const double per_layer = sbh / t * (34 + 5 * a * s / h);
  EXPECT_EQ(rank_memory(m, p, 0).bytes("activations"), static_cast<Bytes>(L * per_layer));
  EXPECT_EQ(rank_memory(m, p, 3).bytes("activations"), static_cast<Bytes>(L / 4 * per_layer));
  p.microbatches = 2;  // fewer micro-batches than stages: only m in flight
  EXPECT_EQ(rank_memory(m, p, 0).bytes("activations"), static_cast<Bytes>(2 * L / 4 * per_layer));
}

TEST(Pipeline, FirstStageFactorInterleaved) {
  const ModelSpec m = model_preset("gpt3-175b");
  ParallelSpec p = layout(8, true, RecomputeMode::None);
  const double pp = 4, v = 3;
  p.pp = 4;
  p.vchunks = 3;
  p.microbatches = 8;
  const double per_layer = sbh / t * (34 + 5 * a * s / h);
  const double expected = L * per_layer * (1 + (pp - 1) / (pp * v));  // 1.25 L layers
  EXPECT_EQ(rank_memory(m, p, 0).bytes("activations"), static_cast<Bytes>(expected));
}

ModelSpec llama_128k() {
  ModelSpec m = model_preset("llama2-70b");
  m.seq = 131072;
  return m;
}

TEST(ModernLayer, SixItemsAndTheirSum) {
  const double S = 131072, B = 1, H = 8192, Hkv = 1024, Hi = 28672, P = 2, T = 8;
  for (int c : {1, 2}) {
    ParallelSpec p = layout(8, true, RecomputeMode::None);
    p.cp = c;
    const auto items = layer_activation_items(llama_128k(), p);
    ASSERT_EQ(items.size(), 6u);
    EXPECT_EQ(item(items, "attn.norm_input"), static_cast<Bytes>(B * S / (c * T) * H * P));
    EXPECT_EQ(item(items, "attn.qkv"), static_cast<Bytes>(B * S / c * (H + 2 * Hkv) / T * P));
    EXPECT_EQ(item(items, "attn.output"), static_cast<Bytes>(B * S / c * H / T * P));
    EXPECT_EQ(item(items, "mlp.norm_input"), static_cast<Bytes>(B * S / (c * T) * H * P));
    EXPECT_EQ(item(items, "mlp.up_gate_input"), static_cast<Bytes>(B * S / c * H / T * P));
    EXPECT_EQ(item(items, "mlp.down_input"), static_cast<Bytes>(B * S / c * 2 * Hi / T * P));
    EXPECT_EQ(total_bytes(items), static_cast<Bytes>(B * S * (5 * H + 2 * Hkv + 2 * Hi) * P / (c * T)));
  }
}

TEST(ModernLayer, Llama70bAt128kIs245GiBItemized) {
  // The itemized sum (5H form) over 80 layers, B = 1, S = 128k, t = 8, c = 1: exactly 245 GiB.
  // The slide's 4H form gives 80 x 131072 x 92160 x 2 / 8 bytes = 225 GiB (its "~225 GB").
  const Bytes per_layer = layer_activation_bytes(llama_128k(), layout(8, true, RecomputeMode::None));
  EXPECT_EQ(80 * per_layer, GiB(245));
}

TEST(ModernLayer, SelectiveDropsNothingFullKeepsInput) {
  const ModelSpec m = llama_128k();
  EXPECT_EQ(layer_activation_bytes(m, layout(8, true, RecomputeMode::Selective)),
            layer_activation_bytes(m, layout(8, true, RecomputeMode::None)));
  EXPECT_EQ(layer_activation_bytes(m, layout(8, true, RecomputeMode::Full)),
            static_cast<Bytes>(131072.0 * 8192 * 2 / 8));
}

TEST(ModernLayer, MoeItemsScaleWithTopK) {
  const ModelSpec m = model_preset("mixtral-8x7b");
  const double S = 4096, H = 4096, Hi = 14336, k = 2, E = 8;
  const auto items = layer_activation_items(m, layout(1, false, RecomputeMode::None));
  EXPECT_EQ(item(items, "mlp.up_gate_input"), static_cast<Bytes>(k * S * H * 2));
  EXPECT_EQ(item(items, "mlp.down_input"), static_cast<Bytes>(k * S * 2 * Hi * 2));
  EXPECT_EQ(item(items, "moe.router_probs"), static_cast<Bytes>(4 * S * E));
}

TEST(Extras, EmbeddingDropoutOnFirstStageOutputSideOnLast) {
  const ModelSpec m = model_preset("gpt3-175b");
  ParallelSpec p = layout(8, true, RecomputeMode::None);
  const double pp = 4;
  p.pp = 4;
  p.microbatches = 8;
  EXPECT_EQ(rank_memory(m, p, 0).bytes("extras"), static_cast<Bytes>(sbh * pp / t));
  EXPECT_EQ(rank_memory(m, p, 1).bytes("extras"), 0);
  EXPECT_EQ(rank_memory(m, p, 3).bytes("extras"), static_cast<Bytes>(2 * sbh / t + 2 * sbh / t + 4 * s * b * V / t));
  p.pp = 1;
  p.microbatches = 1;
  EXPECT_EQ(rank_memory(m, p, 0).bytes("extras"),
            static_cast<Bytes>(sbh / t + 2 * sbh / t + 2 * sbh / t + 4 * s * b * V / t));
}

TEST(ModelState, SixteenBytesPerParameterAndZeroStages) {
  const ModelSpec m = model_preset("gpt3-175b");
  const double N = L * (12 * h * h + 13 * h) + V * h + 2 * h;  // tied embedding, pp = 1
  ParallelSpec p;
  RankMemory r = rank_memory(m, p, 0);
  EXPECT_EQ(r.bytes("weights"), static_cast<Bytes>(2 * N));
  EXPECT_EQ(r.bytes("gradients"), static_cast<Bytes>(2 * N));
  EXPECT_EQ(r.bytes("optimizer"), static_cast<Bytes>(12 * N));
  p.dp = 8;
  const double tol = 8;  // per-item rounding
  for (int zero : {1, 2, 3}) {
    p.zero = zero;
    r = rank_memory(m, p, 0);
    EXPECT_NEAR(r.bytes("optimizer"), 12 * N / 8, tol) << zero;
    EXPECT_NEAR(r.bytes("gradients"), zero >= 2 ? 2 * N / 8 : 2 * N, tol) << zero;
    EXPECT_NEAR(r.bytes("weights"), zero >= 3 ? 2 * N / 8 : 2 * N, tol) << zero;
  }
}

// Context-parallel ranks hold the same weights: ZeRO shards over dp x cp (dp 2 x cp 4 = 8 ranks
// here, as dp 8 above), and cp alone (dp 1) shards too.
TEST(ModelState, ZeroShardsOverDataAndContextParallelRanks) {
  const ModelSpec m = model_preset("gpt3-175b");
  const double N = L * (12 * h * h + 13 * h) + V * h + 2 * h;
  ParallelSpec p;
  p.dp = 2;
  p.cp = 4;
  p.zero = 3;
  const RankMemory r = rank_memory(m, p, 0);
  EXPECT_NEAR(r.bytes("optimizer"), 12 * N / 8, 8);
  EXPECT_NEAR(r.bytes("gradients"), 2 * N / 8, 8);
  EXPECT_NEAR(r.bytes("weights"), 2 * N / 8, 8);
  p.dp = 1;
  p.zero = 1;
  EXPECT_NEAR(rank_memory(m, p, 0).bytes("optimizer"), 12 * N / 4, 8);
}

TEST(ModelState, PipelineStagesSplitLayersAndPlaceEmbeddings) {
  const ModelSpec m = model_preset("gpt3-175b");
  ParallelSpec p = layout(8, true, RecomputeMode::None);
  p.pp = 4;
  p.microbatches = 8;
  const double layers = L / 4 * (12 * h * h + 13 * h) / t, table = V * h / t;
  EXPECT_NEAR(rank_memory(m, p, 0).bytes("weights"), 2 * (layers + table), 2);
  EXPECT_NEAR(rank_memory(m, p, 1).bytes("weights"), 2 * layers, 2);
  EXPECT_NEAR(rank_memory(m, p, 3).bytes("weights"), 2 * (layers + table + 2 * h), 2);  // head copy + final LN
}

TEST(ModelState, ExpertsDividedByEp) {
  const ModelSpec m = model_preset("mixtral-8x7b");
  ParallelSpec p;
  p.dp = 8;
  p.ep = 8;
  const double H = 4096, Hkv = 1024, Hi = 14336, E = 8, Lm = 32, Vm = 32000;
  // RMSNorms: two of H weights a layer, one after the last.
  const double dense = Lm * (H * (H + 2 * Hkv) + H * H + H * E + 2 * H) + 2 * Vm * H + H;
  const double experts = Lm * E * 3 * H * Hi / 8;
  EXPECT_NEAR(rank_memory(m, p, 0).bytes("weights"), 2 * (dense + experts), 4);
  // With tp = 2 as well: by default (etp = tp, Megatron-core's) each of the E/e experts of a
  // rank is split over the 2 tp ranks, E/(e t) of the expert weights; with etp = 1 the rank
  // holds its E/e experts whole. The expert optimizer state is sharded (ZeRO-1) over the ranks
  // holding the same experts: d c t / (e etp) = 4 x 2 / (4 x 2) = 1 (none) with etp = tp; with
  // etp = 1 and ep 4 spanning tp 2 x 2 dp ranks, 4 x 2 / 4 = 2.
  p.dp = 4;
  p.ep = 4;
  p.tp = 2;
  p.zero = 1;
  auto item = [&](const char* category) {
    for (const MemoryItem& it : rank_memory(m, p, 0).items)
      if (it.category == category && it.name == "experts") return static_cast<double>(it.bytes);
    return -1.0;
  };
  const double expert_params = Lm * E * 3 * H * Hi;
  EXPECT_NEAR(item("weights"), 2 * expert_params / 8, 1);
  EXPECT_NEAR(item("optimizer"), 12 * expert_params / 8, 1);
  p.etp = 1;
  EXPECT_NEAR(item("weights"), 2 * expert_params / 4, 1);
  EXPECT_NEAR(item("optimizer"), 12 * expert_params / 4 / 2, 1);
}

TEST(Recompute, EveryKSqrtAndFullAtStageLevel) {
  const ModelSpec m = model_preset("gpt3-175b");
  const double ckpt = 2 * sbh / t, whole = sbh / t * (34 + 5 * a * s / h);
  ParallelSpec p = layout(8, true, RecomputeMode::EveryK);
  p.recompute.every_k = 4;
  EXPECT_EQ(rank_memory(m, p, 0).bytes("activations"), static_cast<Bytes>(24 * ckpt + 4 * whole));
  p.recompute.mode = RecomputeMode::Sqrt;  // K = round(sqrt(96)) = 10, ceil(96/10) = 10 checkpoints
  EXPECT_EQ(recompute_segment_layers(m, p), 10);
  EXPECT_EQ(rank_memory(m, p, 0).bytes("activations"), static_cast<Bytes>(10 * ckpt + 10 * whole));
  p.recompute.mode = RecomputeMode::Full;
  EXPECT_EQ(rank_memory(m, p, 0).bytes("activations"), static_cast<Bytes>(96 * ckpt + whole));
  p.recompute.mode = RecomputeMode::Selective;
  EXPECT_EQ(rank_memory(m, p, 0).bytes("activations"), static_cast<Bytes>(96 * 34 * sbh / t));
}

TEST(RankMemoryTest, TotalsRolesWorkspaceAndBadStage) {
  const ModelSpec m = model_preset("gpt3-175b");
  ParallelSpec p = layout(8, true, RecomputeMode::Selective);
  p.pp = 8;
  p.vchunks = 2;
  p.dp = 16;
  p.microbatches = 64;
  p.zero = 1;
  const RankMemory r = rank_memory(m, p, 0);
  Bytes sum = 0;
  for (const char* c : {"weights", "gradients", "optimizer", "activations", "extras", "temporaries", "workspace"})
    sum += r.bytes(c);
  EXPECT_EQ(sum, r.total());
  EXPECT_NE(r.role.find("first"), std::string::npos) << r.role;
  EXPECT_NE(rank_memory(m, p, 7).role.find("last"), std::string::npos);
  // Workspace: the largest of DP bucket 25 MiB, TP gather 2sbh = 48 MiB, PP send+recv 2 x 2sbh/t.
  EXPECT_EQ(r.bytes("workspace"), static_cast<Bytes>(2 * sbh));
  EXPECT_GT(r.bytes("temporaries"), 0);
  EXPECT_THROW(rank_memory(m, p, 8), Error);
  try {
    rank_memory(m, p, -1);
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("stage:", 0), 0u) << e.what();
  }
}

// The DP bucket holds at most the gradients the rank reduces. Hand-worked: layers 4,
// h = 256, vocab 1024, tied embeddings, P = 2: a GPT layer has 12h^2 + 13h = 786,432 + 3,328
// = 789,760 parameters.
//   pp = 1: 4 layers 3,159,040 + embedding vh 262,144 + final LayerNorm 2h 512 = 3,421,696
//           parameters -> 6,843,392 bytes of gradients;
//   pp = 2, stage 0: 2 layers 1,579,520 + embedding 262,144 = 1,841,664 -> 3,683,328 bytes;
//           stage 1: 2 layers + output projection 262,144 + 512 = 1,842,176 -> 3,684,352 bytes.
// A 1 TiB bucket is clamped to those; a 1 MiB one stays 1,048,576 bytes.
TEST(RankMemoryTest, DpBucketIsAtMostTheGradients) {
  ModelSpec m;
  m.name = "small";
  m.layers = 4;
  m.hidden = 256;
  m.heads = 4;
  m.kv_heads = 4;
  m.ffn_hidden = 1024;
  m.seq = 128;
  m.vocab = 1024;
  auto bucket = [&](int pp, int stage, double mib, int zero) {
    ParallelSpec p;
    p.dp = 2;
    p.pp = pp;
    p.microbatches = pp;
    p.zero = zero;
    p.dp_bucket_mib = mib;
    const RankMemory r = rank_memory(m, p, stage);
    for (const MemoryItem& i : r.items)
      if (i.category == "workspace") {
        EXPECT_EQ(i.name, "dp_gradient_bucket");
        return i.bytes;
      }
    ADD_FAILURE() << "no workspace item";
    return Bytes{-1};
  };
  for (int zero : {0, 2, 3}) {  // the bucket holds gradients as computed, before ZeRO sharding
    EXPECT_EQ(bucket(1, 0, 1024.0 * 1024, zero), 6843392) << zero;
    EXPECT_EQ(bucket(2, 0, 1024.0 * 1024, zero), 3683328) << zero;
    EXPECT_EQ(bucket(2, 1, 1024.0 * 1024, zero), 3684352) << zero;
  }
  EXPECT_EQ(bucket(1, 0, 1, 0), 1048576);
  ParallelSpec p;
  p.dp = 2;
  p.dp_bucket_mib = 1024.0 * 1024;
  EXPECT_NE(rank_memory(m, p, 0).items.back().formula.find("min(1048576 MiB, gradients = P x 3.422e+06 parameters)"),
            std::string::npos)
      << rank_memory(m, p, 0).items.back().formula;
}

// Megatron's distributed checkpoints: without sp each tp rank keeps 1/t of a checkpointed
// layer input. GPT-3 175B, b = 1, t = 8: 2sbh/t = 2 x 2048 x 12288 / 8 = 6,291,456 bytes
// (2sbh = 50,331,648 without). pp = 1 holds all 96 layers, one micro-batch in flight:
// full 96 checkpoints = 603,979,776 bytes; every:4 96/4 = 24 = 150,994,944 bytes.
TEST(Recompute, DistributedCheckpointsKeepOneTensorShard) {
  const ModelSpec m = model_preset("gpt3-175b");
  ParallelSpec p = layout(8, false, RecomputeMode::Full);
  EXPECT_EQ(item(layer_activation_items(m, p), "layer_input"), 50331648);
  p.distribute_checkpoints = true;
  const std::vector<MemoryItem> items = layer_activation_items(m, p);
  ASSERT_EQ(items.size(), 1u);
  EXPECT_EQ(items[0].bytes, 6291456);
  EXPECT_EQ(items[0].formula, "2sbh/t");
  auto checkpoints = [&](const ParallelSpec& q) {
    for (const MemoryItem& i : rank_memory(m, q, 0).items)
      if (i.name == "checkpoint.layer_input") return i.bytes;
    ADD_FAILURE() << "no checkpoint item";
    return Bytes{-1};
  };
  EXPECT_EQ(checkpoints(p), 603979776);
  p.recompute = Recompute::parse("every:4", "test");
  EXPECT_EQ(checkpoints(p), 150994944);
}

}  // namespace
}  // namespace meshsim

namespace meshsim {
namespace {

// torchtitan's per-op selective recomputation (recompute: ops), by hand on a Llama-shaped block:
// s = 4096, b = 1, h = 4096, 32 heads of 128, 8 K/V heads (h_kv = 1024), SwiGLU f = 14336, P = 2.
// Matrix multiplies in forward order wq(1) wk(2) wv(3) wo(4) w1(5) w3(6) w2(7): saved are the
// odd ones' outputs, q (sbh), v (sbh_kv), w1 (sbf) and w2 (sbh), beside the block input (sbh), the
// attention output (sbh) and its fp32 log-sum-exp (4as). tp = 2 with sp halves q, v, w1, the
// attention output, the log-sum-exp and the input, keeps w2's whole width (partial sums) and
// adds the two reduce-scatter outputs (sbh/2 each).
TEST(ActivationTable, OpsRecomputationSavesEveryOtherMatmul) {
  ModelSpec m;
  m.layers = 2;
  m.hidden = 4096;
  m.heads = 32;
  m.kv_heads = 8;
  m.ffn_hidden = 14336;
  m.ffn = FfnKind::SwiGLU;
  m.attention = AttentionKind::Flash;
  m.seq = 4096;
  m.vocab = 32000;
  const double S = 4096, H = 4096, Hkv = 1024, F = 14336, A = 32;
  ParallelSpec p;
  p.recompute.mode = RecomputeMode::Ops;
  const double whole = 2 * S * (H + H + Hkv + F + H + H) + 4 * A * S;
  EXPECT_NEAR(static_cast<double>(layer_activation_bytes(m, p)), whole, 8);
  ParallelSpec tp = p;
  tp.tp = 2;
  tp.sp = true;
  const double split = 2 * S * (H / 2 + H / 2 + Hkv / 2 + F / 2 + H + H / 2 + H / 2 + H / 2) + 4 * A * S / 2;
  EXPECT_NEAR(static_cast<double>(layer_activation_bytes(m, tp)), split, 8);
  // The recomputed share of each GEMM's columns: wk of wq+wk+wv, wo whole, w3 of w1+w3, w2 none.
  const std::vector<OpSacGemm> g = op_sac_gemms(m, p);
  ASSERT_EQ(g.size(), 4u);
  EXPECT_DOUBLE_EQ(g[0].recomputed_fraction, Hkv / (H + 2 * Hkv));
  EXPECT_DOUBLE_EQ(g[1].recomputed_fraction, 1.0);
  EXPECT_DOUBLE_EQ(g[2].recomputed_fraction, 0.5);
  EXPECT_DOUBLE_EQ(g[3].recomputed_fraction, 0.0);
  // Less than keeping everything, more than keeping only the input.
  EXPECT_LT(layer_activation_bytes(m, p), total_bytes(layer_activation_items(m, p, RecomputeMode::None)));
  EXPECT_GT(layer_activation_bytes(m, p), total_bytes(layer_activation_items(m, p, RecomputeMode::Full)));
}

}  // namespace
}  // namespace meshsim
