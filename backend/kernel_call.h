// How a real backend runs a schedule's non-GEMM compute op: which kernels/ function,
// forward or backward, on what shape, and the float32 operands it reads and writes, laid
// out back to back in one region of the backend's workspace. The cpu backend calls the
// CPU references (run_kernel_call_cpu), the cuda backend their CUDA twins (GpuApi::kernel),
// so both run the same kernel on the same shape for every op.
//
//   KernelCall c = kernel_call(op.kernel, op.phase);   // ln1: LayerNorm forward, 1024 x 1024
//   std::vector<float> ws(c.floats());
//   run_kernel_call_cpu(c, ws.data());
//   c.operand(ws.data(), 0)                             // its first operand (x)
//
// Precision: an op of a 2-byte model (Kernel::dtype_bytes 2) runs bf16 kernels where the
// backend asks for them (kernel_call(k, phase, /*bf16=*/true): the cuda backend): every
// activation-shaped operand (x, y, dy, dx, gamma, beta, q, k, v, o, logits, ...) is bf16
// (kernels/bf16.h), while the row statistics (mean, rstd, stats, lse, max, loss), the
// parameter gradients the kernel accumulates (dgamma, dbeta), AdamW's operands (fp32 master
// weights, gradients and moments: the schedule's optimizer op is a 4-byte op) and the int64
// targets keep their width. The kernel widens what it reads and computes in float.
//
// Operands, in order (r = rows, c = cols, n = r * c; attention: q, k, v are [bh, seq, d]):
//   layernorm fwd  x n, gamma c, beta c, y n, mean r, rstd r
//   layernorm bwd  dy n, x n, gamma c, mean r, rstd r, dx n, dgamma c, dbeta c
//   rmsnorm fwd    x n, gamma c, y n, rstd r
//   rmsnorm bwd    dy n, x n, gamma c, rstd r, dx n, dgamma c
//   rope fwd       x n, cs (r / full) * c (float angle table), y n  (`full` = heads a token)
//   rope bwd       dy n, cs, dx n
//   layernorm2d fwd  x n, stats 2r, gamma c, beta c, y n, mean r, rstd r (stats, then apply;
//                    `full` = the whole row's length)
//   layernorm2d bwd  dy n, x n, gamma c, mean r, rstd r, dstats 2r, dx n, dgamma c, dbeta c
//   gelu fwd       x n, y n                 gelu bwd      dy n, x n, dx n
//   swiglu fwd     x 2n (gate | up per row), out n
//   swiglu bwd     dout n, x 2n, dx 2n
//   dropout fwd    x n, y n                 dropout bwd   dy n, dx n
//   dropout_add    x n, residual n, y n (y = dropout(x) + residual; its backward is dropout's)
//   softmax fwd    x n, y n                 softmax bwd   dy n, y n, dx n
//   cross_entropy fwd  logits n, max r, targets r (int64), stats 2r, loss r
//   cross_entropy bwd  logits n, max r, targets r (int64), stats 2r, dlogits n
//   lse_merge      o1 n, lse1 r, o2 n, lse2 r, o n, lse r
//   attention fwd  q, k, v, o, lse [bh, sq]
//   attention bwd  q, k, v, o, dout, lse, dq, dk, dv
//   adamw          p n, g n, m n, v n (rows 1, cols = parameters; p, m, v updated in place)
//   pass           in, out: half the op's bytes each (stream_pass: out = in / 2)
// The values do not matter for timing: zeros and seeded values alike give finite results
// (targets of 0 are valid class indices), and no kernel branches on them.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "schedule/ir.h"

namespace meshsim {

struct KernelCall {
  enum class Fn {
    Pass,
    LayerNormFwd,
    LayerNormBwd,
    LayerNorm2dFwd,
    LayerNorm2dBwd,
    GeluFwd,
    GeluBwd,
    SwigluFwd,
    SwigluBwd,
    DropoutFwd,
    DropoutBwd,
    DropoutAddFwd,
    SoftmaxFwd,
    SoftmaxBwd,
    CrossEntropyFwd,
    CrossEntropyBwd,
    LseMerge,
    AttentionFwd,
    AttentionBwd,
    AdamW,
    RmsNormFwd,
    RmsNormBwd,
    RopeFwd,
    RopeBwd,
  };
  Fn fn = Fn::Pass;
  std::int64_t rows = 0, cols = 0;  // row kernels; pass: cols = floats per operand
  std::int64_t full = 0;            // layernorm2d: the whole row's length (cols is this rank's part);
                                    // rope: heads per token (rows / full tokens)
  kernels::AttentionShape shape;    // attention
  bool causal = false;              // attention
  bool bf16 = false;                // activation-shaped operands in bf16 (see above)
  enum class Elem : std::uint8_t { F32, BF16, I64 };
  std::vector<Elem> elems;            // each operand's element type
  std::vector<std::int64_t> counts;   // each operand's elements
  std::vector<std::int64_t> offsets;  // offset of each operand in 4-byte words, then the total

  std::int64_t floats() const { return offsets.empty() ? 0 : offsets.back(); }  // 4-byte words
  int operands() const { return static_cast<int>(offsets.size()) - 1; }
  float* operand(float* ws, int j) const { return ws + offsets.at(static_cast<std::size_t>(j)); }
  kernels::bf16* bf16_operand(float* ws, int j) const { return reinterpret_cast<kernels::bf16*>(operand(ws, j)); }
  Elem elem(int j) const { return elems.at(static_cast<std::size_t>(j)); }
  // attention and softmax: 1 / sqrt(head_dim), 1 for softmax. Inline: the CUDA plugin uses it.
  double scale() const {
    if (fn == Fn::AttentionFwd || fn == Fn::AttentionBwd)
      return 1.0 / std::sqrt(static_cast<double>(std::max<std::int64_t>(shape.head_dim, 1)));
    return 1.0;
  }
  std::string text() const;  // "layernorm_fwd 1024x1024", "attention_bwd 16x512x512x64 causal bf16"
};

const char* to_string(KernelCall::Fn fn);  // "layernorm_fwd", ...

// The call for a compute op's kernel (not a GEMM) in `phase` (Recompute runs the forward).
// Attention without a shape (batch 0) and KernelFn::Pass run as a pass over the op's bytes.
// `bf16`: the backend runs bf16 kernels, so a 2-byte op's call is a bf16 call (a pass and
// a 4-byte op stay float32).
KernelCall kernel_call(const Kernel& k, Phase phase, bool bf16 = false);

// The operand holding a loss call's target ids (Elem::I64; cross-entropy forward and backward),
// else -1, and its bytes. Whoever times such a call on don't-care data (the cuda executor,
// calibrate) zeroes it first: a negative id marks an ignored row, whose logits the backward never
// reads, and don't-care words are negative wherever their top bit is set. That is the likely
// reason the loss's backward measured above the copy's rate on our byte count (run 28,
// docs/validation/gpu-h200.md; to be confirmed on the next GPU run). In training every row has a
// target.
int targets_operand(const KernelCall& c);
std::size_t targets_bytes(const KernelCall& c);

// The schedule as the real backends run it, for validate's prediction: every non-GEMM
// compute op runs in its call's precision (dtype_bytes 2 for a bf16 call, else 4: attention
// is timed against that width's peak) and moves what its call moves (kernel_call_bytes: the
// measure calibrate's memory efficiencies are taken against). `bf16` as for kernel_call:
// the cpu backend runs float32 (false), the cuda backend bf16 (true). An op that runs as the
// streaming pass (KernelCall::Fn::Pass) becomes KernelKind::Memcpy, so it is predicted at the
// rate calibrate measures for that pass. GEMMs (run in the model's dtype) and every FLOP count
// are unchanged.
Schedule as_run_by_our_kernels(Schedule s, bool bf16 = false);

// A call built directly (calibrate): fn on rows x cols (`full` as KernelCall::full), or attention
// of `shape`.
KernelCall make_kernel_call(KernelCall::Fn fn, std::int64_t rows, std::int64_t cols, bool bf16 = false,
                            std::int64_t full = 0);
KernelCall make_attention_call(bool backward, const kernels::AttentionShape& shape, bool causal, bool bf16 = false);
// The same call with float32 operands (the layout the CPU references run a bf16 call on).
KernelCall as_fp32(const KernelCall& c);

// Bytes the call reads and writes: every operand once (what calibrate turns into a
// bandwidth; an in-place accumulate counts once), except AdamW's p, m and v, which it
// reads and writes whole: 28 bytes per parameter, as the schedule counts the step.
double kernel_call_bytes(const KernelCall& c);

// The CPU reference of the call, on `ws` of c.floats() words. A bf16 call widens its bf16
// operands into as_fp32(c)'s layout, runs the float32 reference there and narrows them back
// (round to nearest even): what a bf16 kernel computing in float writes, up to the order of
// its sums.
void run_kernel_call_cpu(const KernelCall& c, float* ws);

// What calibrate times of our kernels, tagged with the compute model's kernel kind they
// stand for: LayerNorm, RMSNorm (norm); GeLU, SwiGLU, dropout + residual, dropout, RoPE (elementwise);
// softmax, cross-entropy (softmax), each forward and backward on `rows` x `row`; attention
// forward and backward of `attention` (causal), with FLOPs counted as the schedule counts
// them (the backward twice the forward); an AdamW step over rows x row parameters (optimizer).
struct CalibrationCall {
  KernelKind kind = KernelKind::Elementwise;
  KernelCall call;
  double flops = 0;              // attention only
  KernelFn fn = KernelFn::Pass;  // a row kernel's function (Pass: attention, AdamW)
  bool backward = false;         // ... and its pass, as kernel_call picks it by the op's phase
};
std::vector<CalibrationCall> calibration_calls(std::int64_t rows, std::int64_t row,
                                               const kernels::AttentionShape& attention, bool bf16 = false);
// The row kernels alone (LayerNorm, RMSNorm, GeLU, SwiGLU, dropout + residual, softmax,
// cross-entropy, dropout, forward and backward), each on rows of `width` over about `floats` elements: calibrate's
// sweep over widths, since a row kernel's rate depends on its row length (rows held in
// registers or shared memory, or read twice; docs/validation/gpu-h100.md, run 20).
std::vector<CalibrationCall> row_kernel_calls(std::int64_t floats, std::int64_t width, bool bf16 = false);

// Attention forward and backward, causal and not, at each sequence length of `seqs` (square:
// seq_q = seq_kv) on batch_heads x head_dim, FLOPs as the schedule counts them (backward
// twice the forward): calibrate's sweep, the profile's `attention:` points.
std::vector<CalibrationCall> attention_calls(std::int64_t batch_heads, std::int64_t head_dim,
                                             const std::vector<std::int64_t>& seqs, bool bf16 = false);

// A timed calibration call, and what calibrate writes from a set of them: per kernel kind
// the bytes moved over the time taken (the memory efficiency is that over the measured
// memory bandwidth), and attention's FLOP/s.
struct MeasuredKernel {
  CalibrationCall what;
  double seconds = 0;
  double bytes_per_s() const { return kernel_call_bytes(what.call) / seconds; }
};
struct KernelRates {
  std::array<std::optional<double>, kKernelKinds> bytes_per_s{};
  double attention_flops_per_s = 0;  // 0: not measured
};
KernelRates kernel_rates(const std::vector<MeasuredKernel>& measured);

inline constexpr float kDropoutP = 0.1f;  // the rate real runs use (the time does not depend on it)

}  // namespace meshsim
