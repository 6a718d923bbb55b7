// meshsim run SCENARIO.yaml --backend cpu|cuda [--collectives ours|nccl] [-n N] [--set path=value ...]
//                           [--trace FILE] [--json]
// meshsim validate SCENARIO.yaml --backend cpu|cuda [...same flags]
//
// Executes the scenario's schedule for real, one process per rank (cpu: over TCP; cuda:
// one GPU per rank with NCCL, collectives as our step programs or, with --collectives
// nccl, NCCL's own), and reports the
// measured time of every op (the slowest rank's end minus the earliest start) with
// algbw/busbw and a numerics check against the serial reference executor. `validate` also
// simulates the same schedule on a topology describing this machine (the scenario's
// `topology:`, or, when it has none, a switch whose latency (ping-pong between ranks 0
// and 1) and bandwidth (a ring shift of every rank at once) are measured before the run,
// with the reduction cost per byte measured on rank 0) and prints predicted vs measured.
//
// Without a launcher environment (MESHSIM_RANK, RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK)
// the command starts its own ranks, as `meshsim launch -n N -- meshsim run ...` would.
// Both backends run collective workloads (`workload:` in the scenario) and training
// schedules (run_training.cpp). The cuda backend needs a GPU: without one (or in a build
// without CUDA) it is one clear error.
// With --backend cuda and no `topology:`, the machine model is the scenario's default
// topology preset (nothing is measured).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "backend/cpu/cpu_compute.h"
#include "backend/cpu/cpu_executor.h"
#include "backend/cpu/transport.h"
#include "backend/launch/launch_env.h"
#include "backend/launch/rendezvous.h"
#include "backend/make_executor.h"
#include "cli/commands.h"
#include "cli/run_internal.h"
#include "core/error.h"
#include "report/collective_report.h"
#include "report/comparison.h"
#include "report/training_report.h"
#include "sim/scenario.h"
#include "sim/schedule_sim.h"
#include "topology/placement.h"
#include "topology/presets.h"

namespace meshsim::cli {

std::string backend_label(const RunFlags& f) {
  return f.backend == Backend::Cuda ? fmt::format("cuda (collectives: {})", to_string(f.collectives))
                                    : std::string(to_string(f.backend));
}

void check_backend(RunFlags& f, const BackendFlagText& typed) {
  if (!(f.timeout_s > 0) || f.timeout_s > 86400)
    throw Error(fmt::format("--timeout: {} is not a number of seconds in (0, 86400]; e.g. --timeout 120", f.timeout_s));
  f.backend = parse_backend(typed.backend);
  f.collectives = parse_collectives_mode(typed.collectives);
  check_collectives_mode(f.backend, f.collectives);
  if (f.format != "meshsim" && f.format != "nccl-tests")
    throw Error(fmt::format("--format: unknown table format '{}'; use meshsim or nccl-tests", f.format));
  if (f.format == "nccl-tests" && f.json) throw Error("--format nccl-tests: a text table; drop --json");
  if (f.backend == Backend::Cuda) require_cuda_devices();
}

namespace {

using namespace std::chrono_literals;

// Latency (one way, ping-pong between ranks 0 and 1) and per-rank bandwidth under load,
// measured over the transport. Rank 0's figures are the ones used.
std::pair<double, double> measure_link(cpu::Transport& t) {
  if (t.world() < 2) return {1e-6, 10e9};
  const int rank = t.rank();
  char byte = 0;
  const int rounds = 200;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; ++i) {
    if (rank == 0) {
      t.send(1, &byte, 1);
      t.recv(1, &byte, 1);
    } else if (rank == 1) {
      t.recv(0, &byte, 1);
      t.send(0, &byte, 1);
    }
  }
  const double latency =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / (2.0 * rounds);
  // Bandwidth under load: every rank sends to the next and receives from the previous at
  // once (a ring shift, the pattern of ring collectives), so ranks sharing cores and memory
  // on one host see the rate they will really get.
  const int world = t.world();
  std::vector<char> out(16 << 20), in(16 << 20);
  const int reps = 4;
  const cpu::SendOp send{(rank + 1) % world, out.data(), out.size()};
  const cpu::RecvOpDesc recv{(rank + world - 1) % world, in.data(), in.size(), cpu::RecvMode::Copy};
  t.exchange(std::span(&send, 1), std::span(&recv, 1), "bandwidth probe");  // warm-up
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) t.exchange(std::span(&send, 1), std::span(&recv, 1), "bandwidth probe");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {latency, static_cast<double>(out.size()) * reps / secs};
}

// Reduction time per byte on this host (float32 sums over 16 MiB), in picoseconds.
double measure_gamma_ps() {
  std::vector<float> a(4 << 20, 1.0f), b(4 << 20, 2.0f);
  const auto start = std::chrono::steady_clock::now();
  for (int rep = 0; rep < 4; ++rep)
    for (std::size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  volatile float sink = a[a.size() / 2];
  (void)sink;
  return secs * 1e12 / (4.0 * static_cast<double>(a.size()) * 4);
}

std::string encode_events(const Trace& t, const std::vector<cpu::NumericsCheck>& checks) {
  std::ostringstream o;
  for (std::size_t i = 0; i < t.events.size(); ++i)
    o << t.events[i].start.ps() << ' ' << t.events[i].end.ps() << ' ' << (checks[i].checked ? 1 : 0) << ' '
      << checks[i].max_abs_error << '\n';
  return o.str();
}

struct Measured {
  std::vector<Time> start, end;  // per op: earliest start, latest end over ranks
  std::vector<std::vector<TraceEvent>> per_rank;
  bool all_checked = true;
  double max_error = 0;
};

Measured decode(const std::vector<std::string>& all, std::size_t ops) {
  Measured m;
  m.start.assign(ops, Time::max());
  m.end.assign(ops, Time{});
  for (std::size_t r = 0; r < all.size(); ++r) {
    std::istringstream in(all[r]);
    std::vector<TraceEvent> evs;
    for (std::size_t i = 0; i < ops; ++i) {
      std::int64_t s = 0, e = 0;
      int checked = 0;
      double err = 0;
      in >> s >> e >> checked >> err;
      evs.push_back({0, static_cast<int>(i), static_cast<int>(r), Time::from_ps(s), Time::from_ps(e)});
      m.start[i] = std::min(m.start[i], Time::from_ps(s));
      m.end[i] = std::max(m.end[i], Time::from_ps(e));
      m.all_checked = m.all_checked && checked;
      m.max_error = std::max(m.max_error, err);
    }
    m.per_rank.push_back(std::move(evs));
  }
  return m;
}

std::string format_mesh(const std::vector<std::pair<std::string, int>>& dims) {
  std::string s;
  for (const auto& [name, n] : dims) s += fmt::format("{}{}={}", s.empty() ? "" : ",", name, n);
  return s;
}

}  // namespace

RankSession::RankSession(const RunFlags& f)
    : env(launch::launch_env()), timeout(static_cast<std::int64_t>(f.timeout_s * 1000)) {
  // Every rank says so: a rank on another host keeps its own log (issue 40).
  if (env.insecure)
    std::cerr << fmt::format(
        "meshsim: warning: rank {}: MESHSIM_TOKEN=insecure: this run is not authenticated; any process that reaches "
        "{}:{} can join it and read its data; use this on a single host only\n",
        env.rank, env.master_addr, env.master_port);
  if (env.rank == 0) {
    launch::RendezvousServerOptions so{env.master_addr, env.master_port, env.token};
    so.max_connections = 4 * env.world_size + 64;    // one client per rank, with room for retries
    so.world_size = env.world_size;                  // a rank with another MESHSIM_WORLD_SIZE is refused at once
    so.linger_on_failure = std::chrono::seconds(3);  // a late rank of a failed run is told why, not left to retry
    so.heartbeat_timeout = env.heartbeat_timeout;    // a stopped or hung rank is named (MESHSIM_HEARTBEAT_TIMEOUT)
    server = std::make_unique<launch::RendezvousServer>(std::move(so));
  }
  // Registered: the store fails the run at once for every rank when this one dies or is misconfigured.
  store = std::make_unique<launch::RendezvousClient>(launch::RendezvousClientOptions{
      env.master_addr, env.master_port, env.token, env.rank, timeout, timeout, env.world_size,
      env.heartbeat_timeout > std::chrono::milliseconds(0) ? env.heartbeat_interval : std::chrono::milliseconds(0),
      env.heartbeat_timeout});
  dir = std::make_unique<cpu::StoreDirectory>(*store);
  if (f.backend == Backend::Cpu) {  // the cuda backend talks NCCL
    cpu::TransportOptions topt;
    topt.token = env.token;
    topt.bind_addr = env.bind_addr;
    topt.timeout = timeout;
    topt.job_failed = store->failure_probe();  // a peer the store saw die or stop fails a wait in about a second
    transport = std::make_unique<cpu::Transport>(env.rank, env.world_size, *dir, topt);
  }
}

ExecutorOptions RankSession::executor_options(Backend backend, CollectivesMode collectives) const {
  ExecutorOptions o;
  o.backend = backend;
  o.collectives = collectives;
  o.rank = env.rank;
  o.world = env.world_size;
  o.timeout = timeout;
  o.store = store.get();
  o.transport = transport.get();
  o.token = env.token;
  o.bind_addr = env.bind_addr;
  return o;
}

void RankSession::finish() {
  store->barrier("done", env.world_size, timeout);
  if (env.rank != 0) {
    // BYE before "left/": once every left/ key is set, rank 0 may stop the store at once.
    store->leave();  // closing the connection from now on is no failure
    store->set("left/" + std::to_string(env.rank), "1");
    return;
  }
  for (int r = 1; r < env.world_size; ++r) store->get("left/" + std::to_string(r), timeout, r);
  store->leave();
}

std::string machine_topology(RankSession& s, const Scenario& sc) {
  if (sc.topology_given || !s.transport) return sc.topology;
  const auto [latency, bandwidth] = measure_link(*s.transport);
  const std::string measured =
      s.env.rank == 0 ? fmt::format("switch:gpus_per_node={},bandwidth={:.3f}GB/s,latency={:.3f}us,efficiency=1.0",
                                    s.env.world_size, bandwidth * 1e-9, latency * 1e6 / 2)
                      : std::string();
  return s.store->gather("model", s.env.rank, s.env.world_size, measured, s.timeout).front();
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
      const Op& op = schedule.roles[static_cast<std::size_t>(e.role)].ops[static_cast<std::size_t>(e.op)];
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

namespace {

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
  const RunFlags& f;
  const Scenario& sc;
  const CollectiveWorkload& w;
  const std::string& topo_spec;  // the machine model
  double gamma_ps;
  const Placement& placement;
  const Schedule& schedule;
  const std::string& axis;  // the group's mesh axis
};

nlohmann::ordered_json run_json(const CollectiveRun& r, const Comparison& table, const Measured& m) {
  const RunFlags& f = r.f;
  const CollectiveWorkload& w = r.w;
  nlohmann::ordered_json j;
  j["backend"] = to_string(f.backend);
  if (f.backend == Backend::Cuda) j["collectives"] = to_string(f.collectives);
  j["ranks"] = w.ranks;
  j["collective"] = to_string(w.kind);
  j["algorithm"] = w.algorithm.text();
  j["bytes"] = w.bytes;
  if (!w.mesh.empty()) {
    j["mesh"] = format_mesh(w.mesh);
    j["group"] = r.axis;
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
std::string run_nccl_tests(const CollectiveRun& r, const std::vector<Time>& op_times, const Measured& m) {
  const CollectiveWorkload& w = r.w;
  Time total;
  for (const Time& t : op_times) total += t;
  const Time mean = Time::from_ps(total.ps() / std::max<std::int64_t>(1, static_cast<std::int64_t>(op_times.size())));
  const bool exact = m.all_checked && m.max_error == 0;
  const NcclTestsRow row{w.kind, r.schedule.roles[0].ops[0].group_size,        w.bytes, w.root,
                         mean,   m.all_checked ? (exact ? "0" : "N/A") : "N/A"};
  std::string s =
      fmt::format("# meshsim {} {} (nccl-tests layout): {} ranks, backend {}, measured, mean of {} iterations\n",
                  r.f.validate ? "validate" : "run", to_string(w.kind), w.ranks, backend_label(r.f), op_times.size());
  s += "#\n" + nccl_tests_columns() + nccl_tests_row(row);
  s += nccl_tests_footer({bandwidths(w.kind, row.ranks, w.bytes, mean).busbw_GBps},
                         m.all_checked ? (exact ? "0 OK" : "N/A (results differ from the serial reference)")
                                       : "N/A (not checked: buffers above the check limit)");
  return s;
}

std::string run_text(const CollectiveRun& r, const Comparison& table, const Measured& m) {
  const RunFlags& f = r.f;
  const CollectiveWorkload& w = r.w;
  std::ostringstream text;
  text << fmt::format("meshsim {}: {} of {} on {} ranks, algorithm {}, backend {}\n", f.validate ? "validate" : "run",
                      to_string(w.kind), format_bytes(w.bytes), w.ranks,
                      f.collectives == CollectivesMode::Nccl ? std::string("NCCL's own") : w.algorithm.text(),
                      backend_label(f));
  if (!w.mesh.empty())
    text << fmt::format("  mesh {}, placement {}, {} group(s) of {} along {} at once\n", format_mesh(w.mesh),
                        r.sc.placement, r.placement.groups_along(r.axis).size(), r.schedule.roles[0].ops[0].group_size,
                        r.axis);
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
                           const Measured& m) {
  const RunFlags& f = r.f;
  const CollectiveWorkload& w = r.w;
  const std::size_t ops = r.schedule.roles[0].ops.size();
  std::optional<ScheduleSimResult> predicted;
  if (f.validate) {
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
  if (f.format == "nccl-tests")
    std::cout << run_nccl_tests(r, op_times, m) << std::flush;
  else
    std::cout << (f.json ? run_json(r, table, m).dump(2) + "\n" : run_text(r, table, m)) << std::flush;

  if (!f.trace.empty()) {
    std::vector<TraceEvent> measured;
    for (const auto& evs : m.per_rank) measured.insert(measured.end(), evs.begin(), evs.end());
    write_side_by_side_trace(f.trace, r.schedule, f.backend, measured, predicted ? &predicted->trace : nullptr);
  }
}

int run_rank(const RunFlags& f) {
  ScenarioNode node = ScenarioNode::load(f.file);
  for (const auto& s : f.sets) node.set(s);
  const Scenario sc = node.resolve();
  RankSession session(f);
  if (!sc.workload) return run_training_rank(f, sc, session);
  const launch::LaunchEnv& env = session.env;
  const auto timeout = session.timeout;
  launch::RendezvousClient& store = *session.store;
  cpu::Transport* transport = session.transport.get();

  CollectiveWorkload w = *sc.workload;
  if (w.ranks != 0 && w.ranks != env.world_size)
    throw Error(fmt::format("workload.{}: {} ranks but {} are running; launch with -n {}",
                            w.mesh.empty() ? "ranks" : "mesh", w.ranks, env.world_size, w.ranks));
  w.ranks = env.world_size;
  if (f.backend == Backend::Cpu) check_cpu_buffers(w);

  // The machine model for predictions (and for choosing `auto`): the scenario's topology,
  // or (cpu) a switch with the latency and loaded bandwidth measured here (every rank takes part).
  const std::string topo_spec = machine_topology(session, sc);
  // The reduction cost only matters to validate's prediction, made on rank 0.
  const double gamma_ps = f.validate && env.rank == 0 && !sc.topology_given && transport ? measure_gamma_ps() : 0.0;
  const Topology topo = checked_topology(topo_spec, w.ranks);
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  Schedule schedule = plan_collectives(w);
  Mesh mesh;
  mesh.dims = schedule.axes;
  // Rank r runs as GPU r of the topology; the placement says which mesh rank that is.
  const Placement placement =
      w.mesh.empty() ? Placement::natural(mesh, topo) : Placement::parse(sc.placement, mesh, topo, "placement");
  const std::string axis = schedule.roles[0].ops[0].axis;
  if (w.algorithm.kind == AlgorithmChoice::Kind::Auto) resolve_auto_algorithm(w, schedule, topo, registry, placement);

  std::vector<cpu::NumericsCheck> checks;  // every op's result against the serial reference
  ExecutorOptions eopt = session.executor_options(f.backend, f.collectives);
  eopt.warmup = f.warmup;
  if (axis != "rank") eopt.cpu.groups[axis] = placement.groups_along(axis);
  eopt.checks = &checks;
  const Trace mine = make_executor(registry, placement, eopt)->execute(schedule);
  const std::vector<std::string> all =
      store.gather("trace", env.rank, env.world_size, encode_events(mine, checks), timeout);
  if (env.rank != 0) {
    session.finish();
    return 0;
  }

  // Rank 0 reports.
  const Measured m = decode(all, schedule.roles[0].ops.size());
  const CollectiveRun run{f, sc, w, topo_spec, gamma_ps, placement, schedule, axis};
  report_collective_run(run, topo, registry, m);
  session.finish();
  if (m.all_checked && m.max_error != 0)
    throw Error(
        fmt::format("numerics: a rank's result differs from the serial reference by {}; this is a bug in the "
                    "{} backend, please report it",
                    m.max_error, to_string(f.backend)));
  return 0;
}

int run_command(const RunFlags& f, const std::vector<std::string>& argv) {
  if (launch::under_launcher()) return run_rank(f);
  launch::heartbeat_env();  // a bad MESHSIM_HEARTBEAT_* is one error here, not one per rank
  // Check the scenario once here, so a bad file is one error, not one per rank.
  ScenarioNode node = ScenarioNode::load(f.file);
  for (const auto& s : f.sets) node.set(s);
  const Scenario sc = node.resolve();
  // Collective workloads run on -n ranks (or workload.ranks); a training layout on its size.
  int n = f.nprocs;
  if (!sc.workload) {
    const int world = sc.parallel.world_size();
    if (n > 0 && n != world)
      throw Error(fmt::format("-n: the scenario's layout has {} ranks ({}); give -n {} or change parallel:", world,
                              layout_text(sc), world));
    n = world;
    // A model too large for this host is one error here, not one per rank (cpu backend;
    // the cuda backend plans its workspace per rank and cudaMalloc says when it does not fit).
    if (f.backend == Backend::Cpu)
      for (const Role& role : plan_iteration(sc.model, sc.parallel).roles) cpu::CpuCompute::workspace_for(role.ops);
  } else {
    if (f.backend == Backend::Cpu) check_cpu_buffers(*sc.workload);
    if (n <= 0) n = sc.workload->ranks;
  }
  if (n < 1)
    throw Error(
        "-n: how many ranks? give -n N (or workload.ranks), or start the ranks with meshsim launch, torchrun, "
        "srun or mpirun");
  std::vector<std::string> cmd{launch::this_binary()};
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  const int rc = launch::launch_ranks(n, cmd, f.timeout_s * 2);
  return rc;
}

}  // namespace

Run add_run_commands(CLI::App& app, Run* validate) {
  auto make = [&](bool is_validate) {
    auto f = std::make_shared<RunFlags>();
    auto typed = std::make_shared<BackendFlagText>();
    f->validate = is_validate;
    CLI::App* c =
        app.add_subcommand(is_validate ? "validate" : "run",
                           is_validate ? "run a scenario for real and compare with the simulator"
                                       : "run a scenario for real (cpu: processes over TCP; cuda: GPUs with NCCL)");
    c->footer(
        is_validate
            ? "Examples:\n  meshsim validate examples/scenarios/allreduce-cpu.yaml -n 4 --trace both.json\n"
              "  meshsim validate examples/scenarios/tiny-gpt-cpu.yaml\n"
              "  meshsim validate examples/scenarios/gpt3-layer-gpu.yaml --backend cuda --set run.profile=gpu.yaml"
            : "Examples:\n  meshsim run examples/scenarios/allreduce-cpu.yaml -n 4\n"
              "  meshsim run examples/scenarios/tiny-gpt-cpu.yaml --json\n"
              "  meshsim launch -n 8 -- meshsim run examples/scenarios/tiny-gpt-cpu.yaml --backend cuda");
    c->add_option("scenario", f->file, "scenario YAML with a workload: section")->required();
    c->add_option("--set", f->sets, "override a field: path=value, repeatable");
    c->add_option("--backend", typed->backend, "cpu (processes over TCP) or cuda (one GPU per rank, NCCL)");
    c->add_option("--collectives", typed->collectives,
                  "cuda: ours (our step programs over ncclSend/ncclRecv, as simulated) or nccl (NCCL's own)");
    c->add_option("-n,--nprocs", f->nprocs, "ranks to start when not under a launcher")->check(CLI::Range(1, 4096));
    c->add_option("--trace", f->trace, "write the measured trace (and the predicted one for validate), Perfetto JSON");
    c->add_flag("--json", f->json, "print the result as JSON");
    c->add_option("--timeout", f->timeout_s, "seconds any rank may wait on another before failing (default 120)");
    c->add_option("--format", f->format,
                  "collective workloads: meshsim (the table against the prediction) or nccl-tests (nccl-tests' "
                  "columns from the measured run, #wrong from the numerics check)");
    c->add_option("--warmup", f->warmup,
                  "cuda: untimed passes of the step before the timed one (default 1: first calls of cuBLAS, "
                  "the kernels and NCCL connections stay out of the times)")
        ->check(CLI::Range(0, 100));
    // The arguments to pass on to the ranks: the same command without -n.
    auto argv = std::make_shared<std::vector<std::string>>();
    return Run([f, typed, argv, is_validate] {
      check_backend(*f, *typed);  // first, in every process: a bad flag is one error before any rank starts
      std::vector<std::string> a{is_validate ? "validate" : "run",
                                 f->file,
                                 "--backend",
                                 to_string(f->backend),
                                 "--collectives",
                                 to_string(f->collectives),
                                 "--timeout",
                                 fmt::format("{}", f->timeout_s),
                                 "--warmup",
                                 fmt::format("{}", f->warmup),
                                 "--format",
                                 f->format};
      for (const auto& s : f->sets) a.insert(a.end(), {"--set", s});
      if (!f->trace.empty()) a.insert(a.end(), {"--trace", f->trace});
      if (f->json) a.push_back("--json");
      return run_command(*f, a);
    });
  };
  Run run = make(false);
  *validate = make(true);
  return run;
}

}  // namespace meshsim::cli
