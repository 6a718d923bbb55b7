// CUDA dropout with Philox4x32-10 (kernels/dropout.h has the scheme). One thread per Philox
// counter, i.e. four consecutive global indices, the same bits as philox4x32_10 on the host:
// hi/lo 32 bits of the 32x32 products through __umulhi and a wrapped multiply. The keep test
// and y = x * s (s = 1 / (1 - p) computed on the host in float, as the reference does) are
// single IEEE operations, so GPU and CPU outputs are bit-identical.
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"

namespace meshsim::kernels {
namespace {

using namespace cuda_detail;

constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
constexpr int kThreads = 256;

__device__ __forceinline__ uint4 philox(std::uint64_t block, std::uint32_t k0, std::uint32_t k1) {
  std::uint32_t c0 = static_cast<std::uint32_t>(block), c1 = static_cast<std::uint32_t>(block >> 32);
  std::uint32_t c2 = 0u, c3 = 0u;
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += kW0;
      k1 += kW1;
    }
    const std::uint32_t hi0 = __umulhi(kM0, c0), lo0 = kM0 * c0;
    const std::uint32_t hi1 = __umulhi(kM1, c2), lo1 = kM1 * c2;
    const std::uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
  }
  return make_uint4(c0, c1, c2, c3);
}

__device__ __forceinline__ bool keep(std::uint32_t bits, float p) {
  return static_cast<float>(bits >> 8) * 0x1p-24f >= p;
}

// Counter blocks [first, first + blocks); element i = 4 b + lane - offset when inside [0, n).
// `vec`: offset % 4 == 0 and in/out 16-byte aligned, so a full block is one float4.
__global__ void dropout_kernel(const float* in, float* out, std::size_t n, float p, float scale, std::uint32_t k0,
                               std::uint32_t k1, std::uint64_t first, std::uint64_t blocks, std::uint64_t offset,
                               bool vec) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t t = static_cast<std::uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < blocks; t += stride) {
    const std::uint64_t b = first + t;
    const uint4 r = philox(b, k0, k1);
    const std::uint32_t bits[4] = {r.x, r.y, r.z, r.w};
    const std::uint64_t j0 = 4 * b;
    if (vec && j0 + 4 <= offset + n) {  // j0 >= offset holds when offset % 4 == 0
      const std::size_t i = j0 - offset;
      float v[4];
      load_vec<4>(in + i, v);
#pragma unroll
      for (int lane = 0; lane < 4; ++lane) v[lane] = keep(bits[lane], p) ? v[lane] * scale : 0.f;
      store_vec<4>(out + i, v);
      continue;
    }
#pragma unroll
    for (int lane = 0; lane < 4; ++lane) {
      const std::uint64_t j = j0 + lane;
      if (j < offset || j - offset >= n) continue;
      const std::size_t i = j - offset;
      out[i] = keep(bits[lane], p) ? in[i] * scale : 0.f;
    }
  }
}

int launch_dropout(const float* in, float* out, std::size_t n, float p, std::uint64_t seed, std::uint64_t offset,
                   cudaStream_t s) {
  if (!(p >= 0.f && p <= 1.f)) return kInvalidValue;
  if (n == 0) return 0;
  const float scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
  const std::uint64_t first = offset / 4, last = (offset + n - 1) / 4;
  const std::uint64_t blocks = last - first + 1;
  const bool vec = offset % 4 == 0 && aligned16(in) && aligned16(out);
  dropout_kernel<<<grid_for(static_cast<std::int64_t>(blocks), kThreads), kThreads, 0, s>>>(
      in, out, n, p, scale, static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32), first, blocks,
      offset, vec);
  return launch_status();
}

}  // namespace

int dropout_forward_cuda(const float* x, float* y, std::size_t n, float p, std::uint64_t seed, std::uint64_t offset,
                         void* stream) {
  return launch_dropout(x, y, n, p, seed, offset, as_stream(stream));
}

int dropout_backward_cuda(const float* dy, float* dx, std::size_t n, float p, std::uint64_t seed, std::uint64_t offset,
                          void* stream) {
  return launch_dropout(dy, dx, n, p, seed, offset, as_stream(stream));
}

}  // namespace meshsim::kernels
