// kernel_call: the function and operands a real backend runs for a compute op, checked
// against hand-counted layouts, and the CPU run against independent formulas (LayerNorm
// rows normalised, GeLU's tanh form, softmax rows summing to one, attention of one key,
// AdamW's first step).
#include "backend/kernel_call.h"

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
  ASSERT_EQ(calls.size(), 15u);
  std::vector<MeasuredKernel> m;
  for (std::size_t i = 0; i < calls.size(); ++i) m.push_back({calls[i], 1e-3 * static_cast<double>(i + 1)});
  const KernelRates r = kernel_rates(m);
  // Norm: LayerNorm forward (1 ms) and backward (2 ms).
  const double norm_bytes = kernel_call_bytes(calls[0].call) + kernel_call_bytes(calls[1].call);
  EXPECT_EQ(calls[0].call.fn, Fn::LayerNormFwd);
  EXPECT_DOUBLE_EQ(*r.bytes_per_s[static_cast<std::size_t>(KernelKind::Norm)], norm_bytes / 3e-3);
  // Optimizer: the AdamW step over 4 x 8 parameters (15 ms), 28 bytes each.
  EXPECT_EQ(calls[14].call.fn, Fn::AdamW);
  EXPECT_DOUBLE_EQ(*r.bytes_per_s[static_cast<std::size_t>(KernelKind::Optimizer)], 28.0 * 32 / 15e-3);
  EXPECT_FALSE(r.bytes_per_s[static_cast<std::size_t>(KernelKind::Memcpy)].has_value());
  // Attention: causal forward 2 x 16 x 16 x 8 FLOPs (13 ms), backward twice that (14 ms).
  EXPECT_DOUBLE_EQ(r.attention_flops_per_s, 3 * 2.0 * 16 * 16 * 8 / 27e-3);
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

}  // namespace
}  // namespace meshsim
