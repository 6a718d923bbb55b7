// Max-min fair sharing on tiny systems solved by hand (each test's comment shows the work).
#include "sim/maxmin.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <random>

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

// Progressive filling written the plain way: every round scans every unfixed flow for a
// link at the bottleneck share. The solver visits only the flows of bottleneck links; the
// rates must be the same to the bit (the flow runs and goldens depend on them).
std::vector<double> reference_rates(const std::vector<double>& caps, const Paths& paths) {
  std::vector<double> rem = caps, rates(paths.size(), std::numeric_limits<double>::infinity());
  std::vector<int> count(caps.size(), 0);
  std::vector<char> fixed(paths.size(), 0);
  std::size_t unfixed = 0;
  for (std::size_t f = 0; f < paths.size(); ++f) {
    for (int l : paths[f]) ++count[l];
    paths[f].empty() ? void(fixed[f] = 1) : void(++unfixed);
  }
  while (unfixed > 0) {
    double share = std::numeric_limits<double>::infinity();
    for (std::size_t l = 0; l < caps.size(); ++l)
      if (count[l] > 0) share = std::min(share, rem[l] / count[l]);
    std::vector<std::size_t> now;
    for (std::size_t f = 0; f < paths.size(); ++f)
      if (!fixed[f] && std::any_of(paths[f].begin(), paths[f].end(),
                                   [&](int l) { return count[l] > 0 && rem[l] / count[l] <= share; }))
        now.push_back(f);
    for (std::size_t f : now) {
      fixed[f] = 1;
      rates[f] = share;
      for (int l : paths[f]) {
        rem[l] = std::max(0.0, rem[l] - share);
        --count[l];
      }
    }
    unfixed -= now.size();
  }
  return rates;
}

// A random system: few distinct capacities, so that ties and shared bottlenecks are common.
void random_system(std::mt19937_64& rng, std::vector<double>& caps, Paths& paths, int max_links = 40) {
  const int links = 2 + static_cast<int>(rng() % static_cast<std::uint64_t>(max_links - 1));
  const int flows = 1 + static_cast<int>(rng() % 300);
  caps.resize(static_cast<std::size_t>(links));
  for (double& c : caps) c = 10.0 * static_cast<double>(1 + rng() % 4) / 3.0;
  paths.assign(static_cast<std::size_t>(flows), {});
  for (auto& p : paths) {
    const int len = static_cast<int>(rng() % 5);  // 0..4 links, none repeated
    for (int i = 0; i < len; ++i) {
      const int l = static_cast<int>(rng() % static_cast<std::uint64_t>(links));
      if (std::find(p.begin(), p.end(), l) == p.end()) p.push_back(l);
    }
  }
}

std::vector<std::span<const int>> spans_of(const Paths& paths) {
  std::vector<std::span<const int>> s;
  for (const auto& p : paths) s.emplace_back(p.data(), p.size());
  return s;
}

TEST(MaxMin, EqualsThePlainProgressiveFillingBitForBit) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> caps;
    Paths paths;
    random_system(rng, caps, paths);
    const auto got = solve(caps, paths), want = reference_rates(caps, paths);
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t f = 0; f < got.size(); ++f) ASSERT_EQ(got[f], want[f]) << "trial " << trial << " flow " << f;
  }
}

// Two systems with no link in common, solved as one, give each flow the bits it gets when
// its own system is solved: a round's bottleneck is the exact minimum, so the rounds of the
// two interleave without touching each other. The capacities differ from each other by an
// ulp or so (a relative tolerance on the bottleneck share would fix the second system's
// flows at the first's share).
TEST(MaxMin, DisjointSystemsSolvedTogetherAsApart) {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<double> caps_a, caps_b;
    Paths a, b;
    random_system(rng, caps_a, a);
    random_system(rng, caps_b, b);
    for (double& c : caps_b) c = std::nextafter(c * (1 + 1e-15), 100.0);
    std::vector<double> caps = caps_a;
    caps.insert(caps.end(), caps_b.begin(), caps_b.end());
    Paths both = a;
    for (auto p : b) {
      for (int& l : p) l += static_cast<int>(caps_a.size());
      both.push_back(p);
    }
    const auto ra = solve(caps_a, a), rb = solve(caps_b, b), together = solve(caps, both);
    for (std::size_t f = 0; f < a.size(); ++f) ASSERT_EQ(together[f], ra[f]) << "trial " << trial;
    for (std::size_t f = 0; f < b.size(); ++f) ASSERT_EQ(together[a.size() + f], rb[f]) << "trial " << trial;
  }
}

// A solve resumed at round k (the earliest round of the flows that left), from the links'
// remaining capacities after round k - 1 as the log kept them, over the flows of rounds >= k
// that stay, gives the rates a fresh solve of the flows that stay gives, to the bit; the
// flows of earlier rounds keep theirs.
TEST(MaxMin, ResumedSolveEqualsAFreshSolveOfTheFlowsThatStay) {
  std::mt19937_64 rng(5);
  int resumed_late = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> caps;
    Paths paths;
    random_system(rng, caps, paths, 12);  // few links: many rounds share them
    MaxMinSolver s(static_cast<int>(caps.size()));
    for (std::size_t l = 0; l < caps.size(); ++l) s.set_capacity(static_cast<int>(l), caps[l]);
    std::vector<double> rates;
    FillLog log;
    const auto spans = spans_of(paths);
    s.fill(spans, rates, &log, 0, {});
    // Leavers: a few random flows (the fastest, as when equal flows drain, half the time).
    std::vector<char> leaves(paths.size(), 0);
    int k = INT32_MAX;
    const bool fastest = trial % 2 == 0;
    for (std::size_t f = 0; f < paths.size(); ++f) {
      const bool pick =
          fastest ? log.round[f] >= 0 && log.round[f] == static_cast<int>(log.shares.size()) - 1 : rng() % 10 == 0;
      if (!pick || log.round[f] < 0) continue;
      leaves[f] = 1;
      k = std::min(k, log.round[f]);
    }
    if (k == INT32_MAX) continue;
    resumed_late += k > 0;
    Paths stay, resumed;
    std::vector<std::size_t> resumed_index;
    for (std::size_t f = 0; f < paths.size(); ++f) {
      if (leaves[f]) continue;
      stay.push_back(paths[f]);
      if (log.round[f] >= k) {
        resumed.push_back(paths[f]);
        resumed_index.push_back(stay.size() - 1);
      }
    }
    std::vector<LinkRem> start;
    std::vector<char> seen(caps.size(), 0);
    for (auto it = log.rems.rbegin(); it != log.rems.rend(); ++it) {  // the last before round k
      if (it->round >= k || seen[static_cast<std::size_t>(it->link)]) continue;
      seen[static_cast<std::size_t>(it->link)] = 1;
      start.push_back(*it);
    }
    std::vector<double> after;
    s.fill(spans_of(resumed), after, nullptr, k, start);
    const auto fresh = solve(caps, stay);
    std::size_t j = 0, i = 0;
    for (std::size_t f = 0; f < paths.size(); ++f) {
      if (leaves[f]) continue;
      if (log.round[f] >= k) {
        ASSERT_EQ(fresh[resumed_index[j]], after[j]) << "trial " << trial << " flow " << f;
        ++j;
      } else {
        ASSERT_EQ(fresh[i], rates[f]) << "trial " << trial << " flow " << f;
      }
      ++i;
    }
  }
  EXPECT_GT(resumed_late, 50);  // most resumes skip rounds
}

}  // namespace
}  // namespace meshsim
