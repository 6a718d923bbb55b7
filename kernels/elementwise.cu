// CUDA GeLU, SwiGLU and bias (kernels/elementwise.h has the math). Grid-stride loops, float4
// (or eight bf16) where every pointer (and row stride) allows; outputs may alias inputs of the
// same shape. GeLU and SwiGLU are templated on the element type T (float or bf16, computed in
// float); the bias kernels are float only.
#include <initializer_list>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"

namespace meshsim::kernels {
namespace {

using namespace cuda_detail;

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;
constexpr int kThreads = 256;

__device__ __forceinline__ float gelu(float v) {
  const float t = tanhf(kGeluC * (v + kGeluA * v * v * v));
  return 0.5f * v * (1.f + t);
}
__device__ __forceinline__ float gelu_grad(float g, float v) {
  const float t = tanhf(kGeluC * (v + kGeluA * v * v * v));
  const float du = kGeluC * (1.f + 3.f * kGeluA * v * v);
  return g * (0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * du);
}
__device__ __forceinline__ float sigmoid(float a) { return 1.f / (1.f + expf(-a)); }

// out[i] = f(a[i], b[i]) for i < n (b unused by unary ops); W floats per step, scalar tail.
template <int W, class F, class T>
__global__ void map_kernel(F f, const T* a, const T* b, T* out, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t nvec = n / W;
  for (std::size_t i = first; i < nvec; i += stride) {
    float va[W], vb[W], vo[W];
    load_vec<W>(a + i * W, va);
    if (b != nullptr) load_vec<W>(b + i * W, vb);
#pragma unroll
    for (int w = 0; w < W; ++w) vo[w] = f(va[w], b != nullptr ? vb[w] : 0.f);
    store_vec<W>(out + i * W, vo);
  }
  for (std::size_t i = nvec * W + first; i < n; i += stride)
    store(out, i, f(load(a, i), b != nullptr ? load(b, i) : 0.f));
}

struct GeluFwd {
  __device__ float operator()(float x, float) const { return gelu(x); }
};
struct GeluBwd {  // a = dy, b = x
  __device__ float operator()(float g, float x) const { return gelu_grad(g, x); }
};

// Vectors of 16 bytes where every pointer is 16-byte aligned: four floats or eight bf16 (with
// four bf16, 8-byte loads, the bf16 GeLU ran at 66% of the copy rate on an H200, run 26).
template <class T>
constexpr int kVec = sizeof(T) == 2 ? 8 : 4;

template <class F, class T>
int launch_map(F f, const T* a, const T* b, T* out, std::size_t n, cudaStream_t s) {
  if (n == 0) return 0;
  const bool vec = aligned16(a) && aligned16(out) && (b == nullptr || aligned16(b));
  const auto work = static_cast<std::int64_t>(vec ? n / kVec<T> : n);
  if (vec)
    map_kernel<kVec<T>><<<grid_for(work, kThreads), kThreads, 0, s>>>(f, a, b, out, n);
  else
    map_kernel<1><<<grid_for(work, kThreads), kThreads, 0, s>>>(f, a, b, out, n);
  return launch_status();
}

// Row-strided element-wise work over [rows, cols]: flat index over rows * (cols / W).
template <int W, class T>
__global__ void swiglu_forward_kernel(const T* a, const T* b, std::int64_t ld_in, T* out, std::int64_t rows,
                                      std::int64_t cols) {
  const std::int64_t nvec = cols / W, total = rows * nvec;
  for (std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = t / nvec, c = (t - r * nvec) * W;
    float va[W], vb[W], vo[W];
    load_vec<W>(a + r * ld_in + c, va);
    load_vec<W>(b + r * ld_in + c, vb);
#pragma unroll
    for (int w = 0; w < W; ++w) vo[w] = va[w] * sigmoid(va[w]) * vb[w];
    store_vec<W>(out + r * cols + c, vo);
  }
}

template <int W, class T>
__global__ void swiglu_backward_kernel(const T* dout, const T* a, const T* b, std::int64_t ld_in, T* da, T* db,
                                       std::int64_t rows, std::int64_t cols) {
  const std::int64_t nvec = cols / W, total = rows * nvec;
  for (std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = t / nvec, c = (t - r * nvec) * W;
    float va[W], vb[W], g[W], oa[W], ob[W];
    load_vec<W>(a + r * ld_in + c, va);
    load_vec<W>(b + r * ld_in + c, vb);
    load_vec<W>(dout + r * cols + c, g);
#pragma unroll
    for (int w = 0; w < W; ++w) {
      const float sg = sigmoid(va[w]);
      oa[w] = g[w] * vb[w] * sg * (1.f + va[w] * (1.f - sg));
      ob[w] = g[w] * va[w] * sg;
    }
    store_vec<W>(da + r * ld_in + c, oa);
    store_vec<W>(db + r * ld_in + c, ob);
  }
}

template <int W>
__global__ void add_bias_kernel(float* y, const float* bias, std::int64_t rows, std::int64_t cols) {
  const std::int64_t nvec = cols / W, total = rows * nvec;
  for (std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = t / nvec, c = (t - r * nvec) * W;
    float vy[W], vb[W];
    load_vec<W>(y + r * cols + c, vy);
    load_vec<W>(bias + c, vb);
#pragma unroll
    for (int w = 0; w < W; ++w) vy[w] += vb[w];
    store_vec<W>(y + r * cols + c, vy);
  }
}

struct RowTerm {
  const float* a;
  std::int64_t cols;
  __device__ float operator()(std::int64_t r, std::int64_t c) const { return a[r * cols + c]; }
};

// W-wide vectors when the row starts of every [rows, *] operand are 16-byte aligned.
bool rows_vectorizable(std::int64_t cols, std::int64_t ld, std::initializer_list<const void*> ptrs, int w = 4) {
  if (cols % w != 0 || ld % w != 0) return false;
  for (const void* p : ptrs)
    if (!aligned16(p)) return false;
  return true;
}

template <class T>
int swiglu_forward(const T* a, const T* b, std::int64_t ld_in, T* out, std::int64_t rows, std::int64_t cols,
                   void* stream) {
  if (rows < 0 || cols < 0 || ld_in < cols) return kInvalidValue;
  if (rows == 0 || cols == 0) return 0;
  const cudaStream_t s = as_stream(stream);
  constexpr int W = kVec<T>;
  if (rows_vectorizable(cols, ld_in, {a, b, out}, W))
    swiglu_forward_kernel<W, T><<<grid_for(rows * cols / W, kThreads), kThreads, 0, s>>>(a, b, ld_in, out, rows, cols);
  else if (rows_vectorizable(cols, ld_in, {a, b, out}))
    swiglu_forward_kernel<4, T><<<grid_for(rows * cols / 4, kThreads), kThreads, 0, s>>>(a, b, ld_in, out, rows, cols);
  else
    swiglu_forward_kernel<1, T><<<grid_for(rows * cols, kThreads), kThreads, 0, s>>>(a, b, ld_in, out, rows, cols);
  return launch_status();
}

template <class T>
int swiglu_backward(const T* dout, const T* a, const T* b, std::int64_t ld_in, T* da, T* db, std::int64_t rows,
                    std::int64_t cols, void* stream) {
  if (rows < 0 || cols < 0 || ld_in < cols) return kInvalidValue;
  if (rows == 0 || cols == 0) return 0;
  const cudaStream_t s = as_stream(stream);
  constexpr int W = kVec<T>;
  if (rows_vectorizable(cols, ld_in, {dout, a, b, da, db}, W))
    swiglu_backward_kernel<W, T>
        <<<grid_for(rows * cols / W, kThreads), kThreads, 0, s>>>(dout, a, b, ld_in, da, db, rows, cols);
  else if (rows_vectorizable(cols, ld_in, {dout, a, b, da, db}))
    swiglu_backward_kernel<4, T>
        <<<grid_for(rows * cols / 4, kThreads), kThreads, 0, s>>>(dout, a, b, ld_in, da, db, rows, cols);
  else
    swiglu_backward_kernel<1, T>
        <<<grid_for(rows * cols, kThreads), kThreads, 0, s>>>(dout, a, b, ld_in, da, db, rows, cols);
  return launch_status();
}

}  // namespace

int gelu_forward_cuda(const float* x, float* y, std::size_t n, void* stream) {
  return launch_map(GeluFwd{}, x, static_cast<const float*>(nullptr), y, n, as_stream(stream));
}
int gelu_forward_cuda(const bf16* x, bf16* y, std::size_t n, void* stream) {
  return launch_map(GeluFwd{}, x, static_cast<const bf16*>(nullptr), y, n, as_stream(stream));
}

int gelu_backward_cuda(const float* dy, const float* x, float* dx, std::size_t n, void* stream) {
  return launch_map(GeluBwd{}, dy, x, dx, n, as_stream(stream));
}
int gelu_backward_cuda(const bf16* dy, const bf16* x, bf16* dx, std::size_t n, void* stream) {
  return launch_map(GeluBwd{}, dy, x, dx, n, as_stream(stream));
}

int swiglu_forward_cuda(const float* a, const float* b, std::int64_t ld_in, float* out, std::int64_t rows,
                        std::int64_t cols, void* stream) {
  return swiglu_forward(a, b, ld_in, out, rows, cols, stream);
}
int swiglu_forward_cuda(const bf16* a, const bf16* b, std::int64_t ld_in, bf16* out, std::int64_t rows,
                        std::int64_t cols, void* stream) {
  return swiglu_forward(a, b, ld_in, out, rows, cols, stream);
}

int swiglu_backward_cuda(const float* dout, const float* a, const float* b, std::int64_t ld_in, float* da, float* db,
                         std::int64_t rows, std::int64_t cols, void* stream) {
  return swiglu_backward(dout, a, b, ld_in, da, db, rows, cols, stream);
}
int swiglu_backward_cuda(const bf16* dout, const bf16* a, const bf16* b, std::int64_t ld_in, bf16* da, bf16* db,
                         std::int64_t rows, std::int64_t cols, void* stream) {
  return swiglu_backward(dout, a, b, ld_in, da, db, rows, cols, stream);
}

int add_bias_cuda(float* y, const float* bias, std::int64_t rows, std::int64_t cols, void* stream) {
  if (rows < 0 || cols < 0) return kInvalidValue;
  if (rows == 0 || cols == 0) return 0;
  const cudaStream_t s = as_stream(stream);
  if (rows_vectorizable(cols, cols, {y, bias}))
    add_bias_kernel<4><<<grid_for(rows * cols / 4, kThreads), kThreads, 0, s>>>(y, bias, rows, cols);
  else
    add_bias_kernel<1><<<grid_for(rows * cols, kThreads), kThreads, 0, s>>>(y, bias, rows, cols);
  return launch_status();
}

int bias_backward_cuda(const float* dy, float* dbias, std::int64_t rows, std::int64_t cols, void* stream) {
  if (rows < 0 || cols < 0) return kInvalidValue;
  return launch_column_sum(RowTerm{dy, cols}, dbias, rows, cols, as_stream(stream));
}

}  // namespace meshsim::kernels
