// The planned schedule against docs/math.md: communication per layer per device (sections
// 5 to 8), FLOPs per iteration (section 4), the pipeline order, and symmetry (one op list
// per stage, whatever the number of ranks).
#include "schedule/plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "core/error.h"
#include "core/test_util.h"
#include "schedule/memory.h"
#include "schedule/test_models.h"

namespace meshsim {
namespace {

ModelSpec gpt(int layers, int h, int heads, int seq, int vocab = 51200) {
  return testing::gpt_model(layers, h, heads, seq, vocab);
}

// Bytes one device moves on `axis` (ring accounting) over ops of `layer` in the phases given.
double moved(const Schedule& s, int stage, int layer, const std::string& axis, std::vector<Phase> phases,
             int microbatch = 0) {
  double total = 0;
  for (const Op& op : s.roles[stage].ops) {
    if (op.kind != OpKind::Collective || op.layer != layer || op.axis.str() != axis || op.microbatch != microbatch)
      continue;
    if (std::find(phases.begin(), phases.end(), op.phase) == phases.end()) continue;
    total += ring_bytes_moved(op.coll, op.bytes, op.group_size);
  }
  return total;
}

// The collectives named `name` in stage 0's plan (on `axis`, when one is given): how many,
// their bytes in all, and the group size of the last.
struct Collectives {
  int count = 0;
  double bytes = 0;
  int group = 0;
};
Collectives collectives(const ModelSpec& m, const ParallelSpec& p, const std::string& name,
                        const std::string& axis = "") {
  Collectives c;
  const Schedule s = plan_iteration(m, p);
  for (const Op& op : s.roles[0].ops)
    if (op.kind == OpKind::Collective && op.name == name && (axis.empty() || op.axis.str() == axis)) {
      ++c.count;
      c.bytes += static_cast<double>(op.bytes);
      c.group = op.group_size;
    }
  return c;
}

// FP8 (stack.fp8, docs/compute.md "FP8"), counted by hand on one GPT layer (h 1024, seq 2048,
// tp 1, micro-batch 1: T = 2048 tokens): the four linear GEMMs (qkv, proj, fc1, fc2) and their
// six backward GEMMs take 1-byte operands, attention's core keeps 2. Delayed scaling casts in
// one 4-byte pass per element where no norm or activation writes the FP8 copies:
//   forward: proj's input (the attention output, T x h) only: 4 x 2048 x 1024 bytes;
//   backward: the output gradients of qkv (T x 3h), proj (T x h) and fc2 (T x h), not fc1's
//   (the activation's backward writes it): 4 x 2048 x 5h bytes;
//   weights, once (micro-batch 0): 4 bytes x (3h^2 + h^2 + 4h^2 + 4h^2) = 4 x 12h^2.
// Current scaling (tensorwise) makes every cast a 6-byte pass, fused or not.
TEST(Plan, Fp8CastsEveryLinearLayerOnceWhereTransformerEngineCannotFuseIt) {
  const ModelSpec m = gpt(1, 1024, 16, 2048);
  ParallelSpec p;
  p.microbatches = 2;
  auto bytes_named = [](const Schedule& s, const std::string& part, Phase ph, int mb) {
    double b = 0;
    for (const Op& op : s.roles[0].ops)
      if (op.kind == OpKind::Compute && op.phase == ph && op.microbatch == mb &&
          op.name.find(part) != std::string::npos)
        b += op.kernel.bytes;
    return b;
  };
  const double T = 2048, h = 1024;
  p.stack.fp8 = Fp8Recipe::Delayed;
  const Schedule s = plan_iteration(m, p);
  EXPECT_DOUBLE_EQ(bytes_named(s, "fp8_cast", Phase::Forward, 0), 4 * T * h);
  EXPECT_DOUBLE_EQ(bytes_named(s, "fp8_cast", Phase::Backward, 0), 4 * T * 5 * h);
  EXPECT_DOUBLE_EQ(bytes_named(s, "fp8.weight_cast", Phase::Forward, 0), 4 * 12 * h * h);
  EXPECT_DOUBLE_EQ(bytes_named(s, "fp8.weight_cast", Phase::Forward, 1), 0);  // kept for the iteration
  int fp8_gemms = 0, core_gemms = 0;
  for (const Op& op : s.roles[0].ops)
    if (op.kind == OpKind::Compute && op.kernel.kind == KernelKind::Gemm && op.layer == 0 && op.microbatch == 0) {
      if (op.kernel.dtype_bytes == 1) ++fp8_gemms;
      if (op.name.rfind("attn.scores", 0) == 0 || op.name.rfind("attn.sv", 0) == 0) {
        ++core_gemms;
        EXPECT_EQ(op.kernel.dtype_bytes, 2) << op.name;
      }
    }
  EXPECT_EQ(fp8_gemms, 4 * 3);  // forward, dgrad, wgrad of each linear layer
  EXPECT_GT(core_gemms, 0);
  p.stack.fp8 = Fp8Recipe::Tensorwise;
  const Schedule cur = plan_iteration(m, p);
  // inputs of qkv, proj, fc1, fc2: h + h + h + 4h; output gradients: 3h + h + 4h + h
  EXPECT_DOUBLE_EQ(bytes_named(cur, "fp8_cast", Phase::Forward, 0), 6 * T * 7 * h);
  EXPECT_DOUBLE_EQ(bytes_named(cur, "fp8_cast", Phase::Backward, 0), 6 * T * 9 * h);
}

// Specs built by hand (not a resolved scenario, whose model the resolver checked) are checked
// model first by the planners that take them: 7 heads do not split a hidden of 4096, and that
// is what the error names, before any layout field.
TEST(Plan, HandBuiltSpecsHaveTheirModelChecked) {
  ModelSpec m = gpt(4, 4096, 32, 2048);
  m.heads = 7;
  ParallelSpec p;
  p.tp = 2;  // does not divide 7 heads either: the model is named first
  for (const bool unit : {false, true}) {
    try {
      if (unit)
        UnitPlanner planner(m, p);
      else
        (void)plan_iteration(m, p);
      ADD_FAILURE() << "a model of 7 heads over a hidden of 4096 was planned";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("model.heads:", 0), 0u) << e.what();
    }
  }
}

TEST(Plan, TensorParallelMovesFourBshPerLayerEachWay) {
  // docs/math.md section 5: forward 4(t-1)/t bsh, backward the same without recomputation.
  const ModelSpec m = gpt(4, 1024, 16, 512);
  for (int t : {2, 4, 8}) {
    ParallelSpec p;
    p.tp = t;
    p.micro_batch_size = 2;
    const Schedule s = plan_iteration(m, p);
    const double bsh_bytes = 2.0 * 512 * 1024 * 2;  // b s h P
    const double want = 4.0 * (t - 1) / t * bsh_bytes;
    EXPECT_DOUBLE_EQ(moved(s, 0, 1, "tp", {Phase::Forward}), want) << "t=" << t;
    EXPECT_DOUBLE_EQ(moved(s, 0, 1, "tp", {Phase::Backward, Phase::Recompute}), want) << "t=" << t;
  }
}

TEST(Plan, FullRecomputationDoublesTheBackwardTensorParallelBytes) {
  const ModelSpec m = gpt(4, 1024, 16, 512);
  ParallelSpec p;
  p.tp = 4;
  p.recompute = Recompute::parse("full", "test");
  const Schedule s = plan_iteration(m, p);
  const double bsh_bytes = 1.0 * 512 * 1024 * 2;
  EXPECT_DOUBLE_EQ(moved(s, 0, 2, "tp", {Phase::Forward}), 4.0 * 3 / 4 * bsh_bytes);
  EXPECT_DOUBLE_EQ(moved(s, 0, 2, "tp", {Phase::Backward, Phase::Recompute}), 8.0 * 3 / 4 * bsh_bytes);
}

TEST(Plan, SequenceParallelMovesTheSameBytesAsTensorParallel) {
  const ModelSpec m = gpt(2, 2048, 16, 1024);
  ParallelSpec tp, sp;
  tp.tp = sp.tp = 8;
  sp.sp = true;
  const Schedule a = plan_iteration(m, tp), b = plan_iteration(m, sp);
  EXPECT_DOUBLE_EQ(moved(a, 0, 0, "tp", {Phase::Forward}), moved(b, 0, 0, "tp", {Phase::Forward}));
  // Backward: the same, plus Megatron's re-gather of the two column-parallel GEMMs' inputs
  // for their weight gradients (SP stores only the 1/t shard): 2 x (t-1)/t bsh more.
  const double bsh_bytes = 1.0 * 1024 * 2048 * 2;
  EXPECT_DOUBLE_EQ(moved(b, 0, 0, "tp", {Phase::Backward}),
                   moved(a, 0, 0, "tp", {Phase::Backward}) + 2 * 7.0 / 8 * bsh_bytes);
  // ... as all-gathers and reduce-scatters instead of all-reduces.
  int ag = 0, rs = 0, ar = 0;
  for (const Op& op : b.roles[0].ops)
    if (op.kind == OpKind::Collective && op.layer == 0 && op.microbatch == 0) {
      ag += op.coll == CollKind::AllGather;
      rs += op.coll == CollKind::ReduceScatter;
      ar += op.coll == CollKind::AllReduce;
    }
  EXPECT_EQ(ag, 6);
  EXPECT_EQ(rs, 4);
  EXPECT_EQ(ar, 0);
}

// Index of layer 1's backward op called `name` in `ops`, or -1.
int backward_op_of_layer1(const std::vector<Op>& ops, const std::string& name) {
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].name == name && ops[i].layer == 1 && ops[i].phase == Phase::Backward) return static_cast<int>(i);
  return -1;
}

// Megatron's asynchronous tensor-parallel backward: the input-gradient collective of a
// column-parallel GEMM (qkv, fc1) is issued after its dgrad and runs while its wgrad
// computes; the next compute op (the LayerNorm's backward) waits for it.
TEST(Plan, ColumnParallelGradientCollectiveOverlapsTheWeightGradient) {
  const ModelSpec m = gpt(2, 1024, 16, 512);
  ParallelSpec p;
  p.tp = 4;
  const Schedule s = plan_iteration(m, p);
  const auto& ops = s.roles[0].ops;
  auto find = [&](const std::string& name) { return backward_op_of_layer1(ops, name); };
  const int dgrad = find("mlp.fc1.dgrad"), ar = find("tp.f.mlp"), wgrad = find("mlp.fc1.wgrad"), ln = find("ln2.bwd");
  ASSERT_GE(dgrad, 0);
  ASSERT_GE(ar, 0);
  EXPECT_LT(dgrad, ar);
  EXPECT_LT(ar, wgrad);
  const auto& wd = ops[static_cast<std::size_t>(wgrad)].deps;
  EXPECT_EQ(std::count(wd.begin(), wd.end(), ar), 0) << "the weight gradient does not wait for the all-reduce";
  const auto& ld = ops[static_cast<std::size_t>(ln)].deps;
  EXPECT_EQ(std::count(ld.begin(), ld.end(), ar), 1) << "the LayerNorm backward waits for it";
}

// Under sp the LayerNorm and row-parallel-bias gradients are all-reduced over tp once per
// iteration, after the DP reduction: (4h + 2h) per layer in fp32. h = 1024, 2 layers on the
// one stage: 6 * 1024 * 2 * 4 = 49152 bytes. Without sp there is no such collective.
TEST(Plan, SequenceParallelAllReducesNormAndBiasGradientsOverTp) {
  const ModelSpec m = gpt(2, 1024, 16, 512);
  ParallelSpec p;
  p.tp = 4;
  for (bool sp : {true, false}) {
    p.sp = sp;
    const Schedule s = plan_iteration(m, p);
    int found = 0;
    for (const Op& op : s.roles[0].ops) {
      if (op.name != "tp.allreduce.sp_grads") continue;
      ++found;
      EXPECT_EQ(op.coll, CollKind::AllReduce);
      EXPECT_EQ(op.axis.str(), "tp");
      EXPECT_EQ(op.bytes, 49152);
    }
    EXPECT_EQ(found, sp ? 1 : 0);
  }
}

// tp_overlap = false: the synchronous backward. The all-reduce comes after both GEMMs and
// the weight gradient no longer runs beside it; the order is dgrad, wgrad, all-reduce.
TEST(Plan, SynchronousTpBackwardRunsTheGradientCollectiveAfterTheGemms) {
  const ModelSpec m = gpt(2, 1024, 16, 512);
  ParallelSpec p;
  p.tp = 4;
  p.tp_overlap = false;
  const Schedule s = plan_iteration(m, p);
  const auto& ops = s.roles[0].ops;
  auto find = [&](const std::string& name) { return backward_op_of_layer1(ops, name); };
  const int dgrad = find("mlp.fc1.dgrad"), ar = find("tp.f.mlp"), wgrad = find("mlp.fc1.wgrad");
  ASSERT_GE(dgrad, 0);
  ASSERT_GE(ar, 0);
  ASSERT_GE(wgrad, 0);
  EXPECT_LT(dgrad, wgrad);
  EXPECT_LT(wgrad, ar);
}

// Pipeline scatter/gather without SP: each tp rank sends b s h P / t, the receiver
// all-gathers b s h P over tp. b = 2, s = 512, h = 1024, P = 2, t = 4.
TEST(Plan, PipelineScatterGatherSendsOneTpShardAndGathersIt) {
  const ModelSpec m = gpt(4, 1024, 16, 512);
  ParallelSpec p;
  p.tp = 4;
  p.pp = 2;
  p.microbatches = 2;
  p.micro_batch_size = 2;
  const double full = 2.0 * 512 * 1024 * 2;
  for (bool sg : {true, false}) {
    p.pp_scatter_gather = sg;
    const Schedule s = plan_iteration(m, p);
    int gathers = 0;
    for (const Op& op : s.roles[1].ops) {
      if (op.kind == OpKind::Recv) {
        EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes), sg ? full / 4 : full);
      }
      if (op.name == "pp.gather.activation") {
        ++gathers;
        EXPECT_EQ(op.coll, CollKind::AllGather);
        EXPECT_DOUBLE_EQ(static_cast<double>(op.bytes), full);
      }
    }
    EXPECT_EQ(gathers, sg ? 2 : 0) << "one per received micro-batch";
  }
}

// docs/math.md section 6: elements moved per device per layer, broadcasts and reduces counted
// as log2(q) x size (the paper's model): forward log2(p)/(2 sqrt p) (7bsh + 12h^2),
// backward with checkpointing log2(p)/(2 sqrt p) (21bsh + 36h^2).
TEST(Plan, SummaMovesThePapersElementsPerLayer) {
  for (int q : {2, 4}) {
    const int h = 1024, seq = 256, b = 4;
    const ModelSpec m = gpt(2, h, 16, seq);
    ParallelSpec p;
    p.mesh2d = q;
    p.micro_batch_size = b;
    p.recompute = Recompute::parse("full", "test");
    const Schedule s = plan_iteration(m, p);
    double fwd = 0, bwd = 0;
    for (const Op& op : s.roles[0].ops) {
      if (op.kind != OpKind::Collective || op.layer != 0 || op.microbatch != 0) continue;
      if (op.name.find("bias") != std::string::npos || op.name.find(".ln") != std::string::npos) continue;
      const double elems = std::log2(q) * static_cast<double>(op.bytes) / 2;
      (op.phase == Phase::Forward ? fwd : bwd) += elems;
    }
    const double pdev = q * q, bsh = 1.0 * b * seq * h, h2 = 1.0 * h * h;
    EXPECT_NEAR(fwd, std::log2(pdev) / (2 * std::sqrt(pdev)) * (7 * bsh + 12 * h2), 1e-6) << "q=" << q;
    EXPECT_NEAR(bwd, std::log2(pdev) / (2 * std::sqrt(pdev)) * (21 * bsh + 36 * h2), 1e-6) << "q=" << q;
  }
}

// docs/math.md section 8: per layer, pure EP moves 4BSkh bytes (dispatch + combine, bf16),
// pure TP 4BSh (two all-reduces of BSh elements).
TEST(Plan, ExpertParallelVersusTensorParallelBytes) {
  ModelSpec m = gpt(2, 1024, 16, 512);
  m.experts = 8;
  m.top_k = 2;
  const double B = 1, S = 512, h = 1024, k = 2;
  ParallelSpec ep;
  ep.dp = 4;
  ep.ep = 4;
  const Schedule se = plan_iteration(m, ep);
  double a2a = 0;
  for (const Op& op : se.roles[0].ops)
    if (op.kind == OpKind::Collective && op.layer == 0 && op.microbatch == 0 && op.phase == Phase::Forward &&
        op.coll == CollKind::AllToAll)
      a2a += static_cast<double>(op.bytes);
  EXPECT_DOUBLE_EQ(a2a, 4 * B * S * k * h);

  ParallelSpec tp;
  tp.tp = 4;
  const Schedule st = plan_iteration(m, tp);
  double ar = 0;
  for (const Op& op : st.roles[0].ops)
    if (op.kind == OpKind::Collective && op.layer == 0 && op.microbatch == 0 && op.phase == Phase::Forward &&
        op.axis.str() == "tp")
      ar += static_cast<double>(op.bytes);
  EXPECT_DOUBLE_EQ(ar, 4 * B * S * h);
}

// TE's userbuffers pipeline the tp collectives of the attention's and the dense MLP's linear
// layers with their GEMMs, not the MoE dispatcher's gather and scatter of the routed tokens over
// tp (etp = tp = 2, one expert a rank so no sort sits between them and the expert GEMMs): those
// stay whole NCCL collectives, and moe.fc1/fc2 one GEMM each, forward and backward.
TEST(Plan, UserbuffersPipelineDenseLinearLayersNotTheExpertGathers) {
  ModelSpec m = gpt(2, 1024, 16, 512);
  m.experts = 4;
  m.top_k = 2;
  ParallelSpec p;
  p.tp = 2;
  p.sp = true;
  p.dp = 4;
  p.ep = 4;
  p.stack = training_stack("megatron-te");
  const Schedule s = plan_iteration(m, p);
  std::map<std::string, int> parts;
  for (const Op& op : s.roles[0].ops) {
    if (op.layer != 0 || op.microbatch != 0) continue;
    ++parts[op.name + (op.phase == Phase::Backward ? ".bwd_phase" : "")];
    if (op.name == "tp.gather.experts" || op.name == "tp.scatter.experts") EXPECT_FALSE(op.holds_no_sms) << op.name;
  }
  EXPECT_EQ(parts["attn.qkv"], 2);  // pipelined: a ring-exchange all-gather under its rows
  EXPECT_EQ(parts["moe.fc1"], 1);
  EXPECT_EQ(parts["moe.fc2"], 1);
  EXPECT_EQ(parts["moe.fc2.dgrad.bwd_phase"], 1);
  EXPECT_EQ(parts["tp.gather.experts"], 1);
  EXPECT_EQ(parts["tp.scatter.experts"], 1);
}

// Megatron-core's token permutation around the experts (docs/math.md section 8), by hand on 8
// experts, top-2, b 1, s 512, h 1024, bf16 (P = 2):
// - ep 4 over dp 4: 2 experts a rank, so the received tokens are sorted by local expert after
//   the dispatch and back before the combine. moe.permute reads 512 x h and writes 2 x 512 x h;
//   moe.sort_chunks and moe.unsort_chunks read and write the 2 x 512 x h received rows;
//   moe.unpermute reads the 1024 rows back and writes 512. The backward of each moves the
//   same, but unpermute's also reads the experts' rows again (the probabilities' gradient).
// - ep 1, tp 1 (every expert here): permute and unpermute only, on the same bytes.
// - ep 8 (one expert a rank): nothing to sort.
TEST(Plan, ExpertTokensArePermutedAroundTheExperts) {
  ModelSpec m = gpt(2, 1024, 16, 512);
  m.experts = 8;
  m.top_k = 2;
  const double T = 512, h = 1024, k = 2, P = 2;
  auto layer0 = [&](const ParallelSpec& p) {
    std::map<std::string, double> fwd, bwd;
    std::vector<std::string> order;
    const Schedule s = plan_iteration(m, p);
    for (const Op& op : s.roles[0].ops)
      if (op.layer == 0 && op.microbatch == 0) {
        if (op.phase == Phase::Forward) order.push_back(op.name);
        if (op.kind == OpKind::Compute) (op.phase == Phase::Backward ? bwd : fwd)[op.name] = op.kernel.bytes;
      }
    return std::tuple{fwd, bwd, order};
  };
  ParallelSpec ep;
  ep.dp = 4;
  ep.ep = 4;
  const auto [fwd, bwd, order] = layer0(ep);
  EXPECT_DOUBLE_EQ(fwd.at("moe.permute"), P * (T * h + T * k * h));
  EXPECT_DOUBLE_EQ(bwd.at("moe.permute.bwd"), P * (T * h + T * k * h));
  EXPECT_DOUBLE_EQ(fwd.at("moe.sort_chunks"), 2 * P * T * k * h);
  EXPECT_DOUBLE_EQ(fwd.at("moe.unsort_chunks"), 2 * P * T * k * h);
  EXPECT_DOUBLE_EQ(bwd.at("moe.unsort_chunks.bwd"), 2 * P * T * k * h);
  EXPECT_DOUBLE_EQ(fwd.at("moe.unpermute"), P * (T * k * h + T * h));
  EXPECT_DOUBLE_EQ(bwd.at("moe.unpermute.bwd"), P * (2 * T * k * h + T * h));
  const auto at = [&](const std::string& name) { return std::find(order.begin(), order.end(), name) - order.begin(); };
  EXPECT_LT(at("moe.permute"), at("ep.dispatch"));
  EXPECT_LT(at("ep.dispatch"), at("moe.sort_chunks"));
  EXPECT_LT(at("moe.sort_chunks"), at("moe.fc1"));
  EXPECT_LT(at("moe.fc2"), at("moe.unsort_chunks"));
  EXPECT_LT(at("moe.unsort_chunks"), at("ep.combine"));
  EXPECT_LT(at("ep.combine"), at("moe.unpermute"));

  const auto [rfwd, rbwd, rorder] = layer0(ParallelSpec{});
  EXPECT_DOUBLE_EQ(rfwd.at("moe.permute"), P * (T * h + T * k * h));
  EXPECT_DOUBLE_EQ(rfwd.at("moe.unpermute"), P * (T * k * h + T * h));
  EXPECT_EQ(rfwd.count("moe.sort_chunks"), 0u);

  ep.dp = 8;
  ep.ep = 8;
  EXPECT_EQ(std::get<0>(layer0(ep)).count("moe.sort_chunks"), 0u);
}

// Expert tensor parallel (docs/math.md section 8), by hand on 8 experts, top-2, b 1, s 512,
// h 1024, dp 4 x tp 2 with sp:
// - etp = tp = 2 (the default) with ep 2 out of dp: each rank dispatches its s/t = 256 tokens
//   over "ep" (groups of 2), then all-gathers the routed tokens over tp: 2 x 256 x 2 x h x 2
//   bytes of output; the experts run t x the rows on 1/t of the columns; expert gradients
//   reduce over edp = d/e = 2 ranks.
// - etp = 1 with ep 4: the ep groups span tp 2 x 2 dp ranks (axis "ep+tp"), the same dispatch
//   bytes, no gather; experts whole on 256 x 2 rows, the same FLOPs; expert gradients reduce
//   over edp = d t / e = 2 ranks (axis "edp"); dense ones over all 4 dp ranks either way.
TEST(Plan, ExpertTensorParallelSplitsOrSpansTp) {
  ModelSpec m = gpt(2, 1024, 16, 512);
  m.experts = 8;
  m.top_k = 2;
  const double S = 512, h = 1024, k = 2, P = 2;
  ParallelSpec p;
  p.dp = 4;
  p.tp = 2;
  p.sp = true;
  p.ep = 2;
  auto forward = [&](const std::string& name) {
    const Schedule s = plan_iteration(m, p);
    for (const Op& op : s.roles[0].ops)
      if (op.layer == 0 && op.microbatch == 0 && op.phase == Phase::Forward && op.name == name) return op;
    return Op{};
  };
  const Op dispatch = forward("ep.dispatch");
  EXPECT_EQ(dispatch.axis.str(), "ep");
  EXPECT_EQ(dispatch.group_size, 2);
  EXPECT_DOUBLE_EQ(static_cast<double>(dispatch.bytes), S / 2 * k * h * P);
  const Op gather = forward("tp.gather.experts");
  EXPECT_EQ(gather.coll, CollKind::AllGather);
  EXPECT_EQ(gather.axis.str(), "tp");
  EXPECT_EQ(gather.group_size, 2);
  EXPECT_DOUBLE_EQ(static_cast<double>(gather.bytes), 2 * (S / 2) * k * h * P);
  EXPECT_EQ(forward("tp.scatter.experts").coll, CollKind::ReduceScatter);
  const double fc1_flops = forward("moe.fc1").kernel.flops;
  EXPECT_DOUBLE_EQ(fc1_flops, 2 * (2 * S / 2 * k) * (1024.0 * 4 / 2) * h);  // t x rows, 1/t of ffn 4h
  const std::string grads = "dp.allreduce.grads";
  EXPECT_EQ(collectives(m, p, grads, "edp").group, 2);
  EXPECT_EQ(collectives(m, p, grads, "edp+ep").group, 4);

  p.etp = 1;
  p.ep = 4;
  const Op spanning = forward("ep.dispatch");
  EXPECT_EQ(spanning.axis.str(), "ep+tp");
  EXPECT_EQ(spanning.group_size, 4);
  EXPECT_DOUBLE_EQ(static_cast<double>(spanning.bytes), S / 2 * k * h * P);
  EXPECT_EQ(forward("tp.gather.experts").name, "");
  EXPECT_DOUBLE_EQ(forward("moe.fc1").kernel.flops, fc1_flops);
  EXPECT_EQ(collectives(m, p, grads, "edp").group, 2);
  EXPECT_EQ(collectives(m, p, grads, "edp+ep").group, 4);
  const std::vector<std::pair<std::string, int>> axes = {{"edp", 2}, {"ep", 2}, {"pp", 1}, {"cp", 1}, {"tp", 2}};
  EXPECT_EQ(mesh_axes(p), axes);
}

// Multi-head latent attention (docs/math.md section 4.2) by hand: h 1024, 8 heads, latents
// r_q 256 and r_kv 128, query/key heads 64 + 32, value heads 64; b 1, s 512, tp 2 with sp.
// The down projections run on the rank's 256 tokens, the latents (256 + 128 + 32 wide) are
// all-gathered over tp instead of the activation, the up projections cover 4 heads, and the
// attention runs at head width (96 + 64) / 2 = 80 (its FLOPs 2 s^2 H/t (d_qk + d_v) / 2 with
// the causal half). The down projections' weight gradients join the LayerNorms' tp all-reduce:
// (4h + h (r_q + r_kv + d_r) + r_q + r_kv) x 2 layers x 4 bytes.
TEST(Plan, LatentAttentionGathersTheLatentsNotTheActivation) {
  ModelSpec m = gpt(2, 1024, 8, 512);
  m.attention = AttentionKind::Flash;
  m.bias = false;
  m.q_lora_rank = 256;
  m.kv_lora_rank = 128;
  m.qk_nope_head_dim = 64;
  m.qk_rope_head_dim = 32;
  m.v_head_dim = 64;
  validate_model(m, "model");
  ParallelSpec p;
  p.tp = 2;
  p.sp = true;
  std::map<std::string, Op> fwd;
  int sp_grads = 0;
  const Schedule s = plan_iteration(m, p);
  for (const Op& op : s.roles[0].ops) {
    if (op.layer == 0 && op.microbatch == 0 && op.phase == Phase::Forward) fwd[op.name] = op;
    if (op.name == "tp.allreduce.sp_grads") {
      ++sp_grads;
      EXPECT_EQ(op.bytes, static_cast<Bytes>((4 * 1024 + 1024 * 416 + 384) * 2 * 4));
    }
  }
  EXPECT_EQ(sp_grads, 1);
  EXPECT_EQ(fwd.count("tp.g.attn"), 0U);
  EXPECT_EQ(fwd.at("tp.g.attn_latents").bytes, static_cast<Bytes>(512 * 416 * 2));
  EXPECT_DOUBLE_EQ(fwd.at("attn.q_down").kernel.flops, 2.0 * 256 * 256 * 1024);
  EXPECT_DOUBLE_EQ(fwd.at("attn.kv_down").kernel.flops, 2.0 * 256 * (128 + 32) * 1024);
  EXPECT_DOUBLE_EQ(fwd.at("attn.q_up").kernel.flops, 2.0 * 512 * (4 * 96) * 256);
  EXPECT_DOUBLE_EQ(fwd.at("attn.kv_up").kernel.flops, 2.0 * 512 * (4 * 128) * 128);
  EXPECT_DOUBLE_EQ(fwd.at("attn.flash").kernel.flops, 2.0 * 512 * 512 * 4 * (96 + 64) / 2);
  EXPECT_DOUBLE_EQ(fwd.at("attn.proj").kernel.flops, 2.0 * 512 * 1024 * (4 * 64));
}

// docs/math.md section 7: each cp rank passes its K/V block c-1 times per layer forward; the
// backward passes K, V with dK, dV c-1 times and returns dK, dV home once more.
TEST(Plan, RingAttentionPassesKvBlocksAroundTheRing) {
  ModelSpec m = gpt(2, 1024, 16, 4096);
  m.kv_heads = 4;  // GQA: H_kv = 256
  m.attention = AttentionKind::Flash;
  for (int c : {2, 4}) {
    ParallelSpec p;
    p.cp = c;
    const Schedule s = plan_iteration(m, p);
    double bytes = 0, backward_bytes = 0;
    int merges = 0;
    for (const Op& op : s.roles[0].ops) {
      if (op.layer != 0 || op.microbatch != 0) continue;
      const bool cp = op.kind == OpKind::Collective && op.axis.str() == "cp";
      if (cp && op.phase == Phase::Backward) backward_bytes += static_cast<double>(op.bytes);
      if (op.phase != Phase::Forward) continue;
      if (cp) bytes += static_cast<double>(op.bytes);
      merges += op.name == "attn.lse_merge";
    }
    const double block = 2.0 * (4096.0 / c) * 256 * 2;  // K and V of s/c tokens, H_kv = 256, bf16
    EXPECT_DOUBLE_EQ(bytes, (c - 1) * block) << "c=" << c;
    EXPECT_EQ(merges, c - 1);
    // Backward: K, V with dK, dV c-1 times, then dK, dV home: c-1 double blocks + 1 block.
    EXPECT_DOUBLE_EQ(backward_bytes, (c - 1) * 2 * block + block) << "c=" << c;
  }
}

// The real backends run each compute op on the shape it names: hand-worked for a TP=2 GPT
// layer (b=2, s=512, h=1024, 16 heads of 64, ffn 4096) with plain and flash attention.
TEST(Plan, RowKernelsAndAttentionCarryTheShapeTheyRunOn) {
  for (AttentionKind kind : {AttentionKind::Plain, AttentionKind::Flash}) {
    ModelSpec m = gpt(2, 1024, 16, 512);
    m.attention = kind;
    ParallelSpec p;
    p.tp = 2;
    p.micro_batch_size = 2;
    const Schedule s = plan_iteration(m, p);
    std::map<std::string, Kernel> fwd, bwd;
    for (const Op& op : s.roles[0].ops)
      if (op.kind == OpKind::Compute && op.layer == 1 && op.microbatch == 0)
        (op.phase == Phase::Backward ? bwd : fwd)[op.name] = op.kernel;
    auto row = [](const Kernel& k, KernelFn fn, std::int64_t rows, std::int64_t cols) {
      EXPECT_EQ(k.fn, fn) << to_string(k.fn);
      EXPECT_EQ(k.m, rows);
      EXPECT_EQ(k.n, cols);
    };
    row(fwd.at("ln1"), KernelFn::LayerNorm, 1024, 1024);  // b*s tokens x h
    row(bwd.at("ln1.bwd"), KernelFn::LayerNorm, 1024, 1024);
    row(fwd.at("mlp.gelu"), KernelFn::Gelu, 1024, 2048);  // ffn / t columns
    row(fwd.at("attn.dropout_residual"), KernelFn::DropoutAdd, 1024, 1024);
    if (kind == AttentionKind::Flash) {
      const Kernel& a = fwd.at("attn.flash");
      EXPECT_EQ(a.kind, KernelKind::Attention);
      EXPECT_EQ(a.batch, 2 * 8);  // b x heads / t
      EXPECT_EQ(a.m, 512);
      EXPECT_EQ(a.n, 512);
      EXPECT_EQ(a.k, 64);
      EXPECT_TRUE(a.causal);
      EXPECT_DOUBLE_EQ(a.flops, 4.0 * 16 * 512 * 512 * 64 / 2);
      EXPECT_EQ(bwd.at("attn.flash.bwd").batch, 16);
    } else {
      row(fwd.at("attn.softmax"), KernelFn::Softmax, 2 * 8 * 512, 512);  // score rows x keys
      row(fwd.at("attn.dropout"), KernelFn::Dropout, 2 * 8 * 512, 512);
    }
  }
  // Vocabulary-parallel cross-entropy: tokens x V/t.
  const Schedule s = plan_iteration(gpt(2, 1024, 16, 512, 50000), [] {
    ParallelSpec p;
    p.tp = 2;
    return p;
  }());
  for (const Op& op : s.roles[0].ops)
    if (op.name == "cross_entropy") {
      EXPECT_EQ(op.kernel.fn, KernelFn::CrossEntropy);
      EXPECT_EQ(op.kernel.m, 512);
      EXPECT_EQ(op.kernel.n, 25000);
    }
}

// Llama-family layers (model.norm rmsnorm, model.position rope), by hand on a small GQA model:
// h 1024, 16 heads of 64, 4 KV heads, seq 512, micro-batch 2, tp 2, bf16: T = 1024 tokens a
// rank, 8 query and 2 key heads of it a token. RoPE turns 1024 x (8 + 2) rows of 64 once
// forward and once backward (2 bytes read + 2 written an element each way), after the QKV
// GEMM; selective recomputation does not redo it; norms are RMSNorm. A GPT layer has neither.
TEST(Plan, LlamaLayersRunRmsNormAndRopeOnTheirQueryAndKeyHeads) {
  ModelSpec m = gpt(2, 1024, 16, 512);
  m.kv_heads = 4;
  m.attention = AttentionKind::Flash;
  m.norm = NormKind::RmsNorm;
  m.position = PositionKind::Rope;
  ParallelSpec p;
  p.tp = 2;
  p.micro_batch_size = 2;
  p.recompute.mode = RecomputeMode::Selective;
  const Schedule s = plan_iteration(m, p);
  std::vector<std::string> fwd_order;
  std::map<std::string, Kernel> fwd, bwd;
  int recomputed_rope = 0;
  for (const Op& op : s.roles[0].ops) {
    if (op.kind != OpKind::Compute || op.layer != 1 || op.microbatch != 0) continue;
    if (op.phase == Phase::Forward) fwd_order.push_back(op.name);
    if (op.phase == Phase::Recompute && op.name.starts_with("attn.rope")) ++recomputed_rope;
    (op.phase == Phase::Backward ? bwd : fwd)[op.name] = op.kernel;
  }
  const Kernel& r = fwd.at("attn.rope");
  EXPECT_EQ(r.kind, KernelKind::Elementwise);
  EXPECT_EQ(r.fn, KernelFn::Rope);
  EXPECT_EQ(r.m, 1024 * 10);
  EXPECT_EQ(r.n, 64);
  EXPECT_EQ(r.k, 10);
  EXPECT_DOUBLE_EQ(r.bytes, 4.0 * 1024 * 10 * 64);
  EXPECT_DOUBLE_EQ(bwd.at("attn.rope.bwd").bytes, 4.0 * 1024 * 10 * 64);
  EXPECT_EQ(recomputed_rope, 0);
  const auto at = [&](const std::string& name) {
    return std::find(fwd_order.begin(), fwd_order.end(), name) - fwd_order.begin();
  };
  EXPECT_EQ(at("attn.rope"), at("attn.qkv") + 1);
  EXPECT_LT(at("attn.rope"), at("attn.flash"));
  EXPECT_EQ(fwd.at("ln1").fn, KernelFn::RmsNorm);
  EXPECT_EQ(bwd.at("ln2.bwd").fn, KernelFn::RmsNorm);
  EXPECT_DOUBLE_EQ(fwd.at("ln1").bytes, 2.0 * 2 * 1024 * 1024);  // read x, write y: as LayerNorm
  const Schedule gpt_layers = plan_iteration(gpt(2, 1024, 16, 512), p);
  for (const Op& op : gpt_layers.roles[0].ops) {
    EXPECT_NE(op.kernel.fn, KernelFn::Rope) << op.name;
    EXPECT_NE(op.kernel.fn, KernelFn::RmsNorm) << op.name;
  }
}

// Megatron's mixed-precision optimizer over N = the parameters this rank updates (all of
// them, or 1/dp under ZeRO-1) and H = those it holds: grad norm 4N bytes, AdamW 28N bytes
// and 12N FLOPs, fp32 -> bf16 copy (4 + 2)N bytes, zeroing the fp32 gradients 4H bytes.
TEST(Plan, OptimizerIsMegatronsMixedPrecisionStep) {
  const ModelSpec m = gpt(2, 1024, 16, 512);
  for (int zero : {0, 1}) {
    ParallelSpec p;
    p.dp = 4;
    p.zero = zero;
    const Schedule s = plan_iteration(m, p);
    const double held = m.total_params();
    const double want = zero == 0 ? held : held / 4;
    std::map<std::string, const Op*> by;
    for (const Op& op : s.roles[0].ops)
      if (op.kind == OpKind::Compute && op.phase == Phase::Optimizer) by[op.name] = &op;
    ASSERT_EQ(by.size(), 4u) << "zero " << zero;
    const Op& adam = *by.at("optimizer.adam");
    EXPECT_EQ(adam.kernel.kind, KernelKind::Optimizer);
    EXPECT_EQ(adam.kernel.fn, KernelFn::AdamW);
    EXPECT_EQ(adam.kernel.m, 1);
    EXPECT_EQ(adam.kernel.n, static_cast<std::int64_t>(std::ceil(want))) << "zero " << zero;
    EXPECT_DOUBLE_EQ(adam.kernel.bytes, 28 * want);
    EXPECT_DOUBLE_EQ(adam.kernel.flops, 12 * want);
    EXPECT_DOUBLE_EQ(by.at("optimizer.grad_norm")->kernel.bytes, 4 * want);
    EXPECT_DOUBLE_EQ(by.at("optimizer.copy_params")->kernel.bytes, 6 * want);
    EXPECT_DOUBLE_EQ(by.at("optimizer.zero_grads")->kernel.bytes, 4 * held);
  }
}

// PyTorch's optimizer step (TrainingStack::optimizer), per element N of the rank's shard under
// ZeRO-3 (FSDP): the norm 4N, clip_grad_norm_'s scaling always 8N, AdamW fused 28N or as
// Composer's loop of eight ops 80N (8 + 12 + 8 + 12 + 8 + 8 + 8 + 16), the cast 6N, and no
// zeroing (zero_grad(set_to_none)); the stacks' defaults pick the loop for pytorch-fsdp and the
// fused kernel for pytorch-fsdp2.
TEST(Plan, OptimizerAsPytorchStacksRunIt) {
  const ModelSpec m = gpt(2, 1024, 16, 512);
  for (const char* name : {"pytorch-fsdp", "pytorch-fsdp2"}) {
    ParallelSpec p;
    p.dp = 4;
    p.zero = 3;
    p.stack = training_stack(name);
    const bool loop = std::string(name) == "pytorch-fsdp";
    EXPECT_EQ(p.stack.optimizer, loop ? OptimizerImpl::TorchLoop : OptimizerImpl::TorchFused);
    const Schedule s = plan_iteration(m, p);
    std::map<std::string, const Op*> by;
    for (const Op& op : s.roles[0].ops)
      if (op.kind == OpKind::Compute && op.phase == Phase::Optimizer) by[op.name] = &op;
    ASSERT_EQ(by.size(), 4u) << name;
    EXPECT_FALSE(by.count("optimizer.zero_grads")) << name;
    const double want = by.at("optimizer.grad_norm")->kernel.bytes / 4;  // the rank's shard
    EXPECT_GT(want, 0);
    EXPECT_LT(want, m.total_params() / 3);  // a quarter of the parameters, plus padding at most
    EXPECT_DOUBLE_EQ(by.at("optimizer.clip")->kernel.bytes, 8 * want) << name;
    EXPECT_DOUBLE_EQ(by.at("optimizer.adam")->kernel.bytes, (loop ? 80 : 28) * want) << name;
    EXPECT_EQ(by.at("optimizer.adam")->kernel.fn, loop ? KernelFn::Pass : KernelFn::AdamW) << name;
    EXPECT_DOUBLE_EQ(by.at("optimizer.copy_params")->kernel.bytes, 6 * want) << name;
  }
  // Megatron's stays as it was; any stack takes another step by name.
  ParallelSpec p;
  p.stack = training_stack("megatron-te");
  EXPECT_EQ(p.stack.optimizer, OptimizerImpl::Megatron);
  EXPECT_EQ(parse_optimizer_impl("torch-fused", "stack.optimizer"), OptimizerImpl::TorchFused);
  EXPECT_NE(
      testing_util::error_of([] { parse_optimizer_impl("adam", "stack.optimizer"); }).find("stack.optimizer: 'adam'"),
      std::string::npos);
}

TEST(Plan, SummaLayerNormIsTheTwoDSplitOfItsBlock) {
  ParallelSpec p;
  p.mesh2d = 2;
  p.micro_batch_size = 4;
  const Schedule s = plan_iteration(gpt(2, 1024, 16, 512), p);
  int seen = 0;
  for (const Op& op : s.roles[0].ops)
    if (op.kind == OpKind::Compute && op.kernel.kind == KernelKind::Norm) {
      EXPECT_EQ(op.kernel.fn, KernelFn::LayerNorm2d) << op.name;
      EXPECT_EQ(op.kernel.m, 4 * 512 / 2);  // this device's tokens
      EXPECT_EQ(op.kernel.n, 1024 / 2);     // its share of the hidden size
      EXPECT_EQ(op.kernel.k, 1024);         // the whole row
      ++seen;
    }
  EXPECT_GT(seen, 0);
}

double matmul_flops(const Schedule& s, const ParallelSpec& p) {
  double f = 0;
  const double ranks_per_stage = static_cast<double>(p.world_size()) / p.pp;
  for (const Role& r : s.roles)
    for (const Op& op : r.ops)
      if (op.kind == OpKind::Compute && (op.kernel.kind == KernelKind::Gemm || op.kernel.kind == KernelKind::Attention))
        f += op.kernel.flops * ranks_per_stage;
  return f;
}

// docs/math.md section 4: 72 B s L h^2 (1 + s/(6h) + V/(12 h L)); with full recomputation
// 96 B s L h^2 (1 + s/(6h) + V/(16 h L)).
TEST(Plan, IterationFlopsEqualTheModelFlopsFormula) {
  const ModelSpec m = gpt(8, 1024, 16, 512, 32768);
  ParallelSpec p;
  p.tp = 2;
  p.pp = 2;
  p.dp = 2;
  p.microbatches = 4;
  p.micro_batch_size = 2;
  const double B = p.global_batch(), s = 512, L = 8, h = 1024, V = 32768;
  EXPECT_NEAR(matmul_flops(plan_iteration(m, p), p) / (72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L))),
              1.0, 1e-9);
  p.recompute = Recompute::parse("full", "test");
  EXPECT_NEAR(matmul_flops(plan_iteration(m, p), p) / (96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * h * L))),
              1.0, 1e-9);
}

TEST(Plan, OneFOneBOrderOnTheFirstAndLastStage) {
  const ModelSpec m = gpt(4, 256, 4, 128);
  ParallelSpec p;
  p.pp = 4;
  p.microbatches = 6;
  const Schedule s = plan_iteration(m, p);
  auto order = [&](int stage) {
    std::string o;
    for (const Op& op : s.roles[stage].ops)
      if (op.kind == OpKind::Recv || (op.kind == OpKind::Compute && (op.name == "logits" || op.name == "embedding")))
        o += (op.phase == Phase::Forward ? "F" : "B") + std::to_string(op.microbatch) + " ";
    return o;
  };
  // Stage 0 starts each forward with the embedding and each backward with a received gradient.
  EXPECT_EQ(order(0), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5 ");
  // The last stage receives an activation, then runs forward and backward back to back.
  std::string last;
  for (const Op& op : s.roles[3].ops)
    if (op.kind == OpKind::Recv) last += "F" + std::to_string(op.microbatch) + " ";
  EXPECT_EQ(last, "F0 F1 F2 F3 F4 F5 ");
}

TEST(Plan, OpListsDoNotGrowWithDataParallelRanks) {
  const ModelSpec m = gpt(8, 1024, 16, 512);
  ParallelSpec small, big;
  small.tp = big.tp = 8;
  small.pp = big.pp = 2;
  small.microbatches = big.microbatches = 4;
  small.dp = 1;
  big.dp = 1024;  // 16k ranks
  const Schedule a = plan_iteration(m, small), b = plan_iteration(m, big);
  ASSERT_EQ(b.roles.size(), 2u);
  // The same ops per stage; dp only adds the gradient buckets.
  std::size_t dp_ops = 0;
  for (const Op& op : b.roles[0].ops) dp_ops += op.axis.str() == "dp";
  EXPECT_EQ(b.roles[0].ops.size(), a.roles[0].ops.size() + dp_ops);
  EXPECT_GT(dp_ops, 0u);
}

// Every parameter a rank holds has its gradient reduced once: the layers (/t), the embedding
// table (/t), the final LayerNorm (2h, whole) and, when untied, the output projection (/t).
TEST(Plan, DataParallelBucketsCarryEveryGradientOnce) {
  for (bool tied : {true, false}) {
    ModelSpec m = gpt(4, 1024, 16, 512);
    m.tied_embeddings = tied;
    for (int zero : {0, 1, 3}) {
      ParallelSpec p;
      p.dp = 4;
      p.tp = 2;
      p.zero = zero;
      p.dp_bucket_mib = 8;
      const Schedule s = plan_iteration(m, p);
      double grads = 0;
      for (const Op& op : s.roles[0].ops)
        if (op.kind == OpKind::Collective && op.axis.str() == "dp" && op.name.find("grads") != std::string::npos)
          grads += static_cast<double>(op.bytes);
      const double table = std::floor(m.vocab * 1024.0 / 2);
      const double want = (m.layers * std::floor(m.params_per_layer() / 2) + table * (tied ? 1 : 2) + 2 * 1024) * 2;
      // reduce-scatter rounds buckets up to whole elements per rank
      EXPECT_NEAR(grads, want, 4.0 * 8) << "zero=" << zero << " tied=" << tied;
    }
  }
}

// ZeRO-3 all-gathers one layer's parameters as one tensor-parallel rank holds them (the
// collective contract: n is the gathered output, each of the dp ranks contributes n/dp).
// Hand-worked: h = 1024, GPT layer 12h^2 + 13h = 12,582,912 + 13,312 = 12,596,224 parameters;
// / t = 4 -> 3,149,056; x P = 2 bytes -> 6,298,112 bytes, whatever dp is.
TEST(Plan, Zero3GathersOneLayerOfOneTensorRank) {
  const ModelSpec m = gpt(4, 1024, 16, 512);
  for (const char* recompute : {"none", "full"}) {
    for (int dp : {2, 8}) {
      ParallelSpec p;
      p.dp = dp;
      p.tp = 4;
      p.zero = 3;
      p.recompute = Recompute::parse(recompute, "test");
      const Schedule s = plan_iteration(m, p);
      int gathers = 0;
      for (const Op& op : s.roles[0].ops) {
        if (op.name != "zero3.allgather.params") continue;
        ++gathers;
        EXPECT_EQ(op.bytes, 6298112) << recompute << " dp=" << dp;
        EXPECT_EQ(op.coll, CollKind::AllGather);
        EXPECT_EQ(op.axis.str(), "dp");
        EXPECT_EQ(op.group_size, dp);
        EXPECT_EQ(op.stream, Stream::Dp);
      }
      // One per layer in forward and in backward, 4 layers (a recomputed forward shares its
      // backward's gather: FSDP skips its pre-forward logic in the recomputation).
      EXPECT_EQ(gathers, 8) << recompute;
    }
  }
}

// ZeRO-3 prefetch: the gather for a layer's use is issued when the previous use starts
// computing, so it runs on the dp stream beside that compute and only the use itself waits.
TEST(Plan, Zero3GatherIsPrefetchedOneLayerAhead) {
  const ModelSpec m = gpt(4, 1024, 16, 512);
  for (const char* recompute : {"none", "full", "every:2"}) {
    ParallelSpec p;
    p.dp = 2;
    p.tp = 2;
    p.zero = 3;
    p.microbatches = 2;
    p.recompute = Recompute::parse(recompute, "test");
    const Schedule s = plan_iteration(m, p);
    const auto& ops = s.roles[0].ops;
    // Uses in compute order: (layer, phase) of each first compute op; the gathers in issue order.
    std::vector<std::pair<int, Phase>> uses;
    std::vector<int> first_op, gathers;
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const Op& op = ops[static_cast<std::size_t>(i)];
      if (op.microbatch != 1) continue;
      if (op.name == "zero3.allgather.params") gathers.push_back(i);
      if (op.kind != OpKind::Compute || op.layer < 0) continue;
      if (!uses.empty() && uses.back() == std::make_pair(op.layer, op.phase)) continue;
      // A layer's backward right after its recomputation is the same use (one gather).
      if (!uses.empty() && uses.back() == std::make_pair(op.layer, Phase::Recompute) && op.phase == Phase::Backward)
        continue;
      uses.emplace_back(op.layer, op.phase);
      first_op.push_back(i);
    }
    // Forward 0..3 (uses 0-3); backward from use 4: 3B 2B 1B 0B, (full) 3R+3B 2R+2B ..., or
    // (every:2) 2R 3R+3B 2B 0R 1R+1B 0B.
    ASSERT_EQ(gathers.size(), uses.size()) << recompute;
    for (std::size_t k = 0; k < uses.size(); ++k) {
      const Op& g = ops[static_cast<std::size_t>(gathers[k])];
      EXPECT_EQ(std::make_pair(g.layer, g.phase), uses[k]) << recompute << " use " << k;
      // The use's first compute op waits for its gather ...
      const auto& deps = ops[static_cast<std::size_t>(first_op[k])].deps;
      EXPECT_NE(std::find(deps.begin(), deps.end(), gathers[k]), deps.end()) << recompute << " use " << k;
      if (k == 0 || k == 4) continue;  // the first use of each unit (forward, backward): issued at its start
      // ... which was issued before the previous use's first compute op (so it cannot depend on
      // that use's compute and runs beside it).
      EXPECT_LT(gathers[k], first_op[k - 1]) << recompute << " use " << k;
    }
  }
}

// distribute_checkpoints: the stash of a checkpointed layer is 1/t of its input, and each
// recomputed segment first all-gathers the input over tp (blocking). h = 1024, s = 512, b = 1,
// P = 2, t = 4: gather output b s h P = 1,048,576 bytes; stash 1,048,576 / 4 = 262,144 bytes
// (1,048,576 without distribution). 4 layers: full recomputes 4 segments, every:2 two.
TEST(Plan, DistributedCheckpointsAreGatheredOverTpBeforeRecompute) {
  const ModelSpec m = gpt(4, 1024, 16, 512);
  for (const char* recompute : {"full", "every:2"}) {
    for (bool distribute : {false, true}) {
      ParallelSpec p;
      p.tp = 4;
      p.recompute = Recompute::parse(recompute, "test");
      p.distribute_checkpoints = distribute;
      const Schedule s = plan_iteration(m, p);
      const auto& ops = s.roles[0].ops;
      int gathers = 0;
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const Op& op = ops[i];
        if (op.layer == 0 && op.phase == Phase::Forward && (i == 0 || ops[i - 1].layer != 0)) {
          EXPECT_EQ(op.alloc, distribute ? 262144 : 1048576) << recompute;  // layer 0 keeps a checkpoint
        }
        if (op.name != "tp.allgather.checkpoint") continue;
        ++gathers;
        EXPECT_EQ(op.bytes, 1048576);
        EXPECT_EQ(op.coll, CollKind::AllGather);
        EXPECT_EQ(op.axis.str(), "tp");
        EXPECT_EQ(op.group_size, 4);
        EXPECT_EQ(op.phase, Phase::Recompute);
        // The next op is the segment's first recomputed compute op of the same layer, and waits for it.
        ASSERT_LT(i + 1, ops.size());
        EXPECT_EQ(ops[i + 1].kind, OpKind::Compute);
        EXPECT_EQ(ops[i + 1].phase, Phase::Recompute);
        EXPECT_EQ(ops[i + 1].layer, op.layer);
        EXPECT_NE(std::find(ops[i + 1].deps.begin(), ops[i + 1].deps.end(), static_cast<int>(i)),
                  ops[i + 1].deps.end());
      }
      EXPECT_EQ(gathers, distribute ? (std::string(recompute) == "full" ? 4 : 2) : 0) << recompute;
    }
  }
}

// Transformer Engine's TP-comm overlap (stack megatron-te, with sp) pipelines the forward
// all-gathers and reduce-scatters with the GEMMs beside them: the same GEMM FLOPs (split into
// chunks) and the same tp bytes each way (the reduce-scatter cut into 3/4 + 1/4), but the
// all-gather before QKV and fc1 no longer blocks the GEMM's first chunk, and the
// reduce-scatters' chunks run beside a GEMM that leaves them tp_overlap_sms SMs.
TEST(Plan, TeTpCommOverlapPipelinesTheForwardCollectivesWithTheGemms) {
  const ModelSpec m = gpt(4, 1024, 16, 512);
  ParallelSpec p;
  p.tp = 4;
  p.sp = true;
  p.micro_batch_size = 2;
  const Schedule plain = plan_iteration(m, p);
  p.stack = training_stack("megatron-te");
  const Schedule te = plan_iteration(m, p);
  EXPECT_NEAR(matmul_flops(te, p), matmul_flops(plain, p), 1e-6 * matmul_flops(plain, p));
  for (Phase ph : {Phase::Forward, Phase::Backward})
    EXPECT_NEAR(moved(te, 0, 1, "tp", {ph}), moved(plain, 0, 1, "tp", {ph}), 4.0 * 16) << static_cast<int>(ph);
  // Layer 1's forward: the QKV GEMM's first chunk (3/4 of the rows) waits for no all-gather.
  const std::vector<Op>& ops = te.roles[0].ops;
  int qkv_parts = 0, reserved = 0;
  for (const Op& op : ops) {
    if (op.layer != 1 || op.phase != Phase::Forward || op.kind != OpKind::Compute) continue;
    if (op.name == "attn.qkv") {
      if (qkv_parts++ == 0) {
        EXPECT_EQ(op.kernel.m, 2 * 512 * 3 / 4);
        for (int d : op.deps) EXPECT_NE(ops[static_cast<std::size_t>(d)].kind, OpKind::Collective);
      }
    }
    if (op.kernel.sms_reserved > 0) {
      ++reserved;
      EXPECT_EQ(op.kernel.sms_reserved, p.stack.tp_overlap_sms);
    }
  }
  EXPECT_EQ(qkv_parts, 2);
  EXPECT_EQ(reserved, 2);  // attn.proj and mlp.fc2: the GEMMs with a reduce-scatter after them
  // Without sp TE's userbuffers do not run: the schedule is the plain one.
  p.sp = false;
  ParallelSpec q = p;
  q.stack = TrainingStack{};
  EXPECT_EQ(plan_iteration(m, p).roles[0].ops.size(), plan_iteration(m, q).roles[0].ops.size());
}

// PyTorch FSDP (FULL_SHARD) under gradient accumulation reduce-scatters every block's
// gradients in every micro-batch: m x L reduce-scatters of one layer each, m times the bytes
// of the Megatron-style plan, which reduces once after the last micro-batch.
TEST(Plan, FsdpReduceScattersEveryMicrobatch) {
  const ModelSpec m = gpt(4, 1024, 16, 512);
  ParallelSpec p;
  p.dp = 4;
  p.zero = 3;
  p.microbatches = 3;
  p.dp_bucket_mib = 1024;  // one bucket would hold the whole model
  const Collectives once = collectives(m, p, "dp.reduce_scatter.grads");
  p.stack = training_stack("pytorch-fsdp");
  p.stack.reduce_bytes = 0;  // in the model's dtype, as the plan before it
  const Collectives every = collectives(m, p, "dp.reduce_scatter.grads");
  EXPECT_EQ(once.count, 1);
  EXPECT_EQ(every.count, 3 * 4 + 1);  // a block per layer per micro-batch, then embedding and final norm
  const double layer = std::ceil(std::floor(m.params_per_layer()) * 2 / 4) * 4;
  EXPECT_NEAR(every.bytes - once.bytes, 2 * 4 * layer, 4.0 * 16);
}

// Uneven stages (parallel.stage_layers), hand-worked: 6 layers over pp 2 x vchunks 2 as
// [1, 2, 2, 1] (virtual stages 0..3 in order; chunk c of stage s is c * 2 + s). Stage 0 runs
// virtual stages 0 and 2: layers {0} and {3, 4}; stage 1 runs 1 and 3: {1, 2} and {5}. The
// iteration's FLOPs are the model's whatever the split, and the weights follow the layers.
TEST(Plan, UnevenStagesHoldTheLayersTheyAreGiven) {
  const ModelSpec m = gpt(6, 1024, 16, 512, 32768);
  ParallelSpec p;
  p.pp = 2;
  p.vchunks = 2;
  p.microbatches = 4;
  p.stage_layers = {1, 2, 2, 1};
  const Schedule s = plan_iteration(m, p);
  for (int st = 0; st < 2; ++st) {
    std::set<int> layers;
    for (const Op& op : s.roles[st].ops)
      if (op.kind == OpKind::Compute && op.layer >= 0) layers.insert(op.layer);
    EXPECT_EQ(layers, st == 0 ? std::set<int>({0, 3, 4}) : std::set<int>({1, 2, 5})) << "stage " << st;
  }
  const double B = p.global_batch(), sq = 512, L = 6, h = 1024, V = 32768;
  EXPECT_NEAR(matmul_flops(s, p) / (72 * B * sq * L * h * h * (1 + sq / (6 * h) + V / (12 * h * L))), 1.0, 1e-9);
  // Another split plans the same work.
  ParallelSpec other = p;
  other.stage_layers = {2, 1, 1, 2};
  EXPECT_NEAR(matmul_flops(plan_iteration(m, other), other), matmul_flops(s, p), 1e-6 * matmul_flops(s, p));
  // Weights: [3, 0, 3, 0] puts 3 + 3 layers on stage 0 and none on stage 1 (its last slot holds only the loss).
  p.stage_layers = {3, 0, 3, 0};
  const double per_layer = std::floor(m.params_per_layer()) * 2;
  const RankMemory r0 = rank_memory(m, p, 0), r1 = rank_memory(m, p, 1);
  EXPECT_NEAR(static_cast<double>(r0.bytes("weights")) - static_cast<double>(r1.bytes("weights")),
              6 * per_layer + (m.vocab * 1024.0 * 2) - (m.vocab * 1024.0 * 2 + 2 * 1024 * 2), 16.0);
}

// With context parallelism the gradients are reduced over dp x cp, the ranks that hold the same
// weights (Megatron's data-parallel group with context parallel): dp 2 x cp 2 reduce-scatter
// over the axis "dp+cp" in groups of 4, the same bytes as dp 4 (each rank's whole gradients);
// with dp 1 the cp ranks still reduce, where before nothing did. Experts with ep 2 reduce over
// "edp+cp": dp / ep x cp = 2 ranks.
TEST(Plan, GradientsReduceOverDataAndContextParallelRanks) {
  const ModelSpec m = gpt(4, 1024, 16, 512);
  const std::string grads = "dp.reduce_scatter.grads";
  ParallelSpec dp4;
  dp4.dp = 4;
  dp4.zero = 1;
  ParallelSpec cp = dp4;
  cp.dp = 2;
  cp.cp = 2;
  const Collectives want = collectives(m, dp4, grads, "dp");
  EXPECT_EQ(want.group, 4);
  EXPECT_GT(want.bytes, 0);
  const Collectives over_cp = collectives(m, cp, grads, "dp+cp");
  EXPECT_NEAR(over_cp.bytes, want.bytes, 64);
  EXPECT_EQ(over_cp.group, 4);
  EXPECT_EQ(collectives(m, cp, grads, "dp").bytes, 0);
  cp.dp = 1;
  const Collectives cp_only = collectives(m, cp, grads, "dp+cp");
  EXPECT_GT(cp_only.bytes, 0);
  EXPECT_EQ(cp_only.group, 2);
  ModelSpec moe = m;
  moe.experts = 4;
  moe.top_k = 2;
  ParallelSpec ep = dp4;
  ep.cp = 2;
  ep.ep = 2;
  const Collectives experts = collectives(moe, ep, grads, "edp+cp");
  EXPECT_GT(experts.bytes, 0);
  EXPECT_EQ(experts.group, 4 / 2 * 2);
}

// FSDP's knobs, by hand on 4 layers, dp 4, ZeRO-3, 2 micro-batches:
// - reshard_after_forward (FULL_SHARD): each layer gathered for its forward and again for its
//   backward, in every micro-batch: 4 x 2 x 2 = 16 gathers; false (SHARD_GRAD_OP): forward
//   only, 8, and the layers' gathered parameters held meanwhile (3/4 of them beside the shard);
// - reduce_dtype fp32: the gradient reduce-scatters carry 4 bytes per parameter, twice bf16's.
// FULL_SHARD over dp 4 with 2 micro-batches, as the pytorch-fsdp stack runs it.
ParallelSpec fsdp_dp4() {
  ParallelSpec p;
  p.dp = 4;
  p.zero = 3;
  p.microbatches = 2;
  p.stack = training_stack("pytorch-fsdp");
  return p;
}

TEST(Plan, FsdpReshardAfterForwardAndReduceDtype) {
  const ModelSpec m = gpt(4, 1024, 16, 512);
  ParallelSpec p = fsdp_dp4();
  EXPECT_EQ(p.stack.reduce_bytes, 4);  // the stack's default: fp32, as torchtitan and Composer reduce
  p.stack.reduce_bytes = 0;            // the model's dtype (bf16), the comparison's baseline
  EXPECT_EQ(collectives(m, p, "zero3.allgather.params").count, 16);
  const double rs_bf16 = collectives(m, p, "dp.reduce_scatter.grads").bytes;
  ParallelSpec keep = p;
  keep.stack.reshard_after_forward = false;
  EXPECT_EQ(collectives(m, keep, "zero3.allgather.params").count, 8);
  const double layer_params = std::floor(m.params_per_layer());
  EXPECT_NEAR(
      static_cast<double>(rank_memory(m, keep, 0).bytes("temporaries") - rank_memory(m, p, 0).bytes("temporaries")),
      2 * 4 * layer_params * 3 / 4, 8);
  ParallelSpec fp32 = p;
  fp32.stack.reduce_bytes = 4;
  EXPECT_NEAR(collectives(m, fp32, "dp.reduce_scatter.grads").bytes, 2 * rs_bf16, 64);
}

// FSDP's own passes, by hand on 4 layers, dp 4, ZeRO-3, 2 micro-batches, bf16 (P = 2), fp32
// reduce (R = 4), n parameters a layer: FSDP1 after each block's backward in each micro-batch
// flattens (2P n bytes), casts (P + R) n and pre-divides 2R n: 8 of each; FSDP2 copies the
// gradients in ((P + R) n, 8) and every gathered block out (2P n, 16 gathers).
TEST(Plan, FsdpPassesPerBlockAndMicroBatch) {
  const ModelSpec m = gpt(4, 1024, 16, 512);
  const ParallelSpec p = fsdp_dp4();
  EXPECT_EQ(p.stack.fsdp, 1);
  const double n = std::floor(m.params_per_layer());
  auto passes = [&](const ParallelSpec& q) {
    std::map<std::string, std::pair<int, double>> by;
    const Schedule s = plan_iteration(m, q);
    for (const Op& op : s.roles[0].ops)
      if (op.kind == OpKind::Compute && op.name.rfind("fsdp.", 0) == 0) {
        ++by[op.name].first;
        by[op.name].second += op.kernel.bytes;
      }
    return by;
  };
  auto v1 = passes(p);
  EXPECT_EQ(v1.size(), 3u);
  EXPECT_EQ(v1["fsdp.grad.flatten"].first, 8);
  EXPECT_NEAR(v1["fsdp.grad.flatten"].second, 8 * 2 * 2 * n, 64);
  EXPECT_NEAR(v1["fsdp.grad.cast"].second, 8 * (2 + 4) * n, 64);
  EXPECT_NEAR(v1["fsdp.grad.predivide"].second, 8 * 2 * 4 * n, 64);
  ParallelSpec v2 = p;
  v2.stack = training_stack("pytorch-fsdp2");
  auto two = passes(v2);
  EXPECT_EQ(two.size(), 2u);
  EXPECT_EQ(two["fsdp.grad.copy_in"].first, 8);
  EXPECT_NEAR(two["fsdp.grad.copy_in"].second, 8 * (2 + 4) * n, 64);
  EXPECT_EQ(two["fsdp.allgather.copy_out"].first, 16);
  EXPECT_NEAR(two["fsdp.allgather.copy_out"].second, 16 * 2 * 2 * n, 64);
  // bf16 reduce: no cast; one rank: no FSDP passes at all (nothing is reduced or gathered).
  ParallelSpec bf16 = p;
  bf16.stack.reduce_bytes = 2;
  EXPECT_EQ(passes(bf16).count("fsdp.grad.cast"), 0u);
  ParallelSpec one = p;
  one.dp = 1;
  EXPECT_TRUE(passes(one).empty());
  // The megatron stack has none: its weight-gradient GEMMs accumulate into the main gradients.
  ParallelSpec meg = p;
  meg.stack = training_stack("megatron");
  EXPECT_TRUE(passes(meg).empty());
}

// When the backward gathers the next block (TrainingStack::backward_prefetch), by the ops'
// dependencies on 3 layers, dp 2, one micro-batch: with `pre` the gather of the layer whose
// backward comes second is issued before the first backward's GEMMs (it depends on no op of
// that backward), with `post` after them (it depends on the first backward's flat gradient).
// A recomputed layer's backward shares its recomputation's gather: 3 + 3 gathers, not 3 + 6.
TEST(Plan, FsdpBackwardPrefetchPreOrPostAndRecomputeSharesTheGather) {
  const ModelSpec m = gpt(3, 1024, 16, 512);
  ParallelSpec p;
  p.dp = 2;
  p.zero = 3;
  p.stack = training_stack("pytorch-fsdp");
  auto second_gather_waits_for_backward = [&](BackwardPrefetch mode) {
    ParallelSpec q = p;
    q.stack.backward_prefetch = mode;
    const Schedule s = plan_iteration(m, q);
    const auto& ops = s.roles[0].ops;
    int flatten = -1, gathers = 0;
    for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
      const Op& op = ops[static_cast<std::size_t>(i)];
      if (op.name == "fsdp.grad.flatten" && flatten < 0) flatten = i;
      if (op.name != "zero3.allgather.params" || op.phase != Phase::Backward) continue;
      if (++gathers == 2) {
        // The first backward's flat gradient comes before this gather only under post.
        bool waits = false;
        for (int d : op.deps) waits = waits || (flatten >= 0 && d >= flatten);
        return waits;
      }
    }
    ADD_FAILURE() << "no second backward gather";
    return false;
  };
  EXPECT_FALSE(second_gather_waits_for_backward(BackwardPrefetch::Pre));
  EXPECT_TRUE(second_gather_waits_for_backward(BackwardPrefetch::Post));
  ParallelSpec rc = p;
  rc.recompute = Recompute::parse("full", "test");
  EXPECT_EQ(collectives(m, rc, "zero3.allgather.params").count, 6);
  EXPECT_EQ(collectives(m, p, "zero3.allgather.params").count, 6);
}

// recompute: ops, by hand on one Llama-shaped layer (h 1024, 16 heads of 64, 4 K/V heads:
// h_kv 256, SwiGLU f 2048, s 512, b 1, tp 1): before the backward the plan recomputes wk, wo and
// w3 (2 s h (h_kv + h + f) FLOPs), both norms, the SwiGLU and the two residual adds, and not
// the attention kernel; under sp with tp 2 also the all-gathers before qkv and fc1, not the
// reduce-scatters.
TEST(Plan, OpsRecomputationRerunsEveryOtherMatmulAndTheCheapKernels) {
  ModelSpec m = gpt(1, 1024, 16, 512);
  m.kv_heads = 4;
  m.ffn_hidden = 2048;
  m.ffn = FfnKind::SwiGLU;
  m.attention = AttentionKind::Flash;
  ParallelSpec p;
  p.recompute = Recompute::parse("ops", "test");
  auto recomputed = [&](const ParallelSpec& q) {
    std::map<std::string, double> gemm_flops;
    std::set<std::string> names;
    const Schedule s = plan_iteration(m, q);
    for (const Op& op : s.roles[0].ops) {
      if (op.phase != Phase::Recompute) continue;
      names.insert(op.name);
      if (op.kind == OpKind::Compute && op.kernel.kind == KernelKind::Gemm) gemm_flops[op.name] += op.kernel.flops;
    }
    return std::make_pair(gemm_flops, names);
  };
  const auto [flops, names] = recomputed(p);
  const double S = 512, H = 1024, Hkv = 256, F = 2048;
  EXPECT_DOUBLE_EQ(flops.at("attn.qkv"), 2 * S * H * Hkv);
  EXPECT_DOUBLE_EQ(flops.at("attn.proj"), 2 * S * H * H);
  EXPECT_DOUBLE_EQ(flops.at("mlp.fc1"), 2 * S * H * F);
  EXPECT_EQ(flops.count("mlp.fc2"), 0u);
  EXPECT_EQ(names, (std::set<std::string>{"ln1", "attn.qkv", "attn.proj", "attn.dropout_residual", "ln2", "mlp.fc1",
                                          "mlp.swiglu", "mlp.dropout_residual"}));
  ParallelSpec sp = p;
  sp.tp = 2;
  sp.sp = true;
  const auto [flops2, names2] = recomputed(sp);
  EXPECT_DOUBLE_EQ(flops2.at("attn.qkv"), 2 * S * H * Hkv / 2);
  EXPECT_TRUE(names2.count("tp.g.attn") && names2.count("tp.g.mlp"));
  EXPECT_FALSE(names2.count("tp.gbar.attn") || names2.count("tp.gbar.mlp"));
}

// Shared experts in the schedule: the GEMMs every rank runs add up to the model's FLOPs
// (docs/math.md section 4 with (top_k + shared) MLPs per token), with experts split over tp
// (ep 1) or whole on each expert-parallel rank (ep 2), and their activations are counted.
TEST(Plan, SharedExpertsRunOnEveryTokenAndCountInTheFlops) {
  ModelSpec m = gpt(2, 1024, 16, 512, 32768);
  m.experts = 4;
  m.top_k = 2;
  m.shared_experts = 1;
  ParallelSpec tp;
  tp.tp = 2;
  tp.dp = 2;
  tp.microbatches = 2;
  ParallelSpec ep;
  ep.dp = 2;
  ep.ep = 2;
  ep.microbatches = 2;
  ModelSpec none = m;
  none.shared_experts = 0;
  for (const ParallelSpec& p : {tp, ep}) {
    // (The router runs whole on every tp rank, so compare with and without the shared expert.)
    const double B = static_cast<double>(p.global_batch());
    const double want = model_flops_per_iteration(m, B, false) - model_flops_per_iteration(none, B, false);
    EXPECT_DOUBLE_EQ(want, 3 * 2 * 4 * B * 512 * 1024 * 4096);  // 3 passes x L x 4bshf (GeLU)
    EXPECT_NEAR((matmul_flops(plan_iteration(m, p), p) - matmul_flops(plan_iteration(none, p), p)) / want, 1.0, 1e-9)
        << "ep " << p.ep;
  }
  const double extra =
      static_cast<double>(total_bytes(layer_activation_items(m, tp)) - total_bytes(layer_activation_items(none, tp)));
  EXPECT_NEAR(extra, (1 + 1) * 2.0 * 512 * 4096 / 2, 2);  // GeLU input and fc2 input, P sbf / t
}

// Megatron's overlap_param_gather (stack megatron-te, ZeRO-1 over dp 4): the parameter
// all-gather leaves the optimizer's tail and starts the iteration, asynchronous (the previous
// step's, under this step's forward), with the same bytes; without it, it is the stage's last op.
TEST(Plan, OverlappedParamGatherStartsTheIteration) {
  const ModelSpec m = gpt(4, 1024, 16, 512);
  ParallelSpec p;
  p.dp = 4;
  p.zero = 1;
  p.microbatches = 2;
  const Schedule plain = plan_iteration(m, p);
  p.stack = training_stack("megatron-te");
  ASSERT_TRUE(p.stack.overlap_param_gather);
  const Schedule te = plan_iteration(m, p);
  auto find = [](const Schedule& s) {
    for (std::size_t i = 0; i < s.roles[0].ops.size(); ++i)
      if (s.roles[0].ops[i].name == "zero.allgather.params") return static_cast<int>(i);
    return -1;
  };
  const int at_plain = find(plain), at_te = find(te);
  ASSERT_GE(at_plain, 0);
  EXPECT_EQ(at_plain, static_cast<int>(plain.roles[0].ops.size()) - 1);
  EXPECT_EQ(at_te, 0);
  EXPECT_TRUE(te.roles[0].ops[0].deps.empty());
  EXPECT_EQ(te.roles[0].ops[0].bytes, plain.roles[0].ops[at_plain].bytes);
  for (const Op& op : te.roles[0].ops)  // nothing waits for it: no compute op depends on op 0
    for (int d : op.deps) EXPECT_NE(d, 0) << op.name;
}

}  // namespace
}  // namespace meshsim
