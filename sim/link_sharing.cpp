// LinkSharing: max-min fair speeds of the ops in flight over the links they share. See the
// header and docs/math.md section 2.
#include "sim/link_sharing.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "core/error.h"

namespace meshsim {

namespace {
constexpr double kTolerance = 1e-9;  // relative: a link is full within this of its capacity (limit_)
}

LinkSharing::LinkSharing(const Topology& topo) {
  // One class per capacity to begin with: no profile tells such links apart yet.
  std::map<double, int> by_cap;
  class_of_.reserve(topo.links().size());
  for (const DirLink& l : topo.links()) {
    const double cap = l.spec.effective().bytes_per_ps();
    const auto [it, fresh] = by_cap.emplace(cap, static_cast<int>(cap_.size()));
    if (fresh) {
      cap_.push_back(cap);
      limit_.push_back(cap * (1 + kTolerance));
      full_load_.push_back(0);
      cur_load_.push_back(0);
      on_link_.emplace_back();
      usage_.emplace_back();
      slot_.push_back(-1);
      members_.emplace_back();
    }
    members_[static_cast<std::size_t>(it->second)].push_back(static_cast<int>(class_of_.size()));
    class_of_.push_back(it->second);
  }
}

int LinkSharing::clone_class(int cls) {
  const auto c = static_cast<std::size_t>(cls);
  cap_.push_back(cap_[c]);
  limit_.push_back(limit_[c]);
  full_load_.push_back(full_load_[c]);
  cur_load_.push_back(cur_load_[c]);
  on_link_.push_back(on_link_[c]);
  usage_.push_back(usage_[c]);
  slot_.push_back(-1);
  members_.emplace_back();
  return static_cast<int>(cap_.size()) - 1;
}

// Refines the classes by the new profile: the links of a class it loads differently (another
// load or bytes, or none on some) go to new classes, each with the state they shared. The
// profiles that loaded the old class load its parts alike.
int LinkSharing::add_profile(Time alone, const std::vector<LinkStats>& stats) {
  std::vector<LinkUse> used;
  for (std::size_t l = 0; l < stats.size(); ++l)
    if (stats[l].bytes > 0) used.push_back({static_cast<int>(l), stats[l]});
  return add_profile(alone, used);
}

int LinkSharing::add_profile(Time alone, const std::vector<LinkUse>& used) {
  const double alone_ps = static_cast<double>(alone.ps());
  struct Group {
    int cls;
    double u, b;
    std::size_t links = 0;
    int target = -1;  // its class once refined
  };
  std::vector<Group> groups;
  std::map<std::tuple<int, double, double>, int> group_index;
  std::vector<std::pair<int, int>> touched;  // (link, group), ascending links
  for (const LinkUse& use : used) {
    const auto l = static_cast<std::size_t>(use.link);
    if (use.stats.bytes <= 0 || l >= class_of_.size()) continue;
    const int cls = class_of_[l];
    const double b = use.stats.bytes;
    // Alone, an op never loads a link beyond its rate; rounding must not make it seem to.
    const double u = alone_ps > 0 ? std::min(b / alone_ps, cap_[static_cast<std::size_t>(cls)]) : 0.0;
    const auto [it, fresh] = group_index.emplace(std::make_tuple(cls, u, b), static_cast<int>(groups.size()));
    if (fresh) groups.push_back(Group{cls, u, b});
    ++groups[static_cast<std::size_t>(it->second)].links;
    touched.emplace_back(static_cast<int>(l), it->second);
  }
  std::map<int, std::pair<int, std::size_t>> per_class;  // class -> (groups, links) the profile puts on it
  for (const Group& g : groups) {
    auto& [n, links] = per_class[g.cls];
    ++n;
    links += g.links;
  }
  std::map<int, std::vector<int>> parts;  // split class -> the new classes made of its links
  for (Group& g : groups) {
    const auto& [n, links] = per_class[g.cls];
    if (n == 1 && links == members_[static_cast<std::size_t>(g.cls)].size()) {
      g.target = g.cls;
    } else {
      g.target = clone_class(g.cls);
      parts[g.cls].push_back(g.target);
    }
  }
  for (const auto& [l, gi] : touched) {
    const int target = groups[static_cast<std::size_t>(gi)].target;
    if (target == class_of_[static_cast<std::size_t>(l)]) continue;
    class_of_[static_cast<std::size_t>(l)] = target;
    members_[static_cast<std::size_t>(target)].push_back(l);
  }
  auto first_link = [this](int cls) { return members_[static_cast<std::size_t>(cls)].front(); };
  auto finish_entries = [&](Profile& p) {
    std::sort(p.entries.begin(), p.entries.end(),
              [&](const Entry& a, const Entry& b) { return first_link(a.cls) < first_link(b.cls); });
    p.loads.clear();
    for (const Entry& e : p.entries)
      if (e.u > 0) p.loads.emplace_back(e.cls, e.u);
  };
  if (!parts.empty()) {
    for (const auto& [cls, news] : parts) {
      auto& m = members_[static_cast<std::size_t>(cls)];
      std::erase_if(m, [&](int l) { return class_of_[static_cast<std::size_t>(l)] != cls; });
    }
    for (Profile& p : profiles_) {
      std::vector<Entry> entries;
      for (const Entry& e : p.entries) {
        const auto it = parts.find(e.cls);
        if (it == parts.end() || !members_[static_cast<std::size_t>(e.cls)].empty()) entries.push_back(e);
        if (it != parts.end())
          for (int n : it->second) entries.push_back(Entry{n, e.u, e.b});
      }
      p.entries = std::move(entries);
      finish_entries(p);
    }
  }
  Profile p;
  p.alone_ps = alone_ps;
  for (const Group& g : groups) p.entries.push_back(Entry{g.target, g.u, g.b});
  finish_entries(p);
  profiles_.push_back(std::move(p));
  return static_cast<int>(profiles_.size()) - 1;
}

std::vector<LinkUsage> LinkSharing::link_usage() const {
  std::vector<LinkUsage> out;
  out.reserve(class_of_.size());
  for (int cls : class_of_) out.push_back(usage_[static_cast<std::size_t>(cls)]);
  return out;
}

double LinkSharing::load(int profile, int link) const {
  if (link < 0 || link >= static_cast<int>(class_of_.size())) return 0;
  const int cls = class_of_[static_cast<std::size_t>(link)];
  for (const auto& [c, u] : profiles_[static_cast<std::size_t>(profile)].loads)
    if (c == cls) return u;
  return 0;
}

int LinkSharing::profile_of(int op) const {
  return op < static_cast<int>(ops_.size()) ? ops_[static_cast<std::size_t>(op)].profile : -1;
}

bool LinkSharing::add_load(int op) {
  const Profile& p = profiles_[static_cast<std::size_t>(ops_[static_cast<std::size_t>(op)].profile)];
  bool full = false;
  for (const auto& [l, u] : p.loads) {
    const auto li = static_cast<std::size_t>(l);
    full_load_[li] += u;
    on_link_[li].push_back(op);
    full = full || overloaded(l);
  }
  return full;
}

// One pass over the op's links does what three did (the seeds, set_speed(op, 0), taking its load
// off), each link's steps in the same order, so the results are the same to the bit.
std::vector<int> LinkSharing::remove(int op, Time now) {
  Active& a = ops_[static_cast<std::size_t>(op)];
  std::vector<int> seeds;  // the ops it shared a full link with: the only ones whose speed can change
  for (const auto& [l, u] : profiles_[static_cast<std::size_t>(a.profile)].loads) {
    const auto li = static_cast<std::size_t>(l);
    auto& v = on_link_[li];
    if (overloaded(l))
      for (int j : v)
        if (j != op) seeds.push_back(j);
    cur_load_[li] += (0.0 - a.speed) * u;
    if (v.size() <= 1) cur_load_[li] = 0;  // no rounding residue on an idle link
    full_load_[li] -= u;
    v.erase(std::find(v.begin(), v.end(), op));  // keeps the order: results must not depend on removals
    if (v.empty()) full_load_[li] = 0;
  }
  a.speed = 0.0;
  changes_.push_back({now, op, 0.0});
  return seeds;
}

std::vector<int> LinkSharing::component(const std::vector<int>& seeds) {
  ++epoch_;
  std::vector<int> out;
  for (int s : seeds)
    if (ops_[static_cast<std::size_t>(s)].active && mark_[static_cast<std::size_t>(s)] != epoch_) {
      mark_[static_cast<std::size_t>(s)] = epoch_;
      out.push_back(s);
    }
  for (std::size_t k = 0; k < out.size(); ++k) {
    const Profile& p = profiles_[static_cast<std::size_t>(ops_[static_cast<std::size_t>(out[k])].profile)];
    for (const auto& [l, u] : p.loads) {
      if (!overloaded(l)) continue;
      for (int j : on_link_[static_cast<std::size_t>(l)])
        if (mark_[static_cast<std::size_t>(j)] != epoch_) {
          mark_[static_cast<std::size_t>(j)] = epoch_;
          out.push_back(j);
        }
    }
  }
  return out;
}

void LinkSharing::start(int op, int profile, Time now, std::vector<std::pair<int, Time>>& changed) {
  MESHSIM_ASSERT(op >= 0 && profile >= 0 && profile < static_cast<int>(profiles_.size()));
  if (static_cast<std::size_t>(op) >= ops_.size()) {
    ops_.resize(static_cast<std::size_t>(op) + 1);
    mark_.resize(ops_.size(), 0);
  }
  Active& a = ops_[static_cast<std::size_t>(op)];
  MESHSIM_ASSERT(!a.active);
  const Profile& p = profiles_[static_cast<std::size_t>(profile)];
  a = Active{profile, p.alone_ps, 0.0, now, false, true};
  for (const Entry& e : p.entries) usage_[static_cast<std::size_t>(e.cls)].bytes += e.b;
  if (add_load(op)) {
    resolve(component({op}), now, changed, op);
    return;
  }
  // None of its links is full: it runs alone at full speed and slows nobody (what resolve() gives
  // a component of one op that fills no link, in one pass: set_speed(op, 1) and record_peaks).
  for (const auto& [l, u] : p.loads) {
    const auto li = static_cast<std::size_t>(l);
    cur_load_[li] += (1.0 - a.speed) * u;
    usage_[li].peak = std::max(usage_[li].peak, cur_load_[li] / cap_[li]);
  }
  a.speed = 1.0;
  changes_.push_back({now, op, 1.0});
  changed.emplace_back(op, now + duration_ps(a.work_ps, "an op's end under link sharing"));
}

void LinkSharing::finish(int op, Time now, std::vector<std::pair<int, Time>>& changed) {
  Active& a = ops_[static_cast<std::size_t>(op)];
  MESHSIM_ASSERT(a.active);
  const std::vector<int> seeds = remove(op, now);
  a.active = false;
  resolve(component(seeds), now, changed, -1);
}

void LinkSharing::set_speed(int op, double speed, Time now) {
  Active& a = ops_[static_cast<std::size_t>(op)];
  for (const auto& [l, u] : profiles_[static_cast<std::size_t>(a.profile)].loads) {
    const auto li = static_cast<std::size_t>(l);
    cur_load_[li] += (speed - a.speed) * u;
    if (speed == 0 && on_link_[li].size() <= 1) cur_load_[li] = 0;  // no rounding residue on an idle link
  }
  a.speed = speed;
  changes_.push_back({now, op, speed});
}

void LinkSharing::record_peaks(const std::vector<int>& ops) {
  for (int i : ops)
    for (const auto& [l, u] : profiles_[static_cast<std::size_t>(ops_[static_cast<std::size_t>(i)].profile)].loads) {
      const auto li = static_cast<std::size_t>(l);
      usage_[li].peak = std::max(usage_[li].peak, cur_load_[li] / cap_[li]);
    }
}

bool LinkSharing::overloaded_any(int op) const {
  for (const auto& [l, u] : profiles_[static_cast<std::size_t>(ops_[static_cast<std::size_t>(op)].profile)].loads)
    if (overloaded(l)) return true;
  return false;
}

// Progressive filling over the component's full links: every unfixed op's speed rises
// together; the first link to fill fixes its ops at that speed; at 1 the rest are fixed.
std::vector<double> LinkSharing::fill(const std::vector<int>& ops) {
  std::vector<int> links;  // the full links of the component
  std::vector<double> rem, weight;
  std::vector<std::vector<std::pair<std::size_t, double>>> members;               // per full link: (op index, u)
  std::vector<std::vector<std::pair<std::size_t, double>>> op_links(ops.size());  // per op: (link index, u)
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Profile& p = profiles_[static_cast<std::size_t>(ops_[static_cast<std::size_t>(ops[i])].profile)];
    for (const auto& [l, u] : p.loads) {
      if (!overloaded(l)) continue;
      int& k = slot_[static_cast<std::size_t>(l)];
      if (k < 0) {
        k = static_cast<int>(links.size());
        links.push_back(l);
        rem.push_back(cap_[static_cast<std::size_t>(l)]);
        weight.push_back(0);
        members.emplace_back();
      }
      const auto ks = static_cast<std::size_t>(k);
      weight[ks] += u;
      members[ks].emplace_back(i, u);
      op_links[i].emplace_back(ks, u);
    }
  }
  for (int l : links) slot_[static_cast<std::size_t>(l)] = -1;
  std::vector<double> speed(ops.size(), -1.0);
  std::size_t unfixed = ops.size();
  double level = 0;
  while (unfixed > 0) {
    double step = 1 - level;
    for (std::size_t k = 0; k < links.size(); ++k)
      if (weight[k] > 0) step = std::min(step, std::max(0.0, rem[k]) / weight[k]);
    level += step;
    for (std::size_t k = 0; k < links.size(); ++k) rem[k] -= step * weight[k];
    if (level >= 1 - kTolerance) {
      for (double& s : speed)
        if (s < 0) s = 1;
      break;
    }
    for (std::size_t k = 0; k < links.size(); ++k) {
      if (weight[k] <= 0 || rem[k] > kTolerance * cap_[static_cast<std::size_t>(links[k])]) continue;
      for (const auto& [i, u] : members[k]) {
        if (speed[i] >= 0) continue;
        speed[i] = level;
        --unfixed;
        for (const auto& [k2, u2] : op_links[i]) weight[k2] -= u2;
      }
      weight[k] = 0;
    }
  }
  return speed;
}

void LinkSharing::resolve(const std::vector<int>& ops, Time now, std::vector<std::pair<int, Time>>& changed,
                          int started) {
  if (ops.empty()) return;
  for (int i : ops) {  // bring every op's remaining work up to now at its old speed
    Active& a = ops_[static_cast<std::size_t>(i)];
    a.work_ps = std::max(0.0, a.work_ps - a.speed * static_cast<double>((now - a.since).ps()));
    a.since = now;
  }
  std::vector<double> speed{1.0};
  if (ops.size() > 1 || overloaded_any(ops.front())) {
    ++solves_;
    speed = fill(ops);
  }
  std::vector<int> moved;
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const int i = ops[k];
    Active& a = ops_[static_cast<std::size_t>(i)];
    if (speed[k] == a.speed && i != started) continue;
    if (speed[k] < 1 && !a.slowed) {
      a.slowed = true;
      ++slowed_ops_;
    }
    set_speed(i, speed[k], now);
    moved.push_back(i);
    changed.emplace_back(i, now + duration_ps(a.work_ps / speed[k], "an op's end under link sharing"));
  }
  record_peaks(moved);
}

}  // namespace meshsim
