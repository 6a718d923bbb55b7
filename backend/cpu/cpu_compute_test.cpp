// CpuCompute runs the kernel each op names on the op's shape: a LayerNorm op's output
// checked against the LayerNorm formula on the workspace's own inputs, and every compute op
// of small GPT layers (plain and flash attention, GeLU and SwiGLU) runs within the
// workspace reserve() sized.
#include "backend/cpu/cpu_compute.h"

#include <gtest/gtest.h>

#include <cmath>

#include "backend/kernel_call.h"
#include "core/error.h"
#include "schedule/plan.h"
#include "schedule/test_models.h"

namespace meshsim::cpu {
namespace {

TEST(CpuCompute, LayerNormOpRunsLayerNormOnItsShape) {
  Op op;
  op.kind = OpKind::Compute;
  op.phase = Phase::Forward;
  op.name = "ln1";
  op.kernel = Kernel::rowwise(KernelKind::Norm, KernelFn::LayerNorm, 6, 40, 8 * 240, 2 * 2 * 240, 2);
  CpuCompute c(7);
  c.reserve({op});
  const KernelCall call = kernel_call(op.kernel, op.phase);
  EXPECT_EQ(c.workspace_bytes(), call.floats() * 4);
  c.run(op);
  float* ws = const_cast<float*>(c.workspace());
  const float *x = call.operand(ws, 0), *gamma = call.operand(ws, 1), *beta = call.operand(ws, 2),
              *y = call.operand(ws, 3);
  for (int r = 0; r < 6; ++r) {
    double mean = 0, var = 0;
    for (int j = 0; j < 40; ++j) mean += x[r * 40 + j] / 40.0;
    for (int j = 0; j < 40; ++j) var += (x[r * 40 + j] - mean) * (x[r * 40 + j] - mean) / 40.0;
    for (int j = 0; j < 40; ++j)
      EXPECT_NEAR(y[r * 40 + j], gamma[j] * (x[r * 40 + j] - mean) / std::sqrt(var + 1e-5) + beta[j], 1e-4);
  }
}

TEST(CpuCompute, EveryOpOfSmallLayersRunsInTheReservedWorkspace) {
  for (AttentionKind att : {AttentionKind::Plain, AttentionKind::Flash})
    for (FfnKind ffn : {FfnKind::Gelu, FfnKind::SwiGLU}) {
      ModelSpec m = testing::gpt_model(1, 64, 4, 32, 128);
      m.attention = att;
      m.ffn = ffn;
      ParallelSpec p;
      p.cp = att == AttentionKind::Flash ? 2 : 1;  // ring attention steps and LSE merges too
      const Schedule s = plan_iteration(m, p);
      for (const Role& role : s.roles) {
        CpuCompute c(1);
        c.reserve(role.ops);
        int ran = 0;
        for (const Op& op : role.ops)
          if (op.kind == OpKind::Compute) {
            EXPECT_NO_THROW(c.run(op)) << op.name;
            ++ran;
          }
        EXPECT_GT(ran, 10);
      }
    }
}

TEST(CpuCompute, AnOpTooLargeForTheHostIsOneClearError) {
  Op op;
  op.kind = OpKind::Compute;
  op.name = "attn.flash";
  op.kernel = Kernel::attention(1024, 65536, 65536, 128, 2, true);
  try {
    CpuCompute::workspace_for({op}, MiB(64));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attn.flash"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--set model.hidden"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace meshsim::cpu
