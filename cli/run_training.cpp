// meshsim run|validate of a training scenario: every rank runs its pipeline stage's ops for
// real, on the cpu backend (backend/cpu/training_exec.h) or on its GPU (--backend cuda:
// CudaExecutor, one process per GPU, the ncclUniqueId shared through the rendezvous
// store); rank 0 gathers the measured trace and, for validate, simulates the same schedule
// (same algorithms) on the machine model: the scenario's topology (cpu: or a measured
// switch), with the compute model of the scenario's `profile:`, else (cpu) this host
// measured or (cuda) the GPU preset matching the device name; it prints predicted vs
// measured per op kind (report/comparison.h) and says which compute model it used.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/cuda/device.h"
#include "backend/make_executor.h"
#include "cli/run_internal.h"
#include "core/error.h"
#include "report/comparison.h"
#include "report/training_report.h"
#include "sim/schedule_sim.h"
#include "sim/training_sim.h"
#include "topology/presets.h"

namespace meshsim::cli {

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

void apply_row_sweep(MachineProfile& p, const std::vector<MeasuredKernel>& sweep) {
  const double bw = p.gpu.memory_bandwidth.bytes_per_s();
  for (const MeasuredKernel& m : sweep)
    if (is_row_fn(m.what.fn) && bw > 0)
      p.compute.row_points.push_back(
          {m.what.fn, m.what.backward, m.what.call.cols, std::clamp(m.bytes_per_s() / bw, 1e-3, 1.0)});
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
      shape_factor = ComputeModel(unit).efficiency(
          Kernel::attention(a.batch_heads, a.seq_q, a.seq_kv, a.head_dim, 2, m.what.call.causal));
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
  const CheckedLayout layout = check_layout(sc.model, sc.parallel, topo.num_gpus(), "topology " + topo.name());
  const Placement placement = training_placement(sc, topo);
  Router router(topo);
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  Schedule schedule = plan_iteration(layout);
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
      throw Error(
          fmt::format("validate --backend cuda: no GPU preset matches '{}' (presets: {}); give the scenario a "
                      "profile: (meshsim calibrate) to predict its compute",
                      device_name, fmt::join(gpu_presets(), ", ")));
  }
  if (!cuda && f.validate && sc.profile.empty()) {
    const cpu::CpuMeasurements m = cpu::measure_cpu({});
    if (rank == 0) measured_profile = cpu_machine_profile(m);
    s.store->barrier("train/measured", world, s.timeout);
  }

  ExecutorOptions eopt = s.executor_options(f.backend, f.collectives);
  eopt.warmup = f.warmup;
  eopt.schedule = ScheduleKind::Training;
  if (cuda) eopt.device = cuda::local_device(rank, gpus.count, [](const char* v) { return std::getenv(v); });
  const Trace mine = make_executor(registry, placement, eopt)->execute(schedule);
  const std::vector<std::string> all = s.store->gather("train/trace", rank, world, encode_trace(mine), s.timeout);
  if (rank != 0) {
    s.finish();
    return 0;
  }

  std::vector<TraceEvent> events;  // every rank's, rank by rank
  for (std::size_t r = 0; r < all.size(); ++r)
    for (const TraceEvent& e : decode_trace(all[r], static_cast<int>(r))) events.push_back(e);

  std::optional<ScheduleSimResult> predicted;
  std::string compute_source;
  if (f.validate) {
    const bool preset = cuda && sc.profile.empty();
    const ComputeModel compute = measured_profile ? ComputeModel(measured_profile->gpu, measured_profile->compute)
                                 : preset         ? ComputeModel(gpu_preset(device_preset))
                                                  : ComputeModel::load_profile(sc.profile);
    compute_source =
        measured_profile
            ? fmt::format("this host measured (GEMM up to {}, memory {})", format_flops(compute.gpu().peak_flops_fp32),
                          format_bandwidth(compute.gpu().memory_bandwidth))
        : preset ? fmt::format("GPU preset {} (matches the detected device '{}')", device_preset, device_name)
                 : "profile " + sc.profile;
    ScheduleSimOptions sopt;
    sopt.fidelity = sc.fidelity;
    sopt.algorithm = sc.algorithm;
    // Predicted as run: our float32 kernels' bytes for every non-GEMM op (kernel_call.h).
    predicted = simulate_schedule(as_run_by_our_kernels(schedule), topo, router, placement, compute, registry, sopt);
  }

  const Comparison table = op_kind_comparison(schedule, events, world, predicted ? &*predicted : nullptr);
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
  add_comparison_json(j, table);
  std::ostringstream text;
  text << fmt::format("meshsim {}: {} ({}) on {} ranks, backend {}\n", f.validate ? "validate" : "run", sc.name,
                      layout_text(sc), world, backend_label(f));
  if (cuda) text << fmt::format("  device: {}\n", device_name);
  text << fmt::format("  machine model: {}\n", topo_spec);
  if (predicted) text << fmt::format("  compute model: {}\n", compute_source);
  text << comparison_text(table);
  std::cout << (f.json ? j.dump(2) + "\n" : text.str()) << std::flush;

  if (!f.trace.empty())
    write_side_by_side_trace(f.trace, schedule, f.backend, events, predicted ? &predicted->trace : nullptr);
  s.finish();
  return 0;
}

}  // namespace meshsim::cli
