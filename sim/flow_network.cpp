#include "sim/flow_network.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace meshsim {

namespace {
constexpr std::uint32_t kDrain = 1;
}

FlowNetwork::FlowNetwork(Engine& engine, const Topology& topo, FlowListener& listener)
    : engine_(engine),
      listener_(listener),
      solver_(static_cast<int>(topo.links().size())),
      on_link_(topo.links().size()),
      link_mark_(topo.links().size(), 0),
      is_dirty_(topo.links().size(), 0),
      stats_(topo.links().size()),
      segment_since_(topo.links().size()) {
  for (std::size_t l = 0; l < topo.links().size(); ++l)
    solver_.set_capacity(static_cast<int>(l), topo.link(static_cast<int>(l)).spec.effective().bytes_per_ps());
  engine_.add_handler(this);
}

void FlowNetwork::mark_dirty(std::span<const int> links) {
  for (int l : links) {
    if (!is_dirty_[l]) {
      is_dirty_[l] = 1;
      dirty_.push_back(l);
    }
  }
}

void FlowNetwork::set_link_count(int link, int count, Time now) {
  // Called with the new number of flows on `link`, before the change is applied.
  const int before = static_cast<int>(on_link_[link].size());
  if (before > 0 && record_ && now > segment_since_[link])
    intervals_.push_back({link, segment_since_[link], now, before});
  segment_since_[link] = now;
  stats_[link].peak_flows = std::max(stats_[link].peak_flows, count);
}

void FlowNetwork::shift(Time delta) {
  MESHSIM_ASSERT(!record_ && dirty_.empty());
  for (Flow& f : flows_)
    if (f.active) f.last += delta;
}

void FlowNetwork::add_bytes(std::span<const int> links, double bytes) {
  for (int l : links) stats_[l].bytes += bytes;
}

void FlowNetwork::start(std::span<const int> links, Bytes bytes, std::uint64_t tag) {
  const Time now = engine_.now();
  std::uint32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = static_cast<std::uint32_t>(flows_.size());
    flows_.emplace_back();
  }
  Flow& f = flows_[id];
  f.links = links;
  f.remaining = static_cast<double>(bytes);
  f.rate = 0;
  f.last = now;
  f.tag = tag;
  f.active = true;
  f.fresh = true;
  ++f.version;
  ++active_;
  for (int l : links) {
    set_link_count(l, static_cast<int>(on_link_[l].size()) + 1, now);
    on_link_[l].push_back(id);
    stats_[l].bytes += static_cast<double>(bytes);
  }
  if (links.empty()) {
    // Same-device transfer: nothing to share; drains at once.
    engine_.schedule(now, this, kDrain, (static_cast<std::uint64_t>(f.version) << 32) | id);
    f.fresh = false;
    return;
  }
  mark_dirty(links);
}

void FlowNetwork::remove_from_links(std::uint32_t id) {
  const Time now = engine_.now();
  for (int l : flows_[id].links) {
    auto& v = on_link_[l];
    set_link_count(l, static_cast<int>(v.size()) - 1, now);
    auto it = std::find(v.begin(), v.end(), id);
    MESHSIM_ASSERT(it != v.end());
    *it = v.back();
    v.pop_back();
  }
}

void FlowNetwork::handle(const Event& e) {
  MESHSIM_ASSERT(e.kind == kDrain);
  const auto id = static_cast<std::uint32_t>(e.payload & 0xffffffffu);
  const auto version = static_cast<std::uint32_t>(e.payload >> 32);
  Flow& f = flows_[id];
  if (!f.active || f.version != version) return;  // superseded by a rate change
  f.active = false;
  ++f.version;
  --active_;
  remove_from_links(id);
  mark_dirty(f.links);
  free_.push_back(id);
  listener_.flow_drained(f.tag, engine_.now());
}

void FlowNetwork::end_of_instant(Time now) {
  if (dirty_.empty()) return;
  ++epoch_;
  for (int l : dirty_) {
    if (link_mark_[l] != epoch_) solve_component(static_cast<std::uint32_t>(l), now);
  }
  for (int l : dirty_) is_dirty_[l] = 0;
  dirty_.clear();
}

void FlowNetwork::solve_component(std::uint32_t seed_link, Time now) {
  // Collect the connected component of flows reachable from the seed link through
  // shared links.
  const std::uint64_t stamp = ++component_;
  comp_flows_.clear();
  comp_links_.clear();
  link_mark_[seed_link] = epoch_;
  comp_links_.push_back(static_cast<int>(seed_link));
  for (std::size_t i = 0; i < comp_links_.size(); ++i) {
    for (std::uint32_t id : on_link_[comp_links_[i]]) {
      Flow& f = flows_[id];
      if (f.mark == stamp) continue;
      f.mark = stamp;
      comp_flows_.push_back(id);
      for (int l : f.links) {
        if (link_mark_[l] != epoch_) {
          link_mark_[l] = epoch_;
          comp_links_.push_back(l);
        }
      }
    }
  }
  if (comp_flows_.empty()) return;
  ++solves_;
  if (comp_flows_.size() == 1) {
    // A lone flow (the common case: a ring's hops use disjoint links): its rate is the
    // narrowest link of its path, which is what max-min gives; no solver needed.
    double r = std::numeric_limits<double>::infinity();
    for (int l : flows_[comp_flows_[0]].links) r = std::min(r, solver_.capacity(l));
    rates_.assign(1, r);
  } else {
    // Deterministic order regardless of slot reuse history: by flow id. A component holding
    // a good share of all flows (an all-to-all's one) is listed faster by a scan than a sort.
    if (comp_flows_.size() * 16 >= flows_.size()) {
      comp_flows_.clear();
      for (std::uint32_t id = 0; id < flows_.size(); ++id)
        if (flows_[id].mark == stamp) comp_flows_.push_back(id);
    } else {
      std::sort(comp_flows_.begin(), comp_flows_.end());
    }
    // The paths copied side by side: the solver passes over them several times, and the
    // flows' own spans lie scattered over the routing tables (one cache miss per flow per
    // pass on a large component, most of a 256-GPU all-to-all's time).
    comp_path_links_.clear();
    for (std::uint32_t id : comp_flows_)
      comp_path_links_.insert(comp_path_links_.end(), flows_[id].links.begin(), flows_[id].links.end());
    comp_paths_.clear();
    std::size_t at = 0;
    for (std::uint32_t id : comp_flows_) {
      const std::size_t n = flows_[id].links.size();
      comp_paths_.emplace_back(comp_path_links_.data() + at, n);
      at += n;
    }
    solver_.solve_spans(comp_paths_, rates_);
  }
  for (std::size_t i = 0; i < comp_flows_.size(); ++i) {
    Flow& f = flows_[comp_flows_[i]];
    const double r = rates_[i];
    if (!f.fresh && r == f.rate) continue;  // unchanged: its pending event stays valid
    // Bring `remaining` up to now at the old rate, then reschedule at the new one.
    if (!f.fresh) f.remaining = std::max(0.0, f.remaining - f.rate * static_cast<double>((now - f.last).ps()));
    f.last = now;
    f.rate = r;
    f.fresh = false;
    ++f.version;
    const double dt = std::ceil(f.remaining / r - 1e-9);
    const Time at = now + duration_ps(std::max(0.0, dt), "a transfer");
    engine_.schedule(at, this, kDrain, (static_cast<std::uint64_t>(f.version) << 32) | comp_flows_[i]);
  }
}

}  // namespace meshsim
