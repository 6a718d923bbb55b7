// Max-min fair bandwidth sharing (progressive filling).
//
// Given links with capacities and flows that each cross a set of links, every flow gets
// a rate such that no link is over capacity and no flow can be raised without lowering a
// flow of equal or smaller rate. Progressive filling: all unfixed flows grow together;
// the link whose capacity runs out first (smallest remaining capacity / unfixed flows)
// fixes its flows at that share; repeat with the rest.
//
//   link 0 (cap 10): flows A, B        A gets 5 (link 0 is the bottleneck: 10/2)
//   link 1 (cap 12): flows B, C        B gets 5; C gets 12 - 5 = 7 on link 1
//
//   MaxMinSolver s(2);                 // number of links
//   s.set_capacity(0, 10); s.set_capacity(1, 12);
//   std::vector<std::vector<int>> paths = {{0}, {0, 1}, {1}};
//   std::vector<double> rates; s.solve(paths, rates);   // {5, 5, 7}
//
// A round's bottleneck links are those whose share equals the round's minimum exactly, so
// the rounds of two systems with no link in common interleave without touching each other:
// solving them together gives each flow the bits that solving its own system gives. The
// flow network relies on that when it keeps one record of a solve whose component has
// since split.
//
// Resuming (`fill` with a FillLog): the rounds of a solve, each link's remaining capacity
// after every round that touched it, and each flow's round can be kept. When flows of
// rounds >= k leave, rounds 0..k-1 of a new solve would be the same (a link of a leaving
// flow was never a bottleneck before that flow's round, and losing flows only raises its
// share), so the solve restarts at round k from the remaining capacities kept for it,
// over the flows of rounds >= k that stay (sim/flow_network.h). The flow network calls
// these on one connected component of flows at a time.
#pragma once

#include <span>
#include <vector>

namespace meshsim {

// A link's remaining capacity after round `round` of a solve (rounds numbered from 0).
struct LinkRem {
  int link = 0;
  int round = 0;
  double rem = 0;
};

// What fill() records: the share of each new round (rounds first_round, first_round + 1,
// ...), each flow's round, and every link's remaining capacity after each round that
// fixed a flow on it, in round order.
struct FillLog {
  std::vector<double> shares;
  std::vector<int> round;  // per flow; -1 for a flow with no links
  std::vector<LinkRem> rems;
};

class MaxMinSolver {
 public:
  explicit MaxMinSolver(int num_links)
      : cap_(num_links, 0), rem_(num_links, 0), count_(num_links, 0), slot_(num_links, 0), seen_(num_links, -1) {}
  void set_capacity(int link, double cap) { cap_[link] = cap; }
  double capacity(int link) const { return cap_[link]; }
  // paths[f] lists the links of flow f (no duplicates). rates[f] receives its share.
  // A flow with no links gets +infinity.
  template <class PathRange>
  void solve(const PathRange& paths, std::vector<double>& rates);
  // Same, for flows given as spans (the flow network's storage).
  void solve_spans(std::span<const std::span<const int>> paths, std::vector<double>& rates) {
    fill(paths, rates, nullptr, 0, {});
  }
  // Progressive filling numbered from round `first_round`, each link starting from its
  // capacity or, where `start` names it, from the remaining capacity given there (a
  // resumed solve). With a log, records what FillLog describes.
  void fill(std::span<const std::span<const int>> paths, std::vector<double>& rates, FillLog* log, int first_round,
            std::span<const LinkRem> start);

 private:
  std::vector<double> cap_;
  std::vector<double> rem_;
  std::vector<int> count_;
  std::vector<int> used_links_;
  std::vector<char> fixed_;
  // Per solve: each used link's position in used_links_, its flows (CSR, built from the
  // second round on) and the flows fixed in the current round.
  std::vector<int> slot_;
  std::vector<int> link_begin_, fill_, link_flows_, now_;
  std::vector<int> seen_, touched_;  // with a log: the links a round changed (each once)
};

template <class PathRange>
void MaxMinSolver::solve(const PathRange& paths, std::vector<double>& rates) {
  std::vector<std::span<const int>> spans;
  spans.reserve(paths.size());
  for (const auto& p : paths) spans.emplace_back(p.data(), p.size());
  solve_spans(spans, rates);
}

}  // namespace meshsim
