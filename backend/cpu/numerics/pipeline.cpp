#include "backend/cpu/numerics/pipeline.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace meshsim::numerics {

void validate_pp(const ModelConfig& cfg, int p, int m) {
  validate(cfg);
  if (cfg.layers % p != 0)
    throw Error(fmt::format("pipeline: {} layers do not split over {} stages; use a multiple of the stage count",
                            cfg.layers, p));
  if (m < 1 || cfg.batch % m != 0)
    throw Error(fmt::format("pipeline: batch {} does not split into {} micro-batches; pick a divisor of the batch",
                            cfg.batch, m));
}

namespace {
bool owned(const ModelConfig& cfg, int p, int s, const std::string& name) {
  const int per = cfg.layers / p;
  if (name == "embed") return s == 0 || (cfg.tied && s == p - 1);
  if (name == "head" || name == "lnf.g" || name == "lnf.b") return s == p - 1;
  const int layer = std::stoi(name.substr(1, name.find('.') - 1));  // "l{i}.…"
  return layer / per == s;
}
}  // namespace

TensorMap pp_stage_params(const ModelConfig& cfg, int p, int s) {
  TensorMap m;
  for (const ParamInfo& info : param_infos(cfg))
    if (owned(cfg, p, s, info.name)) m.emplace(info.name, init_block(cfg, info.name, 0, info.rows, 0, info.cols));
  return m;
}

PpStep pipeline_step(const ModelConfig& cfg, const TensorMap& w, const Batch& batch, Comm& pp, int m) {
  const int p = pp.size(), s = pp.rank();
  validate_pp(cfg, p, m);
  const int per = cfg.layers / p, first = s * per, seqs = cfg.batch / m;
  const std::int64_t h = cfg.hidden, rows = std::int64_t(seqs) * cfg.seq, T = cfg.tokens();
  const bool is_first = s == 0, is_last = s == p - 1;
  PpStep out;
  out.grads = zeros_like(w);
  if (is_last) out.logits = Tensor(T, cfg.vocab);
  require_bf16_weights(cfg, w, "pipeline_step");
  LocalAttention attn(cfg.heads, cfg.head_dim(), cfg.seq, cfg.bf16);
  LocalFfn ffn(cfg, w);
  std::vector<std::vector<LayerCache>> caches(m);
  for (auto& c : caches) c.resize(per);
  std::vector<std::vector<float>> head_dx(m);  // last stage: dloss/dx of each micro-batch
  double loss_sum = 0;

  auto forward = [&](int j) {
    out.ops.push_back(fmt::format("F{}", j));
    const std::int64_t g0 = std::int64_t(j) * rows;
    std::vector<float> x(rows * h), y(rows * h);
    if (is_first)
      embed_forward(cfg, w, batch.ids.data() + g0, rows, x.data());
    else
      pp.recv(s - 1, x.data(), rows * h);
    const auto grows = row_range(g0, rows);
    for (int i = 0; i < per; ++i) {
      layer_forward(cfg, w, first + i, grows, x.data(), y.data(), attn, ffn, caches[j][i]);
      std::swap(x, y);
    }
    if (is_last) {
      head_dx[j].resize(rows * h);
      loss_sum += head_forward_backward(cfg, w, x.data(), rows, batch.targets.data() + g0, 1.f / float(T),
                                        out.logits.p() + g0 * cfg.vocab, head_dx[j].data(), out.grads);
    } else {
      pp.send(s + 1, x.data(), rows * h);
    }
  };
  auto backward = [&](int j) {
    out.ops.push_back(fmt::format("B{}", j));
    std::vector<float> dy(rows * h), dx(rows * h);
    if (is_last)
      dy = std::move(head_dx[j]);
    else
      pp.recv(s + 1, dy.data(), rows * h);
    for (int i = per - 1; i >= 0; --i) {
      layer_backward(cfg, w, first + i, caches[j][i], dy.data(), dx.data(), attn, ffn, out.grads);
      std::swap(dx, dy);
      caches[j][i] = LayerCache{};  // activations of this micro-batch are freed after its backward
    }
    if (is_first)
      embed_backward(cfg, batch.ids.data() + std::int64_t(j) * rows, rows, dy.data(), out.grads);
    else
      pp.send(s - 1, dy.data(), rows * h);
  };

  const int warmup = std::min(p - 1 - s, m);
  for (int j = 0; j < warmup; ++j) forward(j);
  for (int j = 0; j < m - warmup; ++j) {
    forward(j + warmup);
    backward(j);
  }
  for (int j = m - warmup; j < m; ++j) backward(j);

  if (cfg.tied && p > 1 && (is_first || is_last)) {  // the two halves of the shared table's gradient
    Comm ends = pp.subgroup({0, p - 1});
    ends.allreduce(out.grads.at("embed").data);
  }
  std::vector<float> loss{float(loss_sum / double(T))};
  pp.broadcast(loss, p - 1);
  out.loss = loss[0];
  return out;
}

}  // namespace meshsim::numerics
