// bf16 storage (kernels/bf16.h): widening is exact and narrowing rounds to nearest, ties to
// even, checked against hand-worked bit patterns, every one of the 65,536 bf16 values, and
// the half-unit bound on random floats.
#include "kernels/bf16.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

namespace meshsim::kernels {
namespace {

std::uint16_t bits_of(float f) { return to_bf16(f).bits; }

TEST(Bf16, HandWorkedRoundingTiesToEven) {
  EXPECT_EQ(bits_of(1.0f), 0x3f80);
  EXPECT_EQ(bits_of(-2.5f), 0xc020);
  // 1 + 2^-8 lies halfway between 1 (mantissa 0, even) and 1 + 2^-7: down to 1.
  EXPECT_EQ(bits_of(1.0f + 0x1p-8f), 0x3f80);
  // 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): up.
  EXPECT_EQ(bits_of(1.0f + 3 * 0x1p-8f), 0x3f82);
  // Just past the first tie: up to 1 + 2^-7.
  EXPECT_EQ(bits_of(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  // Just short of it: down to 1.
  EXPECT_EQ(bits_of(1.0f + 0x1p-8f - 0x1p-20f), 0x3f80);
  EXPECT_EQ(to_float(to_bf16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
}

TEST(Bf16, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bits_of(inf), 0x7f80);
  EXPECT_EQ(bits_of(-inf), 0xff80);
  EXPECT_EQ(bits_of(0.0f), 0x0000);
  EXPECT_EQ(bits_of(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(to_float(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits in the low 16 bits only must not round into an infinity.
  float low_payload_nan;
  const std::uint32_t nan_bits = 0x7f800001u;
  std::memcpy(&low_payload_nan, &nan_bits, sizeof nan_bits);
  EXPECT_TRUE(std::isnan(to_float(to_bf16(low_payload_nan))));
  // The largest float lies past the midpoint above the largest bf16 (0x7f7f): infinity.
  EXPECT_EQ(bits_of(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(bits_of(0x1.fep127f), 0x7f7f);  // the largest bf16 itself
  // The smallest float subnormal is far below half the smallest bf16 subnormal (2^-133): 0.
  EXPECT_EQ(bits_of(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(bits_of(0x1p-133f), 0x0001);
}

TEST(Bf16, EveryValueSurvivesWideningAndNarrowing) {
  for (std::uint32_t b = 0; b <= 0xffff; ++b) {
    const bf16 v{static_cast<std::uint16_t>(b)};
    const float f = to_float(v);
    if (std::isnan(f)) continue;
    ASSERT_EQ(to_bf16(f).bits, v.bits) << std::hex << b;
  }
}

TEST(Bf16, NarrowingMovesAtMostHalfAUnitToTheNearerNeighbour) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::uniform_int_distribution<int> exp(-60, 60);
  float worst = 0;
  for (int i = 0; i < 200000; ++i) {
    const float x = std::ldexp(mant(rng), exp(rng)) * (i % 2 ? -1.0f : 1.0f);
    const float y = to_float(to_bf16(x));
    ASSERT_LE(std::fabs(y - x), 0x1p-8f * std::fabs(x)) << x;
    worst = std::max(worst, std::fabs(y - x) / std::fabs(x));
    // y is one of the two bf16 values around x, and no other bf16 is nearer.
    const float other =
        to_float(bf16{static_cast<std::uint16_t>(to_bf16(x).bits + (std::fabs(y) < std::fabs(x) ? 1 : -1))});
    ASSERT_LE(std::fabs(y - x), std::fabs(other - x)) << x;
  }
  EXPECT_GT(worst, 0x1p-9f);  // the bound is attained near 1 * 2^e + half a unit, not a loose one
}

TEST(Bf16, BulkConversionsMatchTheScalarOnes) {
  const float in[] = {0.1f, -3.0f, 1e30f, 1.0f + 0x1p-8f};
  bf16 mid[4];
  float out[4];
  narrow(in, mid, 4);
  widen(mid, out, 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(mid[i].bits, to_bf16(in[i]).bits);
    EXPECT_EQ(out[i], to_float(to_bf16(in[i])));
    EXPECT_EQ(load(mid, static_cast<std::size_t>(i)), out[i]);
  }
  float f[1];
  store(f, 0, 2.0f);
  store(mid, 0, 0.1f);
  EXPECT_EQ(f[0], 2.0f);
  EXPECT_EQ(mid[0].bits, to_bf16(0.1f).bits);
}

}  // namespace
}  // namespace meshsim::kernels
