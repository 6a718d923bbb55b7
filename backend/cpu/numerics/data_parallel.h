// Data parallelism and ZeRO stage 1/2 (docs/math.md section 10) for the numerics tests.
//
// The batch of B sequences is split over the d ranks of `dp` (rank r holds sequences
// [r*B/d, (r+1)*B/d)); each rank runs the reference forward and backward on its share
// (partial_step: gradients already scaled by 1/(B*S)), then
//   DP:     all-reduce of the flat gradient; every rank runs Adam on all parameters;
//   ZeRO-1: all-reduce of the flat gradient; rank r keeps slice r and runs Adam on its slice
//           of the parameters with its slice of the moments; all-gather of the parameters;
//   ZeRO-2: reduce-scatter of the flat gradient (each rank receives only its slice), then as
//           ZeRO-1.
// The flat vector (param_infos order) is padded with zeros to a multiple of d.
// With cfg.bf16 (Megatron's mixed precision), `params` are the fp32 masters: the forward and
// backward compute with their bf16 copy, the gradients are fp32 main gradients and are
// reduced in fp32, and Adam updates the fp32 masters (`updated`).
//
//   Comm dp(transport, {0, 1, 2, 3}, registry);
//   DpStep s = data_parallel_step(cfg, params, batch, dp, ZeroStage::None, kNumericsAdam);
//   // s.loss (mean over the global batch), s.grads (full; ZeRO-2: only this rank's slice
//   // is meaningful, see grad_shard), s.updated (parameters after one Adam step)
#pragma once

#include <vector>

#include "backend/cpu/numerics/comm.h"
#include "backend/cpu/numerics/model.h"
#include "backend/cpu/numerics/optimizer.h"

namespace meshsim::numerics {

enum class ZeroStage { None, One, Two };

struct DpStep {
  double loss = 0;                // mean over the global batch (all-reduced)
  Tensor logits;                  // this rank's rows [B/d*S, V]
  TensorMap grads;                // all-reduced gradients (kNone, kOne); empty for kTwo
  std::vector<float> grad_shard;  // this rank's slice of the padded flat gradient
  std::int64_t shard_begin = 0;   // its offset in the flat vector
  TensorMap updated;              // parameters after one Adam step
};

DpStep data_parallel_step(const ModelConfig& cfg, const TensorMap& params, const Batch& batch, Comm& dp,
                          ZeroStage stage, const kernels::AdamW& adam);

// The single-rank optimizer step the distributed ones must reproduce.
TensorMap reference_adam_step(const ModelConfig& cfg, const TensorMap& params, const TensorMap& grads,
                              const kernels::AdamW& adam);

}  // namespace meshsim::numerics
