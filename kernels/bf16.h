// bfloat16 storage: the 16-bit format mixed-precision training keeps activations, weights
// and their gradients in (1 sign, 8 exponent, 7 mantissa bits: float32's range, 8 bits of
// precision). Our bf16 kernels store bf16 and compute in float: they widen every element
// they read (exact) and narrow every element they write, rounding to nearest, ties to even
// (core/bf16.h: the rounding every layer shares). One narrowing moves a value by at most
// half a unit in its last place, the unit roundoff of 8 significant bits: |narrow(x) - x| <=
// 2^-8 |x| (docs/numerics.md, "bf16"); one unit in the last place is at most 2^-7 |x|.
//
//   kernels::bf16 b = kernels::to_bf16(1.00390625f);   // the tie between 1 and 1 + 2^-7: 1
//   float f = kernels::to_float(b);                     // 1.0f
//
// The same functions run on the host (the CPU references) and in CUDA kernels, so a CUDA
// kernel that narrows the float the CPU reference computed writes the same bits.
// kernels::bf16 has __nv_bfloat16's layout (one uint16) but needs no CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/bf16.h"

namespace meshsim::kernels {

struct bf16 {
  std::uint16_t bits = 0;
};
static_assert(sizeof(bf16) == 2);

// Exact: every bf16 is a float.
MESHSIM_HD float to_float(bf16 b) { return bf16_value(b.bits); }

// Round to nearest, ties to even (core/bf16.h).
MESHSIM_HD bf16 to_bf16(float f) { return bf16{bf16_bits(f)}; }

// Overloads so templated code reads and writes either storage type as float.
MESHSIM_HD float load(const float* p, std::size_t i) { return p[i]; }
MESHSIM_HD float load(const bf16* p, std::size_t i) { return to_float(p[i]); }
MESHSIM_HD void store(float* p, std::size_t i, float v) { p[i] = v; }
MESHSIM_HD void store(bf16* p, std::size_t i, float v) { p[i] = to_bf16(v); }

// Host bulk conversions (the CPU references' bf16 calls: widen, compute in float, narrow).
inline void widen(const bf16* src, float* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = to_float(src[i]);
}
inline void narrow(const float* src, bf16* dst, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
}

}  // namespace meshsim::kernels
