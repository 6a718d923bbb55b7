// Several jobs on one fabric (simulate_jobs): hand-worked sharing of a spine link, jobs that
// share no link, one job against simulate_schedule, and the scenario's jobs: section.
#include <gtest/gtest.h>

#include "core/error.h"
#include "sim/scenario.h"
#include "sim/schedule_sim.h"
#include "sim/training_sim.h"
#include "topology/placement.h"
#include "topology/presets.h"

namespace meshsim {
namespace {

// Four one-GPU nodes, two per leaf, one spine; the leaf's uplink is half its two downlinks
// (oversubscription 2), so it carries one NIC's rate: 46 GB/s achievable, as each NIC.
// Protocols off: the flow carries the ring's bytes and nothing else.
constexpr const char* kFourNodes =
    "dgx-h100:gpus_per_node=1,nodes=4,inter=fat-tree,hosts_per_leaf=2,oversubscription=2,protocols=none";

// One stage that all-reduces `bytes` over a data-parallel group of two with the ring.
Schedule one_allreduce(Bytes bytes) {
  Schedule s;
  s.axes = {{"dp", 2}};
  s.pp_axis = {};
  Role& r = s.roles.emplace_back();
  Op ar;
  ar.kind = OpKind::Collective;
  ar.coll = CollKind::AllReduce;
  ar.stream = Stream::Dp;
  ar.axis = MeshAxis::dp();
  ar.algorithm = "ring";
  ar.name = "dp.allreduce";
  ar.bytes = bytes;
  ar.group_size = 2;
  r.ops = {ar};
  return s;
}

struct TwoJobs {
  Topology topo = resolve_topology(kFourNodes);
  Router router{topo};
  ComputeModel compute{gpu_preset("h100")};
  Schedule schedule = one_allreduce(Bytes{1} << 30);
  std::vector<Placement> placements;
  std::vector<ScheduleSimResult> run(const std::vector<std::vector<int>>& gpus) {
    placements.clear();
    for (const auto& g : gpus) placements.push_back(Placement::explicit_list(Mesh{schedule.axes}, topo, g));
    std::vector<ScheduleJob> jobs;
    ScheduleSimOptions opt;
    opt.fidelity = Fidelity::Flow;
    for (const Placement& p : placements) jobs.push_back({&schedule, &p, &compute, opt});
    return simulate_jobs(jobs, topo, router, AlgorithmRegistry::builtin());
  }
};

// Job A rings GPUs 0 and 2, job B GPUs 1 and 3: both cross leaf0 -> spine0 -> leaf1 and back,
// each link one NIC's rate. Alone, a job's ring all-reduce of B bytes puts 2(p-1)/p B = B on
// each direction of the spine links, at the NIC's rate (T = B / 46 GB/s plus the hops'
// latency). Together, the two jobs fill the spine links and split them evenly: each moves its
// B bytes at half the link's rate, 2B / 46 GB/s, the closed form of a link shared by two
// equal flows (the fluid model absorbs the few microseconds of latency into the sharing).
TEST(Jobs, TwoJobsThatShareEverySpineLinkEachTakeTheSharedTime) {
  TwoJobs t;
  const double bytes = static_cast<double>(Bytes{1} << 30);
  const double cap = 46e9;  // 400 Gb/s x 0.92
  const auto alone = t.run({{0, 2}});
  ASSERT_EQ(alone.size(), 1U);
  EXPECT_NEAR(alone[0].iteration.seconds(), bytes / cap, 1e-3 * bytes / cap);
  EXPECT_GT(alone[0].iteration.seconds(), bytes / cap);  // plus the latency
  const auto both = t.run({{0, 2}, {1, 3}});
  ASSERT_EQ(both.size(), 2U);
  for (const ScheduleSimResult& r : both) {
    EXPECT_NEAR(r.iteration.seconds(), 2 * bytes / cap, 1e-9 * bytes / cap);
    EXPECT_TRUE(r.links_shared);
  }
  // Each job's own figures: one stage, its op slowed by the sharing.
  EXPECT_EQ(both[1].trace.events.size(), 1U);
  EXPECT_EQ(both[1].trace.events[0].role, 0);
  ASSERT_EQ(both[0].sharing_delay.count("dp"), 1U);
  EXPECT_EQ(both[0].sharing_delay.at("dp").first, 1);
}

// Job A on leaf 0's two nodes and job B on leaf 1's share no link: together each takes
// exactly its time alone.
TEST(Jobs, JobsThatShareNoLinkTakeTheirTimeAlone) {
  TwoJobs t;
  const Time a = t.run({{0, 1}})[0].iteration, b = t.run({{2, 3}})[0].iteration;
  const auto both = t.run({{0, 1}, {2, 3}});
  EXPECT_EQ(both[0].iteration, a);
  EXPECT_EQ(both[1].iteration, b);
  EXPECT_EQ(a, b);  // the two leaves are alike
}

// One job is simulate_schedule, to the picosecond and op by op, on a planned iteration.
TEST(Jobs, OneJobIsSimulateSchedule) {
  Scenario s = ScenarioNode::parse(
                   "model: {preset: gpt-22b, layers: 4}\n"
                   "parallel: {dp: 2, tp: 8, pp: 2, microbatches: 4, zero: 1}\n"
                   "topology: dgx-h100:nodes=4,inter=fat-tree\nrun: {fidelity: flow}\n",
                   "test")
                   .resolve();
  const Topology topo = resolve_topology(s.topology);
  Router router(topo);
  const Placement pl = training_placement(s, topo);
  const Schedule schedule = plan_iteration(check_layout(s.model, s.parallel, topo.num_gpus()));
  const ComputeModel compute(gpu_preset("h100"));
  ScheduleSimOptions opt;
  opt.fidelity = Fidelity::Flow;
  const ScheduleSimResult one =
      simulate_schedule(schedule, topo, router, pl, compute, AlgorithmRegistry::builtin(), opt);
  const auto jobs = simulate_jobs({{&schedule, &pl, &compute, opt}}, topo, router, AlgorithmRegistry::builtin());
  ASSERT_EQ(jobs.size(), 1U);
  EXPECT_EQ(jobs[0].iteration, one.iteration);
  ASSERT_EQ(jobs[0].trace.events.size(), one.trace.events.size());
  for (std::size_t i = 0; i < one.trace.events.size(); ++i)
    EXPECT_EQ(jobs[0].trace.events[i].end, one.trace.events[i].end);
}

// The same two one-stage jobs as a scenario: a job's pipeline sends meet only its own
// receives (tags kept apart), and the jobs: section resolves each job on its own GPUs.
constexpr const char* kTwoJobs =
    "name: two\n"
    "model: {preset: gpt-22b, layers: 4}\n"
    "parallel: {dp: auto, tp: 8, pp: 2, microbatches: 4, zero: 1}\n"
    "topology: dgx-h100:nodes=8,inter=fat-tree,hosts_per_leaf=2,oversubscription=2\n"
    "run: {fidelity: flow}\n"
    "jobs:\n"
    "  - {name: a, nodes: '0,2,4,6'}\n"
    "  - {name: b, nodes: '1,3,5,7', parallel: {dp: 1, tp: 8, pp: 4, microbatches: 4}}\n";

TEST(Jobs, ScenarioJobsResolveOnTheirOwnGpus) {
  const Scenario s = ScenarioNode::parse(kTwoJobs, "test").resolve();
  ASSERT_EQ(s.jobs.size(), 2U);
  EXPECT_EQ(s.name, "two");
  const Scenario& a = s.jobs[0];
  const Scenario& b = s.jobs[1];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(a.parallel.dp, 2);  // auto: the job's 32 GPUs over pp x tp = 16
  EXPECT_EQ(b.parallel.pp, 4);
  EXPECT_EQ(b.parallel.dp, 1);
  ASSERT_EQ(a.gpus.size(), 32U);
  EXPECT_EQ(a.gpus[8], 16);  // node 2's first GPU
  EXPECT_EQ(b.gpus[0], 8);
  const Topology topo = resolve_topology(s.topology);
  const Placement pa = training_placement(a, topo);
  EXPECT_EQ(pa.gpu_of(9), 17);  // natural over the job's GPUs
}

TEST(Jobs, ScenarioJobsSlowEachOtherWhereTheyShareLinks) {
  const JobsResult r = simulate_jobs(ScenarioNode::parse(kTwoJobs, "test").resolve(), AlgorithmRegistry::builtin());
  ASSERT_EQ(r.alone.size(), 2U);
  for (std::size_t j = 0; j < 2; ++j) {
    EXPECT_GE(r.together[j].sim.iteration, r.alone[j].sim.iteration);
    EXPECT_EQ(r.together[j].gpus, 32);
    EXPECT_EQ(r.together[j].stages.size(), static_cast<std::size_t>(r.together[j].scenario.parallel.pp));
  }
  // Both jobs' data-parallel and pipeline traffic crosses the shared leaf uplinks.
  EXPECT_GT(r.together[0].sim.iteration, r.alone[0].sim.iteration);
}

void expect_error(const std::string& yaml, const std::string& part) {
  try {
    const Scenario s = ScenarioNode::parse(yaml, "test").resolve();
    simulate_jobs(s, AlgorithmRegistry::builtin());
    ADD_FAILURE() << "no error for:\n" << yaml;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(Jobs, BadJobsNameTheField) {
  const std::string head =
      "model: {preset: gpt-22b, layers: 4}\nparallel: {dp: auto, tp: 8}\n"
      "topology: dgx-h100:nodes=4,inter=fat-tree\nrun: {fidelity: flow}\n";
  expect_error(head + "jobs: [{nodes: 0-1}, {nodes: 1-2}]\n", "jobs[1]: GPU 8 is also job 0's ('job0')");
  expect_error(head + "jobs: [{nodes: 0-4}]\n", "jobs[0].nodes: node 4 is not in the topology (nodes 0..3)");
  expect_error(head + "jobs: [{nodes: 0-1, gpus: 0-15}]\n", "jobs[0]: give the job's nodes");
  expect_error(head + "jobs: [{nodes: 2-1}]\n", "jobs[0].nodes: '2-1' is not a node index or range");
  expect_error(head + "jobs: []\n", "jobs: expected a list");
  expect_error(head + "jobs: [{nodes: 0-1, run: {fidelity: flow}}]\n", "jobs[0]: unknown key 'run'");
  expect_error(head + "jobs: [{nodes: 0-1, parallel: {dp: 4, tp: 8}}]\n", "jobs[0].nodes = 0-1 has 16");
  expect_error(head + "jobs: [{gpus: 0-15, placement: 'bunched:8'}]\n", "give it nodes");
  expect_error(
      head + "jobs: [{nodes: 0-1, placement: 'list:" +
          [] {
            std::string l;
            for (int g = 16; g < 32; ++g) l += (g > 16 ? "," : "") + std::to_string(g);
            return l;
          }() +
          "'}]\n",
      "placement: GPU 16 is not job 'job0''s");
  expect_error("model: gpt-22b\nparallel: {tp: 8}\ntopology: dgx-h100:nodes=2\njobs: [{nodes: 0}, {nodes: 1}]\n",
               "run.fidelity: flow");
}

TEST(Jobs, OtherCommandsRefuseJobs) {
  const Scenario s = ScenarioNode::parse(kTwoJobs, "test").resolve();
  EXPECT_THROW(require_training(s, "memory"), Error);
  EXPECT_THROW(simulate_training(s, AlgorithmRegistry::builtin()), Error);
}

TEST(Jobs, SetReachesAJobsFields) {
  ScenarioNode n = ScenarioNode::parse(kTwoJobs, "test");
  n.set("jobs.1.parallel.pp=2");
  n.set("jobs.1.parallel.dp=2");
  EXPECT_EQ(n.resolve().jobs[1].parallel.pp, 2);
  EXPECT_THROW(n.set("jobs.2.name=c"), Error);
  EXPECT_THROW(n.set("jobs.1=x"), Error);
}

}  // namespace
}  // namespace meshsim
