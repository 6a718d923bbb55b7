// kernel_call: the function and operands a real backend runs for a compute op, checked
// against hand-counted layouts, and the CPU run against independent formulas (LayerNorm
// rows normalised, GeLU's tanh form, softmax rows summing to one, attention of one key,
// AdamW's first step).
#include "backend/kernel_call.h"
#include "kernels/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "kernels/optimizer.h"

namespace meshsim {
namespace {

using Fn = KernelCall::Fn;

std::int64_t sizes(const KernelCall& c, int j) {
  return c.offsets[static_cast<std::size_t>(j + 1)] - c.offsets[static_cast<std::size_t>(j)];
}

TEST(KernelCall, OperandsAreLaidOutBackToBackOnSixteenByteBoundaries) {
  const KernelCall ln = make_kernel_call(Fn::LayerNormFwd, 3, 6);  // x 18, gamma 6, beta 6, y 18, mean 3, rstd 3
  ASSERT_EQ(ln.operands(), 6);
  const std::int64_t want[] = {20, 8, 8, 20, 4, 4};  // rounded up to 4 floats
  for (int j = 0; j < 6; ++j) EXPECT_EQ(sizes(ln, j), want[j]) << j;
  EXPECT_EQ(ln.floats(), 64);
  EXPECT_DOUBLE_EQ(kernel_call_bytes(ln), 64.0 * 4);
  for (std::int64_t o : ln.offsets) EXPECT_EQ(o % 4, 0);

  const KernelCall a = make_attention_call(true, {2, 8, 16, 4}, true);  // q 64, kv 128, lse 16
  ASSERT_EQ(a.operands(), 9);
  EXPECT_EQ(a.floats(), 64 + 128 + 128 + 64 + 64 + 16 + 64 + 128 + 128);
  EXPECT_DOUBLE_EQ(a.scale(), 0.5);
  EXPECT_EQ(a.text(), "attention_bwd 2x8x16x4 causal");
}

TEST(KernelCall, OpsMapToTheirKernelByPhase) {
  const Kernel ln = Kernel::rowwise(KernelKind::Norm, KernelFn::LayerNorm, 128, 64, 1, 1, 2);
  EXPECT_EQ(kernel_call(ln, Phase::Forward).fn, Fn::LayerNormFwd);
  EXPECT_EQ(kernel_call(ln, Phase::Recompute).fn, Fn::LayerNormFwd);
  EXPECT_EQ(kernel_call(ln, Phase::Backward).fn, Fn::LayerNormBwd);
  EXPECT_EQ(kernel_call(ln, Phase::Backward).text(), "layernorm_bwd 128x64");
  const Kernel drop = Kernel::rowwise(KernelKind::Elementwise, KernelFn::DropoutAdd, 4, 8, 1, 1, 2);
  EXPECT_EQ(kernel_call(drop, Phase::Forward).fn, Fn::DropoutAddFwd);
  EXPECT_EQ(kernel_call(drop, Phase::Backward).fn, Fn::DropoutBwd);  // the residual's gradient is dy itself
  const Kernel att = Kernel::attention(16, 512, 512, 64, 2, true);
  const KernelCall ac = kernel_call(att, Phase::Backward);
  EXPECT_EQ(ac.fn, Fn::AttentionBwd);
  EXPECT_EQ(ac.shape.batch_heads, 16);
  EXPECT_TRUE(ac.causal);
  // No function of its own: a pass reading half the bytes and writing half.
  const KernelCall copy = kernel_call(Kernel::elementwise(KernelKind::Memcpy, 0, 8000, 4), Phase::Forward);
  EXPECT_EQ(copy.fn, Fn::Pass);
  EXPECT_EQ(copy.text(), "pass 1000");
  EXPECT_DOUBLE_EQ(kernel_call_bytes(copy), 8000);
  // The optimizer step: AdamW over its parameters, p, m and v read and written, g read: the
  // 28 bytes per parameter the schedule counts.
  const KernelCall adam =
      kernel_call(Kernel::rowwise(KernelKind::Optimizer, KernelFn::AdamW, 1, 1000, 12e3, 28e3, 4), Phase::Optimizer);
  EXPECT_EQ(adam.fn, Fn::AdamW);
  EXPECT_EQ(adam.text(), "adamw 1x1000");
  EXPECT_EQ(adam.floats(), 4000);
  EXPECT_DOUBLE_EQ(kernel_call_bytes(adam), 28e3);
}

TEST(KernelCall, RatesPoolBytesAndTimePerKindAndAttentionFlops) {
  const std::vector<CalibrationCall> calls = calibration_calls(4, 8, {1, 16, 16, 8});
  // 7 row kernels forward and backward (no RoPE: 32 elements make no 128-wide head), attention
  // forward and backward, AdamW.
  ASSERT_EQ(calls.size(), 17u);
  std::vector<MeasuredKernel> m;
  for (std::size_t i = 0; i < calls.size(); ++i) m.push_back({calls[i], 1e-3 * static_cast<double>(i + 1)});
  const KernelRates r = kernel_rates(m);
  // Norm: LayerNorm forward (1 ms) and backward (2 ms), RMSNorm forward (3 ms) and backward (4 ms).
  double norm_bytes = 0;
  for (int i = 0; i < 4; ++i) norm_bytes += kernel_call_bytes(calls[static_cast<std::size_t>(i)].call);
  EXPECT_EQ(calls[0].call.fn, Fn::LayerNormFwd);
  EXPECT_EQ(calls[3].call.fn, Fn::RmsNormBwd);
  EXPECT_DOUBLE_EQ(*r.bytes_per_s[static_cast<std::size_t>(KernelKind::Norm)], norm_bytes / 10e-3);
  // Optimizer: the AdamW step over 4 x 8 parameters (17 ms), 28 bytes each.
  EXPECT_EQ(calls[16].call.fn, Fn::AdamW);
  EXPECT_DOUBLE_EQ(*r.bytes_per_s[static_cast<std::size_t>(KernelKind::Optimizer)], 28.0 * 32 / 17e-3);
  EXPECT_FALSE(r.bytes_per_s[static_cast<std::size_t>(KernelKind::Memcpy)].has_value());
  // Attention: causal forward 2 x 16 x 16 x 8 FLOPs (15 ms), backward twice that (16 ms).
  EXPECT_DOUBLE_EQ(r.attention_flops_per_s, 3 * 2.0 * 16 * 16 * 8 / 31e-3);
}

TEST(KernelCall, ValidatePredictsTheBytesOurKernelsMove) {
  Schedule s;
  s.roles.emplace_back();
  Op ln;
  ln.kind = OpKind::Compute;
  ln.phase = Phase::Backward;
  ln.kernel = Kernel::rowwise(KernelKind::Norm, KernelFn::LayerNorm, 4, 8, 320, 4 * 2 * 32, 2);  // bf16 as planned
  Op g = ln;
  g.kernel = Kernel::gemm(8, 8, 8, 2);
  s.roles[0].ops = {ln, g};
  const Schedule r = as_run_by_our_kernels(s);
  // dy 32, x 32, gamma 8, mean 4, rstd 4, dx 32, dgamma 8, dbeta 8 floats.
  EXPECT_DOUBLE_EQ(r.roles[0].ops[0].kernel.bytes, (32 + 32 + 8 + 4 + 4 + 32 + 8 + 8) * 4.0);
  EXPECT_EQ(r.roles[0].ops[0].kernel.dtype_bytes, 4);
  EXPECT_DOUBLE_EQ(r.roles[0].ops[0].kernel.flops, 320);
  EXPECT_DOUBLE_EQ(r.roles[0].ops[1].kernel.bytes, g.kernel.bytes);  // GEMMs run in the model's dtype
  EXPECT_EQ(r.roles[0].ops[1].kernel.dtype_bytes, 2);
}

// Seeded values in [-1, 1).
void fill(std::vector<float>& ws) {
  std::uint32_t s = 12345;
  for (float& v : ws) {
    s = s * 1664525u + 1013904223u;
    v = static_cast<float>(s >> 8) / static_cast<float>(1u << 23) - 1.0f;
  }
}

// Runs a LayerNorm call (5 rows of 32) with gamma 1 and beta 0 (operands `gamma` and
// gamma + 1, y at gamma + 2): every row of y must have mean 0 and variance 1.
void expect_rows_normalised(const KernelCall& c, int gamma) {
  std::vector<float> ws(static_cast<std::size_t>(c.floats()));
  fill(ws);
  std::fill(c.operand(ws.data(), gamma), c.operand(ws.data(), gamma) + 32, 1.0f);
  std::fill(c.operand(ws.data(), gamma + 1), c.operand(ws.data(), gamma + 1) + 32, 0.0f);
  run_kernel_call_cpu(c, ws.data());
  for (int r = 0; r < 5; ++r) {
    const float* y = c.operand(ws.data(), gamma + 2) + r * 32;
    const double mean = std::accumulate(y, y + 32, 0.0) / 32;
    double var = 0;
    for (int j = 0; j < 32; ++j) var += (y[j] - mean) * (y[j] - mean) / 32;
    EXPECT_NEAR(mean, 0, 1e-5) << r;
    EXPECT_NEAR(var, 1, 1e-3) << r;
  }
}

TEST(KernelCall, CpuRunsTheNamedKernel) {
  expect_rows_normalised(make_kernel_call(Fn::LayerNormFwd, 5, 32), 1);
  {  // The 2D split on a whole row (cols == full): stats, then apply.
    Kernel k = Kernel::rowwise(KernelKind::Norm, KernelFn::LayerNorm2d, 5, 32, 1, 1, 2);
    k.k = 32;
    const KernelCall c = kernel_call(k, Phase::Forward);
    ASSERT_EQ(c.fn, Fn::LayerNorm2dFwd);
    EXPECT_EQ(c.text(), "layernorm2d_fwd 5x32/32");
    expect_rows_normalised(c, 2);
  }
  {  // GeLU, tanh form.
    const KernelCall c = make_kernel_call(Fn::GeluFwd, 2, 8);
    std::vector<float> ws(static_cast<std::size_t>(c.floats()));
    fill(ws);
    run_kernel_call_cpu(c, ws.data());
    for (int i = 0; i < 16; ++i) {
      const double x = c.operand(ws.data(), 0)[i];
      const double want = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
      EXPECT_NEAR(c.operand(ws.data(), 1)[i], want, 1e-6);
    }
  }
  {  // Softmax: rows of y sum to one.
    const KernelCall c = make_kernel_call(Fn::SoftmaxFwd, 3, 10);
    std::vector<float> ws(static_cast<std::size_t>(c.floats()));
    fill(ws);
    run_kernel_call_cpu(c, ws.data());
    for (int r = 0; r < 3; ++r) {
      const float* y = c.operand(ws.data(), 1) + r * 10;
      EXPECT_NEAR(std::accumulate(y, y + 10, 0.0), 1.0, 1e-6);
    }
  }
  {  // Attention over a single key returns that key's value row.
    const KernelCall c = make_attention_call(false, {2, 3, 1, 4}, false);
    std::vector<float> ws(static_cast<std::size_t>(c.floats()));
    fill(ws);
    run_kernel_call_cpu(c, ws.data());
    for (int b = 0; b < 2; ++b)
      for (int i = 0; i < 3; ++i)
        for (int d = 0; d < 4; ++d)
          EXPECT_FLOAT_EQ(c.operand(ws.data(), 3)[(b * 3 + i) * 4 + d], c.operand(ws.data(), 2)[b * 4 + d]);
  }
  {  // Dropout + residual: y = x / (1 - p) or 0, plus the residual.
    const KernelCall c = make_kernel_call(Fn::DropoutAddFwd, 4, 64);
    std::vector<float> ws(static_cast<std::size_t>(c.floats()));
    fill(ws);
    run_kernel_call_cpu(c, ws.data());
    int dropped = 0;
    for (int i = 0; i < 256; ++i) {
      const float x = c.operand(ws.data(), 0)[i], res = c.operand(ws.data(), 1)[i], y = c.operand(ws.data(), 2)[i];
      const bool kept = std::fabs(y - (x / (1 - kDropoutP) + res)) < 1e-5f;
      dropped += !kept;
      if (!kept) {
        EXPECT_FLOAT_EQ(y, res) << i;
      }
    }
    EXPECT_GT(dropped, 5);  // p = 0.1 of 256: about 26
    EXPECT_LT(dropped, 60);
  }
  {  // AdamW, first step from zero moments: p' = p (1 - lr wd) - lr g / (|g| + eps).
    const KernelCall c = make_kernel_call(Fn::AdamW, 1, 16);
    std::vector<float> ws(static_cast<std::size_t>(c.floats()), 0.f);
    for (int i = 0; i < 16; ++i) {
      c.operand(ws.data(), 0)[i] = 1.f + 0.25f * static_cast<float>(i);  // p
      c.operand(ws.data(), 1)[i] = static_cast<float>(i) - 7.5f;         // g, never 0
    }
    run_kernel_call_cpu(c, ws.data());
    const kernels::AdamW hp;
    for (int i = 0; i < 16; ++i) {
      const double p = 1.0 + 0.25 * i, g = i - 7.5;
      EXPECT_NEAR(c.operand(ws.data(), 0)[i], p * (1 - double(hp.lr) * hp.weight_decay) - hp.lr * (g > 0 ? 1 : -1),
                  1e-6)
          << i;
      EXPECT_NEAR(c.operand(ws.data(), 2)[i], (1 - double(hp.beta1)) * g, 1e-6) << i;  // m
    }
  }
}

// The Llama-family kernels from their schedule ops: RMSNorm's layout and row scale; RoPE's
// table sized per token (rows / heads) and a rotation that keeps each pair's length, undone by
// its backward call.
TEST(KernelCall, RmsNormAndRopeRunFromTheirOps) {
  {
    const KernelCall c =
        kernel_call(Kernel::rowwise(KernelKind::Norm, KernelFn::RmsNorm, 3, 16, 1, 1, 2), Phase::Forward);
    ASSERT_EQ(c.fn, Fn::RmsNormFwd);
    EXPECT_EQ(c.counts, (std::vector<std::int64_t>{48, 16, 48, 3}));
    std::vector<float> ws(static_cast<std::size_t>(c.floats()));
    fill(ws);
    std::fill_n(c.operand(ws.data(), 1), 16, 1.f);  // gamma
    run_kernel_call_cpu(c, ws.data());
    for (int r = 0; r < 3; ++r) {  // mean of y^2 = 1 (eps aside)
      double ss = 0;
      for (int j = 0; j < 16; ++j) ss += std::pow(c.operand(ws.data(), 2)[r * 16 + j], 2);
      EXPECT_NEAR(ss / 16, 1.0, 1e-3) << r;
    }
    EXPECT_EQ(kernel_call(Kernel::rowwise(KernelKind::Norm, KernelFn::RmsNorm, 3, 16, 1, 1, 2), Phase::Backward).fn,
              Fn::RmsNormBwd);
  }
  Kernel k = Kernel::rowwise(KernelKind::Elementwise, KernelFn::Rope, 4 * 3, 8, 1, 1, 2);
  k.k = 3;  // 4 tokens of 3 heads of 8
  const KernelCall f = kernel_call(k, Phase::Forward), b = kernel_call(k, Phase::Backward);
  ASSERT_EQ(f.fn, Fn::RopeFwd);
  ASSERT_EQ(b.fn, Fn::RopeBwd);
  EXPECT_EQ(f.counts, (std::vector<std::int64_t>{96, 4 * 8, 96}));
  EXPECT_EQ(f.text(), "rope_fwd 4x3x8");
  std::vector<float> ws(static_cast<std::size_t>(f.floats()));
  fill(ws);
  kernels::rope_table_cpu(f.operand(ws.data(), 1), 4, 8, 4, 10000.0);
  const std::vector<float> x(f.operand(ws.data(), 0), f.operand(ws.data(), 0) + 96);
  run_kernel_call_cpu(f, ws.data());
  for (int r = 0; r < 12; ++r)
    for (int i = 0; i < 4; ++i) {
      const float* y = f.operand(ws.data(), 2) + r * 8;
      EXPECT_NEAR(std::hypot(y[i], y[i + 4]), std::hypot(x[r * 8 + i], x[r * 8 + i + 4]), 1e-6);
    }
  std::copy_n(f.operand(ws.data(), 2), 96, f.operand(ws.data(), 0));  // dy = y
  run_kernel_call_cpu(b, ws.data());
  for (int i = 0; i < 96; ++i) EXPECT_NEAR(f.operand(ws.data(), 2)[i], x[static_cast<std::size_t>(i)], 1e-6) << i;
  // A head count that does not divide the rows, or an odd width, runs as a pass over the bytes.
  k.k = 5;
  EXPECT_EQ(kernel_call(k, Phase::Forward).fn, Fn::Pass);
}

// bf16 calls (a 2-byte model on a backend that runs bf16 kernels): activation-shaped
// operands take 2 bytes, statistics, accumulated parameter gradients, AdamW and int64
// targets keep theirs.
TEST(KernelCall, Bf16CallsHalveActivationsAndKeepStatisticsInFloat) {
  const KernelCall ln = make_kernel_call(Fn::LayerNormFwd, 3, 6, true);
  ASSERT_TRUE(ln.bf16);
  // x 18 bf16 = 9 words -> 12, gamma and beta 6 bf16 = 3 -> 4, y 12, mean 3 -> 4, rstd 4.
  const std::int64_t want[] = {12, 4, 4, 12, 4, 4};
  for (int j = 0; j < 6; ++j) EXPECT_EQ(sizes(ln, j), want[j]) << j;
  EXPECT_EQ(ln.elem(0), KernelCall::Elem::BF16);
  EXPECT_EQ(ln.text(), "layernorm_fwd 3x6 bf16");
  EXPECT_EQ(ln.elem(4), KernelCall::Elem::F32);
  EXPECT_DOUBLE_EQ(kernel_call_bytes(ln), 40.0 * 4);
  const KernelCall bwd = make_kernel_call(Fn::LayerNormBwd, 4, 8, true);
  EXPECT_EQ(bwd.elem(5), KernelCall::Elem::BF16);  // dx
  EXPECT_EQ(bwd.elem(6), KernelCall::Elem::F32);   // dgamma: accumulated in float (the main gradient)
  const KernelCall ce = make_kernel_call(Fn::CrossEntropyFwd, 4, 100, true);
  EXPECT_EQ(ce.elem(2), KernelCall::Elem::I64);
  EXPECT_EQ(sizes(ce, 2), 8);                                                      // 4 int64 targets
  EXPECT_EQ(sizes(ce, 0), 200);                                                    // 400 bf16 logits
  EXPECT_EQ(sizes(make_attention_call(false, {2, 8, 16, 4}, true, true), 4), 16);  // lse stays float

  // kernel_call: a 2-byte op on a bf16 backend is a bf16 call; a 4-byte op, a pass, AdamW
  // and a float32 backend are not.
  const Kernel ln2 = Kernel::rowwise(KernelKind::Norm, KernelFn::LayerNorm, 128, 64, 1, 1, 2);
  EXPECT_TRUE(kernel_call(ln2, Phase::Forward, true).bf16);
  EXPECT_FALSE(kernel_call(ln2, Phase::Forward, false).bf16);
  EXPECT_FALSE(
      kernel_call(Kernel::rowwise(KernelKind::Norm, KernelFn::LayerNorm, 128, 64, 1, 1, 4), Phase::Forward, true).bf16);
  EXPECT_TRUE(kernel_call(Kernel::attention(16, 512, 512, 64, 2, true), Phase::Backward, true).bf16);
  EXPECT_FALSE(kernel_call(Kernel::elementwise(KernelKind::Memcpy, 0, 8000, 2), Phase::Forward, true).bf16);
  const KernelCall adam = kernel_call(Kernel::rowwise(KernelKind::Optimizer, KernelFn::AdamW, 1, 1000, 12e3, 28e3, 2),
                                      Phase::Optimizer, true);
  EXPECT_FALSE(adam.bf16);
  EXPECT_DOUBLE_EQ(kernel_call_bytes(adam), 28e3);
}

TEST(KernelCall, ValidatePredictsBf16OpsAsBf16OnABf16Backend) {
  Schedule s;
  s.roles.emplace_back();
  Op ln;
  ln.kind = OpKind::Compute;
  ln.phase = Phase::Backward;
  ln.kernel = Kernel::rowwise(KernelKind::Norm, KernelFn::LayerNorm, 4, 8, 320, 4 * 2 * 32, 2);
  s.roles[0].ops = {ln};
  const Schedule r = as_run_by_our_kernels(s, true);
  // dy 32, x 32, gamma 8 bf16 (16, 16, 4 words), mean 4, rstd 4, dx 32 bf16 (16), dgamma 8, dbeta 8 floats.
  EXPECT_DOUBLE_EQ(r.roles[0].ops[0].kernel.bytes, (16 + 16 + 4 + 4 + 4 + 16 + 8 + 8) * 4.0);
  EXPECT_EQ(r.roles[0].ops[0].kernel.dtype_bytes, 2);
}

// An op with no kernel of its own runs as the streaming pass: predicted at the copy's rate (the
// memcpy kind, which calibrate measures as that pass), keeping its bytes; a kernel of its own
// keeps its kind.
TEST(KernelCall, ValidatePredictsAPassAtTheCopysRate) {
  Schedule s;
  s.roles.emplace_back();
  Op copy;
  copy.kind = OpKind::Compute;
  copy.phase = Phase::Optimizer;
  copy.kernel = Kernel::elementwise(KernelKind::Elementwise, 1000, 8000, 4);  // the parameter copy
  Op gelu = copy;
  gelu.phase = Phase::Forward;
  gelu.kernel = Kernel::rowwise(KernelKind::Elementwise, KernelFn::Gelu, 4, 8, 0, 4 * 2 * 32, 2);
  s.roles[0].ops = {copy, gelu};
  for (const bool bf16 : {false, true}) {
    const Schedule r = as_run_by_our_kernels(s, bf16);
    EXPECT_EQ(r.roles[0].ops[0].kernel.kind, KernelKind::Memcpy);
    EXPECT_DOUBLE_EQ(r.roles[0].ops[0].kernel.bytes, 8000);  // 1000 floats read, 1000 written
    EXPECT_EQ(r.roles[0].ops[1].kernel.kind, KernelKind::Elementwise);
  }
}

// Calibrate times each row kernel at the width the step runs it: bf16 on a bf16 backend, but the
// loss in float32, as the schedule plans it (on float32 logits) and the executor runs it.
TEST(KernelCall, CalibrateTimesCrossEntropyInFloat32LikeTheStep) {
  const Kernel ce = Kernel::rowwise(KernelKind::Softmax, KernelFn::CrossEntropy, 4, 64, 0, 2.0 * 4 * 4 * 64, 4);
  for (const CalibrationCall& c : row_kernel_calls(4 * 64, 64, true)) {
    if (c.fn == KernelFn::CrossEntropy) {
      EXPECT_FALSE(c.call.bf16) << c.call.text();
      EXPECT_EQ(c.call.bf16, kernel_call(ce, c.backward ? Phase::Backward : Phase::Forward, true).bf16);
    } else {
      EXPECT_TRUE(c.call.bf16) << c.call.text();
    }
  }
}

// The loss's target ids are the one operand a timed run must make valid (one int64 per row).
TEST(KernelCall, OnlyTheLossHasTargets) {
  for (const Fn f : {Fn::CrossEntropyFwd, Fn::CrossEntropyBwd}) {
    const KernelCall c = make_kernel_call(f, 6, 40, false);
    EXPECT_EQ(targets_operand(c), 2);
    EXPECT_EQ(c.elem(2), KernelCall::Elem::I64);
    EXPECT_EQ(targets_bytes(c), 6u * 8);
  }
  EXPECT_EQ(targets_operand(make_kernel_call(Fn::LayerNormBwd, 6, 40, true)), -1);
  EXPECT_EQ(targets_bytes(make_kernel_call(Fn::SoftmaxFwd, 6, 40, true)), 0u);
}

// The CPU's bf16 call against independent truths: LayerNorm rows normalised and GeLU's tanh
// form, each within what one bf16 rounding of the output allows (2^-8 relative, the unit
// roundoff of bf16's 8 significant bits; the inputs are exact bf16 values).
TEST(KernelCall, CpuRunsBf16CallsInFloatAndRoundsTheirOutputs) {
  {
    const KernelCall c = make_kernel_call(Fn::LayerNormFwd, 5, 32, true);
    std::vector<float> ws(static_cast<std::size_t>(c.floats()));
    std::vector<float> x(5 * 32);
    fill(x);
    kernels::narrow(x.data(), c.bf16_operand(ws.data(), 0), x.size());
    for (int j = 0; j < 32; ++j) {
      c.bf16_operand(ws.data(), 1)[j] = kernels::to_bf16(1.0f);
      c.bf16_operand(ws.data(), 2)[j] = kernels::to_bf16(0.0f);
    }
    run_kernel_call_cpu(c, ws.data());
    for (int r = 0; r < 5; ++r) {
      double mean = 0, var = 0;
      float y[32];
      for (int j = 0; j < 32; ++j) {
        y[j] = kernels::to_float(c.bf16_operand(ws.data(), 3)[r * 32 + j]);
        mean += y[j] / 32;
      }
      for (int j = 0; j < 32; ++j) var += (y[j] - mean) * (y[j] - mean) / 32;
      // |y| < 4 here, so each output moves by at most 2^-8 * 4 = 2^-6 when narrowed, and
      // y^2 by at most 2 |y| 2^-8 |y|: the variance by 2^-7 E[y^2] = 2^-7.
      EXPECT_NEAR(mean, 0, 0x1p-6) << r;
      EXPECT_NEAR(var, 1, 0x1p-7 + 1e-6) << r;
      // The statistics stay float: mean and rstd of the (narrowed) inputs to float precision.
      double xm = 0;
      for (int j = 0; j < 32; ++j) xm += kernels::to_float(c.bf16_operand(ws.data(), 0)[r * 32 + j]) / 32;
      EXPECT_NEAR(c.operand(ws.data(), 4)[r], xm, 1e-6) << r;
    }
  }
  {
    const KernelCall c = make_kernel_call(Fn::GeluFwd, 2, 8, true);
    std::vector<float> ws(static_cast<std::size_t>(c.floats()));
    for (int i = 0; i < 16; ++i) c.bf16_operand(ws.data(), 0)[i] = kernels::to_bf16(-2.0f + 0.25f * i);
    run_kernel_call_cpu(c, ws.data());
    for (int i = 0; i < 16; ++i) {
      const double x = -2.0 + 0.25 * i;  // exact in bf16
      const double want = 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
      const double got = kernels::to_float(c.bf16_operand(ws.data(), 1)[i]);
      EXPECT_NEAR(got, want, 0x1p-8 * std::fabs(want) + 1e-6) << x;
      EXPECT_EQ(kernels::to_float(c.bf16_operand(ws.data(), 0)[i]), x) << "the input is left as it was";
    }
  }
  {  // Cross-entropy: int64 targets and float statistics pass through the widening intact.
    const KernelCall c = make_kernel_call(Fn::CrossEntropyFwd, 2, 4, true);
    std::vector<float> ws(static_cast<std::size_t>(c.floats()));
    const float logits[8] = {0, 1, 2, 3, 3, 2, 1, 0};  // exact in bf16
    kernels::narrow(logits, c.bf16_operand(ws.data(), 0), 8);
    auto* targets = reinterpret_cast<std::int64_t*>(c.operand(ws.data(), 2));
    targets[0] = 3;
    targets[1] = 1;
    run_kernel_call_cpu(c, ws.data());
    const double lse = std::log(1 + std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
    EXPECT_NEAR(c.operand(ws.data(), 4)[0], lse - 3, 1e-5);
    EXPECT_NEAR(c.operand(ws.data(), 4)[1], lse - 2, 1e-5);
    EXPECT_EQ(targets[0], 3);
    EXPECT_EQ(targets[1], 1);
  }
}

// Every bf16 call on the CPU is the float32 call on the widened inputs, its bf16 outputs
// narrowed: checked operand by operand for every function (a layout that put an operand at
// the wrong place or type would show here).
TEST(KernelCall, Bf16CallsAreTheFloatCallsOnWidenedInputs) {
  std::vector<KernelCall> calls;
  for (Fn f : {Fn::LayerNormFwd, Fn::LayerNormBwd, Fn::LayerNorm2dFwd, Fn::LayerNorm2dBwd, Fn::GeluFwd, Fn::GeluBwd,
               Fn::SwigluFwd, Fn::SwigluBwd, Fn::DropoutFwd, Fn::DropoutBwd, Fn::DropoutAddFwd, Fn::SoftmaxFwd,
               Fn::SoftmaxBwd, Fn::CrossEntropyFwd, Fn::CrossEntropyBwd, Fn::LseMerge}) {
    calls.push_back(make_kernel_call(f, 3, 10, true));
    if (f == Fn::LayerNorm2dFwd || f == Fn::LayerNorm2dBwd) calls.back().full = 10;
  }
  calls.push_back(make_attention_call(false, {2, 5, 7, 4}, true, true));
  calls.push_back(make_attention_call(true, {2, 5, 7, 4}, false, true));
  for (const KernelCall& c : calls) {
    SCOPED_TRACE(c.text());
    const KernelCall f = as_fp32(c);
    ASSERT_FALSE(f.bf16);
    ASSERT_EQ(f.operands(), c.operands());
    std::vector<float> seed(static_cast<std::size_t>(f.floats()));
    fill(seed);
    std::vector<float> ws(static_cast<std::size_t>(c.floats())), wide(static_cast<std::size_t>(f.floats()));
    for (int j = 0; j < c.operands(); ++j) {
      const auto n = static_cast<std::size_t>(c.counts[static_cast<std::size_t>(j)]);
      const float* src = f.operand(seed.data(), j);
      if (c.elem(j) == KernelCall::Elem::BF16) {
        kernels::narrow(src, c.bf16_operand(ws.data(), j), n);
        kernels::widen(c.bf16_operand(ws.data(), j), f.operand(wide.data(), j), n);
      } else if (c.elem(j) == KernelCall::Elem::I64) {
        for (std::size_t i = 0; i < n; ++i)
          reinterpret_cast<std::int64_t*>(c.operand(ws.data(), j))[i] =
              reinterpret_cast<std::int64_t*>(f.operand(wide.data(), j))[i] = static_cast<std::int64_t>(i % 10);
      } else {
        std::copy(src, src + n, c.operand(ws.data(), j));
        std::copy(src, src + n, f.operand(wide.data(), j));
      }
    }
    run_kernel_call_cpu(c, ws.data());
    run_kernel_call_cpu(f, wide.data());
    for (int j = 0; j < c.operands(); ++j) {
      const auto n = static_cast<std::size_t>(c.counts[static_cast<std::size_t>(j)]);
      for (std::size_t i = 0; i < n; ++i) {
        if (c.elem(j) == KernelCall::Elem::BF16) {
          ASSERT_EQ(c.bf16_operand(ws.data(), j)[i].bits, kernels::to_bf16(f.operand(wide.data(), j)[i]).bits)
              << "operand " << j << " element " << i;
        } else if (c.elem(j) == KernelCall::Elem::F32) {
          ASSERT_EQ(c.operand(ws.data(), j)[i], f.operand(wide.data(), j)[i]) << "operand " << j << " element " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace meshsim
