// simulate_schedule: op durations from the compute model and the collective simulator,
// then a list-scheduling run of every role's streams on the event engine. See the header.
#include "sim/schedule_sim.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

#include "core/error.h"
#include "sim/engine.h"
#include "sim/schedule_internal.h"

namespace meshsim {

Time Breakdown::total() const {
  Time t = compute + recompute + optimizer + bubble;
  for (const auto& [k, v] : exposed) t += v;
  return t;
}

std::string comm_category(const Op& op) {
  if (op.kind == OpKind::Send || op.kind == OpKind::Recv || op.axis == "pp") return "pp";
  if (op.axis == "tp") return "tp";
  if (op.axis == "cp") return "cp";
  if (op.axis == "ep") return "ep";
  if (op.axis == "row" || op.axis == "col") return "2d";
  return "dp";
}

using detail::breakdown_of;
using detail::Costing;
using detail::Groups;
using detail::Runner;

ScheduleSimResult simulate_schedule(const Schedule& schedule, const Topology& topo, Router& router,
                                    const Placement& placement, const ComputeModel& compute,
                                    const AlgorithmRegistry& registry, const ScheduleSimOptions& options) {
  Groups groups(schedule, placement);
  Costing costing{topo, router, registry, options, groups, {}, {}};
  std::vector<int> offset;
  std::vector<Time> duration;
  std::vector<int> timing_of;  // distinct flow timing behind each op, or -1
  for (std::size_t r = 0; r < schedule.roles.size(); ++r) {
    offset.push_back(static_cast<int>(duration.size()));
    for (const Op& op : schedule.roles[r].ops) {
      int timing = -1;
      Time d;
      switch (op.kind) {
        case OpKind::Compute:
          d = compute.time(op.kernel);
          break;
        case OpKind::Collective:
        case OpKind::Send:
          std::tie(d, timing) = costing.time(static_cast<int>(r), op);
          break;
        case OpKind::Recv:
          break;
      }
      duration.push_back(d);
      timing_of.push_back(timing);
    }
  }
  Runner runner(schedule, duration, offset);
  runner.run();

  ScheduleSimResult res;
  res.trace.source = std::string("sim:") + to_string(options.fidelity);
  res.distinct_collectives = static_cast<int>(costing.cache.size());
  res.peak_activation = runner.peak_mem();
  for (std::size_t r = 0; r < schedule.roles.size(); ++r) {
    Time end;
    for (std::size_t i = 0; i < schedule.roles[r].ops.size(); ++i) {
      const int g = runner.gid(static_cast<int>(r), static_cast<int>(i));
      res.trace.events.push_back({static_cast<int>(r), static_cast<int>(i), -1,
                                  runner.start()[static_cast<std::size_t>(g)],
                                  runner.end()[static_cast<std::size_t>(g)]});
      end = std::max(end, runner.end()[static_cast<std::size_t>(g)]);
    }
    res.role_end.push_back(end);
    if (end > res.iteration) {
      res.iteration = end;
      res.critical_role = static_cast<int>(r);
    }
  }

  res.breakdown = breakdown_of(schedule, runner, res.critical_role, res.iteration, {});
  for (const Op& op : schedule.roles[static_cast<std::size_t>(res.critical_role)].ops)
    res.executed_flops_per_rank += op.kernel.flops;
  for (const Role& role : schedule.roles)
    for (const Op& op : role.ops) {
      res.flops_executed += op.kernel.flops;
      if (op.phase == Phase::Recompute) res.flops_recomputed += op.kernel.flops;
    }

  // Busiest links over the iteration (flow): bytes of every op's timing, summed.
  if (!costing.link_stats.empty() && res.iteration > Time{}) {
    std::vector<double> bytes(topo.links().size(), 0.0);
    for (std::size_t g = 0; g < timing_of.size(); ++g) {
      if (timing_of[g] < 0) continue;
      const auto& stats = costing.link_stats[static_cast<std::size_t>(timing_of[g])];
      for (std::size_t l = 0; l < stats.size() && l < bytes.size(); ++l) bytes[l] += stats[l].bytes;
    }
    res.top_links = busiest_links(topo, bytes, res.iteration);
  }
  return res;
}

void resolve_algorithms(Schedule& schedule, const Topology& topo, Router& router, const Placement& placement,
                        const AlgorithmRegistry& registry, const std::string& algorithm) {
  detail::Groups groups(schedule, placement);
  std::map<std::tuple<int, int, std::string, Bytes, int>, std::string> chosen;
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
