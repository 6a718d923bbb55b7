// The flow model on hand-built topologies, with the expected times worked out by hand.
#include "sim/flow_network.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <random>

#include "sim/sim_test_util.h"
#include "topology/presets.h"

namespace meshsim {
namespace {

using sim_testing::star3;

struct Drains : FlowListener {
  std::map<std::uint64_t, std::int64_t> at;
  void flow_drained(std::uint64_t tag, Time now) override { at[tag] = now.ps(); }
};

// Flows 0->2 and 1->2 share the switch->g2 link. Each 1000 B: both at 0.5 B/ps, so both
// drain at t = 2000 ps. A lone flow 0->1 of 1000 B drains at 1000 ps.
TEST(FlowNetwork, SharedDownlinkHalvesTheRate) {
  Topology t = star3();
  Router r(t);
  Engine eng;
  Drains d;
  FlowNetwork net(eng, t, d);
  net.start(r.path(0, 2).links, 1000, 1);
  net.start(r.path(1, 2).links, 1000, 2);
  eng.run();
  EXPECT_EQ(d.at[1], 2000);
  EXPECT_EQ(d.at[2], 2000);
}

// A (0->2, 1000 B) and B (1->2, 3000 B) share g2's downlink.
// Until A drains both run at 0.5: A done at 2000 ps, B has 3000 - 1000 = 2000 left.
// Then B runs alone at 1 B/ps: done at 2000 + 2000 = 4000 ps.
TEST(FlowNetwork, RatesRecomputedWhenAFlowFinishes) {
  Topology t = star3();
  Router r(t);
  Engine eng;
  Drains d;
  FlowNetwork net(eng, t, d);
  net.start(r.path(0, 2).links, 1000, 1);
  net.start(r.path(1, 2).links, 3000, 2);
  eng.run();
  EXPECT_EQ(d.at[1], 2000);
  EXPECT_EQ(d.at[2], 4000);
  // g2's downlink carried both flows: 4000 bytes, at most 2 at once.
  const int down = r.path(1, 2).links.back();
  EXPECT_DOUBLE_EQ(net.link_stats()[down].bytes, 4000);
  EXPECT_EQ(net.link_stats()[down].peak_flows, 2);
}

// A flow joining later: A (0->2, 2000 B) starts at 0; at 1000 ps B (1->2, 500 B) joins.
// A alone until 1000 ps: 1000 B left. Then both at 0.5: B drains after 1000 ps (t=2000),
// A has 500 left, alone again: t = 2500.
struct Starter : EventHandler {
  FlowNetwork* net = nullptr;
  std::span<const int> links;
  void handle(const Event&) override { net->start(links, 500, 2); }
};

TEST(FlowNetwork, LateJoinerSharesFromItsStart) {
  Topology t = star3();
  Router r(t);
  Engine eng;
  Drains d;
  FlowNetwork net(eng, t, d);
  Starter s;
  s.net = &net;
  s.links = r.path(1, 2).links;
  net.start(r.path(0, 2).links, 2000, 1);
  eng.schedule(ps(1000), &s, 0, 0);
  eng.run();
  EXPECT_EQ(d.at[2], 2000);
  EXPECT_EQ(d.at[1], 2500);
}

// Eight flows between two leaves of a fat-tree (GPU i of node 0 to GPU i of node 1, 46 MB
// each; NICs and uplinks all 400 Gb/s x 0.92 = 0.046 B/ps). Under ECMP each flow is hashed onto
// one of the 8 spines, and a spine link that k flows share gives each 1/k of it: the last
// drains at k_max x 1e9 ps, k_max counted from the routes here. Under adaptive routing the
// leaf's uplinks are one pooled link of 8 x 0.046 B/ps, so every flow runs at its NIC's rate
// and all drain at 1e9 ps.
std::int64_t last_drain_between_leaves(const std::string& routing, int* k_max) {
  const Topology t = make_preset("fat-tree", {{"nodes", "2"}, {"hosts_per_leaf", "1"}, {"routing", routing}});
  Router r(t);
  Engine eng;
  Drains d;
  FlowNetwork net(eng, t, d);
  std::map<int, int> flows_on;
  for (int i = 0; i < 8; ++i) {
    const Path& p = r.path(i, 8 + i);
    for (int l : p.links) ++flows_on[l];
    net.start(p.links, 46'000'000, static_cast<std::uint64_t>(i));
  }
  eng.run();
  *k_max = 0;
  for (const auto& [link, n] : flows_on)
    if (link_tier(t, link) == "leaf-spine") *k_max = std::max(*k_max, n);
  std::int64_t last = 0;
  for (const auto& [tag, at] : d.at) last = std::max(last, at);
  return last;
}

TEST(FlowNetwork, AdaptiveRoutingPoolsALeafsUplinks) {
  int k_ecmp = 0, k_adaptive = 0;
  const std::int64_t ecmp = last_drain_between_leaves("ecmp", &k_ecmp);
  const std::int64_t adaptive = last_drain_between_leaves("adaptive", &k_adaptive);
  EXPECT_NEAR(static_cast<double>(adaptive), 1e9, 1.0);
  EXPECT_EQ(k_adaptive, 8);  // the pooled link carries all eight
  // Eight flows hashed onto eight spines collide unless the hash is a permutation (8!/8^8 = 0.24%):
  // these do, which is the case adaptive routing exists for.
  ASSERT_GE(k_ecmp, 2);
  EXPECT_NEAR(static_cast<double>(ecmp), k_ecmp * 1e9, k_ecmp * 1.0);
}

// Records and resumes (flow_network.h) change how rates are found, never what they are:
// random traffic on a 64-GPU ECMP fat-tree (collisions on the spines, so components need
// many rounds) drains every flow at the same picosecond whether every component of two or
// more flows keeps a record, only large ones do, or none does (every change solved in full).
// Flows start in waves (an all-to-all's burst, then instants where new flows start as old
// ones drain, which take the full path) and some with no later starts (the resumed path).
struct Traffic : FlowListener, EventHandler {
  FlowNetwork* net = nullptr;
  Router* router = nullptr;
  std::mt19937_64 rng{11};
  std::map<std::uint64_t, std::int64_t> at;
  std::uint64_t next_tag = 0;
  int gpus = 0;
  bool split = false;  // each flow inside one leaf's 32 GPUs: two systems with no link in common
  void start_random() {
    const int span = split ? gpus / 2 : gpus;
    const int base = split ? span * static_cast<int>(rng() % 2) : 0;
    const int src = base + static_cast<int>(rng() % static_cast<std::uint64_t>(span));
    int dst = base + static_cast<int>(rng() % static_cast<std::uint64_t>(span - 1));
    if (dst >= src) ++dst;
    net->start(router->path(src, dst).links, static_cast<Bytes>(1 + rng() % 3) * 1'000'000, next_tag++);
  }
  void flow_drained(std::uint64_t tag, Time now) override {
    at[tag] = now.ps();
    if (tag % 5 == 0 && next_tag < 6000) start_random();  // some drains start a new flow
  }
  void handle(const Event& e) override {
    for (std::uint64_t i = 0; i < e.payload; ++i) start_random();
  }
};

struct TrafficRun {
  std::map<std::uint64_t, std::int64_t> drains;  // per flow tag
  std::vector<LinkUse> used;
  std::uint64_t resumes = 0;
};

TrafficRun random_traffic_on(const Topology& t, std::size_t record_flows, bool split,
                             FlowNetwork::Scratch* scratch = nullptr) {
  Router r(t);
  Engine eng;
  Traffic traffic;
  FlowNetwork net(eng, t, traffic, record_flows, scratch);
  traffic.net = &net;
  traffic.router = &r;
  traffic.gpus = t.num_gpus();
  traffic.split = split;
  eng.schedule(Time{}, &traffic, 0, 3000);  // a burst
  eng.schedule(us(40), &traffic, 0, 200);   // a wave among the drains
  eng.schedule(us(41), &traffic, 0, 1);     // and one lone newcomer
  eng.run();
  TrafficRun out{traffic.at, net.used_links(), net.resumes()};
  // The list holds exactly the links with flows, as the per-link table has them.
  std::size_t with_flows = 0;
  for (std::size_t l = 0; l < net.link_stats().size(); ++l) {
    const LinkStats& s = net.link_stats()[l];
    if (s.peak_flows == 0) continue;
    ++with_flows;
    const LinkStats listed = stats_of(out.used, static_cast<int>(l));
    EXPECT_EQ(listed.bytes, s.bytes) << l;
    EXPECT_EQ(listed.peak_flows, s.peak_flows) << l;
  }
  EXPECT_EQ(out.used.size(), with_flows);
  return out;
}

std::map<std::uint64_t, std::int64_t> random_traffic(std::size_t record_flows, std::uint64_t* resumes,
                                                     bool split = false) {
  const Topology t = make_preset("fat-tree", {{"nodes", "8"}});  // 4 nodes of 8 GPUs a leaf
  TrafficRun run = random_traffic_on(t, record_flows, split);
  *resumes = run.resumes;
  return run.drains;
}

TEST(FlowNetwork, ResumedSolvesEqualFullSolves) {
  std::uint64_t resumes_none = 0, resumes_large = 0, resumes_all = 0;
  const auto full = random_traffic(std::numeric_limits<std::size_t>::max(), &resumes_none);
  const auto large = random_traffic(FlowNetwork::kRecordFlows, &resumes_large);
  const auto all = random_traffic(2, &resumes_all);
  EXPECT_EQ(resumes_none, 0u);
  EXPECT_GT(resumes_large, 100u);  // the resumed path ran
  EXPECT_GT(resumes_all, resumes_large);
  ASSERT_GT(full.size(), 3200u);
  EXPECT_EQ(large, full);
  EXPECT_EQ(all, full);
}

// The same with the traffic kept inside each of two leaves: two systems with no link in
// common, each with records of its own, drains in one beside starts in the other.
TEST(FlowNetwork, ResumedSolvesBesideStartsElsewhereEqualFullSolves) {
  std::uint64_t resumes_none = 0, resumes_large = 0, resumes_all = 0;
  const auto full = random_traffic(std::numeric_limits<std::size_t>::max(), &resumes_none, true);
  const auto large = random_traffic(FlowNetwork::kRecordFlows, &resumes_large, true);
  const auto all = random_traffic(2, &resumes_all, true);
  EXPECT_EQ(resumes_none, 0u);
  EXPECT_GT(resumes_large, 100u);
  ASSERT_GT(full.size(), 3200u);
  EXPECT_EQ(large, full);
  EXPECT_EQ(all, full);
}

// Networks run one after another on one Scratch (as a training iteration's distinct
// collectives do) drain every flow and count every link's bytes and peak exactly as networks
// with scratches of their own: each run leaves the links it touched empty for the next. The
// runs differ (all GPUs, then two leaves apart, then all GPUs with every component
// recorded), so a link the first run loaded and the second did not would carry the first
// run's bytes or flows into the third if it were left behind.
TEST(FlowNetwork, RunsSharingAScratchEqualRunsWithTheirOwn) {
  const Topology t = make_preset("fat-tree", {{"nodes", "8"}});
  FlowNetwork::Scratch scratch(t);
  const std::vector<std::pair<std::size_t, bool>> runs = {
      {FlowNetwork::kRecordFlows, false}, {FlowNetwork::kRecordFlows, true}, {2, false}};
  for (const auto& [record_flows, split] : runs) {
    const TrafficRun shared = random_traffic_on(t, record_flows, split, &scratch);
    const TrafficRun own = random_traffic_on(t, record_flows, split);
    ASSERT_GT(own.drains.size(), 3200u);
    EXPECT_EQ(shared.drains, own.drains) << record_flows << " " << split;
    EXPECT_EQ(shared.resumes, own.resumes);
    ASSERT_EQ(shared.used.size(), own.used.size());
    for (std::size_t i = 0; i < own.used.size(); ++i) {
      EXPECT_EQ(shared.used[i].link, own.used[i].link);
      EXPECT_EQ(shared.used[i].stats.bytes, own.used[i].stats.bytes);
      EXPECT_EQ(shared.used[i].stats.peak_flows, own.used[i].stats.peak_flows);
    }
  }
  EXPECT_LT(random_traffic_on(t, 2, true).used.size(), random_traffic_on(t, 2, false).used.size());
}

}  // namespace
}  // namespace meshsim
