#include "sim/maxmin.h"

#include <algorithm>
#include <limits>

namespace meshsim {

void MaxMinSolver::fill(std::span<const std::span<const int>> paths, std::vector<double>& rates, FillLog* log,
                        int first_round, std::span<const LinkRem> start) {
  const std::size_t nf = paths.size();
  rates.assign(nf, std::numeric_limits<double>::infinity());
  fixed_.assign(nf, 0);
  if (log != nullptr) {
    log->shares.clear();
    log->round.assign(nf, -1);
    log->rems.clear();
  }
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
  for (const LinkRem& s : start)
    if (count_[s.link] > 0) rem_[s.link] = s.rem;
  // used_links_ stays in the order the paths reach them: no result below depends on the order
  // of links or flows (a round's share is a minimum, its bottleneck links are judged against it
  // before any subtraction, and each link then loses the same share once per flow fixed on it).
  std::size_t unfixed = 0;
  for (std::size_t f = 0; f < nf; ++f) {
    if (paths[f].empty())
      fixed_[f] = 1;
    else
      ++unfixed;
  }
  // A round fixes every unfixed flow that crosses a link at the bottleneck share (judged
  // before any of the round's subtractions). The first round scans every flow; when more
  // rounds follow, each used link's flows are indexed (CSR over used_links_' positions:
  // link_flows_[link_begin_[i] .. link_begin_[i+1])) so that a round visits only the flows
  // of its bottleneck links: many-round components (contention at several levels, as in
  // an all-to-all across nodes) then cost rounds x links, not rounds x flows.
  const std::size_t nl = used_links_.size();
  bool indexed = false;
  int round = first_round;
  while (unfixed > 0) {
    double share = std::numeric_limits<double>::infinity();
    for (int l : used_links_) {
      if (count_[l] > 0) share = std::min(share, rem_[l] / count_[l]);
    }
    // Links at the bottleneck share: exactly the minimum (the same quotient), with no
    // tolerance, so that a link's round never depends on links it shares no flow with.
    const auto at_bottleneck = [&](int l) { return count_[l] > 0 && rem_[l] / count_[l] <= share; };
    const auto fix = [&](std::size_t f) {
      fixed_[f] = 1;
      rates[f] = share;
      now_.push_back(static_cast<int>(f));
      if (log != nullptr) log->round[f] = round;
    };
    now_.clear();
    if (indexed) {
      for (std::size_t i = 0; i < nl; ++i) {
        if (!at_bottleneck(used_links_[i])) continue;
        for (int k = link_begin_[i]; k < link_begin_[i + 1]; ++k) {
          const auto f = static_cast<std::size_t>(link_flows_[static_cast<std::size_t>(k)]);
          if (!fixed_[f]) fix(f);
        }
      }
    } else {
      for (std::size_t f = 0; f < nf; ++f)
        if (!fixed_[f] && std::any_of(paths[f].begin(), paths[f].end(), at_bottleneck)) fix(f);
    }
    // Subtract after the round: each link loses `share` once per flow fixed on it, the same
    // value each time, so the order of the flows does not change the result.
    for (int f : now_) {
      for (int l : paths[static_cast<std::size_t>(f)]) {
        rem_[l] = std::max(0.0, rem_[l] - share);
        --count_[l];
        if (log != nullptr && seen_[l] != round) {
          seen_[l] = round;
          touched_.push_back(l);
        }
      }
    }
    if (log != nullptr) {
      for (int l : touched_) {
        log->rems.push_back({l, round, rem_[l]});
        seen_[l] = -1;
      }
      touched_.clear();
      log->shares.push_back(share);
    }
    ++round;
    unfixed -= now_.size();
    if (now_.empty()) break;  // cannot happen with positive capacities
    if (unfixed > 0 && !indexed) {
      for (std::size_t i = 0; i < nl; ++i) slot_[used_links_[i]] = static_cast<int>(i);
      link_begin_.assign(nl + 1, 0);
      for (const auto& p : paths)
        for (int l : p) ++link_begin_[static_cast<std::size_t>(slot_[l]) + 1];
      for (std::size_t i = 0; i < nl; ++i) link_begin_[i + 1] += link_begin_[i];
      link_flows_.resize(static_cast<std::size_t>(link_begin_[nl]));
      fill_.assign(link_begin_.begin(), link_begin_.end() - 1);
      for (std::size_t f = 0; f < nf; ++f)
        for (int l : paths[f])
          link_flows_[static_cast<std::size_t>(fill_[static_cast<std::size_t>(slot_[l])]++)] = static_cast<int>(f);
      indexed = true;
    }
  }
  for (int l : used_links_) count_[l] = 0;
}

}  // namespace meshsim
