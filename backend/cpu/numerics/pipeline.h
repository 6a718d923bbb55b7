// Pipeline parallelism with the 1F1B schedule (docs/math.md section 9) for the numerics tests.
//
// The L layers are split over the p ranks of `pp` (stage s owns layers [s L/p, (s+1) L/p));
// stage 0 also owns the embedding, stage p-1 the final LayerNorm and the output projection
// (with tied embeddings, both ends hold the table and their two gradient contributions are
// summed by an all-reduce over the group {0, p-1}, as Megatron does). The batch is split
// into m micro-batches of B/m sequences. Stage s runs
//
//   warm-up: min(p-1-s, m) forwards;  steady: (forward j+w, backward j) pairs;  cool-down:
//   the remaining backwards.   (p = 3, m = 4;  F = forward, B = backward, by micro-batch)
//     stage 0: F0 F1 F2 B0 F3 B1 B2 B3
//     stage 1:    F0 F1 B0 F2 B1 F3 B2 B3
//     stage 2:       F0 B0 F1 B1 F2 B2 F3 B3
//
// A forward receives the activations [B/m*S, h] from stage s-1 and sends its output to s+1;
// a backward receives the output gradient from s+1 and sends the input gradient to s-1
// (point-to-point over the transport). Parameter gradients accumulate over micro-batches;
// the loss gradient is scaled by 1/(B*S) so the sum is the gradient of the mean loss.
// With cfg.bf16 the stage computes with bf16 weights (pass bf16_copy of its masters) and
// sends bf16 activations and gradients; its parameter gradients accumulate in fp32.
//
//   Comm pp(transport, {0, 1, 2}, registry);
//   PpStep s = pipeline_step(cfg, pp_stage_params(cfg, 3, pp.rank()), batch, pp, 4);
#pragma once

#include <string>
#include <vector>

#include "backend/cpu/numerics/comm.h"
#include "backend/cpu/numerics/model.h"

namespace meshsim::numerics {

// Throws Error when p does not divide the layers or m the batch.
void validate_pp(const ModelConfig& cfg, int stages, int microbatches);

// The parameters stage `stage` of `stages` owns, built from the seed.
TensorMap pp_stage_params(const ModelConfig& cfg, int stages, int stage);

struct PpStep {
  double loss = 0;               // mean over the batch (broadcast from the last stage)
  Tensor logits;                 // last stage: [B*S, V]; others empty
  TensorMap grads;               // this stage's parameters
  std::vector<std::string> ops;  // this stage's schedule as run ("F0", "B0", ...)
};

PpStep pipeline_step(const ModelConfig& cfg, const TensorMap& stage_params, const Batch& batch, Comm& pp,
                     int microbatches);

}  // namespace meshsim::numerics
