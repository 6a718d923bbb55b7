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
#include "backend/rank_session.h"
#include "core/error.h"
#include "report/calibration.h"
#include "report/comparison.h"
#include "report/run_report.h"
#include "report/training_report.h"
#include "sim/schedule_sim.h"
#include "sim/training_sim.h"
#include "topology/presets.h"

namespace meshsim {

int run_training_rank(const RunOptions& o, const Scenario& sc, RankSession& s) {
  if (sc.parallel.stack.fp8 != Fp8Recipe::Off)
    throw Error(
        fmt::format("stack.fp8: {} runs bf16 and fp32 kernels, not FP8; run the layout with stack.fp8: off "
                    "(meshsim simulate predicts its FP8 step)",
                    o.validate ? "validate" : "run"));
  const int world = sc.parallel.world_size();
  const int rank = s.env.rank;
  if (s.env.world_size != world)
    throw Error(fmt::format("the scenario's layout ({}) has {} ranks but {} are running; launch with -n {}",
                            layout_text(sc), world, s.env.world_size, world));
  const std::string topo_spec = machine_topology(s, sc.topology, sc.topology_given);
  const Topology topo = resolve_topology(topo_spec);
  const CheckedLayout layout = check_layout(sc.model, sc.parallel, topo.num_gpus(), "topology " + topo.name());
  const Placement placement = training_placement(sc, topo);
  Router router(topo);
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  Schedule schedule = plan_iteration(layout);
  resolve_algorithms(schedule, topo, router, placement, registry, sc.algorithm);

  // The compute model for validate: the scenario's profile, or this host measured with
  // every rank measuring at once (rank 0's figures).
  const bool cuda = o.backend == Backend::Cuda;
  std::optional<MachineProfile> measured_profile;
  std::string device_name, device_preset;
  cuda::DeviceInfo gpus;
  if (cuda) {
    gpus = require_cuda_devices();
    device_name = gpus.names.empty() ? std::string("?") : gpus.names.front();
    device_preset = gpu_preset_for_device(device_name);
    if (o.validate && sc.profile.empty() && device_preset.empty())
      throw Error(
          fmt::format("validate --backend cuda: no GPU preset matches '{}' (presets: {}); give the scenario a "
                      "profile: (meshsim calibrate) to predict its compute",
                      device_name, fmt::join(gpu_presets(), ", ")));
  }
  if (!cuda && o.validate && sc.profile.empty()) {
    const cpu::CpuMeasurements m = cpu::measure_cpu({});
    if (rank == 0) measured_profile = cpu_machine_profile(m);
    s.store->barrier("train/measured", world, s.timeout);
  }

  ExecutorOptions eopt = s.executor_options(o.backend, o.collectives);
  eopt.warmup = o.warmup;
  eopt.fp32_kernels = o.fp32_kernels;
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
  if (o.validate) {
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
    // Predicted as run: our kernels' bytes and precision for every non-GEMM op (kernel_call.h):
    // float32 on the cpu backend, bf16 for a 2-byte model on the cuda backend (unless --kernels fp32).
    predicted = simulate_schedule(as_run_by_our_kernels(schedule, cuda && !o.fp32_kernels), topo, router, placement,
                                  compute, registry, sopt);
  }

  const Comparison table = op_kind_comparison(schedule, events, world, predicted ? &*predicted : nullptr);
  nlohmann::ordered_json j;
  j["backend"] = to_string(o.backend);
  if (cuda) {
    j["collectives"] = to_string(o.collectives);
    j["kernels"] = o.fp32_kernels ? "fp32" : "bf16";  // a 2-byte model's non-GEMM kernels (--kernels)
    j["device"] = device_name;
  }
  j["scenario"] = sc.name;
  j["layout"] = layout_text(sc);
  j["ranks"] = world;
  j["machine_model"] = topo_spec;
  if (predicted) j["compute_model"] = compute_source;
  add_comparison_json(j, table);
  std::ostringstream text;
  text << fmt::format("meshsim {}: {} ({}) on {} ranks, backend {}\n", o.validate ? "validate" : "run", sc.name,
                      layout_text(sc), world, backend_label(o));
  if (cuda)
    text << fmt::format("  device: {}\n  kernels: {} for the model's 2-byte ops (--kernels)\n", device_name,
                        o.fp32_kernels ? "fp32" : "bf16");
  text << fmt::format("  machine model: {}\n", topo_spec);
  if (predicted) text << fmt::format("  compute model: {}\n", compute_source);
  text << comparison_text(table);
  std::cout << (o.json ? j.dump(2) + "\n" : text.str()) << std::flush;

  if (!o.trace.empty())
    write_side_by_side_trace(o.trace, schedule, o.backend, events, predicted ? &predicted->trace : nullptr);
  s.finish();
  return 0;
}

}  // namespace meshsim
