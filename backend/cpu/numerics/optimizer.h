// The numerics' optimizer step: AdamW (kernels/optimizer.h has the formula and runs it, the
// same function the real backends run for a schedule's optimizer op), on any contiguous
// slice of the flat parameter vector with that slice's moments: the single-rank step runs
// it on all parameters, ZeRO on each rank's shard, with the same result.
//
//   AdamState st(n);
//   adam_step(AdamConfig{}, 1, w.data(), g.data(), st, n);
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/optimizer.h"

namespace meshsim::numerics {

// Larger steps than a production run's (kernels::AdamW's defaults), so that a wrong
// gradient shard shows in the updated parameters.
struct AdamConfig {
  float lr = 1e-2f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.01f;
};

struct AdamState {
  std::vector<float> m, v;
  explicit AdamState(std::int64_t n = 0) : m(static_cast<std::size_t>(n), 0.f), v(static_cast<std::size_t>(n), 0.f) {}
};

// step: 1-based step count t. Throws Error if the state does not hold n elements.
void adam_step(const AdamConfig& cfg, int step, float* w, const float* g, AdamState& state, std::int64_t n);

}  // namespace meshsim::numerics
