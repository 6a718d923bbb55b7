// Adam (Kingma and Ba) with decoupled weight decay (AdamW), written once and run on any
// contiguous slice of the flat parameter vector: the single-rank step runs it on all
// parameters, ZeRO on each rank's shard (with that shard's moments), with the same result.
//
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;  mhat = m / (1 - b1^t);  vhat = v / (1 - b2^t)
//   w = w - lr (mhat / (sqrt(vhat) + eps) + wd w)
//
//   AdamState st(n);
//   adam_step(AdamConfig{}, 1, w.data(), g.data(), st, n);
#pragma once

#include <cstdint>
#include <vector>

namespace meshsim::numerics {

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
