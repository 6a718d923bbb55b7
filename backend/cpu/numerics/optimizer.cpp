#include "backend/cpu/numerics/optimizer.h"

#include <fmt/format.h>

#include "core/error.h"

namespace meshsim::numerics {

void adam_step(const kernels::AdamW& hp, int step, float* w, const float* g, AdamState& st, std::int64_t n) {
  if (std::int64_t(st.m.size()) != n || std::int64_t(st.v.size()) != n)
    throw Error(
        fmt::format("adam_step: state holds {} elements for {} parameters; size it to the shard", st.m.size(), n));
  if (step < 1) throw Error(fmt::format("adam_step: step {}; steps count from 1", step));
  kernels::adamw_step_cpu(w, g, st.m.data(), st.v.data(), static_cast<std::size_t>(n), hp, step);
}

}  // namespace meshsim::numerics
