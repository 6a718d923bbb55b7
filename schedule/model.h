// Transformer model shapes: presets with their published configurations, or explicit
// fields from a scenario, and the FLOP counts of docs/math.md section 4.
//
//   ModelSpec m = model_preset("gpt3-175b");   // 96 layers, h = 12288, 96 heads, s = 2048
//   double f = model_flops_per_iteration(m, /*global_batch=*/1536, /*full_recompute=*/false);
//
// A dense layer has attention (QKV projections with kv_heads for GQA, scores, scores x V,
// output projection) and an MLP (GeLU: h -> ffn_hidden -> h; SwiGLU: gate and up
// h -> ffn_hidden, down ffn_hidden -> h). A MoE layer (experts > 0) replaces the MLP by
// `experts` MLPs of ffn_hidden each, top_k per token, plus a router h -> experts, and
// `shared_experts` MLPs of ffn_hidden that every token runs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace meshsim {

enum class FfnKind { Gelu, SwiGLU };
enum class AttentionKind { Plain, Flash };
// The layer's norms: LayerNorm (GPT, BERT, Nemotron; weight and bias) or RMSNorm (Llama,
// Mixtral, DeepSeek; weight only, no centring).
enum class NormKind { LayerNorm, RmsNorm };
// Positions: Absolute (learned or sinusoidal, added once at the embedding; also ALiBi, a bias
// inside the attention kernel): no kernel in the layer. Rope: rotary embedding of the queries and
// keys after the QKV projection, a kernel each way (MLA: the qk_rope_head_dim part).
enum class PositionKind { Absolute, Rope };
const char* to_string(FfnKind k);
const char* to_string(AttentionKind k);
const char* to_string(NormKind k);
const char* to_string(PositionKind k);
std::optional<FfnKind> parse_ffn_kind(const std::string& s);
std::optional<AttentionKind> parse_attention_kind(const std::string& s);
std::optional<NormKind> parse_norm_kind(const std::string& s);
std::optional<PositionKind> parse_position_kind(const std::string& s);

struct ModelSpec {
  std::string name = "custom";
  int layers = 1;
  int hidden = 1024;
  int heads = 16;
  int kv_heads = 16;      // = heads without GQA
  int ffn_hidden = 4096;  // H_inter (per expert for MoE)
  FfnKind ffn = FfnKind::Gelu;
  int vocab = 51200;
  int seq = 2048;
  int experts = 0;  // 0: dense MLP
  int top_k = 1;
  // Shared experts (DeepSeek-V2/V3, Qwen-MoE): MLPs of ffn_hidden that every token runs beside
  // its top_k routed ones; their weights are a dense MLP's (split over tp, whole on every
  // expert-parallel rank).
  int shared_experts = 0;
  // Multi-head latent attention (DeepSeek-V2/V3; on when kv_lora_rank > 0), named as in their
  // config.json: queries through a q_lora_rank latent (0: projected from h directly), keys and
  // values through a kv_lora_rank latent, each head's query/key of qk_nope_head_dim +
  // qk_rope_head_dim (the RoPE part; its key shared by the heads) and value of v_head_dim.
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  DType dtype = DType::Bf16;
  AttentionKind attention = AttentionKind::Plain;
  NormKind norm = NormKind::LayerNorm;
  PositionKind position = PositionKind::Absolute;
  bool bias = true;             // linear-layer biases (GPT, BERT); false for Llama-style models
  bool tied_embeddings = true;  // output projection shares the embedding table

  int dtype_bytes() const;  // P
  int head_dim() const { return hidden / heads; }
  int kv_hidden() const { return kv_heads * head_dim(); }  // H_kv
  // Parameters of one norm: 2h (LayerNorm's weight and bias) or h (RMSNorm's weight).
  double norm_params() const { return norm == NormKind::RmsNorm ? hidden : 2.0 * hidden; }
  bool moe() const { return experts > 0; }
  bool mla() const { return kv_lora_rank > 0; }
  // MLA's latent width the down projections write: q_lora_rank + kv_lora_rank + qk_rope_head_dim.
  int mla_latent() const { return q_lora_rank + kv_lora_rank + qk_rope_head_dim; }
  // Parameters of one layer's attention (projections, biases; MLA's latent norms; not the
  // LayerNorm before it).
  double attention_params() const;
  // Parameters of one layer (weights and biases, LayerNorms included; all experts).
  double params_per_layer() const;
  // The part of params_per_layer() held by the experts (0 for a dense layer); the rest
  // (attention, LayerNorms, router) is replicated across expert-parallel ranks.
  double expert_params_per_layer() const;
  // Embedding (vocab x hidden, tied with the output projection; twice that when
  // tied_embeddings is false) + final LayerNorm (2h).
  double embedding_params() const;
  double total_params() const;
};

// Upper limits of a model (docs/scenarios.md): layers, widths (hidden, heads, ffn_hidden,
// vocab) and sequence length.
inline constexpr int kMaxLayers = 10000;
inline constexpr int kMaxWidth = 1 << 20;
inline constexpr int kMaxSeq = 1 << 24;

// Throws meshsim::Error naming `field` when a value is out of range (non-positive sizes, sizes
// above the limits, hidden not divisible by heads, heads not divisible by kv_heads, ...).
void validate_model(const ModelSpec& m, const std::string& field);
// How many times this process has run validate_model (tests count the checks of one simulation).
std::int64_t model_checks();

// The presets by name: gpt3-175b, gpt-22b, gpt-530b, gpt-1t, llama2-70b, llama3-70b,
// llama3-405b, mixtral-8x7b, deepseek-v3, bert-large. Unknown name: Error listing them.
const std::vector<ModelSpec>& model_presets();
ModelSpec model_preset(const std::string& name);

// docs/math.md section 4, generalized per item. Forward matmul FLOPs of one layer for b
// sequences of s tokens (QKV, scores, scores x V, output projection, MLP or the top_k
// experts and router); backward is twice forward.
double layer_forward_flops(const ModelSpec& m, double b, double s);
// Logits (output projection to the vocabulary), forward: 2 b s h V.
double logits_forward_flops(const ModelSpec& m, double b, double s);
// Model FLOPs of one iteration with global batch B: 3 x (L layers + logits) forward;
// with full_recompute the hardware FLOPs: 4 x layers + 3 x logits. For a GPT model
// (ffn_hidden = 4h, heads = kv_heads, dense) these equal 72BsLh^2(1 + s/(6h) + V/(12hL))
// and 96BsLh^2(1 + s/(6h) + V/(16hL)).
double model_flops_per_iteration(const ModelSpec& m, double global_batch, bool full_recompute);

}  // namespace meshsim
