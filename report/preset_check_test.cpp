#include "report/preset_check.h"

#include "report/calibration.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

namespace meshsim {
namespace {

const PresetCheckRow& row(const std::vector<PresetCheckRow>& rows, const std::string& what) {
  for (const PresetCheckRow& r : rows)
    if (r.what == what) return r;
  ADD_FAILURE() << "no row '" << what << "'";
  static const PresetCheckRow none;
  return none;
}

double cube_flops(double n) { return 2.0 * n * n * n; }

// The h100 preset's worked example (sim/compute_model.h): an 8192^3 bf16 GEMM in 1484.73 us.
TEST(PresetCheck, GemmRowsPutTheMeasuredRateBesideThePresetsWorkedExample) {
  const double preset_rate = cube_flops(8192) / 1484.73e-6;  // 740.6 TFLOP/s
  cuda::CudaMeasurements m;
  m.gemm.push_back({8192, 8192, 8192, cuda::DType::Bf16, 1.10 * preset_rate});
  m.gemm.push_back({8192, 8192, 1024, cuda::DType::Bf16, 1.0});  // not cubic: only in the geometric mean
  const auto rows = check_against_preset(m, {}, gpu_preset("h100"));
  const PresetCheckRow& r = row(rows, "GEMM 8192^3 bf16");
  EXPECT_NEAR(r.speed_ratio, 1.10, 1e-3);
  EXPECT_EQ(r.preset, format_flops(preset_rate));
  EXPECT_EQ(r.measured, format_flops(1.10 * preset_rate));
  EXPECT_EQ(rows.size(), 2u);  // the cubic shape and the bf16 mean (no memory, kernels or launch measured)
}

TEST(PresetCheck, TheWidthsMeanIsTheGeometricMeanOfItsShapes) {
  cuda::CudaMeasurements m;
  m.gemm.push_back({1024, 1024, 1024, cuda::DType::Fp32, 30e12});
  m.gemm.push_back({8192, 8192, 8192, cuda::DType::Fp32, 50e12});
  const auto rows = check_against_preset(m, {}, gpu_preset("h100"));
  const double a = row(rows, "GEMM 1024^3 fp32").speed_ratio, b = row(rows, "GEMM 8192^3 fp32").speed_ratio;
  EXPECT_NEAR(row(rows, "GEMM fp32, 2 shapes (geometric mean)").speed_ratio, std::sqrt(a * b), 1e-9);
  // Twice as fast measured is twice the ratio.
  m.gemm[0].flops_per_s *= 2;
  EXPECT_NEAR(row(check_against_preset(m, {}, gpu_preset("h100")), "GEMM 1024^3 fp32").speed_ratio, 2 * a, 1e-9);
}

TEST(PresetCheck, MemoryPassKernelsAndLaunchOverhead) {
  const GpuSpec h100 = gpu_preset("h100");
  cuda::CudaMeasurements m;
  m.memory_bandwidth = 3.0e12;
  m.launch_overhead_s = 8e-6;
  CalibrationCall norm{KernelKind::Norm, make_kernel_call(KernelCall::Fn::LayerNormFwd, 1 << 16, 4096)};
  const double norm_bytes = kernel_call_bytes(norm.call);
  m.kernels.push_back({norm, norm_bytes / 2.5e12});  // 2.5 TB/s
  CalibrationCall attention{KernelKind::Attention, make_attention_call(false, {16, 2048, 2048, 128}, true), 1e12};
  m.kernels.push_back({attention, 1e-3});
  cuda::CudaCalibrateOptions o;
  o.memory_bytes = std::size_t{1} << 30;
  const auto rows = check_against_preset(m, o, h100);

  // The preset times B bytes of a memory-bound kind as B / (bandwidth x efficiency), its
  // latency (0.5 us / efficiency: the bytes in flight it takes to stream) and the launch
  // overhead (docs/compute.md): h100, 3.35 TB/s, 4 us; efficiency 0.90 for a copy, 0.85 for norm.
  auto preset_s = [](double bytes, double efficiency) {
    return bytes / (3.35e12 * efficiency) + 0.5e-6 / efficiency + 4e-6;
  };
  const double pass_bytes = 2.0 * (1 << 30);
  const PresetCheckRow& pass = row(rows, "memory pass (2GiB read + written)");
  EXPECT_EQ(pass.measured, "3000.00GB/s");
  EXPECT_NEAR(pass.speed_ratio, 3.0e12 / (pass_bytes / preset_s(pass_bytes, 0.90)), 1e-6);

  const PresetCheckRow& k = row(rows, "norm kernels (ours, float32)");
  EXPECT_EQ(k.measured, format_bandwidth(Bandwidth::from_bytes_per_s(2.5e12)));
  EXPECT_NEAR(k.speed_ratio, preset_s(norm_bytes, 0.85) / (norm_bytes / 2.5e12), 1e-6);
  for (const PresetCheckRow& r : rows) EXPECT_EQ(r.what.find("attention"), std::string::npos) << r.what;

  // A 1 KiB pass read and written: 4.556 us by the preset, measured in 8 us.
  EXPECT_NEAR(row(rows, "launch overhead (1 KiB pass)").speed_ratio, preset_s(2048, 0.90) / 8e-6, 1e-6);
}

TEST(PresetCheck, FormatNamesThePresetAndEveryRow) {
  const std::vector<PresetCheckRow> rows{{"GEMM 8192^3 bf16", "800.0TFLOP/s", "740.6TFLOP/s", 1.08}};
  const std::string text = format_preset_check(rows, "h100");
  EXPECT_NE(text.find("the h100 preset"), std::string::npos) << text;
  EXPECT_NE(text.find("GEMM 8192^3 bf16"), std::string::npos) << text;
  EXPECT_NE(text.find("1.080x"), std::string::npos) << text;
}

// The exact lines calibrate prints (a TextTable: every column padded, nothing cut).
TEST(PresetCheck, FormatIsATableOfFixedColumns) {
  const std::vector<PresetCheckRow> rows{{"GEMM 8192^3 bf16", "800.0TFLOP/s", "740.6TFLOP/s", 1.08},
                                         {"launch overhead (1 KiB pass)", "8.00us", "4.56us", 0.5695}};
  EXPECT_EQ(format_preset_check(rows, "h100"),
            "measured against the h100 preset (what meshsim predicts for this GPU without a profile):\n"
            "                                                    measured          preset     speed\n"
            "GEMM 8192^3 bf16                                800.0TFLOP/s    740.6TFLOP/s    1.080x\n"
            "launch overhead (1 KiB pass)                          8.00us          4.56us    0.570x\n"
            "(speed: the measured rate over the preset's, > 1 where this GPU is faster than the preset says)\n");
}

// The preset models' GEMMs (calibrate's model_gemms) get a row of their own: the geometric
// mean of measured over preset, here the worked example's 8192^3 at 1.1x and 0.9x.
TEST(PresetCheck, ThePresetModelsGemmsHaveTheirOwnMeanRow) {
  const double preset_rate = cube_flops(8192) / 1484.73e-6;
  cuda::CudaMeasurements m;
  m.model_gemm.push_back({8192, 8192, 8192, cuda::DType::Bf16, 1.1 * preset_rate});
  m.model_gemm.push_back({8192, 8192, 8192, cuda::DType::Bf16, 0.9 * preset_rate});
  const auto rows = check_against_preset(m, {}, gpu_preset("h100"));
  EXPECT_NEAR(row(rows, "GEMM bf16, the preset models' 2 shapes (geometric mean)").speed_ratio, std::sqrt(1.1 * 0.9),
              1e-3);
}

// The shapes calibrate times for the preset models: GPT-3 175B's QKV projection (2048 tokens
// x 3 * 12288 columns x 12288) at TP 1 and its eighth at TP 8, each shape once, none over the
// operand limit.
TEST(PresetGemmShapes, HoldEveryPresetLayersGemmsOnceWithinTheOperandLimit) {
  const auto shapes = preset_gemm_shapes(std::size_t{4} << 30);
  auto has = [&](cuda::GemmShape g) { return std::find(shapes.begin(), shapes.end(), g) != shapes.end(); };
  EXPECT_TRUE(has({2048, 3 * 12288, 12288}));
  EXPECT_TRUE(has({2048, 3 * 12288 / 8, 12288}));
  EXPECT_TRUE(has({2048, 4 * 12288, 12288}));  // fc1 at TP 1
  // Llama-3 70B (GQA: 64 query heads, 8 KV heads of 128): Q plus K and V, 8192 + 2 * 1024 columns.
  EXPECT_TRUE(has({8192, 8192 + 2 * 1024, 8192}));
  for (std::size_t i = 0; i < shapes.size(); ++i)
    for (std::size_t j = i + 1; j < shapes.size(); ++j) EXPECT_FALSE(shapes[i] == shapes[j]) << i << " " << j;
  const auto small = preset_gemm_shapes(std::size_t{64} << 20);
  EXPECT_LT(small.size(), shapes.size());
  for (const cuda::GemmShape& g : small)
    EXPECT_LE(2 * std::max({g.m * g.k, g.k * g.n, g.m * g.n}), std::int64_t{64} << 20)
        << g.m << "x" << g.n << "x" << g.k;
  EXPECT_GT(shapes.size(), 20u);
  EXPECT_LT(shapes.size(), 600u);  // calibrate times each: a bounded list
}

// Calibrate's attention sweep into the profile: per sequence, mask and pass, the FLOPs the
// schedule counts over the time over the peak (2 * 4 * 16 * 2048^2 * 128 / 2 FLOPs of a causal
// backward in 1 ms against 989 TFLOP/s: 0.0347), kept within [0.001, 1].
TEST(ApplyAttentionSweep, PointsAreScheduleFlopsOverTimeOverThePeak) {
  const std::vector<CalibrationCall> calls = attention_calls(16, 128, {2048}, true);
  ASSERT_EQ(calls.size(), 4u);  // causal forward, backward; full forward, backward
  std::vector<MeasuredKernel> sweep;
  for (const CalibrationCall& c : calls) sweep.push_back({c, 1e-3});
  sweep[2].seconds = 1e6;  // absurdly slow: kept at the floor
  MachineProfile p;
  apply_attention_sweep(p, sweep, 989e12);
  ASSERT_EQ(p.compute.attention_points.size(), 4u);
  const AttentionPoint& bwd = p.compute.attention_points[1];
  EXPECT_EQ(bwd.seq, 2048);
  EXPECT_TRUE(bwd.causal);
  EXPECT_TRUE(bwd.backward);
  EXPECT_NEAR(bwd.efficiency, 2.0 * 4 * 16 * 2048.0 * 2048 * 128 / 2 / 1e-3 / 989e12, 1e-12);
  EXPECT_NEAR(bwd.efficiency, 0.0347, 1e-4);
  EXPECT_FALSE(p.compute.attention_points[2].causal);
  EXPECT_DOUBLE_EQ(p.compute.attention_points[2].efficiency, 1e-3);
  // The points load: a compute model takes them.
  EXPECT_NO_THROW(ComputeModel(gpu_preset("h100"), p.compute));
}

}  // namespace
}  // namespace meshsim
