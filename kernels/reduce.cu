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

// dst = max(dst, src) written as the reference's std::max (dst < src ? src : dst), so NaNs and
// signed zeros behave identically.
__global__ void reduce_max_kernel(float* __restrict__ dst, const float* __restrict__ src, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
    dst[i] = dst[i] < src[i] ? src[i] : dst[i];
}

int launch_blocks(std::size_t n, int threads) {
  const std::size_t want = (n + threads - 1) / threads;
  return static_cast<int>(want < 65535 ? want : 65535);
}
}  // namespace

int reduce_sum_cuda(float* dst, const float* src, std::size_t n, void* stream) {
  if (n == 0) return 0;
  const int threads = 256;
  reduce_sum_kernel<<<launch_blocks(n, threads), threads, 0, static_cast<cudaStream_t>(stream)>>>(dst, src, n);
  return static_cast<int>(cudaGetLastError());
}

int reduce_max_cuda(float* dst, const float* src, std::size_t n, void* stream) {
  if (n == 0) return 0;
  const int threads = 256;
  reduce_max_kernel<<<launch_blocks(n, threads), threads, 0, static_cast<cudaStream_t>(stream)>>>(dst, src, n);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace meshsim::kernels
