#include "sim/maxmin.h"

#include <algorithm>
#include <limits>

namespace meshsim {

void MaxMinSolver::solve_spans(std::span<const std::span<const int>> paths, std::vector<double>& rates) {
  const std::size_t nf = paths.size();
  rates.assign(nf, std::numeric_limits<double>::infinity());
  fixed_.assign(nf, 0);
  used_links_.clear();
  for (const auto& p : paths) {
    for (int l : p) {
      if (count_[l] == 0) {
        used_links_.push_back(l);
        rem_[l] = cap_[l];
      }
      ++count_[l];
    }
  }
  // Deterministic link order: ids ascending.
  std::sort(used_links_.begin(), used_links_.end());
  std::size_t unfixed = 0;
  for (std::size_t f = 0; f < nf; ++f) {
    if (paths[f].empty())
      fixed_[f] = 1;
    else
      ++unfixed;
  }
  // Flows per link, for fixing the flows of a bottleneck link.
  // Built lazily only for multi-round cases; a single scan per round is fine for the
  // component sizes the network hands us.
  while (unfixed > 0) {
    double share = std::numeric_limits<double>::infinity();
    for (int l : used_links_) {
      if (count_[l] > 0) share = std::min(share, rem_[l] / count_[l]);
    }
    // Links at the bottleneck share (relative tolerance for floating round-off).
    const double limit = share * (1.0 + 1e-12);
    std::size_t fixed_now = 0;
    for (std::size_t f = 0; f < nf; ++f) {
      if (fixed_[f]) continue;
      bool bottlenecked = false;
      for (int l : paths[f]) {
        if (count_[l] > 0 && rem_[l] / count_[l] <= limit) {
          bottlenecked = true;
          break;
        }
      }
      if (!bottlenecked) continue;
      fixed_[f] = 2;  // fixed this round: subtract after the scan so shares stay consistent
      rates[f] = share;
      ++fixed_now;
    }
    for (std::size_t f = 0; f < nf; ++f) {
      if (fixed_[f] != 2) continue;
      fixed_[f] = 1;
      for (int l : paths[f]) {
        rem_[l] = std::max(0.0, rem_[l] - share);
        --count_[l];
      }
    }
    unfixed -= fixed_now;
    if (fixed_now == 0) break;  // cannot happen with positive capacities
  }
  for (int l : used_links_) count_[l] = 0;
}

}  // namespace meshsim
