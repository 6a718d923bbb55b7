// meshsim run|validate of a training scenario: every rank runs its pipeline stage's ops for
// real, on the cpu backend (backend/cpu/training_exec.h) or on its GPU (--backend cuda:
// CudaExecutor, one process per GPU, the ncclUniqueId shared through the rendezvous
// store); rank 0 gathers the measured trace and, for validate, simulates the same schedule
// (same algorithms) on the machine model: the scenario's topology (cpu: or a measured
// switch), with the compute model of the scenario's `profile:`, else (cpu) this host
// measured or (cuda) the GPU preset matching the device name; it prints predicted vs
// measured per op kind and says which compute model it used.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fmt/format.h>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/cuda/device.h"
#include "backend/make_executor.h"
#include "cli/run_internal.h"
#include "core/error.h"
#include "report/training_report.h"
#include "sim/schedule_sim.h"
#include "sim/training_sim.h"
#include "topology/presets.h"

namespace meshsim::cli {
namespace {

// The kind an op is compared under: "gemm", "attention", ... for compute; "tp allreduce",
// "cp sendrecv", ... for collectives; "pp send" / "pp recv" for pipeline messages.
std::string kind_of(const Op& op) {
  switch (op.kind) {
    case OpKind::Compute: return to_string(op.kernel.kind);
    case OpKind::Collective: return op.axis + " " + to_string(op.coll);
    case OpKind::Send: return "pp send";
    case OpKind::Recv: return "pp recv";
  }
  return "?";
}


}  // namespace

std::string encode_trace(const Trace& t) {
  std::ostringstream o;
  for (const TraceEvent& e : t.events) o << e.role << ' ' << e.op << ' ' << e.start.ps() << ' ' << e.end.ps() << '\n';
  return o.str();
}

std::vector<TraceEvent> decode_trace(const std::string& text, int rank) {
  std::vector<TraceEvent> events;
  std::istringstream in(text);
  TraceEvent e;
  e.rank = rank;
  std::int64_t a = 0, b = 0;
  while (in >> e.role >> e.op >> a >> b) {
    e.start = Time::from_ps(a);
    e.end = Time::from_ps(b);
    events.push_back(e);
  }
  return events;
}

MachineProfile cpu_machine_profile(const cpu::CpuMeasurements& m) {
  MachineProfile p;
  p.description = "this host's CPU, measured by meshsim (float32 kernels of the cpu backend)";
  GpuSpec& g = p.gpu;
  g.name = "cpu";
  double peak = 0;
  for (const auto& q : m.gemm) peak = std::max(peak, q.flops_per_s);
  g.peak_flops_bf16 = g.peak_flops_fp16 = g.peak_flops_fp32 = peak;
  g.memory_bandwidth = Bandwidth::from_bytes_per_s(m.memory_bandwidth);
  g.memory = GiB(1);
  g.launch_overhead = Time::from_ps(static_cast<std::int64_t>(m.launch_overhead_s * 1e12));
  g.gemm_efficiency = 1.0;
  for (int dtype : {2, 4})
    for (const auto& q : m.gemm) p.compute.gemm_points.push_back({q.m, q.n, q.k, dtype, q.flops_per_s});
  // Copies run as the pass the bandwidth was measured with.
  p.compute.memory_efficiency[static_cast<std::size_t>(KernelKind::Memcpy)] = 1.0;
  apply_kernel_rates(p, m.kernels, peak);
  return p;
}

void apply_kernel_rates(MachineProfile& p, const std::vector<MeasuredKernel>& kernels, double attention_peak) {
  const KernelRates r = kernel_rates(kernels);
  const double bw = p.gpu.memory_bandwidth.bytes_per_s();
  for (std::size_t k = 0; k < r.bytes_per_s.size(); ++k)
    if (r.bytes_per_s[k] && bw > 0) p.compute.memory_efficiency[k] = std::clamp(*r.bytes_per_s[k] / bw, 1e-3, 1.0);
  if (!(r.attention_flops_per_s > 0 && attention_peak > 0)) return;
  // The model scales attention_efficiency down for short sequences: divide that factor out
  // at the measured shape, so the model gives back the measured rate there.
  double shape_factor = 1.0;
  for (const MeasuredKernel& m : kernels)
    if (m.what.kind == KernelKind::Attention) {
      const kernels::AttentionShape& a = m.what.call.shape;
      GpuSpec unit = p.gpu;
      unit.attention_efficiency = 1.0;
      shape_factor = ComputeModel(unit).efficiency(Kernel::attention(a.batch_heads, a.seq_q, a.seq_kv, a.head_dim, 2,
                                                                     m.what.call.causal));
      break;
    }
  p.gpu.attention_efficiency = std::clamp(r.attention_flops_per_s / (attention_peak * shape_factor), 1e-3, 1.0);
}

int run_training_rank(const RunFlags& f, const Scenario& sc, RankSession& s) {
  const int world = sc.parallel.world_size();
  const int rank = s.env.rank;
  if (s.env.world_size != world)
    throw Error(fmt::format("the scenario's layout ({}) has {} ranks but {} are running; launch with -n {}",
                            layout_text(sc), world, s.env.world_size, world));
  const std::string topo_spec = machine_topology(s, sc);
  const Topology topo = resolve_topology(topo_spec);
  validate_model(sc.model, "model");
  validate_parallel(sc.parallel, sc.model, topo.num_gpus(), "topology " + topo.name());
  const Placement placement = training_placement(sc, topo);
  Router router(topo);
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  Schedule schedule = plan_iteration(sc.model, sc.parallel);
  resolve_algorithms(schedule, topo, router, placement, registry, sc.algorithm);

  // The compute model for validate: the scenario's profile, or this host measured with
  // every rank measuring at once (rank 0's figures).
  const bool cuda = f.backend == Backend::Cuda;
  std::optional<MachineProfile> measured_profile;
  std::string device_name, device_preset;
  cuda::DeviceInfo gpus;
  if (cuda) {
    gpus = require_cuda_devices();
    device_name = gpus.names.empty() ? std::string("?") : gpus.names.front();
    device_preset = gpu_preset_for_device(device_name);
    if (f.validate && sc.profile.empty() && device_preset.empty())
      throw Error(fmt::format("validate --backend cuda: no GPU preset matches '{}' (presets: {}); give the scenario a "
                              "profile: (meshsim calibrate) to predict its compute",
                              device_name, fmt::join(gpu_presets(), ", ")));
  }
  if (!cuda && f.validate && sc.profile.empty()) {
    const cpu::CpuMeasurements m = cpu::measure_cpu({});
    if (rank == 0) measured_profile = cpu_machine_profile(m);
    s.store->barrier("train/measured", world, s.timeout);
  }

  ExecutorOptions eopt = s.executor_options(f.backend, f.collectives);
  eopt.schedule = ScheduleKind::Training;
  if (cuda) eopt.device = cuda::local_device(rank, gpus.count, [](const char* v) { return std::getenv(v); });
  const Trace mine = make_executor(registry, placement, eopt)->execute(schedule);
  const std::vector<std::string> all = s.store->gather("train/trace", rank, world, encode_trace(mine), s.timeout);
  if (rank != 0) {
    s.finish();
    return 0;
  }

  // Per (role, op): the duration summed over the role's ranks (each rank's own start to end).
  std::vector<std::vector<double>> busy(schedule.roles.size());
  for (std::size_t r = 0; r < schedule.roles.size(); ++r) busy[r].assign(schedule.roles[r].ops.size(), 0.0);
  const double ranks_per_role = static_cast<double>(world) / static_cast<double>(schedule.roles.size());
  std::vector<TraceEvent> events;
  for (std::size_t r = 0; r < all.size(); ++r)
    for (const TraceEvent& e : decode_trace(all[r], static_cast<int>(r))) {
      busy[static_cast<std::size_t>(e.role)][static_cast<std::size_t>(e.op)] += (e.end - e.start).seconds();
      events.push_back(e);
    }
  Time measured_iter;
  for (const TraceEvent& e : events) measured_iter = std::max(measured_iter, e.end);

  std::optional<ScheduleSimResult> predicted;
  std::string compute_source;
  if (f.validate) {
    const bool preset = cuda && sc.profile.empty();
    const ComputeModel compute = measured_profile ? ComputeModel(measured_profile->gpu, measured_profile->compute)
                                 : preset         ? ComputeModel(gpu_preset(device_preset))
                                                  : ComputeModel::load_profile(sc.profile);
    compute_source = measured_profile ? fmt::format("this host measured (GEMM up to {}, memory {})",
                                                    format_flops(compute.gpu().peak_flops_fp32),
                                                    format_bandwidth(compute.gpu().memory_bandwidth))
                     : preset ? fmt::format("GPU preset {} (matches the detected device '{}')", device_preset, device_name)
                              : "profile " + sc.profile;
    ScheduleSimOptions sopt;
    sopt.fidelity = sc.fidelity;
    sopt.algorithm = sc.algorithm;
    // Predicted as run: our float32 kernels' bytes for every non-GEMM op (kernel_call.h).
    predicted = simulate_schedule(as_run_by_our_kernels(schedule), topo, router, placement, compute, registry, sopt);
  }

  struct Row {
    int ops = 0;
    double measured = 0, predicted = 0;
  };
  std::map<std::string, Row> rows;
  for (std::size_t r = 0; r < schedule.roles.size(); ++r)
    for (std::size_t i = 0; i < schedule.roles[r].ops.size(); ++i) {
      Row& row = rows[kind_of(schedule.roles[r].ops[i])];
      ++row.ops;
      row.measured += busy[r][i] / ranks_per_role;
    }
  if (predicted)
    for (const TraceEvent& e : predicted->trace.events)
      rows[kind_of(schedule.roles[static_cast<std::size_t>(e.role)].ops[static_cast<std::size_t>(e.op)])].predicted +=
          (e.end - e.start).seconds();

  auto pct = [](double m, double p) { return p > 0 ? 100.0 * (m - p) / p : 0.0; };
  nlohmann::ordered_json j;
  j["backend"] = to_string(f.backend);
  if (cuda) {
    j["collectives"] = to_string(f.collectives);
    j["device"] = device_name;
  }
  j["scenario"] = sc.name;
  j["layout"] = layout_text(sc);
  j["ranks"] = world;
  j["machine_model"] = topo_spec;
  if (predicted) j["compute_model"] = compute_source;
  std::ostringstream text;
  text << fmt::format("meshsim {}: {} ({}) on {} ranks, backend {}\n", f.validate ? "validate" : "run", sc.name,
                      layout_text(sc), world, backend_label(f));
  if (cuda) text << fmt::format("  device: {}\n", device_name);
  text << fmt::format("  machine model: {}\n", topo_spec);
  if (predicted) text << fmt::format("  compute model: {}\n", compute_source);
  text << fmt::format("  {:<22} {:>6} {:>12}", "op kind (summed)", "ops", "measured");
  if (predicted) text << fmt::format(" {:>12} {:>8}", "predicted", "error");
  text << "\n";
  nlohmann::ordered_json jrows = nlohmann::ordered_json::array();
  for (const auto& [kind, row] : rows) {
    nlohmann::ordered_json jr{{"kind", kind}, {"ops", row.ops}, {"measured_s", row.measured}};
    text << fmt::format("  {:<22} {:>6} {:>12}", kind, row.ops,
                        format_time(Time::from_ps(static_cast<std::int64_t>(row.measured * 1e12))));
    if (predicted) {
      jr["predicted_s"] = row.predicted;
      jr["error_pct"] = pct(row.measured, row.predicted);
      text << fmt::format(" {:>12} {:>+7.1f}%", format_time(Time::from_ps(static_cast<std::int64_t>(row.predicted * 1e12))),
                          pct(row.measured, row.predicted));
    }
    text << "\n";
    jrows.push_back(jr);
  }
  j["kinds"] = jrows;
  j["measured_iteration_s"] = measured_iter.seconds();
  text << fmt::format("  {:<22} {:>6} {:>12}", "iteration", "", format_time(measured_iter));
  if (predicted) {
    j["predicted_iteration_s"] = predicted->iteration.seconds();
    j["error_pct"] = pct(measured_iter.seconds(), predicted->iteration.seconds());
    text << fmt::format(" {:>12} {:>+7.1f}%", format_time(predicted->iteration),
                        pct(measured_iter.seconds(), predicted->iteration.seconds()));
  }
  text << "\n  (op kinds: each op's time, averaged over its stage's ranks, summed over ops and stages; a collective's "
          "time includes waiting for its slowest member)\n";
  std::cout << (f.json ? j.dump(2) + "\n" : text.str()) << std::flush;

  if (!f.trace.empty())
    write_side_by_side_trace(f.trace, schedule, f.backend, events, predicted ? &predicted->trace : nullptr);
  s.finish();
  return 0;
}

}  // namespace meshsim::cli
