#include "kernels/optimizer.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cmath>

#include "core/error.h"

namespace meshsim::kernels {

namespace {

// One range, with every factor a local and the arrays declared non-overlapping, so the
// compiler vectorizes the loop (sqrt and divide included).
void adamw_range(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v,
                 std::size_t n, float beta1, float beta2, float lr, float eps, float decay, float c1, float c2) {
  for (std::size_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = beta1 * m[i] + (1.f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.f - beta2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] * decay - lr * (mi * c1) / (std::sqrt(vi * c2) + eps);
  }
}

}  // namespace

// Element-wise, so the result does not depend on how oneTBB splits the range. The bias
// corrections are computed once in double and applied as float factors, as the CUDA twin does.
void adamw_step_cpu(float* p, const float* g, float* m, float* v, std::size_t n, const AdamW& hp, std::int64_t step) {
  MESHSIM_ASSERT(step >= 1);
  const double t = static_cast<double>(step);
  const auto c1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(hp.beta1), t)));
  const auto c2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(hp.beta2), t)));
  const float decay = 1.f - hp.lr * hp.weight_decay;
  const AdamW h = hp;
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 1 << 15), [=](const tbb::blocked_range<std::size_t>& r) {
    const std::size_t b = r.begin();
    adamw_range(p + b, g + b, m + b, v + b, r.size(), h.beta1, h.beta2, h.lr, h.eps, decay, c1, c2);
  });
}

}  // namespace meshsim::kernels
