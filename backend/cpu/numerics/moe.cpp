#include "backend/cpu/numerics/moe.h"

#include <algorithm>
#include <numeric>

#include "kernels/kernels.h"

namespace meshsim::numerics {
namespace k = meshsim::kernels;

Routing route(const float* xn, std::int64_t rows, std::int64_t h, int experts, int top_k, const float* wr, bool bf16) {
  Routing r;
  r.rows = rows, r.experts = experts, r.top_k = top_k;
  r.probs.resize(static_cast<std::size_t>(rows * experts));
  std::vector<float> logits(r.probs.size());
  matmul(bf16, k::Trans::No, k::Trans::No, rows, experts, h, xn, h, wr, experts, 0.f, logits.data(), experts);
  k::softmax_forward_cpu(logits.data(), r.probs.data(), 1, rows, experts, 1.f, {});
  r.expert.resize(static_cast<std::size_t>(rows * top_k));
  r.weight.resize(r.expert.size());
  std::vector<int> order(experts);
  for (std::int64_t t = 0; t < rows; ++t) {
    const float* g = r.probs.data() + t * experts;
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return g[a] > g[b]; });
    float z = 0.f;
    for (int j = 0; j < top_k; ++j) z += g[order[j]];
    for (int j = 0; j < top_k; ++j) {
      r.expert[t * top_k + j] = order[j];
      r.weight[t * top_k + j] = g[order[j]] / z;
    }
  }
  return r;
}

void route_backward(const Routing& r, const float* dweight, const float* xn, std::int64_t h, const float* wr,
                    float* dxn, float* dwr, bool bf16) {
  const int E = r.experts, K = r.top_k;
  std::vector<float> dlogits(static_cast<std::size_t>(r.rows * E), 0.f);
  for (std::int64_t t = 0; t < r.rows; ++t) {
    const float* g = r.probs.data() + t * E;
    float z = 0.f, wdw = 0.f;
    for (int j = 0; j < K; ++j) {
      z += g[r.expert[t * K + j]];
      wdw += r.weight[t * K + j] * dweight[t * K + j];
    }
    std::vector<float> dg(E, 0.f);
    for (int j = 0; j < K; ++j) dg[r.expert[t * K + j]] = (dweight[t * K + j] - wdw) / z;
    float gdg = 0.f;
    for (int e = 0; e < E; ++e) gdg += g[e] * dg[e];
    for (int e = 0; e < E; ++e) dlogits[t * E + e] = g[e] * (dg[e] - gdg);
  }
  std::vector<float> dx(static_cast<std::size_t>(r.rows * h));
  matmul(bf16, k::Trans::No, k::Trans::Yes, r.rows, h, E, dlogits.data(), E, wr, E, 0.f, dx.data(), h);
  matmul(bf16, k::Trans::Yes, k::Trans::No, h, E, r.rows, xn, h, dlogits.data(), E, 1.f, dwr, E);
  add_into(dxn, dx.data(), r.rows * h);
}

void combine(const Routing& r, const std::vector<const float*>& slot_out, std::int64_t h, float* out) {
  const int K = r.top_k;
  for (std::int64_t row = 0; row < r.rows; ++row) {
    float* y = out + row * h;
    std::fill(y, y + h, 0.f);
    for (int j = 0; j < K; ++j) {
      const float w = r.weight[row * K + j];
      const float* o = slot_out[row * K + j];
      for (std::int64_t c = 0; c < h; ++c) y[c] += w * o[c];
    }
  }
}

std::vector<Assignment> assignments(const Routing& r, int e) {
  std::vector<Assignment> out;
  for (std::int64_t t = 0; t < r.rows; ++t)
    for (int j = 0; j < r.top_k; ++j)
      if (r.expert[t * r.top_k + j] == e) out.push_back({t, j});
  return out;
}

void expert_forward(const ModelConfig& cfg, const TensorMap& params, int layer, int e, const float* x, std::int64_t n,
                    ExpertRun& run) {
  auto P = [&](const char* leaf) { return params.at(expert_param(layer, e, leaf)).p(); };
  run.out.assign(static_cast<std::size_t>(n * cfg.hidden), 0.f);
  if (n == 0) return;
  mlp_forward(x, n, cfg.hidden, cfg.ffn, P("w1"), P("b1"), P("w2"), P("b2"), run.out.data(), run.saved, cfg.bf16);
}

void expert_backward(const ModelConfig& cfg, const TensorMap& params, int layer, int e, const ExpertRun& run,
                     const float* dout, std::int64_t n, float* dx, TensorMap& grads) {
  if (n == 0) return;
  auto P = [&](const char* leaf) { return params.at(expert_param(layer, e, leaf)).p(); };
  auto G = [&](const char* leaf) { return grads.at(expert_param(layer, e, leaf)).p(); };
  mlp_backward(run.saved, dout, n, cfg.hidden, cfg.ffn, P("w1"), P("w2"), dx, G("w1"), G("b1"), G("w2"), G("b2"),
               cfg.bf16);
}

}  // namespace meshsim::numerics
