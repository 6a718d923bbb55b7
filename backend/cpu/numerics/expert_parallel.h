// Expert parallelism for MoE layers (docs/math.md section 8) for the numerics tests.
//
// The e ranks of `ep` split the batch like data parallelism (rank r holds sequences
// [r B/e, (r+1) B/e)) and the experts (rank r owns experts [r E/e, (r+1) E/e)); every
// rank holds all non-expert weights. Per MoE layer:
//   route locally (moe.h) -> pack each (token, slot) row by destination rank, then expert,
//   then token -> all-to-all of the per-expert counts -> all-to-all of the rows (uneven
//   sizes: as many rows as the router sent) -> each local expert runs its rows from all
//   sources as one matrix (source-major, i.e. global token order, as in the single-rank
//   MoE) -> all-to-all of the outputs back (sizes transposed) -> weighted combine in slot
//   order. Backward: the weighted output gradients travel the same way, the experts'
//   input gradients come back, the router's backward is local. Expert gradients stay on
//   their owner; non-expert gradients (attention, LayerNorms, router, embedding) are
//   all-reduced over the group.
//
//   Comm ep(transport, {0, 1}, registry);
//   EpStep s = expert_parallel_step(cfg, ep_rank_params(cfg, 2, ep.rank()), batch, ep);
#pragma once

#include <vector>

#include "backend/cpu/numerics/comm.h"
#include "backend/cpu/numerics/model.h"
#include "backend/cpu/numerics/moe.h"

namespace meshsim::numerics {

// Throws Error unless the model has MoE layers, e divides the experts and the batch.
void validate_ep(const ModelConfig& cfg, int e);

// Non-expert parameters and the experts rank r of e owns.
TensorMap ep_rank_params(const ModelConfig& cfg, int e, int rank);

class ExpertParallelFfn : public FfnCore {
 public:
  ExpertParallelFfn(const ModelConfig& cfg, const TensorMap& params, Comm& ep) : cfg_(cfg), params_(params), ep_(ep) {}
  std::unique_ptr<Saved> forward(int layer, const float* xn, std::int64_t rows, float* out) override;
  void backward(int layer, const Saved& saved, const float* dout, std::int64_t rows, float* dxn,
                TensorMap& grads) override;
  // Rows this rank dispatched to each rank, per forward call (to show the sizes are uneven).
  const std::vector<std::vector<std::int64_t>>& dispatched() const { return dispatched_; }

 private:
  const ModelConfig& cfg_;
  const TensorMap& params_;
  Comm& ep_;
  std::vector<std::vector<std::int64_t>> dispatched_;
};

struct EpStep {
  double loss = 0;
  Tensor logits;    // this rank's rows
  TensorMap grads;  // non-expert (all-reduced) and this rank's experts
  std::vector<std::vector<std::int64_t>> dispatched;
};

EpStep expert_parallel_step(const ModelConfig& cfg, const TensorMap& rank_params, const Batch& batch, Comm& ep);

}  // namespace meshsim::numerics
