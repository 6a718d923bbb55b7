// simulate_schedule: op durations from the compute model and the collective simulator,
// then a list-scheduling run of every role's streams on the event engine. See the header.
#include "sim/schedule_sim.h"

#include <tbb/enumerable_thread_specific.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "core/error.h"
#include "sim/engine.h"
#include "sim/schedule_internal.h"

namespace meshsim {

namespace detail {

namespace {

// A distinct timing of Costing::prefetch: its request, then its outcome or error.
struct PendingTiming {
  Costing::Key key;
  CollectiveRequest req;
  std::optional<CollectiveOutcome> out;
  std::exception_ptr error;  // thrown here
  std::string shared_error;  // thrown in another process (rethrown here as Error)
};

// Timings as bytes for the processes of a TimingShare (built from one tree: native layout). Only
// what Costing keeps travels: the time and the links a flow run used, or the error's text.
template <class T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <class T>
T take(const std::string& in, std::size_t& at) {
  MESHSIM_ASSERT(at + sizeof(T) <= in.size());
  T v;
  std::memcpy(&v, in.data() + at, sizeof v);
  at += sizeof v;
  return v;
}

// The timings `mine` says this process ran, as bytes.
std::string encode_timings(const std::vector<PendingTiming>& pending, const std::function<bool(std::size_t)>& mine) {
  std::string bytes;
  for (std::size_t i = 0; i < pending.size(); ++i) {
    if (!mine(i)) continue;
    const PendingTiming& p = pending[i];
    put(bytes, static_cast<std::uint32_t>(i));
    if (p.error) {
      std::string what;
      try {
        std::rethrow_exception(p.error);
      } catch (const std::exception& e) {
        what = e.what();
      }
      put(bytes, std::uint8_t{1});
      put(bytes, static_cast<std::uint32_t>(what.size()));
      bytes += what;
      continue;
    }
    put(bytes, std::uint8_t{0});
    put(bytes, p.out->time.ps());
    put(bytes, static_cast<std::uint8_t>(p.out->flow.has_value()));
    if (!p.out->flow) continue;
    put(bytes, static_cast<std::uint32_t>(p.out->flow->used_links.size()));
    for (const LinkUse& u : p.out->flow->used_links) {
      put(bytes, u.link);
      put(bytes, u.stats.bytes);
      put(bytes, u.stats.peak_flows);
    }
  }
  return bytes;
}

// Another process's timings into `pending`.
void decode_timings(const std::string& in, std::vector<PendingTiming>& pending) {
  std::size_t at = 0;
  while (at < in.size()) {
    const auto i = take<std::uint32_t>(in, at);
    MESHSIM_ASSERT(i < pending.size());
    PendingTiming& p = pending[i];
    if (take<std::uint8_t>(in, at) != 0) {
      const auto n = take<std::uint32_t>(in, at);
      MESHSIM_ASSERT(at + n <= in.size());
      p.shared_error = in.substr(at, n);
      at += n;
      continue;
    }
    CollectiveOutcome out;
    out.time = Time::from_ps(take<std::int64_t>(in, at));
    if (take<std::uint8_t>(in, at) != 0) {
      out.flow.emplace();
      out.flow->used_links.resize(take<std::uint32_t>(in, at));
      for (LinkUse& u : out.flow->used_links) {
        u.link = take<int>(in, at);
        u.stats.bytes = take<double>(in, at);
        u.stats.peak_flows = take<int>(in, at);
      }
    }
    p.out = std::move(out);
  }
}

}  // namespace

void Costing::prefetch(const std::vector<Role>& roles) {
  std::vector<PendingTiming> pending;
  std::set<Key> seen;
  for (std::size_t r = 0; r < roles.size(); ++r)
    for (const Op& op : roles[r].ops) {
      if (op.kind != OpKind::Collective && op.kind != OpKind::Send) continue;
      const Key key = key_of(static_cast<int>(r), op);
      if (cache.count(key) != 0 || !seen.insert(key).second) continue;
      if (std::optional<CollectiveRequest> req = request(static_cast<int>(r), op, key))
        pending.push_back({key, std::move(*req), std::nullopt, nullptr, {}});
    }
  if (pending.empty()) return;
  const TimingShare* share = opt.share != nullptr && opt.share->size > 1 ? opt.share : nullptr;
  const std::function<bool(std::size_t)> mine = [share](std::size_t i) {
    return share == nullptr || static_cast<int>(i % static_cast<std::size_t>(share->size)) == share->rank;
  };
  // A worker's router: the caller's own on the calling thread (a sweep's worker keeps its routes
  // from layout to layout), a new one on the others.
  struct Worker {
    std::optional<Router> own;
    Router* router;
    FlowNetwork::Scratch scratch;
    Worker(const Topology& t, Router* callers) : router(callers), scratch(t) {
      if (router == nullptr) router = &own.emplace(t);
    }
  };
  const std::thread::id caller = std::this_thread::get_id();
  // A worker's router and scratch take about 200 bytes per link of the fabric once its routes
  // are cached (measured: 220 MB more for a second worker at 102,400 GPUs, 1.2 million links),
  // so the workers are capped to keep theirs within 2 GiB: 8 at 102,400 GPUs, 54 at 16,384
  // (196,608 links); the results do not depend on how many run.
  constexpr double kWorkerBytesPerLink = 200, kWorkersBytes = 2.0 * (1ull << 30);
  const double per_worker = kWorkerBytesPerLink * static_cast<double>(std::max<std::size_t>(1, topo.links().size()));
  const int cap = static_cast<int>(std::clamp(kWorkersBytes / per_worker, 1.0, 4096.0));
  tbb::task_arena arena(std::min(cap, tbb::this_task_arena::max_concurrency()));
  tbb::enumerable_thread_specific<std::unique_ptr<Worker>> workers;
  arena.execute([&] {
    tbb::parallel_for(std::size_t{0}, pending.size(), [&](std::size_t i) {
      if (!mine(i)) return;
      std::unique_ptr<Worker>& w = workers.local();
      if (!w) w = std::make_unique<Worker>(topo, std::this_thread::get_id() == caller ? &router : nullptr);
      PendingTiming& p = pending[i];
      p.req.flow_scratch = &w->scratch;
      try {
        p.out = run_collective(topo, *w->router, registry, p.req);
      } catch (...) {
        p.error = std::current_exception();
      }
    });
  });
  if (share != nullptr) {
    const std::vector<std::string> all = share->all_gather(encode_timings(pending, mine));
    MESHSIM_ASSERT(static_cast<int>(all.size()) == share->size);
    for (int rank = 0; rank < share->size; ++rank)
      if (rank != share->rank) decode_timings(all[static_cast<std::size_t>(rank)], pending);
  }
  // Kept in op order; the first failure in that order is the one every process throws.
  for (PendingTiming& p : pending) {
    if (p.error) std::rethrow_exception(p.error);
    if (!p.shared_error.empty()) throw Error(p.shared_error);
    MESHSIM_ASSERT(p.out.has_value());
    keep(p.key, std::move(*p.out));
  }
}

}  // namespace detail

Time Breakdown::total() const {
  Time t = compute + recompute + optimizer + bubble;
  for (const auto& [k, v] : exposed) t += v;
  return t;
}

std::string comm_category(const Op& op) {
  if (op.kind == OpKind::Send || op.kind == OpKind::Recv || op.axis == MeshAxis::pp()) return "pp";
  if (op.axis == MeshAxis::tp()) return "tp";
  if (op.axis == MeshAxis::cp()) return "cp";
  if (op.stream == Stream::Ep) return "ep";  // axis ep, or ep+cp+tp when the ep groups span tp
  if (op.axis == MeshAxis::row() || op.axis == MeshAxis::col()) return "2d";
  return "dp";
}

namespace {

constexpr std::size_t kLoadTracks = 8;  // links whose load over time the result keeps, besides each tier's busiest

// The links whose load over time the result keeps: the kLoadTracks busiest overall, then the
// busiest of each tier none of those is in (the NIC and spine tiers under NVLink's busier rows).
std::vector<BusiestLink> tracked_links(const Topology& topo, const std::vector<double>& bytes, Time over) {
  const std::vector<BusiestLink> all = busiest_links(topo, bytes, over, bytes.size());
  std::vector<BusiestLink> out(all.begin(),
                               all.begin() + static_cast<std::ptrdiff_t>(std::min(kLoadTracks, all.size())));
  std::set<std::string> tiers;
  for (const BusiestLink& b : out) tiers.insert(link_tier(topo, b.link));
  for (const BusiestLink& b : all)
    if (tiers.insert(link_tier(topo, b.link)).second) out.push_back(b);
  return out;
}

// Each link's load (fraction of its achievable rate) at every instant it changed, read off
// the speed changes of the ops that load it.
std::vector<LinkLoadSeries> load_series(const Topology& topo, const LinkSharing& sharing,
                                        const std::vector<BusiestLink>& links) {
  std::vector<LinkLoadSeries> out;
  for (const BusiestLink& b : links) {
    LinkLoadSeries series{b.link, {}};
    const double cap = topo.link(b.link).spec.effective().bytes_per_ps();
    std::unordered_map<int, double> speed;  // of the ops that load this link, by op
    std::unordered_map<int, double> u_of_profile;
    double load = 0;
    for (const SpeedChange& c : sharing.speed_changes()) {
      const int p = sharing.profile_of(c.op);
      auto it = u_of_profile.find(p);
      if (it == u_of_profile.end()) it = u_of_profile.emplace(p, sharing.load(p, b.link)).first;
      if (it->second <= 0) continue;
      double& s = speed[c.op];
      load += (c.speed - s) * it->second;
      s = c.speed;
      const double frac = std::max(0.0, load / cap);
      if (!series.load.empty() && series.load.back().first == c.at)
        series.load.back().second = frac;
      else
        series.load.emplace_back(c.at, frac);
    }
    out.push_back(std::move(series));
  }
  return out;
}

// One LinkSharing profile per distinct flow timing (its time alone and link bytes), and the
// profile of every op (-1: timed without sharing).
std::vector<int> sharing_profiles(LinkSharing& sharing, const std::vector<std::vector<LinkUse>>& link_stats,
                                  const std::vector<int>& timing_of, const std::vector<Time>& duration) {
  std::vector<int> profile_of_timing(link_stats.size(), -1), profile(timing_of.size(), -1);
  for (std::size_t g = 0; g < timing_of.size(); ++g) {
    const int t = timing_of[g];
    if (t < 0 || duration[g] <= Time{}) continue;
    int& p = profile_of_timing[static_cast<std::size_t>(t)];
    if (p < 0) p = sharing.add_profile(duration[g], link_stats[static_cast<std::size_t>(t)]);
    profile[g] = p;
  }
  return profile;
}

// Link loads over the iteration (flow): bytes of every op's timing, summed; with link
// sharing, each link's peak, the time each kind of op lost to it, and the busiest links'
// load over time.
// Roles [first_role, end_role) of `schedule` are the job whose result `res` is.
void link_results(const Schedule& schedule, int first_role, int end_role, const Topology& topo,
                  const detail::Runner& runner, const std::vector<std::vector<LinkUse>>& link_stats,
                  const std::vector<int>& timing_of, const std::vector<Time>& duration, const LinkSharing* sharing,
                  ScheduleSimResult& res) {
  if (sharing != nullptr) {
    res.link_usage = sharing->link_usage();
    res.links_shared = true;
    for (int r = first_role; r < end_role; ++r)
      for (std::size_t i = 0; i < schedule.roles[r].ops.size(); ++i) {
        const auto g = static_cast<std::size_t>(runner.gid(r, static_cast<int>(i)));
        const Time taken = runner.end()[g] - runner.start()[g];
        if (timing_of[g] < 0 || taken <= duration[g]) continue;
        auto& [ops, extra] = res.sharing_delay[comm_category(schedule.roles[r].ops[i])];
        ++ops;
        extra += taken - duration[g];
      }
  } else {
    res.link_usage.assign(topo.links().size(), LinkUsage{});
    for (std::size_t g = 0; g < timing_of.size(); ++g) {
      if (timing_of[g] < 0) continue;
      for (const LinkUse& u : link_stats[static_cast<std::size_t>(timing_of[g])])
        res.link_usage[static_cast<std::size_t>(u.link)].bytes += u.stats.bytes;
    }
  }
  std::vector<double> bytes;
  for (const LinkUsage& u : res.link_usage) bytes.push_back(u.bytes);
  res.top_links = busiest_links(topo, bytes, res.iteration);
  if (sharing != nullptr) res.link_load = load_series(topo, *sharing, tracked_links(topo, bytes, res.iteration));
}

}  // namespace

using detail::breakdown_of;
using detail::Costing;
using detail::Groups;
using detail::Runner;

ScheduleSimResult simulate_schedule(const Schedule& schedule, const Topology& topo, Router& router,
                                    const Placement& placement, const ComputeModel& compute,
                                    const AlgorithmRegistry& registry, const ScheduleSimOptions& options) {
  return std::move(simulate_jobs({{&schedule, &placement, &compute, options}}, topo, router, registry).front());
}

namespace {

// The jobs' schedules as one: roles in job order, each job's Send/Recv tags moved past the
// jobs before it so that a Recv meets only its own job's Send.
Schedule merged_schedule(const std::vector<ScheduleJob>& jobs) {
  Schedule all;
  std::int64_t base = 0;
  for (const ScheduleJob& job : jobs) {
    std::int64_t top = -1;
    for (const Role& role : job.schedule->roles) {
      all.roles.push_back(role);
      for (Op& op : all.roles.back().ops)
        if (op.kind == OpKind::Send || op.kind == OpKind::Recv) {
          MESHSIM_ASSERT(op.tag >= 0);
          top = std::max(top, op.tag);
          op.tag += base;
        }
    }
    base += top + 1;
  }
  return all;
}

}  // namespace

std::vector<ScheduleSimResult> simulate_jobs(const std::vector<ScheduleJob>& jobs, const Topology& topo, Router& router,
                                             const AlgorithmRegistry& registry) {
  MESHSIM_ASSERT(!jobs.empty());
  const ScheduleSimOptions& common = jobs.front().options;
  for (const ScheduleJob& job : jobs)
    MESHSIM_ASSERT(job.options.fidelity == common.fidelity && job.options.share_links == common.share_links);
  std::vector<int> offset;         // per role of every job: its first op's global id
  std::vector<int> first_role{0};  // per job, and one past the last
  std::vector<Time> duration;
  std::vector<Time> beside;                      // compute ops beside communication (GpuSpec::comm_sms), or empty
  std::vector<int> timing_of;                    // distinct flow timing behind each op, or -1
  std::vector<std::vector<LinkUse>> link_stats;  // per distinct flow timing, every job's: the links it used
  std::vector<int> distinct;                     // per job: its collective timings
  bool contention = false;  // any GPU kind whose compute slows beside communication (GpuSpec::comm_sms)
  for (const ScheduleJob& j : jobs) {
    contention = contention || j.compute->gpu().comm_sms > 0;
    for (const auto& kinds : j.options.role_compute)
      for (const ComputeModel* k : kinds) contention = contention || k->gpu().comm_sms > 0;
  }
  for (const ScheduleJob& job : jobs) {
    const Schedule& schedule = *job.schedule;
    const ComputeModel& compute = *job.compute;
    const ScheduleSimOptions& options = job.options;
    Groups groups(schedule, *job.placement);
    Costing costing{topo, router, registry, options, groups, {}, {}};
    const int stats_base = static_cast<int>(link_stats.size());
    if (options.fidelity == Fidelity::Flow && options.parallel_timings) costing.prefetch(schedule.roles);
    for (std::size_t r = 0; r < schedule.roles.size(); ++r) {
      offset.push_back(static_cast<int>(duration.size()));
      for (const Op& op : schedule.roles[r].ops) {
        int timing = -1;
        Time d;
        switch (op.kind) {
          case OpKind::Compute: {
            const bool kinds = r < options.role_compute.size() && !options.role_compute[r].empty();
            auto [alone, slow] =
                (kinds ? *options.role_compute[r].front() : compute).times(op.kernel, op.phase == Phase::Backward);
            if (kinds)
              for (const ComputeModel* kind : options.role_compute[r]) {
                const auto [a, b] = kind->times(op.kernel, op.phase == Phase::Backward);
                alone = std::max(alone, a);
                slow = std::max(slow, b);
              }
            if (r < options.role_compute_factor.size()) {
              alone = duration_ps(static_cast<double>(alone.ps()) / options.role_compute_factor[r], "a slowed kernel");
              slow = duration_ps(static_cast<double>(slow.ps()) / options.role_compute_factor[r], "a slowed kernel");
            }
            d = alone;
            if (contention) beside.push_back(slow);
            break;
          }
          case OpKind::Collective:
          case OpKind::Send:
            std::tie(d, timing) = costing.time(static_cast<int>(r), op);
            break;
          case OpKind::Recv:
            break;
        }
        if (contention && op.kind != OpKind::Compute) beside.push_back(d);
        duration.push_back(d);
        timing_of.push_back(timing < 0 ? -1 : stats_base + timing);
      }
    }
    first_role.push_back(first_role.back() + static_cast<int>(schedule.roles.size()));
    for (auto& stats : costing.link_stats) link_stats.push_back(std::move(stats));
    distinct.push_back(static_cast<int>(costing.cache.size()));
  }
  // One job runs its own schedule; several run theirs as one (tags kept apart).
  std::optional<Schedule> merged;
  if (jobs.size() > 1) merged = merged_schedule(jobs);
  const Schedule& all = merged ? *merged : *jobs.front().schedule;
  // Flow fidelity: the ops in flight share the links (sim/link_sharing.h).
  const bool share = common.fidelity == Fidelity::Flow && common.share_links && !link_stats.empty();
  std::optional<LinkSharing> sharing;
  std::vector<int> profile;
  if (share) profile = sharing_profiles(sharing.emplace(topo), link_stats, timing_of, duration);
  Runner runner(all, duration, offset, share ? &*sharing : nullptr, std::move(profile), std::move(beside));
  runner.run();

  std::vector<ScheduleSimResult> out(jobs.size());
  for (std::size_t j = 0; j < jobs.size(); ++j) {
    ScheduleSimResult& res = out[j];
    const int first = first_role[j], end_role = first_role[j + 1];
    res.trace.source = std::string("sim:") + to_string(common.fidelity);
    res.distinct_collectives = distinct[j];
    res.peak_activation.assign(runner.peak_mem().begin() + first, runner.peak_mem().begin() + end_role);
    for (int r = first; r < end_role; ++r) {
      Time end;
      for (std::size_t i = 0; i < all.roles[r].ops.size(); ++i) {
        const int g = runner.gid(r, static_cast<int>(i));
        res.trace.events.push_back({r - first, static_cast<int>(i), -1, runner.start()[g], runner.end()[g]});
        end = std::max(end, runner.end()[g]);
      }
      res.role_end.push_back(end);
      if (end > res.iteration) {
        res.iteration = end;
        res.critical_role = r - first;
      }
    }
    const int crit = first + res.critical_role;
    res.breakdown = breakdown_of(all, runner, crit, res.iteration, {});
    for (const Op& op : all.roles[crit].ops) res.executed_flops_per_rank += op.kernel.flops;
    for (int r = first; r < end_role; ++r)
      for (const Op& op : all.roles[r].ops) {
        res.flops_executed += op.kernel.flops;
        if (op.phase == Phase::Recompute) res.flops_recomputed += op.kernel.flops;
      }
    if (!link_stats.empty() && res.iteration > Time{})
      link_results(all, first, end_role, topo, runner, link_stats, timing_of, duration, share ? &*sharing : nullptr,
                   res);
  }
  return out;
}

void resolve_algorithms(Schedule& schedule, const Topology& topo, Router& router, const Placement& placement,
                        const AlgorithmRegistry& registry, const AlgorithmChoice& algorithm) {
  detail::Groups groups(schedule, placement);
  std::map<std::tuple<int, int, MeshAxis, Bytes, int>, std::string> chosen;
  for (std::size_t role = 0; role < schedule.roles.size(); ++role)
    for (Op& op : schedule.roles[role].ops) {
      if (op.kind != OpKind::Collective || op.coll == CollKind::SendRecv || !op.algorithm.empty()) continue;
      const auto key = std::make_tuple(static_cast<int>(role), static_cast<int>(op.coll), op.axis, op.bytes, op.root);
      auto it = chosen.find(key);
      if (it == chosen.end()) {
        CollectiveRequest req;
        req.kind = op.coll;
        req.bytes = std::max<Bytes>(op.bytes, 1);
        req.fidelity = Fidelity::Formula;
        req.algorithm = algorithm;
        req.root = op.root;
        req.groups = {groups.along(static_cast<int>(role), op.axis).front()};
        req.alltoall_bytes = collective_spec(op, op.group_size, 1).alltoall_bytes;
        std::string name;  // a group of one runs nothing
        if (req.groups.front().size() > 1) name = run_collective(topo, router, registry, req).algorithm->name;
        it = chosen.emplace(key, name).first;
      }
      op.algorithm = it->second;
    }
}

}  // namespace meshsim
