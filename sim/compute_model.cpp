#include "sim/compute_model.h"

#include <fmt/format.h>

#include <boost/math/distributions/normal.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include "core/error.h"
#include "sim/machine_profile.h"

namespace meshsim {

namespace {

// ---------------------------------------------------------------------------------------------
// The data. Sources and reasoning for every figure: docs/compute.md.
// ---------------------------------------------------------------------------------------------

// GPU presets: datasheet peaks (dense), memory, SM count, and the best fractions of peak
// reached by large GEMMs and long-sequence flash attention.
struct GpuRow {
  const char* name;
  double bf16, fp16, fp32;  // FLOP/s
  double bw;                // bytes/s
  double mem_gib;
  double launch_us;
  double gemm_eff, attn_eff;
  int sms;
  int arch;          // compute capability x 10
  double sustained;  // GpuSpec::sustained_tensor
  double spread;     // GpuSpec::speed_spread
  int comm_sms;      // GpuSpec::comm_sms
  double fp8;        // FLOP/s, dense; 0: no FP8 tensor cores
  double fp8_eff;    // GpuSpec::gemm_efficiency_fp8
};
// FP8 (docs/compute.md, "FP8"). Dense peaks are twice the bf16 ones on Hopper and Blackwell
// (H100 SXM datasheet: 3,958 TFLOPS FP8 with sparsity, 1,979 dense; DGX B200: 4.5 PFLOP/s dense
// per GPU, GB200 NVL72: 720 PFLOPS FP8 with sparsity for 72 GPUs = 5 dense each). H100 and H200's
// large-GEMM fraction is set so that an FP8 GEMM, under the same sustained factor as bf16's,
// runs at the FP8 / bf16 ratio measured under load: tools/gpu/fp8_gemm.py on an H200 (this
// project's run 25, docs/validation/gpu-h200.md) held 1181.6 TFLOP/s in e4m3 and 656.1 in bf16
// over the last 30 s of 60 s of back-to-back 8192^3 GEMMs each (1.801x). FP8 runs further into
// the 700 W cap than bf16 (0.866 of its burst against 0.949), which a fraction of the burst rate
// alone would miss: cuBLASLt's e4m3 8192^3 bursts reach 0.814 of peak (D-Robotics' report, 16
// H100s), PyTorch's _scaled_mm 0.689 in the same run. Blackwell: no FP8 measurement at hand;
// its bf16 fraction is carried over (0 here).
constexpr double kH100Fp8 = 1978.9e12;
constexpr double kH100Fp8Efficiency = 0.78 * 989.4e12 / kH100Fp8 * (1181.6 / 656.1);
// Sustained tensor-core fraction of H100 and H200: `calibrate --backend cuda` times its GEMM grid
// for seconds back to back, the 8192^3 and 16384^3 bf16 shapes last, with the power cap engaged
// (run 7's clock trace: the SM clock down to 1125 MHz at 700 W). Over the 18 calibrate runs that
// timed both shapes (runs 3-24, docs/validation/gpu-h100.md, gpu-h200.md), they ran at a mean 0.897 of this
// preset's burst figure on H100s (24 points, 0.787-0.991) and 0.920 on H200s (14 points,
// 0.838-0.959). The A100's gemm_efficiency was fitted to Korthikanti's training runs, so its
// sustained clocks are already in it.
constexpr double kH100Sustained = 0.897;
constexpr double kH200Sustained = 0.920;
// Spread of the sustained speed across GPUs of one model: Sinha et al. (SC22, "Not All GPUs Are
// Created Equal", arXiv 2208.11035) measured 8% performance variation on average between GPUs of
// one SKU in five clusters, as the whisker-to-whisker width of their box plots (Q1 - 1.5 IQR to
// Q3 + 1.5 IQR, +-2.70 standard deviations of a normal): a coefficient of variation of 8 / 5.4 =
// 1.5%. The A100 preset's gemm_efficiency was fitted to runs of 8 to 3072 GPUs, so its spread is
// already in it (0 here), like its sustained clocks.
constexpr double kSpread = 0.015;
// SMs an NCCL collective kernel holds on Hopper: Nsight Systems traces of FSDP on an H100 show
// ncclAllGather launched with 24 thread blocks beside a 132-block GEMM, which then needs a
// second wave (NVIDIA developer forum, "Compute-communication overlap causes severe GEMM
// performance degradation because of tail effect", 2025); TE's userbuffers give their
// communication 16-32 SMs for the same reason (kTeReduceScatterSms). The A100's efficiencies
// were fitted to training runs with their communication overlapped, older presets to
// measurements that had none beside them: 0 there.
constexpr int kHopperCommSms = 24;
// Blackwell (sm_100), dense figures (NVIDIA quotes its tensor rates with 2:4 sparsity; halved here):
//  b200: HGX/DGX B200 at 1000 W. DGX B200 datasheet: 72 PFLOPS FP8 training for 8 GPUs = 9 sparse,
//    4.5 dense per GPU, bf16 half of that, 2.25 PFLOP/s (the HGX B200 spec's 36 PFLOPS FP16/BF16 with
//    sparsity for 8 GPUs agrees); 1,440 GB and 64 TB/s of HBM3e for 8 GPUs = 180 GB, 8 TB/s each.
//    fp32: the HGX B200 spec's 600 TFLOPS for 8 GPUs, 75 each.
//  gb200: the Blackwell GPU of a GB200 NVL72 (1200 W). NVL72 spec: 360 PFLOPS FP16/BF16 with
//    sparsity for 72 GPUs = 2.5 dense each; 5,760 TFLOPS fp32 = 80 each; up to 13.4 TB and 576
//    TB/s of HBM3e = 186 GB, 8 TB/s each.
//  SMs: 148 enabled on B200 (deviceQuery; jax-ml scaling-book "How to Think About GPUs"); the GB200's
//    GPU is taken to have the same 148 (no separate count found).
//  gemm: MAMF (Bekman, ml-engineering, compute/accelerator): B200 1745 of 2250 TFLOP/s (0.776),
//    GB200 1822 of 2500 (0.729), the best cuBLAS bf16 shape of a search, as H100's 0.78 was set.
//  attention: Hopper's 0.55 carried over (no Blackwell sweep of our libraries at hand); the best
//    published forwards are alike fractions of peak (FlashAttention-3 on H100 0.75, FlashAttention-4
//    on B200 0.71, arXiv 2603.05451). sm_90's library tables do not apply (curve_efficiency).
//  sustained, spread, comm SMs: not measured on Blackwell; the H100's measured 0.897 under its power
//    cap, Sinha's 1.5% and NCCL's 24 thread blocks are carried over as assumptions.
//  b300: HGX B300 (Blackwell Ultra). NVIDIA's HGX B300 specification gives the same tensor rates as
//    HGX B200 for 8 GPUs (FP8 72 PFLOPS and FP16/BF16 36 PFLOPS with sparsity, FP32 600 TFLOPS): 2.25
//    PFLOP/s dense bf16, 4.5 fp8, 75 TFLOP/s fp32 per GPU; 2.3 TB of HBM3e for 8 = 288 GB each (NVIDIA's
//    Blackwell Ultra blog: 288 GB HBM3e, 8 TB/s). The blog gives 160 SMs for the full GPU
//    implementation; B200 ships 148 of its 160, and B300 is taken to as well. Its GEMM fraction is
//    MAMF's B300 row (kB300Gemm); the rest as for B200.
constexpr double kBlackwellSustained = kH100Sustained;
// Blackwell FP8 (no FP8 run of our own on Blackwell): MAMF's e4m3 burst fractions from the same
// table as the bf16 ones (B200 3432.5 of 4500 TFLOP/s, B300 3353.3 of 4500, GB200 3615.6 of 5000),
// times what run 25 measured FP8 to lose to the power cap beyond bf16 (FP8 held 0.866 of its burst,
// bf16 0.949): FP8 then runs 1.73-1.81x bf16, as on Hopper (1.80x), not the 2x of the peaks.
constexpr double kFp8CapLoss = 0.866 / 0.949;
// B300's bf16 fraction is MAMF's B300 row (1769 of 2250 TFLOP/s at 12288x18432x1024, torch 2.9.1).
constexpr double kB300Gemm = 1769.0 / 2250.0;
// AMD Instinct MI300X (OAM, 750 W), from AMD's ROCm documentation of the MI300 architecture: 1307.4
// TFLOP/s dense bf16/fp16 and 2614.9 fp8 (matrix cores), 163.4 fp32, 304 CUs (8 XCDs of 38), 192 GB
// of HBM3 at 5.3 TB/s. Its GEMM fraction is MAMF (the same table as B200's): 668.4 of 1300 TFLOP/s
// at 10240x15360x8192 with torch 2.5.1 on ROCm 6.3 and TunableOp (0.511 of 1307.4; the table's
// first method, without cache resets, gave 781.9 on ROCm 6.2). No measured attention rate is at
// hand: Hopper's attention / GEMM ratio is carried over (0.55 x 0.511 / 0.78 = 0.36), like the
// sustained factor, spread and communication CUs (assumptions, docs/compute.md). arch 0: not an
// NVIDIA GPU, so no sm_90 library table applies.
constexpr double kMi300xGemm = 668.4e12 / 1307.4e12;
//       name       bf16      fp16      fp32     mem BW     memory launch gemm  attn  SMs  arch sustained spread comm
constexpr GpuRow kGpus[] = {
    {"h100", 989.4e12, 989.4e12, 66.9e12, 3.35e12, 80, 4.0, 0.78, 0.55, 132, 90, kH100Sustained, kSpread,
     kHopperCommSms, kH100Fp8, kH100Fp8Efficiency},
    {"h200", 989.4e12, 989.4e12, 66.9e12, 4.8e12, 141, 4.0, 0.78, 0.55, 132, 90, kH200Sustained, kSpread,
     kHopperCommSms, kH100Fp8, kH100Fp8Efficiency},
    {"b200", 2250e12, 2250e12, 75e12, 8.0e12, 180, 4.0, 0.776, 0.55, 148, 100, kBlackwellSustained, kSpread,
     kHopperCommSms, 4500e12, 3432.5 / 4500.0 * kFp8CapLoss},
    {"gb200", 2500e12, 2500e12, 80e12, 8.0e12, 186, 4.0, 0.729, 0.55, 148, 100, kBlackwellSustained, kSpread,
     kHopperCommSms, 5000e12, 3615.6 / 5000.0 * kFp8CapLoss},
    {"b300", 2250e12, 2250e12, 75e12, 8.0e12, 288, 4.0, kB300Gemm, 0.55, 148, 100, kBlackwellSustained, kSpread,
     kHopperCommSms, 4500e12, 3353.3 / 4500.0 * kFp8CapLoss},
    {"mi300x", 1307.4e12, 1307.4e12, 163.4e12, 5.3e12, 192, 4.0, kMi300xGemm, 0.55 * kMi300xGemm / 0.78, 304, 0,
     kH100Sustained, kSpread, kHopperCommSms, 2614.9e12, 0},
    {"a100", 312e12, 312e12, 19.5e12, 2.039e12, 80, 4.0, 0.75, 0.60, 108, 80, 1.0, 0, 0, 0, 0},
    {"v100", 0, 125e12, 15.7e12, 0.9e12, 32, 4.0, 0.80, 0.35, 80, 70, 1.0, 0, 0, 0, 0},
    {"rtx5000", 0, 89.2e12, 11.2e12, 0.448e12, 16, 4.0, 0.70, 0.35, 48, 75, 1.0, 0, 0, 0, 0},
};

// Attention libraries on sm_90 (H100 SXM5, bf16, head dim 128), TFLOP/s at sequence 512, 1k,
// 2k, 4k, 8k, 16k, as Shah et al. measured them (FlashAttention-3, arXiv 2407.08608, Figures 5
// and 6: FlashAttention-2 2.5.x and cuDNN 9, burst rates of one GPU). Forward FLOPs are
// 4 s^2 d per head, halved with a causal mask; the paper counts the backward as 2.5 forwards
// (the recomputed scores and four GEMMs), meshsim as 2, so a backward rate is scaled by 2/2.5.
// The paper gives the backward without a mask only: the causal backward takes the forward's
// causal / non-causal ratio at the same length (cuDNN measured on this project's H100, issue 34:
// causal fwd+bwd at seq 4096 ran 0.593 of the non-causal time; these tables give 0.588).
struct AttentionRates {
  AttentionLibrary lib;
  double fwd[6], fwd_causal[6], bwd[6];
};
constexpr AttentionRates kHopperAttention[] = {
    {AttentionLibrary::FlashAttention2,
     {309, 350, 362, 368, 370, 370},
     {191, 260, 298, 319, 333, 335},
     {214, 260, 291, 310, 318, 322}},
    {AttentionLibrary::CuDNN,
     {497, 574, 617, 609, 600, 595},
     {315, 410, 484, 518, 529, 539},
     {305, 408, 465, 499, 518, 516}},
};
constexpr double kAttentionRatesPeak = 989.4e12;  // the rates above as fractions of this
constexpr double kAttentionBackwardCount = 2.0 / 2.5;
// FlashAttention's Triton kernel (flash_attn_triton.py, llm-foundry's attn_impl: triton): Dao
// (FlashAttention-2, arXiv 2307.08691, section 4.1, A100) measured FlashAttention-2 "around
// 1.3-1.5x faster than FlashAttention in Triton in the forward pass and around 2x faster in the
// backward pass". Both kernels issue the same Ampere-style mma.sync instructions on sm_90, so
// the Triton kernel takes FA2's sm_90 rates divided by 1.4 forward and 2 backward.
constexpr double kTritonForwardSlowdown = 1.4;
constexpr double kTritonBackwardSlowdown = 2.0;

// The rate of `lib` at sequence `seq` (piecewise linear in log2 seq, clamped to 512..16k) as a
// fraction of the H100's bf16 peak; nullopt for the generic curve.
std::optional<double> hopper_attention_efficiency(AttentionLibrary lib, double seq, bool causal, bool backward) {
  if (lib == AttentionLibrary::Triton) {
    const double fa2 = *hopper_attention_efficiency(AttentionLibrary::FlashAttention2, seq, causal, backward);
    return fa2 / (backward ? kTritonBackwardSlowdown : kTritonForwardSlowdown);
  }
  for (const AttentionRates& r : kHopperAttention) {
    if (r.lib != lib) continue;
    auto at = [&](const double* row) {
      const double x = std::clamp(std::log2(std::max(seq, 1.0)) - 9.0, 0.0, 5.0);
      const auto i = std::min(static_cast<int>(x), 4);
      return row[i] + (row[i + 1] - row[i]) * (x - i);
    };
    double rate = backward ? at(r.bwd) * kAttentionBackwardCount : at(causal ? r.fwd_causal : r.fwd);
    if (backward && causal) rate *= at(r.fwd_causal) / at(r.fwd);
    return rate * 1e12 / kAttentionRatesPeak;
  }
  return std::nullopt;
}

// GEMMs (docs/compute.md): C[m,n] is cut into output tiles, one thread block each; the
// blocks run in waves of sm_count, so a wave left partly empty costs a whole wave. Each tile
// streams its k dimension plus a fixed kGemmTileOverheadK (the pipeline's prologue and the
// epilogue that stores the tile). The library picks the tile and split-K that finish first;
// smaller tiles re-read operands more often per FLOP and run at `relative` of the rate.
struct GemmTile {
  int rows, cols;
  double relative;
};
constexpr GemmTile kGemmTiles[] = {{256, 128, 1.0}, {128, 256, 1.0}, {128, 128, 0.95},
                                   {128, 64, 0.85}, {64, 128, 0.85}, {64, 64, 0.70}};
constexpr double kGemmTileOverheadK = 64;  // k steps' worth of prologue + epilogue per tile
constexpr int kGemmMaxSplitK = 16;         // split-K: k shared by up to 16 blocks, fp32 partials summed

// Size curves (shared by all GPUs; each scales with the GPU's own peak or bandwidth):
//  attention: eff = attention_efficiency * s / (s + kAttentionHalfSeq), s = min(seq_q, seq_kv).
//  memory:    eff = kMemoryEfficiency[kind] * B / (B + bandwidth * kMemoryHalfTime), B = bytes
//             (Little's law: a kernel needs ~bandwidth x latency bytes in flight to stream).
//  vector arithmetic of memory-bound kinds: kVectorEfficiency of the fp32 CUDA-core peak.
constexpr double kAttentionHalfSeq = 128;   // tokens
constexpr double kMemoryHalfTime = 0.5e-6;  // s
constexpr double kVectorEfficiency = 0.5;

// Large-size fraction of memory bandwidth, by kernel kind (indexed by KernelKind).
constexpr double kMemoryEfficiency[kKernelKinds] = {
    0.90,  // gemm        (operand streaming when a GEMM is memory-bound, e.g. skinny shapes)
    0.90,  // attention
    0.85,  // norm        (two passes over a row held in registers/shared memory, reductions)
    0.90,  // elementwise (STREAM-like: ~3.0-3.1 of 3.35 TB/s measured on H100)
    0.85,  // softmax
    0.85,  // optimizer   (fused multi-tensor Adam: many tensors, ragged tails)
    0.90,  // memcpy
};

double saturating(double x, double half) { return x / (x + half); }

// Seconds of arithmetic of a GEMM on `gpu` at `peak` FLOP/s (the tile and wave model above),
// its waves on the SMs that `reserved_sms` (held by a communication kernel beside it) leave.
double gemm_seconds(const GpuSpec& gpu, double peak, double efficiency, double m, double n, double k,
                    int reserved_sms) {
  const double rate = peak * efficiency;
  if (gpu.sm_count <= 0) return 2 * m * n * k / rate;
  const double per_sm = rate / gpu.sm_count;
  const double sms = reserved_sms > 0 && reserved_sms < gpu.sm_count ? gpu.sm_count - reserved_sms : gpu.sm_count;
  const double partial_bw = gpu.memory_bandwidth.bytes_per_s() * 0.9;
  double best = std::numeric_limits<double>::infinity();
  for (const GemmTile& t : kGemmTiles) {
    const double tiles = std::ceil(m / t.rows) * std::ceil(n / t.cols);
    for (int split = 1; split <= kGemmMaxSplitK; split *= 2) {
      if (split > 1 && tiles * (split / 2) >= sms) break;  // the GPU was already full
      const double kk = std::ceil(k / split);
      if (split > 1 && kk < kGemmTileOverheadK) break;
      const double waves = std::ceil(tiles * split / sms);
      double secs = waves * 2.0 * t.rows * t.cols * (kk + kGemmTileOverheadK) / (per_sm * t.relative);
      if (split > 1) secs += 2.0 * split * m * n * 4 / partial_bw;  // fp32 partials written, read, summed
      best = std::min(best, secs);
    }
  }
  return best;
}

void check_fraction(double v, const std::string& what) {
  if (!(v > 0 && v <= 1)) throw Error(fmt::format("{}: {} must be in (0, 1]; e.g. 0.8 for 80% of peak", what, v));
}

}  // namespace

GpuSpec gpu_preset(const std::string& name) {
  for (const GpuRow& r : kGpus) {
    if (name != r.name) continue;
    GpuSpec g;
    g.name = r.name;
    g.peak_flops_bf16 = r.bf16;
    g.peak_flops_fp16 = r.fp16;
    g.peak_flops_fp32 = r.fp32;
    g.memory_bandwidth = Bandwidth::from_bytes_per_s(r.bw);
    g.memory = GiB(r.mem_gib);
    g.launch_overhead = us(r.launch_us);
    g.gemm_efficiency = r.gemm_eff;
    g.peak_flops_fp8 = r.fp8;
    g.gemm_efficiency_fp8 = r.fp8_eff;
    g.attention_efficiency = r.attn_eff;
    g.sm_count = r.sms;
    g.arch = r.arch;
    g.sustained_tensor = r.sustained;
    g.speed_spread = r.spread;
    g.comm_sms = r.comm_sms;
    return g;
  }
  std::string list;
  for (const auto& n : gpu_presets()) list += (list.empty() ? "" : ", ") + n;
  throw Error(fmt::format("unknown GPU '{}'; use one of {} (or a machine profile)", name, list));
}

std::vector<std::string> gpu_presets() {
  std::vector<std::string> names;
  for (const GpuRow& r : kGpus) names.emplace_back(r.name);
  return names;
}

std::string gpu_preset_for_device(const std::string& device_name) {
  std::string squashed;
  for (unsigned char c : device_name)
    if (!std::isspace(c)) squashed += static_cast<char>(std::tolower(c));
  std::string best;  // the longest name found: "NVIDIA GB200" is gb200, not b200
  for (const std::string& p : gpu_presets())
    if (squashed.find(p) != std::string::npos && p.size() > best.size()) best = p;
  return best;
}

ComputeModel::ComputeModel(GpuSpec gpu, ComputeOverrides overrides)
    : gpu_(std::move(gpu)), overrides_(std::move(overrides)) {
  const std::string who = fmt::format("gpu '{}'", gpu_.name);
  if (!(gpu_.peak_flops_bf16 >= 0 && gpu_.peak_flops_fp16 >= 0) ||
      !(gpu_.peak_flops_bf16 > 0 || gpu_.peak_flops_fp16 > 0))
    throw Error(who + ": needs a positive peak_flops_bf16 or peak_flops_fp16, e.g. 989TFLOP/s");
  if (!(gpu_.peak_flops_fp32 > 0)) throw Error(who + ": peak_flops_fp32 must be positive, e.g. 67TFLOP/s");
  if (!(gpu_.memory_bandwidth.bytes_per_s() > 0))
    throw Error(who + ": memory_bandwidth must be positive, e.g. 3.35TB/s");
  if (gpu_.launch_overhead < Time()) throw Error(who + ": launch_overhead must be >= 0, e.g. 4us");
  check_fraction(gpu_.gemm_efficiency, who + ": gemm_efficiency");
  check_fraction(gpu_.attention_efficiency, who + ": attention_efficiency");
  check_fraction(gpu_.sustained_tensor, who + ": sustained_tensor");
  if (!(gpu_.speed_spread >= 0 && gpu_.speed_spread < 0.2))
    throw Error(who + ": speed_spread must be in [0, 0.2), e.g. 0.015 for 1.5% between GPUs");
  if (gpu_.comm_sms < 0 || (gpu_.comm_sms > 0 && gpu_.comm_sms >= gpu_.sm_count))
    throw Error(fmt::format("{}: comm_sms {} must be >= 0 and below sm_count {}, e.g. 24 of 132 on an H100", who,
                            gpu_.comm_sms, gpu_.sm_count));
  tensor_factor_ = gpu_.sustained_tensor;
  for (int i = 0; i < kKernelKinds; ++i)
    if (const auto& e = overrides_.memory_efficiency[i])
      check_fraction(*e, fmt::format("memory efficiency of {}", to_string(static_cast<KernelKind>(i))));
  for (const RowKernelPoint& p : overrides_.row_points) {
    if (!is_row_fn(p.fn) || p.cols <= 0)
      throw Error(fmt::format("row kernel point of '{}': needs a row kernel's function and a positive row length",
                              to_string(p.fn)));
    check_fraction(p.efficiency, fmt::format("row kernel point of '{}' at {} columns", to_string(p.fn), p.cols));
  }
  for (const AttentionPoint& p : overrides_.attention_points) {
    if (p.seq <= 0) throw Error(fmt::format("attention point: the sequence length {} must be positive", p.seq));
    check_fraction(p.efficiency, fmt::format("attention point at sequence {}", p.seq));
  }
  for (std::size_t i = 0; i < overrides_.gemm_points.size(); ++i) {
    const GemmPoint& p = overrides_.gemm_points[i];
    if (p.m <= 0 || p.n <= 0 || p.k <= 0 || !(p.achieved_flops > 0))
      throw Error(fmt::format("gemm point {}: m, n, k and the achieved rate must be positive", i));
    peak_flops(p.dtype_bytes);  // throws on an unmodeled width
    const Kernel g = Kernel::gemm(p.m, p.n, p.k, p.dtype_bytes);
    point_log_ratio_.push_back(std::log(g.flops / p.achieved_flops * 1e12 / curve_time_ps(g)));
  }
}

double expected_max_normal(int n) {
  if (n <= 1) return 0;
  const double nn = n;
  return boost::math::quantile(boost::math::normal(), (nn - 0.375) / (nn + 0.25));
}

void ComputeModel::set_job_gpus(int n) {
  tensor_factor_ = gpu_.sustained_tensor / (1 + gpu_.speed_spread * expected_max_normal(n));
}

double ComputeModel::peak_flops(int dtype_bytes) const {
  if (dtype_bytes == 2) return gpu_.peak_flops_bf16 > 0 ? gpu_.peak_flops_bf16 : gpu_.peak_flops_fp16;
  if (dtype_bytes == 4) return gpu_.peak_flops_fp32;
  if (dtype_bytes == 1) {
    if (gpu_.peak_flops_fp8 > 0) return gpu_.peak_flops_fp8;
    throw Error(
        fmt::format("stack.fp8: gpu '{}' has no FP8 tensor cores in meshsim's figures (FP8 needs Hopper or "
                    "later: h100, h200, b200, gb200); set stack.fp8: off",
                    gpu_.name));
  }
  throw Error(fmt::format("dtype of {} bytes is not modeled on gpu '{}'; use 1 (fp8), 2 (bf16/fp16) or 4 (fp32)",
                          dtype_bytes, gpu_.name));
}

double ComputeModel::gemm_efficiency(int dtype_bytes) const {
  return dtype_bytes == 1 && gpu_.gemm_efficiency_fp8 > 0 ? gpu_.gemm_efficiency_fp8 : gpu_.gemm_efficiency;
}

double ComputeModel::curve_efficiency(const Kernel& k, bool backward) const {
  const double peak = peak_flops(k.dtype_bytes);
  // The power cap slows the tensor cores (2- and 1-byte operands; FP8 is assumed to lose what
  // bf16 does); fp32 GEMMs on the CUDA cores held their rate in the same sustained calibrate runs
  // (1.03-1.04x the preset).
  const double sustained = k.dtype_bytes <= 2 ? tensor_factor_ : 1.0;
  switch (k.kind) {
    case KernelKind::Gemm: {
      const double eff = gemm_efficiency(k.dtype_bytes);
      if (k.m <= 0 || k.n <= 0 || k.k <= 0) return eff * sustained;  // no shape: a large GEMM
      const double secs = gemm_seconds(gpu_, peak, eff, static_cast<double>(k.m), static_cast<double>(k.n),
                                       static_cast<double>(k.k), k.sms_reserved);
      return sustained * std::min(1.0, 2.0 * static_cast<double>(k.m) * static_cast<double>(k.n) *
                                           static_cast<double>(k.k) / (secs * peak));
    }
    case KernelKind::Attention: {
      if (k.m <= 0 || k.n <= 0) return gpu_.attention_efficiency * sustained;  // no shape: assume long sequences
      const double seq = static_cast<double>(std::min(k.m, k.n));
      if (gpu_.arch == 90 && k.dtype_bytes == 2)
        if (const auto lib = hopper_attention_efficiency(attention_, seq, k.causal, backward))
          return std::min(1.0, *lib * sustained);
      if (const auto measured = attention_point_efficiency(k, backward)) return std::min(1.0, *measured * sustained);
      return gpu_.attention_efficiency * sustained * saturating(seq, kAttentionHalfSeq);
    }
    default:
      return std::min(1.0, kVectorEfficiency * gpu_.peak_flops_fp32 / peak);
  }
}

namespace {
// The efficiency at `x` from the measured points that `matches` selects (`at(p)`: a point's
// length): the point's at a measured length, linear in log2 between the nearest shorter and
// longer ones, the nearest one's outside their range; none matching: nullopt. Row kernels by
// row length and attention by sequence share it.
template <class Point, class Match, class At>
std::optional<double> interpolate_points(const std::vector<Point>& points, std::int64_t x, Match matches, At at) {
  const Point* below = nullptr;
  const Point* above = nullptr;
  for (const Point& p : points) {
    if (!matches(p)) continue;
    if (at(p) <= x && (!below || at(p) > at(*below))) below = &p;
    if (at(p) >= x && (!above || at(p) < at(*above))) above = &p;
  }
  if (!below && !above) return std::nullopt;
  if (!below || !above || at(*below) == at(*above)) return (below ? below : above)->efficiency;
  const double lx = std::log2(static_cast<double>(x)), x0 = std::log2(static_cast<double>(at(*below))),
               x1 = std::log2(static_cast<double>(at(*above)));
  return below->efficiency + (above->efficiency - below->efficiency) * (lx - x0) / (x1 - x0);
}
}  // namespace

std::optional<double> ComputeModel::row_point_efficiency(const Kernel& k, bool backward) const {
  if (overrides_.row_points.empty() || !is_row_fn(k.fn) || k.n <= 0) return std::nullopt;
  return interpolate_points(
      overrides_.row_points, k.n, [&](const RowKernelPoint& p) { return p.fn == k.fn && p.backward == backward; },
      [](const RowKernelPoint& p) { return p.cols; });
}

std::optional<double> ComputeModel::attention_point_efficiency(const Kernel& k, bool backward) const {
  if (overrides_.attention_points.empty() || k.kind != KernelKind::Attention || k.m <= 0 || k.n <= 0)
    return std::nullopt;
  return interpolate_points(
      overrides_.attention_points, std::min(k.m, k.n),
      [&](const AttentionPoint& p) { return p.causal == k.causal && p.backward == backward; },
      [](const AttentionPoint& p) { return p.seq; });
}

double ComputeModel::memory_efficiency(const Kernel& k, bool backward) const {
  const int kind = static_cast<int>(k.kind);
  const double max =
      row_point_efficiency(k, backward).value_or(overrides_.memory_efficiency[kind].value_or(kMemoryEfficiency[kind]));
  return max * saturating(k.bytes, gpu_.memory_bandwidth.bytes_per_s() * kMemoryHalfTime);
}

double ComputeModel::curve_time_ps(const Kernel& k, bool backward, double flop_factor) const {
  double t = 0;  // seconds
  if (k.flops > 0) t = k.flops / (peak_flops(k.dtype_bytes) * curve_efficiency(k, backward)) * flop_factor;
  if (k.bytes > 0) t = std::max(t, k.bytes / (gpu_.memory_bandwidth.bytes_per_s() * memory_efficiency(k, backward)));
  return t * 1e12 + static_cast<double>(gpu_.launch_overhead.ps());
}

// Shepard (inverse squared distance) interpolation of log(measured / curve time) over the
// measured points of the same width, distance measured in (log2 m, log2 n, log2 k).
double ComputeModel::gemm_correction(const Kernel& k) const {
  if (k.kind != KernelKind::Gemm || k.m <= 0 || k.n <= 0 || k.k <= 0) return 1.0;
  double num = 0, den = 0;
  for (std::size_t i = 0; i < overrides_.gemm_points.size(); ++i) {
    const GemmPoint& p = overrides_.gemm_points[i];
    if (p.dtype_bytes != k.dtype_bytes) continue;
    if (p.m == k.m && p.n == k.n && p.k == k.k) return std::exp(point_log_ratio_[i]);
    auto d = [](std::int64_t a, std::int64_t b) {
      return std::log2(static_cast<double>(a)) - std::log2(static_cast<double>(b));
    };
    const double dm = d(p.m, k.m), dn = d(p.n, k.n), dk = d(p.k, k.k);
    const double w = 1.0 / (dm * dm + dn * dn + dk * dk);
    num += w * point_log_ratio_[i];
    den += w;
  }
  return den > 0 ? std::exp(num / den) : 1.0;
}

Time ComputeModel::time(const Kernel& k, bool backward) const {
  const double launch = static_cast<double>(gpu_.launch_overhead.ps());
  double t = curve_time_ps(k, backward);
  if (k.kind == KernelKind::Gemm && !overrides_.gemm_points.empty()) {
    // A measured shape gives its measured time exactly; other shapes scale the curve.
    for (const GemmPoint& p : overrides_.gemm_points)
      if (p.dtype_bytes == k.dtype_bytes && p.m == k.m && p.n == k.n && p.k == k.k && k.sms_reserved == 0)
        return duration_ps(std::max(launch, k.flops / p.achieved_flops * 1e12), "a kernel");
    t *= gemm_correction(k);
  }
  return duration_ps(std::max(launch, t), "a kernel");
}

Time ComputeModel::time_beside_comm(const Kernel& k, bool backward) const {
  if (!slowed_beside_comm(k)) return time(k, backward);
  if (k.kind == KernelKind::Gemm) {
    Kernel beside = k;
    beside.sms_reserved = gpu_.comm_sms;
    return time(beside, backward);
  }
  // Attention's thread blocks are many and uniform: its arithmetic slows with the SMs it
  // loses, while the memory traffic it needs does not grow.
  const double sms = gpu_.sm_count;
  return duration_ps(curve_time_ps(k, backward, sms / (sms - gpu_.comm_sms)), "a kernel");
}

std::pair<Time, Time> ComputeModel::times(const Kernel& k, bool backward) const {
  const Time alone = time(k, backward);
  return {alone, slowed_beside_comm(k) ? time_beside_comm(k, backward) : alone};
}

double ComputeModel::efficiency(const Kernel& k) const {
  return std::min(1.0, curve_efficiency(k) / gemm_correction(k));
}

ComputeModel ComputeModel::load_profile(const std::string& path) {
  MachineProfile p = load_machine_profile(path);
  return ComputeModel(std::move(p.gpu), std::move(p.compute));
}

}  // namespace meshsim
