#include "backend/cpu/numerics/optimizer.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace meshsim::numerics {

void adam_step(const AdamConfig& c, int step, float* w, const float* g, AdamState& st, std::int64_t n) {
  if (std::int64_t(st.m.size()) != n || std::int64_t(st.v.size()) != n)
    throw Error(fmt::format("adam_step: state holds {} elements for {} parameters; size it to the shard",
                            st.m.size(), n));
  if (step < 1) throw Error(fmt::format("adam_step: step {}; steps count from 1", step));
  const float c1 = 1.f - std::pow(c.beta1, float(step)), c2 = 1.f - std::pow(c.beta2, float(step));
  for (std::int64_t i = 0; i < n; ++i) {
    st.m[i] = c.beta1 * st.m[i] + (1.f - c.beta1) * g[i];
    st.v[i] = c.beta2 * st.v[i] + (1.f - c.beta2) * g[i] * g[i];
    const float mhat = st.m[i] / c1, vhat = st.v[i] / c2;
    w[i] -= c.lr * (mhat / (std::sqrt(vhat) + c.eps) + c.weight_decay * w[i]);
  }
}

}  // namespace meshsim::numerics
