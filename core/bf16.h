// bfloat16 rounding, the one definition every layer shares: the kernels' bf16 storage
// (kernels/bf16.h), the CPU references, and the executors that sum bf16 data as NCCL does
// (schedule/reference_executor.h, ReduceIn::Bf16). bf16 is float32's upper 16 bits: 1 sign,
// 8 exponent, 7 mantissa bits. A float rounds to the nearest bf16, ties to even (what cuBLAS,
// cuDNN and __float2bfloat16_rn do), moving it by at most half a unit in its last place,
// 2^-8 |x| (docs/numerics.md, "bf16").
//
//   std::uint16_t b = bf16_bits(1.00390625f);   // the tie between 1 and 1 + 2^-7: 1 (0x3f80)
//   float f = bf16_value(b);                     // 1.0f
//
// The same functions run on the host and in CUDA kernels (MESHSIM_HD), so a CUDA kernel that
// narrows the float the CPU reference computed writes the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MESHSIM_HD __host__ __device__ __forceinline__
#else
#define MESHSIM_HD inline
#endif

namespace meshsim {

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

// Round to nearest, ties to even; NaN stays NaN (quiet), infinities stay, values past the
// largest bf16 (~3.39e38) round to infinity as IEEE rounding does.
MESHSIM_HD std::uint16_t bf16_bits(float f) {
  const std::uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  const std::uint32_t rounded = u + 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(rounded >> 16);
}
// Exact: every bf16 is a float.
MESHSIM_HD float bf16_value(std::uint16_t bits) { return bits_float(static_cast<std::uint32_t>(bits) << 16); }

// The nearest bf16 value of x, as a float (a bf16 store read back): for code that keeps
// bf16 data in float32 slots; in place over n floats below.
MESHSIM_HD float round_to_bf16(float x) { return bf16_value(bf16_bits(x)); }
inline void round_to_bf16(float* x, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) x[i] = round_to_bf16(x[i]);
}

}  // namespace meshsim
