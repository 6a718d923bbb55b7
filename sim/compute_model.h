// How long a compute kernel takes on one GPU: a roofline with efficiency curves.
//
//   time = max(flops / (peak_flops * efficiency), bytes / (memory_bandwidth * memory_efficiency))
//          + launch_overhead                                         (docs/math.md section 3)
//
// efficiency depends on the kernel kind and size (docs/compute.md gives the curves and their
// sources): GEMMs rise with their work towards a per-GPU maximum (0.78 on H100 bf16),
// flash attention rises with sequence length, and memory-bound kernels (norm, elementwise,
// softmax, optimizer, memcpy) reach 0.85-0.9 of the memory bandwidth when large. A machine
// profile (docs/profile.md) replaces the GPU figures, the per-kind memory efficiencies, and
// corrects GEMM times with measured points.
//
//   ComputeModel h100(gpu_preset("h100"));
//   Time t = h100.time(Kernel::gemm(8192, 8192, 8192, 2));   // 1654.76 us: 0.7505 x 0.897 of 989.4 TFLOP/s (tiles,
//   waves, launch) ComputeModel calibrated = ComputeModel::load_profile("examples/profiles/h100-example.yaml");
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/units.h"
#include "schedule/kernel.h"
#include "schedule/stack.h"

namespace meshsim {

// One GPU model's datasheet figures and its best achievable fractions of them.
struct GpuSpec {
  std::string name;
  // Dense (no sparsity) peaks in FLOP/s. bf16/fp16 are tensor-core peaks; 0 means the GPU has
  // no such tensor cores (V100, RTX 5000: no bf16). fp32 is the plain FP32 CUDA-core peak, which
  // is what PyTorch gets for fp32 matmuls by default (TF32 is off unless allow_tf32 is set) and
  // what elementwise arithmetic runs on; a profile may write the TF32 peak here instead.
  double peak_flops_bf16 = 0, peak_flops_fp16 = 0, peak_flops_fp32 = 0;
  // Dense FP8 tensor-core peak (Hopper and later; 0: none) and the fraction of it a large FP8
  // GEMM reaches (0: gemm_efficiency). Kernels of 1-byte elements run at these.
  double peak_flops_fp8 = 0, gemm_efficiency_fp8 = 0;
  Bandwidth memory_bandwidth;     // device memory (HBM/GDDR) peak
  Bytes memory = 0;               // device memory capacity
  Time launch_overhead;           // fixed cost added to every kernel
  double gemm_efficiency = 0.75;  // fraction of peak a large, well-shaped GEMM reaches
  // Streaming multiprocessors: GEMMs run as waves of output tiles over them (tile and wave
  // quantization, docs/compute.md). 0 (a CPU profile, or a GPU given without it): no tiles,
  // time = flops / (peak * gemm_efficiency) with the same per-tile k overhead.
  int sm_count = 0;
  int arch = 0;                       // compute capability x 10 (90 for sm_90); 0 = unknown (a CPU profile)
  double attention_efficiency = 0.5;  // fraction of peak a long-sequence flash-attention kernel reaches
  // Fraction of the burst tensor-core rate (the one benchmarks of a few milliseconds see) that
  // the GPU holds in a training job, where minutes of back-to-back GEMMs run it at its power
  // cap and the SM clock falls (docs/compute.md, "Sustained clocks"). Scales GEMMs and
  // attention; 1 where the efficiencies were already fitted to training runs (a100) and for
  // profiles, whose figures are measured.
  double sustained_tensor = 1.0;
  // Spread of that sustained speed across the GPUs of one model in a cluster (coefficient of
  // variation: manufacturing and power management; docs/compute.md, "The slowest GPU"). A
  // synchronous step runs at the pace of its slowest GPU (ComputeModel::set_job_gpus).
  double speed_spread = 0;
  // SMs one of NCCL's communication kernels holds while it runs (a thread block per channel):
  // a GEMM or attention kernel beside it runs on sm_count - comm_sms (docs/compute.md,
  // "Communication beside compute"). 0: not modelled (A100: its gemm_efficiency was fitted to
  // training runs that overlap communication, so the effect is already in it; profiles).
  int comm_sms = 0;
};

// Presets: "h100" (SXM5 80GB), "h200" (SXM 141GB), "b200" (HGX/DGX B200, 1000 W), "gb200" (the
// Blackwell GPU of a GB200 NVL72), "b300" (HGX B300, Blackwell Ultra), "a100" (SXM4 80GB), "v100" (SXM2 32GB),
// "rtx5000" (Quadro RTX 5000, the Frontera RTX nodes), "mi300x" (AMD Instinct MI300X OAM). Unknown names throw Error
// listing these.
GpuSpec gpu_preset(const std::string& name);
std::vector<std::string> gpu_presets();
// The preset a device reports itself as, by name, case and spaces ignored ("NVIDIA H100
// 80GB HBM3" -> "h100", "Quadro RTX 5000" -> "rtx5000"; the longest name contained wins,
// "NVIDIA GB200" -> "gb200"); "" when none matches.
std::string gpu_preset_for_device(const std::string& device_name);

// A measured GEMM: C[m,n] = A[m,k] B[k,n] in dtype_bytes-wide elements ran at `achieved_flops`
// FLOP/s (2mnk / measured kernel time, launch cost included).
struct GemmPoint {
  std::int64_t m = 0, n = 0, k = 0;
  int dtype_bytes = 2;
  double achieved_flops = 0;
};

// What a machine profile changes in the compute model beyond the GpuSpec.
// A row kernel's measured rate at one row length: the large-size fraction of memory bandwidth
// its forward (or backward) pass reached on rows of `cols` (calibrate's sweep over widths).
struct RowKernelPoint {
  KernelFn fn = KernelFn::LayerNorm;
  bool backward = false;
  std::int64_t cols = 0;
  double efficiency = 0;
};

// Attention's measured rate at one sequence length: the fraction of the peak (of the width
// it ran in) its forward (or backward) pass reached, causal or not, FLOPs counted as the
// schedule counts them (backward = 2 x forward; calibrate's sweep over sequence lengths).
struct AttentionPoint {
  std::int64_t seq = 0;
  bool causal = false;
  bool backward = false;
  double efficiency = 0;
};

struct ComputeOverrides {
  std::vector<GemmPoint> gemm_points;
  // Per kernel kind (indexed by KernelKind): the large-size fraction of memory bandwidth reached.
  std::array<std::optional<double>, kKernelKinds> memory_efficiency{};
  // Per row-kernel function and pass, by row length: where a kernel has points for its function
  // and pass, its efficiency comes from them (piecewise linear in log2 of the row length between
  // the nearest two, the nearest one's outside their range), not from its kind's figure.
  std::vector<RowKernelPoint> row_points;
  // Attention by mask and pass, by sequence length: where an attention op with a shape has
  // points for its mask and pass, its efficiency comes from them (linear in log2 of
  // min(seq_q, seq_kv) between the nearest two, the nearest one's outside their range), not
  // from gpu.attention_efficiency's curve. A stack's attention library on Hopper (the
  // published rates) still comes first.
  std::vector<AttentionPoint> attention_points;
};

class ComputeModel {
 public:
  // Throws Error when the GPU figures cannot time a kernel (no positive peak or bandwidth,
  // efficiencies outside (0, 1]).
  explicit ComputeModel(GpuSpec gpu, ComputeOverrides overrides = {});

  // Reads a machine profile (docs/profile.md) and builds the model it describes.
  static ComputeModel load_profile(const std::string& path);

  // Never below the launch overhead; deterministic; rounded to the nearest picosecond.
  // `backward`: the op runs in the backward phase (a row kernel's backward function; it
  // matters only where the overrides carry row points).
  Time time(const Kernel& k, bool backward = false) const;
  // The same kernel while a communication kernel holds GpuSpec::comm_sms of the SMs: GEMMs run
  // their waves on the rest, attention's rate shrinks with the SMs; memory-bound kernels and
  // GEMMs that already leave SMs to communication (sms_reserved) keep time().
  Time time_beside_comm(const Kernel& k, bool backward = false) const;
  // time(k) and time_beside_comm(k) together, the second computed only where it can differ.
  std::pair<Time, Time> times(const Kernel& k, bool backward = false) const;
  // Fraction of peak_flops(k.dtype_bytes) the kernel's arithmetic achieves.
  double efficiency(const Kernel& k) const;
  // Fraction of memory_bandwidth the kernel's memory traffic achieves.
  double memory_efficiency(const Kernel& k, bool backward = false) const;

  // The attention kernel the training stack calls (schedule/stack.h). Where the GPU has
  // measured rates for the library (sm_90: H100, H200), attention's efficiency comes from
  // them by pass, sequence length and causal mask; elsewhere (Blackwell included) from the
  // generic curve.
  void set_attention_library(AttentionLibrary lib) { attention_ = lib; }
  AttentionLibrary attention_library() const { return attention_; }
  // The GPUs of the job: a synchronous step moves at its slowest GPU's pace, whose tensor-core
  // speed sits z(n) spreads below the mean, z(n) the expected maximum of n standard normals
  // (Blom's approximation). 1 (the default): one GPU, no slowdown.
  void set_job_gpus(int n);
  // The factor on tensor-core rates in this job: sustained_tensor / (1 + speed_spread z(n)).
  double tensor_factor() const { return tensor_factor_; }

  const GpuSpec& gpu() const { return gpu_; }
  const ComputeOverrides& overrides() const { return overrides_; }
  // 2 bytes: the bf16 peak (the fp16 peak on GPUs without bf16); 4 bytes: the fp32 peak.
  // Other widths throw Error.
  double peak_flops(int dtype_bytes) const;
  // Fraction of peak_flops(dtype_bytes) a large GEMM reaches (gemm_efficiency_fp8 for 1 byte).
  double gemm_efficiency(int dtype_bytes) const;

 private:
  double curve_efficiency(const Kernel& k, bool backward = false) const;
  // `flop_factor` stretches the arithmetic (attention on fewer SMs), not the memory traffic.
  double curve_time_ps(const Kernel& k, bool backward = false, double flop_factor = 1.0) const;
  // Whether time_beside_comm(k) can differ from time(k).
  bool slowed_beside_comm(const Kernel& k) const {
    return gpu_.comm_sms > 0 && k.flops > 0 &&
           ((k.kind == KernelKind::Gemm && k.sms_reserved == 0 && k.m > 0 && k.n > 0 && k.k > 0) ||
            k.kind == KernelKind::Attention);
  }
  std::optional<double> row_point_efficiency(const Kernel& k, bool backward) const;
  std::optional<double> attention_point_efficiency(const Kernel& k, bool backward) const;
  double gemm_correction(const Kernel& k) const;  // measured time / curve time, 1 without points

  GpuSpec gpu_;
  ComputeOverrides overrides_;
  std::vector<double> point_log_ratio_;  // log(measured / curve time), one per gemm point
  AttentionLibrary attention_ = AttentionLibrary::Generic;
  double tensor_factor_ = 1.0;
};

// Expected largest of n independent standard normal draws (Blom: the quantile at
// (n - 0.375) / (n + 0.25)); 0 for n = 1.
double expected_max_normal(int n);

}  // namespace meshsim
