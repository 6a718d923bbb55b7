#include "sim/flow_network.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"

namespace meshsim {

namespace {
constexpr std::uint32_t kDrain = 1;
}

LinkStats stats_of(const std::vector<LinkUse>& used, int link) {
  const auto it = std::lower_bound(used.begin(), used.end(), link, [](const LinkUse& u, int l) { return u.link < l; });
  return it != used.end() && it->link == link ? it->stats : LinkStats{};
}

FlowNetwork::Scratch::Scratch(const Topology& t)
    : topo(t),
      solver(static_cast<int>(t.links().size())),
      on_link(t.links().size()),
      live(t.links().size(), 0),
      link_mark(t.links().size(), 0),
      is_dirty(t.links().size(), 0),
      stats(t.links().size()),
      segment_since(t.links().size()),
      history(t.links().size()),
      is_touched(t.links().size(), 0) {
  for (std::size_t l = 0; l < t.links().size(); ++l)
    solver.set_capacity(static_cast<int>(l), t.link(static_cast<int>(l)).spec.effective().bytes_per_ps());
}

FlowNetwork::FlowNetwork(Engine& engine, const Topology& topo, FlowListener& listener, std::size_t record_flows,
                         Scratch* scratch)
    : engine_(engine),
      listener_(listener),
      own_(scratch == nullptr ? std::make_unique<Scratch>(topo) : nullptr),
      s_(scratch == nullptr ? *own_ : *scratch),
      record_flows_(record_flows) {
  MESHSIM_ASSERT(&s_.topo == &topo && !s_.in_use && s_.touched.empty());
  s_.in_use = true;
  engine_.add_handler(this);
}

FlowNetwork::~FlowNetwork() {
  // The links this run touched go back to their empty state for the scratch's next network
  // (link marks need no reset: epochs only grow).
  for (int l : s_.touched) {
    s_.on_link[l].clear();
    s_.live[l] = 0;
    s_.is_dirty[l] = 0;
    s_.is_touched[l] = 0;
    s_.stats[l] = LinkStats{};
    s_.segment_since[l] = Time{};
    s_.history[l].clear();
  }
  s_.touched.clear();
  s_.in_use = false;
}

const std::vector<LinkStats>& FlowNetwork::link_stats() const { return s_.stats; }

std::vector<LinkUse> FlowNetwork::used_links() const {
  std::vector<int> links = s_.touched;
  std::sort(links.begin(), links.end());
  std::vector<LinkUse> out;
  out.reserve(links.size());
  for (int l : links) out.push_back({l, s_.stats[l]});
  return out;
}

void FlowNetwork::next_epoch() {
  if (++s_.epoch == 0) {
    std::fill(s_.link_mark.begin(), s_.link_mark.end(), 0u);
    s_.epoch = 1;
  }
}

void FlowNetwork::mark_dirty(std::span<const int> links) {
  for (int l : links) {
    if (!s_.is_dirty[l]) {
      s_.is_dirty[l] = 1;
      dirty_.push_back(l);
    }
  }
}

void FlowNetwork::set_link_count(int link, int count, Time now) {
  // Called with the new number of flows on `link`, before the change is applied.
  const int before = s_.live[link];
  if (before > 0 && record_ && now > s_.segment_since[link])
    intervals_.push_back({link, s_.segment_since[link], now, before});
  s_.segment_since[link] = now;
  s_.stats[link].peak_flows = std::max(s_.stats[link].peak_flows, count);
}

void FlowNetwork::shift(Time delta) {
  MESHSIM_ASSERT(!record_ && dirty_.empty() && drained_records_.empty());
  for (Flow& f : flows_)
    if (f.active) f.last += delta;
}

void FlowNetwork::add_bytes(std::span<const int> links, double bytes) {
  for (int l : links) {
    s_.touch(l);
    s_.stats[l].bytes += bytes;
  }
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
  ++f.gen;
  ++active_;
  for (int l : links) {
    s_.touch(l);
    set_link_count(l, s_.live[l] + 1, now);
    s_.on_link[l].push_back({id, f.gen});
    ++s_.live[l];
    s_.stats[l].bytes += static_cast<double>(bytes);
  }
  if (links.empty()) {
    // Same-device transfer: nothing to share; drains at once.
    engine_.schedule(now, this, kDrain, (static_cast<std::uint64_t>(f.version) << 32) | id);
    f.fresh = false;
    return;
  }
  started_ = true;
  mark_dirty(links);
}

void FlowNetwork::remove_from_links(std::uint32_t id) {
  // Called with the flow already inactive: its entries are stale from here.
  const Time now = engine_.now();
  for (int l : flows_[id].links) {
    set_link_count(l, s_.live[l] - 1, now);
    auto& v = s_.on_link[l];
    if (--s_.live[l] * 2 < static_cast<int>(v.size()) && v.size() > 8)
      std::erase_if(v, [&](OnLink e) { return !current(e); });
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
  if (f.record >= 0) {
    // Its record is resumed at the end of the instant (or, if flows start in it, its
    // component solved again from these links).
    Record& rec = records_[static_cast<std::size_t>(f.record)];
    if (rec.resume_from < 0) {
      drained_records_.push_back(f.record);
      rec.resume_from = f.round;
    }
    rec.resume_from = std::min(rec.resume_from, f.round);
    rec.drained.push_back(f.links);
    leave_record(id);
  } else {
    mark_dirty(f.links);
  }
  free_.push_back(id);
  listener_.flow_drained(f.tag, engine_.now());
}

void FlowNetwork::end_of_instant(Time now) {
  if (dirty_.empty() && drained_records_.empty()) return;
  // Flows started: a record's leavers may share links with them, so their components are
  // found and solved in full like the rest.
  for (int r : drained_records_) {
    Record& rec = records_[static_cast<std::size_t>(r)];
    if (started_)
      for (std::span<const int> links : rec.drained) mark_dirty(links);
    else if (rec.live > 0)
      resume(r, now);
    rec.resume_from = -1;
    rec.drained.clear();
  }
  next_epoch();
  for (int l : dirty_) {
    if (s_.link_mark[l] != s_.epoch) solve_component(static_cast<std::uint32_t>(l), now);
  }
  for (int l : dirty_) s_.is_dirty[l] = 0;
  dirty_.clear();
  for (int r : drained_records_) release_if_empty(r);
  drained_records_.clear();
  started_ = false;
}

int FlowNetwork::new_record() {
  if (free_records_.empty()) {
    records_.emplace_back();
    return static_cast<int>(records_.size()) - 1;
  }
  const int r = free_records_.back();
  free_records_.pop_back();
  return r;
}

void FlowNetwork::release_if_empty(int r) {
  Record& rec = records_[static_cast<std::size_t>(r)];
  if (rec.live > 0 || rec.resume_from >= 0 || rec.round_begin.empty()) return;  // in use, pending or free
  rec = Record{};
  free_records_.push_back(r);
}

void FlowNetwork::leave_record(std::uint32_t id) {
  Flow& f = flows_[id];
  if (f.record < 0) return;
  const int r = f.record;
  f.record = -1;
  --records_[static_cast<std::size_t>(r)].live;
  release_if_empty(r);
}

void FlowNetwork::keep(int r, const FillLog& log, int first_round) {
  Record& rec = records_[static_cast<std::size_t>(r)];
  const auto k = static_cast<std::size_t>(first_round);
  if (rec.round_begin.empty()) rec.round_begin.push_back(0);
  rec.fixed.resize(rec.round_begin[k]);
  rec.round_begin.resize(k + 1);
  // The flows listed by round (a counting sort; each round's flows in comp_flows_' order).
  const std::size_t rounds = log.shares.size();
  rec.round_begin.resize(k + rounds + 1, 0);
  for (std::size_t i = 0; i < comp_flows_.size(); ++i) {
    const int j = log.round[i];
    MESHSIM_ASSERT(j >= first_round);
    ++rec.round_begin[static_cast<std::size_t>(j) + 1];
  }
  for (std::size_t j = k; j < k + rounds; ++j) rec.round_begin[j + 1] += rec.round_begin[j];
  rec.fixed.resize(rec.round_begin.back());
  fill_at_.assign(rec.round_begin.begin() + static_cast<std::ptrdiff_t>(k), rec.round_begin.end() - 1);
  for (std::size_t i = 0; i < comp_flows_.size(); ++i) {
    const std::uint32_t id = comp_flows_[i];
    const int j = log.round[i];
    rec.fixed[fill_at_[static_cast<std::size_t>(j) - k]++] = id;
    flows_[id].record = r;
    flows_[id].round = j;
  }
  for (const LinkRem& e : log.rems) s_.history[static_cast<std::size_t>(e.link)].push_back(e);
}

void FlowNetwork::resume(int r, Time now) {
  ++solves_;
  ++resumes_;
  Record& rec = records_[static_cast<std::size_t>(r)];
  const int k = rec.resume_from;
  // The flows that stay and were fixed in rounds >= k, in id order (as a full solve lists
  // and reschedules them).
  comp_flows_.clear();
  for (std::size_t i = rec.round_begin[static_cast<std::size_t>(k)]; i < rec.fixed.size(); ++i) {
    const std::uint32_t id = rec.fixed[i];
    if (flows_[id].active && flows_[id].record == r) comp_flows_.push_back(id);
  }
  std::sort(comp_flows_.begin(), comp_flows_.end());
  // Every link those rounds touched goes back to its capacity after round k - 1.
  next_epoch();
  start_.clear();
  const auto rewind = [&](std::span<const int> links) {
    for (int l : links) {
      if (s_.link_mark[l] == s_.epoch) continue;
      s_.link_mark[l] = s_.epoch;
      auto& h = s_.history[static_cast<std::size_t>(l)];
      while (!h.empty() && h.back().round >= k) h.pop_back();
      if (!h.empty()) start_.push_back(h.back());
    }
  };
  for (std::span<const int> links : rec.drained) rewind(links);
  for (std::uint32_t id : comp_flows_) rewind(flows_[id].links);
  gather_paths();
  s_.solver.fill(comp_paths_, rates_, &log_, k, start_);
  keep(r, log_, k);
  for (std::size_t i = 0; i < comp_flows_.size(); ++i) set_rate(comp_flows_[i], rates_[i], now);
}

void FlowNetwork::gather_paths() {
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
}

void FlowNetwork::set_rate(std::uint32_t id, double r, Time now) {
  Flow& f = flows_[id];
  if (!f.fresh && r == f.rate) return;  // unchanged: its pending event stays valid
  // Bring `remaining` up to now at the old rate, then reschedule at the new one.
  if (!f.fresh) f.remaining = std::max(0.0, f.remaining - f.rate * static_cast<double>((now - f.last).ps()));
  f.last = now;
  f.rate = r;
  f.fresh = false;
  ++f.version;
  const double dt = std::ceil(f.remaining / r - 1e-9);
  const Time at = now + duration_ps(std::max(0.0, dt), "a transfer");
  engine_.schedule(at, this, kDrain, (static_cast<std::uint64_t>(f.version) << 32) | id);
}

void FlowNetwork::solve_component(std::uint32_t seed_link, Time now) {
  // Collect the connected component of flows reachable from the seed link through
  // shared links.
  const std::uint64_t stamp = ++component_;
  comp_flows_.clear();
  comp_links_.clear();
  s_.link_mark[seed_link] = s_.epoch;
  comp_links_.push_back(static_cast<int>(seed_link));
  for (std::size_t i = 0; i < comp_links_.size(); ++i) {
    for (OnLink e : s_.on_link[comp_links_[i]]) {
      if (!current(e)) continue;
      const std::uint32_t id = e.id;
      Flow& f = flows_[id];
      if (f.mark == stamp) continue;
      f.mark = stamp;
      comp_flows_.push_back(id);
      for (int l : f.links) {
        if (s_.link_mark[l] != s_.epoch) {
          s_.link_mark[l] = s_.epoch;
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
    for (int l : flows_[comp_flows_[0]].links) r = std::min(r, s_.solver.capacity(l));
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
    gather_paths();
  }
  // The component's flows leave the records they had; a large one keeps a record of its own.
  for (std::uint32_t id : comp_flows_) leave_record(id);
  if (comp_flows_.size() >= record_flows_) {
    for (int l : comp_links_) s_.history[static_cast<std::size_t>(l)].clear();
    s_.solver.fill(comp_paths_, rates_, &log_, 0, {});
    const int r = new_record();
    records_[static_cast<std::size_t>(r)].live = comp_flows_.size();
    keep(r, log_, 0);
  } else if (comp_flows_.size() > 1) {
    s_.solver.solve_spans(comp_paths_, rates_);
  }
  for (std::size_t i = 0; i < comp_flows_.size(); ++i) set_rate(comp_flows_[i], rates_[i], now);
}

}  // namespace meshsim
