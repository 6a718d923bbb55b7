#include <cuda_runtime.h>

#include "kernels/stream_pass.h"

namespace meshsim::kernels {

namespace {
// Grid-stride loop; reads n floats, writes n floats.
__global__ void stream_pass_kernel(float* __restrict__ out, const float* __restrict__ in, std::size_t n, float scale) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
    out[i] = scale * in[i];
}
}  // namespace

int stream_pass_cuda(float* out, const float* in, std::size_t n, float scale, void* stream) {
  if (n == 0) return 0;
  const int threads = 256;
  const std::size_t want = (n + threads - 1) / threads;
  const int blocks = static_cast<int>(want < 65535 ? want : 65535);
  stream_pass_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(out, in, n, scale);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace meshsim::kernels
