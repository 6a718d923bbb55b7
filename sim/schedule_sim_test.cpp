// The sim backend on planned schedules: invariants of docs/math.md sections 6 and 9, the
// activation-memory timeline against the closed forms of section 12, and the breakdown.
#include "sim/schedule_sim.h"

#include <gtest/gtest.h>
#include <tbb/task_arena.h>

#include <cmath>
#include <numbers>

#include "schedule/memory.h"
#include "schedule/plan.h"
#include "schedule/test_models.h"
#include "sim/schedule_internal.h"
#include "sim/training_sim.h"
#include "topology/placement.h"
#include "topology/presets.h"

namespace meshsim {
namespace {

ModelSpec gpt(int layers, int h, int heads, int seq, int vocab = 51200) {
  return testing::gpt_model(layers, h, heads, seq, vocab);
}

ScheduleSimResult run(const ModelSpec& m, const ParallelSpec& p, const std::string& topo_spec,
                      const std::string& placement = "natural", Fidelity f = Fidelity::Formula,
                      const std::string& gpu = "h100") {
  const Topology topo = resolve_topology(topo_spec);
  const Schedule s = plan_iteration(m, p);
  Mesh mesh;
  mesh.dims = s.axes;
  const Placement pl = Placement::parse(placement, mesh, topo, "placement");
  Router router(topo);
  ScheduleSimOptions opt;
  opt.fidelity = f;
  return simulate_schedule(s, topo, router, pl, ComputeModel(gpu_preset(gpu)), AlgorithmRegistry::builtin(), opt);
}

// Compute beside communication, by hand: a GEMM of 10 us alone and 20 us beside a communication
// kernel (GpuSpec::comm_sms) shares its first 5 us with a 5 us gradient all-reduce, so it does
// a quarter of its work there and the other three quarters alone: it ends at 5 + 7.5 = 12.5 us.
// Beside an all-reduce of 30 us it runs slow throughout (20 us); beside communication that
// holds no SMs (TE's copy-engine exchange) it keeps its 10 us.
TEST(ScheduleSim, ComputeBesideCommunicationRunsSlowerWhileItRuns) {
  auto gemm_end = [](Time comm, bool holds_no_sms) {
    Schedule s;
    s.pp_axis = {};
    Role& r = s.roles.emplace_back();
    Op gemm;
    gemm.name = "gemm";
    Op ar;
    ar.kind = OpKind::Collective;
    ar.stream = Stream::Dp;
    ar.name = "dp.allreduce";
    ar.bytes = 1 << 20;
    ar.group_size = 2;
    ar.holds_no_sms = holds_no_sms;
    r.ops = {gemm, ar};
    detail::Runner runner(s, {us(10), comm}, {0}, nullptr, {}, {us(20), comm});
    runner.run();
    EXPECT_EQ(runner.end()[1], comm);
    return runner.end()[0];
  };
  EXPECT_EQ(gemm_end(us(5), false), Time::from_ps(12'500'000));
  EXPECT_EQ(gemm_end(us(30), false), us(20));
  EXPECT_EQ(gemm_end(us(5), true), us(10));
}

// A machine profile's measured collective replaces the topology model for ops of its kind
// and group size: three back-to-back 16 MiB all-reduces over 4 ranks take 3 x (alpha +
// bytes / bandwidth) exactly; an entry for another group size or kind changes nothing.
TEST(ScheduleSim, MeasuredCollectivesTimeTheirKindAndGroupSize) {
  const Topology topo = resolve_topology("switch:gpus_per_node=4");
  Router router(topo);
  CollectiveWorkload w;
  w.kind = CollKind::AllReduce;
  w.ranks = 4;
  w.bytes = MiB(16);
  w.iterations = 3;
  w.algorithm = "ring";
  const Schedule s = plan_collectives(w);
  const Placement pl = Placement::natural(Mesh{s.axes}, topo);
  const ComputeModel compute(gpu_preset("h100"));
  auto iteration = [&](std::vector<CollectiveProfile> measured) {
    ScheduleSimOptions opt;
    opt.measured = std::move(measured);
    return simulate_schedule(s, topo, router, pl, compute, AlgorithmRegistry::builtin(), opt).iteration;
  };
  CollectiveProfile m{CollKind::AllReduce, 4, us(10), GBps(1), "ring"};
  // 16 MiB at 1 GB/s = 16.777216 ms, plus 10 us, three times.
  EXPECT_EQ(iteration({m}), Time::from_ps(3 * (10'000'000 + 16'777'216'000)));
  const Time modeled = iteration({});
  EXPECT_NE(modeled, iteration({m}));
  CollectiveProfile other_size = m, other_kind = m;
  other_size.ranks = 8;
  other_kind.kind = CollKind::AllGather;
  EXPECT_EQ(iteration({other_size, other_kind}), modeled);
}

TEST(ScheduleSim, BreakdownAddsUpToTheIterationTime) {
  ParallelSpec p;
  p.tp = 4;
  p.pp = 2;
  p.dp = 2;
  p.microbatches = 4;
  p.sp = true;
  for (Fidelity f : {Fidelity::Formula, Fidelity::Flow}) {
    const ScheduleSimResult r = run(gpt(8, 2048, 16, 1024), p, "dgx-h100:nodes=2", "natural", f);
    EXPECT_EQ(r.breakdown.total(), r.iteration);
    EXPECT_GT(r.breakdown.compute, Time{});
    EXPECT_GT(r.breakdown.exposed.at("tp"), Time{});
    EXPECT_GT(r.breakdown.bubble, Time{});
  }
}

// docs/math.md section 9: with (almost) free communication the 1F1B bubble is (p-1)/m of the
// ideal, i.e. the first stage idles (p-1) micro-batch-times out of m.
TEST(ScheduleSim, OneFOneBBubbleIsPMinusOneOverM) {
  // Large layers and a tiny vocabulary: the stages are nearly equal (the closed form assumes so).
  const ModelSpec m = gpt(16, 4096, 32, 2048, 256);
  for (auto [pp, mb] : {std::pair{4, 8}, std::pair{4, 16}, std::pair{8, 16}}) {
    ParallelSpec p;
    p.pp = pp;
    p.microbatches = mb;
    const ScheduleSimResult r = run(m, p, "switch:gpus_per_node=8,bandwidth=1000000GB/s,latency=0us");
    const double bubble = static_cast<double>(r.breakdown.bubble.ps());
    const double busy = static_cast<double>((r.breakdown.compute + r.breakdown.recompute).ps());
    EXPECT_NEAR(bubble / busy, static_cast<double>(pp - 1) / mb, 0.02 * (pp - 1) / mb) << pp << " stages, " << mb;
  }
}

// Where the ep groups land on two DGX H100 nodes (8 GPUs each, natural placement), tp 8 x dp 2
// with 8 experts: with etp = 1 (Megatron-core's ETP 1) ep 8 spans the 8 tp ranks, so each
// all-to-all group is one node's GPUs (NVLink); with etp = tp ep 2 is carved out of dp, so
// each group pairs GPU g with GPU g + 8 on the other node, and the all-to-all crosses the NICs.
// The fastest exposed ep time follows: the in-node layout's is the smaller.
TEST(ScheduleSim, ExpertParallelGroupsSpanTpWithEtpOne) {
  ModelSpec m = gpt(2, 1024, 16, 1024);
  m.experts = 8;
  m.top_k = 2;
  ParallelSpec p;
  p.dp = 2;
  p.tp = 8;
  p.sp = true;
  p.ep = 8;
  p.etp = 1;
  const Topology topo = resolve_topology("dgx-h100:nodes=2");
  auto groups = [&] { return Placement::natural(Mesh{mesh_axes(p)}, topo).groups_along(p.ep_axis()); };
  const std::vector<std::vector<int>> in_node = {{0, 1, 2, 3, 4, 5, 6, 7}, {8, 9, 10, 11, 12, 13, 14, 15}};
  EXPECT_EQ(groups(), in_node);
  const Time spanning = run(m, p, "dgx-h100:nodes=2").breakdown.exposed.at("ep");
  p.etp = 0;  // tp
  p.ep = 2;
  const std::vector<std::vector<int>> across = groups();
  ASSERT_EQ(across.size(), 8U);
  for (int g = 0; g < 8; ++g) EXPECT_EQ(across[static_cast<std::size_t>(g)], (std::vector<int>{g, g + 8}));
  EXPECT_LT(spanning, run(m, p, "dgx-h100:nodes=2").breakdown.exposed.at("ep"));
}

// Parse once, then trust (issue 36): one simulation checks its layout once, whatever path it
// takes (the fast path's unit planner or the full plan), where it used to check it twice and
// the model five times: now the model once, as it is read (with its file and line), which the
// layout check then trusts.
TEST(ScheduleSim, ASimulationChecksItsLayoutOnce) {
  const ScenarioNode n = ScenarioNode::parse(
      "model: {preset: gpt3-175b, layers: 8}\nparallel: {tp: 8, sp: true, pp: 2, dp: 2, microbatches: 4}\n"
      "topology: dgx-h100:nodes=4\n",
      "count.yaml");
  for (const bool keep_ops : {false, true}) {  // the fast path, then the full plan
    const std::int64_t layouts = layout_checks(), models = model_checks();
    const TrainingResult r = simulate_training(n.resolve(), AlgorithmRegistry::builtin(), keep_ops);
    EXPECT_EQ(r.fast, !keep_ops);
    EXPECT_EQ(layout_checks() - layouts, 1) << (keep_ops ? "full plan" : "fast path");
    EXPECT_EQ(model_checks() - models, 1) << (keep_ops ? "full plan" : "fast path");
  }
}

// The topology is built once per simulation, even where the resolver needs its GPU count first
// (dp: auto): resolver and simulator share it (shared_topology), where each built its own.
TEST(ScheduleSim, ASimulationBuildsItsTopologyOnce) {
  const ScenarioNode n = ScenarioNode::parse(
      "model: {preset: gpt3-175b, layers: 8}\nparallel: {tp: 8, pp: 2, dp: auto, microbatches: 4}\n"
      "topology: dgx-h100:nodes=6,nvlink_bandwidth=449GB/s\n",  // a spec no other test builds
      "count.yaml");
  const std::int64_t before = topology_builds();
  const TrainingResult r = simulate_training(n.resolve(), AlgorithmRegistry::builtin(), false);
  EXPECT_EQ(r.scenario.parallel.dp, 3);
  EXPECT_EQ(topology_builds() - before, 1);
}

// A stage's wait for the previous stage is pipeline bubble whether or not the activation
// arrives through pipeline scatter/gather (whose all-gather follows the Recv on the tp
// stream). On near-free links the 1F1B bubble is (p-1)/m of the busy time with the
// optimization on or off, and the tp comm charged is only what the all-gathers themselves took.
TEST(ScheduleSim, WaitingForThePreviousStageIsBubbleWithScatterGather) {
  const ModelSpec m = gpt(16, 4096, 32, 2048, 256);
  ParallelSpec p;
  p.tp = 2;
  p.pp = 4;
  p.microbatches = 8;
  for (bool sg : {false, true}) {
    p.pp_scatter_gather = sg;
    const ScheduleSimResult r = run(m, p, "switch:gpus_per_node=8,bandwidth=1000000GB/s,latency=0us");
    const double bubble = static_cast<double>(r.breakdown.bubble.ps());
    const double busy = static_cast<double>((r.breakdown.compute + r.breakdown.recompute).ps());
    EXPECT_NEAR(bubble / busy, 3.0 / 8, 0.02 * 3 / 8) << "pp_scatter_gather " << sg;
    const auto tp = r.breakdown.exposed.find("tp");
    const double tp_s = tp == r.breakdown.exposed.end() ? 0 : tp->second.seconds();
    EXPECT_LT(tp_s, 0.01 * busy * 1e-12) << "pp_scatter_gather " << sg;
    EXPECT_EQ(r.breakdown.total(), r.iteration);
  }
}

TEST(ScheduleSim, MoreBandwidthNeverSlowsAnIteration) {
  ParallelSpec p;
  p.tp = 8;
  p.pp = 2;
  p.dp = 2;
  p.microbatches = 4;
  p.zero = 1;
  const ModelSpec m = gpt(8, 4096, 32, 2048);
  for (Fidelity f : {Fidelity::Formula, Fidelity::Flow}) {
    // Raise NVLink and NIC bandwidth in turn; the iteration time never goes up.
    Time prev = Time::max();
    for (const char* bw :
         {"100GB/s,nic_bandwidth=100Gb/s", "100GB/s,nic_bandwidth=400Gb/s", "450GB/s,nic_bandwidth=400Gb/s",
          "900GB/s,nic_bandwidth=400Gb/s", "900GB/s,nic_bandwidth=800Gb/s"}) {
      const Time t = run(m, p, std::string("dgx-h100:nodes=4,nvlink_bandwidth=") + bw, "natural", f).iteration;
      EXPECT_LE(t, prev) << bw << " " << to_string(f);
      prev = t;
    }
  }
}

// docs/math.md section 6: column broadcasts of SUMMA cross nodes under `natural`, with 4 GPUs
// crowding each node's uplink; `bunched` keeps half of each column on a node. Contention
// is what decides it, so this holds at flow fidelity (the formula is blind to crowding).
TEST(ScheduleSim, BunchedNeverLosesToNaturalForSumma) {
  const ModelSpec m = gpt(4, 2048, 16, 512);
  for (int b : {4, 8}) {
    ParallelSpec p;
    p.mesh2d = 4;
    p.micro_batch_size = b;
    p.recompute = Recompute::parse("full", "test");
    const Time natural = run(m, p, "frontera-rtx:nodes=4", "natural", Fidelity::Flow, "rtx5000").iteration;
    const Time bunched = run(m, p, "frontera-rtx:nodes=4", "bunched:2x2", Fidelity::Flow, "rtx5000").iteration;
    EXPECT_LT(bunched, natural) << "b=" << b;
  }
}

// docs/math.md section 12: the first 1F1B stage holds p micro-batches of L/p layers, L layers'
// worth; interleaving with v chunks multiplies it by (1 + (p-1)/(p v)).
TEST(ScheduleSim, ActivationPeakOnTheTimelineMatchesThePipelineClosedForm) {
  const ModelSpec m = gpt(24, 1024, 16, 512);
  ParallelSpec p;
  p.tp = 2;
  p.sp = true;
  p.pp = 4;
  p.microbatches = 8;
  const Bytes layer = layer_activation_bytes(m, p);
  EXPECT_EQ(run(m, p, "dgx-h100").peak_activation[0], 24 * layer);
  p.vchunks = 2;
  // 24 layers x (1 + 3/8) = 33 layers' worth.
  EXPECT_EQ(run(m, p, "dgx-h100").peak_activation[0], 33 * layer);
}

TEST(ScheduleSim, SameInputSameTrace) {
  ParallelSpec p;
  p.tp = 2;
  p.pp = 2;
  p.dp = 2;
  p.microbatches = 4;
  const ModelSpec m = gpt(4, 1024, 16, 512);
  const ScheduleSimResult a = run(m, p, "dgx-h100", "natural", Fidelity::Flow);
  const ScheduleSimResult b = run(m, p, "dgx-h100", "natural", Fidelity::Flow);
  ASSERT_EQ(a.trace.events.size(), b.trace.events.size());
  for (std::size_t i = 0; i < a.trace.events.size(); ++i) {
    EXPECT_EQ(a.trace.events[i].start, b.trace.events[i].start);
    EXPECT_EQ(a.trace.events[i].end, b.trace.events[i].end);
  }
}

// A collective workload through the Executor interface: each op takes the closed form of
// the algorithm it names, back to back.
TEST(ScheduleSim, CollectiveWorkloadThroughTheExecutorInterface) {
  const Topology topo = resolve_topology("switch:gpus_per_node=8");
  CollectiveWorkload w;
  w.kind = CollKind::AllReduce;
  w.bytes = MiB(64);
  w.ranks = 8;
  w.iterations = 3;
  w.algorithm = "ring";
  const Schedule s = plan_collectives(w);
  Mesh mesh;
  mesh.dims = s.axes;
  const Placement pl = Placement::natural(mesh, topo);
  const ComputeModel compute(gpu_preset("h100"));
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  SimExecutor ex(topo, pl, compute, reg, ScheduleSimOptions{});
  const Trace t = ex.execute(s);
  ASSERT_EQ(t.events.size(), 3u);
  // Ring all-reduce on a 100 GB/s switch, 2 hops of 1 us: 2(p-1) alpha + 2(p-1)/p n beta.
  const double alpha = 2e6, beta = 1.0 / 100e9 * 1e12;
  const double one = 2 * 7 * alpha + 2.0 * 7 / 8 * static_cast<double>(MiB(64)) * beta;
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(static_cast<double>(
                    (t.events[static_cast<std::size_t>(i)].end - t.events[static_cast<std::size_t>(i)].start).ps()),
                one, 2.0);
    EXPECT_NEAR(static_cast<double>(t.events[static_cast<std::size_t>(i)].start.ps()), i * one, 2.0 * (i + 1));
  }
  EXPECT_EQ(ex.name(), "sim:formula");
}

// Link sharing at the iteration level (sim/link_sharing.h), on the MoE example: the
// expert all-to-alls and the DP gradient all-reduces overlap on one DGX H100's NVLink.
// Against the same run with every op timed alone: every op takes at least its time alone,
// some take longer (ep and dp), no link is ever loaded past its rate, the bytes each link
// carries are the same, and the iteration is no shorter. Formula timing ignores the switch.
TEST(ScheduleSim, OpsInFlightShareTheLinksAtFlowFidelity) {
  auto scenario = [](Fidelity f, bool share) {
    ScenarioNode n = ScenarioNode::parse(
        "name: moe\nmodel: {preset: mixtral-8x7b, layers: 4}\n"
        "parallel: {dp: 8, ep: 8, ep_imbalance: 1.3, micro_batch_size: 2, microbatches: 1, zero: 0}\n"
        "topology: dgx-h100\n",
        "test");
    n.set(std::string("run.fidelity=") + to_string(f));
    n.set(std::string("run.link_sharing=") + (share ? "true" : "false"));
    return n.resolve();
  };
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  const TrainingResult shared = simulate_training(scenario(Fidelity::Flow, true), reg);
  const TrainingResult alone = simulate_training(scenario(Fidelity::Flow, false), reg);
  ASSERT_TRUE(shared.sim.links_shared);
  ASSERT_FALSE(alone.sim.links_shared);
  EXPECT_GE(shared.sim.iteration, alone.sim.iteration);
  ASSERT_EQ(shared.sim.trace.events.size(), alone.sim.trace.events.size());
  for (std::size_t i = 0; i < shared.sim.trace.events.size(); ++i) {
    const TraceEvent& a = shared.sim.trace.events[i];
    const TraceEvent& b = alone.sim.trace.events[i];
    EXPECT_GE(a.end - a.start, b.end - b.start) << "op " << a.op;
  }
  EXPECT_GT(shared.sim.sharing_delay.count("ep"), 0U);
  EXPECT_GT(shared.sim.sharing_delay.count("dp"), 0U);
  ASSERT_EQ(shared.sim.link_usage.size(), alone.sim.link_usage.size());
  for (std::size_t l = 0; l < shared.sim.link_usage.size(); ++l) {
    EXPECT_DOUBLE_EQ(shared.sim.link_usage[l].bytes, alone.sim.link_usage[l].bytes) << l;
    EXPECT_LE(shared.sim.link_usage[l].peak, 1 + 1e-9) << l;
  }
  // Same input, same answer.
  EXPECT_EQ(simulate_training(scenario(Fidelity::Flow, true), reg).sim.iteration, shared.sim.iteration);
  EXPECT_EQ(simulate_training(scenario(Fidelity::Formula, true), reg).sim.iteration,
            simulate_training(scenario(Fidelity::Formula, false), reg).sim.iteration);
}

}  // namespace
}  // namespace meshsim

namespace meshsim {
namespace {

// A straggler (issue 38): one of 8 data-parallel GPUs at half speed sets everyone's step: the
// optimizer, which nothing runs beside, takes exactly twice as long; the forward and backward
// a little less than twice (the NCCL kernels beside them take SMs for a smaller share of their
// now longer run). A GPU of the second of two stages slows that stage alone (under the natural
// placement of the order dp, pp, cp, tp, GPU g = dp rank g / 2 of stage g % 2).
TEST(Perturb, AStragglerSetsTheStepAndItsStageIsNamed) {
  const std::string base =
      "model: {preset: gpt3-175b, layers: 4, seq: 1024}\nparallel: {dp: 8, microbatches: 2}\n"
      "topology: dgx-h100\n";
  const TrainingResult nominal =
      simulate_training(ScenarioNode::parse(base, "s.yaml").resolve(), AlgorithmRegistry::builtin(), true);
  const TrainingResult slow =
      simulate_training(ScenarioNode::parse(base + "perturb: {gpu_factors: '5=0.5'}\n", "s.yaml").resolve(),
                        AlgorithmRegistry::builtin(), true);
  EXPECT_NEAR(static_cast<double>(slow.sim.breakdown.optimizer.ps()),
              2.0 * static_cast<double>(nominal.sim.breakdown.optimizer.ps()), 64.0);  // each kernel's ps rounded
  const double compute_ratio =
      static_cast<double>(slow.sim.breakdown.compute.ps()) / static_cast<double>(nominal.sim.breakdown.compute.ps());
  EXPECT_GT(compute_ratio, 1.9);
  EXPECT_LE(compute_ratio, 2.0 + 1e-9);
  EXPECT_EQ(slow.nominal_iteration, nominal.sim.iteration);
  EXPECT_GT(slow.sim.iteration, nominal.sim.iteration);
  const TrainingResult staged = simulate_training(
      ScenarioNode::parse(
          "model: {preset: gpt3-175b, layers: 4, seq: 1024}\nparallel: {dp: 4, pp: 2, microbatches: 4}\n"
          "topology: dgx-h100\nperturb: {gpu_factors: '7=0.9,2=1.5'}\n",
          "s.yaml")
          .resolve(),
      AlgorithmRegistry::builtin(), false);
  // GPU 7: dp 3, stage 1; GPU 2 (stage 0) faster than nominal: its stage waits for the others
  EXPECT_EQ(staged.stage_compute_factor, (std::vector<double>{1.0, 0.9}));
}

// A link at factor f: the perturbed cluster has that direction at f of its rate, every other
// link as it was, and the scenario's time grows when the link carries its traffic.
TEST(Perturb, ALinkAtAFactorRunsAtThatFractionOfItsRate) {
  Perturbations p;
  p.links = {{"n0.gpu0 -> n0.nvsw", 0.25}};
  p.links_text = "n0.gpu0 -> n0.nvsw=0.25";
  ClusterCache cache;
  const Topology& nominal = *cache.get("dgx-h100").topology;
  const Topology& slowed = *cache.get("dgx-h100", p).topology;
  int changed = 0;
  for (int l = 0; l < static_cast<int>(nominal.links().size()); ++l) {
    const double a = nominal.link(l).spec.raw.bytes_per_ps(), b = slowed.link(l).spec.raw.bytes_per_ps();
    if (link_name(nominal, l) == "n0.gpu0 -> n0.nvsw") {
      EXPECT_DOUBLE_EQ(b, 0.25 * a);
      ++changed;
    } else {
      EXPECT_DOUBLE_EQ(b, a) << link_name(nominal, l);
    }
  }
  EXPECT_EQ(changed, 1);
}

// A link down: its cable fails both ways, the routes go around it (GPU 0's tensor-parallel
// traffic over PCIe instead of NVLink, 53.55 GB/s against 360), and the iteration slows.
TEST(Perturb, ALinkDownIsRoutedAround) {
  Perturbations p;
  p.links = {{"n0.gpu0 -> n0.nvsw", 0}};
  p.links_text = "n0.gpu0 -> n0.nvsw=down";
  ClusterCache cache;
  ClusterCache::Entry& down = cache.get("dgx-h100", p);
  const Path& route = down.router->path(0, 1);
  for (int l : route.links) EXPECT_FALSE(down.topology->link(l).down) << link_name(*down.topology, l);
  EXPECT_NEAR(route.bottleneck.gbytes_per_s(), 53.55, 1e-9);  // PCIe
  EXPECT_NEAR(cache.get("dgx-h100").router->path(0, 1).bottleneck.gbytes_per_s(), 360, 1e-9);
  const std::string base =
      "model: {layers: 4, hidden: 4096, heads: 32, seq: 2048, vocab: 51200}\n"
      "parallel: {tp: 8, microbatches: 4}\ntopology: dgx-h100\nrun: {fidelity: formula}\n";
  const TrainingResult nominal =
      simulate_training(ScenarioNode::parse(base, "s.yaml").resolve(), AlgorithmRegistry::builtin(), true);
  const TrainingResult slowed = simulate_training(
      ScenarioNode::parse(base + "perturb: {link_factors: 'n0.gpu0 -> n0.nvsw=down'}\n", "s.yaml").resolve(),
      AlgorithmRegistry::builtin(), true);
  EXPECT_GT(slowed.sim.iteration, nominal.sim.iteration);
  EXPECT_EQ(slowed.nominal_iteration, nominal.sim.iteration);
  ASSERT_TRUE(slowed.topology && nominal.topology);  // each result carries the cluster it ran on
  EXPECT_TRUE(slowed.topology->link(0).down);        // link 0: n0.gpu0 -> n0.nvsw
  EXPECT_FALSE(nominal.topology->link(0).down);
}

// Drawn GPU speeds against their distributions (100,000 GPUs, bounds at 5 standard errors):
// normal(SD) clamped at 1 leaves half the GPUs at 1 and the others SD E|z| = SD sqrt(2/pi) below
// it on average; uniform(LO, HI) averages (LO + HI) / 2; stragglers(P, F) slows a fraction P to
// F. A draw depends on the seed and the GPU alone.
TEST(Perturb, DrawnGpuSpeedsFollowTheirDistribution) {
  constexpr int n = 100'000;
  GpuDraw normal{GpuDraw::Kind::Normal, 0.05, 0, 3, "normal(0.05)"};
  int at_one = 0;
  double shortfall = 0;
  for (int g = 0; g < n; ++g) {
    const double f = normal.factor(g);
    ASSERT_GE(f, 0.05);
    ASSERT_LE(f, 1.0);
    if (f == 1.0)
      ++at_one;
    else
      shortfall += 1 - f;
  }
  EXPECT_NEAR(at_one / static_cast<double>(n), 0.5, 5 * 0.5 / std::sqrt(n));
  const double sd_of_mean = 0.05 * std::sqrt(1 - 2 / std::numbers::pi) / std::sqrt(n - at_one);
  EXPECT_NEAR(shortfall / (n - at_one), 0.05 * std::sqrt(2 / std::numbers::pi), 5 * sd_of_mean);
  const GpuDraw uniform{GpuDraw::Kind::Uniform, 0.8, 0.9, 3, "uniform(0.8, 0.9)"};
  const GpuDraw stragglers{GpuDraw::Kind::Stragglers, 0.1, 0.5, 3, "stragglers(0.1, 0.5)"};
  double sum = 0;
  int slow = 0;
  for (int g = 0; g < n; ++g) {
    sum += uniform.factor(g);
    slow += stragglers.factor(g) == 0.5 ? 1 : 0;
    ASSERT_TRUE(stragglers.factor(g) == 0.5 || stragglers.factor(g) == 1.0);
  }
  EXPECT_NEAR(sum / n, 0.85, 5 * 0.1 / std::sqrt(12.0 * n));
  EXPECT_NEAR(slow / static_cast<double>(n), 0.1, 5 * std::sqrt(0.09 / n));
  GpuDraw reseeded = normal;
  reseeded.seed = 4;
  int same = 0;
  for (int g = 0; g < 1000; ++g) {
    EXPECT_EQ(normal.factor(g), GpuDraw(normal).factor(g));
    same += normal.factor(g) == reseeded.factor(g) ? 1 : 0;
  }
  EXPECT_LT(same, 700);  // only the GPUs both draws clamp at 1 agree (about half)
}

// Every GPU a straggler at 0.5 is the stage at 0.5: the same iteration as naming one of its GPUs.
TEST(Perturb, AllStragglersEqualTheStageAtTheirFactor) {
  const std::string base =
      "model: {layers: 4, hidden: 4096, heads: 32, seq: 2048, vocab: 51200}\n"
      "parallel: {tp: 8, microbatches: 4}\ntopology: dgx-h100\nrun: {fidelity: formula}\n";
  const AlgorithmRegistry& algorithms = AlgorithmRegistry::builtin();
  const TrainingResult drawn = simulate_training(
      ScenarioNode::parse(base + "perturb: {gpu_draw: 'stragglers(1, 0.5)', seed: 9}\n", "s.yaml").resolve(),
      algorithms, true);
  const TrainingResult named = simulate_training(
      ScenarioNode::parse(base + "perturb: {gpu_factors: '3=0.5'}\n", "s.yaml").resolve(), algorithms, true);
  EXPECT_EQ(drawn.stage_compute_factor, (std::vector<double>{0.5}));
  EXPECT_EQ(drawn.sim.iteration, named.sim.iteration);
  EXPECT_GT(drawn.sim.iteration, drawn.nominal_iteration);
}

// Flow fidelity runs an iteration's distinct collective timings side by side
// (Costing::prefetch) and gives, to the picosecond and the byte, what timing them one by one on
// the caller's router gives: every op's start and end, each link's bytes and peak, the busiest
// links and the count of timings. TP, PP and DP with ZeRO-1 on two DGX H100 nodes: a dozen
// timings of several kinds, whose link profiles the iteration's link sharing then reads by
// index, so timings kept out of order would move ops. Four threads, so that they run side by
// side even where the machine has fewer cores.
TEST(ScheduleSim, FlowTimingsSideBySideEqualOneByOne) {
  const Topology topo = resolve_topology("dgx-h100:nodes=2");
  ParallelSpec p;
  p.tp = 2;
  p.pp = 2;
  p.dp = 4;
  p.zero = 1;
  p.microbatches = 4;
  Mesh mesh;
  mesh.dims = mesh_axes(p);
  const Placement pl = Placement::natural(mesh, topo);
  const Schedule schedule = plan_iteration(testing::gpt_model(4, 1024, 16, 512, 32768), p);
  const ComputeModel compute(gpu_preset("h100"));
  const auto run = [&](bool side_by_side) {
    ScheduleSimOptions opt;
    opt.fidelity = Fidelity::Flow;
    opt.parallel_timings = side_by_side;
    Router router(topo);
    tbb::task_arena arena(4);
    return arena.execute(
        [&] { return simulate_schedule(schedule, topo, router, pl, compute, AlgorithmRegistry::builtin(), opt); });
  };
  const ScheduleSimResult one = run(false), side = run(true);
  ASSERT_GE(one.distinct_collectives, 8);
  EXPECT_EQ(side.distinct_collectives, one.distinct_collectives);
  EXPECT_EQ(side.iteration, one.iteration);
  ASSERT_EQ(side.trace.events.size(), one.trace.events.size());
  for (std::size_t i = 0; i < one.trace.events.size(); ++i) {
    EXPECT_EQ(side.trace.events[i].start, one.trace.events[i].start) << i;
    EXPECT_EQ(side.trace.events[i].end, one.trace.events[i].end) << i;
  }
  ASSERT_EQ(side.link_usage.size(), one.link_usage.size());
  for (std::size_t l = 0; l < one.link_usage.size(); ++l) {
    EXPECT_EQ(side.link_usage[l].bytes, one.link_usage[l].bytes) << l;
    EXPECT_EQ(side.link_usage[l].peak, one.link_usage[l].peak) << l;
  }
  ASSERT_EQ(side.top_links.size(), one.top_links.size());
  for (std::size_t i = 0; i < one.top_links.size(); ++i) EXPECT_EQ(side.top_links[i].link, one.top_links[i].link);
  EXPECT_TRUE(one.links_shared);
}

}  // namespace
}  // namespace meshsim
