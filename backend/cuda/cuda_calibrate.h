// What this rank's GPU does, measured through the GpuApi the cuda executor uses (cuBLAS
// GEMMs, our memory-bound pass, and each of our kernels forward and backward, attention
// included: backend/kernel_call.h's calibration_calls): the figures `meshsim calibrate --backend cuda` writes
// into a machine profile. Every rank of a run measures at once (one GPU each).
//
//   Checker check(api, rank);
//   CudaMeasurements m = measure_cuda(api, check, device, {});
//   m.gemm[i] = {m, n, k, dtype, achieved FLOP/s}; m.memory_bandwidth (bytes read + written / s)
//
// Every status goes through `check` (one error naming the rank and the measurement).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/gpu_api.h"

namespace meshsim::cuda {

struct MeasuredGemm {
  std::int64_t m = 0, n = 0, k = 0;
  DType dtype = DType::Bf16;
  double flops_per_s = 0;  // 2mnk / time per call (back-to-back calls on one stream)
};

struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;
  friend bool operator==(const GemmShape&, const GemmShape&) = default;
};

struct CudaMeasurements {
  std::vector<MeasuredGemm> gemm;               // every (m, n, k) of gemm_sizes, per dtype
  std::vector<MeasuredGemm> model_gemm;         // every shape of model_gemms, bf16
  double memory_bandwidth = 0;                  // bytes read + written per second by stream_pass on memory_bytes
  double launch_overhead_s = 0;                 // time per back-to-back stream_pass of 1 KiB
  std::vector<MeasuredKernel> kernels;          // our kernels (kernels/cuda_ops.h): calibration_calls
  std::vector<MeasuredKernel> row_sweep;        // the row kernels at each of row_widths: row_kernel_calls
  std::vector<MeasuredKernel> attention_sweep;  // attention at each of attention_seqs: attention_calls
};

struct CudaCalibrateOptions {
  // Every (m, n, k) of these. 16384 covers the hidden and FFN sizes of the large models
  // (GPT-3's 12288 and 49152): with 8192 the largest, their GEMMs were extrapolated, 8.6%
  // slow on an H200 (docs/validation/gpu-h200.md).
  std::vector<std::int64_t> gemm_sizes{1024, 4096, 8192, 16384};
  std::vector<DType> dtypes{DType::Bf16, DType::Fp16, DType::Fp32};
  int repeats = 10;  // timed calls per figure, after one warm-up call
  // A figure whose `repeats` calls took less GPU time than this is timed again over as many
  // calls as fill it (at most 100000): a 1024^3 GEMM takes ~10 us, so ten of them were a
  // 0.1 ms window, within the clock's ramp and the event's resolution, and the 1024^3 points
  // varied 0.44-0.75x of the preset from run to run (docs/validation/gpu-h200.md). 0: never.
  double min_window_s = 5e-3;
  // The GEMM figures' share of calibrate's wall time: after each, memory passes run until its busy
  // time is this fraction of the whole (0.5: a gap as long as the figure). Back to back (1), the
  // sweep ran into the power cap within seconds, and every later shape was timed at the capped
  // clock: the GPT-3 layer's FFN GEMMs at 674 TFLOP/s, where validate's step ran them at 825, its
  // GEMMs interleaved with memory-bound work (run 26, docs/validation/gpu-h200.md). 1: no gaps.
  double gemm_duty = 0.5;
  std::size_t memory_bytes = 512 << 20;  // per buffer of the bandwidth pass
  std::size_t kernel_bytes = 256 << 20;  // the row kernels' rows x row floats
  std::int64_t row = 4096;               // the kernels' row length (a hidden size, a key count)
  // The row kernels again at each of these row lengths (kernel_bytes of rows each), for the
  // profile's per-width rates: hidden sizes and key counts from small models to GPT-3's 12288
  // and past it, where a row no longer fits in registers or shared memory. Empty: no sweep.
  std::vector<std::int64_t> row_widths{1024, 2048, 4096, 8192, 12288, 16384, 32768};
  // Cross-entropy alone again at these row lengths, in vocab_rows rows: its rows are a
  // vocabulary (GPT-3's 51200, Llama-3's 128256), past the widest hidden size above, and a step
  // has a micro-batch's tokens of them. Read off the 32768 point, the Llama-3 layer's loss was
  // predicted 27% slow (run 27, docs/validation/gpu-h200.md); in kernel_bytes, 131072 columns
  // are 512 rows, one block each, half of an H200's block slots (run 28). Empty: none.
  std::vector<std::int64_t> vocab_widths{65536, 131072};
  std::int64_t vocab_rows = 2048;
  kernels::AttentionShape attention{16, 2048, 2048, 128};  // batch x heads, seq_q, seq_kv, head_dim
  // Attention again at each of these sequence lengths (attention's batch x heads and head
  // dimension), causal and not, forward and backward: the profile's `attention:` points, since
  // its rate depends on the sequence. Timed over attention_repeats calls (a 16k sequence takes
  // seconds a call on our CUDA-core kernel). Empty: no sweep.
  std::vector<std::int64_t> attention_seqs{512, 1024, 2048, 4096, 8192, 16384};
  int attention_repeats = 2;
  // Our kernels as the cuda executor runs them for a 2-byte model: bf16 calls (false), or the
  // float32 ones (--kernels fp32).
  bool fp32_kernels = false;
  // GEMM shapes timed in bf16 besides the grid: the shapes the models run (calibrate passes
  // the preset models' layers, report/calibration.h's preset_gemm_shapes), so a run of one of
  // them is predicted from its own GEMMs' measured times.
  std::vector<GemmShape> model_gemms;
};

CudaMeasurements measure_cuda(GpuApi& api, Checker& check, int device, const CudaCalibrateOptions& options);

// The words every calibration buffer is filled with (repeated), fixed from run to run. On
// zeros or any constant the tensor cores draw less power and run faster than on real data
// (13% for an 8192^3 bf16 GEMM on an H200, device/METHOD.md), so the operands are random:
// each 16-bit word is an fp16 of exponent 14 (|x| in [0.5, 1)) with a random sign and
// mantissa, which read as bf16 is a normal number of magnitude 2^-15..2^-8, and two of which
// read as an fp32 are one too. Finite and normal in every width the GEMM grid reads.
std::vector<std::uint16_t> calibration_operands(std::size_t words);
// `bytes` of device memory at `dst` filled with those words (synchronous copies of a chunk of
// at most 16 MiB, repeated); a failed copy is `check`'s error naming `what`.
void copy_calibration_operands(GpuApi& api, Checker& check, void* dst, std::size_t bytes, const std::string& what);

}  // namespace meshsim::cuda
