#include "report/preset_check.h"

#include <fmt/format.h>

#include <cmath>
#include <map>

#include "report/table.h"

namespace meshsim {

namespace {

Time seconds(double s) { return Time::from_ps(static_cast<std::int64_t>(std::llround(s * 1e12))); }
std::string bandwidth(double bytes_per_s) { return format_bandwidth(Bandwidth::from_bytes_per_s(bytes_per_s)); }

}  // namespace

std::vector<PresetCheckRow> check_against_preset(const cuda::CudaMeasurements& m,
                                                 const cuda::CudaCalibrateOptions& options, const GpuSpec& preset) {
  using cuda::MeasuredGemm;
  // Calibrate's rates are a benchmark's (seconds of load): set them beside the preset's burst
  // figures, not the sustained ones it gives a training job (docs/compute.md).
  GpuSpec burst = preset;
  burst.sustained_tensor = 1.0;
  const ComputeModel model(burst);
  std::vector<PresetCheckRow> rows;

  // GEMMs: the cubic shapes one by one, then every shape of a width as a geometric mean.
  std::map<std::string, std::pair<double, int>> log_ratio_by_width;  // sum of log ratios, count
  for (const MeasuredGemm& g : m.gemm) {
    const Kernel k = Kernel::gemm(g.m, g.n, g.k, cuda::dtype_bytes(g.dtype));
    const double predicted = k.flops / model.time(k).seconds();
    const double ratio = g.flops_per_s / predicted;
    auto& [sum, count] = log_ratio_by_width[cuda::to_string(g.dtype)];
    sum += std::log(ratio);
    ++count;
    if (g.m == g.n && g.n == g.k)
      rows.push_back({fmt::format("GEMM {}^3 {}", g.m, cuda::to_string(g.dtype)), format_flops(g.flops_per_s),
                      format_flops(predicted), ratio});
  }
  for (const auto& [dtype, acc] : log_ratio_by_width)
    rows.push_back({fmt::format("GEMM {}, {} shapes (geometric mean)", dtype, acc.second), "", "",
                    std::exp(acc.first / acc.second)});
  // The preset models' own GEMM shapes (calibrate's model_gemms): how far the preset is where
  // the models run, not on a grid.
  if (!m.model_gemm.empty()) {
    double sum = 0;
    for (const MeasuredGemm& g : m.model_gemm) {
      const Kernel k = Kernel::gemm(g.m, g.n, g.k, cuda::dtype_bytes(g.dtype));
      sum += std::log(g.flops_per_s / (k.flops / model.time(k).seconds()));
    }
    rows.push_back({fmt::format("GEMM bf16, the preset models' {} shapes (geometric mean)", m.model_gemm.size()), "",
                    "", std::exp(sum / static_cast<double>(m.model_gemm.size()))});
  }

  // The memory pass: read and write memory_bytes, as calibrate times it.
  if (m.memory_bandwidth > 0) {
    const double bytes = 2.0 * static_cast<double>(options.memory_bytes);
    const double predicted = bytes / model.time(Kernel::elementwise(KernelKind::Memcpy, 0, bytes, 4)).seconds();
    rows.push_back({fmt::format("memory pass ({} read + written)", format_bytes(static_cast<Bytes>(bytes))),
                    bandwidth(m.memory_bandwidth), bandwidth(predicted), m.memory_bandwidth / predicted});
  }

  // Our memory-bound kernels, per kind: the bytes of every call of the kind over their times.
  struct Sum {
    double bytes = 0, measured_s = 0, predicted_s = 0;
  };
  std::map<KernelKind, Sum> kinds;
  for (const MeasuredKernel& k : m.kernels) {
    if (k.what.kind == KernelKind::Attention || !(k.seconds > 0)) continue;
    const double bytes = kernel_call_bytes(k.what.call);
    Sum& s = kinds[k.what.kind];
    s.bytes += bytes;
    s.measured_s += k.seconds;
    s.predicted_s += model.time(Kernel::elementwise(k.what.kind, 0, bytes, 4)).seconds();
  }
  for (const auto& [kind, s] : kinds)
    rows.push_back({fmt::format("{} kernels (ours, float32)", to_string(kind)), bandwidth(s.bytes / s.measured_s),
                    bandwidth(s.bytes / s.predicted_s), s.predicted_s / s.measured_s});

  // Launch overhead: a back-to-back 1 KiB pass, as calibrate times it.
  if (m.launch_overhead_s > 0) {
    const double predicted = model.time(Kernel::elementwise(KernelKind::Memcpy, 0, 2.0 * 1024, 4)).seconds();
    rows.push_back({"launch overhead (1 KiB pass)", format_time(seconds(m.launch_overhead_s)),
                    format_time(seconds(predicted)), predicted / m.launch_overhead_s});
  }
  return rows;
}

std::string format_preset_check(const std::vector<PresetCheckRow>& rows, const std::string& preset_name) {
  TextTable table({{"", 44, Align::Left}, {"measured", 15}, {"preset", 15}, {"speed", 9}});
  for (const PresetCheckRow& r : rows)
    table.add_row({r.what, r.measured, r.preset, fmt::format("{:>8.3f}x", r.speed_ratio)});
  return fmt::format("measured against the {} preset (what meshsim predicts for this GPU without a profile):\n",
                     preset_name) +
         table.text() +
         "(speed: the measured rate over the preset's, > 1 where this GPU is faster than the preset says)\n";
}

}  // namespace meshsim
