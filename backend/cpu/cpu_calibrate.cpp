// measure_cpu: this host's GEMM rates, memory bandwidth, per-op overhead and attention
// rate (see cpu_calibrate.h).
#include "backend/cpu/cpu_calibrate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "kernels/gemm.h"
#include "kernels/stream_pass.h"

namespace meshsim::cpu {
namespace {

using Clock = std::chrono::steady_clock;

// Best (shortest) time of `repeats` calls after one warm-up, in seconds.
template <class F>
double best_of(int repeats, F&& f) {
  f();
  double best = INFINITY;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

}  // namespace

CpuMeasurements measure_cpu(const CpuCalibrateOptions& opt) {
  CpuMeasurements out;
  const std::int64_t largest = *std::max_element(opt.gemm_sizes.begin(), opt.gemm_sizes.end());
  std::vector<float> a(static_cast<std::size_t>(largest * largest), 0.5f), b = a, c = a;
  for (std::int64_t m : opt.gemm_sizes)
    for (std::int64_t n : opt.gemm_sizes)
      for (std::int64_t k : opt.gemm_sizes) {
        const double t = best_of(opt.repeats, [&] {
          kernels::gemm_cpu(kernels::Trans::No, kernels::Trans::No, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f,
                            c.data(), n);
        });
        out.gemm.push_back({m, n, k, 2.0 * static_cast<double>(m * n * k) / t});
      }
  std::vector<float> x(16 << 20, 1.0f), y(16 << 20);  // 64 MiB each
  const double big = best_of(opt.repeats, [&] { kernels::stream_pass_cpu(y.data(), x.data(), x.size(), 0.5f); });
  out.memory_bandwidth = 2.0 * static_cast<double>(x.size()) * 4 / big;
  std::vector<double> small;
  for (int i = 0; i < 101; ++i)
    small.push_back(best_of(1, [&] { kernels::stream_pass_cpu(y.data(), x.data(), 256, 0.5f); }));
  std::nth_element(small.begin(), small.begin() + 50, small.end());
  out.launch_overhead_s = small[50];
  for (const CalibrationCall& c : calibration_calls(opt.kernel_rows, opt.row, opt.attention)) {
    std::vector<float> ws(static_cast<std::size_t>(c.call.floats()), 0.25f);
    out.kernels.push_back({c, best_of(opt.repeats, [&] { run_kernel_call_cpu(c.call, ws.data()); })});
  }
  return out;
}

}  // namespace meshsim::cpu
