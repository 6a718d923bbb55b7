#include "kernels/stream_pass.h"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace meshsim::kernels {

// Element-wise, so the result does not depend on how oneTBB splits the range.
void stream_pass_cpu(float* out, const float* in, std::size_t n, float scale) {
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, n, 1 << 16), [&](const tbb::blocked_range<std::size_t>& r) {
    for (std::size_t i = r.begin(); i != r.end(); ++i) out[i] = scale * in[i];
  });
}

}  // namespace meshsim::kernels
