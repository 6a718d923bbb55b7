#include "kernels/rope.h"

#include <cmath>

#include "core/error.h"
#include "kernels/parallel.h"

namespace meshsim::kernels {
namespace {

// One row turned by its token's angles; sign +1 forward, -1 backward (the inverse rotation).
void rotate_row(const float* x, const float* cs, float* y, std::int64_t d, float sign) {
  const std::int64_t half = d / 2;
  for (std::int64_t i = 0; i < half; ++i) {
    const float c = cs[i], s = sign * cs[half + i];
    const float a = x[i], b = x[half + i];
    y[i] = a * c - b * s;
    y[half + i] = b * c + a * s;
  }
}

void rotate(const float* x, const float* cs, float* y, std::int64_t rows, std::int64_t heads, std::int64_t d,
            float sign) {
  MESHSIM_ASSERT(rows >= 0 && heads > 0 && d > 0 && d % 2 == 0);
  detail::for_each_index(rows,
                         [&](std::int64_t r) { rotate_row(x + r * d, cs + (r / heads) * d, y + r * d, d, sign); });
}

}  // namespace

void rope_table_cpu(float* cs, std::int64_t tokens, std::int64_t d, std::int64_t seq, double base) {
  MESHSIM_ASSERT(tokens >= 0 && d > 0 && d % 2 == 0 && seq > 0 && base > 1);
  const std::int64_t half = d / 2;
  for (std::int64_t t = 0; t < tokens; ++t)
    for (std::int64_t i = 0; i < half; ++i) {
      const double a = static_cast<double>(t % seq) * std::pow(base, -2.0 * static_cast<double>(i) / d);
      cs[t * d + i] = static_cast<float>(std::cos(a));
      cs[t * d + half + i] = static_cast<float>(std::sin(a));
    }
}

void rope_forward_cpu(const float* x, const float* cs, float* y, std::int64_t rows, std::int64_t heads,
                      std::int64_t d) {
  rotate(x, cs, y, rows, heads, d, 1.f);
}

void rope_backward_cpu(const float* dy, const float* cs, float* dx, std::int64_t rows, std::int64_t heads,
                       std::int64_t d) {
  rotate(dy, cs, dx, rows, heads, d, -1.f);
}

}  // namespace meshsim::kernels
