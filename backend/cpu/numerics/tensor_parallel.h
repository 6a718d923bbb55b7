// Megatron tensor parallelism and sequence parallelism on top of it (docs/math.md
// section 5) for the numerics tests: every layer of the reference model on the t ranks of
// `tp`, each holding its shard of every weight (built with init_block, no communication).
//
//   shard of rank r (t ranks):  attn.wqkv/bqkv columns of heads [r n/t, (r+1) n/t) of each of
//     Q, K, V;  attn.wo rows of the same heads;  mlp.w1/b1 columns [r f/t, (r+1) f/t);
//     mlp.w2 rows of the same;  embed (and head) rows [r V/t, (r+1) V/t) (vocab-parallel);
//     LayerNorms, attn.bo, mlp.b2: replicated.
//   attention: xn -> f -> QKV (column-parallel) -> local heads -> proj (row-parallel) -> g-bar
//   MLP:       xn -> f -> fc1 (column) -> GeLU -> fc2 (row) -> g-bar
//   TP:  f = identity fwd / all-reduce bwd;  g-bar = all-reduce fwd / identity bwd; every rank
//        holds all B*S token rows for LayerNorm, dropout and the residual.
//   SP:  tokens rows are split in t contiguous blocks of B*S/t (with B = 1 exactly the sequence
//        split of Korthikanti et al.; here over the flattened batch-outer rows); LayerNorm,
//        dropout and residual run on the block; f = all-gather fwd / reduce-scatter bwd,
//        g-bar = reduce-scatter fwd / all-gather bwd; gradients of the replicated LayerNorm
//        and bias parameters are partial per rank and all-reduced at the end.
//   bf16 (cfg.bf16): as the single rank (model.h), plus: a row-parallel GEMM's partial is
//   rounded to bf16 before g-bar, and g-bar / f-backward sum in bf16 (ReduceIn::Bf16, as
//   NCCL sums Megatron's bf16 activations); the cross-entropy's statistics and the SP
//   gradient sums stay fp32. Pass bf16_copy of the shard.
//   embedding: vocab-parallel lookup (zeros outside the shard) -> g-bar;  head: LN_f on the
//   local rows -> f -> logits shard [B*S, V/t] -> vocab-parallel cross-entropy (all-reduce of
//   the row max, then of {sum exp, target logit}) -> dlogits shard -> dx partial -> f backward.
//
//   Comm tp(transport, {0, 1}, registry);
//   TensorMap shard = tp_shard_params(cfg, tp.size(), tp.rank());
//   TpStep s = tensor_parallel_step(cfg, shard, batch, tp, /*sequence_parallel=*/true);
//   TensorMap full = tp_assemble(cfg, {grads of rank 0, grads of rank 1, ...});
#pragma once

#include <vector>

#include "backend/cpu/numerics/comm.h"
#include "backend/cpu/numerics/model.h"

namespace meshsim::numerics {

// Throws Error when heads, ffn or vocab (and with SP the B*S token rows) do not divide by t.
void validate_tp(const ModelConfig& cfg, int t, bool sequence_parallel);

TensorMap tp_shard_params(const ModelConfig& cfg, int t, int rank);
// Full-shape tensors from the t ranks' shards (replicated ones taken from rank 0).
TensorMap tp_assemble(const ModelConfig& cfg, const std::vector<TensorMap>& shards);

struct TpStep {
  double loss = 0;  // mean over the batch
  Tensor logits;    // [B*S, V/t]: this rank's vocabulary columns
  TensorMap grads;  // this rank's shards (replicated tensors: the full gradient)
};

TpStep tensor_parallel_step(const ModelConfig& cfg, const TensorMap& shard, const Batch& batch, Comm& tp,
                            bool sequence_parallel);

// One residual block of layer `layer` on this rank, forward then backward: what the bf16
// tests feed the single rank's block (model.h) and this one alike. x: this rank's rows of
// the block input (all B*S rows with TP, its B*S/t with SP), dy: the same rows of the
// output's gradient. Returns the block output and the input gradient on those rows, and the
// gradients of this rank's shards (tensors of other blocks stay zero; with SP the
// replicated ones summed over the group).
enum class TpBlock { Attention, Mlp };
struct TpBlockStep {
  std::vector<float> out, dx;
  TensorMap grads;
};
TpBlockStep tp_block_step(const ModelConfig& cfg, const TensorMap& shard, int layer, TpBlock block, Comm& tp,
                          bool sequence_parallel, const std::vector<float>& x, const std::vector<float>& dy);

}  // namespace meshsim::numerics
