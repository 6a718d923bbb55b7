#include "backend/cpu/numerics/tensor_parallel.h"

#include <fmt/format.h>

#include "core/error.h"
#include "kernels/kernels.h"

namespace meshsim::numerics {
namespace k = meshsim::kernels;

void validate_tp(const ModelConfig& cfg, int t, bool sp) {
  validate(cfg);
  if (cfg.moe.experts > 0)
    throw Error("tensor parallel: MoE layers are not sharded by TP here; use expert parallelism");
  auto divides = [&](int v, const char* field) {
    if (v % t != 0)
      throw Error(
          fmt::format("tensor parallel: model.{} = {} does not divide by tp = {}; pick a multiple", field, v, t));
  };
  divides(cfg.heads, "heads");
  divides(cfg.ffn, "ffn");
  divides(cfg.vocab, "vocab");
  if (sp && cfg.tokens() % t != 0)
    throw Error(
        fmt::format("sequence parallel: batch x seq = {} token rows do not divide by tp = {}", cfg.tokens(), t));
}

TensorMap tp_shard_params(const ModelConfig& cfg, int t, int r) {
  TensorMap m;
  for (const ParamInfo& p : param_infos(cfg)) {
    switch (p.split) {
      case TpSplit::Replicated:
        m.emplace(p.name, init_block(cfg, p.name, 0, p.rows, 0, p.cols));
        break;
      case TpSplit::Rows:
        m.emplace(p.name, init_block(cfg, p.name, r * p.rows / t, (r + 1) * p.rows / t, 0, p.cols));
        break;
      case TpSplit::Cols:
        m.emplace(p.name, init_block(cfg, p.name, 0, p.rows, r * p.cols / t, (r + 1) * p.cols / t));
        break;
      case TpSplit::QkvCols: {
        const std::int64_t h = cfg.hidden, w = h / t;
        Tensor out(p.rows, 3 * w);
        for (int part = 0; part < 3; ++part) {
          const Tensor b = init_block(cfg, p.name, 0, p.rows, part * h + r * w, part * h + (r + 1) * w);
          for (std::int64_t i = 0; i < p.rows; ++i)
            std::copy(b.data.begin() + i * w, b.data.begin() + (i + 1) * w, out.data.begin() + i * 3 * w + part * w);
        }
        m.emplace(p.name, std::move(out));
        break;
      }
    }
  }
  return m;
}

TensorMap tp_assemble(const ModelConfig& cfg, const std::vector<TensorMap>& shards) {
  const int t = int(shards.size());
  TensorMap full;
  for (const ParamInfo& p : param_infos(cfg)) {
    Tensor out(p.rows, p.cols);
    const TpSplit s = p.split;
    for (int r = 0; r < t; ++r) {
      const Tensor& b = shards[r].at(p.name);
      for (std::int64_t i = 0; i < b.rows; ++i)
        for (std::int64_t j = 0; j < b.cols; ++j) {
          std::int64_t gi = i, gj = j;
          if (s == TpSplit::Rows) gi = r * p.rows / t + i;
          if (s == TpSplit::Cols) gj = r * p.cols / t + j;
          if (s == TpSplit::QkvCols) {
            const std::int64_t w = cfg.hidden / t;
            gj = (j / w) * cfg.hidden + r * w + j % w;
          }
          if (s == TpSplit::Replicated && r > 0) continue;
          out.data[gi * p.cols + gj] = b.data[i * b.cols + j];
        }
    }
    full.emplace(p.name, std::move(out));
  }
  return full;
}

namespace {

// The f / g-bar operators of TP and SP on [rows, h] activations. `in`: how the activation
// sums add (bf16 with cfg.bf16, as Megatron's bf16 all-reduces and reduce-scatters do).
struct TpOps {
  Comm& tp;
  bool sp;
  std::int64_t T, Tl, h;
  ReduceIn in;
  // f forward: local rows -> all rows
  std::vector<float> f_fwd(const std::vector<float>& x) const { return sp ? tp.allgather(x) : x; }
  // f backward: partial over all rows -> summed local rows
  std::vector<float> f_bwd(std::vector<float> d) const {
    if (sp) return tp.reducescatter(d, in);
    tp.allreduce(d, in);
    return d;
  }
  // g-bar forward: partial over all rows -> summed local rows
  std::vector<float> gbar_fwd(std::vector<float> x) const { return f_bwd(std::move(x)); }
  // g-bar backward: local rows -> all rows
  std::vector<float> gbar_bwd(const std::vector<float>& d) const { return f_fwd(d); }
};

TpOps make_ops(const ModelConfig& cfg, Comm& tp, bool sp) {
  const std::int64_t T = cfg.tokens();
  return TpOps{tp, sp, T, sp ? T / tp.size() : T, cfg.hidden, cfg.bf16 ? ReduceIn::Bf16 : ReduceIn::Float32};
}

struct TpLayerCache {
  std::vector<float> x, xn1, mu1, rs1, xn1_full, qkv, ctx, x1, xn2, mu2, rs2;
  std::unique_ptr<Saved> attn;
  MlpSaved mlp;
};

// The layer's two residual blocks as in model.h (attention: x -> c.x1; MLP: x1 -> y), each
// ending in a row-parallel GEMM: its partial is rounded to bf16 and summed by g-bar, the bias
// added and the sum rounded (RowParallelLinear's bf16 output, as the single rank's GEMM with
// its bias), then dropout and the residual in float, rounded once.
void tp_attention_forward(const ModelConfig& cfg, const TensorMap& w, int l, const TpOps& ops,
                          const std::vector<std::int64_t>& rows, const std::vector<float>& x, AttentionCore& attn,
                          TpLayerCache& c) {
  const std::int64_t T = ops.T, Tl = ops.Tl, h = ops.h, hl = h / ops.tp.size();
  auto P = [&](const char* leaf) { return w.at(layer_param(l, leaf)).p(); };
  const bool bf = cfg.bf16;
  c.x = x;
  c.xn1.resize(Tl * h), c.mu1.resize(Tl), c.rs1.resize(Tl);
  k::layernorm_forward_cpu(x.data(), P("ln1.g"), P("ln1.b"), c.xn1.data(), c.mu1.data(), c.rs1.data(), Tl, h,
                           cfg.ln_eps);
  round_if(bf, c.xn1.data(), Tl * h);
  c.xn1_full = ops.f_fwd(c.xn1);
  c.qkv.resize(T * 3 * hl), c.ctx.resize(T * hl);
  linear_forward(c.xn1_full.data(), T, h, P("attn.wqkv"), 3 * hl, P("attn.bqkv"), c.qkv.data(), bf);
  c.attn = attn.forward(c.qkv.data(), T, c.ctx.data());
  std::vector<float> a(T * h);
  linear_forward(c.ctx.data(), T, hl, P("attn.wo"), h, nullptr, a.data(), bf);
  c.x1 = ops.gbar_fwd(std::move(a));
  k::add_bias_cpu(c.x1.data(), P("attn.bo"), Tl, h);
  round_if(bf, c.x1.data(), Tl * h);
  dropout_rows_forward(c.x1.data(), rows, h, cfg.dropout, dropout_key(cfg.seed, l, 0));
  add_into(c.x1.data(), x.data(), Tl * h);
  round_if(bf, c.x1.data(), Tl * h);
}

void tp_mlp_forward(const ModelConfig& cfg, const TensorMap& w, int l, const TpOps& ops,
                    const std::vector<std::int64_t>& rows, const std::vector<float>& x1, std::vector<float>& y,
                    TpLayerCache& c) {
  const std::int64_t T = ops.T, Tl = ops.Tl, h = ops.h, fl = cfg.ffn / ops.tp.size();
  auto P = [&](const char* leaf) { return w.at(layer_param(l, leaf)).p(); };
  const bool bf = cfg.bf16;
  if (&c.x1 != &x1) c.x1 = x1;
  c.xn2.resize(Tl * h), c.mu2.resize(Tl), c.rs2.resize(Tl);
  k::layernorm_forward_cpu(c.x1.data(), P("ln2.g"), P("ln2.b"), c.xn2.data(), c.mu2.data(), c.rs2.data(), Tl, h,
                           cfg.ln_eps);
  round_if(bf, c.xn2.data(), Tl * h);
  const std::vector<float> xn2_full = ops.f_fwd(c.xn2);
  std::vector<float> m(T * h);
  mlp_forward(xn2_full.data(), T, h, fl, P("mlp.w1"), P("mlp.b1"), P("mlp.w2"), nullptr, m.data(), c.mlp, bf);
  y = ops.gbar_fwd(std::move(m));
  k::add_bias_cpu(y.data(), P("mlp.b2"), Tl, h);
  round_if(bf, y.data(), Tl * h);
  dropout_rows_forward(y.data(), rows, h, cfg.dropout, dropout_key(cfg.seed, l, 1));
  add_into(y.data(), c.x1.data(), Tl * h);
  round_if(bf, y.data(), Tl * h);
}

void tp_mlp_backward(const ModelConfig& cfg, const TensorMap& w, int l, const TpOps& ops,
                     const std::vector<std::int64_t>& rows, const TpLayerCache& c, const std::vector<float>& dy,
                     std::vector<float>& dx1, TensorMap& g) {
  const std::int64_t T = ops.T, Tl = ops.Tl, h = ops.h, fl = cfg.ffn / ops.tp.size();
  auto P = [&](const char* leaf) { return w.at(layer_param(l, leaf)).p(); };
  auto G = [&](const char* leaf) { return g.at(layer_param(l, leaf)).p(); };
  const bool bf = cfg.bf16;
  std::vector<float> dm = dy, dt(Tl * h);
  dropout_rows_backward(dm.data(), rows, h, cfg.dropout, dropout_key(cfg.seed, l, 1));
  round_if(bf, dm.data(), Tl * h);
  k::bias_backward_cpu(dm.data(), G("mlp.b2"), Tl, h);
  const std::vector<float> dm_full = ops.gbar_bwd(dm);
  std::vector<float> dxn2_part(T * h);
  mlp_backward(c.mlp, dm_full.data(), T, h, fl, P("mlp.w1"), P("mlp.w2"), dxn2_part.data(), G("mlp.w1"), G("mlp.b1"),
               G("mlp.w2"), nullptr, bf);
  const std::vector<float> dxn2 = ops.f_bwd(std::move(dxn2_part));
  k::layernorm_backward_cpu(dxn2.data(), c.x1.data(), P("ln2.g"), c.mu2.data(), c.rs2.data(), dt.data(), G("ln2.g"),
                            G("ln2.b"), Tl, h);
  round_if(bf, dt.data(), Tl * h);
  dx1 = dy;
  add_into(dx1.data(), dt.data(), Tl * h);
  round_if(bf, dx1.data(), Tl * h);
}

void tp_attention_backward(const ModelConfig& cfg, const TensorMap& w, int l, const TpOps& ops,
                           const std::vector<std::int64_t>& rows, const TpLayerCache& c, const std::vector<float>& dx1,
                           std::vector<float>& dx, AttentionCore& attn, TensorMap& g) {
  const std::int64_t T = ops.T, Tl = ops.Tl, h = ops.h, hl = h / ops.tp.size();
  auto P = [&](const char* leaf) { return w.at(layer_param(l, leaf)).p(); };
  auto G = [&](const char* leaf) { return g.at(layer_param(l, leaf)).p(); };
  const bool bf = cfg.bf16;
  std::vector<float> da = dx1;
  dropout_rows_backward(da.data(), rows, h, cfg.dropout, dropout_key(cfg.seed, l, 0));
  round_if(bf, da.data(), Tl * h);
  k::bias_backward_cpu(da.data(), G("attn.bo"), Tl, h);
  const std::vector<float> da_full = ops.gbar_bwd(da);
  std::vector<float> dctx(T * hl), dqkv(T * 3 * hl), dxn1_part(T * h);
  linear_backward(da_full.data(), c.ctx.data(), T, hl, P("attn.wo"), h, dctx.data(), G("attn.wo"), nullptr, bf);
  attn.backward(*c.attn, dctx.data(), T, dqkv.data());
  linear_backward(dqkv.data(), c.xn1_full.data(), T, h, P("attn.wqkv"), 3 * hl, dxn1_part.data(), G("attn.wqkv"),
                  G("attn.bqkv"), bf);
  const std::vector<float> dxn1 = ops.f_bwd(std::move(dxn1_part));
  dx.assign(Tl * h, 0.f);
  k::layernorm_backward_cpu(dxn1.data(), c.x.data(), P("ln1.g"), c.mu1.data(), c.rs1.data(), dx.data(), G("ln1.g"),
                            G("ln1.b"), Tl, h);
  round_if(bf, dx.data(), Tl * h);
  add_into(dx.data(), dx1.data(), Tl * h);
  round_if(bf, dx.data(), Tl * h);
}

// SP: replicated parameters saw only this rank's rows; sum over the group (fp32 main
// gradients).
void sum_replicated_grads(const ModelConfig& cfg, Comm& tp, TensorMap& grads) {
  for (const ParamInfo& p : param_infos(cfg))
    if (p.split == TpSplit::Replicated) tp.allreduce(grads.at(p.name).data);
}

}  // namespace

TpBlockStep tp_block_step(const ModelConfig& cfg, const TensorMap& w, int layer, TpBlock block, Comm& tp, bool sp,
                          const std::vector<float>& x, const std::vector<float>& dy) {
  validate_tp(cfg, tp.size(), sp);
  require_bf16_weights(cfg, w, "tp_block_step");
  const TpOps ops = make_ops(cfg, tp, sp);
  if (std::int64_t(x.size()) != ops.Tl * ops.h || std::int64_t(dy.size()) != ops.Tl * ops.h)
    throw Error(fmt::format("tp_block_step: x and dy must hold this rank's {} rows of {}", ops.Tl, ops.h));
  if (layer < 0 || layer >= cfg.layers)
    throw Error(fmt::format("tp_block_step: layer {} is outside the model's {} layers", layer, cfg.layers));
  const auto rows = row_range(sp ? tp.rank() * ops.Tl : 0, ops.Tl);
  LocalAttention attn(cfg.heads / tp.size(), cfg.head_dim(), cfg.seq, cfg.bf16);
  TpBlockStep out;
  out.grads = zeros_like(w);
  TpLayerCache c;
  if (block == TpBlock::Attention) {
    tp_attention_forward(cfg, w, layer, ops, rows, x, attn, c);
    out.out = c.x1;
    tp_attention_backward(cfg, w, layer, ops, rows, c, dy, out.dx, attn, out.grads);
  } else {
    tp_mlp_forward(cfg, w, layer, ops, rows, x, out.out, c);
    tp_mlp_backward(cfg, w, layer, ops, rows, c, dy, out.dx, out.grads);
  }
  if (sp) sum_replicated_grads(cfg, tp, out.grads);
  return out;
}

TpStep tensor_parallel_step(const ModelConfig& cfg, const TensorMap& w, const Batch& batch, Comm& tp, bool sp) {
  const int t = tp.size(), r = tp.rank();
  validate_tp(cfg, t, sp);
  require_bf16_weights(cfg, w, "tensor_parallel_step");
  const TpOps ops = make_ops(cfg, tp, sp);
  const std::int64_t T = ops.T, Tl = ops.Tl, h = ops.h, Vl = cfg.vocab / t, v0 = r * Vl;
  const auto rows = row_range(sp ? r * Tl : 0, Tl);
  const bool bf = cfg.bf16;
  TpStep out;
  out.grads = zeros_like(w);
  LocalAttention attn(cfg.heads / t, cfg.head_dim(), cfg.seq, bf);

  // embedding: vocab-parallel lookup of all rows, then g-bar
  std::vector<float> emb(T * h);
  k::embedding_forward_cpu(batch.ids.data(), w.at("embed").p(), emb.data(), T, h, Vl, v0);
  std::vector<float> x = ops.gbar_fwd(std::move(emb)), y;
  std::vector<TpLayerCache> caches(cfg.layers);
  for (int l = 0; l < cfg.layers; ++l) {
    tp_attention_forward(cfg, w, l, ops, rows, x, attn, caches[l]);
    tp_mlp_forward(cfg, w, l, ops, rows, caches[l].x1, y, caches[l]);
    std::swap(x, y);
  }
  // head: LN_f on local rows, f, logits shard, vocab-parallel cross-entropy
  std::vector<float> xn(Tl * h), mu(Tl), rs(Tl);
  k::layernorm_forward_cpu(x.data(), w.at("lnf.g").p(), w.at("lnf.b").p(), xn.data(), mu.data(), rs.data(), Tl, h,
                           cfg.ln_eps);
  round_if(bf, xn.data(), Tl * h);
  const std::vector<float> xn_full = ops.f_fwd(xn);
  const float* wout = w.at(output_param(cfg)).p();  // [V/t, h]
  out.logits = Tensor(T, Vl);
  matmul(bf, k::Trans::No, k::Trans::Yes, T, Vl, h, xn_full.data(), h, wout, h, 0.f, out.logits.p(), Vl);
  round_if(bf, out.logits.p(), T * Vl);
  std::vector<float> mx(T), stats(2 * T), loss(T), dl(T * Vl);
  k::cross_entropy_local_max_cpu(out.logits.p(), mx.data(), T, Vl);
  tp.allreduce_max(mx.data(), T);
  k::cross_entropy_local_stats_cpu(out.logits.p(), mx.data(), batch.targets.data(), stats.data(), T, Vl, v0);
  tp.allreduce(stats);
  k::cross_entropy_loss_cpu(mx.data(), stats.data(), batch.targets.data(), loss.data(), T);
  double sum = 0;
  for (float v : loss) sum += v;
  out.loss = sum / double(T);
  k::cross_entropy_backward_cpu(out.logits.p(), mx.data(), stats.data(), batch.targets.data(), 1.f / float(T),
                                dl.data(), T, Vl, v0);
  round_if(bf, dl.data(), T * Vl);
  std::vector<float> dxn_part(T * h);
  matmul(bf, k::Trans::No, k::Trans::No, T, h, Vl, dl.data(), Vl, wout, h, 0.f, dxn_part.data(), h);
  round_if(bf, dxn_part.data(), T * h);
  matmul(bf, k::Trans::Yes, k::Trans::No, Vl, h, T, dl.data(), Vl, xn_full.data(), h, 1.f,
         out.grads.at(output_param(cfg)).p(), h);
  const std::vector<float> dxn = ops.f_bwd(std::move(dxn_part));
  std::vector<float> dx(Tl * h), dx1;
  k::layernorm_backward_cpu(dxn.data(), x.data(), w.at("lnf.g").p(), mu.data(), rs.data(), dx.data(),
                            out.grads.at("lnf.g").p(), out.grads.at("lnf.b").p(), Tl, h);
  round_if(bf, dx.data(), Tl * h);
  for (int l = cfg.layers - 1; l >= 0; --l) {
    tp_mlp_backward(cfg, w, l, ops, rows, caches[l], dx, dx1, out.grads);
    tp_attention_backward(cfg, w, l, ops, rows, caches[l], dx1, dx, attn, out.grads);
  }
  const std::vector<float> demb = ops.gbar_bwd(dx);
  k::embedding_backward_cpu(batch.ids.data(), demb.data(), out.grads.at("embed").p(), T, h, Vl, v0);
  if (sp) sum_replicated_grads(cfg, tp, out.grads);
  return out;
}

}  // namespace meshsim::numerics
