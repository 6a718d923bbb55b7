// CUDA versions of the fp32 CPU reference kernels: same names with `_cuda` for `_cpu`, same
// arguments, layouts and semantics (accumulating parameter gradients, causal masks with
// q0/k0, -inf rows, Philox dropout bits), on device pointers and a stream.
//
//   layernorm_forward_cuda(d_x, d_gamma, d_beta, d_y, d_mean, d_rstd, rows, h, 1e-5f, stream);
//   if (int e = gelu_forward_cuda(d_x, d_y, n, stream)) ...;   // e: a cudaError_t
//
// Every function only enqueues work on `stream` (a cudaStream_t, nullptr = the legacy default
// stream) and returns the launch status as int (0 = cudaSuccess), so this header needs no CUDA
// includes; kernel faults surface at the caller's next synchronization. Sizes that do not fit
// the kernels (a row longer than 2^31 - 1 elements, head_dim > 256) return
// cudaErrorInvalidValue (1) without launching. Results match the CPU references up to float
// rounding (sums run in a different order, in float where the references use double); the
// dropout mask and reduce_max are bit-identical. Reductions run in a fixed order, so results
// are deterministic run to run (no atomics).
//
// Memory-bound kernels (LayerNorm, GeLU, SwiGLU, softmax, dropout, cross-entropy) use one
// block per row with the row held in registers as float4 when the row fits and the pointers
// are 16-byte aligned, warp shuffles for row reductions, and grid-stride loops elsewhere.
// Attention is a blocked (flash-style) kernel: shared-memory tiles of 32 keys, one warp per
// query row, online softmax, fp32 CUDA cores (no tensor cores); the backward recomputes P in
// two passes (dQ per query tile, dK/dV per key tile), so nothing is accumulated atomically.
//
// bf16 twins (mixed precision): the same names with `const bf16*` / `bf16*` (kernels/bf16.h)
// for the activation-shaped operands; statistics (mean, rstd, stats, lse, max, loss) and
// dgamma/dbeta stay float. They widen every element read (exact), compute in float exactly as
// the float kernel does (the same templated kernel), and narrow each output once with to_bf16
// (round to nearest even); accumulating bf16 outputs (attention's dq, dk, dv) read the old
// value, add in float, narrow once. So a bf16 result is to_bf16(the float computation on the
// widened inputs), up to float summation order. Same size checks as the float ones.
//
// Declared only in CUDA builds (MESHSIM_HAVE_CUDA); reduce_sum_cuda/reduce_max_cuda live in
// reduce.h. docs/kernels.md lists what has been run on a GPU.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/bf16.h"
#include "kernels/optimizer.h"

namespace meshsim::kernels {

#if defined(MESHSIM_HAVE_CUDA)

// norm.h
int layernorm_forward_cuda(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                           std::int64_t rows, std::int64_t h, float eps, void* stream);
int layernorm_backward_cuda(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                            float* dx, float* dgamma, float* dbeta, std::int64_t rows, std::int64_t h, void* stream);
int layernorm2d_stats_cuda(const float* x, float* stats, std::int64_t rows, std::int64_t h_local, void* stream);
int layernorm2d_apply_cuda(const float* x, const float* stats, const float* gamma, const float* beta, float* y,
                           float* mean, float* rstd, std::int64_t rows, std::int64_t h_local, std::int64_t h, float eps,
                           void* stream);
int layernorm2d_backward_stats_cuda(const float* dy, const float* x, const float* gamma, const float* mean,
                                    const float* rstd, float* dstats, std::int64_t rows, std::int64_t h_local,
                                    void* stream);
int layernorm2d_backward_apply_cuda(const float* dy, const float* x, const float* gamma, const float* mean,
                                    const float* rstd, const float* dstats, float* dx, float* dgamma, float* dbeta,
                                    std::int64_t rows, std::int64_t h_local, std::int64_t h, void* stream);
int layernorm_forward_cuda(const bf16* x, const bf16* gamma, const bf16* beta, bf16* y, float* mean, float* rstd,
                           std::int64_t rows, std::int64_t h, float eps, void* stream);
int layernorm_backward_cuda(const bf16* dy, const bf16* x, const bf16* gamma, const float* mean, const float* rstd,
                            bf16* dx, float* dgamma, float* dbeta, std::int64_t rows, std::int64_t h, void* stream);
int layernorm2d_stats_cuda(const bf16* x, float* stats, std::int64_t rows, std::int64_t h_local, void* stream);
int layernorm2d_apply_cuda(const bf16* x, const float* stats, const bf16* gamma, const bf16* beta, bf16* y, float* mean,
                           float* rstd, std::int64_t rows, std::int64_t h_local, std::int64_t h, float eps,
                           void* stream);
int layernorm2d_backward_stats_cuda(const bf16* dy, const bf16* x, const bf16* gamma, const float* mean,
                                    const float* rstd, float* dstats, std::int64_t rows, std::int64_t h_local,
                                    void* stream);
int layernorm2d_backward_apply_cuda(const bf16* dy, const bf16* x, const bf16* gamma, const float* mean,
                                    const float* rstd, const float* dstats, bf16* dx, float* dgamma, float* dbeta,
                                    std::int64_t rows, std::int64_t h_local, std::int64_t h, void* stream);
int rmsnorm_forward_cuda(const float* x, const float* gamma, float* y, float* rstd, std::int64_t rows, std::int64_t h,
                         float eps, void* stream);
int rmsnorm_backward_cuda(const float* dy, const float* x, const float* gamma, const float* rstd, float* dx,
                          float* dgamma, std::int64_t rows, std::int64_t h, void* stream);
int rmsnorm_forward_cuda(const bf16* x, const bf16* gamma, bf16* y, float* rstd, std::int64_t rows, std::int64_t h,
                         float eps, void* stream);
int rmsnorm_backward_cuda(const bf16* dy, const bf16* x, const bf16* gamma, const float* rstd, bf16* dx, float* dgamma,
                          std::int64_t rows, std::int64_t h, void* stream);

// rope.h (cs: the float [tokens, d] angle table)
int rope_forward_cuda(const float* x, const float* cs, float* y, std::int64_t rows, std::int64_t heads, std::int64_t d,
                      void* stream);
int rope_backward_cuda(const float* dy, const float* cs, float* dx, std::int64_t rows, std::int64_t heads,
                       std::int64_t d, void* stream);
int rope_forward_cuda(const bf16* x, const float* cs, bf16* y, std::int64_t rows, std::int64_t heads, std::int64_t d,
                      void* stream);
int rope_backward_cuda(const bf16* dy, const float* cs, bf16* dx, std::int64_t rows, std::int64_t heads, std::int64_t d,
                       void* stream);

// elementwise.h
int gelu_forward_cuda(const float* x, float* y, std::size_t n, void* stream);
int gelu_backward_cuda(const float* dy, const float* x, float* dx, std::size_t n, void* stream);
int swiglu_forward_cuda(const float* a, const float* b, std::int64_t ld_in, float* out, std::int64_t rows,
                        std::int64_t cols, void* stream);
int swiglu_backward_cuda(const float* dout, const float* a, const float* b, std::int64_t ld_in, float* da, float* db,
                         std::int64_t rows, std::int64_t cols, void* stream);
int gelu_forward_cuda(const bf16* x, bf16* y, std::size_t n, void* stream);
int gelu_backward_cuda(const bf16* dy, const bf16* x, bf16* dx, std::size_t n, void* stream);
int swiglu_forward_cuda(const bf16* a, const bf16* b, std::int64_t ld_in, bf16* out, std::int64_t rows,
                        std::int64_t cols, void* stream);
int swiglu_backward_cuda(const bf16* dout, const bf16* a, const bf16* b, std::int64_t ld_in, bf16* da, bf16* db,
                         std::int64_t rows, std::int64_t cols, void* stream);
int add_bias_cuda(float* y, const float* bias, std::int64_t rows, std::int64_t cols, void* stream);
int bias_backward_cuda(const float* dy, float* dbias, std::int64_t rows, std::int64_t cols, void* stream);

// dropout.h
int dropout_forward_cuda(const float* x, float* y, std::size_t n, float p, std::uint64_t seed, std::uint64_t offset,
                         void* stream);
int dropout_backward_cuda(const float* dy, float* dx, std::size_t n, float p, std::uint64_t seed, std::uint64_t offset,
                          void* stream);
int dropout_forward_cuda(const bf16* x, bf16* y, std::size_t n, float p, std::uint64_t seed, std::uint64_t offset,
                         void* stream);
int dropout_backward_cuda(const bf16* dy, bf16* dx, std::size_t n, float p, std::uint64_t seed, std::uint64_t offset,
                          void* stream);
// y = dropout(x) + residual in one pass (Megatron's fused dropout-add; no CPU twin of its
// own): for float, bit-identical to dropout_forward_cpu(x -> y) then reduce_sum_cpu(y +=
// residual) (the multiply and the add are separate IEEE operations, never fused into an FMA);
// for bf16, to_bf16 of that float result on the widened inputs (one rounding). y may alias x
// or residual.
int dropout_add_forward_cuda(const float* x, const float* residual, float* y, std::size_t n, float p,
                             std::uint64_t seed, std::uint64_t offset, void* stream);
int dropout_add_forward_cuda(const bf16* x, const bf16* residual, bf16* y, std::size_t n, float p, std::uint64_t seed,
                             std::uint64_t offset, void* stream);

// attention.h
int softmax_forward_cuda(const float* x, float* y, std::int64_t batches, std::int64_t seq_q, std::int64_t seq_k,
                         float scale, AttentionMask mask, void* stream);
int softmax_backward_cuda(const float* dy, const float* y, float* dx, std::int64_t batches, std::int64_t seq_q,
                          std::int64_t seq_k, float scale, void* stream);
int attention_forward_cuda(const float* q, const float* k, const float* v, float* o, float* lse,
                           const AttentionShape& shape, float scale, AttentionMask mask, void* stream);
// D_i = dO_i . o_i is recomputed inside each pass (no scratch buffer).
int attention_backward_cuda(const float* q, const float* k, const float* v, const float* o, const float* dout,
                            const float* lse, float* dq, float* dk, float* dv, const AttentionShape& shape, float scale,
                            AttentionMask mask, void* stream);
int attention_merge_cuda(const float* o1, const float* lse1, const float* o2, const float* lse2, float* o, float* lse,
                         std::int64_t rows, std::int64_t head_dim, void* stream);
int softmax_forward_cuda(const bf16* x, bf16* y, std::int64_t batches, std::int64_t seq_q, std::int64_t seq_k,
                         float scale, AttentionMask mask, void* stream);
int softmax_backward_cuda(const bf16* dy, const bf16* y, bf16* dx, std::int64_t batches, std::int64_t seq_q,
                          std::int64_t seq_k, float scale, void* stream);
int attention_forward_cuda(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse,
                           const AttentionShape& shape, float scale, AttentionMask mask, void* stream);
// bf16 dq, dk, dv accumulate too: old value widened, the pass's sum added in float, narrowed once.
int attention_backward_cuda(const bf16* q, const bf16* k, const bf16* v, const bf16* o, const bf16* dout,
                            const float* lse, bf16* dq, bf16* dk, bf16* dv, const AttentionShape& shape, float scale,
                            AttentionMask mask, void* stream);
int attention_merge_cuda(const bf16* o1, const float* lse1, const bf16* o2, const float* lse2, bf16* o, float* lse,
                         std::int64_t rows, std::int64_t head_dim, void* stream);
int split_heads_cuda(const float* src, std::int64_t ld, float* dst, std::int64_t batch, std::int64_t seq,
                     std::int64_t heads, std::int64_t head_dim, void* stream);
int merge_heads_cuda(const float* src, float* dst, std::int64_t ld, std::int64_t batch, std::int64_t seq,
                     std::int64_t heads, std::int64_t head_dim, void* stream);

// vocab.h (targets and ids are device arrays of int64)
int cross_entropy_local_max_cuda(const float* logits, float* local_max, std::int64_t rows, std::int64_t v_local,
                                 void* stream);
int cross_entropy_local_stats_cuda(const float* logits, const float* global_max, const std::int64_t* targets,
                                   float* stats, std::int64_t rows, std::int64_t v_local, std::int64_t v0,
                                   void* stream);
int cross_entropy_loss_cuda(const float* global_max, const float* stats, const std::int64_t* targets, float* loss,
                            std::int64_t rows, void* stream);
int cross_entropy_backward_cuda(const float* logits, const float* global_max, const float* stats,
                                const std::int64_t* targets, float grad_scale, float* dlogits, std::int64_t rows,
                                std::int64_t v_local, std::int64_t v0, void* stream);
int cross_entropy_local_max_cuda(const bf16* logits, float* local_max, std::int64_t rows, std::int64_t v_local,
                                 void* stream);
int cross_entropy_local_stats_cuda(const bf16* logits, const float* global_max, const std::int64_t* targets,
                                   float* stats, std::int64_t rows, std::int64_t v_local, std::int64_t v0,
                                   void* stream);
int cross_entropy_backward_cuda(const bf16* logits, const float* global_max, const float* stats,
                                const std::int64_t* targets, float grad_scale, bf16* dlogits, std::int64_t rows,
                                std::int64_t v_local, std::int64_t v0, void* stream);
int embedding_forward_cuda(const std::int64_t* ids, const float* table, float* out, std::int64_t rows, std::int64_t h,
                           std::int64_t v_local, std::int64_t v0, void* stream);
// Deterministic: one thread per column walks the rows in order (bit-identical to the CPU
// reference, but only h threads of parallelism).
int embedding_backward_cuda(const std::int64_t* ids, const float* dout, float* dtable, std::int64_t rows,
                            std::int64_t h, std::int64_t v_local, std::int64_t v0, void* stream);

// optimizer.h
int adamw_step_cuda(float* p, const float* g, float* m, float* v, std::size_t n, const AdamW& hp, std::int64_t step,
                    void* stream);

#endif  // MESHSIM_HAVE_CUDA

}  // namespace meshsim::kernels
