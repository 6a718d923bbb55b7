// CUDA memory-bound pass (kernels/stream_pass.h). Grid-stride, float4 when both pointers
// are 16-byte aligned: scalar loads left a quarter of an H200's bandwidth unused (3.23 TB/s
// against 4.26 for a device-to-device copy; docs/validation/gpu-h200.md), and calibrate
// measures memory bandwidth with this pass.
#include "kernels/cuda_common.cuh"
#include "kernels/stream_pass.h"

namespace meshsim::kernels {

namespace {
using namespace cuda_detail;

// Reads n floats, writes n floats: W per step, then a scalar tail.
template <int W>
__global__ void stream_pass_kernel(float* __restrict__ out, const float* __restrict__ in, std::size_t n, float scale) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t nvec = n / W;
  for (std::size_t i = first; i < nvec; i += stride) {
    float v[W];
    load_vec<W>(in + i * W, v);
#pragma unroll
    for (int w = 0; w < W; ++w) v[w] *= scale;
    store_vec<W>(out + i * W, v);
  }
  for (std::size_t i = nvec * W + first; i < n; i += stride) out[i] = scale * in[i];
}
}  // namespace

int stream_pass_cuda(float* out, const float* in, std::size_t n, float scale, void* stream) {
  if (n == 0) return 0;
  constexpr int kThreads = 256;
  if (aligned16(in) && aligned16(out))
    stream_pass_kernel<4>
        <<<grid_for(static_cast<std::int64_t>(n / 4), kThreads), kThreads, 0, as_stream(stream)>>>(out, in, n, scale);
  else
    stream_pass_kernel<1>
        <<<grid_for(static_cast<std::int64_t>(n), kThreads), kThreads, 0, as_stream(stream)>>>(out, in, n, scale);
  return launch_status();
}

}  // namespace meshsim::kernels
