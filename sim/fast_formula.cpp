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
    Time beside;                // the same with a communication kernel of another unit beside it throughout
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

// The unit without its Recv: it starts at 0 with its input in hand. Records the Recv and the
// unit's FLOPs in `f`.
Schedule unit_without_recv(const Role& unit, int stage, Fused& f) {
  Schedule mini;
  mini.pp_axis = {};
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
  return mini;
}

// The unit's ops run alone: when each started and ended, and which ops depend on each.
struct UnitRun {
  const std::vector<Op>& ops;
  std::vector<std::vector<int>> dependents;
  std::vector<Time> start, end;
  std::vector<Time> beside;  // compute ops: their duration beside communication (empty: not modelled)
  bool escapes(std::size_t i) const { return escapes_unit(ops[i], dependents[i]); }
};

// Kernel times alone and beside communication, by kernel: a unit's layers repeat the same
// kernels, and every unit template of a layout shares them.
class KernelTimes {
 public:
  explicit KernelTimes(const ComputeModel& compute) : compute_(compute) {}
  const ComputeModel& model() const { return compute_; }
  std::pair<Time, Time> of(const Kernel& k, bool backward) {
    const auto key = std::make_tuple(static_cast<int>(k.kind), static_cast<int>(k.fn), k.m, k.n, k.k, k.batch, k.causal,
                                     k.flops, k.bytes, k.dtype_bytes, k.sms_reserved, backward);
    auto it = memo_.find(key);
    if (it == memo_.end()) {
      it = memo_.emplace(key, compute_.times(k, backward)).first;
    }
    return it->second;
  }

 private:
  const ComputeModel& compute_;
  std::map<std::tuple<int, int, std::int64_t, std::int64_t, std::int64_t, std::int64_t, bool, double, double, int, int,
                      bool>,
           std::pair<Time, Time>>
      memo_;
};

UnitRun run_unit(const Schedule& mini, int stage, Costing& costing, KernelTimes& times) {
  const std::vector<Op>& ops = mini.roles.front().ops;
  const std::size_t n = ops.size();
  std::vector<Time> dur(n), beside;
  std::vector<std::vector<int>> dependents(n);
  const bool contention = times.model().gpu().comm_sms > 0;
  for (std::size_t i = 0; i < n; ++i) {
    const Op& op = ops[i];
    Time slow;
    if (op.kind == OpKind::Compute)
      std::tie(dur[i], slow) = times.of(op.kernel, op.phase == Phase::Backward);
    else
      slow = dur[i] = costing.time(stage, op).first;
    if (contention) beside.push_back(slow);
    for (int d : op.deps) dependents[static_cast<std::size_t>(d)].push_back(static_cast<int>(i));
  }
  Runner run(mini, dur, {0}, nullptr, {}, beside);
  run.run();
  return UnitRun{ops, std::move(dependents), run.start(), run.end(), std::move(beside)};
}

// Where to cut: the issue time of every escaping op, the end of the last compute op, and
// the end of the unit (the last internal op).
struct Cuts {
  std::vector<Time> at;  // sorted, distinct: the end of each segment
  Time end_all, last_compute;
  std::vector<std::pair<std::size_t, Time>> issued;  // escaping op, its issue time

  int segment_ending_at(Time t) const {
    return static_cast<int>(std::lower_bound(at.begin(), at.end(), t) - at.begin());
  }
  std::size_t segment_of(Time from) const {  // the segment a gap or op starting at `from` lies in
    return std::min(static_cast<std::size_t>(std::upper_bound(at.begin(), at.end(), from) - at.begin()), at.size() - 1);
  }
};

Cuts find_cuts(const UnitRun& u) {
  Cuts c;
  for (std::size_t i = 0; i < u.ops.size(); ++i) {
    if (u.escapes(i)) {
      Time t;
      for (int d : u.ops[i].deps) t = std::max(t, u.end[static_cast<std::size_t>(d)]);
      c.issued.emplace_back(i, t);
      c.at.push_back(t);
      continue;
    }
    c.end_all = std::max(c.end_all, u.end[i]);
    if (u.ops[i].kind == OpKind::Compute) c.last_compute = std::max(c.last_compute, u.end[i]);
  }
  c.at.push_back(c.last_compute);
  c.at.push_back(c.end_all);
  std::sort(c.at.begin(), c.at.end());
  c.at.erase(std::unique(c.at.begin(), c.at.end()), c.at.end());
  return c;
}

// A segment beside another unit's communication (a gradient bucket, a pipeline send) for its
// whole length takes each of its compute ops' extra time beside communication on top of what
// the op took in the unit (where the unit's own communication may already have slowed it).
void cut_into_segments(const UnitRun& u, const Cuts& cuts, Fused& f) {
  f.segments.resize(cuts.at.size());
  for (std::size_t k = 0; k < cuts.at.size(); ++k) {
    f.segments[k].duration = cuts.at[k] - (k ? cuts.at[k - 1] : Time{});
    f.segments[k].beside = f.segments[k].duration;
  }
  if (!u.beside.empty())
    for (std::size_t i = 0; i < u.ops.size(); ++i)
      if (u.ops[i].kind == OpKind::Compute && u.beside[i] > u.end[i] - u.start[i])
        f.segments[cuts.segment_of(u.start[i])].beside += u.beside[i] - (u.end[i] - u.start[i]);
  f.last_compute_segment = cuts.segment_ending_at(cuts.last_compute);
  for (const auto& [i, t] : cuts.issued) f.escapes.push_back({u.ops[i], cuts.segment_ending_at(t)});
}

// Memory: allocations belong to the segment they start in, frees to the one they end in
// (a free at a cut happens before the next segment's allocations, as in the full run).
void assign_memory(const UnitRun& u, const Cuts& c, Fused& f) {
  const std::vector<Time>& cuts = c.at;
  struct Ev {
    Time t;
    int order;
    Bytes delta;
  };
  std::vector<Ev> evs;
  for (std::size_t i = 0; i < u.ops.size(); ++i) {
    if (u.ops[i].free) evs.push_back({u.end[i], 0, -u.ops[i].free});
    if (u.ops[i].alloc) evs.push_back({u.start[i], 1, u.ops[i].alloc});
  }
  std::stable_sort(evs.begin(), evs.end(),
                   [](const Ev& a, const Ev& b) { return std::tie(a.t, a.order) < std::tie(b.t, b.order); });
  std::vector<Bytes> level(cuts.size(), 0), peak(cuts.size(), 0);
  for (const Ev& e : evs) {
    auto k = static_cast<std::size_t>(e.order == 0 ? c.segment_ending_at(e.t)
                                                   : std::upper_bound(cuts.begin(), cuts.end(), e.t) - cuts.begin());
    k = std::min(k, cuts.size() - 1);
    level[k] += e.delta;
    peak[k] = std::max(peak[k], level[k]);
  }
  for (std::size_t k = 0; k < cuts.size(); ++k) {
    f.segments[k].alloc = peak[k];
    f.segments[k].free = peak[k] - level[k];
  }
}

// Breakdown inside the unit: compute-stream busy time by phase; gaps charged to what the
// next compute op waited for; the tail to the trailing collectives.
void assign_breakdown(const UnitRun& u, const Cuts& cuts, Fused& f) {
  auto charge = [&](Time from, Time to, const std::vector<int>& deps) {
    if (to <= from) return;
    Breakdown& b = f.segments[cuts.segment_of(from)].parts;
    std::vector<std::pair<Time, int>> ends;
    for (int d : deps) ends.emplace_back(u.end[static_cast<std::size_t>(d)], d);
    std::sort(ends.begin(), ends.end());
    Time t = from;
    for (const auto& [e, d] : ends) {
      if (e <= t) continue;
      b.exposed[comm_category(u.ops[d])] += std::min(e, to) - t;
      t = std::min(e, to);
    }
    if (to > t) b.bubble += to - t;
  };
  const std::size_t n = u.ops.size();
  Time cursor;
  for (std::size_t i = 0; i < n; ++i) {
    const Op& op = u.ops[i];
    if (op.kind != OpKind::Compute) continue;
    if (u.start[i] > cursor) charge(cursor, u.start[i], op.deps);
    Breakdown& b = f.segments[cuts.segment_of(u.start[i])].parts;
    const Time d = u.end[i] - u.start[i];
    if (op.phase == Phase::Recompute)
      b.recompute += d;
    else if (op.phase == Phase::Optimizer)
      b.optimizer += d;
    else
      b.compute += d;
    cursor = u.end[i];
  }
  if (cuts.end_all > cursor) {
    std::vector<int> internal;
    for (std::size_t i = 0; i < n; ++i)
      if (!u.escapes(i)) internal.push_back(static_cast<int>(i));
    charge(cursor, cuts.end_all, internal);
  }
}

Fused analyze(const Role& unit, int stage, int microbatch, Costing& costing, KernelTimes& times) {
  Fused f;
  f.template_mb = microbatch;
  const Schedule mini = unit_without_recv(unit, stage, f);
  const UnitRun run = run_unit(mini, stage, costing, times);
  const Cuts cuts = find_cuts(run);
  cut_into_segments(run, cuts, f);
  assign_memory(run, cuts, f);
  assign_breakdown(run, cuts, f);
  return f;
}

// The fused schedule under construction: one role per pipeline stage, with every op's
// duration and breakdown by global op id, and each role's first global id.
struct FusedSchedule {
  Schedule schedule;
  std::vector<Time> duration;
  std::vector<Time> beside;             // per op: its duration beside communication (GpuSpec::comm_sms)
  std::vector<const Breakdown*> parts;  // per fused op (global id), or nullptr
  std::vector<int> offset;
};

// Builds a stage's role of the fused schedule: per pipeline unit its Recv, its fused
// segments and its escaping ops, then the stage's epilogue as planned.
class StageFuser {
 public:
  StageFuser(const ParallelSpec& p, UnitPlanner& planner, Costing& costing, const ComputeModel& compute,
             FusedSchedule& out)
      : p_(p), planner_(planner), costing_(costing), times_(compute), out_(out) {
    singles_.reserve(static_cast<std::size_t>(p.pp * p.vchunks));
  }

  // Appends stage s's role; adds its FLOPs to `res`.
  void add_stage(int s, ScheduleSimResult& res) {
    out_.offset.push_back(static_cast<int>(out_.duration.size()));
    role_ = &out_.schedule.roles.emplace_back();
    role_->name = "stage " + std::to_string(s);
    role_->stage = s;
    buckets_.clear();
    last_compute_op_ = -1;
    double flops = 0, recomputed = 0;
    for (const PipelineUnit& u : pipeline_units(p_, s)) {
      const Fused& f = analyzed(s, u);
      flops += f.flops;
      recomputed += f.recomputed;
      add_unit(s, u, f);
    }
    add_epilogue(s, flops);
    res.flops_executed += flops;
    res.flops_recomputed += recomputed;
  }

 private:
  int push(Op op, Time d, Time beside, const Breakdown* b) {
    role_->ops.push_back(std::move(op));
    out_.duration.push_back(d);
    out_.beside.push_back(beside);
    out_.parts.push_back(b);
    return static_cast<int>(role_->ops.size()) - 1;
  }

  // The unit analysed alone: the last micro-batch's backward units one by one, the others
  // once per (stage, forward, chunk).
  const Fused& analyzed(int s, const PipelineUnit& u) {
    const bool last_mb = !u.forward && u.microbatch == p_.microbatches - 1;
    if (last_mb) {
      singles_.push_back(analyze(planner_.unit(s, u), s, u.microbatch, costing_, times_));
      return singles_.back();
    }
    auto it = templates_.find({s, u.forward, u.chunk});
    if (it == templates_.end())
      it = templates_
               .emplace(std::make_tuple(s, u.forward, u.chunk),
                        analyze(planner_.unit(s, u), s, u.microbatch, costing_, times_))
               .first;
    return it->second;
  }

  // The unit's Recv, its fused segments and its escaping ops, tags shifted to its micro-batch.
  void add_unit(int s, const PipelineUnit& u, const Fused& f) {
    const std::int64_t tag_step = 2LL * p_.pp * p_.vchunks;  // tag distance between consecutive micro-batches
    const std::int64_t shift = (u.microbatch - f.template_mb) * tag_step;
    int recv = -1;
    if (f.recv) {
      Op rv = *f.recv;
      rv.tag += shift;
      rv.microbatch = u.microbatch;
      recv = push(std::move(rv), Time{}, Time{}, nullptr);
    }
    std::vector<int> seg_ops;
    for (std::size_t k = 0; k < f.segments.size(); ++k) {
      const Fused::Segment& sg = f.segments[k];
      Op op;
      op.kind = OpKind::Compute;
      op.stream = Stream::Compute;
      op.name = u.forward ? "forward" : "backward";
      op.microbatch = u.microbatch;
      op.alloc = sg.alloc;
      op.free = sg.free;
      if (k == 0 && recv >= 0) op.deps.push_back(recv);
      seg_ops.push_back(push(std::move(op), sg.duration, sg.beside, &sg.parts));
    }
    last_compute_op_ = seg_ops[static_cast<std::size_t>(f.last_compute_segment)];
    for (const Fused::Escape& esc : f.escapes) {
      Op op = esc.op;
      op.deps = {seg_ops[static_cast<std::size_t>(esc.after)]};
      if (op.kind == OpKind::Send) {
        op.tag += shift;
        op.microbatch = u.microbatch;
      }
      const Time d = costing_.time(s, op).first;
      const int id = push(std::move(op), d, d, nullptr);
      if (role_->ops[id].kind == OpKind::Collective) buckets_.push_back(id);
    }
  }

  // The epilogue as planned: the final bucket after the last compute op; the optimizer
  // phase's first op (the sp gradient all-reduce, or the first optimizer pass) after every
  // bucket, and a collective there after the last compute op too (Emitter::blocking).
  void add_epilogue(int s, double& flops) {
    const Role epi = planner_.epilogue(s);
    const int base = static_cast<int>(role_->ops.size());
    bool optimizer_started = false;
    for (const Op& op0 : epi.ops) {
      Op op = op0;
      for (int& d : op.deps) d += base;
      const bool first_bucket = op.kind == OpKind::Collective && op.stream == Stream::Dp && op.deps.empty();
      if (first_bucket && last_compute_op_ >= 0) op.deps.push_back(last_compute_op_);
      if (op.phase == Phase::Optimizer && !optimizer_started) {  // as the planner's wait_for
        optimizer_started = true;
        op.deps.insert(op.deps.end(), buckets_.begin(), buckets_.end());
        if (op.kind != OpKind::Compute && last_compute_op_ >= 0) op.deps.push_back(last_compute_op_);
      }
      flops += op.kernel.flops;
      Time d, beside;
      if (op.kind == OpKind::Compute)
        std::tie(d, beside) = times_.of(op.kernel, op.phase == Phase::Backward);
      else
        beside = d = costing_.time(s, op).first;
      push(std::move(op), d, beside, nullptr);
    }
  }

  const ParallelSpec& p_;
  UnitPlanner& planner_;
  Costing& costing_;
  KernelTimes times_;
  FusedSchedule& out_;
  std::map<std::tuple<int, bool, int>, Fused> templates_;  // (stage, forward, chunk)
  std::vector<Fused> singles_;                             // last micro-batch units, planned one by one
  Role* role_ = nullptr;                                   // the stage being built
  std::vector<int> buckets_;                               // its gradient buckets
  int last_compute_op_ = -1;                               // its last fused compute op
};

// Runs the fused schedule; the iteration ends with its slowest role.
void run_fused(const FusedSchedule& fused, const Costing& costing, ScheduleSimResult& res) {
  const bool contention = fused.beside != fused.duration;
  Runner runner(fused.schedule, fused.duration, fused.offset, nullptr, {},
                contention ? fused.beside : std::vector<Time>{});
  runner.run();
  res.distinct_collectives = static_cast<int>(costing.cache.size());
  res.peak_activation = runner.peak_mem();
  for (std::size_t r = 0; r < fused.schedule.roles.size(); ++r) {
    Time end;
    for (std::size_t i = 0; i < fused.schedule.roles[r].ops.size(); ++i)
      end = std::max(end, runner.end()[runner.gid(static_cast<int>(r), static_cast<int>(i))]);
    res.role_end.push_back(end);
    if (end > res.iteration) {
      res.iteration = end;
      res.critical_role = static_cast<int>(r);
    }
  }
  res.breakdown = detail::breakdown_of(fused.schedule, runner, res.critical_role, res.iteration, fused.parts);
}

}  // namespace

std::optional<ScheduleSimResult> simulate_iteration_fast(const CheckedLayout& layout, const Topology& topo,
                                                         Router& router, const Placement& placement,
                                                         const ComputeModel& compute, const AlgorithmRegistry& registry,
                                                         const ScheduleSimOptions& options) {
  const ParallelSpec& p = layout.parallel();
  if (options.fidelity != Fidelity::Formula || p.zero >= 3) return std::nullopt;
  // Pipeline scatter/gather: the receiver's all-gather queues on the tp stream behind the
  // previous unit's asynchronous tp collectives, a coupling between units this path ignores.
  if (p.pipeline_scatter_gather()) return std::nullopt;
  // A parameter all-gather under the forward (stack.overlap_param_gather) starts before any unit.
  if (p.stack.overlap_param_gather && p.gathers_params()) return std::nullopt;
  UnitPlanner planner(layout);
  FusedSchedule fused;
  fused.schedule.axes = mesh_axes(p);
  Groups groups(fused.schedule, placement);
  Costing costing{topo, router, registry, options, groups, {}, {}};
  ScheduleSimResult res;
  res.trace.source = "sim:formula";
  StageFuser fuser(p, planner, costing, compute, fused);
  for (int s = 0; s < p.pp; ++s) fuser.add_stage(s, res);
  run_fused(fused, costing, res);
  return res;
}

}  // namespace meshsim
