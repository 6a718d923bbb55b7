// Max-min fair sharing on tiny systems solved by hand (each test's comment shows the work).
#include "sim/maxmin.h"

#include <gtest/gtest.h>

namespace meshsim {
namespace {

using Paths = std::vector<std::vector<int>>;

std::vector<double> solve(const std::vector<double>& caps, const Paths& paths) {
  MaxMinSolver s(static_cast<int>(caps.size()));
  for (std::size_t l = 0; l < caps.size(); ++l) s.set_capacity(static_cast<int>(l), caps[l]);
  std::vector<double> rates;
  s.solve(paths, rates);
  return rates;
}

// One link of 10 shared by three flows: 10/3 each.
TEST(MaxMin, EqualShareOnOneLink) {
  const auto r = solve({10}, {{0}, {0}, {0}});
  for (double x : r) EXPECT_DOUBLE_EQ(x, 10.0 / 3);
}

// link0 cap 10 carries A,B; link1 cap 12 carries B,C.
// Shares: link0 10/2 = 5, link1 12/2 = 6 -> link0 binds first: A = B = 5.
// Then link1 has 12 - 5 = 7 left for C alone: C = 7.
TEST(MaxMin, SecondLinkGivesLeftoverToTheOtherFlow) {
  const auto r = solve({10, 12}, {{0}, {0, 1}, {1}});
  EXPECT_DOUBLE_EQ(r[0], 5);
  EXPECT_DOUBLE_EQ(r[1], 5);
  EXPECT_DOUBLE_EQ(r[2], 7);
}

// Parking lot: long flow crosses L0 and L1 (cap 1 each), a short flow on each.
// Both links have share 1/2 at once: every flow gets 0.5.
TEST(MaxMin, ParkingLot) {
  const auto r = solve({1, 1}, {{0, 1}, {0}, {1}});
  for (double x : r) EXPECT_DOUBLE_EQ(x, 0.5);
}

// L0 cap 4 carries A,B,C; L1 cap 1 carries C only.
// Round 1: shares L0 4/3 = 1.33, L1 1/1 = 1 -> C fixed at 1.
// Round 2: L0 has 4 - 1 = 3 for A and B: 1.5 each.
TEST(MaxMin, TwoRounds) {
  const auto r = solve({4, 1}, {{0}, {0}, {0, 1}});
  EXPECT_DOUBLE_EQ(r[0], 1.5);
  EXPECT_DOUBLE_EQ(r[1], 1.5);
  EXPECT_DOUBLE_EQ(r[2], 1);
}

// Three rounds: L0 cap 1 (A), L1 cap 5 (A,B), L2 cap 9 (B,C).
// Round 1: shares 1, 2.5, 4.5 -> A = 1. Round 2: L1 has 4 for B; L2 share 4.5 -> B = 4.
// Round 3: L2 has 9 - 4 = 5 for C -> C = 5.
TEST(MaxMin, ThreeRoundsChain) {
  const auto r = solve({1, 5, 9}, {{0, 1}, {1, 2}, {2}});
  EXPECT_DOUBLE_EQ(r[0], 1);
  EXPECT_DOUBLE_EQ(r[1], 4);
  EXPECT_DOUBLE_EQ(r[2], 5);
}

// Capacity is never exceeded and every flow has a saturated bottleneck (the max-min
// conditions), checked on a 4-link, 6-flow system.
TEST(MaxMin, FeasibleAndEveryFlowBottlenecked) {
  const std::vector<double> caps = {10, 3, 7, 20};
  const Paths paths = {{0, 1}, {0, 2}, {1, 2, 3}, {3}, {0, 3}, {2}};
  const auto r = solve(caps, paths);
  std::vector<double> load(caps.size(), 0);
  for (std::size_t f = 0; f < paths.size(); ++f)
    for (int l : paths[f]) load[l] += r[f];
  for (std::size_t l = 0; l < caps.size(); ++l) EXPECT_LE(load[l], caps[l] * (1 + 1e-12));
  for (std::size_t f = 0; f < paths.size(); ++f) {
    bool has_bottleneck = false;
    for (int l : paths[f]) {
      if (load[l] < caps[l] * (1 - 1e-9)) continue;
      double max_on_link = 0;
      for (std::size_t g = 0; g < paths.size(); ++g)
        for (int m : paths[g])
          if (m == l) max_on_link = std::max(max_on_link, r[g]);
      if (r[f] >= max_on_link * (1 - 1e-9)) has_bottleneck = true;
    }
    EXPECT_TRUE(has_bottleneck) << "flow " << f;
  }
}

}  // namespace
}  // namespace meshsim
