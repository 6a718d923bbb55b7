// Link sharing between ops in flight, on a hand-built star with the expected speeds and
// ends worked out by hand (the progressive filling of sim/link_sharing.h).
#include "sim/link_sharing.h"

#include <gtest/gtest.h>

#include <map>

#include "sim/sim_test_util.h"

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
