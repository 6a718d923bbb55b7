// The fast formula path against the full op-by-op simulation: the same iteration time,
// breakdown, activation peaks and FLOPs, to the picosecond, across layouts.
#include "sim/fast_formula.h"

#include <gtest/gtest.h>

#include "schedule/plan.h"
#include "schedule/test_models.h"
#include "topology/placement.h"
#include "topology/presets.h"

namespace meshsim {
namespace {

struct Case {
  const char* name;
  ModelSpec model;
  ParallelSpec p;
  const char* topology;
};

ModelSpec gpt(int layers, int h, int heads, int seq) { return testing::gpt_model(layers, h, heads, seq, 32768); }

std::vector<Case> cases() {
  std::vector<Case> v;
  auto add = [&](const char* name, ModelSpec m, auto edit, const char* topo) {
    ParallelSpec p;
    edit(p);
    v.push_back({name, m, p, topo});
  };
  const ModelSpec g = gpt(8, 2048, 16, 1024);
  add(
      "dp_tp", g,
      [](ParallelSpec& p) {
        p.tp = 2;
        p.dp = 2;
      },
      "dgx-h100");
  add(
      "tp_sp_pp_zero1", g,
      [](ParallelSpec& p) {
        p.tp = 4;
        p.sp = true;
        p.pp = 2;
        p.dp = 2;
        p.microbatches = 4;
        p.zero = 1;
      },
      "dgx-h100:nodes=2");
  add(
      "interleaved_selective", g,
      [](ParallelSpec& p) {
        p.tp = 2;
        p.pp = 4;
        p.vchunks = 2;
        p.microbatches = 8;
        p.recompute = Recompute::parse("selective", "t");
        p.pp_scatter_gather = false;
      },
      "dgx-h100");
  add(
      "full_recompute", g,
      [](ParallelSpec& p) {
        p.pp = 4;
        p.microbatches = 8;
        p.recompute = Recompute::parse("full", "t");
      },
      "dgx-h100");
  add(
      "every2_zero2", g,
      [](ParallelSpec& p) {
        p.pp = 2;
        p.dp = 4;
        p.microbatches = 3;
        p.zero = 2;
        p.dp_bucket_mib = 4;
        p.recompute = Recompute::parse("every:2", "t");
      },
      "dgx-h100");
  add(
      "sqrt", g,
      [](ParallelSpec& p) {
        p.pp = 2;
        p.microbatches = 2;
        p.recompute = Recompute::parse("sqrt", "t");
      },
      "dgx-h100");
  ModelSpec gqa = gpt(4, 2048, 16, 4096);
  gqa.kv_heads = 4;
  gqa.attention = AttentionKind::Flash;
  gqa.ffn = FfnKind::SwiGLU;
  add(
      "cp_flash", gqa,
      [](ParallelSpec& p) {
        p.cp = 2;
        p.tp = 2;
        p.sp = true;
        p.pp = 2;
        p.microbatches = 2;
      },
      "dgx-h100");
  ModelSpec moe = gpt(4, 1024, 16, 1024);
  moe.experts = 8;
  moe.top_k = 2;
  add(
      "moe_ep", moe,
      [](ParallelSpec& p) {
        p.dp = 4;
        p.ep = 4;
        p.pp = 2;
        p.microbatches = 2;
        p.ep_imbalance = 1.5;
      },
      "dgx-h100");
  add(
      "summa", gpt(4, 1024, 16, 512),
      [](ParallelSpec& p) {
        p.mesh2d = 2;
        p.pp = 2;
        p.dp = 2;
        p.microbatches = 4;
        p.micro_batch_size = 2;
      },
      "frontera-rtx:nodes=4");
  return v;
}

// Pipeline scatter/gather couples a unit's first op to the previous unit's tp stream: the
// fast path declines it and the full simulation runs.
TEST(FastFormula, DeclinesPipelineScatterGather) {
  ParallelSpec p;
  p.tp = 2;
  p.pp = 2;
  p.microbatches = 2;
  const Topology topo = resolve_topology("dgx-h100");
  Mesh mesh;
  mesh.dims = mesh_axes(p);
  Router r(topo);
  const std::optional<ScheduleSimResult> fast = simulate_iteration_fast(
      check_layout(gpt(4, 1024, 16, 512), p, p.world_size()), topo, r, Placement::natural(mesh, topo),
      ComputeModel(gpu_preset("h100")), AlgorithmRegistry::builtin(), ScheduleSimOptions{});
  EXPECT_FALSE(fast.has_value());
}

// The full simulation of a case and the fast path's, on `compute`.
std::pair<ScheduleSimResult, std::optional<ScheduleSimResult>> full_and_fast(const Case& c,
                                                                             const ComputeModel& compute) {
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  const Topology topo = resolve_topology(c.topology);
  Mesh mesh;
  mesh.dims = mesh_axes(c.p);
  const Placement pl = Placement::natural(mesh, topo);
  Router r1(topo), r2(topo);
  return {simulate_schedule(plan_iteration(c.model, c.p), topo, r1, pl, compute, registry, ScheduleSimOptions{}),
          simulate_iteration_fast(check_layout(c.model, c.p, c.p.world_size()), topo, r2, pl, compute, registry,
                                  ScheduleSimOptions{})};
}

// Exactly, where compute does not slow beside communication (GpuSpec::comm_sms 0).
TEST(FastFormula, EqualsTheFullSimulation) {
  GpuSpec gpu = gpu_preset("h100");
  gpu.comm_sms = 0;
  const ComputeModel compute(gpu);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const auto [full, fast] = full_and_fast(c, compute);
    ASSERT_TRUE(fast.has_value());
    EXPECT_EQ(fast->iteration, full.iteration);
    EXPECT_EQ(fast->role_end, full.role_end);
    EXPECT_EQ(fast->critical_role, full.critical_role);
    EXPECT_EQ(fast->peak_activation, full.peak_activation);
    EXPECT_EQ(fast->breakdown.compute, full.breakdown.compute);
    EXPECT_EQ(fast->breakdown.recompute, full.breakdown.recompute);
    EXPECT_EQ(fast->breakdown.optimizer, full.breakdown.optimizer);
    EXPECT_EQ(fast->breakdown.bubble, full.breakdown.bubble);
    EXPECT_EQ(fast->breakdown.exposed, full.breakdown.exposed);
    EXPECT_DOUBLE_EQ(fast->flops_executed, full.flops_executed);
    EXPECT_DOUBLE_EQ(fast->flops_recomputed, full.flops_recomputed);
  }
}

// With compute slowed beside communication (the h100 preset's comm_sms), a fused segment that
// another unit's gradient bucket or send overlaps for part of its length is charged pro rata
// to its slowdown over its whole length: within 1% of the full simulation, never faster.
TEST(FastFormula, WithinOnePercentBesideCommunication) {
  const ComputeModel compute(gpu_preset("h100"));
  ASSERT_GT(compute.gpu().comm_sms, 0);
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const auto [full, fast] = full_and_fast(c, compute);
    ASSERT_TRUE(fast.has_value());
    EXPECT_GE(fast->iteration, full.iteration);
    EXPECT_LE(fast->iteration.seconds(), full.iteration.seconds() * 1.01);
    EXPECT_EQ(fast->peak_activation, full.peak_activation);
  }
}

TEST(FastFormula, DeclinesWhereItDoesNotHold) {
  const Topology topo = resolve_topology("dgx-h100");
  ParallelSpec p;
  p.dp = 8;
  const ModelSpec m = gpt(2, 1024, 16, 512);
  Mesh mesh;
  mesh.dims = mesh_axes(p);
  const Placement pl = Placement::natural(mesh, topo);
  Router router(topo);
  ScheduleSimOptions flow;
  flow.fidelity = Fidelity::Flow;
  const ComputeModel compute(gpu_preset("h100"));
  EXPECT_FALSE(simulate_iteration_fast(check_layout(m, p, p.world_size()), topo, router, pl, compute,
                                       AlgorithmRegistry::builtin(), flow));
  p.zero = 3;
  EXPECT_FALSE(simulate_iteration_fast(check_layout(m, p, p.world_size()), topo, router, pl, compute,
                                       AlgorithmRegistry::builtin(), {}));
}

}  // namespace
}  // namespace meshsim
