#include "backend/cpu/numerics/expert_parallel.h"

#include <fmt/format.h>

#include "core/error.h"

namespace meshsim::numerics {

void validate_ep(const ModelConfig& cfg, int e) {
  validate(cfg);
  if (cfg.moe.experts == 0) throw Error("expert parallel: the model has no MoE layers; set model.moe.experts");
  if (cfg.moe.experts % e != 0)
    throw Error(
        fmt::format("expert parallel: {} experts do not split over ep = {}; use a multiple", cfg.moe.experts, e));
  if (cfg.batch % e != 0)
    throw Error(fmt::format("expert parallel: batch {} does not split over ep = {} ranks", cfg.batch, e));
}

namespace {
// Expert index of a parameter name "l{i}.moe.e{k}.…", or -1.
int expert_of(const std::string& name) {
  const auto at = name.find(".moe.e");
  if (at == std::string::npos) return -1;
  return std::stoi(name.substr(at + 6));
}
}  // namespace

TensorMap ep_rank_params(const ModelConfig& cfg, int e, int r) {
  validate_ep(cfg, e);
  const int per = cfg.moe.experts / e;
  TensorMap m;
  for (const ParamInfo& p : param_infos(cfg)) {
    const int x = expert_of(p.name);
    if (x < 0 || x / per == r) m.emplace(p.name, init_block(cfg, p.name, 0, p.rows, 0, p.cols));
  }
  return m;
}

namespace {
struct EpSaved : Saved {
  Routing routing;
  std::vector<float> xn;
  std::vector<Assignment> order;          // send layout: (token, slot) per row
  std::vector<std::int64_t> send_rows;    // rows per destination
  std::vector<std::int64_t> recv_counts;  // [source][local expert] rows received
  std::vector<ExpertRun> runs;            // per local expert
  std::vector<float> returned;            // expert outputs, in send layout
};

// Rows of each local expert, gathered from the receive buffer (source-major) and back.
struct Gather {
  int sources, local;
  const std::vector<std::int64_t>& counts;  // [source * local + j]
  std::int64_t h;
  std::int64_t offset(int s, int j) const {  // row offset in the receive buffer
    std::int64_t o = 0;
    for (int a = 0; a < sources; ++a)
      for (int b = 0; b < local; ++b) {
        if (a == s && b == j) return o;
        o += counts[a * local + b];
      }
    return o;
  }
  std::vector<float> pack(const std::vector<float>& recv, int j) const {
    std::vector<float> out;
    for (int s = 0; s < sources; ++s) {
      const std::int64_t o = offset(s, j), n = counts[s * local + j];
      out.insert(out.end(), recv.begin() + o * h, recv.begin() + (o + n) * h);
    }
    return out;
  }
  void unpack(const std::vector<float>& packed, int j, std::vector<float>& recv) const {
    std::int64_t at = 0;
    for (int s = 0; s < sources; ++s) {
      const std::int64_t o = offset(s, j), n = counts[s * local + j];
      std::copy(packed.begin() + at * h, packed.begin() + (at + n) * h, recv.begin() + o * h);
      at += n;
    }
  }
  std::int64_t rows_of(int j) const {
    std::int64_t n = 0;
    for (int s = 0; s < sources; ++s) n += counts[s * local + j];
    return n;
  }
};

std::vector<std::int64_t> times(const std::vector<std::int64_t>& v, std::int64_t h) {
  std::vector<std::int64_t> out(v);
  for (auto& x : out) x *= h;
  return out;
}
}  // namespace

std::unique_ptr<Saved> ExpertParallelFfn::forward(int layer, const float* xn, std::int64_t rows, float* out) {
  const int p = ep_.size(), E = cfg_.moe.experts, K = cfg_.moe.top_k, per = E / p, me = ep_.rank();
  const std::int64_t h = cfg_.hidden;
  auto s = std::make_unique<EpSaved>();
  s->xn.assign(xn, xn + rows * h);
  s->routing = route(xn, rows, h, E, K, params_.at(layer_param(layer, "moe.router")).p(), cfg_.bf16);
  // send layout: destination, expert, token, slot
  std::vector<float> send, counts(static_cast<std::size_t>(E), 0.f);
  s->send_rows.assign(p, 0);
  for (int e = 0; e < E; ++e) {
    for (const Assignment& a : assignments(s->routing, e)) {
      s->order.push_back(a);
      send.insert(send.end(), xn + a.row * h, xn + (a.row + 1) * h);
      counts[e] += 1.f;
      s->send_rows[e / per] += 1;
    }
  }
  dispatched_.push_back(s->send_rows);
  // 1. counts per (destination, its local expert): an all-to-all of `per` floats each
  std::vector<std::int64_t> even(p, per), got;
  const std::vector<float> rc = ep_.alltoall(counts, even, got);
  s->recv_counts.assign(rc.begin(), rc.end());
  // 2. the rows
  std::vector<std::int64_t> recv_n;
  std::vector<float> recv = ep_.alltoall(send, times(s->send_rows, h), recv_n);
  // 3. local experts on their rows from every source
  const Gather g{p, per, s->recv_counts, h};
  s->runs.resize(per);
  for (int j = 0; j < per; ++j) {
    const std::vector<float> x = g.pack(recv, j);
    expert_forward(cfg_, params_, layer, me * per + j, x.data(), g.rows_of(j), s->runs[j]);
    g.unpack(s->runs[j].out, j, recv);
  }
  // 4. outputs back (sizes transposed) and the weighted combine in slot order
  std::vector<std::int64_t> back_n;
  s->returned = ep_.alltoall(recv, recv_n, back_n);
  std::vector<const float*> slot_out(static_cast<std::size_t>(rows * K), nullptr);
  for (std::size_t i = 0; i < s->order.size(); ++i)
    slot_out[s->order[i].row * K + s->order[i].slot] = s->returned.data() + i * h;
  combine(s->routing, slot_out, h, out);
  round_if(cfg_.bf16, out, rows * h);
  return s;
}

void ExpertParallelFfn::backward(int layer, const Saved& saved, const float* dout, std::int64_t rows, float* dxn,
                                 TensorMap& grads) {
  const auto& s = static_cast<const EpSaved&>(saved);
  const int p = ep_.size(), K = cfg_.moe.top_k, per = cfg_.moe.experts / p, me = ep_.rank();
  const std::int64_t h = cfg_.hidden;
  std::vector<float> dsend(s.order.size() * h), dweight(static_cast<std::size_t>(rows * K), 0.f);
  for (std::size_t i = 0; i < s.order.size(); ++i) {
    const Assignment& a = s.order[i];
    const float w = s.routing.weight[a.row * K + a.slot];
    const float* dy = dout + a.row * h;
    const float* o = s.returned.data() + i * h;
    double dot = 0;
    for (std::int64_t c = 0; c < h; ++c) {
      dsend[i * h + c] = w * dy[c];
      dot += double(dy[c]) * o[c];
    }
    dweight[a.row * K + a.slot] = float(dot);
  }
  round_if(cfg_.bf16, dsend.data(), std::int64_t(dsend.size()));
  std::vector<std::int64_t> recv_n;
  std::vector<float> drecv = ep_.alltoall(dsend, times(s.send_rows, h), recv_n);
  const Gather g{p, per, s.recv_counts, h};
  for (int j = 0; j < per; ++j) {
    const std::vector<float> dy = g.pack(drecv, j);
    std::vector<float> dx(dy.size());
    expert_backward(cfg_, params_, layer, me * per + j, s.runs[j], dy.data(), g.rows_of(j), dx.data(), grads);
    g.unpack(dx, j, drecv);
  }
  std::vector<std::int64_t> back_n;
  const std::vector<float> dx_rows = ep_.alltoall(drecv, recv_n, back_n);
  std::vector<const float*> slot_dx(static_cast<std::size_t>(rows * K), nullptr);
  for (std::size_t i = 0; i < s.order.size(); ++i)
    slot_dx[s.order[i].row * K + s.order[i].slot] = dx_rows.data() + i * h;
  std::fill(dxn, dxn + rows * h, 0.f);
  for (std::int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < K; ++j) add_into(dxn + r * h, slot_dx[r * K + j], h);
  route_backward(s.routing, dweight.data(), s.xn.data(), h, params_.at(layer_param(layer, "moe.router")).p(), dxn,
                 grads.at(layer_param(layer, "moe.router")).p(), cfg_.bf16);
  round_if(cfg_.bf16, dxn, rows * h);
}

EpStep expert_parallel_step(const ModelConfig& cfg, const TensorMap& w, const Batch& batch, Comm& ep) {
  const int e = ep.size(), r = ep.rank();
  validate_ep(cfg, e);
  const int per = cfg.batch / e;
  require_bf16_weights(cfg, w, "expert_parallel_step");
  LocalAttention attn(cfg.heads, cfg.head_dim(), cfg.seq, cfg.bf16);
  ExpertParallelFfn ffn(cfg, w, ep);
  StepResult part = partial_step(cfg, w, batch, r * per, per, attn, ffn);
  EpStep out;
  out.loss = double(ep.allreduce(float(part.loss))) / double(cfg.tokens());
  out.logits = std::move(part.logits);
  for (auto& [name, g] : part.grads)
    if (expert_of(name) < 0) ep.allreduce(g.data);  // same names, same order on every rank
  out.grads = std::move(part.grads);
  out.dispatched = ffn.dispatched();
  return out;
}

}  // namespace meshsim::numerics
