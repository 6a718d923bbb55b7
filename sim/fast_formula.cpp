// simulate_iteration_fast: unit templates fused into a few ops each. See the header.
#include "sim/fast_formula.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "schedule/plan.h"
#include "sim/schedule_internal.h"

namespace meshsim {
namespace {

using detail::Costing;
using detail::Groups;
using detail::Runner;

// A unit simulated alone and cut into fused segments.
struct Fused {
  std::optional<Op> recv;  // the unit's Recv
  int template_mb = 0;     // the micro-batch it was planned for (tags are shifted from it)
  struct Segment {
    Time duration;
    Bytes alloc = 0, free = 0;  // excursion above the level at the segment start; net = alloc - free
    Breakdown parts;
  };
  std::vector<Segment> segments;
  struct Escape {
    Op op;  // a Send or a gradient bucket: issued at the end of segment `after`
    int after = 0;
  };
  std::vector<Escape> escapes;
  int last_compute_segment = 0;  // the segment ending with the unit's last compute op
  double flops = 0, recomputed = 0;
};

bool escapes_unit(const Op& op, const std::vector<int>& dependents) {
  return op.kind == OpKind::Send || (op.kind == OpKind::Collective && op.stream == Stream::Dp && dependents.empty());
}

Fused analyze(const Role& unit, int stage, int microbatch, Costing& costing, const ComputeModel& compute) {
  Fused f;
  f.template_mb = microbatch;
  // The unit without its Recv: it starts at 0 with its input in hand.
  Schedule mini;
  mini.pp_axis = "";
  Role& r = mini.roles.emplace_back();
  r.stage = stage;
  std::vector<int> index(unit.ops.size(), -1);
  for (std::size_t i = 0; i < unit.ops.size(); ++i) {
    const Op& op = unit.ops[i];
    f.flops += op.kernel.flops;
    if (op.phase == Phase::Recompute) f.recomputed += op.kernel.flops;
    if (op.kind == OpKind::Recv) {
      f.recv = op;
      continue;
    }
    Op copy = op;
    copy.deps.clear();
    for (int d : op.deps)
      if (index[static_cast<std::size_t>(d)] >= 0) copy.deps.push_back(index[static_cast<std::size_t>(d)]);
    index[i] = static_cast<int>(r.ops.size());
    r.ops.push_back(std::move(copy));
  }
  const std::size_t n = r.ops.size();
  std::vector<Time> dur(n);
  std::vector<std::vector<int>> dependents(n);
  for (std::size_t i = 0; i < n; ++i) {
    const Op& op = r.ops[i];
    if (op.kind == OpKind::Compute)
      dur[i] = compute.time(op.kernel);
    else
      dur[i] = costing.time(stage, op).first;
    for (int d : op.deps) dependents[static_cast<std::size_t>(d)].push_back(static_cast<int>(i));
  }
  Runner run(mini, dur, {0});
  run.run();
  const auto& st = run.start();
  const auto& en = run.end();

  // Where to cut: the issue time of every escaping op, the end of the last compute op, and
  // the end of the unit (the last internal op).
  Time end_all, last_compute;
  std::vector<Time> cuts;
  std::vector<std::pair<std::size_t, Time>> issued;
  for (std::size_t i = 0; i < n; ++i) {
    if (escapes_unit(r.ops[i], dependents[i])) {
      Time t;
      for (int d : r.ops[i].deps) t = std::max(t, en[static_cast<std::size_t>(d)]);
      issued.emplace_back(i, t);
      cuts.push_back(t);
      continue;
    }
    end_all = std::max(end_all, en[i]);
    if (r.ops[i].kind == OpKind::Compute) last_compute = std::max(last_compute, en[i]);
  }
  cuts.push_back(last_compute);
  cuts.push_back(end_all);
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  auto segment_ending_at = [&](Time t) {
    return static_cast<int>(std::lower_bound(cuts.begin(), cuts.end(), t) - cuts.begin());
  };
  f.segments.resize(cuts.size());
  for (std::size_t k = 0; k < cuts.size(); ++k) f.segments[k].duration = cuts[k] - (k ? cuts[k - 1] : Time{});
  f.last_compute_segment = segment_ending_at(last_compute);
  for (const auto& [i, t] : issued) f.escapes.push_back({r.ops[i], segment_ending_at(t)});

  // Memory: allocations belong to the segment they start in, frees to the one they end in
  // (a free at a cut happens before the next segment's allocations, as in the full run).
  struct Ev {
    Time t;
    int order;
    Bytes delta;
  };
  std::vector<Ev> evs;
  for (std::size_t i = 0; i < n; ++i) {
    if (r.ops[i].free) evs.push_back({en[i], 0, -r.ops[i].free});
    if (r.ops[i].alloc) evs.push_back({st[i], 1, r.ops[i].alloc});
  }
  std::stable_sort(evs.begin(), evs.end(),
                   [](const Ev& a, const Ev& b) { return std::tie(a.t, a.order) < std::tie(b.t, b.order); });
  std::vector<Bytes> level(cuts.size(), 0), peak(cuts.size(), 0);
  for (const Ev& e : evs) {
    auto k = static_cast<std::size_t>(e.order == 0 ? segment_ending_at(e.t)
                                                   : std::upper_bound(cuts.begin(), cuts.end(), e.t) - cuts.begin());
    k = std::min(k, cuts.size() - 1);
    level[k] += e.delta;
    peak[k] = std::max(peak[k], level[k]);
  }
  for (std::size_t k = 0; k < cuts.size(); ++k) {
    f.segments[k].alloc = peak[k];
    f.segments[k].free = peak[k] - level[k];
  }

  // Breakdown inside the unit: compute-stream busy time by phase; gaps charged to what the
  // next compute op waited for; the tail to the trailing collectives.
  auto seg_of = [&](Time from) {  // the segment a gap or op starting at `from` lies in
    return std::min(static_cast<std::size_t>(std::upper_bound(cuts.begin(), cuts.end(), from) - cuts.begin()),
                    cuts.size() - 1);
  };
  auto charge = [&](Time from, Time to, const std::vector<int>& deps) {
    if (to <= from) return;
    Breakdown& b = f.segments[seg_of(from)].parts;
    std::vector<std::pair<Time, int>> ends;
    for (int d : deps) ends.emplace_back(en[static_cast<std::size_t>(d)], d);
    std::sort(ends.begin(), ends.end());
    Time t = from;
    for (const auto& [e, d] : ends) {
      if (e <= t) continue;
      b.exposed[comm_category(r.ops[static_cast<std::size_t>(d)])] += std::min(e, to) - t;
      t = std::min(e, to);
    }
    if (to > t) b.bubble += to - t;
  };
  Time cursor;
  for (std::size_t i = 0; i < n; ++i) {
    const Op& op = r.ops[i];
    if (op.kind != OpKind::Compute) continue;
    if (st[i] > cursor) charge(cursor, st[i], op.deps);
    Breakdown& b = f.segments[seg_of(st[i])].parts;
    const Time d = en[i] - st[i];
    if (op.phase == Phase::Recompute)
      b.recompute += d;
    else if (op.phase == Phase::Optimizer)
      b.optimizer += d;
    else
      b.compute += d;
    cursor = en[i];
  }
  if (end_all > cursor) {
    std::vector<int> internal;
    for (std::size_t i = 0; i < n; ++i)
      if (!escapes_unit(r.ops[i], dependents[i])) internal.push_back(static_cast<int>(i));
    charge(cursor, end_all, internal);
  }
  return f;
}

}  // namespace

std::optional<ScheduleSimResult> simulate_iteration_fast(const ModelSpec& m, const ParallelSpec& p,
                                                         const Topology& topo, Router& router,
                                                         const Placement& placement, const ComputeModel& compute,
                                                         const AlgorithmRegistry& registry,
                                                         const ScheduleSimOptions& options) {
  if (options.fidelity != Fidelity::Formula || p.zero >= 3) return std::nullopt;
  // Pipeline scatter/gather: the receiver's all-gather queues on the tp stream behind the
  // previous unit's asynchronous tp collectives, a coupling between units this path ignores.
  if (p.pipeline_scatter_gather()) return std::nullopt;
  UnitPlanner planner(m, p);
  Schedule fused;
  fused.axes = mesh_axes(p);
  Groups groups(fused, placement);
  Costing costing{topo, router, registry, options, groups, {}, {}};
  const std::int64_t tag_step = 2LL * p.pp * p.vchunks;  // tag distance between consecutive micro-batches
  std::vector<Time> duration;
  std::vector<const Breakdown*> parts;  // per fused op (global id), or nullptr
  std::vector<int> offset;
  std::map<std::tuple<int, bool, int>, Fused> templates;  // (stage, forward, chunk)
  std::vector<Fused> singles;                             // last micro-batch units, planned one by one
  singles.reserve(static_cast<std::size_t>(p.pp * p.vchunks));
  ScheduleSimResult res;
  res.trace.source = "sim:formula";

  for (int s = 0; s < p.pp; ++s) {
    offset.push_back(static_cast<int>(duration.size()));
    Role& role = fused.roles.emplace_back();
    role.name = "stage " + std::to_string(s);
    role.stage = s;
    auto push = [&](Op op, Time d, const Breakdown* b) {
      role.ops.push_back(std::move(op));
      duration.push_back(d);
      parts.push_back(b);
      return static_cast<int>(role.ops.size()) - 1;
    };
    std::vector<int> buckets;
    int last_compute_op = -1;
    double flops = 0, recomputed = 0;
    for (const PipelineUnit& u : pipeline_units(p, s)) {
      const bool last_mb = !u.forward && u.microbatch == p.microbatches - 1;
      const Fused* f = nullptr;
      if (last_mb) {
        singles.push_back(analyze(planner.unit(s, u), s, u.microbatch, costing, compute));
        f = &singles.back();
      } else {
        auto it = templates.find({s, u.forward, u.chunk});
        if (it == templates.end())
          it = templates
                   .emplace(std::make_tuple(s, u.forward, u.chunk),
                            analyze(planner.unit(s, u), s, u.microbatch, costing, compute))
                   .first;
        f = &it->second;
      }
      flops += f->flops;
      recomputed += f->recomputed;
      const std::int64_t shift = (u.microbatch - f->template_mb) * tag_step;
      int recv = -1;
      if (f->recv) {
        Op rv = *f->recv;
        rv.tag += shift;
        rv.microbatch = u.microbatch;
        recv = push(std::move(rv), Time{}, nullptr);
      }
      std::vector<int> seg_ops;
      for (std::size_t k = 0; k < f->segments.size(); ++k) {
        const Fused::Segment& sg = f->segments[k];
        Op op;
        op.kind = OpKind::Compute;
        op.stream = Stream::Compute;
        op.name = u.forward ? "forward" : "backward";
        op.microbatch = u.microbatch;
        op.alloc = sg.alloc;
        op.free = sg.free;
        if (k == 0 && recv >= 0) op.deps.push_back(recv);
        seg_ops.push_back(push(std::move(op), sg.duration, &sg.parts));
      }
      last_compute_op = seg_ops[static_cast<std::size_t>(f->last_compute_segment)];
      for (const Fused::Escape& esc : f->escapes) {
        Op op = esc.op;
        op.deps = {seg_ops[static_cast<std::size_t>(esc.after)]};
        if (op.kind == OpKind::Send) {
          op.tag += shift;
          op.microbatch = u.microbatch;
        }
        const Time d = costing.time(s, op).first;
        const int id = push(std::move(op), d, nullptr);
        if (role.ops[static_cast<std::size_t>(id)].kind == OpKind::Collective) buckets.push_back(id);
      }
    }
    // The epilogue as planned: the final bucket after the last compute op; the optimizer
    // phase's first op (the sp gradient all-reduce, or the first optimizer pass) after every
    // bucket, and a collective there after the last compute op too (Emitter::blocking).
    const Role epi = planner.epilogue(s);
    const int base = static_cast<int>(role.ops.size());
    bool optimizer_started = false;
    for (const Op& op0 : epi.ops) {
      Op op = op0;
      for (int& d : op.deps) d += base;
      const bool first_bucket = op.kind == OpKind::Collective && op.stream == Stream::Dp && op.deps.empty();
      if (first_bucket && last_compute_op >= 0) op.deps.push_back(last_compute_op);
      if (op.phase == Phase::Optimizer && !optimizer_started) {  // as the planner's wait_for
        optimizer_started = true;
        op.deps.insert(op.deps.end(), buckets.begin(), buckets.end());
        if (op.kind != OpKind::Compute && last_compute_op >= 0) op.deps.push_back(last_compute_op);
      }
      flops += op.kernel.flops;
      const Time d = op.kind == OpKind::Compute ? compute.time(op.kernel) : costing.time(s, op).first;
      push(std::move(op), d, nullptr);
    }
    res.flops_executed += flops;
    res.flops_recomputed += recomputed;
  }

  Runner runner(fused, duration, offset);
  runner.run();
  res.distinct_collectives = static_cast<int>(costing.cache.size());
  res.peak_activation = runner.peak_mem();
  for (std::size_t r = 0; r < fused.roles.size(); ++r) {
    Time end;
    for (std::size_t i = 0; i < fused.roles[r].ops.size(); ++i)
      end = std::max(end, runner.end()[static_cast<std::size_t>(runner.gid(static_cast<int>(r), static_cast<int>(i)))]);
    res.role_end.push_back(end);
    if (end > res.iteration) {
      res.iteration = end;
      res.critical_role = static_cast<int>(r);
    }
  }
  res.breakdown = detail::breakdown_of(fused, runner, res.critical_role, res.iteration, parts);
  return res;
}

}  // namespace meshsim
