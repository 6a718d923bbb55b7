// Dropout driven by a counter-based RNG (Philox4x32-10), reproducible by construction.
//
// Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3",
// SC 2011) maps a 128-bit counter and a 64-bit key to 128 random bits with 10 rounds of
//   (c0, c1, c2, c3) -> (hi(M1*c2) ^ c1 ^ k0, lo(M1*c2), hi(M0*c0) ^ c3 ^ k1, lo(M0*c0)),
// M0 = 0xD2511F53, M1 = 0xCD9E8D57, the key bumped by (0x9E3779B9, 0xBB67AE85) between rounds.
//
// Element i of a dropout call with (seed, offset) uses global index j = offset + i:
//   bits = philox4x32_10(counter = {lo32(j/4), hi32(j/4), 0, 0}, key = {lo32(seed), hi32(seed)})[j % 4]
//   u    = (bits >> 8) * 2^-24                 in [0, 1), 24 bits, exact in float
//   keep = u >= p                              (p = drop probability)
//   y    = keep ? x * s : 0,  dx = keep ? dy * s : 0,  s = 1.f / (1 - p) in float  (p = 1: all 0)
// So a mask depends only on (seed, offset + i): a recomputed forward (activation
// checkpointing) regenerates it, the backward needs no stored mask, and a shard that owns
// elements [o, o + n) of a tensor calls with offset + o and gets exactly its slice.
//
//   dropout_forward_cpu(x, y, n, 0.1f, seed, offset);
//   dropout_backward_cpu(dy, dx, n, 0.1f, seed, offset);   // same seed and offset
//
// y may alias x, dx may alias dy. The CUDA kernels in cuda_ops.h mirror these signatures (one thread per
// Philox counter, i.e. four consecutive global indices).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace meshsim::kernels {

using PhiloxCounter = std::array<std::uint32_t, 4>;
using PhiloxKey = std::array<std::uint32_t, 2>;

PhiloxCounter philox4x32_10(PhiloxCounter counter, PhiloxKey key);

// The uniform in [0, 1) for global element index j under seed (see the header comment).
float dropout_uniform(std::uint64_t seed, std::uint64_t j);

void dropout_forward_cpu(const float* x, float* y, std::size_t n, float p, std::uint64_t seed, std::uint64_t offset);
void dropout_backward_cpu(const float* dy, float* dx, std::size_t n, float p, std::uint64_t seed, std::uint64_t offset);

}  // namespace meshsim::kernels
