// bfloat16 storage: the 16-bit format mixed-precision training keeps activations, weights
// and their gradients in (1 sign, 8 exponent, 7 mantissa bits: float32's range, 8 bits of
// precision). Our bf16 kernels store bf16 and compute in float: they widen every element
// they read (exact) and narrow every element they write, rounding to nearest, ties to even
// (what cuBLAS, cuDNN and __float2bfloat16_rn do). One narrowing moves a value by at most
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
#include <cstring>

#if defined(__CUDACC__)
#define MESHSIM_HD __host__ __device__ __forceinline__
#else
#define MESHSIM_HD inline
#endif

namespace meshsim::kernels {

struct bf16 {
  std::uint16_t bits = 0;
};
static_assert(sizeof(bf16) == 2);

MESHSIM_HD std::uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}
MESHSIM_HD float bits_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Exact: every bf16 is a float.
MESHSIM_HD float to_float(bf16 b) { return bits_float(static_cast<std::uint32_t>(b.bits) << 16); }

// Round to nearest, ties to even; NaN stays NaN (quiet), infinities stay, values past the
// largest bf16 (~3.39e38) round to infinity as IEEE rounding does.
MESHSIM_HD bf16 to_bf16(float f) {
  const std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<std::uint16_t>((u >> 16) | 0x0040u)};
  const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<std::uint16_t>(rounded >> 16)};
}

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
// In place: each float becomes the nearest bf16 value (a bf16 store read back), for code
// that keeps bf16 data in float32 slots.
inline void round_to_bf16(float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] = to_float(to_bf16(x[i]));
}

}  // namespace meshsim::kernels
