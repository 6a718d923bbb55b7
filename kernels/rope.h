// Rotary position embedding (RoPE; Su et al. 2021) as Megatron-core and Transformer Engine apply
// it to queries and keys: the "rotate half" form, which pairs element i of a head with element
// i + d/2 (not neighbours) and turns each pair by its token's angle.
//
// x is [tokens, heads, d] row-major (rows = tokens x heads, d even); row r is token r / heads.
// cs is the angle table, [tokens, d] float: cs[t*d + i] = cos(a[t][i]), cs[t*d + d/2 + i] =
// sin(a[t][i]) for i < d/2 (rope_table_cpu fills it: a = position * base^(-2i/d)). Per row and
// i < d/2, with c, s the row's token's cos and sin:
//   forward:  y[i] = x[i] c - x[i + d/2] s,    y[i + d/2] = x[i + d/2] c + x[i] s
//   backward: dx[i] = dy[i] c + dy[i + d/2] s,  dx[i + d/2] = dy[i + d/2] c - dy[i] s
// The backward is the transposed (inverse) rotation, so it needs no saved input. Outputs may
// alias their input.
//
//   rope_table_cpu(cs, tokens, d, /*seq=*/4096, /*base=*/10000.0);   // positions t % seq
//   rope_forward_cpu(q, cs, q_out, tokens * heads, heads, d);
//
// The CUDA kernels in cuda_ops.h mirror these signatures.
#pragma once

#include <cstdint>

namespace meshsim::kernels {

// cs for `tokens` tokens at positions t % seq (the tokens of a micro-batch, sequence after
// sequence), angle base^(-2i/d) per position.
void rope_table_cpu(float* cs, std::int64_t tokens, std::int64_t d, std::int64_t seq, double base);

void rope_forward_cpu(const float* x, const float* cs, float* y, std::int64_t rows, std::int64_t heads, std::int64_t d);
void rope_backward_cpu(const float* dy, const float* cs, float* dx, std::int64_t rows, std::int64_t heads,
                       std::int64_t d);

}  // namespace meshsim::kernels
