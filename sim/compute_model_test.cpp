#include "sim/compute_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/error.h"
#include "core/test_util.h"
#include "sim/machine_profile.h"

namespace meshsim {
namespace {

using testing_util::contains;
using testing_util::error_of;

// A preset as a few-millisecond benchmark sees it: burst clocks, one GPU (sustained_tensor 1).
GpuSpec burst(const std::string& name) {
  GpuSpec g = gpu_preset(name);
  g.sustained_tensor = 1.0;
  return g;
}

TEST(GpuPresets, ListsEveryPresetAndRejectsUnknownNames) {
  const auto names = gpu_presets();
  ASSERT_EQ(names.size(), 9u);
  for (const auto& n : names) {
    const ComputeModel m(gpu_preset(n));  // every preset is a valid model
    EXPECT_EQ(m.gpu().name, n);
    EXPECT_GT(m.peak_flops(2), 0);
    EXPECT_GT(m.peak_flops(4), 0);
  }
  const std::string e = error_of([] { gpu_preset("h1000"); });
  EXPECT_TRUE(contains(e, "unknown GPU 'h1000'")) << e;
  EXPECT_TRUE(contains(e, "h100, h200, b200, gb200, b300, mi300x, a100, v100, rtx5000")) << e;
}

// The Blackwell presets against the system figures NVIDIA publishes (tensor rates with 2:4
// sparsity, halved to dense; bf16 at half the fp8 rate), divided over the system's GPUs:
//   DGX B200 datasheet (8 GPUs): 72 PFLOPS FP8 training, 1,440 GB and 64 TB/s HBM3e;
//   HGX B200 spec (8 GPUs): 600 TFLOPS FP32;
//   GB200 NVL72 spec (72 GPUs): 360 PFLOPS FP16/BF16, 5,760 TFLOPS FP32, 576 TB/s HBM3e and up
//   to 13.4 TB (372 GB per superchip of two GPUs).
TEST(GpuPresets, BlackwellDatasheetFigures) {
  const GpuSpec b200 = gpu_preset("b200");
  EXPECT_DOUBLE_EQ(b200.peak_flops_bf16, 72e15 / 8 / 2 / 2);
  EXPECT_DOUBLE_EQ(b200.peak_flops_fp16, b200.peak_flops_bf16);
  EXPECT_DOUBLE_EQ(b200.peak_flops_fp32, 600e12 / 8);
  EXPECT_DOUBLE_EQ(b200.memory_bandwidth.bytes_per_s(), 64e12 / 8);
  EXPECT_EQ(b200.memory, GiB(1440 / 8));
  // HGX B300 spec (8 GPUs): FP16/BF16 36 PFLOPS and FP8 72 with sparsity, FP32 600 TFLOPS, 2.3 TB;
  // Blackwell Ultra blog: 288 GB of HBM3e at 8 TB/s per GPU.
  const GpuSpec b300 = gpu_preset("b300");
  EXPECT_DOUBLE_EQ(b300.peak_flops_bf16, 36e15 / 8 / 2);
  EXPECT_DOUBLE_EQ(b300.peak_flops_fp8, 72e15 / 8 / 2);
  EXPECT_DOUBLE_EQ(b300.peak_flops_fp32, 600e12 / 8);
  EXPECT_DOUBLE_EQ(b300.memory_bandwidth.bytes_per_s(), 8e12);
  EXPECT_EQ(b300.memory, GiB(288));
  const GpuSpec gb200 = gpu_preset("gb200");
  EXPECT_DOUBLE_EQ(gb200.peak_flops_bf16, 360e15 / 72 / 2);
  EXPECT_DOUBLE_EQ(gb200.peak_flops_fp32, 5760e12 / 72);
  EXPECT_DOUBLE_EQ(gb200.memory_bandwidth.bytes_per_s(), 576e12 / 72);
  EXPECT_EQ(gb200.memory, GiB(372 / 2));
  for (const GpuSpec& g : {b200, gb200}) {
    EXPECT_EQ(g.arch, 100) << g.name;      // sm_100
    EXPECT_EQ(g.sm_count, 148) << g.name;  // SMs enabled on B200
  }
  // gemm_efficiency: Bekman's MAMF (ml-engineering): 1745 of 2250 and 1822 of 2500 TFLOP/s.
  EXPECT_NEAR(b200.gemm_efficiency, 1745.0 / 2250, 5e-4);
  EXPECT_NEAR(gb200.gemm_efficiency, 1822.0 / 2500, 5e-4);
}

TEST(GpuPresets, DatasheetFigures) {
  const GpuSpec h100 = gpu_preset("h100");
  EXPECT_DOUBLE_EQ(h100.peak_flops_bf16, 989.4e12);
  EXPECT_DOUBLE_EQ(h100.memory_bandwidth.bytes_per_s(), 3.35e12);
  EXPECT_EQ(h100.memory, GiB(80));
  EXPECT_DOUBLE_EQ(gpu_preset("a100").peak_flops_bf16, 312e12);
  EXPECT_DOUBLE_EQ(gpu_preset("a100").memory_bandwidth.bytes_per_s(), 2.039e12);
  // No bf16 tensor cores on Volta and Turing: 2-byte kernels run at the fp16 peak.
  EXPECT_DOUBLE_EQ(ComputeModel(gpu_preset("v100")).peak_flops(2), 125e12);
  EXPECT_DOUBLE_EQ(ComputeModel(gpu_preset("rtx5000")).peak_flops(2), 89.2e12);
  EXPECT_EQ(gpu_preset("rtx5000").memory, GiB(16));
  // FP8: twice bf16's dense peak on Hopper and Blackwell, none before; other widths are refused.
  EXPECT_DOUBLE_EQ(ComputeModel(gpu_preset("h100")).peak_flops(1), 1978.9e12);
  EXPECT_DOUBLE_EQ(ComputeModel(gpu_preset("b200")).peak_flops(1), 2 * 2250e12);
  EXPECT_DOUBLE_EQ(gpu_preset("a100").peak_flops_fp8, 0);
  const std::string e = error_of([] { ComputeModel(gpu_preset("h100")).peak_flops(8); });
  EXPECT_TRUE(contains(e, "use 1 (fp8), 2 (bf16/fp16) or 4 (fp32)")) << e;
}

// 8192^3 bf16 on H100 (132 SMs, gemm_efficiency 0.78), by hand:
//   per-SM rate r = 989.4e12 * 0.78 / 132 = 5.84645e12 FLOP/s
//   256x128 tiles: 32 * 64 = 2048 tiles -> ceil(2048 / 132) = 16 waves (15.5 full)
//     16 * 2 * 256 * 128 * (8192 + 64) / r = 1480.734 us
//   128x128 tiles (0.95): 4096 tiles -> 32 waves -> 32 * 2 * 128^2 * 8256 / (0.95 r) = 1558.7 us
//   the 256x128 kernel wins: eff = 2 * 8192^3 / (1480.734 us * 989.4e12) = 0.750500
//   time = 1480.734 us + 4 us launch = 1484.734 us
//   (memory: 3 * 8192^2 * 2 B / (3.35 TB/s * 0.9) = 133.5 us, well below)
TEST(ComputeModel, LargeBf16GemmOnH100IsComputeBound) {
  const ComputeModel h100(burst("h100"));
  const Kernel g = Kernel::gemm(8192, 8192, 8192, 2);
  const double eff = h100.efficiency(g);
  EXPECT_NEAR(eff, 0.750500, 1e-6);
  EXPECT_NEAR(static_cast<double>(h100.time(g).ps()), 1484733902.7, 1.0);
  EXPECT_EQ(h100.time(g).ps(), std::llround(g.flops / (989.4e12 * eff) * 1e12) + us(4).ps());
}

// FP8 on Blackwell: MAMF's e4m3 fraction times the power-cap loss run 25 measured FP8 to take
// beyond bf16 (0.866 / 0.949), over MAMF's bf16 fraction, at twice the peak: an 8192^3 GEMM on a
// B200 runs 2 x (3432.5 / 4500 x 0.866 / 0.949) / 0.776 = 1.794 times its bf16 time's speed (the
// tiles are alike), a B300 2 x (3353.3 / 4500 x 0.9125) / (1769 / 2250) = 1.730 times.
TEST(ComputeModel, Fp8GemmOnBlackwellRunsAtMamfsRateLessThePowerCap) {
  const Kernel bf16 = Kernel::gemm(8192, 8192, 8192, 2), fp8 = Kernel::gemm(8192, 8192, 8192, 1);
  const double launch = static_cast<double>(us(4).ps());
  for (const auto& [name, fp8_mamf, bf16_eff] :
       {std::tuple{"b200", 3432.5 / 4500, 0.776}, std::tuple{"b300", 3353.3 / 4500, 1769.0 / 2250}}) {
    const ComputeModel m(burst(name));
    const double speedup =
        static_cast<double>(m.time(bf16).ps() - launch) / static_cast<double>(m.time(fp8).ps() - launch);
    EXPECT_NEAR(speedup, 2 * fp8_mamf * (0.866 / 0.949) / bf16_eff, 1e-6) << name;
  }
}

// FP8 on H100: the same tile and wave model at 1978.9 TFLOP/s x gemm_efficiency_fp8, the fraction
// that makes an FP8 GEMM run 1181.6 / 656.1 = 1.801 times a bf16 one at the same sustained factor
// (the sustained rates run 25 measured on an H200, docs/compute.md "FP8"): 0.78 x 989.4 / 1978.9 x
// 1.801 = 0.70233. The 256x128 kernel's 32 waves take 1480.7 us / 1.801 = 822.2 us, as the tiles
// are alike.
TEST(ComputeModel, Fp8GemmOnH100RunsAtTheFp8Rate) {
  const ComputeModel h100(burst("h100"));
  const Kernel bf16 = Kernel::gemm(8192, 8192, 8192, 2), fp8 = Kernel::gemm(8192, 8192, 8192, 1);
  const double launch = static_cast<double>(us(4).ps());
  const double t16 = static_cast<double>(h100.time(bf16).ps()) - launch;
  const double t8 = static_cast<double>(h100.time(fp8).ps()) - launch;
  EXPECT_NEAR(t8 / t16, 656.1 / 1181.6, 1e-6);
  EXPECT_NEAR(t8 * 1e-6, 822.2, 0.1);  // us
  EXPECT_NEAR(h100.gemm_efficiency(1), 0.70233, 1e-5);
  EXPECT_DOUBLE_EQ(h100.gemm_efficiency(2), 0.78);
  // No FP8 tensor cores: one line naming the field.
  const ComputeModel a100(gpu_preset("a100"));
  try {
    (void)a100.time(fp8);
    ADD_FAILURE() << "a100 timed an FP8 GEMM";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stack.fp8: gpu 'a100' has no FP8 tensor cores"), std::string::npos)
        << e.what();
  }
}

// Wave quantization on A100 (108 SMs, 0.75): 8192 x 2304 x 6144 (GPT 22B QKV at TP 8, b s = 8192)
//   256x128 tiles: 32 x 18 = 576 tiles = 5.33 waves, run as 6: 6 units of 2*256*128*(6144+64)/r
//   128x128 tiles (0.95): 64 x 18 = 1152 tiles = 10.67 waves, run as 11: 11 x 0.5 / 0.95 = 5.79 units
//   the 128x128 kernel wins: 11 * 2 * 128^2 * 6208 / (0.95 r) = 1087.1 us (+4 us launch)
// One more row of tiles (m = 8192 + 256: 1188 tiles, exactly 11 waves) costs no time; at
// m = 9216 the 256x128 kernel fills 6 whole waves and efficiency rises.
TEST(ComputeModel, GemmWavesQuantizeTheTime) {
  const ComputeModel a100(gpu_preset("a100"));
  const Kernel qkv = Kernel::gemm(8192, 2304, 6144, 2);
  const double r = 312e12 * 0.75 / 108;
  EXPECT_NEAR(static_cast<double>(a100.time(qkv).ps()), (11 * 2.0 * 128 * 128 * 6208 / (0.95 * r) + 4e-6) * 1e12, 2.0);
  EXPECT_EQ(a100.time(Kernel::gemm(8192 + 256, 2304, 6144, 2)), a100.time(qkv));
  EXPECT_GT(a100.efficiency(Kernel::gemm(9216, 2304, 6144, 2)), a100.efficiency(qkv));
}

// Small k: every tile pays the same prologue and epilogue (64 k steps), so a GEMM with
// k = 64 does half its tiles' time in overhead: efficiency halves against k -> infinity.
TEST(ComputeModel, SmallKPaysTheTileOverhead) {
  const ComputeModel h100(gpu_preset("h100"));
  const double big = h100.efficiency(Kernel::gemm(16896, 16384, 65536, 2));
  const double small = h100.efficiency(Kernel::gemm(16896, 16384, 64, 2));
  EXPECT_NEAR(small / big, (64.0 / 128) / (65536.0 / 65600), 1e-3);
}

// Few tiles, long k: split-K shares k between blocks so the GPU fills.
// 1024 x 1024 x 65536 on H100: 32 tiles of 256x128; split 4 -> 128 blocks, one wave,
// 2 * 256 * 128 * (16384 + 64) / r + fp32 partials 2 * 4 * 1024^2 * 4 B / (3.35 TB/s * 0.9).
TEST(ComputeModel, SplitKFillsTheGpuWhenTilesAreFew) {
  const ComputeModel h100(burst("h100"));
  const double r = 989.4e12 * 0.78 / 132;
  const double want = 2.0 * 256 * 128 * (16384 + 64) / r + 2.0 * 4 * 1024 * 1024 * 4 / (3.35e12 * 0.9);
  const Kernel g = Kernel::gemm(1024, 1024, 65536, 2);
  EXPECT_LE(static_cast<double>(h100.time(g).ps()), (want + 4e-6) * 1e12 + 2);
  // Without split-K it would take 32 tiles in one wave over the whole k: 4x longer arithmetic.
  EXPECT_LT(static_cast<double>(h100.time(g).ps()), 0.5 * (2.0 * 256 * 128 * (65536 + 64) / r) * 1e12);
}

// 1 GiB streamed by an elementwise kernel on H100, by hand:
//   mem eff = 0.9 * B / (B + 3.35e12 * 0.5us) = 0.9 * 1073741824 / (1073741824 + 1675000) = 0.898598
//   time = B / (3.35e12 * 0.898598) + 4us = 356.689 us + 4 us = 360.689 us
//   (arithmetic: 2^28 FLOP at 0.5 * 66.9 TFLOP/s = 8 us, well below)
TEST(ComputeModel, MemoryBoundKernelIsBandwidthLimited) {
  const ComputeModel h100(gpu_preset("h100"));
  const double elems = 268435456;  // bf16 read + write: 4 bytes per element
  const Kernel add = Kernel::elementwise(KernelKind::Elementwise, elems, 4 * elems, 2);
  EXPECT_NEAR(h100.memory_efficiency(add), 0.898598, 1e-6);
  EXPECT_NEAR(static_cast<double>(h100.time(add).ps()), 360688830.5, 1.0);
  const double bw_time_s = add.bytes / (3.35e12 * h100.memory_efficiency(add));
  EXPECT_EQ(h100.time(add).ps(), std::llround(bw_time_s * 1e12) + us(4).ps());
}

// Efficiency is not monotone in size (a new wave starts half empty), but a GEMM whose tiles
// fill whole waves gets closer to the maximum the larger its k, and never exceeds it.
TEST(ComputeModel, EfficiencyApproachesItsMaximumWithSize) {
  for (const auto& name : gpu_presets()) {
    const ComputeModel m(burst(name));  // the curves' own maxima (the job's factors: SustainedClocks... below)
    const std::int64_t rows = 256 * static_cast<std::int64_t>(m.gpu().sm_count);  // whole waves of 256x128
    double prev = 0, attn = 0, mem = 0;
    for (std::int64_t k = 64; k <= 65536; k *= 2) {
      const double e = m.efficiency(Kernel::gemm(rows, 1024, k, 2));
      EXPECT_GT(e, prev) << name << " k " << k;
      EXPECT_LE(e, m.gpu().gemm_efficiency + 1e-12) << name;
      prev = e;
    }
    EXPECT_NEAR(prev, m.gpu().gemm_efficiency, 0.01) << name;
    for (std::int64_t s = 1; s <= 65536; s += (s < 64 ? 1 : s / 8)) {
      const double e3 = m.efficiency(Kernel::attention(16, s, s, 128, 2, true));
      const double e4 = m.memory_efficiency(Kernel::elementwise(KernelKind::Norm, 0, 1024.0 * s, 2));
      EXPECT_GE(e3, attn) << name << " attention " << s;
      EXPECT_GE(e4, mem) << name << " norm " << s;
      attn = e3, mem = e4;
    }
    EXPECT_NEAR(attn, m.gpu().attention_efficiency, 0.01) << name;
  }
}

TEST(ComputeModel, TimeNeverBelowLaunchOverhead) {
  const ComputeModel h100(gpu_preset("h100"));
  EXPECT_EQ(h100.time(Kernel::elementwise(KernelKind::Memcpy, 0, 0, 2)), us(4));
  EXPECT_GE(h100.time(Kernel::gemm(1, 1, 1, 2)), us(4));
  EXPECT_GE(h100.time(Kernel::attention(1, 1, 1, 64, 2, false)), us(4));
  EXPECT_GE(h100.time(Kernel::elementwise(KernelKind::Optimizer, 10, 40, 4)), us(4));
  // A measured point faster than the launch overhead is clamped to it.
  const MachineProfile p = parse_machine_profile(
      "gpu: {preset: h100}\ngemm: [{m: 64, n: 64, k: 64, dtype: bf16, achieved: 500TFLOP/s}]\n", "fast.yaml");
  const ComputeModel fast(p.gpu, p.compute);
  EXPECT_EQ(fast.time(Kernel::gemm(64, 64, 64, 2)), us(4));
  EXPECT_GE(fast.time(Kernel::gemm(32, 32, 32, 2)), us(4));
}

// A GEMM whose 256x128 tiles fill whole waves on both GPUs (33792 x 4736: 132 x 37 = 148 x 33
// tiles) runs ceil-free on each: time = tiles x 2 x 256 x 128 x (k + 64) / (peak x gemm_efficiency),
// so B200 outruns H100 by the ratio of their peaks times efficiencies, 2250 x 0.776 / (989.4 x
// 0.78) = 2.26 (launch aside).
TEST(ComputeModel, BlackwellGemmOutrunsHopperByPeakTimesEfficiency) {
  const ComputeModel h100(burst("h100")), b200(burst("b200"));
  const Kernel g = Kernel::gemm(256 * 132, 128 * 37, 8192, 2);
  const double launch = us(4).seconds();
  const double rate_ratio = b200.gpu().peak_flops_bf16 * b200.gpu().gemm_efficiency /
                            (h100.gpu().peak_flops_bf16 * h100.gpu().gemm_efficiency);
  EXPECT_NEAR((h100.time(g).seconds() - launch) / (b200.time(g).seconds() - launch), rate_ratio, 1e-6);
  EXPECT_NEAR(rate_ratio, 2250 * 0.776 / (989.4 * 0.78), 1e-3);
}

// Blackwell has no measured library tables: cuDNN or FA2 named by the stack leave a B200 on the
// generic curve (sm_90's rates are H100's), attention_efficiency x s / (s + 128).
TEST(ComputeModel, BlackwellAttentionKeepsTheGenericCurve) {
  ComputeModel b200(burst("b200"));
  const Kernel a = Kernel::attention(64, 4096, 4096, 128, 2, false);
  for (const AttentionLibrary lib : {AttentionLibrary::CuDNN, AttentionLibrary::FlashAttention2}) {
    b200.set_attention_library(lib);
    EXPECT_NEAR(b200.efficiency(a), 0.55 * 4096 / (4096 + 128), 1e-12);
  }
}

TEST(ComputeModel, LargerGpuIsFasterOnTheSameKernel) {
  const Kernel g = Kernel::gemm(4096, 4096, 4096, 2);
  const Kernel n = Kernel::elementwise(KernelKind::Norm, 5.0 * (1 << 24), 4.0 * (1 << 24), 2);
  EXPECT_LT(ComputeModel(gpu_preset("h100")).time(g), ComputeModel(gpu_preset("a100")).time(g));
  EXPECT_LT(ComputeModel(gpu_preset("a100")).time(g), ComputeModel(gpu_preset("v100")).time(g));
  EXPECT_LT(ComputeModel(gpu_preset("h200")).time(n), ComputeModel(gpu_preset("h100")).time(n));
  EXPECT_LT(ComputeModel(gpu_preset("v100")).time(n), ComputeModel(gpu_preset("rtx5000")).time(n));
}

constexpr const char* kTwoPoints =
    "gpu: {preset: h100}\n"
    "gemm:\n"
    "  - {m: 1024, n: 1024, k: 1024, dtype: bf16, achieved: 300TFLOP/s}\n"
    "  - {m: 4096, n: 4096, k: 4096, dtype: bf16, achieved: 700TFLOP/s}\n";

TEST(ComputeModel, MeasuredGemmPointIsReproducedExactly) {
  const MachineProfile p = parse_machine_profile(kTwoPoints, "two.yaml");
  const ComputeModel m(p.gpu, p.compute);
  for (const auto& [s, rate] : {std::pair{std::int64_t{1024}, 300e12}, std::pair{std::int64_t{4096}, 700e12}}) {
    const Kernel g = Kernel::gemm(s, s, s, 2);
    EXPECT_NEAR(static_cast<double>(m.time(g).ps()), g.flops / rate * 1e12, 0.5) << s;
    // efficiency scales with the same correction: curve efficiency * curve time / measured time.
    const ComputeModel curve(gpu_preset("h100"));
    const double measured_ps = g.flops / rate * 1e12;
    EXPECT_NEAR(m.efficiency(g), curve.efficiency(g) * static_cast<double>(curve.time(g).ps()) / measured_ps, 1e-6);
  }
}

// 2048^3 lies at the same log-space distance (sqrt(3) octaves) from both points, so its
// correction is the geometric mean of theirs: time = curve(2048) * sqrt(r1024 * r4096),
// r = measured time / curve time.
TEST(ComputeModel, GemmBetweenMeasuredPointsIsInterpolatedInLogSpace) {
  const MachineProfile p = parse_machine_profile(kTwoPoints, "two.yaml");
  const ComputeModel m(p.gpu, p.compute);
  const ComputeModel curve(gpu_preset("h100"));
  auto ratio = [&](std::int64_t s, double rate) {
    const Kernel g = Kernel::gemm(s, s, s, 2);
    return g.flops / rate * 1e12 / static_cast<double>(curve.time(g).ps());
  };
  const Kernel mid = Kernel::gemm(2048, 2048, 2048, 2);
  const double expected =
      static_cast<double>(curve.time(mid).ps()) * std::sqrt(ratio(1024, 300e12) * ratio(4096, 700e12));
  EXPECT_NEAR(static_cast<double>(m.time(mid).ps()), expected, 2.0);
  const double achieved = mid.flops / m.time(mid).seconds();
  EXPECT_GT(achieved, 300e12);
  EXPECT_LT(achieved, 700e12);
  // Points of one width leave the other alone.
  const Kernel fp32 = Kernel::gemm(4096, 4096, 4096, 4);
  EXPECT_EQ(m.time(fp32), curve.time(fp32));
  // Non-GEMM kernels ignore GEMM points.
  const Kernel attn = Kernel::attention(32, 2048, 2048, 128, 2, true);
  EXPECT_EQ(m.time(attn), curve.time(attn));
}

TEST(ComputeModel, DeviceNamesFindTheirPreset) {
  EXPECT_EQ(gpu_preset_for_device("NVIDIA H100 80GB HBM3"), "h100");
  EXPECT_EQ(gpu_preset_for_device("NVIDIA H200"), "h200");
  EXPECT_EQ(gpu_preset_for_device("NVIDIA A100-SXM4-80GB"), "a100");
  EXPECT_EQ(gpu_preset_for_device("Tesla V100-SXM2-32GB"), "v100");
  EXPECT_EQ(gpu_preset_for_device("Quadro RTX 5000"), "rtx5000");
  EXPECT_EQ(gpu_preset_for_device("NVIDIA B200"), "b200");
  EXPECT_EQ(gpu_preset_for_device("NVIDIA GB200"), "gb200");  // contains "b200" too: the longer name wins
  EXPECT_EQ(gpu_preset_for_device("NVIDIA GeForce RTX 4090"), "");
}

TEST(MachineProfile, OverridesGpuFiguresAndMemoryEfficiency) {
  const MachineProfile p = parse_machine_profile(
      "version: 1\n"
      "gpu: {name: mine, peak_flops_bf16: 500TFLOP/s, peak_flops_fp32: 50TFLOPS, memory_bandwidth: 2TB/s,\n"
      "      memory: 48GiB, launch_overhead: 3us}\n"
      "memory_efficiency: {norm: 0.5}\n",
      "mine.yaml");
  EXPECT_EQ(p.gpu.name, "mine");
  EXPECT_DOUBLE_EQ(p.gpu.peak_flops_bf16, 500e12);
  EXPECT_DOUBLE_EQ(p.gpu.peak_flops_fp16, 0);
  EXPECT_EQ(p.gpu.launch_overhead, us(3));
  EXPECT_EQ(p.gpu.memory, GiB(48));
  EXPECT_DOUBLE_EQ(p.gpu.gemm_efficiency, GpuSpec{}.gemm_efficiency);  // default when not given
  const ComputeModel m(p.gpu, p.compute);
  const Kernel norm = Kernel::elementwise(KernelKind::Norm, 0, 1e9, 2);
  const Kernel add = Kernel::elementwise(KernelKind::Elementwise, 0, 1e9, 2);
  EXPECT_NEAR(m.memory_efficiency(norm), 0.5 * 1e9 / (1e9 + 2e12 * 0.5e-6), 1e-12);
  EXPECT_NEAR(m.memory_efficiency(add), 0.9 * 1e9 / (1e9 + 2e12 * 0.5e-6), 1e-12);
}

// A row kernel with points for its function and pass takes its efficiency from them at its
// row length, linear in log2(cols) between the two nearest (hand-worked: 0.9 at 4096 and 0.5 at
// 16384 give 0.7 at 8192 and 0.9 - 0.4 * log2(3) / 2 = 0.583 at 12288), the nearest outside
// their range; another function or pass keeps its kind's figure.
TEST(ComputeModel, RowKernelPointsGiveTheEfficiencyByRowLength) {
  ComputeOverrides o;
  o.memory_efficiency[static_cast<std::size_t>(KernelKind::Norm)] = 0.8;
  o.row_points = {{KernelFn::LayerNorm, true, 16384, 0.5}, {KernelFn::LayerNorm, true, 4096, 0.9}};
  GpuSpec g = gpu_preset("h100");
  const ComputeModel m(g, o);
  const double bw = g.memory_bandwidth.bytes_per_s();
  auto ln = [](std::int64_t cols) {
    return Kernel::rowwise(KernelKind::Norm, KernelFn::LayerNorm, 1 << 16, cols, 0, 4e9, 4);
  };
  const double sat = 4e9 / (4e9 + bw * 0.5e-6);  // the large-size factor every memory efficiency carries
  EXPECT_NEAR(m.memory_efficiency(ln(8192), true), 0.7 * sat, 1e-12);
  EXPECT_NEAR(m.memory_efficiency(ln(12288), true), (0.9 - 0.4 * std::log2(3.0) / 2) * sat, 1e-12);
  EXPECT_NEAR(m.memory_efficiency(ln(4096), true), 0.9 * sat, 1e-12);
  EXPECT_NEAR(m.memory_efficiency(ln(1024), true), 0.9 * sat, 1e-12);   // below the points: the nearest
  EXPECT_NEAR(m.memory_efficiency(ln(65536), true), 0.5 * sat, 1e-12);  // above them
  EXPECT_NEAR(m.memory_efficiency(ln(8192), false), 0.8 * sat, 1e-12);  // the forward pass has none
  const Kernel gelu = Kernel::rowwise(KernelKind::Norm, KernelFn::Gelu, 1 << 16, 8192, 0, 4e9, 4);
  EXPECT_NEAR(m.memory_efficiency(gelu, true), 0.8 * sat, 1e-12);  // nor another function
  // The time follows: 4 GB at 0.7 of the bandwidth, plus the launch.
  EXPECT_NEAR(m.time(ln(8192), true).seconds(), 4e9 / (bw * 0.7 * sat) + g.launch_overhead.seconds(), 1e-9);
  EXPECT_LT(m.time(ln(8192), false), m.time(ln(8192), true));
  // A point that is not a row kernel's, or outside (0, 1], is refused.
  ComputeOverrides bad;
  bad.row_points = {{KernelFn::Pass, false, 4096, 0.5}};
  EXPECT_THROW(ComputeModel(g, bad), Error);
  bad.row_points = {{KernelFn::AdamW, false, 4096, 0.5}};  // the reader's rule too: not a row kernel
  EXPECT_THROW(ComputeModel(g, bad), Error);
  bad.row_points = {{KernelFn::LayerNorm, false, 4096, 1.5}};
  EXPECT_THROW(ComputeModel(g, bad), Error);
}

// Attention points (calibrate's sweep over sequence lengths): causal forward measured at
// 1024 (0.01) and 4096 (0.03) gives 0.02 at 2048 (halfway in log2), the nearest outside their
// range; the backward has its own point; a mask without points keeps attention_efficiency's
// curve. The time is the FLOPs at that fraction of the bf16 peak, plus the launch.
TEST(ComputeModel, AttentionPointsGiveTheEfficiencyBySequence) {
  GpuSpec g = gpu_preset("h100");
  g.sustained_tensor = 1.0;  // a measured profile's (calibrate's rates carry no job factor)
  ComputeOverrides o;
  o.attention_points = {{1024, true, false, 0.01}, {4096, true, false, 0.03}, {2048, true, true, 0.02}};
  const ComputeModel m(g, o), plain(g);
  const double launch = g.launch_overhead.seconds();
  auto fwd_time = [&](std::int64_t seq, double eff) {
    return Kernel::attention(16, seq, seq, 128, 2, true).flops / (g.peak_flops_bf16 * eff) + launch;
  };
  auto causal = [](std::int64_t seq) { return Kernel::attention(16, seq, seq, 128, 2, true); };
  EXPECT_NEAR(m.time(causal(2048)).seconds(), fwd_time(2048, 0.02), 1e-9);
  EXPECT_NEAR(m.time(causal(512)).seconds(), fwd_time(512, 0.01), 1e-9);
  EXPECT_NEAR(m.time(causal(16384)).seconds(), fwd_time(16384, 0.03), 1e-9);
  Kernel bwd = causal(8192);
  bwd.flops *= 2;  // the schedule's backward
  EXPECT_NEAR(m.time(bwd, true).seconds(), bwd.flops / (g.peak_flops_bf16 * 0.02) + launch, 1e-9);
  const Kernel full = Kernel::attention(16, 2048, 2048, 128, 2, false);
  EXPECT_EQ(m.time(full), plain.time(full));  // no non-causal points: the preset's curve
  EXPECT_GT(m.time(causal(2048)).seconds(), 10 * plain.time(causal(2048)).seconds());
  ComputeOverrides bad;
  bad.attention_points = {{0, true, false, 0.5}};
  EXPECT_THROW(ComputeModel(g, bad), Error);
  bad.attention_points = {{2048, true, false, 1.5}};
  EXPECT_THROW(ComputeModel(g, bad), Error);
}

TEST(MachineProfile, ExampleProfileLoads) {
  const std::string path = std::string(MESHSIM_SOURCE_DIR) + "/examples/profiles/h100-example.yaml";
  const MachineProfile p = load_machine_profile(path);
  EXPECT_EQ(p.gpu.name, "h100-sxm-example");
  EXPECT_DOUBLE_EQ(p.gpu.peak_flops_bf16, 989e12);
  EXPECT_EQ(p.compute.gemm_points.size(), 6u);
  ASSERT_EQ(p.collectives.size(), 3u);
  EXPECT_EQ(p.collectives[0].kind, CollKind::AllReduce);
  EXPECT_EQ(p.collectives[0].ranks, 8);
  EXPECT_EQ(p.collectives[0].alpha, us(15));
  EXPECT_DOUBLE_EQ(p.collectives[0].bandwidth.bytes_per_s(), 250e9);
  const ComputeModel m = ComputeModel::load_profile(path);
  const Kernel g = Kernel::gemm(8192, 8192, 8192, 2);
  EXPECT_NEAR(static_cast<double>(m.time(g).ps()), g.flops / 750e12 * 1e12, 0.5);
}

// Each broken profile gives one Error naming the file, the field and the fix.
TEST(MachineProfile, MalformedProfilesNameTheField) {
  struct Case {
    const char* yaml;
    std::vector<const char*> expect;
  };
  const Case cases[] = {
      {"gpu: {preset: h100\n", {"bad.yaml:", "malformed YAML"}},
      {"gpus: {preset: h100}\n", {"bad.yaml:1:", "unknown key 'gpus'", "valid keys"}},
      {"version: 2\ngpu: {preset: h100}\n", {"version", "version: 1"}},
      {"description: x\n", {"missing field 'gpu'"}},
      {"gpu: {preset: h1000}\n", {"gpu.preset", "h100, h200"}},
      {"gpu: {preset: h100, peak_flop_bf16: 1TFLOP/s}\n", {"gpu", "unknown key 'peak_flop_bf16'"}},
      {"gpu: {preset: h100, memory_bandwidth: 3.35TB}\n", {"bad.yaml:1:", "gpu.memory_bandwidth", "GB/s"}},
      {"gpu: {preset: h100, peak_flops_bf16: 989TFLOP}\n", {"gpu.peak_flops_bf16", "TFLOP/s"}},
      {"gpu: {preset: h100, peak_flops_bf16: -989TFLOP/s}\n", {"gpu.peak_flops_bf16", "positive"}},
      {"gpu: {preset: h100, launch_overhead: -4us}\n", {"gpu.launch_overhead", "negative"}},
      {"gpu: {preset: h100, memory: -80GiB}\n", {"gpu.memory", "negative"}},
      {"gpu: {preset: h100, gemm_efficiency: 1.5}\n", {"gpu.gemm_efficiency", "(0, 1]"}},
      {"gpu: {preset: h100, attention_efficiency: lots}\n", {"gpu.attention_efficiency", "not a number"}},
      {"gpu: {name: x, peak_flops_bf16: 1TFLOP/s, peak_flops_fp32: 1TFLOP/s, memory_bandwidth: 1TB/s, "
       "launch_overhead: 4us}\n",
       {"gpu", "missing field 'memory'", "80GiB"}},
      {"gpu: {name: x, peak_flops_fp32: 1TFLOP/s, memory_bandwidth: 1TB/s, memory: 1GiB, launch_overhead: 4us}\n",
       {"gpu", "peak_flops_bf16"}},
      {"gpu: {preset: h100}\nmemory_efficiency: {norm: 1.2}\n", {"bad.yaml:2:", "memory_efficiency.norm", "(0, 1]"}},
      {"gpu: {preset: h100}\nmemory_efficiency: {normz: 0.8}\n", {"unknown kernel kind 'normz'", "norm, elementwise"}},
      {"gpu: {preset: h100}\nrow_kernels:\n  - {fn: adamw, pass: forward, cols: 4096, efficiency: 0.5}\n",
       {"bad.yaml:3:", "row_kernels[0].fn", "not a row kernel", "layernorm"}},
      {"gpu: {preset: h100}\nrow_kernels:\n  - {fn: layernorm, pass: sideways, cols: 4096, efficiency: 0.5}\n",
       {"row_kernels[0].pass", "neither forward nor backward"}},
      {"gpu: {preset: h100}\nrow_kernels:\n  - {fn: layernorm, pass: forward, cols: 4096, efficiency: 0.5}\n"
       "  - {fn: layernorm, pass: forward, cols: 4096, efficiency: 0.6}\n",
       {"row_kernels[1]", "measured twice"}},
      {"gpu: {preset: h100}\nrow_kernels:\n  - {fn: layernorm, pass: forward, cols: 4096}\n",
       {"row_kernels[0]", "missing field 'efficiency'"}},
      {"gpu: {preset: h100}\nattention:\n  - {seq: 4096, mask: sliding, pass: forward, efficiency: 0.5}\n",
       {"bad.yaml:3:", "attention[0].mask", "neither causal nor full"}},
      {"gpu: {preset: h100}\nattention:\n  - {seq: 0, mask: causal, pass: forward, efficiency: 0.5}\n",
       {"attention[0].seq", "positive integer"}},
      {"gpu: {preset: h100}\nattention:\n  - {seq: 4096, mask: causal, pass: forward, efficiency: 2}\n",
       {"attention[0].efficiency", "(0, 1]"}},
      {"gpu: {preset: h100}\nattention:\n  - {seq: 4096, mask: causal, pass: forward, efficiency: 0.5}\n"
       "  - {seq: 4096, mask: causal, pass: forward, efficiency: 0.6}\n",
       {"attention[1]", "measured twice"}},
      {"gpu: {preset: h100}\nattention:\n  - {seq: 4096, mask: causal, efficiency: 0.5}\n",
       {"attention[0]", "missing field 'pass'"}},
      {"gpu: {preset: h100}\ngemm: {m: 1}\n", {"gemm", "expected a list"}},
      {"gpu: {preset: h100}\ngemm:\n  - {m: 64, n: 64, k: 64, dtype: bf16}\n",
       {"bad.yaml:3:", "gemm[0]", "missing field 'achieved'"}},
      {"gpu: {preset: h100}\ngemm:\n  - {m: -64, n: 64, k: 64, dtype: bf16, achieved: 1TFLOP/s}\n",
       {"gemm[0].m", "positive integer"}},
      {"gpu: {preset: h100}\ngemm:\n  - {m: 64, n: 64, k: 64, dtype: bf15, achieved: 1TFLOP/s}\n",
       {"gemm[0].dtype", "bf16, fp16 or fp32"}},
      {"gpu: {preset: h100}\ngemm:\n  - {m: 64, n: 64, k: 64, dtype: bf16, achieved: 1TB/s}\n",
       {"gemm[0].achieved", "TFLOP/s"}},
      {"gpu: {preset: h100}\ngemm:\n  - {m: 64, n: 64, k: 64, dtype: bf16, achieved: 1TFLOP/s}\n"
       "  - {m: 64, n: 64, k: 64, dtype: fp16, achieved: 2TFLOP/s}\n",
       {"gemm[1]", "measured twice"}},
      {"gpu: {preset: h100}\ngemm:\n  - {m: 64, n: 64, k: 64, dtype: bf16, achieved: 1TFLOP/s, time: 1us}\n",
       {"gemm[0]", "unknown key 'time'"}},
      {"gpu: {preset: h100}\ncollectives:\n  - {kind: allreduse, ranks: 8, alpha: 1us, bandwidth: 1GB/s}\n",
       {"collectives[0].kind", "allreduce"}},
      {"gpu: {preset: h100}\ncollectives:\n  - {kind: allreduce, ranks: 1, alpha: 1us, bandwidth: 1GB/s}\n",
       {"collectives[0].ranks", "[2, 1000000]"}},
      {"gpu: {preset: h100}\ncollectives:\n  - {kind: allreduce, ranks: 8, alpha: 1 us, bandwidth: 1GB}\n",
       {"collectives[0].bandwidth", "GB/s"}},
      {"gpu: {preset: h100}\ncollectives:\n  - {kind: allreduce, ranks: 8, alpha: -1us, bandwidth: 1GB/s}\n",
       {"collectives[0].alpha", "negative"}},
      {"gpu: {preset: h100}\ncollectives:\n  - {kind: allreduce, ranks: 8, bandwidth: 1GB/s}\n",
       {"collectives[0]", "missing field 'alpha'"}},
      {"gpu: {preset: h100}\ncollectives:\n  - {kind: allreduce, ranks: 8, alpha: 1us, bandwidth: 1GB/s}\n"
       "  - {kind: allreduce, ranks: 8, alpha: 2us, bandwidth: 1GB/s}\n",
       {"collectives[1]", "a second allreduce entry for 8 ranks"}},
  };
  for (const Case& c : cases) {
    const std::string e = error_of([&] { parse_machine_profile(c.yaml, "bad.yaml"); });
    EXPECT_TRUE(contains(e, "bad.yaml")) << c.yaml << " -> " << e;
    for (const char* part : c.expect) EXPECT_TRUE(contains(e, part)) << c.yaml << " -> " << e;
    EXPECT_EQ(e.find('\n'), std::string::npos) << "one line: " << e;
  }
  const std::string missing = error_of([] { load_machine_profile("/nonexistent/profile.yaml"); });
  EXPECT_TRUE(contains(missing, "'/nonexistent/profile.yaml' cannot be opened")) << missing;
}

// format_machine_profile writes what parse_machine_profile reads back: the example
// profile (a preset plus overrides, points and collectives) survives a round trip with
// every figure equal to 6 significant digits and the integers exact.
TEST(MachineProfile, FormatRoundTrips) {
  const std::string path = std::string(MESHSIM_SOURCE_DIR) + "/examples/profiles/h100-example.yaml";
  MachineProfile a = load_machine_profile(path);
  a.description = "node \"17\"";
  a.compute.attention_points = {{4096, true, false, 0.0123456789}, {16384, false, true, 0.5}};
  const MachineProfile b = parse_machine_profile(format_machine_profile(a), "round-trip");
  auto near = [](double x, double y) { return std::fabs(x - y) <= 1e-5 * std::fabs(x); };
  EXPECT_EQ(b.description, a.description);
  EXPECT_EQ(b.gpu.name, a.gpu.name);
  EXPECT_TRUE(near(b.gpu.peak_flops_bf16, a.gpu.peak_flops_bf16));
  EXPECT_TRUE(near(b.gpu.peak_flops_fp16, a.gpu.peak_flops_fp16));
  EXPECT_TRUE(near(b.gpu.peak_flops_fp32, a.gpu.peak_flops_fp32));
  EXPECT_TRUE(near(b.gpu.memory_bandwidth.bytes_per_s(), a.gpu.memory_bandwidth.bytes_per_s()));
  EXPECT_EQ(b.gpu.memory, a.gpu.memory);
  EXPECT_EQ(b.gpu.launch_overhead, a.gpu.launch_overhead);
  EXPECT_TRUE(near(b.gpu.gemm_efficiency, a.gpu.gemm_efficiency));
  EXPECT_TRUE(near(b.gpu.attention_efficiency, a.gpu.attention_efficiency));
  for (int i = 0; i < kKernelKinds; ++i) {
    ASSERT_EQ(b.compute.memory_efficiency[i].has_value(), a.compute.memory_efficiency[i].has_value()) << i;
    if (a.compute.memory_efficiency[i]) {
      EXPECT_TRUE(near(*b.compute.memory_efficiency[i], *a.compute.memory_efficiency[i]));
    }
  }
  ASSERT_EQ(b.compute.gemm_points.size(), a.compute.gemm_points.size());
  ASSERT_FALSE(a.compute.gemm_points.empty());
  ASSERT_EQ(b.compute.row_points.size(), a.compute.row_points.size());
  ASSERT_FALSE(a.compute.row_points.empty());
  for (std::size_t i = 0; i < a.compute.row_points.size(); ++i) {
    const RowKernelPoint &x = a.compute.row_points[i], &y = b.compute.row_points[i];
    EXPECT_EQ(std::tie(x.fn, x.backward, x.cols), std::tie(y.fn, y.backward, y.cols));
    EXPECT_TRUE(near(x.efficiency, y.efficiency));
  }
  ASSERT_EQ(b.compute.attention_points.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const AttentionPoint &x = a.compute.attention_points[i], &y = b.compute.attention_points[i];
    EXPECT_EQ(std::tie(x.seq, x.causal, x.backward), std::tie(y.seq, y.causal, y.backward));
    EXPECT_TRUE(near(x.efficiency, y.efficiency));
  }
  for (std::size_t i = 0; i < a.compute.gemm_points.size(); ++i) {
    const GemmPoint &x = a.compute.gemm_points[i], &y = b.compute.gemm_points[i];
    EXPECT_EQ(std::tie(x.m, x.n, x.k, x.dtype_bytes), std::tie(y.m, y.n, y.k, y.dtype_bytes));
    EXPECT_TRUE(near(x.achieved_flops, y.achieved_flops));
  }
  ASSERT_EQ(b.collectives.size(), a.collectives.size());
  ASSERT_FALSE(a.collectives.empty());
  for (std::size_t i = 0; i < a.collectives.size(); ++i) {
    EXPECT_EQ(b.collectives[i].kind, a.collectives[i].kind);
    EXPECT_EQ(b.collectives[i].ranks, a.collectives[i].ranks);
    EXPECT_EQ(b.collectives[i].alpha, a.collectives[i].alpha);
    EXPECT_TRUE(near(b.collectives[i].bandwidth.bytes_per_s(), a.collectives[i].bandwidth.bytes_per_s()));
    EXPECT_EQ(b.collectives[i].algorithm, a.collectives[i].algorithm);
  }
}

// The fit recovers alpha and bandwidth exactly from points on the line; noise-free
// points of 5 us + bytes / 2 GB/s at 64 KiB .. 16 MiB (the calibrate sweep).
TEST(MachineProfile, FitRecoversAlphaAndBandwidth) {
  std::vector<std::pair<double, double>> pts;
  for (double b = 65536; b <= 16777216; b *= 2) pts.emplace_back(b, 5e-6 + b / 2e9);
  const AlphaBandwidth f = fit_alpha_bandwidth(pts, "allreduce 4 ranks");
  EXPECT_NEAR(f.alpha_s, 5e-6, 1e-12);
  EXPECT_NEAR(f.bytes_per_s, 2e9, 1e-3);
  // A negative intercept (here -1 ms: points of a line through (0, -1 ms)) is refitted
  // through the origin: alpha 0, slope = sum(xy) / sum(xx), by hand for x = 1, 2 MB,
  // y = 0, 1 ms: slope = (2e6 * 1e-3) / (1e12 + 4e12) = 4e-10 s/B = 2.5 GB/s.
  const AlphaBandwidth g = fit_alpha_bandwidth({{1e6, 0.0}, {2e6, 1e-3}}, "x");
  EXPECT_EQ(g.alpha_s, 0.0);
  EXPECT_NEAR(g.bytes_per_s, 2.5e9, 1.0);
  EXPECT_TRUE(contains(error_of([] {
                         fit_alpha_bandwidth({{1e6, 1e-3}}, "allgather 2 ranks");
                       }),
                       "allgather 2 ranks: fitting time = alpha + bytes / bandwidth needs two or more distinct sizes"));
  EXPECT_TRUE(contains(error_of([] { fit_alpha_bandwidth({{1e6, 1e-3}, {1e6, 2e-3}}, "x"); }), "distinct sizes"));
  EXPECT_TRUE(contains(error_of([] {
                         fit_alpha_bandwidth({{1e6, 2e-3}, {2e6, 1e-3}}, "x");
                       }),
                       "does not grow with the size"));
}

// The Hopper presets against the profiles `meshsim calibrate --backend cuda` measured on a
// real H100 and H200 (docs/validation/gpu-h100.md, gpu-h200.md; the files, in
// validation/gpu-profiles/, are the runs' own). Each measured GEMM point's time beside the preset's for the same shape:
// their geometric mean over every shape of a width at or above 4096 in each dimension (the 1024 shapes last ~10 us and
// varied 144-211 TFLOP/s between runs of one card), and the 1 GiB memory pass. Bounds: what the runs showed, with room
// for a re-calibration's spread.
TEST(GpuPresets, HopperPresetsHoldAgainstTheMeasuredProfiles) {
  struct Card {
    const char* preset;
    const char* profile;
  };
  for (const Card c : {Card{"h100", "run5-h100-profile.yaml"}, Card{"h200", "run6-h200-profile.yaml"}}) {
    SCOPED_TRACE(c.preset);
    const MachineProfile measured =
        load_machine_profile(std::string(MESHSIM_SOURCE_DIR) + "/validation/gpu-profiles/" + c.profile);
    const ComputeModel preset(burst(c.preset));  // calibrate's grid: seconds of load, not a job's minutes
    for (const int width : {2, 4}) {
      double log_sum = 0;
      int n = 0;
      for (const GemmPoint& p : measured.compute.gemm_points) {
        if (p.dtype_bytes != width || std::min({p.m, p.n, p.k}) < 4096) continue;
        const Kernel g = Kernel::gemm(p.m, p.n, p.k, width);
        log_sum += std::log(preset.time(g).seconds() * p.achieved_flops / g.flops);  // preset / measured time
        ++n;
      }
      ASSERT_EQ(n, 27) << width;  // {4096, 8192, 16384}^3
      const double ratio = std::exp(log_sum / n);
      EXPECT_GT(ratio, 0.92) << width;  // runs: h100 0.98 / 1.03, h200 0.96 / 1.03 (2-byte / fp32)
      EXPECT_LT(ratio, 1.10) << width;
    }
    const double bytes = 2.0 * (512 << 20);  // calibrate's pass: 512 MiB read, 512 MiB written
    const double preset_rate = bytes / preset.time(Kernel::elementwise(KernelKind::Memcpy, 0, bytes, 4)).seconds();
    EXPECT_NEAR(preset_rate / measured.gpu.memory_bandwidth.bytes_per_s(), 1.0, 0.03);  // runs: h100 0.99, h200 1.01
  }
}

// In a job the H100's tensor cores run at 0.897 of the burst rate (the power cap): a 2-byte
// GEMM takes 1/0.897 as long as its burst time (launch aside); an fp32 GEMM (CUDA cores) keeps it.
TEST(ComputeModel, SustainedClocksSlowTensorCoreWorkOnly) {
  const ComputeModel job(gpu_preset("h100")), bench(burst("h100"));
  const Kernel g = Kernel::gemm(8192, 8192, 8192, 2);
  const double launch = 4e6;
  EXPECT_NEAR((static_cast<double>(job.time(g).ps()) - launch) / (static_cast<double>(bench.time(g).ps()) - launch),
              1 / 0.897, 1e-9);
  const Kernel f = Kernel::gemm(8192, 8192, 8192, 4);
  EXPECT_EQ(job.time(f), bench.time(f));
  const Kernel norm = Kernel::elementwise(KernelKind::Norm, 0, 1e9, 2);
  EXPECT_EQ(job.time(norm), bench.time(norm));
}

// Blom's approximation of the expected maximum of n standard normals against exact values:
// n = 2: 1/sqrt(pi) = 0.5642; n = 10: 1.5388; n = 1000: 3.2414 (Tippett's tables).
TEST(ComputeModel, ExpectedSlowestOfNGpus) {
  EXPECT_EQ(expected_max_normal(1), 0.0);
  EXPECT_NEAR(expected_max_normal(2), 0.5642, 0.03);
  EXPECT_NEAR(expected_max_normal(10), 1.5388, 0.01);
  EXPECT_NEAR(expected_max_normal(1000), 3.2414, 0.02);
  EXPECT_GT(expected_max_normal(2048), expected_max_normal(64));
  // The job's tensor rate: sustained / (1 + spread z(n)); a GPU alone is not slowed.
  ComputeModel m(gpu_preset("h100"));
  EXPECT_DOUBLE_EQ(m.tensor_factor(), 0.897);
  m.set_job_gpus(64);
  EXPECT_DOUBLE_EQ(m.tensor_factor(), 0.897 / (1 + 0.015 * expected_max_normal(64)));
  m.set_job_gpus(1);
  EXPECT_DOUBLE_EQ(m.tensor_factor(), 0.897);
}

// Attention through a library (FlashAttention-3 paper, H100 SXM5, head dim 128), by hand:
//   cuDNN forward, no mask, seq 4096: 609 TFLOP/s of 989.4 at burst clocks;
//   at seq 2896 (log2 = 11.5, halfway between 2k and 4k): (617 + 609) / 2 = 613;
//   backward, causal, seq 4096: 499 x (2 / 2.5) x (518 / 609) = 339.55 TFLOP/s;
//   FA2 forward, causal, seq 16384 and beyond (clamped): 335.
TEST(ComputeModel, AttentionLibrariesRunAtTheirMeasuredRates) {
  ComputeModel m(burst("h100"));
  m.set_attention_library(AttentionLibrary::CuDNN);
  auto rate = [&](const Kernel& k, bool bwd) {
    return k.flops / (static_cast<double>(m.time(k, bwd).ps()) * 1e-12 - 4e-6) / 1e12;
  };
  Kernel a = Kernel::attention(64, 4096, 4096, 128, 2, false);
  EXPECT_NEAR(rate(a, false), 609, 0.01);
  Kernel mid = Kernel::attention(64, 2896, 2896, 128, 2, false);
  EXPECT_NEAR(rate(mid, false), 613, 0.1);
  Kernel c = Kernel::attention(64, 4096, 4096, 128, 2, true);
  c.flops *= 2;  // the schedule's backward: twice the forward's FLOPs
  EXPECT_NEAR(rate(c, true), 499 * 0.8 * 518 / 609, 0.01);
  m.set_attention_library(AttentionLibrary::FlashAttention2);
  EXPECT_NEAR(rate(Kernel::attention(8, 32768, 32768, 128, 2, true), false), 335, 0.01);
  // FlashAttention's Triton kernel: FA2's rates / 1.4 forward, / 2 backward (FA2 paper, 4.1).
  m.set_attention_library(AttentionLibrary::Triton);
  Kernel t = Kernel::attention(64, 2048, 2048, 128, 2, true);
  EXPECT_NEAR(rate(t, false), 298 / 1.4, 0.01);
  t.flops *= 2;
  EXPECT_NEAR(rate(t, true), 291 * 0.8 * 298 / 362 / 2, 0.01);
  // The generic curve stays where no library is named, and on GPUs without the tables.
  m.set_attention_library(AttentionLibrary::Generic);
  EXPECT_NEAR(m.efficiency(a), 0.55 * 4096 / (4096 + 128), 1e-12);
  ComputeModel a100(gpu_preset("a100"));
  a100.set_attention_library(AttentionLibrary::CuDNN);
  EXPECT_NEAR(a100.efficiency(a), 0.60 * 4096 / (4096 + 128), 1e-12);
}

// A GEMM beside a communication kernel that holds SMs runs its waves on the rest: 16384^3 on
// 132 - 24 = 108 SMs takes about 132/108 as long (many waves, so quantization is small).
TEST(ComputeModel, ReservedSmsSlowAGemm) {
  const ComputeModel m(burst("h100"));
  Kernel g = Kernel::gemm(16384, 16384, 16384, 2);
  const double full = m.time(g).seconds();
  g.sms_reserved = 24;
  EXPECT_NEAR(m.time(g).seconds() / full, 132.0 / 108, 0.02);
}

// Beside a communication kernel (GpuSpec::comm_sms, 24 on Hopper): a GEMM is the same GEMM with
// those SMs reserved, attention's FLOP time grows by sm_count / (sm_count - comm_sms), and a
// memory-bound kernel keeps its time; the A100 preset models none (its fit holds it).
TEST(ComputeModel, KernelsBesideCommunication) {
  const ComputeModel m(burst("h100"));
  ASSERT_EQ(m.gpu().comm_sms, 24);
  Kernel g = Kernel::gemm(8192, 8192, 8192, 2);
  Kernel reserved = g;
  reserved.sms_reserved = 24;
  EXPECT_EQ(m.time_beside_comm(g), m.time(reserved));
  EXPECT_GT(m.time_beside_comm(g), m.time(g));
  EXPECT_EQ(m.time_beside_comm(reserved), m.time(reserved));  // already leaves SMs to communication
  Kernel a = Kernel::attention(256, 2048, 2048, 128, 2, /*causal=*/false);
  const double launch = m.gpu().launch_overhead.seconds();
  EXPECT_NEAR((m.time_beside_comm(a).seconds() - launch) / (m.time(a).seconds() - launch), 132.0 / 108, 1e-6);
  const Kernel copy = Kernel::elementwise(KernelKind::Elementwise, 0, 1 << 30, 2);
  EXPECT_EQ(m.time_beside_comm(copy), m.time(copy));
  const ComputeModel a100(gpu_preset("a100"));
  EXPECT_EQ(a100.time_beside_comm(g), a100.time(g));
  GpuSpec bad = gpu_preset("h100");
  bad.comm_sms = 132;
  EXPECT_THROW(ComputeModel{bad}, Error);
}

}  // namespace
}  // namespace meshsim
