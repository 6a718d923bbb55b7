#include "backend/cpu/numerics/model.h"

#include <fmt/format.h>

#include <cmath>

#include "backend/cpu/numerics/moe.h"
#include "core/error.h"
#include "core/hash.h"
#include "kernels/bf16.h"
#include "kernels/kernels.h"

namespace meshsim::numerics {
namespace k = meshsim::kernels;

void validate(const ModelConfig& c) {
  auto positive = [](int v, const char* field) {
    if (v <= 0) throw Error(fmt::format("model.{}: got {}; use a positive size", field, v));
  };
  positive(c.layers, "layers");
  positive(c.hidden, "hidden");
  positive(c.heads, "heads");
  positive(c.seq, "seq");
  positive(c.batch, "batch");
  positive(c.vocab, "vocab");
  positive(c.ffn, "ffn");
  if (c.hidden % c.heads != 0)
    throw Error(fmt::format("model.heads: {} heads do not divide hidden {}; pick heads | hidden", c.heads, c.hidden));
  if (!(c.dropout >= 0.f && c.dropout < 1.f))
    throw Error(fmt::format("model.dropout: got {}; use a probability in [0, 1)", c.dropout));
  if (c.moe.experts < 0) throw Error("model.moe.experts: negative; use 0 (dense) or a positive count");
  if (c.moe.experts > 0 && (c.moe.top_k < 1 || c.moe.top_k > c.moe.experts))
    throw Error(fmt::format("model.moe.top_k: got {} with {} experts; use 1..experts", c.moe.top_k, c.moe.experts));
}

std::string layer_param(int layer, const std::string& leaf) { return fmt::format("l{}.{}", layer, leaf); }
std::string expert_param(int layer, int expert, const std::string& leaf) {
  return fmt::format("l{}.moe.e{}.{}", layer, expert, leaf);
}
const char* output_param(const ModelConfig& cfg) { return cfg.tied ? "embed" : "head"; }

std::vector<ParamInfo> param_infos(const ModelConfig& c) {
  const std::int64_t h = c.hidden, f = c.ffn, V = c.vocab;
  const float wh = 1.f / std::sqrt(float(h)), wf = 1.f / std::sqrt(float(f));
  std::vector<ParamInfo> out;
  out.push_back({"embed", V, h, Init::Weight, 0.5f, TpSplit::Rows});
  if (!c.tied) out.push_back({"head", V, h, Init::Weight, wh, TpSplit::Rows});
  for (int l = 0; l < c.layers; ++l) {
    auto L = [&](const char* leaf) { return layer_param(l, leaf); };
    out.push_back({L("ln1.g"), 1, h, Init::Gain, 0.2f});
    out.push_back({L("ln1.b"), 1, h, Init::Bias, 0.1f});
    out.push_back({L("attn.wqkv"), h, 3 * h, Init::Weight, wh, TpSplit::QkvCols});
    out.push_back({L("attn.bqkv"), 1, 3 * h, Init::Bias, 0.1f, TpSplit::QkvCols});
    out.push_back({L("attn.wo"), h, h, Init::Weight, wh, TpSplit::Rows});
    out.push_back({L("attn.bo"), 1, h, Init::Bias, 0.1f});
    out.push_back({L("ln2.g"), 1, h, Init::Gain, 0.2f});
    out.push_back({L("ln2.b"), 1, h, Init::Bias, 0.1f});
    if (c.moe.experts == 0) {
      out.push_back({L("mlp.w1"), h, f, Init::Weight, wh, TpSplit::Cols});
      out.push_back({L("mlp.b1"), 1, f, Init::Bias, 0.1f, TpSplit::Cols});
      out.push_back({L("mlp.w2"), f, h, Init::Weight, wf, TpSplit::Rows});
      out.push_back({L("mlp.b2"), 1, h, Init::Bias, 0.1f});
    } else {
      out.push_back({L("moe.router"), h, c.moe.experts, Init::Weight, 2.f * wh});
      for (int e = 0; e < c.moe.experts; ++e) {
        out.push_back({expert_param(l, e, "w1"), h, f, Init::Weight, wh});
        out.push_back({expert_param(l, e, "b1"), 1, f, Init::Bias, 0.1f});
        out.push_back({expert_param(l, e, "w2"), f, h, Init::Weight, wf});
        out.push_back({expert_param(l, e, "b2"), 1, h, Init::Bias, 0.1f});
      }
    }
  }
  out.push_back({"lnf.g", 1, h, Init::Gain, 0.2f});
  out.push_back({"lnf.b", 1, h, Init::Bias, 0.1f});
  return out;
}

ParamInfo param_info(const ModelConfig& cfg, const std::string& name) {
  // A small table rebuilt per call is fine at test sizes.
  for (const ParamInfo& p : param_infos(cfg))
    if (p.name == name) return p;
  throw Error(fmt::format("parameter '{}': not in this model (layers {}, experts {}, tied {})", name, cfg.layers,
                          cfg.moe.experts, cfg.tied));
}

namespace {
std::uint64_t name_hash(const std::string& s) {
  std::uint64_t x = 0xcbf29ce484222325ULL;  // FNV-1a, then mixed
  for (unsigned char ch : s) x = (x ^ ch) * 0x100000001b3ULL;
  return splitmix64(x);
}
}  // namespace

float init_value(const ModelConfig& cfg, const ParamInfo& info, std::int64_t index) {
  const float u = 2.f * k::dropout_uniform(splitmix64(cfg.seed) ^ name_hash(info.name),
                                           static_cast<std::uint64_t>(index)) -
                  1.f;  // [-1, 1)
  switch (info.init) {
    case Init::Gain:
      return 1.f + info.scale * u;
    case Init::Bias:
    case Init::Weight:
      return info.scale * u;
  }
  return 0.f;
}

Tensor init_block(const ModelConfig& cfg, const std::string& name, std::int64_t r0, std::int64_t r1, std::int64_t c0,
                  std::int64_t c1) {
  const ParamInfo info = param_info(cfg, name);
  if (r0 < 0 || r1 > info.rows || r0 > r1 || c0 < 0 || c1 > info.cols || c0 > c1)
    throw Error(fmt::format("init_block('{}'): block [{}, {}) x [{}, {}) is outside the {} x {} tensor", name, r0, r1,
                            c0, c1, info.rows, info.cols));
  Tensor t(r1 - r0, c1 - c0);
  for (std::int64_t r = r0; r < r1; ++r)
    for (std::int64_t c = c0; c < c1; ++c)
      t.data[(r - r0) * t.cols + (c - c0)] = init_value(cfg, info, r * info.cols + c);
  return t;
}

TensorMap init_params(const ModelConfig& cfg) {
  validate(cfg);
  TensorMap m;
  for (const ParamInfo& p : param_infos(cfg)) {
    Tensor t(p.rows, p.cols);
    for (std::int64_t i = 0; i < t.size(); ++i) t.data[i] = init_value(cfg, p, i);
    m.emplace(p.name, std::move(t));
  }
  return m;
}

TensorMap zeros_like(const TensorMap& m) {
  TensorMap z;
  for (const auto& [name, t] : m) z.emplace(name, Tensor(t.rows, t.cols));
  return z;
}

Batch make_batch(const ModelConfig& cfg, std::uint64_t data_seed) {
  validate(cfg);
  Batch b;
  const std::uint64_t key = splitmix64(data_seed ^ 0x5eedda7aULL);
  auto token = [&](std::int64_t i) {
    return static_cast<std::int64_t>(k::dropout_uniform(key, static_cast<std::uint64_t>(i)) * float(cfg.vocab)) %
           cfg.vocab;
  };
  // A stream of B*S + 1 tokens per sequence: inputs are tokens 0..S-1, targets 1..S.
  for (std::int64_t s = 0; s < cfg.batch; ++s)
    for (std::int64_t i = 0; i < cfg.seq; ++i) {
      b.ids.push_back(token(s * (cfg.seq + 1) + i));
      b.targets.push_back(token(s * (cfg.seq + 1) + i + 1));
    }
  return b;
}

// ---- dropout ----------------------------------------------------------------------------
std::uint64_t dropout_key(std::uint64_t seed, int layer, int site) {
  return splitmix64(splitmix64(seed ^ 0xd809u) + static_cast<std::uint64_t>(layer) * 16 +
                    static_cast<std::uint64_t>(site));
}

void dropout_rows_forward(float* x, const std::vector<std::int64_t>& rows, std::int64_t h, float p, std::uint64_t key) {
  if (p == 0.f) return;
  for (std::size_t i = 0; i < rows.size(); ++i)
    k::dropout_forward_cpu(x + i * h, x + i * h, static_cast<std::size_t>(h), p, key,
                           static_cast<std::uint64_t>(rows[i] * h));
}

void dropout_rows_backward(float* dx, const std::vector<std::int64_t>& rows, std::int64_t h, float p,
                           std::uint64_t key) {
  if (p == 0.f) return;
  for (std::size_t i = 0; i < rows.size(); ++i)
    k::dropout_backward_cpu(dx + i * h, dx + i * h, static_cast<std::size_t>(h), p, key,
                            static_cast<std::uint64_t>(rows[i] * h));
}

std::vector<std::int64_t> row_range(std::int64_t first, std::int64_t count) {
  std::vector<std::int64_t> r(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) r[i] = first + i;
  return r;
}

// ---- mixed precision ----------------------------------------------------------------------
void round_bf16(float* x, std::int64_t n) { meshsim::round_to_bf16(x, static_cast<std::size_t>(n)); }

TensorMap bf16_copy(const TensorMap& masters) {
  TensorMap m = masters;
  for (auto& [name, t] : m) round_bf16(t.data);
  return m;
}

void require_bf16_weights(const ModelConfig& cfg, const TensorMap& weights, const char* where) {
  if (!cfg.bf16) return;
  for (const auto& [name, t] : weights)
    for (float v : t.data)
      if (meshsim::round_to_bf16(v) != v && !std::isnan(v))
        throw Error(
            fmt::format("{}: model.bf16 is set but weight '{}' holds {} (not a bf16 value); pass the bf16 "
                        "copy of the fp32 masters (bf16_copy)",
                        where, name, v));
}

void matmul(bool bf16, k::Trans ta, k::Trans tb, std::int64_t m, std::int64_t n, std::int64_t kk, const float* a,
            std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  if (!bf16) {
    k::gemm_cpu(ta, tb, m, n, kk, 1.f, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      float acc = 0.f;
      for (std::int64_t q = 0; q < kk; ++q)
        acc += (ta == k::Trans::No ? a[i * lda + q] : a[q * lda + i]) *
               (tb == k::Trans::No ? b[q * ldb + j] : b[j * ldb + q]);
      c[i * ldc + j] = beta == 0.f ? acc : acc + beta * c[i * ldc + j];
    }
}

// ---- helpers ----------------------------------------------------------------------------
void linear_forward(const float* x, std::int64_t rows, std::int64_t in, const float* w, std::int64_t out,
                    const float* b, float* y, bool bf16) {
  matmul(bf16, k::Trans::No, k::Trans::No, rows, out, in, x, in, w, out, 0.f, y, out);
  if (b) k::add_bias_cpu(y, b, rows, out);
  round_if(bf16, y, rows * out);
}

void linear_backward(const float* dy, const float* x, std::int64_t rows, std::int64_t in, const float* w,
                     std::int64_t out, float* dx, float* dw, float* db, bool bf16) {
  if (dx) {
    matmul(bf16, k::Trans::No, k::Trans::Yes, rows, in, out, dy, out, w, out, 0.f, dx, in);
    round_if(bf16, dx, rows * in);
  }
  if (dw) matmul(bf16, k::Trans::Yes, k::Trans::No, in, out, rows, x, in, dy, out, 1.f, dw, out);
  if (db) k::bias_backward_cpu(dy, db, rows, out);
}

void add_into(float* dst, const float* src, std::int64_t n) {
  k::reduce_sum_cpu(dst, src, static_cast<std::size_t>(n));
}

// ---- attention core ---------------------------------------------------------------------
namespace {
struct AttnSaved : Saved {
  std::vector<float> q, k, v, o, lse;
};
}  // namespace

std::unique_ptr<Saved> LocalAttention::forward(const float* qkv, std::int64_t rows, float* ctx) {
  const std::int64_t hl = std::int64_t(heads_) * d_, nseq = rows / seq_;
  if (rows % seq_ != 0) throw Error(fmt::format("attention: {} rows are not whole sequences of {}", rows, seq_));
  auto s = std::make_unique<AttnSaved>();
  const std::size_t n = static_cast<std::size_t>(rows * hl);
  s->q.resize(n), s->k.resize(n), s->v.resize(n), s->o.resize(n),
      s->lse.resize(static_cast<std::size_t>(rows * heads_));
  k::split_heads_cpu(qkv, 3 * hl, s->q.data(), nseq, seq_, heads_, d_);
  k::split_heads_cpu(qkv + hl, 3 * hl, s->k.data(), nseq, seq_, heads_, d_);
  k::split_heads_cpu(qkv + 2 * hl, 3 * hl, s->v.data(), nseq, seq_, heads_, d_);
  const k::AttentionShape shape{nseq * heads_, seq_, seq_, d_};
  k::attention_forward_cpu(s->q.data(), s->k.data(), s->v.data(), s->o.data(), s->lse.data(), shape,
                           1.f / std::sqrt(float(d_)), {.causal = true});
  round_if(bf16_, s->o.data(), std::int64_t(n));
  k::merge_heads_cpu(s->o.data(), ctx, hl, nseq, seq_, heads_, d_);
  return s;
}

void LocalAttention::backward(const Saved& saved, const float* dctx, std::int64_t rows, float* dqkv) {
  const auto& s = static_cast<const AttnSaved&>(saved);
  const std::int64_t hl = std::int64_t(heads_) * d_, nseq = rows / seq_;
  const std::size_t n = static_cast<std::size_t>(rows * hl);
  std::vector<float> dout(n), dq(n, 0.f), dk(n, 0.f), dv(n, 0.f);
  k::split_heads_cpu(dctx, hl, dout.data(), nseq, seq_, heads_, d_);
  const k::AttentionShape shape{nseq * heads_, seq_, seq_, d_};
  k::attention_backward_cpu(s.q.data(), s.k.data(), s.v.data(), s.o.data(), dout.data(), s.lse.data(), dq.data(),
                            dk.data(), dv.data(), shape, 1.f / std::sqrt(float(d_)), {.causal = true});
  for (std::vector<float>* g : {&dq, &dk, &dv}) round_if(bf16_, g->data(), std::int64_t(n));
  k::merge_heads_cpu(dq.data(), dqkv, 3 * hl, nseq, seq_, heads_, d_);
  k::merge_heads_cpu(dk.data(), dqkv + hl, 3 * hl, nseq, seq_, heads_, d_);
  k::merge_heads_cpu(dv.data(), dqkv + 2 * hl, 3 * hl, nseq, seq_, heads_, d_);
}

// ---- MLP --------------------------------------------------------------------------------
void mlp_forward(const float* x, std::int64_t rows, std::int64_t h, std::int64_t f, const float* w1, const float* b1,
                 const float* w2, const float* b2, float* out, MlpSaved& s, bool bf16) {
  s.x.assign(x, x + rows * h);
  s.pre.resize(static_cast<std::size_t>(rows * f));
  s.act.resize(s.pre.size());
  linear_forward(x, rows, h, w1, f, b1, s.pre.data(), bf16);
  k::gelu_forward_cpu(s.pre.data(), s.act.data(), s.pre.size());
  round_if(bf16, s.act.data(), rows * f);
  linear_forward(s.act.data(), rows, f, w2, h, b2, out, bf16);
}

void mlp_backward(const MlpSaved& s, const float* dout, std::int64_t rows, std::int64_t h, std::int64_t f,
                  const float* w1, const float* w2, float* dx, float* dw1, float* db1, float* dw2, float* db2,
                  bool bf16) {
  std::vector<float> dact(static_cast<std::size_t>(rows * f));
  linear_backward(dout, s.act.data(), rows, f, w2, h, dact.data(), dw2, db2, bf16);
  k::gelu_backward_cpu(dact.data(), s.pre.data(), dact.data(), dact.size());
  round_if(bf16, dact.data(), rows * f);
  linear_backward(dact.data(), s.x.data(), rows, h, w1, f, dx, dw1, db1, bf16);
}

namespace {
struct MoeSaved : Saved {
  Routing routing;
  std::vector<std::vector<Assignment>> assigned;  // per expert
  std::vector<ExpertRun> runs;                    // per expert
  std::vector<float> xn;
};
}  // namespace

std::unique_ptr<Saved> LocalFfn::forward(int layer, const float* xn, std::int64_t rows, float* out) {
  const std::int64_t h = cfg_.hidden, f = cfg_.ffn;
  if (cfg_.moe.experts == 0) {
    auto s = std::make_unique<MlpSaved>();
    auto P = [&](const char* leaf) { return params_.at(layer_param(layer, leaf)).p(); };
    mlp_forward(xn, rows, h, f, P("mlp.w1"), P("mlp.b1"), P("mlp.w2"), P("mlp.b2"), out, *s, cfg_.bf16);
    return s;
  }
  auto s = std::make_unique<MoeSaved>();
  const int E = cfg_.moe.experts, K = cfg_.moe.top_k;
  s->xn.assign(xn, xn + rows * h);
  s->routing = route(xn, rows, h, E, K, params_.at(layer_param(layer, "moe.router")).p(), cfg_.bf16);
  s->assigned.resize(E);
  s->runs.resize(E);
  // expert outputs per (row, slot), then combined in slot order
  std::vector<const float*> slot_out(static_cast<std::size_t>(rows * K), nullptr);
  for (int e = 0; e < E; ++e) {
    s->assigned[e] = assignments(s->routing, e);
    const auto& as = s->assigned[e];
    std::vector<float> packed(as.size() * h);
    for (std::size_t i = 0; i < as.size(); ++i)
      std::copy(xn + as[i].row * h, xn + (as[i].row + 1) * h, packed.begin() + i * h);
    expert_forward(cfg_, params_, layer, e, packed.data(), std::int64_t(as.size()), s->runs[e]);
    for (std::size_t i = 0; i < as.size(); ++i) slot_out[as[i].row * K + as[i].slot] = s->runs[e].out.data() + i * h;
  }
  combine(s->routing, slot_out, h, out);
  round_if(cfg_.bf16, out, rows * h);
  return s;
}

void LocalFfn::backward(int layer, const Saved& saved, const float* dout, std::int64_t rows, float* dxn,
                        TensorMap& grads) {
  const std::int64_t h = cfg_.hidden, f = cfg_.ffn;
  if (cfg_.moe.experts == 0) {
    const auto& s = static_cast<const MlpSaved&>(saved);
    auto P = [&](const char* leaf) { return params_.at(layer_param(layer, leaf)).p(); };
    auto G = [&](const char* leaf) { return grads.at(layer_param(layer, leaf)).p(); };
    mlp_backward(s, dout, rows, h, f, P("mlp.w1"), P("mlp.w2"), dxn, G("mlp.w1"), G("mlp.b1"), G("mlp.w2"), G("mlp.b2"),
                 cfg_.bf16);
    return;
  }
  const auto& s = static_cast<const MoeSaved&>(saved);
  const int E = cfg_.moe.experts, K = cfg_.moe.top_k;
  std::vector<float> dweight(static_cast<std::size_t>(rows * K), 0.f);
  std::vector<std::vector<float>> dx_e(E);
  std::fill(dxn, dxn + rows * h, 0.f);
  for (int e = 0; e < E; ++e) {
    const auto& as = s.assigned[e];
    std::vector<float> dpacked(as.size() * h);
    for (std::size_t i = 0; i < as.size(); ++i) {
      const float* dy = dout + as[i].row * h;
      const float* o = s.runs[e].out.data() + i * h;
      const float w = s.routing.weight[as[i].row * K + as[i].slot];
      double dot = 0;
      for (std::int64_t c = 0; c < h; ++c) {
        dpacked[i * h + c] = w * dy[c];
        dot += double(dy[c]) * o[c];
      }
      dweight[as[i].row * K + as[i].slot] = float(dot);
    }
    round_if(cfg_.bf16, dpacked.data(), std::int64_t(dpacked.size()));
    dx_e[e].resize(as.size() * h);
    expert_backward(cfg_, params_, layer, e, s.runs[e], dpacked.data(), std::int64_t(as.size()), dx_e[e].data(), grads);
  }
  // dxn: per token, expert contributions in slot order, then the router's
  std::vector<const float*> slot_dx(static_cast<std::size_t>(rows * K), nullptr);
  for (int e = 0; e < E; ++e)
    for (std::size_t i = 0; i < s.assigned[e].size(); ++i)
      slot_dx[s.assigned[e][i].row * K + s.assigned[e][i].slot] = dx_e[e].data() + i * h;
  for (std::int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < K; ++j) add_into(dxn + r * h, slot_dx[r * K + j], h);
  route_backward(s.routing, dweight.data(), s.xn.data(), h, params_.at(layer_param(layer, "moe.router")).p(), dxn,
                 grads.at(layer_param(layer, "moe.router")).p(), cfg_.bf16);
  round_if(cfg_.bf16, dxn, rows * h);
}

// ---- layer ------------------------------------------------------------------------------
void attention_block_forward(const ModelConfig& cfg, const TensorMap& params, int layer,
                             const std::vector<std::int64_t>& rows, const float* x, AttentionCore& attn,
                             LayerCache& c) {
  const std::int64_t T = std::int64_t(rows.size()), h = cfg.hidden;
  auto P = [&](const char* leaf) { return params.at(layer_param(layer, leaf)).p(); };
  const bool bf = cfg.bf16;
  c.rows = rows;
  c.x.assign(x, x + T * h);
  c.xn1.resize(T * h), c.mu1.resize(T), c.rs1.resize(T), c.qkv.resize(T * 3 * h), c.ctx.resize(T * h);
  c.x1.resize(T * h);
  k::layernorm_forward_cpu(x, P("ln1.g"), P("ln1.b"), c.xn1.data(), c.mu1.data(), c.rs1.data(), T, h, cfg.ln_eps);
  round_if(bf, c.xn1.data(), T * h);
  linear_forward(c.xn1.data(), T, h, P("attn.wqkv"), 3 * h, P("attn.bqkv"), c.qkv.data(), bf);
  c.attn = attn.forward(c.qkv.data(), T, c.ctx.data());
  linear_forward(c.ctx.data(), T, h, P("attn.wo"), h, P("attn.bo"), c.x1.data(), bf);
  // bias-dropout-add: in float, one rounding of the sum
  dropout_rows_forward(c.x1.data(), rows, h, cfg.dropout, dropout_key(cfg.seed, layer, 0));
  add_into(c.x1.data(), x, T * h);
  round_if(bf, c.x1.data(), T * h);
}

void ffn_block_forward(const ModelConfig& cfg, const TensorMap& params, int layer,
                       const std::vector<std::int64_t>& rows, const float* x1, float* out, FfnCore& ffn,
                       LayerCache& c) {
  const std::int64_t T = std::int64_t(rows.size()), h = cfg.hidden;
  auto P = [&](const char* leaf) { return params.at(layer_param(layer, leaf)).p(); };
  const bool bf = cfg.bf16;
  c.rows = rows;
  if (c.x1.data() != x1) c.x1.assign(x1, x1 + T * h);
  c.xn2.resize(T * h), c.mu2.resize(T), c.rs2.resize(T);
  k::layernorm_forward_cpu(x1, P("ln2.g"), P("ln2.b"), c.xn2.data(), c.mu2.data(), c.rs2.data(), T, h, cfg.ln_eps);
  round_if(bf, c.xn2.data(), T * h);
  c.ffn = ffn.forward(layer, c.xn2.data(), T, out);
  dropout_rows_forward(out, rows, h, cfg.dropout, dropout_key(cfg.seed, layer, 1));
  add_into(out, c.x1.data(), T * h);
  round_if(bf, out, T * h);
}

void layer_forward(const ModelConfig& cfg, const TensorMap& params, int layer, const std::vector<std::int64_t>& rows,
                   const float* x, float* out, AttentionCore& attn, FfnCore& ffn, LayerCache& c) {
  attention_block_forward(cfg, params, layer, rows, x, attn, c);
  ffn_block_forward(cfg, params, layer, rows, c.x1.data(), out, ffn, c);
}

void ffn_block_backward(const ModelConfig& cfg, const TensorMap& params, int layer, const LayerCache& c,
                        const float* dy, float* dx1, FfnCore& ffn, TensorMap& grads) {
  const std::int64_t T = std::int64_t(c.rows.size()), h = cfg.hidden;
  auto P = [&](const char* leaf) { return params.at(layer_param(layer, leaf)).p(); };
  auto G = [&](const char* leaf) { return grads.at(layer_param(layer, leaf)).p(); };
  const bool bf = cfg.bf16;
  std::vector<float> dt(dy, dy + T * h), dxn(T * h);
  // dy -> dropout -> FFN -> LN2, plus the residual path
  dropout_rows_backward(dt.data(), c.rows, h, cfg.dropout, dropout_key(cfg.seed, layer, 1));
  round_if(bf, dt.data(), T * h);
  ffn.backward(layer, *c.ffn, dt.data(), T, dxn.data(), grads);
  k::layernorm_backward_cpu(dxn.data(), c.x1.data(), P("ln2.g"), c.mu2.data(), c.rs2.data(), dt.data(), G("ln2.g"),
                            G("ln2.b"), T, h);
  round_if(bf, dt.data(), T * h);
  std::copy(dy, dy + T * h, dx1);
  add_into(dx1, dt.data(), T * h);
  round_if(bf, dx1, T * h);
}

void attention_block_backward(const ModelConfig& cfg, const TensorMap& params, int layer, const LayerCache& c,
                              const float* dx1, float* dx, AttentionCore& attn, TensorMap& grads) {
  const std::int64_t T = std::int64_t(c.rows.size()), h = cfg.hidden;
  auto P = [&](const char* leaf) { return params.at(layer_param(layer, leaf)).p(); };
  auto G = [&](const char* leaf) { return grads.at(layer_param(layer, leaf)).p(); };
  const bool bf = cfg.bf16;
  std::vector<float> dt(dx1, dx1 + T * h), dxn(T * h), dqkv(T * 3 * h), dctx(T * h);
  dropout_rows_backward(dt.data(), c.rows, h, cfg.dropout, dropout_key(cfg.seed, layer, 0));
  round_if(bf, dt.data(), T * h);
  linear_backward(dt.data(), c.ctx.data(), T, h, P("attn.wo"), h, dctx.data(), G("attn.wo"), G("attn.bo"), bf);
  attn.backward(*c.attn, dctx.data(), T, dqkv.data());
  linear_backward(dqkv.data(), c.xn1.data(), T, h, P("attn.wqkv"), 3 * h, dxn.data(), G("attn.wqkv"), G("attn.bqkv"),
                  bf);
  k::layernorm_backward_cpu(dxn.data(), c.x.data(), P("ln1.g"), c.mu1.data(), c.rs1.data(), dx, G("ln1.g"), G("ln1.b"),
                            T, h);
  round_if(bf, dx, T * h);
  add_into(dx, dx1, T * h);
  round_if(bf, dx, T * h);
}

void layer_backward(const ModelConfig& cfg, const TensorMap& params, int layer, const LayerCache& c, const float* dy,
                    float* dx, AttentionCore& attn, FfnCore& ffn, TensorMap& grads) {
  std::vector<float> dx1(c.rows.size() * std::size_t(cfg.hidden));
  ffn_block_backward(cfg, params, layer, c, dy, dx1.data(), ffn, grads);
  attention_block_backward(cfg, params, layer, c, dx1.data(), dx, attn, grads);
}

// ---- embedding and head -----------------------------------------------------------------
void embed_forward(const ModelConfig& cfg, const TensorMap& params, const std::int64_t* ids, std::int64_t rows,
                   float* x) {
  k::embedding_forward_cpu(ids, params.at("embed").p(), x, rows, cfg.hidden, cfg.vocab, 0);
}

void embed_backward(const ModelConfig& cfg, const std::int64_t* ids, std::int64_t rows, const float* dx,
                    TensorMap& grads) {
  k::embedding_backward_cpu(ids, dx, grads.at("embed").p(), rows, cfg.hidden, cfg.vocab, 0);
}

double head_forward_backward(const ModelConfig& cfg, const TensorMap& params, const float* x, std::int64_t rows,
                             const std::int64_t* targets, float grad_scale, float* logits, float* dx,
                             TensorMap& grads) {
  const std::int64_t h = cfg.hidden, V = cfg.vocab;
  std::vector<float> xn(rows * h), mu(rows), rs(rows), mx(rows), stats(2 * rows), loss(rows), dl(rows * V),
      dxn(rows * h);
  const bool bf = cfg.bf16;
  k::layernorm_forward_cpu(x, params.at("lnf.g").p(), params.at("lnf.b").p(), xn.data(), mu.data(), rs.data(), rows, h,
                           cfg.ln_eps);
  round_if(bf, xn.data(), rows * h);
  const float* w = params.at(output_param(cfg)).p();  // [V, h]
  matmul(bf, k::Trans::No, k::Trans::Yes, rows, V, h, xn.data(), h, w, h, 0.f, logits, V);
  round_if(bf, logits, rows * V);
  // the cross-entropy reads bf16 logits and works in fp32 (Megatron upcasts them)
  k::cross_entropy_local_max_cpu(logits, mx.data(), rows, V);
  k::cross_entropy_local_stats_cpu(logits, mx.data(), targets, stats.data(), rows, V, 0);
  k::cross_entropy_loss_cpu(mx.data(), stats.data(), targets, loss.data(), rows);
  k::cross_entropy_backward_cpu(logits, mx.data(), stats.data(), targets, grad_scale, dl.data(), rows, V, 0);
  round_if(bf, dl.data(), rows * V);
  matmul(bf, k::Trans::No, k::Trans::No, rows, h, V, dl.data(), V, w, h, 0.f, dxn.data(), h);
  round_if(bf, dxn.data(), rows * h);
  matmul(bf, k::Trans::Yes, k::Trans::No, V, h, rows, dl.data(), V, xn.data(), h, 1.f, grads.at(output_param(cfg)).p(),
         h);
  k::layernorm_backward_cpu(dxn.data(), x, params.at("lnf.g").p(), mu.data(), rs.data(), dx, grads.at("lnf.g").p(),
                            grads.at("lnf.b").p(), rows, h);
  round_if(bf, dx, rows * h);
  double sum = 0;
  for (float l : loss) sum += l;
  return sum;
}

StepResult partial_step(const ModelConfig& cfg, const TensorMap& params, const Batch& batch, int first_seq, int nseq,
                        AttentionCore& attn, FfnCore& ffn) {
  if (first_seq < 0 || nseq < 1 || first_seq + nseq > cfg.batch)
    throw Error(fmt::format("partial_step: sequences [{}, {}) are outside the batch of {}", first_seq, first_seq + nseq,
                            cfg.batch));
  return rows_step(cfg, params, batch, row_range(std::int64_t(first_seq) * cfg.seq, std::int64_t(nseq) * cfg.seq), attn,
                   ffn);
}

StepResult rows_step(const ModelConfig& cfg, const TensorMap& params, const Batch& batch,
                     const std::vector<std::int64_t>& rows, AttentionCore& attn, FfnCore& ffn) {
  validate(cfg);
  const std::int64_t h = cfg.hidden, T = std::int64_t(rows.size());
  if (std::int64_t(batch.ids.size()) != cfg.tokens() || std::int64_t(batch.targets.size()) != cfg.tokens())
    throw Error(fmt::format("batch: {} ids for {} tokens (batch x seq); build it with make_batch", batch.ids.size(),
                            cfg.tokens()));
  std::vector<std::int64_t> ids(T), targets(T);
  for (std::int64_t i = 0; i < T; ++i) {
    if (rows[i] < 0 || rows[i] >= cfg.tokens())
      throw Error(fmt::format("rows_step: token row {} is outside the batch of {} rows", rows[i], cfg.tokens()));
    ids[i] = batch.ids[rows[i]];
    targets[i] = batch.targets[rows[i]];
  }
  require_bf16_weights(cfg, params, "rows_step");
  StepResult res;
  res.grads = zeros_like(params);
  res.logits = Tensor(T, cfg.vocab);
  std::vector<LayerCache> caches(cfg.layers);
  std::vector<float> x(T * h), y(T * h);
  embed_forward(cfg, params, ids.data(), T, x.data());
  for (int l = 0; l < cfg.layers; ++l) {
    layer_forward(cfg, params, l, rows, x.data(), y.data(), attn, ffn, caches[l]);
    std::swap(x, y);
  }
  res.loss = head_forward_backward(cfg, params, x.data(), T, targets.data(), 1.f / float(cfg.tokens()), res.logits.p(),
                                   y.data(), res.grads);
  for (int l = cfg.layers - 1; l >= 0; --l) {
    layer_backward(cfg, params, l, caches[l], y.data(), x.data(), attn, ffn, res.grads);
    std::swap(x, y);
  }
  embed_backward(cfg, ids.data(), T, y.data(), res.grads);
  return res;
}

StepResult reference_step(const ModelConfig& cfg, const TensorMap& params, const Batch& batch) {
  validate(cfg);
  LocalAttention attn(cfg.heads, cfg.head_dim(), cfg.seq, cfg.bf16);
  LocalFfn ffn(cfg, params);
  StepResult res = partial_step(cfg, params, batch, 0, cfg.batch, attn, ffn);
  res.loss /= double(cfg.tokens());
  return res;
}

std::vector<float> flatten(const ModelConfig& cfg, const TensorMap& m) {
  std::vector<float> flat;
  for (const ParamInfo& p : param_infos(cfg)) {
    const Tensor& t = m.at(p.name);
    flat.insert(flat.end(), t.data.begin(), t.data.end());
  }
  return flat;
}

TensorMap unflatten(const ModelConfig& cfg, const std::vector<float>& flat) {
  TensorMap m;
  std::size_t at = 0;
  for (const ParamInfo& p : param_infos(cfg)) {
    Tensor t(p.rows, p.cols);
    if (at + t.data.size() > flat.size()) throw Error("unflatten: the flat vector is shorter than the model");
    std::copy(flat.begin() + at, flat.begin() + at + t.data.size(), t.data.begin());
    at += t.data.size();
    m.emplace(p.name, std::move(t));
  }
  return m;
}

}  // namespace meshsim::numerics
