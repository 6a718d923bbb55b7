// The numerics' optimizer step: AdamW (kernels/optimizer.h has the formula and runs it, the
// same function the real backends run for a schedule's optimizer op), on any contiguous
// slice of the flat parameter vector with that slice's moments: the single-rank step runs
// it on all parameters, ZeRO on each rank's shard, with the same result.
//
//   AdamState st(n);
//   adam_step(kNumericsAdam, 1, w.data(), g.data(), st, n);
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/optimizer.h"

namespace meshsim::numerics {

// The numerics' hyperparameters: larger steps than a production run's (kernels::AdamW's
// defaults), so that a wrong gradient shard shows in the updated parameters.
inline constexpr kernels::AdamW kNumericsAdam{
    .lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.01f};

struct AdamState {
  std::vector<float> m, v;
  explicit AdamState(std::int64_t n = 0) : m(static_cast<std::size_t>(n), 0.f), v(static_cast<std::size_t>(n), 0.f) {}
};

// step: 1-based step count t. Throws Error if the state does not hold n elements.
void adam_step(const kernels::AdamW& hp, int step, float* w, const float* g, AdamState& state, std::int64_t n);

}  // namespace meshsim::numerics
