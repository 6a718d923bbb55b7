// What this host's CPU does, measured with the kernels the cpu backend runs: the rates a
// compute model needs to predict the cpu backend (meshsim validate, meshsim calibrate
// --backend cpu), and the reference kernels it runs for every other op (kernel_call.h). Every rank of a run measures at
// once, so ranks sharing cores see the rates they will get.
//
//   CpuMeasurements m = measure_cpu({});
//   m.gemm[i] = {m, n, k, achieved FLOP/s}; m.memory_bandwidth (bytes read + written / s)
#pragma once

#include <cstdint>
#include <vector>

#include "backend/kernel_call.h"

namespace meshsim::cpu {

struct MeasuredGemm {
  std::int64_t m = 0, n = 0, k = 0;
  double flops_per_s = 0;  // 2mnk / time per call
};

struct CpuMeasurements {
  std::vector<MeasuredGemm> gemm;       // a grid of shapes, fp32 through kernels::gemm_cpu
  double memory_bandwidth = 0;          // bytes read + written per second by kernels::stream_pass_cpu on 64 MiB
  double launch_overhead_s = 0;         // time of a 1 KiB stream_pass_cpu (the fixed cost per op)
  std::vector<MeasuredKernel> kernels;  // the CPU references the backend runs: calibration_calls
};

struct CpuCalibrateOptions {
  std::vector<std::int64_t> gemm_sizes{64, 256, 1024};  // every (m, n, k) of these
  int repeats = 3;                                      // best of
  std::int64_t kernel_rows = 512, row = 1024;           // the row kernels' shape (2 MiB per operand)
  kernels::AttentionShape attention{8, 256, 256, 64};
};

CpuMeasurements measure_cpu(const CpuCalibrateOptions& options);

}  // namespace meshsim::cpu
