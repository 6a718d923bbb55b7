// meshsim calibrate on one rank, and measurements into machine profiles: see calibration.h.
#include "report/calibration.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <sstream>

#include "backend/cuda/cuda_calibrate.h"
#include "backend/cuda/device.h"
#include "backend/rank_session.h"
#include "core/error.h"
#include "core/output_file.h"
#include "report/preset_check.h"
#include "schedule/plan.h"
#include "sim/compute_model.h"
#include "topology/placement.h"
#include "topology/presets.h"

namespace meshsim {

namespace {

// The algorithm calibrated per kind: a bandwidth-optimal one for large buffers (the ring
// NCCL runs for all-reduce, all-gather and reduce-scatter; binomial trees; pairwise exchange).
std::string algorithm_for(CollKind k) {
  switch (k) {
    case CollKind::AllReduce:
    case CollKind::AllGather:
    case CollKind::ReduceScatter:
      return "ring";
    case CollKind::Broadcast:
    case CollKind::Reduce:
      return "binomial";
    case CollKind::AllToAll:
      return "pairwise";
    case CollKind::SendRecv:
      break;
  }
  throw Error("--kinds: sendrecv cannot be calibrated as a collective; leave it out");
}

// Group sizes: 2, 4, 8, ... while they divide the world, then the world itself.
std::vector<int> group_sizes(int world) {
  std::vector<int> g;
  for (int s = 2; s < world && world % s == 0; s *= 2) g.push_back(s);
  if (world >= 2) g.push_back(world);
  return g;
}

struct Point {
  CollKind kind;
  Bytes bytes;
};

// Every (kind, size) `repeats` times, one after another, along mesh dimension "group" of
// a (group = g, rest = world / g) mesh: every group of g ranks at once.
Schedule calibration_schedule(int world, int g, const std::vector<CollKind>& kinds, const std::vector<Bytes>& sizes,
                              int repeats, std::vector<Point>& points) {
  Schedule all;
  all.axes = {{"group", g}, {"rest", world / g}};
  all.pp_axis = {};
  all.roles.emplace_back();
  all.roles[0].name = "all ranks";
  std::vector<Op>& ops = all.roles[0].ops;
  for (CollKind k : kinds)
    for (Bytes b : sizes) {
      CollectiveWorkload w;
      w.kind = k;
      w.bytes = b;
      w.ranks = world;
      w.iterations = repeats;
      w.algorithm = algorithm_for(k);
      w.mesh = all.axes;
      w.group = "group";
      const int offset = static_cast<int>(ops.size());
      const Schedule one = plan_collectives(w);
      for (Op op : one.roles[0].ops) {
        for (int& d : op.deps) d += offset;
        if (op.deps.empty() && offset > 0) op.deps.push_back(offset - 1);
        op.name = fmt::format("{} {} g{} #{}", to_string(k), format_bytes(b), g, ops.size() - offset);
        ops.push_back(std::move(op));
        points.push_back({k, b});
      }
    }
  return all;
}

// The preset models' GEMMs calibrate times: every shape whose operands fit 4 GiB (three such
// buffers on the device at once; Llama-3 405B's 16384 x 128256 logits at TP 1 do not).
constexpr std::size_t kModelGemmOperandBytes = std::size_t{4} << 30;

MachineProfile cuda_machine_profile(const cuda::CudaMeasurements& m, const std::string& device, bool fp32_kernels) {
  MachineProfile p;
  const std::string preset = gpu_preset_for_device(device);
  p.description =
      fmt::format("{}, measured by meshsim calibrate --backend cuda{}", device,
                  preset.empty() ? "; memory capacity and efficiencies not measured (the h100 preset's)"
                                 : "; peaks, memory capacity and efficiency curves from the " + preset + " preset");
  p.gpu = gpu_preset(preset.empty() ? "h100" : preset);
  p.gpu.name = device;
  // Measured rates are this card's as calibrate saw them: no job factors on top (docs/compute.md).
  p.gpu.sustained_tensor = 1.0;
  p.gpu.speed_spread = 0.0;
  if (preset.empty()) {  // peaks: the best measured rate per width
    p.gpu.peak_flops_bf16 = p.gpu.peak_flops_fp16 = p.gpu.peak_flops_fp32 = 0;
    for (const auto& g : m.gemm) {
      double& peak = g.dtype == cuda::DType::Fp32 ? p.gpu.peak_flops_fp32 : p.gpu.peak_flops_bf16;
      peak = std::max(peak, g.flops_per_s);
    }
    p.gpu.peak_flops_fp16 = p.gpu.peak_flops_bf16;
  }
  p.gpu.memory_bandwidth = Bandwidth::from_bytes_per_s(m.memory_bandwidth);
  p.gpu.launch_overhead = Time::from_ps(static_cast<std::int64_t>(m.launch_overhead_s * 1e12));
  p.compute.memory_efficiency[static_cast<std::size_t>(KernelKind::Memcpy)] = 1.0;
  // Our kernels against the measured pass; our attention against the peak of the width it
  // ran in (bf16 calls, or float32 with --kernels fp32): validate predicts attention ops as
  // they run, in that width (as_run_by_our_kernels).
  const double attention_peak = fp32_kernels ? p.gpu.peak_flops_fp32 : p.gpu.peak_flops_bf16;
  apply_kernel_rates(p, m.kernels, attention_peak);
  apply_row_sweep(p, m.row_sweep);
  apply_attention_sweep(p, m.attention_sweep, attention_peak);
  // One point per shape and width (bf16 and fp16 are both 2-byte GEMMs: keep the faster), the
  // grid's and the preset models' shapes.
  std::vector<cuda::MeasuredGemm> all = m.gemm;
  all.insert(all.end(), m.model_gemm.begin(), m.model_gemm.end());
  for (const auto& g : all) {
    const int width = cuda::dtype_bytes(g.dtype);
    auto same = [&](const GemmPoint& q) { return q.m == g.m && q.n == g.n && q.k == g.k && q.dtype_bytes == width; };
    auto it = std::find_if(p.compute.gemm_points.begin(), p.compute.gemm_points.end(), same);
    if (it == p.compute.gemm_points.end())
      p.compute.gemm_points.push_back({g.m, g.n, g.k, width, g.flops_per_s});
    else
      it->achieved_flops = std::max(it->achieved_flops, g.flops_per_s);
  }
  return p;
}

// Compute, measured on this rank: its machine profile, device, our kernels' timings and
// (cuda) the measurement against the matching GPU preset.
struct ComputeMeasurement {
  MachineProfile profile;
  int device = 0;
  std::vector<MeasuredKernel> kernels;
  std::string preset_check;  // cuda: the measurement against the matching GPU preset
};

ComputeMeasurement measure_compute(const CalibrateOptions& o, int rank) {
  ComputeMeasurement c;
  if (o.backend == Backend::Cpu) {
    const cpu::CpuMeasurements m = cpu::measure_cpu({});
    c.profile = cpu_machine_profile(m);
    c.kernels = m.kernels;
  } else {
    const cuda::DeviceInfo info = require_cuda_devices();
    c.device = cuda::local_device(rank, info.count, [](const char* v) { return std::getenv(v); });
    cuda::GpuApi& api = cuda::real_gpu_api();
    cuda::Checker check(api, rank);
    cuda::CudaCalibrateOptions options;
    options.fp32_kernels = o.fp32_kernels;
    options.model_gemms = preset_gemm_shapes(kModelGemmOperandBytes);
    const cuda::CudaMeasurements m = cuda::measure_cuda(api, check, c.device, options);
    const std::string name = info.names.at(static_cast<std::size_t>(c.device));
    c.profile = cuda_machine_profile(m, name, options.fp32_kernels);
    c.kernels = m.kernels;
    if (const std::string preset = gpu_preset_for_device(name); !preset.empty())
      c.preset_check = format_preset_check(check_against_preset(m, options, gpu_preset(preset)), preset);
  }
  return c;
}

// Per op of a calibration schedule: its time on its slowest rank (ps), from every rank's trace.
std::vector<std::int64_t> slowest_per_op(const std::vector<std::string>& all, std::size_t ops) {
  std::vector<std::int64_t> slowest(ops, 0);
  for (std::size_t r = 0; r < all.size(); ++r)
    for (const TraceEvent& e : decode_trace(all[r], static_cast<int>(r)))
      slowest.at(static_cast<std::size_t>(e.op)) =
          std::max(slowest.at(static_cast<std::size_t>(e.op)), (e.end - e.start).ps());
  return slowest;
}

// Per kind, the alpha-bandwidth fit through the median time of each size over groups of g
// ranks, added to the profile (a kind whose fit fails is left to the topology model).
void fit_collectives(MachineProfile& profile, const std::vector<CollKind>& kinds, const std::vector<Bytes>& sizes,
                     const std::vector<Point>& points, const std::vector<std::int64_t>& slowest, int g) {
  for (CollKind k : kinds) {
    std::vector<std::pair<double, double>> fit_points;
    for (Bytes b : sizes) {
      std::vector<double> t;
      for (std::size_t i = 0; i < points.size(); ++i)
        if (points[i].kind == k && points[i].bytes == b) t.push_back(static_cast<double>(slowest[i]) * 1e-12);
      std::sort(t.begin(), t.end());
      fit_points.emplace_back(static_cast<double>(b), t[t.size() / 2]);
    }
    AlphaBandwidth fit;
    try {
      fit = fit_alpha_bandwidth(fit_points, fmt::format("{} over {} ranks", to_string(k), g));
    } catch (const Error& e) {  // noise on a busy host: leave this entry to the topology model
      std::cerr << "meshsim calibrate: warning: not written: " << e.what() << "\n";
      continue;
    }
    profile.collectives.push_back({k, g, Time::from_ps(static_cast<std::int64_t>(fit.alpha_s * 1e12)),
                                   Bandwidth::from_bytes_per_s(fit.bytes_per_s), algorithm_for(k)});
  }
}

// Collectives per group size: every rank runs them; rank 0 fits them into the profile.
void measure_collectives(RankSession& s, const CalibrateOptions& o, const std::vector<CollKind>& kinds,
                         const std::vector<Bytes>& sizes, int device, MachineProfile& profile) {
  const int rank = s.env.rank, world = s.env.world_size;
  const Topology topo = resolve_topology(fmt::format("switch:gpus_per_node={}", world));
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  for (int g : group_sizes(world)) {
    std::vector<Point> points;
    const Schedule schedule = calibration_schedule(world, g, kinds, sizes, o.repeats, points);
    const Placement placement = Placement::natural(Mesh{schedule.axes}, topo);
    ExecutorOptions eopt = s.executor_options(o.backend, o.collectives);
    eopt.cpu.check_limit_bytes = 0;  // timing only; run and validate check the numerics
    const MeshAxis group("group");   // calibration_schedule's axes
    eopt.cpu.groups[group] = placement.groups_along(group);
    eopt.device = device;
    // A fresh id per group size: each executor builds its own world communicator.
    eopt.nccl_id_key = fmt::format("calibrate/nccl_id/{}", g);
    const Trace mine = make_executor(registry, placement, eopt)->execute(schedule);
    const std::vector<std::string> all =
        s.store->gather(fmt::format("calibrate/g{}", g), rank, world, encode_trace(mine), s.timeout);
    if (rank != 0) continue;
    fit_collectives(profile, kinds, sizes, points, slowest_per_op(all, points.size()), g);
  }
}

// Writes the profile to --out, after checking that it loads.
void write_profile(const CalibrateOptions& o, MachineProfile& profile, int world) {
  profile.description +=
      fmt::format("; {} rank(s), collectives over {} ({}), sizes {}", world, o.backend == Backend::Cpu ? "TCP" : "NCCL",
                  o.backend == Backend::Cpu ? "our step programs" : to_string(o.collectives), o.sizes);
  const std::string yaml = format_machine_profile(profile);
  parse_machine_profile(yaml, o.out);  // what we write must load
  write_file(o.out, yaml, "--out");
}

// The row kernels' sweep as written: a line per function and pass, a column per row length.
void print_row_points(const std::vector<RowKernelPoint>& points) {
  if (points.empty()) return;
  std::vector<std::int64_t> widths;
  for (const RowKernelPoint& q : points)
    if (std::find(widths.begin(), widths.end(), q.cols) == widths.end()) widths.push_back(q.cols);
  std::sort(widths.begin(), widths.end());
  std::cout << fmt::format("{:<34}", "row kernels, of memory bw, by cols");
  for (std::int64_t w : widths) std::cout << fmt::format(" {:>6}", w);
  std::cout << "\n";
  std::vector<std::pair<KernelFn, bool>> lines;
  for (const RowKernelPoint& q : points)
    if (std::find(lines.begin(), lines.end(), std::pair{q.fn, q.backward}) == lines.end())
      lines.emplace_back(q.fn, q.backward);
  for (const auto& [fn, backward] : lines) {
    std::cout << fmt::format("{:<34}", fmt::format("{} {}", to_string(fn), backward ? "backward" : "forward"));
    for (std::int64_t w : widths) {
      auto it = std::find_if(points.begin(), points.end(), [&](const RowKernelPoint& q) {
        return q.fn == fn && q.backward == backward && q.cols == w;
      });
      std::cout << (it == points.end() ? fmt::format(" {:>6}", "-") : fmt::format(" {:>5.0f}%", 100 * it->efficiency));
    }
    std::cout << "\n";
  }
  std::cout << "\n";
}

// The attention sweep as written: a line per mask and pass, a column per sequence length.
void print_attention_points(const std::vector<AttentionPoint>& points) {
  if (points.empty()) return;
  std::vector<std::int64_t> seqs;
  for (const AttentionPoint& q : points)
    if (std::find(seqs.begin(), seqs.end(), q.seq) == seqs.end()) seqs.push_back(q.seq);
  std::sort(seqs.begin(), seqs.end());
  std::cout << fmt::format("{:<34}", "attention, of peak, by sequence");
  for (std::int64_t s : seqs) std::cout << fmt::format(" {:>6}", s);
  std::cout << "\n";
  for (const bool causal : {true, false})
    for (const bool backward : {false, true}) {
      std::cout << fmt::format("{:<34}",
                               fmt::format("{} {}", causal ? "causal" : "full", backward ? "backward" : "forward"));
      for (std::int64_t s : seqs) {
        auto it = std::find_if(points.begin(), points.end(), [&](const AttentionPoint& q) {
          return q.seq == s && q.causal == causal && q.backward == backward;
        });
        std::cout << (it == points.end() ? fmt::format(" {:>6}", "-")
                                         : fmt::format(" {:>5.1f}%", 100 * it->efficiency));
      }
      std::cout << "\n";
    }
  std::cout << "\n";
}

// The compute figures written: best GEMM, our kernels against the memory bandwidth, the
// efficiencies, and (cuda) the check against the preset.
void print_compute(const ComputeMeasurement& c) {
  const MachineProfile& profile = c.profile;
  double peak = 0;
  for (const GemmPoint& q : profile.compute.gemm_points) peak = std::max(peak, q.achieved_flops);
  std::cout << fmt::format("compute ({}): best GEMM {} over {} shapes, memory {}, launch overhead {}\n",
                           profile.gpu.name, format_flops(peak), profile.compute.gemm_points.size(),
                           format_bandwidth(profile.gpu.memory_bandwidth), format_time(profile.gpu.launch_overhead));
  std::cout << fmt::format("\n{:<34} {:>11} {:>12} {:>14}\n", "our kernel", "time", "bandwidth", "of memory bw");
  for (const MeasuredKernel& k : c.kernels) {
    const double bw = k.bytes_per_s(), of = bw / profile.gpu.memory_bandwidth.bytes_per_s();
    std::cout << fmt::format("{:<34} {:>11} ", k.what.call.text(), format_time(sec(k.seconds)));
    if (k.what.kind == KernelKind::Attention)  // compute-bound: its FLOP rate instead
      std::cout << fmt::format("{:>12}\n", format_flops(k.what.flops / k.seconds));
    else
      std::cout << fmt::format("{:>12} {:>13.0f}%\n", format_bandwidth(Bandwidth::from_bytes_per_s(bw)), 100 * of);
  }
  std::cout << "written: memory efficiency";
  for (KernelKind kind : {KernelKind::Norm, KernelKind::Elementwise, KernelKind::Softmax, KernelKind::Optimizer})
    if (const auto& e = profile.compute.memory_efficiency[static_cast<std::size_t>(kind)])
      std::cout << fmt::format(" {} {:.2f}", to_string(kind), *e);
  std::cout << fmt::format(", attention efficiency {:.3f}\n\n", profile.gpu.attention_efficiency);
  print_row_points(profile.compute.row_points);
  print_attention_points(profile.compute.attention_points);
  if (!c.preset_check.empty()) std::cout << c.preset_check << "\n";
}

void print_collectives(const MachineProfile& profile) {
  if (profile.collectives.empty()) {
    std::cout << "collectives: not measured (one rank); give -n 2 or more\n";
  } else {
    std::cout << fmt::format("\n{:<14} {:>5} {:<10} {:>10} {:>12}\n", "collective", "ranks", "algorithm", "alpha",
                             "bandwidth");
    for (const CollectiveProfile& c : profile.collectives)
      std::cout << fmt::format("{:<14} {:>5} {:<10} {:>10} {:>12}\n", to_string(c.kind), c.ranks, c.algorithm,
                               format_time(c.alpha), format_bandwidth(c.bandwidth));
  }
}

}  // namespace

std::vector<CollKind> parse_calibration_kinds(const std::string& text) {
  std::vector<CollKind> kinds;
  std::stringstream in(text);
  std::string name;
  while (std::getline(in, name, ',')) {
    const auto k = parse_coll_kind(name);
    if (!k || *k == CollKind::SendRecv)
      throw Error("--kinds: '" + name +
                  "' is not a collective to calibrate; use allreduce, allgather, reducescatter, "
                  "broadcast, reduce, alltoall (comma-separated)");
    if (std::find(kinds.begin(), kinds.end(), *k) == kinds.end()) kinds.push_back(*k);
  }
  if (kinds.empty()) throw Error("--kinds: empty; e.g. --kinds allreduce,allgather");
  return kinds;
}

int calibrate_rank(const CalibrateOptions& o) {
  const std::vector<Bytes> sizes = parse_bytes_sweep(o.sizes, "--sizes");
  const std::vector<CollKind> kinds = parse_calibration_kinds(o.kinds);
  RankSession s(o.backend, o.timeout_s);
  const int rank = s.env.rank, world = s.env.world_size;

  // Compute: every rank at once; rank 0's figures.
  ComputeMeasurement compute = measure_compute(o, rank);
  s.store->barrier("calibrate/compute", world, s.timeout);
  measure_collectives(s, o, kinds, sizes, compute.device, compute.profile);
  if (rank != 0) {
    s.finish();
    return 0;
  }

  write_profile(o, compute.profile, world);
  std::cout << fmt::format("meshsim calibrate --backend {}: {} rank(s) -> {}\n\n", to_string(o.backend), world, o.out);
  print_compute(compute);
  print_collectives(compute.profile);
  s.finish();
  return 0;
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

void apply_attention_sweep(MachineProfile& p, const std::vector<MeasuredKernel>& sweep, double peak) {
  if (!(peak > 0)) return;
  for (const MeasuredKernel& m : sweep)
    if (m.what.kind == KernelKind::Attention && m.seconds > 0)
      p.compute.attention_points.push_back({std::min(m.what.call.shape.seq_q, m.what.call.shape.seq_kv),
                                            m.what.call.causal, m.what.backward,
                                            std::clamp(m.what.flops / m.seconds / peak, 1e-3, 1.0)});
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

std::vector<cuda::GemmShape> preset_gemm_shapes(std::size_t max_operand_bytes) {
  std::vector<cuda::GemmShape> out;
  for (const ModelSpec& preset : model_presets())
    for (const int tp : {1, 8}) {
      ModelSpec m = preset;
      m.layers = 1;
      ParallelSpec p;
      p.tp = tp;
      Schedule s;
      try {
        s = plan_iteration(m, p);
      } catch (const Error&) {
        continue;  // a layout this model cannot take (heads or vocabulary not divisible by 8)
      }
      for (const Role& role : s.roles)
        for (const Op& op : role.ops) {
          const Kernel& k = op.kernel;
          if (op.kind != OpKind::Compute || k.kind != KernelKind::Gemm || k.dtype_bytes != 2 || k.m <= 0 || k.n <= 0 ||
              k.k <= 0)
            continue;
          const double biggest = 2.0 * static_cast<double>(std::max({k.m * k.k, k.k * k.n, k.m * k.n}));
          const cuda::GemmShape g{k.m, k.n, k.k};
          if (biggest <= static_cast<double>(max_operand_bytes) && std::find(out.begin(), out.end(), g) == out.end())
            out.push_back(g);
        }
    }
  return out;
}

}  // namespace meshsim
