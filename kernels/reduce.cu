#include <cuda_runtime.h>

#include "kernels/reduce.h"

namespace meshsim::kernels {

namespace {
// Grid-stride loop, float4 where the pointers allow; memory-bound (reads 2n, writes n).
__global__ void reduce_sum_kernel(float* __restrict__ dst, const float* __restrict__ src, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
    dst[i] += src[i];
}
}  // namespace

int reduce_sum_cuda(float* dst, const float* src, std::size_t n, void* stream) {
  if (n == 0) return 0;
  const int threads = 256;
  const std::size_t want = (n + threads - 1) / threads;
  const int blocks = static_cast<int>(want < 65535 ? want : 65535);
  reduce_sum_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(dst, src, n);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace meshsim::kernels
