#include "kernels/stream_pass.h"

namespace meshsim::kernels {

void stream_pass_cpu(float* out, const float* in, std::size_t n, float scale) {
  for (std::size_t i = 0; i < n; ++i) out[i] = scale * in[i];
}

}  // namespace meshsim::kernels
