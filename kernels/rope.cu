// CUDA RoPE (kernels/rope.h has the math): a grid-stride loop over the (row, i) pairs, W pairs
// per step, reading x[i..i+W) and x[i+d/2..) and the token's cos and sin; 16-byte vectors (eight
// bf16 or two float4) where the pointers and d allow, one pair per step otherwise. Templated on
// the element type of x and y (float or bf16, computed in float); the table is float.
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"

namespace meshsim::kernels {
namespace {

using namespace cuda_detail;

constexpr int kThreads = 256;

// sign +1: the forward rotation; -1: its inverse (the backward).
template <int W, class T>
__global__ void rope_kernel(const T* x, const float* cs, T* y, std::int64_t rows, std::int64_t heads, int d,
                            float sign) {
  const int half = d / 2, per_row = half / W;
  const std::int64_t total = rows * per_row;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const std::int64_t r = i / per_row;
    const int j = static_cast<int>(i - r * per_row) * W;
    const float* c = cs + (r / heads) * d;
    float a[W], b[W], co[W], si[W], ya[W], yb[W];
    load_vec<W>(x + r * d + j, a);
    load_vec<W>(x + r * d + half + j, b);
    load_vec<W>(c + j, co);
    load_vec<W>(c + half + j, si);
#pragma unroll
    for (int w = 0; w < W; ++w) {
      const float s = sign * si[w];
      ya[w] = a[w] * co[w] - b[w] * s;
      yb[w] = b[w] * co[w] + a[w] * s;
    }
    store_vec<W>(y + r * d + j, ya);
    store_vec<W>(y + r * d + half + j, yb);
  }
}

template <class T>
int rope(const T* x, const float* cs, T* y, std::int64_t rows, std::int64_t heads, std::int64_t d, float sign,
         void* stream) {
  if (rows < 0 || heads <= 0 || d <= 0 || d % 2 != 0 || !fits_int(d)) return kInvalidValue;
  if (rows == 0) return 0;
  const cudaStream_t s = as_stream(stream);
  constexpr int V = sizeof(T) == 2 ? 8 : 4;  // 16 bytes of x per load
  // Every vector starts 16-byte aligned: the pointers, each half's start (d/2 elements of T in,
  // and of the float table) and each row's.
  const bool vec = (d / 2) % V == 0 && aligned16(x) && aligned16(y) && aligned16(cs);
  const int di = static_cast<int>(d);
  if (vec)
    rope_kernel<V, T><<<grid_for(rows * (d / 2 / V), kThreads), kThreads, 0, s>>>(x, cs, y, rows, heads, di, sign);
  else
    rope_kernel<1, T><<<grid_for(rows * (d / 2), kThreads), kThreads, 0, s>>>(x, cs, y, rows, heads, di, sign);
  return launch_status();
}

}  // namespace

int rope_forward_cuda(const float* x, const float* cs, float* y, std::int64_t rows, std::int64_t heads, std::int64_t d,
                      void* stream) {
  return rope(x, cs, y, rows, heads, d, 1.f, stream);
}
int rope_backward_cuda(const float* dy, const float* cs, float* dx, std::int64_t rows, std::int64_t heads,
                       std::int64_t d, void* stream) {
  return rope(dy, cs, dx, rows, heads, d, -1.f, stream);
}
int rope_forward_cuda(const bf16* x, const float* cs, bf16* y, std::int64_t rows, std::int64_t heads, std::int64_t d,
                      void* stream) {
  return rope(x, cs, y, rows, heads, d, 1.f, stream);
}
int rope_backward_cuda(const bf16* dy, const float* cs, bf16* dx, std::int64_t rows, std::int64_t heads, std::int64_t d,
                       void* stream) {
  return rope(dy, cs, dx, rows, heads, d, -1.f, stream);
}

}  // namespace meshsim::kernels
