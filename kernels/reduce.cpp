#include "kernels/reduce.h"

#include <algorithm>

namespace meshsim::kernels {

void reduce_sum_cpu(float* dst, const float* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}

void reduce_max_cpu(float* dst, const float* src, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = std::max(dst[i], src[i]);
}

}  // namespace meshsim::kernels
