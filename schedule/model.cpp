// Transformer model shapes: parameter counts, presets and FLOPs (docs/math.md section 4).
//
//   model_preset("llama2-70b").total_params()   // ~68.98e9 (untied embedding and head)
//
// Parameters of one layer, h = hidden, H_kv = kv_heads x head_dim, f = ffn_hidden:
//   QKV           h(h + 2H_kv)  (+ h + 2H_kv biases)
//   output proj   h^2           (+ h)
//   MLP  GeLU     2hf           (+ f + h)       SwiGLU 3hf (+ 2f + h)
//   MoE           experts x MLP + router h x experts
//   LayerNorms    2 x 2h
// Biases are counted only when ModelSpec::bias is set. For GPT-3 175B this gives
// 12h^2 + 13h per layer, Megatron's count.
#include "schedule/model.h"

#include <fmt/format.h>

#include "core/enum_names.h"
#include "core/error.h"

namespace meshsim {

constexpr EnumName<FfnKind> kFfnKindNames[] = {{FfnKind::Gelu, "gelu"}, {FfnKind::SwiGLU, "swiglu"}};
const char* to_string(FfnKind k) { return enum_name(kFfnKindNames, k); }

constexpr EnumName<AttentionKind> kAttentionKindNames[] = {{AttentionKind::Plain, "plain"},
                                                           {AttentionKind::Flash, "flash"}};
const char* to_string(AttentionKind k) { return enum_name(kAttentionKindNames, k); }

int ModelSpec::dtype_bytes() const {
  if (dtype == "bf16" || dtype == "fp16") return 2;
  if (dtype == "fp32") return 4;
  throw Error(fmt::format("model.dtype: '{}' is not a known type; write bf16, fp16 or fp32", dtype));
}

namespace {

// One MLP (one expert for MoE): weights and biases.
double mlp_params(const ModelSpec& m) {
  const double h = m.hidden, f = m.ffn_hidden;
  if (m.ffn == FfnKind::SwiGLU) return 3 * h * f + (m.bias ? 2 * f + h : 0);
  return 2 * h * f + (m.bias ? f + h : 0);
}

}  // namespace

double ModelSpec::expert_params_per_layer() const { return moe() ? experts * mlp_params(*this) : 0.0; }

double ModelSpec::params_per_layer() const {
  const double h = hidden, hkv = kv_hidden();
  const double qkv = h * (h + 2 * hkv) + (bias ? h + 2 * hkv : 0);
  const double out = h * h + (bias ? h : 0);
  const double mlp =
      moe() ? expert_params_per_layer() + h * experts + shared_experts * mlp_params(*this) : mlp_params(*this);
  const double norms = 2 * 2 * h;
  return qkv + out + mlp + norms;
}

double ModelSpec::embedding_params() const {
  const double table = static_cast<double>(vocab) * hidden;
  return (tied_embeddings ? table : 2 * table) + 2.0 * hidden;
}

double ModelSpec::total_params() const { return layers * params_per_layer() + embedding_params(); }

void validate_model(const ModelSpec& m, const std::string& field) {
  // Limits far above any model trained or planned; beyond them the FLOP and byte counts of one
  // layer leave the range the simulator keeps exact.
  auto in_range = [&](int v, const char* name, int most) {
    if (v < 1) throw Error(fmt::format("{}.{}: {} must be at least 1", field, name, v));
    if (v > most) throw Error(fmt::format("{}.{}: {} exceeds meshsim's limit of {}", field, name, v, most));
  };
  in_range(m.layers, "layers", kMaxLayers);
  in_range(m.hidden, "hidden", kMaxWidth);
  in_range(m.heads, "heads", kMaxWidth);
  in_range(m.kv_heads, "kv_heads", kMaxWidth);
  in_range(m.ffn_hidden, "ffn_hidden", kMaxWidth);
  in_range(m.vocab, "vocab", kMaxWidth);
  in_range(m.seq, "seq", kMaxSeq);
  if (m.hidden % m.heads != 0)
    throw Error(fmt::format("{}.heads: {} does not divide hidden = {}; choose heads so that hidden/heads is whole",
                            field, m.heads, m.hidden));
  if (m.heads % m.kv_heads != 0)
    throw Error(fmt::format("{}.kv_heads: {} does not divide heads = {}; use a divisor of heads (= heads without GQA)",
                            field, m.kv_heads, m.heads));
  if (m.experts < 0)
    throw Error(fmt::format("{}.experts: {} must be 0 (dense) or a positive expert count", field, m.experts));
  if (m.moe() && (m.top_k < 1 || m.top_k > m.experts))
    throw Error(fmt::format("{}.top_k: {} must lie in 1..experts = {}", field, m.top_k, m.experts));
  if (m.shared_experts < 0 || m.shared_experts > 64 || (m.shared_experts > 0 && !m.moe()))
    throw Error(fmt::format("{}.shared_experts: {} must be 0..64, and above 0 only with experts > 0 (a MoE model)",
                            field, m.shared_experts));
  if (m.dtype != "bf16" && m.dtype != "fp16" && m.dtype != "fp32")
    throw Error(fmt::format("{}.dtype: '{}' is not a known type; write bf16, fp16 or fp32", field, m.dtype));
}

namespace {

ModelSpec gpt(const char* name, int layers, int hidden, int heads) {
  ModelSpec m;
  m.name = name;
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = heads;
  m.ffn_hidden = 4 * hidden;
  m.ffn = FfnKind::Gelu;
  m.vocab = 51200;
  m.seq = 2048;
  m.attention = AttentionKind::Plain;
  return m;
}

// Llama-style: SwiGLU, GQA, no biases, untied head, FlashAttention.
ModelSpec llama(const char* name, int layers, int hidden, int heads, int kv_heads, int ffn, int vocab, int seq) {
  ModelSpec m;
  m.name = name;
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = kv_heads;
  m.ffn_hidden = ffn;
  m.ffn = FfnKind::SwiGLU;
  m.vocab = vocab;
  m.seq = seq;
  m.attention = AttentionKind::Flash;
  m.bias = false;
  m.tied_embeddings = false;
  return m;
}

std::vector<ModelSpec> make_presets() {
  std::vector<ModelSpec> v;
  // Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", Table 3.
  v.push_back(gpt("gpt3-175b", 96, 12288, 96));
  v.push_back(gpt("gpt-22b", 48, 6144, 64));
  v.push_back(gpt("gpt-530b", 105, 20480, 128));
  v.push_back(gpt("gpt-1t", 128, 25600, 160));
  // Touvron et al. 2023 (Llama 2); Meta Llama 3 model card / "The Llama 3 Herd of Models".
  v.push_back(llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096));
  v.push_back(llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192));
  v.push_back(llama("llama3-405b", 126, 16384, 128, 8, 53248, 128256, 8192));
  // Jiang et al. 2024, "Mixtral of Experts": 8 experts, top-2.
  ModelSpec mix = llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 4096);
  mix.experts = 8;
  mix.top_k = 2;
  v.push_back(mix);
  // DeepSeek-V3 (arXiv 2412.19437), simplified: standard attention with 128 K/V heads
  // instead of MLA; every layer MoE (the real model has 3 dense layers first); its one shared
  // expert; no multi-token-prediction module. About 705e9 parameters instead of 671e9.
  ModelSpec ds = llama("deepseek-v3", 61, 7168, 128, 128, 2048, 129280, 4096);
  ds.experts = 256;
  ds.top_k = 8;
  ds.shared_experts = 1;
  v.push_back(ds);
  // Devlin et al. 2019, BERT-large (position, segment embeddings and pooler not counted).
  ModelSpec bert = gpt("bert-large", 24, 1024, 16);
  bert.vocab = 30522;
  bert.seq = 512;
  v.push_back(bert);
  return v;
}

}  // namespace

const std::vector<ModelSpec>& model_presets() {
  static const std::vector<ModelSpec> presets = make_presets();  // immutable table, built once
  return presets;
}

ModelSpec model_preset(const std::string& name) {
  std::string names;
  for (const ModelSpec& m : model_presets()) {
    if (m.name == name) return m;
    names += (names.empty() ? "" : ", ") + m.name;
  }
  throw Error(fmt::format("model: unknown preset '{}'; presets are {}", name, names));
}

double layer_forward_flops(const ModelSpec& m, double b, double s) {
  const double h = m.hidden, hkv = m.kv_hidden(), f = m.ffn_hidden;
  const double qkv = 2 * b * s * h * (h + 2 * hkv);
  const double scores = 2 * b * s * s * h;
  const double scores_v = 2 * b * s * s * h;
  const double out = 2 * b * s * h * h;
  const double mlp = (m.ffn == FfnKind::SwiGLU ? 6 : 4) * b * s * h * f;
  const double ffn = m.moe() ? (m.top_k + m.shared_experts) * mlp + 2 * b * s * h * m.experts : mlp;
  return qkv + scores + scores_v + out + ffn;
}

double logits_forward_flops(const ModelSpec& m, double b, double s) {
  return 2 * b * s * static_cast<double>(m.hidden) * m.vocab;
}

double model_flops_per_iteration(const ModelSpec& m, double global_batch, bool full_recompute) {
  const double layers = m.layers * layer_forward_flops(m, global_batch, m.seq);
  const double logits = logits_forward_flops(m, global_batch, m.seq);
  return (full_recompute ? 4 : 3) * layers + 3 * logits;
}

}  // namespace meshsim
