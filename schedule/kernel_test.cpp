#include "schedule/kernel.h"

#include <gtest/gtest.h>

namespace meshsim {
namespace {

TEST(Kernel, GemmCountsTwoFlopsPerMultiplyAddAndEachOperandOnce) {
  const Kernel g = Kernel::gemm(4096, 12288, 36864, 2);
  EXPECT_EQ(g.kind, KernelKind::Gemm);
  EXPECT_DOUBLE_EQ(g.flops, 2.0 * 4096 * 12288 * 36864);
  EXPECT_DOUBLE_EQ(g.bytes, (4096.0 * 36864 + 36864.0 * 12288 + 4096.0 * 12288) * 2);
  EXPECT_EQ(g.m, 4096);
  EXPECT_EQ(g.n, 12288);
  EXPECT_EQ(g.k, 36864);
}

TEST(Kernel, AttentionCountsBothMatmulsAndHalvesCausal) {
  const Kernel full = Kernel::attention(32, 2048, 2048, 128, 2, false);
  EXPECT_DOUBLE_EQ(full.flops, 4.0 * 32 * 2048 * 2048 * 128);
  EXPECT_DOUBLE_EQ(full.bytes, 32.0 * 4 * 2048 * 128 * 2);
  EXPECT_DOUBLE_EQ(Kernel::attention(32, 2048, 2048, 128, 2, true).flops, full.flops / 2);
  EXPECT_EQ(full.m, 2048);
  EXPECT_EQ(full.k, 128);
}

TEST(Kernel, ElementwiseKeepsWorkAndHasNoShape) {
  const Kernel n = Kernel::elementwise(KernelKind::Norm, 10, 40, 4);
  EXPECT_EQ(n.kind, KernelKind::Norm);
  EXPECT_DOUBLE_EQ(n.flops, 10);
  EXPECT_DOUBLE_EQ(n.bytes, 40);
  EXPECT_EQ(n.m, 0);
  EXPECT_EQ(n.dtype_bytes, 4);
}

TEST(Kernel, KindNamesRoundTrip) {
  for (int i = 0; i < kKernelKinds; ++i) {
    const auto k = static_cast<KernelKind>(i);
    EXPECT_EQ(parse_kernel_kind(to_string(k)), k);
  }
  EXPECT_STREQ(to_string(KernelKind::Softmax), "softmax");
  EXPECT_FALSE(parse_kernel_kind("gemv").has_value());
}

}  // namespace
}  // namespace meshsim
