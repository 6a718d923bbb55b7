// Internals of the sim backend shared by simulate_schedule (schedule_sim.cpp) and the
// fast formula path (fast_formula.cpp): process groups per role, collective costing with
// a cache, the list-scheduling runner on the event engine, and the breakdown.
#pragma once

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <unordered_map>

#include "core/error.h"
#include "core/int_vector.h"
#include "sim/engine.h"
#include "sim/link_sharing.h"
#include "sim/schedule_sim.h"

namespace meshsim::detail {

// Process groups of each role along each axis, resolved through the placement.
class Groups {
 public:
  Groups(const Schedule& s, const Placement& pl) : pl_(pl) {
    const Mesh& mesh = pl.mesh();
    pp_dim_ = s.pp_axis.empty() ? -1 : mesh.dim_index(s.pp_axis.str());
    // Mesh rank r's pp coordinate is (r / stride) % size, row-major.
    if (pp_dim_ >= 0) {
      pp_size_ = mesh.dims[static_cast<std::size_t>(pp_dim_)].second;
      for (std::size_t d = static_cast<std::size_t>(pp_dim_) + 1; d < mesh.dims.size(); ++d)
        pp_stride_ *= mesh.dims[d].second;
    }
    rank_of_gpu_.assign(static_cast<std::size_t>(*std::max_element(pl.gpus().begin(), pl.gpus().end()) + 1), -1);
    for (int r = 0; r < mesh.size(); ++r) rank_of_gpu_[pl.gpu_of(r)] = r;
  }
  int stage_of_rank(int r) const { return pp_dim_ < 0 ? 0 : (r / pp_stride_) % pp_size_; }
  int stage_of_gpu(int gpu) const { return stage_of_rank(rank_of_gpu_[gpu]); }
  const std::vector<std::vector<int>>& along(int role, const MeshAxis& axis) {
    auto key = std::make_pair(role, axis);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    // All groups along the axis are computed once and dealt out to every role.
    if (!split_.count(axis)) {
      split_.insert(axis);
      for (auto& g : pl_.groups_along(axis)) {
        const int stage = stage_of_gpu(g.front());
        cache_[std::make_pair(stage, axis)].push_back(std::move(g));
      }
    }
    return cache_[key];
  }
  // Pairs (rank of stage `from`, the rank with the same other coordinates on stage `to`).
  std::vector<std::vector<int>> stage_pairs(int from, int to) const {
    std::vector<std::vector<int>> pairs;
    for (int r = 0; r < pl_.mesh().size(); ++r)
      if (stage_of_rank(r) == from) pairs.push_back({pl_.gpu_of(r), pl_.gpu_of(r + (to - from) * pp_stride_)});
    return pairs;
  }

 private:
  const Placement& pl_;
  int pp_dim_ = -1;
  int pp_size_ = 1, pp_stride_ = 1;
  IntVector<int> rank_of_gpu_;
  std::map<std::pair<int, MeshAxis>, std::vector<std::vector<int>>> cache_;
  std::set<MeshAxis> split_;  // axes already dealt out
};

struct Costing {
  using Key = std::tuple<int, int, MeshAxis, std::string, Bytes, int, double, int>;
  const Topology& topo;
  Router& router;
  const AlgorithmRegistry& registry;
  const ScheduleSimOptions& opt;
  Groups& groups;
  std::map<Key, std::pair<Time, int>> cache;     // -> time, index
  std::vector<std::vector<LinkUse>> link_stats;  // per distinct collective (flow): the links it used

  static Key key_of(int role, const Op& op) {
    const CollKind kind = op.kind == OpKind::Send ? CollKind::SendRecv : op.coll;
    const int peer = op.kind == OpKind::Send ? op.peer : -1;
    return std::make_tuple(role, static_cast<int>(kind), op.axis, op.algorithm, op.bytes, op.root, op.imbalance, peer);
  }

  // Returns the duration and the index of the distinct timing (for link accounting).
  std::pair<Time, int> time(int role, const Op& op) {
    const Key key = key_of(role, op);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    std::optional<CollectiveRequest> req = request(role, op, key);
    if (!req) return cache.find(key)->second;
    return keep(key, run_collective(topo, router, registry, *req));
  }

  // Fidelity flow: the distinct timings of `roles`' collectives and sends, run side by side
  // on oneTBB's workers (each with a router and a FlowNetwork::Scratch of its own, reused by
  // its runs; a route and a flow run do not depend on what a router has cached) and kept in
  // the order time() would meet them,
  // so that time() then reads them from the cache and the timings' indices are the ones a
  // run one by one gives. A failing timing's error is the first in that order.
  void prefetch(const std::vector<Role>& roles);

 private:
  // The request that times `op`; nullopt when nothing needs running (a measured profile, an
  // empty group or size: the cache then holds the answer).
  std::optional<CollectiveRequest> request(int role, const Op& op, const Key& key) {
    const CollKind kind = op.kind == OpKind::Send ? CollKind::SendRecv : op.coll;
    if (op.kind == OpKind::Collective && op.imbalance == 1.0 && op.bytes > 0)
      for (const CollectiveProfile& m : opt.measured)
        if (m.kind == kind && m.ranks == op.group_size) {
          cache.emplace(key, std::make_pair(m.time(op.bytes), -1));
          return std::nullopt;
        }
    CollectiveRequest req;
    req.kind = kind;
    req.bytes = op.bytes;
    req.fidelity = opt.fidelity;
    // A send/recv has one program (auto finds it); an op's resolved name wins over the run's choice.
    if (kind != CollKind::SendRecv)
      req.algorithm = op.algorithm.empty() ? opt.algorithm : AlgorithmChoice(op.algorithm);
    if (opt.fidelity == Fidelity::Nccl) {
      // NCCL's model covers its collectives; point-to-point (send/recv, all-to-all) falls
      // back to the closed form of the auto algorithm.
      const bool p2p = kind == CollKind::SendRecv || kind == CollKind::AllToAll;
      req.fidelity = p2p ? Fidelity::Formula : Fidelity::Nccl;
      req.algorithm.kind = p2p ? AlgorithmChoice::Kind::Auto : AlgorithmChoice::Kind::Nccl;
      req.nccl = opt.nccl;
    }
    req.gamma_ps = opt.gamma_ps;
    req.root = op.root;
    if (op.kind == OpKind::Send) {
      req.groups = groups.stage_pairs(role, op.peer);
    } else {
      const auto& gs = groups.along(role, op.axis);
      if (kind == CollKind::SendRecv) {  // ring shift along the axis
        for (const auto& g : gs)
          for (std::size_t i = 0; i < g.size(); ++i) req.groups.push_back({g[i], g[(i + 1) % g.size()]});
      } else {
        req.groups = gs;
      }
      req.alltoall_bytes = collective_spec(op, op.group_size, 1).alltoall_bytes;
    }
    // The closed form reads alpha/beta off the first group's routes only.
    if (req.fidelity == Fidelity::Formula && req.groups.size() > 1) req.groups.resize(1);
    if (req.groups.empty() || req.groups.front().size() <= 1 || op.bytes <= 0) {
      cache.emplace(key, std::make_pair(Time{}, -1));
      return std::nullopt;
    }
    return req;
  }

  std::pair<Time, int> keep(const Key& key, CollectiveOutcome out) {
    std::pair<Time, int> result{out.time, -1};
    if (out.flow) {
      result.second = static_cast<int>(link_stats.size());
      link_stats.push_back(std::move(out.flow->used_links));
    }
    return cache.emplace(key, result).first->second;
  }
};

// Whether `op` is communication whose kernels hold SMs while they run (NCCL's collectives and
// sends: one thread block per channel), so that a compute kernel beside it runs on fewer.
inline bool holds_sms(const Op& op) {
  return (op.kind == OpKind::Collective || op.kind == OpKind::Send) && !op.holds_no_sms;
}

// List scheduling of every role's streams on the event engine. An op takes its duration,
// or, when `sharing` is given and the op has a profile there (profile[g] >= 0), as long as
// the links it shares with the other ops in flight let it (sim/link_sharing.h).
// `beside_comm` (empty: not modelled) gives each compute op's duration while a communication
// kernel of its role holds SMs (holds_sms): a compute op runs at its own rate while none is in
// flight and at the slower one while any is, its remaining work carried across each change.
class Runner : public EventHandler {
 public:
  Runner(const Schedule& s, std::vector<Time> duration, std::vector<int> offset, LinkSharing* sharing = nullptr,
         std::vector<int> profile = {}, std::vector<Time> beside_comm = {})
      : s_(s),
        dur_(std::move(duration)),
        beside_(std::move(beside_comm)),
        off_(std::move(offset)),
        sharing_(sharing),
        profile_(std::move(profile)) {
    const std::size_t n = dur_.size();
    MESHSIM_ASSERT(beside_.empty() || beside_.size() == n);
    comm_in_flight_.assign(s.roles.size(), 0);
    running_.assign(s.roles.size(), Running{});
    remaining_.assign(n, 0);
    dependents_.assign(n, {});
    start_.assign(n, Time{});
    end_.assign(n, Time::max());
    stream_of_.assign(n, -1);
    streams_.assign(s.roles.size() * kStreams, {});
    head_.assign(streams_.size(), 0);
    busy_.assign(streams_.size(), false);
    cur_mem_.assign(s.roles.size(), 0);
    peak_mem_.assign(s.roles.size(), 0);
    generation_.assign(n, 0);
    if (sharing_ != nullptr) MESHSIM_ASSERT(profile_.size() == n);
    std::unordered_map<std::int64_t, int> send_of_tag;
    for (std::size_t r = 0; r < s.roles.size(); ++r)
      for (std::size_t i = 0; i < s.roles[r].ops.size(); ++i) {
        const Op& op = s.roles[r].ops[i];
        if (op.kind == OpKind::Send) send_of_tag[op.tag] = gid(static_cast<int>(r), static_cast<int>(i));
      }
    for (std::size_t r = 0; r < s.roles.size(); ++r) {
      const auto& ops = s.roles[r].ops;
      for (std::size_t i = 0; i < ops.size(); ++i) {
        const int g = gid(static_cast<int>(r), static_cast<int>(i));
        for (int d : ops[i].deps) {
          MESHSIM_ASSERT(d >= 0 && d < static_cast<int>(i));
          dependents_[gid(static_cast<int>(r), d)].push_back(g);
          ++remaining_[g];
        }
        if (ops[i].kind == OpKind::Recv) {
          auto it = send_of_tag.find(ops[i].tag);
          MESHSIM_ASSERT(it != send_of_tag.end());
          dependents_[it->second].push_back(g);
          ++remaining_[g];
        } else {
          const int st = static_cast<int>(r) * kStreams + static_cast<int>(ops[i].stream);
          stream_of_[g] = st;
          streams_[st].push_back(g);
        }
      }
    }
  }

  void run() {
    for (std::size_t r = 0; r < s_.roles.size(); ++r)
      for (std::size_t i = 0; i < s_.roles[r].ops.size(); ++i) {
        const int g = gid(static_cast<int>(r), static_cast<int>(i));
        if (s_.roles[r].ops[i].kind == OpKind::Recv && remaining_[g] == 0) finish_at(g, Time{});
      }
    for (std::size_t st = 0; st < streams_.size(); ++st) try_start(static_cast<int>(st));
    engine_.run();
    for (std::size_t g = 0; g < end_.size(); ++g)
      if (end_[g] == Time::max()) {
        const auto [r, i] = locate(static_cast<int>(g));
        throw Error("schedule deadlocked: stage " + std::to_string(r) + " op " + std::to_string(i) + " ('" +
                    s_.roles[r].ops[i].name + "') never ran; the pipeline order and its sends/recvs do not match");
      }
  }

  void handle(const Event& e) override {
    if (e.kind == kContended) {
      const int g = static_cast<int>(e.payload & 0xffffffffU);
      if (static_cast<std::uint32_t>(e.payload >> 32) != generation_[g]) return;  // moved
      finish(g);
      return;
    }
    if (e.kind == kShared) {
      const int g = static_cast<int>(e.payload & 0xffffffffU);
      if (static_cast<std::uint32_t>(e.payload >> 32) != generation_[g]) return;  // moved
      sharing_->finish(g, engine_.now(), changed_);
      reschedule();
      finish(g);
      return;
    }
    finish(static_cast<int>(e.payload));
  }

  const IntVector<Time>& start() const { return start_; }
  const IntVector<Time>& end() const { return end_; }
  const std::vector<Bytes>& peak_mem() const { return peak_mem_; }
  int gid(int role, int i) const { return off_[role] + i; }
  std::pair<int, int> locate(int g) const {
    const auto it = std::upper_bound(off_.begin(), off_.end(), g) - 1;
    const int r = static_cast<int>(it - off_.begin());
    return {r, g - *it};
  }

 private:
  const Op& op(int g) const {
    const auto [r, i] = locate(g);
    return s_.roles[r].ops[i];
  }
  void try_start(int st) {
    auto& q = streams_[st];
    std::size_t& h = head_[st];
    if (busy_[st] || h >= q.size()) return;
    const int g = q[h];
    if (remaining_[g] > 0) return;
    ++h;
    busy_[st] = true;
    const Time now = engine_.now();
    start_[g] = now;
    const int role = locate(g).first;
    cur_mem_[role] += op(g).alloc;
    peak_mem_[role] = std::max(peak_mem_[role], cur_mem_[role]);
    if (!beside_.empty() && holds_sms(op(g)) && ++comm_in_flight_[role] == 1) set_contended(role, true);
    if (sharing_ != nullptr && profile_[g] >= 0) {
      sharing_->start(g, profile_[g], now, changed_);
      reschedule();
      return;
    }
    if (!beside_.empty() && op(g).kind == OpKind::Compute && beside_[g] != dur_[g]) {
      Running& run = running_[role];
      run = Running{g, 0.0, now, comm_in_flight_[role] > 0};
      schedule_contended(g, now + (run.slow ? beside_ : dur_)[g]);
      return;
    }
    engine_.schedule(now + dur_[g], this, 0, static_cast<std::uint64_t>(g));
  }
  // The running compute op of `role` (if its rate depends on it) changes rate: the work done
  // so far at the old rate is kept, the rest takes the new one.
  void set_contended(int role, bool slow) {
    Running& run = running_[role];
    if (run.op < 0 || run.slow == slow) {
      run.slow = slow;
      return;
    }
    const int g = run.op;
    const Time now = engine_.now();
    const double old_total = static_cast<double>((run.slow ? beside_ : dur_)[g].ps());
    if (old_total > 0) run.done += static_cast<double>((now - run.since).ps()) / old_total;
    run.done = std::min(run.done, 1.0);
    run.since = now;
    run.slow = slow;
    const double total = static_cast<double>((slow ? beside_ : dur_)[g].ps());
    schedule_contended(run.op, now + Time::from_ps(std::llround((1.0 - run.done) * total)));
  }
  void schedule_contended(int g, Time at) {
    const std::uint32_t gen = ++generation_[g];
    engine_.schedule(at, this, kContended, (static_cast<std::uint64_t>(gen) << 32) | static_cast<std::uint64_t>(g));
  }
  // Ends that link sharing moved: a new event each, the old one ignored by its generation.
  void reschedule() {
    for (const auto& [g, at] : changed_) {
      const std::uint32_t gen = ++generation_[g];
      engine_.schedule(at, this, kShared, (static_cast<std::uint64_t>(gen) << 32) | static_cast<std::uint64_t>(g));
    }
    changed_.clear();
  }
  void finish_at(int g, Time t) {
    start_[g] = t;
    engine_.schedule(t, this, 0, static_cast<std::uint64_t>(g));
  }
  void finish(int g) {
    const Time now = engine_.now();
    end_[g] = now;
    const int role = locate(g).first;
    cur_mem_[role] -= op(g).free;
    if (!beside_.empty()) {
      if (running_[role].op == g) running_[role] = Running{};
      if (holds_sms(op(g)) && stream_of_[g] >= 0 && --comm_in_flight_[role] == 0) set_contended(role, false);
    }
    const int st = stream_of_[g];
    if (st >= 0) busy_[st] = false;
    for (int d : dependents_[g]) {
      if (--remaining_[d] > 0) continue;
      const int dst = stream_of_[d];
      if (dst < 0)
        finish_at(d, now);  // a Recv: done once its Send and deps are
      else
        try_start(dst);
    }
    if (st >= 0) try_start(st);
  }

  static constexpr std::uint32_t kShared = 1;     // event kind of an end under link sharing
  static constexpr std::uint32_t kContended = 2;  // event kind of a compute op's end under comm contention
  struct Running {                                // a role's compute op whose rate follows the comm in flight
    int op = -1;
    double done = 0;  // fraction of its work done by `since`
    Time since;
    bool slow = false;
  };
  const Schedule& s_;
  IntVector<Time> dur_;
  IntVector<Time> beside_;
  IntVector<int> comm_in_flight_;  // per role: communication ops holding SMs
  IntVector<Running> running_;     // per role
  IntVector<int> off_;
  LinkSharing* sharing_;
  IntVector<int> profile_;
  IntVector<std::uint32_t> generation_;
  std::vector<std::pair<int, Time>> changed_;
  Engine engine_;
  IntVector<int> remaining_;
  IntVector<std::vector<int>> dependents_;
  IntVector<Time> start_, end_;
  IntVector<int> stream_of_;
  IntVector<std::vector<int>> streams_;
  IntVector<std::size_t> head_;
  IntVector<char> busy_;  // per stream (char: IntVector<bool> would be std::vector<bool>'s proxies)
  IntVector<Bytes> cur_mem_, peak_mem_;
};

// Breakdown of role `crit`: compute-stream busy time by phase, and every gap on the compute
// stream charged to what the next compute op waited for, in the order its dependencies
// finished: each dependency takes the part of the gap up to its end. Waiting on a Recv is
// pipeline bubble until the matching Send started and pp communication after. Waiting on a
// communication op that had not started yet is charged, up to its start, to what that op
// itself waited for (so a pipeline scatter/gather's all-gather, which follows its Recv, is
// bubble while the previous stage computes and tp only once it runs). `macro`
// (indexed by global op id, may be empty) gives what each fused op of the fast path
// (fast_formula.cpp) stood for.
inline Breakdown breakdown_of(const Schedule& schedule, const Runner& runner, int crit, Time iteration,
                              const std::vector<const Breakdown*>& macro) {
  const Role& role = schedule.roles[crit];
  auto at = [&](int i) { return runner.gid(crit, i); };
  std::unordered_map<std::int64_t, int> send_gid;
  for (std::size_t r = 0; r < schedule.roles.size(); ++r)
    for (std::size_t i = 0; i < schedule.roles[r].ops.size(); ++i)
      if (schedule.roles[r].ops[i].kind == OpKind::Send)
        send_gid[schedule.roles[r].ops[i].tag] = runner.gid(static_cast<int>(r), static_cast<int>(i));
  Breakdown b;
  Time cursor;
  std::function<void(Time, Time, const std::vector<int>&)> charge_gap;
  auto charge = [&](Time from, Time to, int waited) {
    if (to <= from) return;
    if (waited < 0) {
      b.bubble += to - from;
      return;
    }
    const Op& w = role.ops[waited];
    if (w.kind == OpKind::Recv) {
      const Time send_start = std::clamp(runner.start()[send_gid.at(w.tag)], from, to);
      b.bubble += send_start - from;
      b.exposed["pp"] += to - send_start;
      return;
    }
    // Before it started, a communication op was waiting for its own dependencies (or queued
    // behind its stream, which stays its own category).
    const Time started = std::clamp(runner.start()[at(waited)], from, to);
    if (started > from && w.stream != Stream::Compute) {
      Time deps_done = from;
      for (int d : w.deps) deps_done = std::max(deps_done, runner.end()[at(d)]);
      const Time covered = std::min(started, deps_done);
      if (covered > from) charge_gap(from, covered, w.deps);
      from = covered;
    }
    b.exposed[comm_category(w)] += to - from;
  };
  charge_gap = [&](Time from, Time to, const std::vector<int>& deps) {
    std::vector<std::pair<Time, int>> ends;
    for (int d : deps) ends.emplace_back(runner.end()[at(d)], d);
    std::sort(ends.begin(), ends.end());
    Time t = from;
    for (const auto& [end, d] : ends) {
      if (end <= t) continue;
      charge(t, std::min(end, to), d);
      t = std::min(end, to);
    }
    charge(t, to, -1);
  };
  for (std::size_t i = 0; i < role.ops.size(); ++i) {
    const Op& op = role.ops[i];
    if (op.stream != Stream::Compute || op.kind != OpKind::Compute) continue;
    const Time s = runner.start()[at(static_cast<int>(i))], e = runner.end()[at(static_cast<int>(i))];
    if (s > cursor) charge_gap(cursor, s, op.deps);
    const Breakdown* c = macro.empty() ? nullptr : macro[at(static_cast<int>(i))];
    if (c != nullptr) {
      // A fused op beside another unit's communication ran longer than its parts: compute
      // slowed (GpuSpec::comm_sms), so the difference is compute.
      b.compute += c->compute + std::max(Time{}, (e - s) - c->total());
      b.recompute += c->recompute;
      b.optimizer += c->optimizer;
      b.bubble += c->bubble;
      for (const auto& [k, v] : c->exposed) b.exposed[k] += v;
    } else if (op.phase == Phase::Recompute) {
      b.recompute += e - s;
    } else if (op.phase == Phase::Optimizer) {
      b.optimizer += e - s;
    } else {
      b.compute += e - s;
    }
    cursor = e;
  }
  if (iteration > cursor) {
    // The tail: the ops still running after the last compute op (trailing collectives).
    std::vector<int> all(role.ops.size());
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
    charge_gap(cursor, iteration, all);
  }
  return b;
}

}  // namespace meshsim::detail
