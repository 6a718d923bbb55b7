// What a GPU measured by `meshsim calibrate --backend cuda` does against what meshsim's
// preset for that GPU predicts without a profile: the check that the presets (sim/
// compute_model.h, docs/compute.md) hold on real hardware, printed by calibrate and recorded
// in docs/validation/gpu-*.md.
//
//   std::vector<PresetCheckRow> rows = check_against_preset(measured, options, gpu_preset("h100"));
//   std::cout << format_preset_check(rows, "h100");
//
// Each row puts a measured rate beside the preset model's rate for the same work (the same
// GEMM shape and width; the same bytes for the memory pass and for each kernel kind, launch
// overhead included as the model adds it), and their ratio: measured speed over the preset's,
// > 1 when the GPU is faster than the preset says.
#pragma once

#include <string>
#include <vector>

#include "backend/cuda/cuda_calibrate.h"
#include "sim/compute_model.h"

namespace meshsim {

struct PresetCheckRow {
  std::string what;
  std::string measured, preset;  // formatted rates (or times, for the launch overhead)
  double speed_ratio = 0;        // measured speed / the preset's
};

// Rows: each cubic GEMM measured (per width), the geometric mean ratio over every measured
// shape of a width, the memory pass, each memory-bound kernel kind our kernels were timed
// for (norm, elementwise, softmax, optimizer; attention is left out: ours runs in float32
// on CUDA cores, the preset models a tensor-core flash attention), and the launch overhead.
std::vector<PresetCheckRow> check_against_preset(const cuda::CudaMeasurements& m,
                                                 const cuda::CudaCalibrateOptions& options, const GpuSpec& preset);
std::string format_preset_check(const std::vector<PresetCheckRow>& rows, const std::string& preset_name);

}  // namespace meshsim
