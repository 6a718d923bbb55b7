// Mixture of experts (docs/math.md section 8) for the numerics tests: the router and the
// expert MLPs, written so that the single-rank MoE (LocalFfn) and the expert-parallel one
// (expert_parallel.h) share them and differ only in where an expert's tokens are computed.
//
//   router:  G = softmax(xn Wr)  (Wr [h, E]);  top-k experts of each token by G (ties: lower
//            expert index first, in descending G order);  weights w_j = G_{e_j} / sum_top G
//   output:  y_t = sum_j w_j FFN_{e_j}(xn_t)   summed in slot order j = 0..k-1
//   backward: dFFN_{e_j} input = w_j dy_t;  dw_j = dy_t . FFN_{e_j}(xn_t);
//            dG_i = (dw_i - sum_j w_j dw_j) / sum_top G for selected i, else 0;
//            dlogits = G (dG - sum G dG);  dWr += xn^T dlogits;  dxn += dlogits Wr^T.
// Each expert computes its tokens as one packed matrix in global token order (then slot),
// so the single-rank and the expert-parallel runs sum the same terms in the same order.
//
//   Routing r = route(xn, rows, h, experts, top_k, wr);
//   for each expert e: rows_of(r, e) -> pack -> expert MLP -> combine(r, ...)
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/numerics/model.h"

namespace meshsim::numerics {

struct Routing {
  std::int64_t rows = 0;
  int experts = 0, top_k = 0;
  std::vector<float> probs;   // [rows, E] softmax of the router logits
  std::vector<int> expert;    // [rows, k] chosen experts
  std::vector<float> weight;  // [rows, k] renormalized gate weights
};

// The router runs in fp32 (Megatron's --moe-router-dtype fp32): bf16 (cfg.bf16) only makes
// its GEMMs sum in index order (matmul); logits, probabilities and weights stay fp32.
Routing route(const float* xn, std::int64_t rows, std::int64_t h, int experts, int top_k, const float* wr,
              bool bf16 = false);
// dweight [rows, k] -> dxn (accumulated +=, fp32) and dwr (accumulated +=).
void route_backward(const Routing& r, const float* dweight, const float* xn, std::int64_t h, const float* wr,
                    float* dxn, float* dwr, bool bf16 = false);

// (token row, slot) pairs routed to expert e, in token then slot order.
struct Assignment {
  std::int64_t row = 0;
  int slot = 0;
};
std::vector<Assignment> assignments(const Routing& r, int e);

// out[row] = sum over slots j of weight[row, j] * slot_out[row * k + j] (h floats each), in
// slot order: the single-rank and the expert-parallel layers combine identically. In float;
// a bf16 step rounds the combined output once (and the input gradient once, after the
// experts' and the router's parts are added).
void combine(const Routing& r, const std::vector<const float*>& slot_out, std::int64_t h, float* out);

// One expert's MLP on packed rows, parameters from `params` (names expert_param(layer, e, ..)).
struct ExpertRun {
  MlpSaved saved;
  std::vector<float> out;  // [n, h]
};
void expert_forward(const ModelConfig& cfg, const TensorMap& params, int layer, int e, const float* x, std::int64_t n,
                    ExpertRun& run);
// dout [n, h] -> dx [n, h] (overwritten); gradients accumulated into grads.
void expert_backward(const ModelConfig& cfg, const TensorMap& params, int layer, int e, const ExpertRun& run,
                     const float* dout, std::int64_t n, float* dx, TensorMap& grads);

}  // namespace meshsim::numerics
