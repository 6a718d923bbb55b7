// meshsim run and validate of a collective workload, and the launcher's side of both: see
// run_report.h.
#include "report/run_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>

#include "backend/cpu/cpu_compute.h"
#include "core/error.h"
#include "core/output_file.h"
#include "report/collective_report.h"
#include "report/comparison.h"
#include "report/training_report.h"
#include "sim/schedule_sim.h"
#include "topology/placement.h"
#include "topology/presets.h"

namespace meshsim {

std::string backend_label(const RunOptions& o) {
  return o.backend == Backend::Cuda ? fmt::format("cuda (collectives: {})", to_string(o.collectives))
                                    : std::string(to_string(o.backend));
}

namespace {

std::string format_mesh(const std::vector<std::pair<std::string, int>>& dims) {
  std::string s;
  for (const auto& [name, n] : dims) s += fmt::format("{}{}={}", s.empty() ? "" : ",", name, n);
  return s;
}

// The cpu backend holds a collective's input, output and serial reference and receives into a
// scratch buffer: about 4x its bytes a rank. More than half the host is one error, not a
// bad_alloc in every rank.
void check_cpu_buffers(const CollectiveWorkload& w) {
  const double need = 4.0 * static_cast<double>(w.bytes), have = static_cast<double>(cpu::host_memory());
  if (need > have / 2)
    throw Error(fmt::format(
        "workload.bytes: {} needs about {} of buffers a rank on the cpu backend (input, output, "
        "the serial reference, a receive buffer), more than half this host's {}; use a "
        "smaller size",
        format_bytes(w.bytes), format_bytes(static_cast<Bytes>(need)), format_bytes(static_cast<Bytes>(have))));
}

// The topology the predictions use, with a GPU for every rank running.
Topology checked_topology(const std::string& topo_spec, int ranks) {
  Topology topo = resolve_topology(topo_spec);
  if (topo.num_gpus() < ranks)
    throw Error(
        fmt::format("topology: {} has {} GPUs, fewer than the {} ranks running; describe this machine with "
                    "one GPU per rank",
                    topo_spec, topo.num_gpus(), ranks));
  return topo;
}

// Resolves an `auto` algorithm for this machine with the simulator's own resolver (the op's
// first group, its timed bytes), and replans the workload with it.
void resolve_auto_algorithm(CollectiveWorkload& w, Schedule& schedule, const Topology& topo,
                            const AlgorithmRegistry& registry, const Placement& placement) {
  Router router(topo);
  resolve_algorithms(schedule, topo, router, placement, registry);
  for (const Op& op : schedule.roles[0].ops)
    if (op.kind == OpKind::Collective && !op.algorithm.empty()) {
      w.algorithm = op.algorithm;
      break;
    }
  schedule = plan_collectives(w);
}

// What rank 0 reports a collective workload's run against.
struct CollectiveRun {
  const RunOptions& o;
  const Scenario& sc;
  const CollectiveWorkload& w;
  const std::string& topo_spec;  // the machine model
  double gamma_ps;
  const Placement& placement;
  const Schedule& schedule;
  const MeshAxis& axis;  // the group's mesh axis
};

nlohmann::ordered_json run_json(const CollectiveRun& r, const Comparison& table, const MeasuredOps& m) {
  const RunOptions& o = r.o;
  const CollectiveWorkload& w = r.w;
  nlohmann::ordered_json j;
  j["backend"] = to_string(o.backend);
  if (o.backend == Backend::Cuda) j["collectives"] = to_string(o.collectives);
  j["ranks"] = w.ranks;
  j["collective"] = to_string(w.kind);
  j["algorithm"] = w.algorithm.text();
  j["bytes"] = w.bytes;
  if (!w.mesh.empty()) {
    j["mesh"] = format_mesh(w.mesh);
    j["group"] = r.axis.str();
    j["placement"] = r.sc.placement;
  }
  j["machine_model"] = r.topo_spec;
  j["gamma_ps_per_byte"] = r.gamma_ps;
  add_comparison_json(j, table);
  j["numerics_checked"] = m.all_checked;
  j["max_abs_error"] = m.max_error;
  return j;
}

// nccl-tests' table from the measured run: one row for the workload's size at the mean of
// its iterations (nccl-tests averages its iterations too), #wrong from the numerics check.
std::string run_nccl_tests(const CollectiveRun& r, const std::vector<Time>& op_times, const MeasuredOps& m) {
  const CollectiveWorkload& w = r.w;
  Time total;
  for (const Time& t : op_times) total += t;
  const Time mean = Time::from_ps(total.ps() / std::max<std::int64_t>(1, static_cast<std::int64_t>(op_times.size())));
  const bool exact = m.all_checked && m.max_error == 0;
  const NcclTestsRow row{w.kind, r.schedule.roles[0].ops[0].group_size,        w.bytes, w.root,
                         mean,   m.all_checked ? (exact ? "0" : "N/A") : "N/A"};
  std::string s =
      fmt::format("# meshsim {} {} (nccl-tests layout): {} ranks, backend {}, measured, mean of {} iterations\n",
                  r.o.validate ? "validate" : "run", to_string(w.kind), w.ranks, backend_label(r.o), op_times.size());
  s += "#\n" + nccl_tests_columns() + nccl_tests_row(row);
  s += nccl_tests_footer({bandwidths(w.kind, row.ranks, w.bytes, mean).busbw_GBps},
                         m.all_checked ? (exact ? "0 OK" : "N/A (results differ from the serial reference)")
                                       : "N/A (not checked: buffers above the check limit)");
  return s;
}

std::string run_text(const CollectiveRun& r, const Comparison& table, const MeasuredOps& m) {
  const RunOptions& o = r.o;
  const CollectiveWorkload& w = r.w;
  std::ostringstream text;
  text << fmt::format("meshsim {}: {} of {} on {} ranks, algorithm {}, backend {}\n", o.validate ? "validate" : "run",
                      to_string(w.kind), format_bytes(w.bytes), w.ranks,
                      o.collectives == CollectivesMode::Nccl ? std::string("NCCL's own") : w.algorithm.text(),
                      backend_label(o));
  if (!w.mesh.empty())
    text << fmt::format("  mesh {}, placement {}, {} group(s) of {} along {} at once\n", format_mesh(w.mesh),
                        r.sc.placement, r.placement.groups_along(r.axis).size(), r.schedule.roles[0].ops[0].group_size,
                        r.axis.str());
  text << fmt::format("  machine model: {}{}\n", r.topo_spec,
                      r.gamma_ps > 0 ? fmt::format(", reduction {:.1f} ps/byte (measured)", r.gamma_ps) : "");
  text << comparison_text(table);
  text << (m.all_checked
               ? fmt::format("  numerics: every rank's result equals the serial reference (max abs error {})\n",
                             m.max_error)
               : std::string("  numerics: not checked (buffers above the check limit)\n"));
  return text.str();
}

// Every op measured (over all ranks) against the prediction (validate), as text or JSON,
// and the side-by-side trace.
void report_collective_run(const CollectiveRun& r, const Topology& topo, const AlgorithmRegistry& registry,
                           const MeasuredOps& m) {
  const RunOptions& o = r.o;
  const CollectiveWorkload& w = r.w;
  const std::size_t ops = r.schedule.roles[0].ops.size();
  std::optional<ScheduleSimResult> predicted;
  if (o.validate) {
    const ComputeModel compute(gpu_preset("h100"));  // no compute ops in a collective workload
    Router router(topo);
    ScheduleSimOptions opt;
    opt.fidelity = r.sc.fidelity;
    opt.gamma_ps = r.gamma_ps;
    predicted = simulate_schedule(r.schedule, topo, router, r.placement, compute, registry, opt);
  }
  std::vector<Time> op_times;  // per op: the latest end over ranks minus the earliest start
  for (std::size_t i = 0; i < ops; ++i) op_times.push_back(m.end[i] - m.start[i]);
  const Comparison table =
      op_comparison(r.schedule, op_times, predicted ? &*predicted : nullptr, w.kind, w.bytes, w.ranks);
  if (o.format == "nccl-tests")
    std::cout << run_nccl_tests(r, op_times, m) << std::flush;
  else
    std::cout << (o.json ? run_json(r, table, m).dump(2) + "\n" : run_text(r, table, m)) << std::flush;

  if (!o.trace.empty()) {
    std::vector<TraceEvent> measured;
    for (const auto& evs : m.per_rank) measured.insert(measured.end(), evs.begin(), evs.end());
    write_side_by_side_trace(o.trace, r.schedule, o.backend, measured, predicted ? &predicted->trace : nullptr);
  }
}

// A collective workload on this rank: every rank runs it, rank 0 reports it.
int run_collective_rank(const RunOptions& o, const Scenario& sc, RankSession& session) {
  const launch::LaunchEnv& env = session.env;
  const auto timeout = session.timeout;
  launch::RendezvousClient& store = *session.store;
  cpu::Transport* transport = session.transport.get();

  CollectiveWorkload w = *sc.workload;
  if (w.ranks != 0 && w.ranks != env.world_size)
    throw Error(fmt::format("workload.{}: {} ranks but {} are running; launch with -n {}",
                            w.mesh.empty() ? "ranks" : "mesh", w.ranks, env.world_size, w.ranks));
  w.ranks = env.world_size;
  if (o.backend == Backend::Cpu) check_cpu_buffers(w);

  // The machine model for predictions (and for choosing `auto`): the scenario's topology,
  // or (cpu) a switch with the latency and loaded bandwidth measured here (every rank takes part).
  const std::string topo_spec = machine_topology(session, sc.topology, sc.topology_given);
  // The reduction cost only matters to validate's prediction, made on rank 0.
  const double gamma_ps = o.validate && env.rank == 0 && !sc.topology_given && transport ? measure_gamma_ps() : 0.0;
  const Topology topo = checked_topology(topo_spec, w.ranks);
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  Schedule schedule = plan_collectives(w);
  Mesh mesh;
  mesh.dims = schedule.axes;
  // Rank r runs as GPU r of the topology; the placement says which mesh rank that is.
  const Placement placement =
      w.mesh.empty() ? Placement::natural(mesh, topo) : Placement::parse(sc.placement, mesh, topo, "placement");
  const MeshAxis axis = schedule.roles[0].ops[0].axis;
  if (w.algorithm.kind == AlgorithmChoice::Kind::Auto) resolve_auto_algorithm(w, schedule, topo, registry, placement);

  std::vector<cpu::NumericsCheck> checks;  // every op's result against the serial reference
  ExecutorOptions eopt = session.executor_options(o.backend, o.collectives);
  eopt.warmup = o.warmup;
  eopt.fp32_kernels = o.fp32_kernels;
  if (axis != MeshAxis::rank()) eopt.cpu.groups[axis] = placement.groups_along(axis);
  eopt.checks = &checks;
  const Trace mine = make_executor(registry, placement, eopt)->execute(schedule);
  const std::vector<std::string> all =
      store.gather("trace", env.rank, env.world_size, encode_checked_trace(mine, checks), timeout);
  if (env.rank != 0) {
    session.finish();
    return 0;
  }

  // Rank 0 reports.
  const MeasuredOps m = decode_checked_traces(all, schedule.roles[0].ops.size());
  const CollectiveRun run{o, sc, w, topo_spec, gamma_ps, placement, schedule, axis};
  report_collective_run(run, topo, registry, m);
  session.finish();
  if (m.all_checked && m.max_error != 0)
    throw Error(
        fmt::format("numerics: a rank's result differs from the serial reference by {}; this is a bug in the "
                    "{} backend, please report it",
                    m.max_error, to_string(o.backend)));
  return 0;
}

}  // namespace

int ranks_to_start(const RunOptions& o, const Scenario& sc, int nprocs) {
  // Collective workloads run on -n ranks (or workload.ranks); a training layout on its size.
  int n = nprocs;
  if (!sc.workload) {
    const int world = sc.parallel.world_size();
    if (n > 0 && n != world)
      throw Error(fmt::format("-n: the scenario's layout has {} ranks ({}); give -n {} or change parallel:", world,
                              layout_text(sc), world));
    n = world;
    // A model too large for this host is one error here, not one per rank (cpu backend;
    // the cuda backend plans its workspace per rank and cudaMalloc says when it does not fit).
    if (o.backend == Backend::Cpu)
      for (const Role& role : plan_iteration(sc.model, sc.parallel).roles) cpu::CpuCompute::workspace_for(role.ops);
  } else {
    if (o.backend == Backend::Cpu) check_cpu_buffers(*sc.workload);
    if (n <= 0) n = sc.workload->ranks;
  }
  if (n < 1)
    throw Error(
        "-n: how many ranks? give -n N (or workload.ranks), or start the ranks with meshsim launch, torchrun, "
        "srun or mpirun");
  return n;
}

int run_rank(const RunOptions& o, const Scenario& sc) {
  RankSession session(o.backend, o.timeout_s);
  if (!sc.workload) return run_training_rank(o, sc, session);
  return run_collective_rank(o, sc, session);
}

void write_side_by_side_trace(const std::string& path, const Schedule& schedule, Backend backend,
                              const std::vector<TraceEvent>& measured, const Trace* predicted) {
  using J = nlohmann::ordered_json;
  J events = J::array();
  // A track per (rank or stage, stream), named, as simulate's trace has: a rank's streams overlap.
  auto add = [&](int pid, const std::string& process, const std::vector<TraceEvent>& evs, bool by_rank) {
    events.push_back(
        J{{"ph", "M"}, {"pid", pid}, {"tid", 0}, {"name", "process_name"}, {"args", J{{"name", process}}}});
    std::set<int> named;
    for (const TraceEvent& e : evs) {
      const Op& op = schedule.roles[e.role].ops[e.op];
      const int track = by_rank ? e.rank : e.role;
      const int tid = track * kStreams + static_cast<int>(op.stream);
      if (named.insert(tid).second)
        events.push_back(J{
            {"ph", "M"},
            {"pid", pid},
            {"tid", tid},
            {"name", "thread_name"},
            {"args", J{{"name", fmt::format("{} {} · {}", by_rank ? "rank" : "stage", track, to_string(op.stream))}}}});
      events.push_back(J{{"ph", "X"},
                         {"pid", pid},
                         {"tid", tid},
                         {"name", op.name},
                         {"cat", op_category(op)},
                         {"ts", e.start.us()},
                         {"dur", (e.end - e.start).us()}});
    }
  };
  add(1, std::string("measured (") + to_string(backend) + "), a track per rank and stream", measured, true);
  if (predicted) add(2, "predicted (sim), a track per stage and stream", predicted->events, false);
  write_file(path, J{{"traceEvents", events}, {"displayTimeUnit", "ms"}}.dump(), "--trace");
  say_wrote(path, predicted ? "Perfetto trace, measured and predicted" : "Perfetto trace, measured");
}

}  // namespace meshsim
