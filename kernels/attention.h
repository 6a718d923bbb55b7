// Softmax, scaled dot-product attention (blocked, flash-style) and the log-sum-exp merge
// that ring attention uses, forward and backward, plus the head layout permutations.
//
// Layout: Q, O, dQ, dO are [BH, Sq, D] and K, V, dK, dV are [BH, Skv, D], row-major, where
// BH = batch * heads (batch outer), Sq/Skv the query/key lengths, D the head dimension; LSE
// is [BH, Sq]. Per query row i and key j (scores s_ij = scale * q_i . k_j):
//   lse_i = log sum_{j unmasked} exp(s_ij),  P_ij = exp(s_ij - lse_i),  o_i = sum_j P_ij v_j
// Causal mask with global offsets: query row i sits at global position q0 + i, key j at
// k0 + j, and j is masked when k0 + j > q0 + i. A ring-attention step passes the global
// starts of its query chunk and of the KV chunk in hand. A row with every key masked has
// lse = -inf and o = 0 (never NaN); its gradients are 0.
//
// Backward (FlashAttention-2 form), with D_i = dO_i . o_i:
//   dP_ij = dO_i . v_j,  dS_ij = P_ij (dP_ij - D_i),
//   dQ_i += scale sum_j dS_ij k_j,  dK_j += scale sum_i dS_ij q_i,  dV_j += sum_i P_ij dO_i
// dQ, dK and dV all ACCUMULATE (+=); zero them before the first call. Ring attention calls
// the backward once per KV chunk with the FINAL (merged) o and lse of its queries, and the
// per-chunk contributions to dQ (local) and to dK/dV (travelling with the chunk) add up to
// the gradient of attention over the union.
//
// Merge (docs/math.md section 7): attention over disjoint key sets 1 and 2 combines as
//   lse = log(exp(lse1) + exp(lse2)),  o = exp(lse1 - lse) o1 + exp(lse2 - lse) o2
// and equals attention over the union; -inf inputs are handled (both -inf gives -inf, 0).
//
//   AttentionShape shape{batch * heads, seq_q, seq_kv, head_dim};
//   AttentionMask mask{.causal = true, .q0 = rank * seq_q, .k0 = chunk * seq_kv};
//   attention_forward_cpu(q, k, v, o, lse, shape, 1 / std::sqrt(float(head_dim)), mask);
//   attention_merge_cpu(o_acc, lse_acc, o, lse, o_acc, lse_acc, batch * heads * seq_q, head_dim);
//   attention_backward_cpu(q, k, v, o_acc, dout, lse_acc, dq, dk, dv, shape, scale, mask);
//
// Softmax over rows of [batches, Sq, Sk] scores x: y = softmax(scale * x) with the same
// causal mask (row i of every batch at q0 + i); dx = scale * y * (dy - sum_j dy_j y_j).
//
// Head permutations: token activations are [batch * seq, ...] rows (batch outer); head h of
// a token row is columns [h * D, (h + 1) * D) of the slice starting at src with row stride
// ld, so split_heads_cpu(qkv + h_q_offset, 3 * hidden, ...) picks Q, K or V out of a fused
// [tokens, 3 * hidden] projection. merge_heads_cpu is the inverse and also the backward of
// split_heads_cpu (and vice versa).
//
// Work is split over (batch*head, query block) or (batch*head, key row); every reduction
// runs serially in a fixed order, so results do not depend on the thread count. The CUDA
// kernels in cuda_ops.h mirror these signatures.
#pragma once

#include <cstdint>

namespace meshsim::kernels {

struct AttentionShape {
  std::int64_t batch_heads = 0;  // BH = batch * heads
  std::int64_t seq_q = 0;
  std::int64_t seq_kv = 0;
  std::int64_t head_dim = 0;
};

struct AttentionMask {
  bool causal = false;
  std::int64_t q0 = 0;  // global position of query row 0
  std::int64_t k0 = 0;  // global position of key 0
  bool masked(std::int64_t i, std::int64_t j) const { return causal && k0 + j > q0 + i; }
};

void softmax_forward_cpu(const float* x, float* y, std::int64_t batches, std::int64_t seq_q, std::int64_t seq_k,
                         float scale, AttentionMask mask);
// Masked entries have y = 0, so the backward needs no mask.
void softmax_backward_cpu(const float* dy, const float* y, float* dx, std::int64_t batches, std::int64_t seq_q,
                          std::int64_t seq_k, float scale);

void attention_forward_cpu(const float* q, const float* k, const float* v, float* o, float* lse,
                           const AttentionShape& shape, float scale, AttentionMask mask);
void attention_backward_cpu(const float* q, const float* k, const float* v, const float* o, const float* dout,
                            const float* lse, float* dq, float* dk, float* dv, const AttentionShape& shape, float scale,
                            AttentionMask mask);

// rows = BH * Sq. o may alias o1 or o2 and lse may alias lse1 or lse2.
void attention_merge_cpu(const float* o1, const float* lse1, const float* o2, const float* lse2, float* o, float* lse,
                         std::int64_t rows, std::int64_t head_dim);

// src: [batch * seq] token rows with row stride ld, heads * head_dim columns used;
// dst: [batch * heads, seq, head_dim] contiguous.
void split_heads_cpu(const float* src, std::int64_t ld, float* dst, std::int64_t batch, std::int64_t seq,
                     std::int64_t heads, std::int64_t head_dim);
// Inverse: src [batch * heads, seq, head_dim] -> dst token rows with row stride ld.
void merge_heads_cpu(const float* src, float* dst, std::int64_t ld, std::int64_t batch, std::int64_t seq,
                     std::int64_t heads, std::int64_t head_dim);

}  // namespace meshsim::kernels
