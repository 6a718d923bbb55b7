#include "kernels/dropout.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/kernels_test_util.h"

namespace meshsim::kernels {
namespace {

using namespace testing;  // kernels_test_util.h

// Known-answer vectors of Random123 (kat_vectors, philox4x32 with 10 rounds).
TEST(Philox, KnownAnswerVectors) {
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}), (PhiloxCounter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}),
            (PhiloxCounter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}),
            (PhiloxCounter{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Dropout, MaskFollowsTheDocumentedUniformAndScales) {
  const std::size_t n = 20000;
  const float p = 0.3f;
  const auto x = random_vector(n, 1, 0.5f, 1.5f);  // never 0, so y == 0 means dropped
  std::vector<float> y(n);
  dropout_forward_cpu(x.data(), y.data(), n, p, 1234, 77);
  std::size_t kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const bool keep = dropout_uniform(1234, 77 + i) >= p;
    ASSERT_EQ(y[i], keep ? x[i] * (1.f / (1 - p)) : 0.f) << i;
    kept += keep;
  }
  // Binomial(n, 0.7): standard deviation ~65; allow 5 sigma.
  EXPECT_NEAR(static_cast<double>(kept), 0.7 * n, 5 * std::sqrt(n * 0.21));
}

TEST(Dropout, ASliceAtAnOffsetEqualsTheSliceOfTheWhole) {
  const std::size_t n = 1003;
  const auto x = random_vector(n, 2);
  std::vector<float> whole(n);
  dropout_forward_cpu(x.data(), whole.data(), n, 0.5f, 42, 5);
  for (const std::size_t start : {std::size_t{0}, std::size_t{1}, std::size_t{37}, std::size_t{500}}) {
    const std::size_t len = n - start - 3;
    std::vector<float> part(len);
    dropout_forward_cpu(x.data() + start, part.data(), len, 0.5f, 42, 5 + start);
    EXPECT_EQ(part, std::vector<float>(whole.begin() + start, whole.begin() + start + len)) << start;
  }
}

TEST(Dropout, BackwardRegeneratesTheForwardMaskAndSeedsDiffer) {
  const std::size_t n = 4096;
  const auto x = random_vector(n, 3, 0.5f, 1.5f), dy = random_vector(n, 4, 0.5f, 1.5f);
  std::vector<float> y(n), dx(n), other(n);
  dropout_forward_cpu(x.data(), y.data(), n, 0.1f, 9, 0);
  dropout_backward_cpu(dy.data(), dx.data(), n, 0.1f, 9, 0);
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_EQ(y[i] == 0.f, dx[i] == 0.f) << i;
    if (dx[i] != 0.f) {
      ASSERT_EQ(dx[i], dy[i] * (1.f / (1 - 0.1f))) << i;
    }
  }
  dropout_forward_cpu(x.data(), other.data(), n, 0.1f, 10, 0);
  EXPECT_NE(y, other);
}

TEST(Dropout, ZeroKeepsEverythingAndOneDropsEverything) {
  const auto x = random_vector(10, 5);
  std::vector<float> y(10);
  dropout_forward_cpu(x.data(), y.data(), 10, 0.f, 1, 0);
  EXPECT_EQ(y, x);
  dropout_forward_cpu(x.data(), y.data(), 10, 1.f, 1, 0);
  EXPECT_EQ(y, std::vector<float>(10, 0.f));
}

}  // namespace
}  // namespace meshsim::kernels
