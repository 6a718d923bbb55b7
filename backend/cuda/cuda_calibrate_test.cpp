// measure_cuda on the fake GpuApi: the grid it times, the figures it derives from the
// event times, and a failing call that names the measurement and releases everything.
#include "backend/cuda/cuda_calibrate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "backend/cuda/fake_gpu_api.h"
#include "core/test_util.h"

namespace meshsim::cuda {
namespace {

using testing_util::contains;
using testing_util::error_of;

CudaCalibrateOptions small() {
  CudaCalibrateOptions o;
  o.gemm_sizes = {64, 128};
  o.dtypes = {DType::Bf16, DType::Fp32};
  o.repeats = 2;
  o.min_window_s = 0;  // one timed batch per figure (the window has its own test)
  o.memory_bytes = 1 << 20;
  o.kernel_bytes = 64 << 10;  // 64 rows of 256 floats
  o.row = 256;
  o.attention = {2, 64, 64, 32};
  o.row_widths = {128, 512};  // 128 rows of 128, 32 of 512
  o.vocab_widths = {1024};    // cross-entropy alone: 16 rows of 1024
  o.vocab_rows = 16;
  o.attention_seqs = {32, 96};  // attention's 2 x heads and head dim 32 at each
  o.attention_repeats = 1;
  return o;
}

// The fake stamps each event record 0.5 ms after the previous one, so every figure is
// timed as 0.5 ms over `repeats` calls: 0.25 ms per call here.
TEST(CudaCalibrate, TimesEveryShapeAndDtypeAndDerivesRatesFromEvents) {
  FakeGpuApi api;
  Checker check(api, 3);
  const CudaMeasurements m = measure_cuda(api, check, 1, small());
  EXPECT_TRUE(api.has("set_device 1"));
  ASSERT_EQ(m.gemm.size(), 2u * 2 * 2 * 2);  // 2 dtypes x 2^3 shapes
  EXPECT_EQ(api.count("gemm"), 16 * 3);      // a warm-up and 2 timed calls each
  EXPECT_TRUE(api.has("gemm 128x64x128 fp32 blas#1"));
  for (const MeasuredGemm& g : m.gemm)
    EXPECT_DOUBLE_EQ(g.flops_per_s, 2.0 * static_cast<double>(g.m) * g.n * g.k / 0.25e-3) << g.m << g.n << g.k;
  EXPECT_DOUBLE_EQ(m.memory_bandwidth, 2.0 * (1 << 20) / 0.25e-3);
  EXPECT_DOUBLE_EQ(m.launch_overhead_s, 0.25e-3);
  // Every calibration call (each kernel forward and backward, attention too), 0.25 ms each.
  ASSERT_EQ(m.kernels.size(), calibration_calls(64, 256, {2, 64, 64, 32}).size());
  // As the executor runs a 2-byte model: bf16 calls (AdamW's operands stay float32).
  EXPECT_EQ(api.count("kernel adamw 1x16384"), 3);
  for (const MeasuredKernel& k : m.kernels) EXPECT_DOUBLE_EQ(k.seconds, 0.25e-3) << k.what.call.text();
  EXPECT_EQ(api.count("kernel layernorm_fwd 64x256 bf16"), 3);
  EXPECT_EQ(api.count("kernel layernorm_bwd 64x256 bf16"), 3);
  EXPECT_EQ(api.count("kernel softmax_bwd 64x256 bf16"), 3);
  EXPECT_EQ(api.count("kernel attention_bwd 2x64x64x32 causal bf16"), 3);
  EXPECT_EQ(api.count("kernel rmsnorm_bwd 64x256 bf16"), 3);
  // RoPE on the same 16384 elements as 16 tokens of 8 heads of 128.
  EXPECT_EQ(api.count("kernel rope_fwd 16x8x128 bf16"), 3);
  EXPECT_EQ(api.count("kernel rope_bwd 16x8x128 bf16"), 3);
  // The sweep: the 16 row kernels at each width (not RoPE: its rows are a head's width), over the same 16384 floats,
  // tagged with the function and pass the compute model looks their rate up by. Then cross-entropy alone, forward and
  // backward, at the vocabulary width. The loss is timed in float32, as the step runs it on float32 logits.
  ASSERT_EQ(m.row_sweep.size(), 2u * 16 + 2);
  EXPECT_EQ(api.count("kernel rmsnorm_fwd 32x512 bf16"), 3);
  EXPECT_EQ(api.count("kernel layernorm_bwd 128x128 bf16"), 3);
  EXPECT_EQ(api.count("kernel layernorm_bwd 32x512 bf16"), 3);
  EXPECT_EQ(api.count("kernel cross_entropy_fwd 32x512"), 3);
  EXPECT_EQ(api.count("kernel cross_entropy_fwd 32x512 bf16"), 0);
  EXPECT_EQ(api.count("kernel cross_entropy_bwd 16x1024"), 3);
  EXPECT_EQ(api.count("memset 128"), 2);  // its 16 targets, zeroed before the forward and the backward
  EXPECT_EQ(api.count("kernel layernorm_fwd 16x1024 bf16"), 0);
  EXPECT_EQ(api.count("kernel dropout_fwd 32x512 bf16"), 3);
  int layernorm_bwd = 0;
  for (const MeasuredKernel& k : m.row_sweep)
    if (k.what.fn == KernelFn::LayerNorm && k.what.backward) {
      ++layernorm_bwd;
      EXPECT_EQ(k.what.kind, KernelKind::Norm);
      EXPECT_EQ(k.what.call.rows * k.what.call.cols, 16384);
    }
  EXPECT_EQ(layernorm_bwd, 2);
  // The attention sweep: each sequence causal and not, forward and backward, one warm-up and
  // attention_repeats (1) timed calls each, FLOPs as the schedule counts them.
  ASSERT_EQ(m.attention_sweep.size(), 2u * 2 * 2);
  EXPECT_EQ(api.count("kernel attention_bwd 2x96x96x32 bf16"), 2);
  EXPECT_EQ(api.count("kernel attention_fwd 2x32x32x32 causal bf16"), 2);
  for (const MeasuredKernel& k : m.attention_sweep) {
    const double fwd =
        Kernel::attention(2, k.what.call.shape.seq_q, k.what.call.shape.seq_q, 32, 2, k.what.call.causal).flops;
    EXPECT_DOUBLE_EQ(k.what.flops, k.what.backward ? 2 * fwd : fwd) << k.what.call.text();
    EXPECT_EQ(k.what.backward, k.what.call.fn == KernelCall::Fn::AttentionBwd);
  }
  EXPECT_EQ(api.count("free"), 3);
}

// --kernels fp32: the same calls with float32 operands, as the executor then runs them.
TEST(CudaCalibrate, Fp32KernelsTimeTheFloatCalls) {
  FakeGpuApi api;
  Checker check(api, 0);
  CudaCalibrateOptions o = small();
  o.fp32_kernels = true;
  const CudaMeasurements m = measure_cuda(api, check, 0, o);
  EXPECT_TRUE(api.has("kernel layernorm_fwd 64x256"));
  EXPECT_TRUE(api.has("kernel attention_bwd 2x64x64x32 causal"));
  EXPECT_FALSE(api.has("kernel layernorm_fwd 64x256 bf16"));
  for (const MeasuredKernel& k : m.kernels) EXPECT_FALSE(k.what.call.bf16) << k.what.call.text();
}

// A batch shorter than the window is timed again over enough calls to fill it: the fake's
// 0.5 ms per batch against a 2 ms window is ceil(2 x 2 / 0.5) = 8 calls, 0.5 / 8 ms each.
TEST(CudaCalibrate, AShortBatchIsTimedAgainOverCallsThatFillTheWindow) {
  FakeGpuApi api;
  Checker check(api, 0);
  CudaCalibrateOptions o = small();
  o.min_window_s = 2e-3;
  const CudaMeasurements m = measure_cuda(api, check, 0, o);
  EXPECT_EQ(api.count("gemm"), 16 * (1 + 2 + 8));
  for (const MeasuredGemm& g : m.gemm)
    EXPECT_DOUBLE_EQ(g.flops_per_s, 2.0 * static_cast<double>(g.m) * g.n * g.k / (0.5e-3 / 8)) << g.m << g.n << g.k;
  EXPECT_DOUBLE_EQ(m.launch_overhead_s, 0.5e-3 / 8);
  // A window the first batch already fills: no second batch.
  FakeGpuApi api2;
  Checker check2(api2, 0);
  o.min_window_s = 0.4e-3;
  const CudaMeasurements m2 = measure_cuda(api2, check2, 0, o);
  EXPECT_EQ(api2.count("gemm"), 16 * 3);
  EXPECT_DOUBLE_EQ(m2.launch_overhead_s, 0.25e-3);
}

TEST(CudaCalibrate, AFailingCallNamesRankAndMeasurementAndFreesBuffers) {
  FakeGpuApi api;
  api.fail("gemm", 13, 4);  // the fifth GEMM call fails
  Checker check(api, 2);
  const std::string e = error_of([&] { measure_cuda(api, check, 0, small()); });
  EXPECT_TRUE(contains(e, "rank 2")) << e;
  EXPECT_TRUE(contains(e, "calibrate gemm 64x64x128 bf16")) << e;
  EXPECT_TRUE(contains(e, "cublasGemmEx")) << e;
  EXPECT_EQ(api.count("free"), 3);
}

}  // namespace
}  // namespace meshsim::cuda

// The operands decode, by the IEEE layouts written out here (not the generator's masks), to
// finite, normal, non-zero numbers as fp16, as bf16 and as fp32, and they are not constant.
TEST(CudaCalibrate, OperandsAreRandomAndNormalInEveryWidth) {
  const std::vector<std::uint16_t> w = meshsim::cuda::calibration_operands(1 << 16);
  ASSERT_EQ(w.size(), 1u << 16);
  auto normal = [](std::uint32_t exponent, std::uint32_t all_ones) { return exponent != 0 && exponent != all_ones; };
  std::set<std::uint16_t> distinct(w.begin(), w.end());
  EXPECT_EQ(distinct.size(), 2048u);  // a random sign and 10-bit mantissa: every one of 2^11 words appears
  int negative = 0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const std::uint32_t h = w[i];
    const std::uint32_t fp16_exp = (h >> 10) & 0x1F, bf16_exp = (h >> 7) & 0xFF;
    ASSERT_TRUE(normal(fp16_exp, 0x1F)) << i;
    ASSERT_TRUE(normal(bf16_exp, 0xFF)) << i;
    const double fp16 = std::ldexp(1.0 + (h & 0x3FF) / 1024.0, static_cast<int>(fp16_exp) - 15);
    ASSERT_GE(fp16, 0.5) << i;
    ASSERT_LT(fp16, 1.0) << i;
    negative += (h >> 15) != 0;
    if (i % 2 == 1) {  // little-endian: the odd word is the fp32's high half
      const std::uint32_t bits = (h << 16) | w[i - 1];
      float f;
      std::memcpy(&f, &bits, 4);
      ASSERT_TRUE(std::isnormal(f)) << i;
    }
  }
  EXPECT_NEAR(negative, 1 << 15, 1 << 11);  // the sign is random too
}
