// What this host's CPU does, measured with the kernels the cpu backend runs: the rates a
// compute model needs to predict the cpu backend (meshsim validate, meshsim calibrate
// --backend cpu). Every rank of a run measures at once, so ranks sharing cores see the
// rates they will get.
//
//   CpuMeasurements m = measure_cpu({});
//   m.gemm[i] = {m, n, k, achieved FLOP/s}; m.memory_bandwidth (bytes read + written / s)
#pragma once

#include <cstdint>
#include <vector>

namespace meshsim::cpu {

struct MeasuredGemm {
  std::int64_t m = 0, n = 0, k = 0;
  double flops_per_s = 0;  // 2mnk / time per call
};

struct CpuMeasurements {
  std::vector<MeasuredGemm> gemm;  // a grid of shapes, fp32 through kernels::gemm_cpu
  double memory_bandwidth = 0;     // bytes read + written per second by kernels::stream_pass_cpu on 64 MiB
  double launch_overhead_s = 0;    // time of a 1 KiB stream_pass_cpu (the fixed cost per op)
  double attention_flops_per_s = 0;  // attention_forward_cpu, 8 heads x 512 x 512 x 64
};

struct CpuCalibrateOptions {
  std::vector<std::int64_t> gemm_sizes{64, 256, 1024};  // every (m, n, k) of these
  int repeats = 3;                                      // best of
};

CpuMeasurements measure_cpu(const CpuCalibrateOptions& options);

}  // namespace meshsim::cpu
