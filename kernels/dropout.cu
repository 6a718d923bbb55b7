// CUDA dropout with Philox4x32-10 (kernels/dropout.h has the scheme). One thread per Philox
// counter, i.e. four consecutive global indices, the same bits as philox4x32_10 on the host:
// hi/lo 32 bits of the 32x32 products through __umulhi and a wrapped multiply. The keep test
// and y = x * s (s = 1 / (1 - p) computed on the host in float, as the reference does) are
// single IEEE operations, so GPU and CPU outputs are bit-identical. The same kernel serves
// bf16 tensors (the mask and the float math unchanged, each output narrowed once) and the
// fused dropout-add.
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
// `vec`: offset % 4 == 0 and in/out (and residual) 16-byte aligned, so a full block is one
// vector of 4 (float4, or four bf16 in 8 bytes). T: float or bf16 (widened, computed in float,
// narrowed once). kAdd: out = dropout(in) + residual (the fused dropout-add); the multiply and
// the add are __fmul_rn / __fadd_rn, so nvcc cannot contract them into an FMA and the float
// result is the CPU's dropout_forward_cpu then reduce_sum_cpu bit for bit. Without kAdd the
// plain `v * scale` is one IEEE multiply either way (the float code as before).
template <class T, bool kAdd>
__global__ void dropout_kernel(const T* in, const T* residual, T* out, std::size_t n, float p, float scale,
                               std::uint32_t k0, std::uint32_t k1, std::uint64_t first, std::uint64_t blocks,
                               std::uint64_t offset, bool vec) {
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
      if constexpr (kAdd) {
        float res[4];
        load_vec<4>(residual + i, res);
#pragma unroll
        for (int lane = 0; lane < 4; ++lane)
          v[lane] = __fadd_rn(keep(bits[lane], p) ? __fmul_rn(v[lane], scale) : 0.f, res[lane]);
      } else {
#pragma unroll
        for (int lane = 0; lane < 4; ++lane) v[lane] = keep(bits[lane], p) ? v[lane] * scale : 0.f;
      }
      store_vec<4>(out + i, v);
      continue;
    }
#pragma unroll
    for (int lane = 0; lane < 4; ++lane) {
      const std::uint64_t j = j0 + lane;
      if (j < offset || j - offset >= n) continue;
      const std::size_t i = j - offset;
      if constexpr (kAdd)
        store(out, i, __fadd_rn(keep(bits[lane], p) ? __fmul_rn(load(in, i), scale) : 0.f, load(residual, i)));
      else
        store(out, i, keep(bits[lane], p) ? load(in, i) * scale : 0.f);
    }
  }
}

// residual: nullptr for plain dropout, else the fused dropout-add.
template <class T>
int launch_dropout(const T* in, const T* residual, T* out, std::size_t n, float p, std::uint64_t seed,
                   std::uint64_t offset, cudaStream_t s) {
  if (!(p >= 0.f && p <= 1.f)) return kInvalidValue;
  if (n == 0) return 0;
  const float scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
  const std::uint64_t first = offset / 4, last = (offset + n - 1) / 4;
  const std::uint64_t blocks = last - first + 1;
  const bool vec = offset % 4 == 0 && aligned16(in) && aligned16(out) && (residual == nullptr || aligned16(residual));
  const int grid = grid_for(static_cast<std::int64_t>(blocks), kThreads);
  const auto k0 = static_cast<std::uint32_t>(seed), k1 = static_cast<std::uint32_t>(seed >> 32);
  if (residual == nullptr)
    dropout_kernel<T, false>
        <<<grid, kThreads, 0, s>>>(in, residual, out, n, p, scale, k0, k1, first, blocks, offset, vec);
  else
    dropout_kernel<T, true>
        <<<grid, kThreads, 0, s>>>(in, residual, out, n, p, scale, k0, k1, first, blocks, offset, vec);
  return launch_status();
}

}  // namespace

int dropout_forward_cuda(const float* x, float* y, std::size_t n, float p, std::uint64_t seed, std::uint64_t offset,
                         void* stream) {
  return launch_dropout(x, static_cast<const float*>(nullptr), y, n, p, seed, offset, as_stream(stream));
}
int dropout_forward_cuda(const bf16* x, bf16* y, std::size_t n, float p, std::uint64_t seed, std::uint64_t offset,
                         void* stream) {
  return launch_dropout(x, static_cast<const bf16*>(nullptr), y, n, p, seed, offset, as_stream(stream));
}

int dropout_backward_cuda(const float* dy, float* dx, std::size_t n, float p, std::uint64_t seed, std::uint64_t offset,
                          void* stream) {
  return launch_dropout(dy, static_cast<const float*>(nullptr), dx, n, p, seed, offset, as_stream(stream));
}
int dropout_backward_cuda(const bf16* dy, bf16* dx, std::size_t n, float p, std::uint64_t seed, std::uint64_t offset,
                          void* stream) {
  return launch_dropout(dy, static_cast<const bf16*>(nullptr), dx, n, p, seed, offset, as_stream(stream));
}

// residual == nullptr would silently drop the add: rejected.
int dropout_add_forward_cuda(const float* x, const float* residual, float* y, std::size_t n, float p,
                             std::uint64_t seed, std::uint64_t offset, void* stream) {
  if (residual == nullptr && n > 0) return kInvalidValue;
  return launch_dropout(x, residual, y, n, p, seed, offset, as_stream(stream));
}
int dropout_add_forward_cuda(const bf16* x, const bf16* residual, bf16* y, std::size_t n, float p, std::uint64_t seed,
                             std::uint64_t offset, void* stream) {
  if (residual == nullptr && n > 0) return kInvalidValue;
  return launch_dropout(x, residual, y, n, p, seed, offset, as_stream(stream));
}

}  // namespace meshsim::kernels
