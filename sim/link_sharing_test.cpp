// Link sharing between ops in flight, on a hand-built star with the expected speeds and
// ends worked out by hand (the progressive filling of sim/link_sharing.h).
#include "sim/link_sharing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "sim/sim_test_util.h"
#include "topology/presets.h"

namespace meshsim {
namespace {

using sim_testing::star3;

constexpr int kToG0 = 1, kToG2 = 5;

std::vector<LinkStats> bytes_on(std::map<int, double> by_link) {
  std::vector<LinkStats> s(6);
  for (const auto& [l, b] : by_link) s[static_cast<std::size_t>(l)].bytes = b;
  return s;
}

Time ps(std::int64_t v) { return Time::from_ps(v); }

// The ends each call reported, by op (the latest report wins, as the runner's events do).
struct Ends {
  std::map<int, std::int64_t> at;
  std::vector<std::pair<int, Time>> buf;
  void take() {
    for (const auto& [op, t] : buf) at[op] = t.ps();
    buf.clear();
  }
};

// The sharing as it was before links were grouped into classes (every link kept on its own),
// the reference the classes must match to the bit: the same progressive filling over a
// component's full links, link by link.
class LinkByLink {
 public:
  explicit LinkByLink(const Topology& topo)
      : full_(topo.links().size(), 0.0),
        cur_(topo.links().size(), 0.0),
        on_(topo.links().size()),
        peak_(topo.links().size(), 0.0) {
    for (const DirLink& l : topo.links()) {
      cap_.push_back(l.spec.effective().bytes_per_ps());
      limit_.push_back(cap_.back() * (1 + 1e-9));
    }
  }
  int add_profile(Time alone, const std::vector<LinkStats>& stats) {
    Prof p{static_cast<double>(alone.ps()), {}};
    for (std::size_t l = 0; l < stats.size() && l < cap_.size(); ++l) {
      const double u = stats[l].bytes > 0 && p.alone > 0 ? std::min(stats[l].bytes / p.alone, cap_[l]) : 0.0;
      if (u > 0) p.loads.emplace_back(static_cast<int>(l), u);
    }
    profiles_.push_back(p);
    return static_cast<int>(profiles_.size()) - 1;
  }
  void start(int op, int profile, Time now, std::vector<std::pair<int, Time>>& changed) {
    if (static_cast<std::size_t>(op) >= ops_.size()) ops_.resize(static_cast<std::size_t>(op) + 1);
    ops_[static_cast<std::size_t>(op)] = Op{profile, profiles_[static_cast<std::size_t>(profile)].alone, 0, now, true};
    for (const auto& [l, u] : loads(op)) {
      full_[l] += u;
      on_[l].push_back(op);
    }
    resolve(component({op}), now, changed, op);
  }
  void finish(int op, Time now, std::vector<std::pair<int, Time>>& changed) {
    std::vector<int> seeds;
    Op& a = ops_[static_cast<std::size_t>(op)];
    for (const auto& [l, u] : loads(op)) {
      if (full_[l] > limit_[l])
        for (int j : on_[l])
          if (j != op) seeds.push_back(j);
      cur_[l] += (0.0 - a.speed) * u;
      if (on_[l].size() <= 1) cur_[l] = 0;
      full_[l] -= u;
      on_[l].erase(std::find(on_[l].begin(), on_[l].end(), op));
      if (on_[l].empty()) full_[l] = 0;
    }
    a.speed = 0;
    a.active = false;
    resolve(component(seeds), now, changed, -1);
  }
  const std::vector<double>& peaks() const { return peak_; }

 private:
  struct Prof {
    double alone;
    std::vector<std::pair<int, double>> loads;
  };
  struct Op {
    int profile = -1;
    double work = 0, speed = 0;
    Time since;
    bool active = false;
  };
  const std::vector<std::pair<int, double>>& loads(int op) const {
    return profiles_[static_cast<std::size_t>(ops_[static_cast<std::size_t>(op)].profile)].loads;
  }
  bool full(int l) const { return full_[l] > limit_[l]; }
  std::vector<int> component(const std::vector<int>& seeds) const {
    std::vector<int> out;
    auto add = [&](int j) {
      if (ops_[static_cast<std::size_t>(j)].active && std::find(out.begin(), out.end(), j) == out.end())
        out.push_back(j);
    };
    for (int j : seeds) add(j);
    for (std::size_t k = 0; k < out.size(); ++k)
      for (const auto& [l, u] : loads(out[k]))
        if (full(l))
          for (int j : on_[l]) add(j);
    return out;
  }
  void resolve(const std::vector<int>& ops, Time now, std::vector<std::pair<int, Time>>& changed, int started) {
    if (ops.empty()) return;
    for (int i : ops) {
      Op& a = ops_[static_cast<std::size_t>(i)];
      a.work = std::max(0.0, a.work - a.speed * static_cast<double>((now - a.since).ps()));
      a.since = now;
    }
    // Progressive filling over the full links, in the order the ops reach them.
    std::vector<int> links;
    std::vector<double> rem, weight;
    std::vector<std::vector<std::pair<std::size_t, double>>> members, op_links(ops.size());
    for (std::size_t i = 0; i < ops.size(); ++i)
      for (const auto& [l, u] : loads(ops[i])) {
        if (!full(l)) continue;
        auto it = std::find(links.begin(), links.end(), l);
        const auto k = static_cast<std::size_t>(it - links.begin());
        if (it == links.end()) {
          links.push_back(l);
          rem.push_back(cap_[l]);
          weight.push_back(0);
          members.emplace_back();
        }
        weight[k] += u;
        members[k].emplace_back(i, u);
        op_links[i].emplace_back(k, u);
      }
    std::vector<double> speed(ops.size(), -1.0);
    std::size_t unfixed = ops.size();
    double level = 0;
    while (unfixed > 0) {
      double step = 1 - level;
      for (std::size_t k = 0; k < links.size(); ++k)
        if (weight[k] > 0) step = std::min(step, std::max(0.0, rem[k]) / weight[k]);
      level += step;
      for (std::size_t k = 0; k < links.size(); ++k) rem[k] -= step * weight[k];
      if (level >= 1 - 1e-9) {
        for (double& v : speed)
          if (v < 0) v = 1;
        break;
      }
      for (std::size_t k = 0; k < links.size(); ++k) {
        if (weight[k] <= 0 || rem[k] > 1e-9 * cap_[links[k]]) continue;
        for (const auto& [i, u] : members[k]) {
          if (speed[i] >= 0) continue;
          speed[i] = level;
          --unfixed;
          for (const auto& [k2, u2] : op_links[i]) weight[k2] -= u2;
        }
        weight[k] = 0;
      }
    }
    std::vector<int> moved;
    for (std::size_t k = 0; k < ops.size(); ++k) {
      Op& a = ops_[static_cast<std::size_t>(ops[k])];
      if (speed[k] == a.speed && ops[k] != started) continue;
      for (const auto& [l, u] : loads(ops[k])) {
        cur_[l] += (speed[k] - a.speed) * u;
        if (speed[k] == 0 && on_[l].size() <= 1) cur_[l] = 0;
      }
      a.speed = speed[k];
      moved.push_back(ops[k]);
      changed.emplace_back(ops[k], now + duration_ps(a.work / speed[k], "an op's end"));
    }
    for (int i : moved)
      for (const auto& [l, u] : loads(i)) peak_[l] = std::max(peak_[l], cur_[l] / cap_[l]);
  }
  std::vector<double> cap_, limit_, full_, cur_;
  std::vector<std::vector<int>> on_;
  std::vector<double> peak_;
  std::vector<Prof> profiles_;
  std::vector<Op> ops_;
};

// Classes of alike links change no bit of the result. On four DGX H100 nodes, profiles in the
// shapes an iteration has (a TP op on every GPU's NVLink links, a DP op on the NICs of two nodes,
// a pipeline send on a few links, each at its own rate) start and end in a random order that
// makes them overlap, and some profiles arrive while ops run; every reported end, and every
// link's peak load, equals the link-by-link reference's exactly.
TEST(LinkSharing, ClassesOfAlikeLinksMatchTheLinkByLinkSharingExactly) {
  const Topology t = resolve_topology("dgx-h100:nodes=4");
  LinkSharing s(t);
  LinkByLink ref(t);
  std::mt19937 rng(7);
  auto stats_on = [&](auto&& pick, double bytes) {
    std::vector<LinkStats> st(t.links().size());
    for (std::size_t l = 0; l < st.size(); ++l)
      if (pick(t.link(static_cast<int>(l)))) st[l].bytes = bytes;
    return st;
  };
  auto kind_is = [&](LinkKind k) { return [&t, k](const DirLink& l) { return l.spec.kind == k; }; };
  std::vector<std::pair<Time, std::vector<LinkStats>>> shapes = {
      {ps(2'000'000), stats_on(kind_is(LinkKind::NvLink), 6e8)},
      {ps(5'000'000), stats_on(kind_is(LinkKind::InfiniBand), 1.5e8)},
      {ps(1'000'000),
       stats_on([&](const DirLink& l) { return l.spec.kind == LinkKind::InfiniBand && t.device(l.from).node == 1; },
                4e7)},
      {ps(3'000'000), stats_on([&](const DirLink& l) { return &l == &t.link(7) || &l == &t.link(40); }, 9e8)},
      {ps(4'000'000), stats_on(kind_is(LinkKind::Pcie), 2.5e8)},
  };
  std::vector<int> ps_new, ps_ref;
  auto add = [&](std::size_t i) {
    ps_new.push_back(s.add_profile(shapes[i].first, shapes[i].second));
    ps_ref.push_back(ref.add_profile(shapes[i].first, shapes[i].second));
  };
  add(0);
  add(1);
  std::map<int, std::int64_t> end_new, end_ref;
  std::vector<std::pair<int, Time>> buf;
  auto take = [&](std::map<int, std::int64_t>& into) {
    for (const auto& [op, at] : buf) into[op] = at.ps();
    buf.clear();
  };
  std::vector<int> running;
  std::int64_t now = 0;
  for (int op = 0; op < 60; ++op) {
    if (op == 20) add(2);
    if (op == 35) add(3), add(4);
    now += static_cast<std::int64_t>(rng() % 400'000);
    // Ops whose end has come finish first, earliest first, as the runner's events would.
    for (;;) {
      int first = -1;
      for (int r : running)
        if (end_new[r] <= now && (first < 0 || end_new[r] < end_new[first])) first = r;
      if (first < 0) break;
      s.finish(first, ps(end_new[first]), buf);
      take(end_new);
      ref.finish(first, ps(end_ref[first]), buf);
      take(end_ref);
      running.erase(std::find(running.begin(), running.end(), first));
    }
    const auto p = static_cast<std::size_t>(rng() % ps_new.size());
    s.start(op, ps_new[p], ps(now), buf);
    take(end_new);
    ref.start(op, ps_ref[p], ps(now), buf);
    take(end_ref);
    running.push_back(op);
    ASSERT_EQ(end_new, end_ref) << "after op " << op << " started";
  }
  EXPECT_GT(s.slowed_ops(), 5) << "the ops must contend for the test to mean anything";
  EXPECT_LT(s.link_classes(), 20) << "the alike links must be grouped";
  const std::vector<LinkUsage> usage = s.link_usage();
  for (std::size_t l = 0; l < usage.size(); ++l) ASSERT_EQ(usage[l].peak, ref.peaks()[l]) << "link " << l;
}

// Two ops that each fill sw->g2 alone (1000 B in 1000 ps) start together: each gets half
// the link, so both end at 2000 ps, and the link's peak load is its rate.
TEST(LinkSharing, TwoOpsOnAFullLinkHalveTheirSpeed) {
  Topology t = star3();
  LinkSharing s(t);
  const int p = s.add_profile(ps(1000), bytes_on({{kToG2, 1000}}));
  Ends e;
  s.start(0, p, ps(0), e.buf);
  e.take();
  EXPECT_EQ(e.at[0], 1000);  // alone so far
  s.start(1, p, ps(0), e.buf);
  e.take();
  EXPECT_EQ(e.at[0], 2000);
  EXPECT_EQ(e.at[1], 2000);
  EXPECT_DOUBLE_EQ(s.link_usage()[kToG2].bytes, 2000);
  EXPECT_NEAR(s.link_usage()[kToG2].peak, 1.0, 1e-12);
  EXPECT_EQ(s.slowed_ops(), 2);
}

// A loads sw->g2 at 1 B/ps for 1000 ps; B loads it at 0.5 B/ps and sw->g0 at 1 B/ps for
// 2000 ps, from t = 500. sw->g2 asks 1.5 of 1: both run at 2/3. A has 500 ps of work left:
// it ends at 500 + 500 / (2/3) = 1250. Then B runs alone: it did 750 x 2/3 = 500 of its
// 2000, so it ends at 1250 + 1500 = 2750.
TEST(LinkSharing, SpeedsRecoverWhenTheSharerEnds) {
  Topology t = star3();
  LinkSharing s(t);
  const int pa = s.add_profile(ps(1000), bytes_on({{kToG2, 1000}}));
  const int pb = s.add_profile(ps(2000), bytes_on({{kToG2, 1000}, {kToG0, 2000}}));
  Ends e;
  s.start(0, pa, ps(0), e.buf);
  s.start(1, pb, ps(500), e.buf);
  e.take();
  EXPECT_EQ(e.at[0], 1250);
  EXPECT_EQ(e.at[1], 3500);  // 500 + 2000 / (2/3), until A ends
  s.finish(0, ps(1250), e.buf);
  e.take();
  EXPECT_EQ(e.at[1], 2750);
  s.finish(1, ps(2750), e.buf);
  e.take();
  EXPECT_EQ(e.buf.size(), 0U);
}

// Max-min over two links: A on sw->g2 (1), B on sw->g2 (1) and sw->g0 (1), C on sw->g0
// (0.5). sw->g2 asks 2, sw->g0 1.5: sw->g2 fills first at speed 1/2 and fixes A and B.
// sw->g0 then has 1 - 0.5 = 0.5 left for C's 0.5: C runs at full speed.
TEST(LinkSharing, MaxMinFixesTheTighterLinkFirst) {
  Topology t = star3();
  LinkSharing s(t);
  const int pa = s.add_profile(ps(1000), bytes_on({{kToG2, 1000}}));
  const int pb = s.add_profile(ps(1000), bytes_on({{kToG2, 1000}, {kToG0, 1000}}));
  const int pc = s.add_profile(ps(1000), bytes_on({{kToG0, 500}}));
  Ends e;
  s.start(0, pa, ps(0), e.buf);
  s.start(1, pb, ps(0), e.buf);
  s.start(2, pc, ps(0), e.buf);
  e.take();
  EXPECT_EQ(e.at[0], 2000);
  EXPECT_EQ(e.at[1], 2000);
  EXPECT_EQ(e.at[2], 1000);
  EXPECT_NEAR(s.link_usage()[kToG0].peak, 1.0, 1e-12);
}

// Ops whose loads fit a link together (0.4 + 0.5 of it) do not slow each other.
TEST(LinkSharing, LinksThatFitDoNotSlowAnyone) {
  Topology t = star3();
  LinkSharing s(t);
  const int pa = s.add_profile(ps(1000), bytes_on({{kToG2, 400}}));
  const int pb = s.add_profile(ps(1000), bytes_on({{kToG2, 500}}));
  Ends e;
  s.start(0, pa, ps(0), e.buf);
  s.start(1, pb, ps(100), e.buf);
  e.take();
  EXPECT_EQ(e.at[0], 1000);
  EXPECT_EQ(e.at[1], 1100);
  EXPECT_NEAR(s.link_usage()[kToG2].peak, 0.9, 1e-12);
  EXPECT_EQ(s.slowed_ops(), 0);
  EXPECT_EQ(s.solves(), 0);
}

// Alike links are kept once, and a profile added while ops run splits their class without
// changing what the ops see. The six links of the star have one rate: one class. A loads
// sw->g0 and sw->g2 alike (1 B/ps each for 1000 ps): two classes. Two ops of A start at 0 and
// halve each other on both links (ends 2000). At 500, with 750 ps of work left each, B (sw->g2
// only, 1 B/ps for 1000 ps) splits A's class and starts: sw->g2 asks 3 of 1, so all three run
// at 1/3 (sw->g0 then carries 2/3 and binds nobody). The A ops end at 500 + 750 x 3 = 2750; B
// has done 2250 / 3 = 750 of its 1000 by then and ends at 2750 + 250 = 3000.
TEST(LinkSharing, AProfileAddedWhileOpsRunSplitsTheirLinksClass) {
  Topology t = star3();
  LinkSharing s(t);
  EXPECT_EQ(s.link_classes(), 1);
  const int pa = s.add_profile(ps(1000), bytes_on({{kToG0, 1000}, {kToG2, 1000}}));
  EXPECT_EQ(s.link_classes(), 2);
  Ends e;
  s.start(0, pa, ps(0), e.buf);
  s.start(1, pa, ps(0), e.buf);
  e.take();
  EXPECT_EQ(e.at[0], 2000);
  EXPECT_EQ(e.at[1], 2000);
  const int pb = s.add_profile(ps(1000), bytes_on({{kToG2, 1000}}));
  EXPECT_EQ(s.link_classes(), 3);
  s.start(2, pb, ps(500), e.buf);
  e.take();
  EXPECT_EQ(e.at[0], 2750);
  EXPECT_EQ(e.at[1], 2750);
  EXPECT_EQ(e.at[2], 3500);  // 500 + 1000 x 3 at 1/3 for its whole work, until the A ops end
  s.finish(0, ps(2750), e.buf);
  s.finish(1, ps(2750), e.buf);
  e.take();
  EXPECT_EQ(e.at[2], 3000);
  EXPECT_DOUBLE_EQ(s.load(pb, kToG2), 1.0);
  EXPECT_DOUBLE_EQ(s.load(pb, kToG0), 0.0);
  EXPECT_DOUBLE_EQ(s.load(pa, kToG0), 1.0);
  const std::vector<LinkUsage> usage = s.link_usage();
  ASSERT_EQ(usage.size(), t.links().size());
  EXPECT_DOUBLE_EQ(usage[kToG2].bytes, 3000);
  EXPECT_DOUBLE_EQ(usage[kToG0].bytes, 2000);
  EXPECT_NEAR(usage[kToG2].peak, 1.0, 1e-12);
  EXPECT_NEAR(usage[kToG0].peak, 1.0, 1e-12);  // both A ops at 1/2 before B came
  EXPECT_DOUBLE_EQ(usage[0].bytes, 0);         // g0 -> sw: never loaded
}

}  // namespace
}  // namespace meshsim
