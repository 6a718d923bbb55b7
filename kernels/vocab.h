// Vocabulary-parallel cross-entropy and embedding (Megatron style): the vocabulary of V
// entries is split over t ranks, rank k holding columns [v0, v0 + v_local) of the logits
// and rows [v0, v0 + v_local) of the embedding table. Targets and token ids are global.
//
// Cross-entropy of logits l[rows, V] against targets y (a target < 0 marks an ignored row:
// loss 0, gradient 0), computed per shard around two all-reduces:
//   1. local_max[r] = max_j l[r, j] over the shard   -> all-reduce(max) -> global_max  (M)
//   2. stats[r][2] = {sum_j exp(l[r, j] - M[r]),  l[r, y_r] if y_r is in the shard else 0}
//                                                     -> all-reduce(sum) -> global stats
//   3. loss[r] = log(S[r]) + M[r] - l[r, y_r]          (same on every rank)
//   4. dl[r, j] = grad_scale * (exp(l[r, j] - M[r]) / S[r] - [j == y_r])   (local shard)
// with grad_scale e.g. 1 / (number of non-ignored rows) for a mean loss. With t = 1 and
// v0 = 0 the same calls give the unsharded cross-entropy.
//
//   cross_entropy_local_max_cpu(logits, max, rows, v_local);
//   // all-reduce max over the TP group (reduce_max_cpu in step programs)
//   cross_entropy_local_stats_cpu(logits, max, targets, stats, rows, v_local, v0);
//   // all-reduce sum of stats (2 * rows floats)
//   cross_entropy_loss_cpu(max, stats, targets, loss, rows);
//   cross_entropy_backward_cpu(logits, max, stats, targets, 1.f / rows, dlogits, rows, v_local, v0);
//
// Embedding: out[r, :] = table[id_r - v0, :] when id_r is in the shard, else 0 (summing
// the shards' outputs, an all-reduce, gives the full lookup); the backward ACCUMULATES
// dtable[id_r - v0, :] += dout[r, :] for in-shard ids, serially over r (deterministic).
// The CUDA kernels in cuda_ops.h mirror these signatures.
#pragma once

#include <cstdint>

namespace meshsim::kernels {

void cross_entropy_local_max_cpu(const float* logits, float* local_max, std::int64_t rows, std::int64_t v_local);
void cross_entropy_local_stats_cpu(const float* logits, const float* global_max, const std::int64_t* targets,
                                   float* stats, std::int64_t rows, std::int64_t v_local, std::int64_t v0);
void cross_entropy_loss_cpu(const float* global_max, const float* stats, const std::int64_t* targets, float* loss,
                            std::int64_t rows);
// dlogits may alias logits.
void cross_entropy_backward_cpu(const float* logits, const float* global_max, const float* stats,
                                const std::int64_t* targets, float grad_scale, float* dlogits, std::int64_t rows,
                                std::int64_t v_local, std::int64_t v0);

void embedding_forward_cpu(const std::int64_t* ids, const float* table, float* out, std::int64_t rows, std::int64_t h,
                           std::int64_t v_local, std::int64_t v0);
void embedding_backward_cpu(const std::int64_t* ids, const float* dout, float* dtable, std::int64_t rows,
                            std::int64_t h, std::int64_t v_local, std::int64_t v0);

}  // namespace meshsim::kernels
