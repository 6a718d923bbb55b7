// kernel_call: which kernels/ function a compute op runs, and its operands (kernel_call.h).
#include "backend/kernel_call.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "core/enum_names.h"
#include "core/error.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/norm.h"
#include "kernels/optimizer.h"
#include "kernels/reduce.h"
#include "kernels/rope.h"
#include "kernels/stream_pass.h"
#include "kernels/vocab.h"

namespace meshsim {
namespace {

using Fn = KernelCall::Fn;

using Elem = KernelCall::Elem;

// One operand: its elements and their type.
struct Operand {
  std::int64_t count;
  Elem elem;
};

std::int64_t words(const Operand& o) {
  const std::int64_t n = std::max<std::int64_t>(o.count, 1);
  switch (o.elem) {
    case Elem::BF16:
      return (n + 1) / 2;
    case Elem::I64:
      return 2 * n;
    case Elem::F32:
      break;
  }
  return n;
}

// Operands start on 16-byte boundaries (the CUDA kernels' vector paths; int64 targets).
void lay_out(KernelCall& c, std::initializer_list<Operand> ops) {
  c.offsets.clear();
  c.elems.clear();
  c.counts.clear();
  std::int64_t at = 0;
  for (const Operand& o : ops) {
    c.offsets.push_back(at);
    c.elems.push_back(o.elem);
    c.counts.push_back(o.count);
    at += (words(o) + 3) / 4 * 4;
  }
  c.offsets.push_back(at);
}

void lay_out_rows(KernelCall& c) {
  const std::int64_t r = c.rows, n = c.rows * c.cols, h = c.cols;
  const Elem a = c.bf16 ? Elem::BF16 : Elem::F32;  // activation-shaped operands
  const Elem f = Elem::F32;
  switch (c.fn) {
    case Fn::Pass:
      lay_out(c, {{h, f}, {h, f}});
      return;
    case Fn::LayerNormFwd:
      lay_out(c, {{n, a}, {h, a}, {h, a}, {n, a}, {r, f}, {r, f}});
      return;
    case Fn::LayerNormBwd:
      lay_out(c, {{n, a}, {n, a}, {h, a}, {r, f}, {r, f}, {n, a}, {h, f}, {h, f}});
      return;
    case Fn::LayerNorm2dFwd:
      lay_out(c, {{n, a}, {2 * r, f}, {h, a}, {h, a}, {n, a}, {r, f}, {r, f}});
      return;
    case Fn::RmsNormFwd:
      lay_out(c, {{n, a}, {h, a}, {n, a}, {r, f}});
      return;
    case Fn::RmsNormBwd:
      lay_out(c, {{n, a}, {n, a}, {h, a}, {r, f}, {n, a}, {h, f}});
      return;
    case Fn::RopeFwd:
    case Fn::RopeBwd:
      lay_out(c, {{n, a}, {r / std::max<std::int64_t>(c.full, 1) * h, f}, {n, a}});
      return;
    case Fn::LayerNorm2dBwd:
      lay_out(c, {{n, a}, {n, a}, {h, a}, {r, f}, {r, f}, {2 * r, f}, {n, a}, {h, f}, {h, f}});
      return;
    case Fn::GeluFwd:
    case Fn::DropoutFwd:
    case Fn::DropoutBwd:
    case Fn::SoftmaxFwd:
      lay_out(c, {{n, a}, {n, a}});
      return;
    case Fn::GeluBwd:
    case Fn::SoftmaxBwd:
    case Fn::DropoutAddFwd:
      lay_out(c, {{n, a}, {n, a}, {n, a}});
      return;
    case Fn::SwigluFwd:
      lay_out(c, {{2 * n, a}, {n, a}});
      return;
    case Fn::SwigluBwd:
      lay_out(c, {{n, a}, {2 * n, a}, {2 * n, a}});
      return;
    case Fn::CrossEntropyFwd:
      lay_out(c, {{n, a}, {r, f}, {r, Elem::I64}, {2 * r, f}, {r, f}});
      return;
    case Fn::CrossEntropyBwd:
      lay_out(c, {{n, a}, {r, f}, {r, Elem::I64}, {2 * r, f}, {n, a}});
      return;
    case Fn::LseMerge:
      lay_out(c, {{n, a}, {r, f}, {n, a}, {r, f}, {n, a}, {r, f}});
      return;
    case Fn::AdamW:
      lay_out(c, {{n, f}, {n, f}, {n, f}, {n, f}});
      return;
    case Fn::AttentionFwd:
    case Fn::AttentionBwd:
      break;
  }
  MESHSIM_ASSERT(false);
}

}  // namespace

constexpr EnumName<KernelCall::Fn> kFnNames[] = {{Fn::Pass, "pass"},
                                                 {Fn::LayerNormFwd, "layernorm_fwd"},
                                                 {Fn::LayerNormBwd, "layernorm_bwd"},
                                                 {Fn::LayerNorm2dFwd, "layernorm2d_fwd"},
                                                 {Fn::LayerNorm2dBwd, "layernorm2d_bwd"},
                                                 {Fn::GeluFwd, "gelu_fwd"},
                                                 {Fn::GeluBwd, "gelu_bwd"},
                                                 {Fn::SwigluFwd, "swiglu_fwd"},
                                                 {Fn::SwigluBwd, "swiglu_bwd"},
                                                 {Fn::DropoutFwd, "dropout_fwd"},
                                                 {Fn::DropoutBwd, "dropout_bwd"},
                                                 {Fn::DropoutAddFwd, "dropout_add_fwd"},
                                                 {Fn::SoftmaxFwd, "softmax_fwd"},
                                                 {Fn::SoftmaxBwd, "softmax_bwd"},
                                                 {Fn::CrossEntropyFwd, "cross_entropy_fwd"},
                                                 {Fn::CrossEntropyBwd, "cross_entropy_bwd"},
                                                 {Fn::LseMerge, "lse_merge"},
                                                 {Fn::AttentionFwd, "attention_fwd"},
                                                 {Fn::AttentionBwd, "attention_bwd"},
                                                 {Fn::AdamW, "adamw"},
                                                 {Fn::RmsNormFwd, "rmsnorm_fwd"},
                                                 {Fn::RmsNormBwd, "rmsnorm_bwd"},
                                                 {Fn::RopeFwd, "rope_fwd"},
                                                 {Fn::RopeBwd, "rope_bwd"}};
const char* to_string(KernelCall::Fn fn) { return enum_name(kFnNames, fn); }

std::string KernelCall::text() const {
  const char* width = bf16 ? " bf16" : "";
  if (fn == Fn::AttentionFwd || fn == Fn::AttentionBwd)
    return fmt::format("{} {}x{}x{}x{}{}{}", to_string(fn), shape.batch_heads, shape.seq_q, shape.seq_kv,
                       shape.head_dim, causal ? " causal" : "", width);
  if (fn == Fn::Pass) return fmt::format("pass {}", cols);
  if (fn == Fn::LayerNorm2dFwd || fn == Fn::LayerNorm2dBwd)
    return fmt::format("{} {}x{}/{}{}", to_string(fn), rows, cols, full, width);
  if (fn == Fn::RopeFwd || fn == Fn::RopeBwd)
    return fmt::format("{} {}x{}x{}{}", to_string(fn), rows / std::max<std::int64_t>(full, 1), full, cols, width);
  return fmt::format("{} {}x{}{}", to_string(fn), rows, cols, width);
}

KernelCall make_kernel_call(KernelCall::Fn fn, std::int64_t rows, std::int64_t cols, bool bf16, std::int64_t full) {
  MESHSIM_ASSERT(fn != Fn::AttentionFwd && fn != Fn::AttentionBwd && rows > 0 && cols > 0);
  KernelCall c;
  c.fn = fn;
  c.rows = rows;
  c.cols = cols;
  c.full = full;
  // A pass moves bytes, and AdamW's operands are float32 whatever the model's width.
  c.bf16 = bf16 && fn != Fn::Pass && fn != Fn::AdamW;
  lay_out_rows(c);
  return c;
}

KernelCall make_attention_call(bool backward, const kernels::AttentionShape& shape, bool causal, bool bf16) {
  MESHSIM_ASSERT(shape.batch_heads > 0 && shape.seq_q > 0 && shape.seq_kv > 0 && shape.head_dim > 0);
  KernelCall c;
  c.fn = backward ? Fn::AttentionBwd : Fn::AttentionFwd;
  c.shape = shape;
  c.causal = causal;
  c.bf16 = bf16;
  const Elem a = bf16 ? Elem::BF16 : Elem::F32;
  const Operand q{shape.batch_heads * shape.seq_q * shape.head_dim, a},
      kv{shape.batch_heads * shape.seq_kv * shape.head_dim, a}, lse{shape.batch_heads * shape.seq_q, Elem::F32};
  if (backward)
    lay_out(c, {q, kv, kv, q, q, lse, q, kv, kv});
  else
    lay_out(c, {q, kv, kv, q, lse});
  return c;
}

KernelCall as_fp32(const KernelCall& c) {
  if (c.fn == Fn::AttentionFwd || c.fn == Fn::AttentionBwd)
    return make_attention_call(c.fn == Fn::AttentionBwd, c.shape, c.causal, false);
  return make_kernel_call(c.fn, c.rows, c.cols, false, c.full);
}

KernelCall kernel_call(const Kernel& k, Phase phase, bool bf16) {
  MESHSIM_ASSERT(k.kind != KernelKind::Gemm);
  const bool bwd = phase == Phase::Backward;
  bf16 = bf16 && k.dtype_bytes == 2;
  if (k.kind == KernelKind::Attention && k.batch > 0 && k.m > 0 && k.n > 0 && k.k > 0)
    return make_attention_call(bwd, {k.batch, k.m, k.n, k.k}, k.causal, bf16);
  auto pick = [&](Fn f, Fn b) { return make_kernel_call(bwd ? b : f, k.m, k.n, bf16); };
  if (k.m > 0 && k.n > 0) switch (k.fn) {
      case KernelFn::LayerNorm:
        return pick(Fn::LayerNormFwd, Fn::LayerNormBwd);
      case KernelFn::RmsNorm:
        return pick(Fn::RmsNormFwd, Fn::RmsNormBwd);
      case KernelFn::Rope:
        if (k.k > 0 && k.m % k.k == 0 && k.n % 2 == 0)
          return make_kernel_call(bwd ? Fn::RopeBwd : Fn::RopeFwd, k.m, k.n, bf16, k.k);
        break;
      case KernelFn::Gelu:
        return pick(Fn::GeluFwd, Fn::GeluBwd);
      case KernelFn::SwiGLU:
        return pick(Fn::SwigluFwd, Fn::SwigluBwd);
      case KernelFn::Dropout:
        return pick(Fn::DropoutFwd, Fn::DropoutBwd);
      case KernelFn::DropoutAdd:
        return pick(Fn::DropoutAddFwd, Fn::DropoutBwd);
      case KernelFn::Softmax:
        return pick(Fn::SoftmaxFwd, Fn::SoftmaxBwd);
      case KernelFn::CrossEntropy:
        return pick(Fn::CrossEntropyFwd, Fn::CrossEntropyBwd);
      case KernelFn::LseMerge:
        return make_kernel_call(Fn::LseMerge, k.m, k.n, bf16);
      case KernelFn::AdamW:
        return make_kernel_call(Fn::AdamW, k.m, k.n);
      case KernelFn::LayerNorm2d: {
        KernelCall c = pick(Fn::LayerNorm2dFwd, Fn::LayerNorm2dBwd);
        c.full = std::max(k.k, k.n);
        return c;
      }
      case KernelFn::Pass:
        break;
    }
  // A pass reading half the op's bytes and writing as many (at least one float each).
  return make_kernel_call(Fn::Pass, 1, std::max<std::int64_t>(static_cast<std::int64_t>(k.bytes / 8), 1));
}

Schedule as_run_by_our_kernels(Schedule s, bool bf16) {
  for (Role& role : s.roles)
    for (Op& op : role.ops)
      if (op.kind == OpKind::Compute && op.kernel.kind != KernelKind::Gemm) {
        const KernelCall c = kernel_call(op.kernel, op.phase, bf16);
        op.kernel.bytes = kernel_call_bytes(c);
        op.kernel.dtype_bytes = c.bf16 ? 2 : 4;
        // An op with no kernel of its own runs as the streaming pass, which calibrate times as the
        // memory pass: predict it at the copy's rate, not at its kind's (an elementwise or
        // optimizer figure from other kernels). The optimizer's fp32 -> bf16 parameter copy ran at
        // the copy's rate on an H200 and was predicted 53% slow (run 26, docs/validation/gpu-h200.md).
        if (c.fn == KernelCall::Fn::Pass) op.kernel.kind = KernelKind::Memcpy;
      }
  return s;
}

int targets_operand(const KernelCall& c) { return c.fn == Fn::CrossEntropyFwd || c.fn == Fn::CrossEntropyBwd ? 2 : -1; }

std::size_t targets_bytes(const KernelCall& c) {
  const int j = targets_operand(c);
  return j < 0 ? 0 : static_cast<std::size_t>(c.counts.at(static_cast<std::size_t>(j))) * sizeof(std::int64_t);
}

double kernel_call_bytes(const KernelCall& c) {
  double b = 0;
  for (int j = 0; j < c.operands(); ++j)
    b += static_cast<double>(c.offsets[static_cast<std::size_t>(j + 1)] - c.offsets[static_cast<std::size_t>(j)]);
  if (c.fn == Fn::AdamW) b += 3.0 * static_cast<double>(c.rows * c.cols);  // p, m, v written back
  return 4 * b;
}

namespace {
std::vector<CalibrationCall> row_calls(std::int64_t rows, std::int64_t row, bool bf16) {
  std::vector<CalibrationCall> v;
  auto add = [&](KernelKind kind, KernelFn fn, Fn f, Fn b) {
    // Each at the width the step runs it: a 2-byte model's row kernels in bf16, but its loss on
    // float32 logits (schedule/plan.cpp), so cross-entropy stays float32. Timed in bf16, its
    // points were applied to the float32 calls the step makes, at twice the bytes: predicted
    // 2.8x slow on an H200 (run 26, docs/validation/gpu-h200.md).
    const bool w = bf16 && fn != KernelFn::CrossEntropy;
    v.push_back({kind, make_kernel_call(f, rows, row, w), 0, fn, false});
    v.push_back({kind, make_kernel_call(b, rows, row, w), 0, fn, true});
  };
  add(KernelKind::Norm, KernelFn::LayerNorm, Fn::LayerNormFwd, Fn::LayerNormBwd);
  add(KernelKind::Norm, KernelFn::RmsNorm, Fn::RmsNormFwd, Fn::RmsNormBwd);
  add(KernelKind::Elementwise, KernelFn::Gelu, Fn::GeluFwd, Fn::GeluBwd);
  add(KernelKind::Elementwise, KernelFn::SwiGLU, Fn::SwigluFwd, Fn::SwigluBwd);
  add(KernelKind::Elementwise, KernelFn::DropoutAdd, Fn::DropoutAddFwd, Fn::DropoutBwd);
  add(KernelKind::Softmax, KernelFn::Softmax, Fn::SoftmaxFwd, Fn::SoftmaxBwd);
  add(KernelKind::Softmax, KernelFn::CrossEntropy, Fn::CrossEntropyFwd, Fn::CrossEntropyBwd);
  return v;
}
}  // namespace

std::vector<CalibrationCall> row_kernel_calls(std::int64_t floats, std::int64_t width, bool bf16) {
  MESHSIM_ASSERT(width > 0);
  const std::int64_t rows = std::max<std::int64_t>(floats / width, 1);
  std::vector<CalibrationCall> v = row_calls(rows, width, bf16);
  // Dropout alone (attention's probabilities), which the kind's figure above leaves out.
  v.push_back(
      {KernelKind::Elementwise, make_kernel_call(Fn::DropoutFwd, rows, width, bf16), 0, KernelFn::Dropout, false});
  v.push_back(
      {KernelKind::Elementwise, make_kernel_call(Fn::DropoutBwd, rows, width, bf16), 0, KernelFn::Dropout, true});
  return v;
}

std::vector<CalibrationCall> calibration_calls(std::int64_t rows, std::int64_t row,
                                               const kernels::AttentionShape& attention, bool bf16) {
  std::vector<CalibrationCall> v = row_calls(rows, row, bf16);
  // RoPE on the same elements as the queries and keys of 128-wide heads, 8 a token (its rows
  // are a head, not `row`; is_row_fn: no row sweep, so it counts toward its kind's figure).
  if (const std::int64_t heads = 8, d = 128, hr = rows * row / d / heads * heads; hr > 0)
    for (const bool backward : {false, true})
      v.push_back({KernelKind::Elementwise, make_kernel_call(backward ? Fn::RopeBwd : Fn::RopeFwd, hr, d, bf16, heads),
                   0, KernelFn::Rope, backward});
  const double fwd =
      Kernel::attention(attention.batch_heads, attention.seq_q, attention.seq_kv, attention.head_dim, 4, true).flops;
  v.push_back({KernelKind::Attention, make_attention_call(false, attention, true, bf16), fwd});
  v.push_back({KernelKind::Attention, make_attention_call(true, attention, true, bf16), 2 * fwd});
  v.push_back({KernelKind::Optimizer, make_kernel_call(Fn::AdamW, 1, rows * row), 0});
  return v;
}

std::vector<CalibrationCall> attention_calls(std::int64_t batch_heads, std::int64_t head_dim,
                                             const std::vector<std::int64_t>& seqs, bool bf16) {
  std::vector<CalibrationCall> v;
  for (const std::int64_t s : seqs)
    for (const bool causal : {true, false}) {
      const kernels::AttentionShape shape{batch_heads, s, s, head_dim};
      const double fwd = Kernel::attention(batch_heads, s, s, head_dim, 2, causal).flops;
      v.push_back({KernelKind::Attention, make_attention_call(false, shape, causal, bf16), fwd});
      v.push_back(
          {KernelKind::Attention, make_attention_call(true, shape, causal, bf16), 2 * fwd, KernelFn::Pass, true});
    }
  return v;
}

KernelRates kernel_rates(const std::vector<MeasuredKernel>& measured) {
  std::array<double, kKernelKinds> bytes{}, secs{};
  double flops = 0, attention_secs = 0;
  for (const MeasuredKernel& m : measured) {
    MESHSIM_ASSERT(m.seconds > 0);
    if (m.what.kind == KernelKind::Attention) {
      flops += m.what.flops;
      attention_secs += m.seconds;
      continue;
    }
    bytes[static_cast<std::size_t>(m.what.kind)] += kernel_call_bytes(m.what.call);
    secs[static_cast<std::size_t>(m.what.kind)] += m.seconds;
  }
  KernelRates r;
  for (std::size_t k = 0; k < bytes.size(); ++k)
    if (secs[k] > 0) r.bytes_per_s[k] = bytes[k] / secs[k];
  if (attention_secs > 0) r.attention_flops_per_s = flops / attention_secs;
  return r;
}

namespace {
// A bf16 call on the CPU: its operands widened into the float32 layout, the float32
// reference run there, and every operand narrowed (bf16) or copied (float, int64) back. An
// operand the kernel only reads comes back unchanged: widening and narrowing a bf16 is exact.
void run_bf16_call_cpu(const KernelCall& c, float* ws) {
  const KernelCall f = as_fp32(c);
  std::vector<float> wide(static_cast<std::size_t>(f.floats()));
  auto each = [&](bool in) {
    for (int j = 0; j < c.operands(); ++j) {
      const auto n = static_cast<std::size_t>(c.counts[static_cast<std::size_t>(j)]);
      float* w = f.operand(wide.data(), j);
      if (c.elem(j) == Elem::BF16) {
        if (in)
          kernels::widen(c.bf16_operand(ws, j), w, n);
        else
          kernels::narrow(w, c.bf16_operand(ws, j), n);
        continue;
      }
      const std::size_t bytes = n * (c.elem(j) == Elem::I64 ? 8 : 4);
      if (in)
        std::memcpy(w, c.operand(ws, j), bytes);
      else
        std::memcpy(c.operand(ws, j), w, bytes);
    }
  };
  each(true);
  run_kernel_call_cpu(f, wide.data());
  each(false);
}
}  // namespace

void run_kernel_call_cpu(const KernelCall& c, float* ws) {
  if (c.bf16) {
    run_bf16_call_cpu(c, ws);
    return;
  }
  auto op = [&](int j) { return c.operand(ws, j); };
  auto ids = [&](int j) { return reinterpret_cast<const std::int64_t*>(op(j)); };
  const std::int64_t r = c.rows, h = c.cols;
  const auto n = static_cast<std::size_t>(r * h);
  const std::uint64_t seed = 1234;
  namespace K = kernels;
  switch (c.fn) {
    case Fn::Pass:
      K::stream_pass_cpu(op(1), op(0), static_cast<std::size_t>(h), 0.5f);
      return;
    case Fn::LayerNormFwd:
      K::layernorm_forward_cpu(op(0), op(1), op(2), op(3), op(4), op(5), r, h, 1e-5f);
      return;
    case Fn::LayerNormBwd:
      K::layernorm_backward_cpu(op(0), op(1), op(2), op(3), op(4), op(5), op(6), op(7), r, h);
      return;
    case Fn::RmsNormFwd:
      K::rmsnorm_forward_cpu(op(0), op(1), op(2), op(3), r, h, 1e-5f);
      return;
    case Fn::RmsNormBwd:
      K::rmsnorm_backward_cpu(op(0), op(1), op(2), op(3), op(4), op(5), r, h);
      return;
    case Fn::RopeFwd:
      K::rope_forward_cpu(op(0), op(1), op(2), r, c.full, h);
      return;
    case Fn::RopeBwd:
      K::rope_backward_cpu(op(0), op(1), op(2), r, c.full, h);
      return;
    case Fn::LayerNorm2dFwd:
      K::layernorm2d_stats_cpu(op(0), op(1), r, h);
      K::layernorm2d_apply_cpu(op(0), op(1), op(2), op(3), op(4), op(5), op(6), r, h, c.full, 1e-5f);
      return;
    case Fn::LayerNorm2dBwd:
      K::layernorm2d_backward_stats_cpu(op(0), op(1), op(2), op(3), op(4), op(5), r, h);
      K::layernorm2d_backward_apply_cpu(op(0), op(1), op(2), op(3), op(4), op(5), op(6), op(7), op(8), r, h, c.full);
      return;
    case Fn::GeluFwd:
      K::gelu_forward_cpu(op(0), op(1), n);
      return;
    case Fn::GeluBwd:
      K::gelu_backward_cpu(op(0), op(1), op(2), n);
      return;
    case Fn::SwigluFwd:
      K::swiglu_forward_cpu(op(0), op(0) + h, 2 * h, op(1), r, h);
      return;
    case Fn::SwigluBwd:
      K::swiglu_backward_cpu(op(0), op(1), op(1) + h, 2 * h, op(2), op(2) + h, r, h);
      return;
    case Fn::DropoutFwd:
      K::dropout_forward_cpu(op(0), op(1), n, kDropoutP, seed, 0);
      return;
    case Fn::DropoutBwd:
      K::dropout_backward_cpu(op(0), op(1), n, kDropoutP, seed, 0);
      return;
    case Fn::DropoutAddFwd:
      K::dropout_forward_cpu(op(0), op(2), n, kDropoutP, seed, 0);
      K::reduce_sum_cpu(op(2), op(1), n);
      return;
    case Fn::SoftmaxFwd:
      K::softmax_forward_cpu(op(0), op(1), 1, r, h, 1.0f, {});
      return;
    case Fn::SoftmaxBwd:
      K::softmax_backward_cpu(op(0), op(1), op(2), 1, r, h, 1.0f);
      return;
    case Fn::CrossEntropyFwd:
      K::cross_entropy_local_max_cpu(op(0), op(1), r, h);
      K::cross_entropy_local_stats_cpu(op(0), op(1), ids(2), op(3), r, h, 0);
      K::cross_entropy_loss_cpu(op(1), op(3), ids(2), op(4), r);
      return;
    case Fn::CrossEntropyBwd:
      K::cross_entropy_backward_cpu(op(0), op(1), op(3), ids(2), 1.0f / static_cast<float>(r), op(4), r, h, 0);
      return;
    case Fn::LseMerge:
      K::attention_merge_cpu(op(0), op(1), op(2), op(3), op(4), op(5), r, h);
      return;
    case Fn::AttentionFwd:
      K::attention_forward_cpu(op(0), op(1), op(2), op(3), op(4), c.shape, static_cast<float>(c.scale()),
                               {c.causal, 0, 0});
      return;
    case Fn::AttentionBwd:
      K::attention_backward_cpu(op(0), op(1), op(2), op(3), op(4), op(5), op(6), op(7), op(8), c.shape,
                                static_cast<float>(c.scale()), {c.causal, 0, 0});
      return;
    case Fn::AdamW:
      K::adamw_step_cpu(op(0), op(1), op(2), op(3), n, {}, 1);
      return;
  }
}

}  // namespace meshsim
