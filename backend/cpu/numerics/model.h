// The reference model of the numerics tests: a small GPT-style transformer, forward and
// backward on one rank in fp32, built from the kernels/ references.
//
//   ids [B*S] -> embedding (table E [V, h]) -> L x layer -> final LayerNorm
//     -> logits = x W_out^T (W_out [V, h]; W_out = E when tied) -> mean cross-entropy
//   layer:  x1 = x  + Dropout_{l,0}(Attn(LN1(x)) Wo + bo)
//           y  = x1 + Dropout_{l,1}(FFN(LN2(x1)))
//   Attn:   qkv = xn Wqkv + bqkv (columns [Q | K | V], head k at columns k*D..), causal
//           softmax(Q K^T / sqrt(D)) V per head;  FFN: GeLU MLP (W1 [h, f], W2 [f, h]) or MoE
//           (moe.h: top-k router, experts of the same MLP shape).
// Tokens are rows of [B*S, h] (batch outer): token (b, s) has global index g = b*S + s.
//
// Determinism that any partition can reproduce without communication:
//   - parameter element (r, c) of tensor `name` is init_value(cfg, info, r * cols + c), a
//     function of (seed, name, global index) only (Philox uniform), so a rank builds its
//     shard with init_block(cfg, name, r0, r1, c0, c1);
//   - dropout at (layer l, site k) on token g, column c keeps or drops by Philox with key
//     dropout_key(seed, l, k) and global index g*h + c (dropout_rows_*), whatever rows a
//     rank holds.
//
// The layer is written once over hooks, so that strategies that only change WHERE tokens
// live (DP, PP, CP, EP) reuse the token-local math and replace only the part that mixes
// tokens: the attention core (reference: whole sequences on this rank; CP: ring attention)
// and the FFN (reference: dense MLP or local MoE; EP: experts on other ranks).
//
//   ModelConfig cfg{.layers = 2, .hidden = 16, .heads = 4, .seq = 8, .batch = 2, .vocab = 32};
//   TensorMap params = init_params(cfg);
//   Batch data = make_batch(cfg, 7);
//   StepResult ref = reference_step(cfg, params, data);   // loss, logits, every gradient
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/gemm.h"

namespace meshsim::numerics {

struct MoeConfig {
  int experts = 0;  // 0: dense MLP in every layer
  int top_k = 1;
};

struct ModelConfig {
  int layers = 2;
  int hidden = 16;
  int heads = 4;
  int seq = 8;
  int batch = 2;
  int vocab = 32;
  int ffn = 32;
  float dropout = 0.f;  // drop probability at the two residual sites of every layer
  bool tied = true;     // output projection = embedding table
  MoeConfig moe;
  std::uint64_t seed = 1;
  float ln_eps = 1e-5f;
  // Mixed precision as Megatron runs it (docs/numerics.md, "bf16"): the step computes with
  // bf16 weights (bf16_copy of the fp32 masters) and rounds every activation and activation
  // gradient to bf16 where a bf16 kernel writes it; GEMMs accumulate in fp32 (in index
  // order: matmul), row statistics, the loss and the parameter gradients (fp32 main
  // gradients) stay fp32, and so do the optimizer's masters and moments. Dense layers only.
  bool bf16 = false;
  int head_dim() const { return hidden / heads; }
  std::int64_t tokens() const { return static_cast<std::int64_t>(batch) * seq; }
};

// Throws Error naming the field and the fix (heads must divide hidden, sizes positive, ...).
void validate(const ModelConfig& cfg);

struct Tensor {
  std::int64_t rows = 0, cols = 0;
  std::vector<float> data;
  Tensor() = default;
  Tensor(std::int64_t r, std::int64_t c) : rows(r), cols(c), data(static_cast<std::size_t>(r * c), 0.f) {}
  float* p() { return data.data(); }
  const float* p() const { return data.data(); }
  std::int64_t size() const { return rows * cols; }
};
using TensorMap = std::map<std::string, Tensor>;

enum class Init { Weight, Gain, Bias };
// How Megatron's tensor parallelism splits a parameter over the tp ranks (tensor_parallel.h):
// whole on every rank, by rows (the vocabulary of embed/head; the input of a row-parallel
// GEMM: attn.wo, mlp.w2), by columns (a column-parallel GEMM: mlp.w1 and its bias), or the
// fused Q, K, V columns each split by heads (attn.wqkv, attn.bqkv).
enum class TpSplit { Replicated, Rows, Cols, QkvCols };
struct ParamInfo {
  std::string name;
  std::int64_t rows = 0, cols = 0;
  Init init = Init::Weight;
  float scale = 1.f;  // weights: uniform in [-scale, scale)
  TpSplit split = TpSplit::Replicated;
};

// Every parameter of the model, in a fixed order (layer by layer). Names: "embed",
// "head" (untied only), "lnf.g", "lnf.b", and per layer "l{i}." + ln1.g ln1.b attn.wqkv
// attn.bqkv attn.wo attn.bo ln2.g ln2.b, then mlp.w1 mlp.b1 mlp.w2 mlp.b2 (dense) or
// moe.router and moe.e{k}.w1/b1/w2/b2 (MoE).
std::vector<ParamInfo> param_infos(const ModelConfig& cfg);
ParamInfo param_info(const ModelConfig& cfg, const std::string& name);     // Error if unknown
std::string layer_param(int layer, const std::string& leaf);               // "l1.attn.wo"
std::string expert_param(int layer, int expert, const std::string& leaf);  // "l1.moe.e3.w1"

float init_value(const ModelConfig& cfg, const ParamInfo& info, std::int64_t index);
// Rows [r0, r1) x columns [c0, c1) of parameter `name`.
Tensor init_block(const ModelConfig& cfg, const std::string& name, std::int64_t r0, std::int64_t r1, std::int64_t c0,
                  std::int64_t c1);
TensorMap init_params(const ModelConfig& cfg);
TensorMap zeros_like(const TensorMap& m);
// The output projection [V, h]: "embed" when tied, else "head".
const char* output_param(const ModelConfig& cfg);

struct Batch {
  std::vector<std::int64_t> ids;      // [B*S] token ids
  std::vector<std::int64_t> targets;  // [B*S] next-token targets
};
Batch make_batch(const ModelConfig& cfg, std::uint64_t data_seed);

// ---- dropout by global token index ------------------------------------------------------
std::uint64_t dropout_key(std::uint64_t seed, int layer, int site);
// x: [rows.size(), h]; row i is global token rows[i].
void dropout_rows_forward(float* x, const std::vector<std::int64_t>& rows, std::int64_t h, float p, std::uint64_t key);
void dropout_rows_backward(float* dx, const std::vector<std::int64_t>& rows, std::int64_t h, float p,
                           std::uint64_t key);
std::vector<std::int64_t> row_range(std::int64_t first, std::int64_t count);

// ---- mixed precision (cfg.bf16) -----------------------------------------------------------
// Rounds each element to the nearest bf16 (ties to even; kernels/bf16.h): what a bf16
// kernel's store does to the float it computed.
void round_bf16(float* x, std::int64_t n);
inline void round_bf16(std::vector<float>& x) { round_bf16(x.data(), std::int64_t(x.size())); }
// Rounds only when `bf16` (a step's activation boundaries): round_bf16 or nothing.
inline void round_if(bool bf16, float* x, std::int64_t n) {
  if (bf16) round_bf16(x, n);
}
// The bf16 model weights a mixed-precision step computes with: each fp32 master rounded.
TensorMap bf16_copy(const TensorMap& masters);
// With cfg.bf16, every weight must already be a bf16 value (bf16_copy); throws Error naming
// the parameter otherwise. Without, does nothing.
void require_bf16_weights(const ModelConfig& cfg, const TensorMap& weights, const char* where);

// C[m, n] = op(A) op(B) + beta C, row-major, BLAS argument order (kernels/gemm.h). fp32
// (`bf16` false): OpenBLAS. bf16: each element accumulates its k products in index order in
// fp32 from zero and adds beta C last, so an element does not depend on which other rows or
// columns share the call (OpenBLAS's order does; docs/numerics.md).
void matmul(bool bf16, kernels::Trans ta, kernels::Trans tb, std::int64_t m, std::int64_t n, std::int64_t k,
            const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);

// ---- small helpers shared by the strategies ----------------------------------------------
// y[rows, out] = x[rows, in] W[in, out] (+ b); ldw = out unless W is a column block. bf16:
// y is rounded after the bias (a GEMM with a bias epilogue writing bf16).
void linear_forward(const float* x, std::int64_t rows, std::int64_t in, const float* w, std::int64_t out,
                    const float* b, float* y, bool bf16 = false);
// dx = dy W^T (overwritten; skipped if null), dW += x^T dy, db += column sums (if non-null).
// bf16: dx is rounded; dW and db stay fp32 (main gradients).
void linear_backward(const float* dy, const float* x, std::int64_t rows, std::int64_t in, const float* w,
                     std::int64_t out, float* dx, float* dw, float* db, bool bf16 = false);
void add_into(float* dst, const float* src, std::int64_t n);

// Saved state of a hook's forward, read by its backward.
struct Saved {
  virtual ~Saved() = default;
};

// Attention core: qkv [rows, 3*hl] (columns [Q | K | V] of hl = heads_local * D) -> ctx
// [rows, hl]; backward: dctx -> dqkv (overwritten).
class AttentionCore {
 public:
  virtual ~AttentionCore() = default;
  virtual std::unique_ptr<Saved> forward(const float* qkv, std::int64_t rows, float* ctx) = 0;
  virtual void backward(const Saved& saved, const float* dctx, std::int64_t rows, float* dqkv) = 0;
};

// Causal attention over whole sequences of `seq` tokens held on this rank.
// bf16: the output and dq/dk/dv are rounded (a flash attention's bf16 stores; the
// log-sum-exp stays fp32).
class LocalAttention : public AttentionCore {
 public:
  LocalAttention(int heads, int head_dim, int seq, bool bf16 = false)
      : heads_(heads), d_(head_dim), seq_(seq), bf16_(bf16) {}
  std::unique_ptr<Saved> forward(const float* qkv, std::int64_t rows, float* ctx) override;
  void backward(const Saved& saved, const float* dctx, std::int64_t rows, float* dqkv) override;

 private:
  int heads_, d_, seq_;
  bool bf16_;
};

// FFN of a layer: xn [rows, h] -> out [rows, h] (bias included); backward: dout -> dxn
// (overwritten) and parameter gradients accumulated into `grads`.
class FfnCore {
 public:
  virtual ~FfnCore() = default;
  virtual std::unique_ptr<Saved> forward(int layer, const float* xn, std::int64_t rows, float* out) = 0;
  virtual void backward(int layer, const Saved& saved, const float* dout, std::int64_t rows, float* dxn,
                        TensorMap& grads) = 0;
};

// Dense GeLU MLP with weights [in, f] and [f, out]; b2 may be null (added by the caller, e.g.
// after a tensor-parallel all-reduce). bf16: fc1's output, the GeLU, fc2's output and every
// activation gradient rounded (linear_*).
struct MlpSaved : Saved {
  std::vector<float> x, pre, act;
};
void mlp_forward(const float* x, std::int64_t rows, std::int64_t h, std::int64_t f, const float* w1, const float* b1,
                 const float* w2, const float* b2, float* out, MlpSaved& s, bool bf16 = false);
void mlp_backward(const MlpSaved& s, const float* dout, std::int64_t rows, std::int64_t h, std::int64_t f,
                  const float* w1, const float* w2, float* dx, float* dw1, float* db1, float* dw2, float* db2,
                  bool bf16 = false);

// The dense MLP (cfg.moe.experts == 0) or the local MoE of moe.h, reading `params`.
class LocalFfn : public FfnCore {
 public:
  LocalFfn(const ModelConfig& cfg, const TensorMap& params) : cfg_(cfg), params_(params) {}
  std::unique_ptr<Saved> forward(int layer, const float* xn, std::int64_t rows, float* out) override;
  void backward(int layer, const Saved& saved, const float* dout, std::int64_t rows, float* dxn,
                TensorMap& grads) override;

 private:
  const ModelConfig& cfg_;
  const TensorMap& params_;
};

struct LayerCache {
  std::vector<std::int64_t> rows;  // global token index of each local row
  std::vector<float> x, xn1, mu1, rs1, qkv, ctx, x1, xn2, mu2, rs2;
  std::unique_ptr<Saved> attn, ffn;
};

// The layer's two residual blocks, each usable alone (the bf16 TP test feeds both sides of
// a block the same input):
//   attention block  x  -> x1 = x  + Dropout(Attn(LN1(x)) Wo + bo)   (x1 left in cache.x1)
//   FFN block        x1 -> y  = x1 + Dropout(FFN(LN2(x1)))
// and their backwards (dy -> dx1, dx1 -> dx; gradients accumulated into grads).
void attention_block_forward(const ModelConfig& cfg, const TensorMap& params, int layer,
                             const std::vector<std::int64_t>& rows, const float* x, AttentionCore& attn, LayerCache& c);
void ffn_block_forward(const ModelConfig& cfg, const TensorMap& params, int layer,
                       const std::vector<std::int64_t>& rows, const float* x1, float* out, FfnCore& ffn, LayerCache& c);
void ffn_block_backward(const ModelConfig& cfg, const TensorMap& params, int layer, const LayerCache& c,
                        const float* dy, float* dx1, FfnCore& ffn, TensorMap& grads);
void attention_block_backward(const ModelConfig& cfg, const TensorMap& params, int layer, const LayerCache& c,
                              const float* dx1, float* dx, AttentionCore& attn, TensorMap& grads);

// x: [rows.size(), h] in, layer output out (may not alias x). `params` holds the layer's
// LayerNorm and attention tensors (the FFN reads its own).
void layer_forward(const ModelConfig& cfg, const TensorMap& params, int layer, const std::vector<std::int64_t>& rows,
                   const float* x, float* out, AttentionCore& attn, FfnCore& ffn, LayerCache& cache);
// dy -> dx (overwritten); gradients accumulated into grads.
void layer_backward(const ModelConfig& cfg, const TensorMap& params, int layer, const LayerCache& cache,
                    const float* dy, float* dx, AttentionCore& attn, FfnCore& ffn, TensorMap& grads);

void embed_forward(const ModelConfig& cfg, const TensorMap& params, const std::int64_t* ids, std::int64_t rows,
                   float* x);
void embed_backward(const ModelConfig& cfg, const std::int64_t* ids, std::int64_t rows, const float* dx,
                    TensorMap& grads);

// Final LayerNorm, logits, cross-entropy with gradient scale `grad_scale` (1 / global tokens
// for the mean loss): returns the SUM of per-token losses, writes logits [rows, V] and
// dx [rows, h], accumulates lnf and output-projection gradients.
double head_forward_backward(const ModelConfig& cfg, const TensorMap& params, const float* x, std::int64_t rows,
                             const std::int64_t* targets, float grad_scale, float* logits, float* dx, TensorMap& grads);

struct StepResult {
  double loss = 0;  // mean over tokens
  Tensor logits;    // [B*S, V]
  TensorMap grads;
};
// One forward and backward of the whole batch on this rank.
StepResult reference_step(const ModelConfig& cfg, const TensorMap& params, const Batch& batch);

// Forward and backward of sequences [first_seq, first_seq + nseq) of `batch` with the given
// hooks (the token-local math of reference_step): loss is the SUM over those tokens,
// logits [nseq*S, V], gradients scaled for the mean over ALL cfg.tokens() tokens, so that
// summing partial_step over a split of the batch gives reference_step.
StepResult partial_step(const ModelConfig& cfg, const TensorMap& params, const Batch& batch, int first_seq, int nseq,
                        AttentionCore& attn, FfnCore& ffn);

// The same over any set of global token rows (each row g = b*S + s, in the order the
// attention core expects them): embeddings, layers, head and loss on those rows only.
StepResult rows_step(const ModelConfig& cfg, const TensorMap& params, const Batch& batch,
                     const std::vector<std::int64_t>& rows, AttentionCore& attn, FfnCore& ffn);

// All parameters as one flat vector in param_infos order (the buckets of DP and ZeRO).
std::vector<float> flatten(const ModelConfig& cfg, const TensorMap& m);
TensorMap unflatten(const ModelConfig& cfg, const std::vector<float>& flat);

}  // namespace meshsim::numerics
