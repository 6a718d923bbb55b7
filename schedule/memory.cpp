// Itemized memory per layer and per pipeline stage (docs/math.md sections 11, 12 and 13).
//
//   gpt3-175b, b = 1, t = 8, sp, no recompute: layer_activation_bytes = sbh/t (34 + 5as/h)
//   = 2048 * 12288 / 8 * (34 + 5 * 96 * 2048 / 12288) = 360 MiB per layer and micro-batch.
//
// Values are computed in double and rounded once per item; with the divisibility that
// validate_parallel enforces every item is a whole number of bytes.
#include "schedule/memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace meshsim {

namespace {

struct Shape {
  double s, b, h, hkv, f, a, v, P;
  int t;      // tensor divisor: tp, or q^2 for mesh2d
  int tsp;    // divisor of the items sequence parallelism shards: t with sp (or mesh2d), else 1
  int kvdiv;  // divisor of K/V items: t, or kv_heads when K/V heads are replicated (tp > kv_heads)
  int c;
  double kf;  // expert-side multiplier: top_k (x ep_imbalance with ep > 1); 1 for dense
  int ein;    // divisor of the expert inputs: tsp, or with ep > 1 t / etp (each rank dispatches
              // its 1/t of the tokens and, with etp > 1, gathers its etp peers')
  std::string tsym;
};

Shape shape_of(const ModelSpec& m, const ParallelSpec& p) {
  Shape x{};
  x.s = m.seq;
  x.b = p.micro_batch_size;
  x.h = m.hidden;
  x.hkv = m.kv_hidden();
  x.f = m.ffn_hidden;
  x.a = m.heads;
  x.v = m.vocab;
  x.P = m.dtype_bytes();
  x.t = p.tensor_size();
  x.tsp = (p.sp || p.mesh2d > 0) ? x.t : 1;
  x.kvdiv = p.mesh2d == 0 && p.tp > m.kv_heads ? m.kv_heads : x.t;
  x.c = p.cp;
  x.kf = m.moe() ? m.top_k * (p.ep > 1 ? p.ep_imbalance : 1.0) : 1.0;
  x.ein = p.ep > 1 ? x.t / p.expert_tp() : x.tsp;
  x.tsym = p.mesh2d > 0 ? "q^2" : "t";
  return x;
}

std::string coef_text(double k) {
  if (k == 1) return "";
  if (k == std::floor(k)) return fmt::format("{}", static_cast<long long>(k));
  return fmt::format("{}*", k);
}

// Divisor text for a formula: "", "/t", "/c", "/(c*t)".
std::string div_text(const Shape& x, int tdiv, bool by_c, const std::string& tsym) {
  std::vector<std::string> d;
  if (by_c && x.c > 1) d.push_back("c");
  if (tdiv > 1) d.push_back(tsym);
  if (d.empty()) return "";
  if (d.size() == 1) return "/" + d[0];
  return fmt::format("/({}*{})", d[0], d[1]);
}

// Adds an item of coef x elements bytes divided by tdiv (and by c when by_c).
void add(std::vector<MemoryItem>& out, const Shape& x, const std::string& name, double coef, const std::string& body,
         double elements, int tdiv, double mult = 1.0, const std::string& tsym = "") {
  const double bytes = coef * elements * mult / (static_cast<double>(tdiv) * x.c);
  std::string formula = coef_text(coef) + body + div_text(x, tdiv, true, tsym.empty() ? x.tsym : tsym);
  if (mult != 1.0) formula += fmt::format(" x {} (top_k{})", mult, mult == std::floor(mult) ? "" : " x imbalance");
  out.push_back({"activations", name, formula, static_cast<Bytes>(std::llround(bytes))});
}

std::vector<MemoryItem> plain_items(const ModelSpec& m, const Shape& x, bool keep_core) {
  std::vector<MemoryItem> v;
  const double sbh = x.s * x.b * x.h, sbf = x.s * x.b * x.f, as2b = x.a * x.s * x.s * x.b;
  const std::string kvsym = x.kvdiv == x.t ? x.tsym : "n_kv";
  const bool gqa = x.hkv != x.h;
  // Attention block: 11sbh + 5as^2b for 16-bit data, GPT shapes.
  add(v, x, "attn.layernorm_input", x.P, "sbh", sbh, x.tsp);
  add(v, x, "attn.qkv_input", x.P, "sbh", sbh, x.tsp);
  if (gqa || x.kvdiv != x.t) {
    add(v, x, "attn.q", x.P, "sbh", sbh, x.t);
    add(v, x, "attn.k", x.P, "sbh_kv", x.s * x.b * x.hkv, x.kvdiv, 1.0, kvsym);
  } else {
    add(v, x, "attn.q_k", 2 * x.P, "sbh", sbh, x.t);
  }
  if (keep_core) {
    add(v, x, "attn.softmax_output", x.P, "as^2b", as2b, x.t);
    add(v, x, "attn.softmax_dropout_mask", 1, "as^2b", as2b, x.t);
    add(v, x, "attn.dropout_output", x.P, "as^2b", as2b, x.t);
  }
  add(v, x, "attn.v", x.P, gqa ? "sbh_kv" : "sbh", x.s * x.b * x.hkv, x.kvdiv, 1.0, kvsym);
  add(v, x, "attn.out_proj_input", x.P, "sbh", sbh, x.t);
  add(v, x, "attn.dropout_mask", 1, "sbh", sbh, x.tsp);
  // MLP: 19sbh for 16-bit data and f = 4h; two LayerNorm inputs 4sbh (one is above).
  add(v, x, "mlp.layernorm_input", x.P, "sbh", sbh, x.tsp);
  add(v, x, "mlp.fc1_input", x.P, "sbh", sbh, x.ein, x.kf);
  if (m.ffn == FfnKind::SwiGLU) {
    add(v, x, "mlp.swiglu_input", 2 * x.P, "sbf", sbf, x.t, x.kf);
  } else {
    add(v, x, "mlp.gelu_input", x.P, "sbf", sbf, x.t, x.kf);
  }
  add(v, x, "mlp.fc2_input", x.P, "sbf", sbf, x.t, x.kf);
  add(v, x, "mlp.dropout_mask", 1, "sbh", sbh, x.tsp);
  return v;
}

std::vector<MemoryItem> flash_items(const ModelSpec& m, const Shape& x) {
  std::vector<MemoryItem> v;
  const double sbh = x.s * x.b * x.h;
  add(v, x, "attn.norm_input", x.P, "sbh", sbh, x.tsp);
  if (m.mla()) {
    // Multi-head latent attention: the latents (gathered over tp, whole on each rank), the
    // up-projected queries, keys and values of H/t heads, and the attention output.
    const double H = m.heads, dqk = m.qk_nope_head_dim + m.qk_rope_head_dim, dv = m.v_head_dim;
    add(v, x, "attn.latents", x.P, "sb(r_q+r_kv+d_r)", x.s * x.b * m.mla_latent(), 1);
    add(v, x, "attn.qkv", x.P, "sbH(2d_qk+d_v)", x.s * x.b * H * (2 * dqk + dv), x.t);
    add(v, x, "attn.output", x.P, "sbHd_v", x.s * x.b * H * dv, x.t);
  } else if (x.kvdiv == x.t) {
    add(v, x, "attn.qkv", x.P, "sb(h+2h_kv)", x.s * x.b * (x.h + 2 * x.hkv), x.t);
  } else {
    add(v, x, "attn.q", x.P, "sbh", sbh, x.t);
    add(v, x, "attn.kv", 2 * x.P, "sbh_kv", x.s * x.b * x.hkv, x.kvdiv, 1.0, "n_kv");
  }
  if (!m.mla()) add(v, x, "attn.output", x.P, "sbh", sbh, x.t);
  add(v, x, "mlp.norm_input", x.P, "sbh", sbh, x.tsp);
  add(v, x, "mlp.up_gate_input", x.P, "sbh", sbh, x.ein, x.kf);
  add(v, x, "mlp.down_input", 2 * x.P, "sbf", x.s * x.b * x.f, x.t, x.kf);
  return v;
}

}  // namespace

Bytes total_bytes(const std::vector<MemoryItem>& items) {
  Bytes sum = 0;
  for (const MemoryItem& i : items) sum += i.bytes;
  return sum;
}

std::vector<OpSacGemm> op_sac_gemms(const ModelSpec& m, const ParallelSpec& p) {
  const double t = p.tp;
  const double kv = m.head_dim() * std::max(1.0, static_cast<double>(m.kv_heads) / t);  // K/V width per rank
  const double f = m.ffn_hidden / t;
  const std::vector<std::pair<std::string, std::vector<double>>> gemms = {
      {"attn.qkv", {m.hidden / t, kv, kv}},  // wq, wk, wv
      {"attn.proj", {static_cast<double>(m.hidden)}},
      {"mlp.fc1", m.ffn == FfnKind::SwiGLU ? std::vector<double>{f, f} : std::vector<double>{f}},  // w1 (, w3)
      {"mlp.fc2", {static_cast<double>(m.hidden)}}};
  std::vector<OpSacGemm> out;
  int count = 0;
  for (const auto& [name, parts] : gemms) {
    double total = 0, recomputed = 0, saved = 0;
    for (double w : parts) {
      total += w;
      (++count % 2 == 0 ? recomputed : saved) += w;
    }
    out.push_back({name, recomputed / total, saved});
  }
  return out;
}

std::vector<MemoryItem> layer_activation_items(const ModelSpec& m, const ParallelSpec& p, RecomputeMode mode) {
  const Shape x = shape_of(m, p);
  std::vector<MemoryItem> v;
  if (mode == RecomputeMode::Ops) {
    // The block's input, the saved matrix multiplies' outputs, the attention kernel's output and
    // log-sum-exp (fp32), and with sp the reduce-scatters' outputs.
    const double sbh = x.s * x.b * x.h;
    add(v, x, "layer_input", x.P, "sbh", sbh, x.tsp);
    for (const OpSacGemm& g : op_sac_gemms(m, p))
      if (g.saved_columns > 0)
        add(v, x, g.name + ".saved_output", x.P, fmt::format("sb x {:.6g}", g.saved_columns),
            x.s * x.b * g.saved_columns, 1);
    add(v, x, "attn.output", x.P, "sbh", sbh, x.t);
    add(v, x, "attn.logsumexp", 4, "asb", x.a * x.s * x.b, x.t);
    if (p.sp && x.t > 1) {
      add(v, x, "attn.reduce_scatter_output", x.P, "sbh", sbh, x.t);
      add(v, x, "mlp.reduce_scatter_output", x.P, "sbh", sbh, x.t);
    }
    return v;
  }
  if (mode == RecomputeMode::Full) {
    // distribute_checkpoints: each tp rank keeps 1/t of the input (sp already shards it).
    add(v, x, "layer_input", x.P, "sbh", x.s * x.b * x.h, p.checkpoints_distributed() ? x.t : x.tsp);
    return v;
  }
  v = m.attention == AttentionKind::Flash ? flash_items(m, x) : plain_items(m, x, mode != RecomputeMode::Selective);
  if (m.moe()) {
    add(v, x, "moe.router_probs", 4, "sb*experts", x.s * x.b * m.experts, x.tsp);
    // The unpermute's input (docs/math.md section 8): the experts' rows of this rank's tokens,
    // back from the combine, which it saves for the router probabilities' gradient. With ep > 1
    // a rank routes its 1/t share of the tokens; without, each tp rank unpermutes them all.
    add(v, x, "moe.unpermute_input", x.P, "sbh", x.s * x.b * x.h, p.ep > 1 ? x.t : 1, m.top_k);
  }
  if (m.shared_experts > 0) {
    // The shared experts: one MLP of shared_experts x ffn_hidden on every token, split over t
    // like a dense MLP (their input is the router's, already counted).
    const double sbf = x.s * x.b * x.f * m.shared_experts;
    add(v, x, "moe.shared_act_input", (m.ffn == FfnKind::SwiGLU ? 2 : 1) * x.P, "sbf*shared", sbf, x.t);
    add(v, x, "moe.shared_fc2_input", x.P, "sbf*shared", sbf, x.t);
  }
  return v;
}

std::vector<MemoryItem> layer_activation_items(const ModelSpec& m, const ParallelSpec& p) {
  return layer_activation_items(m, p, p.recompute.mode);
}

Bytes layer_activation_bytes(const ModelSpec& m, const ParallelSpec& p) {
  return total_bytes(layer_activation_items(m, p));
}

int inflight_chunks(const ParallelSpec& p, int stage) {
  if (p.vchunks <= 1) return std::min(p.microbatches, p.pp - stage);
  return std::min(p.microbatches * p.vchunks, 2 * (p.pp - stage - 1) + (p.vchunks - 1) * p.pp + 1);
}

int recompute_segment_layers(const ModelSpec& m, const ParallelSpec& p) {
  int chunk_layers = 0;  // the largest chunk's (uneven stages: parallel.stage_layers)
  for (int s = 0; s < p.pp; ++s) chunk_layers = std::max(chunk_layers, p.max_chunk_layers(m.layers, s));
  int k = 0;
  if (p.recompute.mode == RecomputeMode::EveryK)
    k = p.recompute.every_k;
  else if (p.recompute.mode == RecomputeMode::Sqrt)
    k = static_cast<int>(std::lround(std::sqrt(chunk_layers)));
  else
    return 0;
  return std::clamp(k, 1, std::max(1, chunk_layers));
}

int optimizer_bytes_per_param(const ModelSpec& m) {
  return m.dtype_bytes() < 4 ? 12 : 8;  // fp32 master + two moments; fp32 training keeps no separate master
}

Bytes checkpoint_bytes(const ModelSpec& m) {
  return static_cast<Bytes>(std::llround(m.total_params() * (m.dtype_bytes() + optimizer_bytes_per_param(m))));
}

Bytes RankMemory::total() const { return total_bytes(items); }

Bytes RankMemory::bytes(const std::string& category) const {
  Bytes sum = 0;
  for (const MemoryItem& i : items)
    if (i.category == category) sum += i.bytes;
  return sum;
}

namespace {

// Items of `per` scaled by `count`, renamed into `category` with a prefix.
void scaled(std::vector<MemoryItem>& out, const std::vector<MemoryItem>& per, const std::string& category,
            const std::string& prefix, long long count, const std::string& what) {
  for (const MemoryItem& i : per)
    out.push_back({category, prefix + i.name, fmt::format("{} x {}", i.formula, what), i.bytes * count});
}

void state_items(std::vector<MemoryItem>& out, const ModelSpec& m, const ParallelSpec& p, const std::string& name,
                 double params, int shard_group) {
  if (params <= 0) return;
  const int P = m.dtype_bytes();
  const int opt = optimizer_bytes_per_param(m);
  const std::string g = shard_group == p.grad_ranks() ? fmt::format("d{}", p.cp > 1 ? "c" : "")
                        : p.ep_spans_tp()             ? fmt::format("(d{}t/e)", p.cp > 1 ? "c" : "")
                                                      : fmt::format("(d/e){}", p.cp > 1 ? "c" : "");
  auto put = [&](const char* cat, int bytes_per, int min_stage) {
    const bool shard = p.zero >= min_stage && shard_group > 1;
    const double b = params * bytes_per / (shard ? shard_group : 1);
    out.push_back({cat, name, fmt::format("{}N{} (N = {:.4g} parameters)", bytes_per, shard ? "/" + g : "", params),
                   static_cast<Bytes>(std::llround(b))});
  };
  put("weights", P, 3);
  put("gradients", P, 2);
  put("optimizer", opt, 1);
}

// Weights, gradients, optimizer: 16 bytes per parameter for 16-bit mixed-precision Adam.
// Returns the parameters this rank holds before ZeRO sharding.
double model_state_items(std::vector<MemoryItem>& out, const ModelSpec& m, const ParallelSpec& p, const Shape& x,
                         int stage, bool first, bool last) {
  const int stage_layers = p.layers_on_stage(m.layers, stage);
  const double t = x.t;
  const double expert = m.expert_params_per_layer();
  const double table = static_cast<double>(m.vocab) * m.hidden / t;  // vocabulary-parallel
  double held_params = 0;                                            // parameters this rank holds before ZeRO sharding
  auto state = [&](const std::string& name, double params, int shard_group) {
    held_params += params;
    state_items(out, m, p, name, params, shard_group);
  };
  const double dense = stage_layers * (m.params_per_layer() - expert) / t;
  // Experts split over tp like a dense MLP without ep; E/e per rank with ep, each split over
  // etp (as planned).
  const double experts = stage_layers * expert / p.expert_shard();
  state("layers", dense, p.grad_ranks());
  state("experts", experts, p.expert_grad_ranks());
  if (p.stack.fp8 != Fp8Recipe::Off)  // Transformer Engine keeps each FP8 weight and its transpose for the iteration
    out.push_back(
        {"weights", "fp8_weight_copies",
         fmt::format("2 x {:.4g} layer parameters (stack.fp8: an FP8 copy and its transpose)", dense + experts),
         static_cast<Bytes>(std::llround(2 * (dense + experts)))});
  if (p.zero >= 3 && p.grad_ranks() > 1 && !p.stack.reshard_after_forward) {
    // FSDP's SHARD_GRAD_OP: every layer's gathered parameters stay from its forward to its
    // backward: the rest of them beside this rank's shard.
    const double params = dense + experts;
    out.push_back({"temporaries", "unsharded_layers",
                   fmt::format("P x {:.4g} parameters x (1 - 1/{}) (stack.reshard_after_forward: false)", params,
                               p.cp > 1 ? "dc" : "d"),
                   static_cast<Bytes>(std::llround(x.P * params * (1.0 - 1.0 / p.grad_ranks())))});
  }
  if (first) state("embedding", table, p.grad_ranks());
  if (last) {
    const bool head_copy = p.pp > 1 || !m.tied_embeddings;
    state("head", (head_copy ? table : 0) + m.norm_params(), p.grad_ranks());
  }
  return held_params;
}

// Activations of the layers in flight on `stage`.
// Uneven stages: each chunk in flight is counted at the stage's largest chunk (an upper bound).
void activation_items(std::vector<MemoryItem>& out, const ModelSpec& m, const ParallelSpec& p, int stage) {
  const int chunk_layers = p.max_chunk_layers(m.layers, stage);
  const int n = inflight_chunks(p, stage);
  const std::string inflight = fmt::format("{} in flight", n);
  const RecomputeMode mode = p.recompute.mode;
  if (mode == RecomputeMode::None || mode == RecomputeMode::Selective || mode == RecomputeMode::Ops) {
    scaled(out, layer_activation_items(m, p, mode), "activations", "", static_cast<long long>(n) * chunk_layers,
           fmt::format("{} layers x {}", chunk_layers, inflight));
    // Ops: during a block's backward its recomputed activations are held whole.
    if (mode == RecomputeMode::Ops)
      scaled(out, layer_activation_items(m, p, RecomputeMode::None), "activations", "recompute.", 1, "1 layer");
  } else {
    // Full = checkpoints at every layer; EveryK / Sqrt = every K layers. During backward one
    // segment (1 or K layers) of one micro-batch is recomputed and held whole.
    const int k = mode == RecomputeMode::Full ? 1 : recompute_segment_layers(m, p);
    const int ckpts = (chunk_layers + k - 1) / k;
    scaled(out, layer_activation_items(m, p, RecomputeMode::Full), "activations", "checkpoint.",
           static_cast<long long>(n) * ckpts, fmt::format("{} checkpoints x {}", ckpts, inflight));
    scaled(out, layer_activation_items(m, p, RecomputeMode::None), "activations", "recompute.", k,
           fmt::format("{} layer segment", k));
  }
}

// Extras of docs/math.md section 12: embedding dropout mask (GPT layer only) for the micro-batches
// in flight on the first stage; output-side tensors for the one micro-batch the last stage
// holds (its backward follows its forward directly).
void extra_items(std::vector<MemoryItem>& out, const ModelSpec& m, const ParallelSpec& p, const Shape& x, bool first,
                 bool last) {
  const double t = x.t;
  const double sbh = x.s * x.b * x.h;
  auto extra = [&](const char* name, double bytes, const std::string& formula) {
    out.push_back({"extras", name, formula, static_cast<Bytes>(std::llround(bytes))});
  };
  if (first && m.attention == AttentionKind::Plain) {
    const int mb = std::min(p.microbatches, p.pp);
    extra("embedding_dropout_mask", sbh * mb / (x.tsp * x.c),
          fmt::format("sbh{} x {} micro-batches", div_text(x, x.tsp, true, x.tsym), mb));
  }
  if (last) {
    extra("final_layernorm_input", x.P * sbh / (x.tsp * x.c),
          coef_text(x.P) + "sbh" + div_text(x, x.tsp, true, x.tsym));
    extra("output_proj_input", x.P * sbh / (x.tsp * x.c), coef_text(x.P) + "sbh" + div_text(x, x.tsp, true, x.tsym));
    extra("cross_entropy_logits_fp32", 4 * x.s * x.b * x.v / (t * x.c), "4sbv" + div_text(x, x.t, true, x.tsym));
  }
}

// Temporaries: an allowance of twice the largest single tensor of one layer (its gradient
// and the gradient flowing into it exist together during that layer's backward).
MemoryItem temporaries_item(const ModelSpec& m, const ParallelSpec& p) {
  const std::vector<MemoryItem> whole = layer_activation_items(m, p, RecomputeMode::None);
  const auto big = std::max_element(whole.begin(), whole.end(),
                                    [](const MemoryItem& a, const MemoryItem& b) { return a.bytes < b.bytes; });
  return {"temporaries", "backward_buffers", fmt::format("2 x {} ({})", big->formula, big->name), 2 * big->bytes};
}

// Communication workspace: the largest buffer any one collective of this layout needs
// (they are assumed to run one at a time out of a shared, pre-allocated workspace).
MemoryItem workspace_item(const ModelSpec& m, const ParallelSpec& p, const Shape& x, double held_params) {
  const double t = x.t;
  const double expert = m.expert_params_per_layer();
  const double sbh = x.s * x.b * x.h;
  MemoryItem ws{"workspace", "none", "no collectives", 0};
  auto candidate = [&](const std::string& name, double bytes, const std::string& formula) {
    const Bytes b = static_cast<Bytes>(std::llround(bytes));
    if (b > ws.bytes) ws = {"workspace", name, formula, b};
  };
  if (p.grad_ranks() > 1) {
    // A bucket never holds more than the gradients this rank reduces (all of them, as
    // computed before any ZeRO sharding): P x the parameters of its layers, experts,
    // embedding and head.
    const double bucket = p.dp_bucket_mib * 1024 * 1024, grads = x.P * held_params;
    candidate("dp_gradient_bucket", std::min(bucket, grads),
              fmt::format("min({} MiB, gradients = P x {:.4g} parameters)", p.dp_bucket_mib, held_params));
  }
  if (p.tp > 1) candidate("tp_gather_buffer", x.P * sbh / x.c, coef_text(x.P) + "sbh" + div_text(x, 1, true, ""));
  if (p.pp > 1)
    candidate("pp_send_recv", 2 * x.P * sbh / (x.tsp * x.c),
              "2 x " + coef_text(x.P) + "sbh" + div_text(x, x.tsp, true, x.tsym));
  if (p.cp > 1)
    candidate("cp_kv_blocks", 2 * 2 * x.P * x.s * x.b * x.hkv / (x.c * x.kvdiv),
              "2 x " + coef_text(2 * x.P) + "sbh_kv/(c*t) (send + recv)");
  if (p.ep > 1)
    candidate(
        "ep_alltoall", 2 * x.P * sbh * x.kf / (x.t * x.c),
        fmt::format("2 x {}sbh x {}{} (dispatch send + recv)", coef_text(x.P), x.kf, div_text(x, x.t, true, x.tsym)));
  if (p.zero >= 3 && p.grad_ranks() > 1)
    candidate("zero3_layer_gather", 2 * x.P * ((m.params_per_layer() - expert) / t + expert / p.expert_shard()),
              "2 x P x one layer's parameters on a rank (the layer in use and the next, prefetched)");
  if (p.mesh2d > 0)
    candidate("summa_broadcast", x.P * (sbh + x.h * x.f) / (t * x.c),
              coef_text(x.P) + "(sbh + hf)/q^2 (one activation and one weight block)");
  return ws;
}

}  // namespace

RankMemory rank_memory(const ModelSpec& m, const ParallelSpec& p, int stage) {
  if (stage < 0 || stage >= p.pp)
    throw Error(
        fmt::format("stage: {} is outside 0..{} (pp = {}); pick an existing pipeline stage", stage, p.pp - 1, p.pp));
  const Shape x = shape_of(m, p);
  const bool first = stage == 0, last = stage == p.pp - 1;
  RankMemory r;
  r.role = fmt::format("stage {} of {} ({})", stage, p.pp,
                       p.pp == 1 ? "only: embedding and head"
                       : first   ? "first: embedding"
                       : last    ? "last: head"
                                 : "middle");
  if (!p.stage_layers.empty() && p.stage_layers.size() != static_cast<std::size_t>(p.pp) * p.vchunks)
    throw Error(fmt::format("parallel.stage_layers: {} entries for pp x vchunks = {} virtual stages; give one each",
                            p.stage_layers.size(), p.pp * p.vchunks));
  const double held_params = model_state_items(r.items, m, p, x, stage, first, last);
  activation_items(r.items, m, p, stage);
  extra_items(r.items, m, p, x, first, last);
  r.items.push_back(temporaries_item(m, p));
  r.items.push_back(workspace_item(m, p, x, held_params));
  return r;
}

}  // namespace meshsim
