// The fp32 kernels of a GPT-style transformer, forward and backward, as one include.
//
// Each op is a free function on plain row-major pointers and int64 sizes (no ownership),
// named *_cpu for the CPU reference that the cpu backend runs; the CUDA kernels in
// cuda_ops.h mirror the same signatures on device pointers (*_cuda) and are tested against these. Parameter
// gradients (dW via beta = 1, dgamma, dbeta, dbias, dtable) and attention's dQ/dK/dV
// ACCUMULATE (+=); every other output is overwritten. Formulas live in each header and in
// docs/kernels.md.
//
//   gemm.h         gemm_cpu                          C = alpha op(A) op(B) + beta C (OpenBLAS)
//   norm.h         layernorm_*_cpu, layernorm2d_*_cpu  LayerNorm, whole rows or split over q ranks
//   elementwise.h  gelu_*, swiglu_*, add_bias, bias_backward
//   dropout.h      philox4x32_10, dropout_*_cpu      counter-based, keyed by (seed, offset + i)
//   attention.h    softmax_*, attention_*, attention_merge_cpu, split_heads/merge_heads
//   vocab.h        cross_entropy_*_cpu, embedding_*_cpu   vocabulary-parallel
//   reduce.h       reduce_sum_cpu, reduce_max_cpu    what collective step programs reduce with
//   optimizer.h    adamw_step_cpu                    one AdamW step on fp32 master weights
//
// One pre-LN attention block on tokens x[T = batch * seq, H] (heads n, head_dim D = H / n):
//
//   layernorm_forward_cpu(x, g1, b1, xn, mu1, rs1, T, H, 1e-5f);
//   gemm_cpu(Trans::No, Trans::No, T, 3 * H, H, 1, xn, H, Wqkv, 3 * H, 0, qkv, 3 * H);
//   add_bias_cpu(qkv, bqkv, T, 3 * H);
//   split_heads_cpu(qkv,         3 * H, q, batch, seq, n, D);
//   split_heads_cpu(qkv + H,     3 * H, k, batch, seq, n, D);
//   split_heads_cpu(qkv + 2 * H, 3 * H, v, batch, seq, n, D);
//   attention_forward_cpu(q, k, v, o, lse, {batch * n, seq, seq, D}, 1 / std::sqrt(float(D)),
//                         {.causal = true});
//   merge_heads_cpu(o, ctx, H, batch, seq, n, D);
//   gemm_cpu(Trans::No, Trans::No, T, H, H, 1, ctx, H, Wo, H, 0, a, H);
//   add_bias_cpu(a, bo, T, H);
//   dropout_forward_cpu(a, a, T * H, 0.1f, seed, layer_offset);
//   reduce_sum_cpu(a, x, T * H);                                  // residual: a = x + a
//
// and its backward, given da (zero dq, dk, dv, dWqkv, ... first):
//
//   dropout_backward_cpu(da, dd, T * H, 0.1f, seed, layer_offset);     // dx = da + (this path)
//   bias_backward_cpu(dd, dbo, T, H);
//   gemm_cpu(Trans::Yes, Trans::No, H, H, T, 1, ctx, H, dd, H, 1, dWo, H);
//   gemm_cpu(Trans::No, Trans::Yes, T, H, H, 1, dd, H, Wo, H, 0, dctx, H);
//   split_heads_cpu(dctx, H, dout, batch, seq, n, D);
//   attention_backward_cpu(q, k, v, o, dout, lse, dq, dk, dv, shape, scale, {.causal = true});
//   merge_heads_cpu(dq, dqkv, 3 * H, ...); merge_heads_cpu(dk, dqkv + H, ...); (dv likewise)
//   bias_backward_cpu(dqkv, dbqkv, T, 3 * H);
//   gemm_cpu(Trans::Yes, Trans::No, H, 3 * H, T, 1, xn, H, dqkv, 3 * H, 1, dWqkv, 3 * H);
//   gemm_cpu(Trans::No, Trans::Yes, T, H, 3 * H, 1, dqkv, 3 * H, Wqkv, 3 * H, 0, dxn, H);
//   layernorm_backward_cpu(dxn, x, g1, mu1, rs1, dx1, dg1, db1, T, H);
//   reduce_sum_cpu(dx1, da, T * H);                                   // plus the residual path
//
// The MLP block is the same with gelu_forward_cpu / gelu_backward_cpu (or swiglu_*) between
// two linear layers.
#pragma once

#include "kernels/attention.h"
#include "kernels/dropout.h"
#include "kernels/elementwise.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/optimizer.h"
#include "kernels/reduce.h"
#include "kernels/vocab.h"
