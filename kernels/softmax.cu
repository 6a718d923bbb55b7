// CUDA softmax (forward, backward), the log-sum-exp merge of ring attention and the head
// permutations (kernels/attention.h has the math). Softmax rows run one block per row with
// the row in registers when it fits (cuda_common.cuh); the merge runs one warp per row.
// Softmax and the merge are templated on the element type T of x, y, dy, dx, o (float or
// bf16, computed in float); lse is float. The head permutations are float only.
#include <cmath>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"

namespace meshsim::kernels {
namespace {

using namespace cuda_detail;

constexpr int kLoopThreads = 256;

// Key j of row r (query i = r % seq_q) is visible iff j <= last_visible (the causal mask with
// global offsets: masked when k0 + j > q0 + i).
__device__ __forceinline__ std::int64_t last_visible(std::int64_t r, std::int64_t seq_q, int seq_k, bool causal,
                                                     std::int64_t q0, std::int64_t k0) {
  return causal ? q0 + r % seq_q - k0 : static_cast<std::int64_t>(seq_k) - 1;
}

template <int K, int W, class T>
__global__ void __launch_bounds__(kMaxRowThreads)
    softmax_forward_cached(const T* x, T* y, std::int64_t rows, std::int64_t seq_q, int seq_k, float scale, bool causal,
                           std::int64_t q0, std::int64_t k0) {
  const int nvec = seq_k / W;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t lim = last_visible(r, seq_q, seq_k, causal, q0, k0);
    RowRegs<K, W> v;
    v.load(x + r * seq_k, nvec);
    float m = -INFINITY;
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int w = 0; w < W; ++w)
        if (v.vec_index(k) < nvec && v.col(k, w) <= lim) m = fmaxf(m, scale * v.v[k][w]);
    m = block_max(m);
    if (m == -INFINITY) {  // every key masked (or -inf): an all-zero row
#pragma unroll
      for (int k = 0; k < K; ++k)
#pragma unroll
        for (int w = 0; w < W; ++w) v.v[k][w] = 0.f;
      v.store(y + r * seq_k, nvec);
      continue;
    }
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int w = 0; w < W; ++w) {
        v.v[k][w] = v.vec_index(k) < nvec && v.col(k, w) <= lim ? expf(scale * v.v[k][w] - m) : 0.f;
        s += v.v[k][w];
      }
    const float inv = 1.f / block_sum(s);
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int w = 0; w < W; ++w) v.v[k][w] *= inv;
    v.store(y + r * seq_k, nvec);
  }
}

template <class T>
__global__ void softmax_forward_loop(const T* x, T* y, std::int64_t rows, std::int64_t seq_q, int seq_k, float scale,
                                     bool causal, std::int64_t q0, std::int64_t k0) {
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t lim = last_visible(r, seq_q, seq_k, causal, q0, k0);
    const T* xr = x + r * seq_k;
    T* yr = y + r * seq_k;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < seq_k; j += blockDim.x)
      if (j <= lim) m = fmaxf(m, scale * load(xr, j));
    m = block_max(m);
    if (m == -INFINITY) {
      for (int j = threadIdx.x; j < seq_k; j += blockDim.x) store(yr, j, 0.f);
      continue;
    }
    float s = 0.f;
    for (int j = threadIdx.x; j < seq_k; j += blockDim.x) s += j <= lim ? expf(scale * load(xr, j) - m) : 0.f;
    const float inv = 1.f / block_sum(s);
    for (int j = threadIdx.x; j < seq_k; j += blockDim.x)
      store(yr, j, j <= lim ? expf(scale * load(xr, j) - m) * inv : 0.f);
  }
}

template <int K, int W, class T>
__global__ void __launch_bounds__(kMaxRowThreads)
    softmax_backward_cached(const T* dy, const T* y, T* dx, std::int64_t rows, int seq_k, float scale) {
  const int nvec = seq_k / W;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    RowRegs<K, W> g, p;
    g.load(dy + r * seq_k, nvec);
    p.load(y + r * seq_k, nvec);
    float d = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int w = 0; w < W; ++w) d += g.v[k][w] * p.v[k][w];
    d = block_sum(d);
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int w = 0; w < W; ++w) g.v[k][w] = scale * p.v[k][w] * (g.v[k][w] - d);
    g.store(dx + r * seq_k, nvec);
  }
}

template <class T>
__global__ void softmax_backward_loop(const T* dy, const T* y, T* dx, std::int64_t rows, int seq_k, float scale) {
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* dyr = dy + r * seq_k;
    const T* yr = y + r * seq_k;
    float d = 0.f;
    for (int j = threadIdx.x; j < seq_k; j += blockDim.x) d += load(dyr, j) * load(yr, j);
    d = block_sum(d);
    for (int j = threadIdx.x; j < seq_k; j += blockDim.x)
      store(dx, r * seq_k + j, scale * load(yr, j) * (load(dyr, j) - d));
  }
}

// One warp per row. Every lane reads lse1/lse2 before lane 0 overwrites lse (which may alias them).
template <class T>
__global__ void merge_kernel(const T* o1, const float* lse1, const T* o2, const float* lse2, T* o, float* lse,
                             std::int64_t rows, int head_dim) {
  const int lane = threadIdx.x % kWarp;
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / kWarp);
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / kWarp) + threadIdx.x / kWarp; r < rows;
       r += warps) {
    const float a = lse1[r], b = lse2[r];
    const float m = fmaxf(a, b);
    float w1 = 0.f, w2 = 0.f, out = -INFINITY;
    if (m != -INFINITY) {
      const float e1 = expf(a - m), e2 = expf(b - m);
      out = m + logf(e1 + e2);
      w1 = e1 / (e1 + e2);
      w2 = e2 / (e1 + e2);
    }
    for (int c = lane; c < head_dim; c += kWarp) {
      const std::int64_t x = r * head_dim + c;
      // A side with weight 0 is skipped so an unset (NaN) partial never leaks in.
      store(o, x, (w1 != 0.f ? w1 * load(o1, x) : 0.f) + (w2 != 0.f ? w2 * load(o2, x) : 0.f));
    }
    __syncwarp();
    if (lane == 0) lse[r] = out;
  }
}

// kSplit: dst[(b*heads + h)*seq + t][c] = src[(b*seq + t)*ld + h*D + c]; else the inverse.
template <bool kSplit>
__global__ void heads_kernel(const float* src, float* dst, std::int64_t ld, std::int64_t seq, std::int64_t heads,
                             std::int64_t head_dim, std::int64_t total) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::int64_t c = e % head_dim, row = e / head_dim;  // row of [batch*heads*seq, D]
    const std::int64_t t = row % seq, bh = row / seq;
    const std::int64_t h = bh % heads, b = bh / heads;
    const std::int64_t tok = (b * seq + t) * ld + h * head_dim + c;
    if (kSplit)
      dst[e] = src[tok];
    else
      dst[tok] = src[e];
  }
}

template <class T>
int softmax_forward(const T* x, T* y, std::int64_t batches, std::int64_t seq_q, std::int64_t seq_k, float scale,
                    AttentionMask mask, void* stream) {
  if (batches < 0 || seq_q < 0 || !fits_int(seq_k)) return kInvalidValue;
  const std::int64_t rows = batches * seq_q;
  if (rows == 0 || seq_k == 0) return 0;
  const cudaStream_t s = as_stream(stream);
  const int sk = static_cast<int>(seq_k);
  const RowPlan plan = plan_row(seq_k, aligned16(x) && aligned16(y));
  if (!plan.cached) {
    softmax_forward_loop<T>
        <<<row_grid(rows), kLoopThreads, 0, s>>>(x, y, rows, seq_q, sk, scale, mask.causal, mask.q0, mask.k0);
    return launch_status();
  }
  dispatch_row(plan, [&](auto k, auto w) {
    softmax_forward_cached<decltype(k)::value, decltype(w)::value, T>
        <<<row_grid(rows), plan.threads, 0, s>>>(x, y, rows, seq_q, sk, scale, mask.causal, mask.q0, mask.k0);
  });
  return launch_status();
}

template <class T>
int softmax_backward(const T* dy, const T* y, T* dx, std::int64_t batches, std::int64_t seq_q, std::int64_t seq_k,
                     float scale, void* stream) {
  if (batches < 0 || seq_q < 0 || !fits_int(seq_k)) return kInvalidValue;
  const std::int64_t rows = batches * seq_q;
  if (rows == 0 || seq_k == 0) return 0;
  const cudaStream_t s = as_stream(stream);
  const int sk = static_cast<int>(seq_k);
  const RowPlan plan = plan_row(seq_k, aligned16(dy) && aligned16(y) && aligned16(dx));
  if (!plan.cached) {
    softmax_backward_loop<T><<<row_grid(rows), kLoopThreads, 0, s>>>(dy, y, dx, rows, sk, scale);
    return launch_status();
  }
  dispatch_row(plan, [&](auto k, auto w) {
    softmax_backward_cached<decltype(k)::value, decltype(w)::value, T>
        <<<row_grid(rows), plan.threads, 0, s>>>(dy, y, dx, rows, sk, scale);
  });
  return launch_status();
}

template <class T>
int attention_merge(const T* o1, const float* lse1, const T* o2, const float* lse2, T* o, float* lse, std::int64_t rows,
                    std::int64_t head_dim, void* stream) {
  if (rows < 0 || head_dim <= 0 || !fits_int(head_dim)) return kInvalidValue;
  if (rows == 0) return 0;
  const int warps_per_block = kLoopThreads / kWarp;
  merge_kernel<T><<<grid_for(rows, warps_per_block), kLoopThreads, 0, as_stream(stream)>>>(
      o1, lse1, o2, lse2, o, lse, rows, static_cast<int>(head_dim));
  return launch_status();
}

}  // namespace

int softmax_forward_cuda(const float* x, float* y, std::int64_t batches, std::int64_t seq_q, std::int64_t seq_k,
                         float scale, AttentionMask mask, void* stream) {
  return softmax_forward(x, y, batches, seq_q, seq_k, scale, mask, stream);
}
int softmax_forward_cuda(const bf16* x, bf16* y, std::int64_t batches, std::int64_t seq_q, std::int64_t seq_k,
                         float scale, AttentionMask mask, void* stream) {
  return softmax_forward(x, y, batches, seq_q, seq_k, scale, mask, stream);
}

int softmax_backward_cuda(const float* dy, const float* y, float* dx, std::int64_t batches, std::int64_t seq_q,
                          std::int64_t seq_k, float scale, void* stream) {
  return softmax_backward(dy, y, dx, batches, seq_q, seq_k, scale, stream);
}
int softmax_backward_cuda(const bf16* dy, const bf16* y, bf16* dx, std::int64_t batches, std::int64_t seq_q,
                          std::int64_t seq_k, float scale, void* stream) {
  return softmax_backward(dy, y, dx, batches, seq_q, seq_k, scale, stream);
}

int attention_merge_cuda(const float* o1, const float* lse1, const float* o2, const float* lse2, float* o, float* lse,
                         std::int64_t rows, std::int64_t head_dim, void* stream) {
  return attention_merge(o1, lse1, o2, lse2, o, lse, rows, head_dim, stream);
}
int attention_merge_cuda(const bf16* o1, const float* lse1, const bf16* o2, const float* lse2, bf16* o, float* lse,
                         std::int64_t rows, std::int64_t head_dim, void* stream) {
  return attention_merge(o1, lse1, o2, lse2, o, lse, rows, head_dim, stream);
}

int split_heads_cuda(const float* src, std::int64_t ld, float* dst, std::int64_t batch, std::int64_t seq,
                     std::int64_t heads, std::int64_t head_dim, void* stream) {
  if (batch < 0 || seq < 0 || heads < 0 || head_dim < 0 || ld < heads * head_dim) return kInvalidValue;
  const std::int64_t total = batch * seq * heads * head_dim;
  if (total == 0) return 0;
  heads_kernel<true><<<grid_for(total, kLoopThreads), kLoopThreads, 0, as_stream(stream)>>>(src, dst, ld, seq, heads,
                                                                                            head_dim, total);
  return launch_status();
}

int merge_heads_cuda(const float* src, float* dst, std::int64_t ld, std::int64_t batch, std::int64_t seq,
                     std::int64_t heads, std::int64_t head_dim, void* stream) {
  if (batch < 0 || seq < 0 || heads < 0 || head_dim < 0 || ld < heads * head_dim) return kInvalidValue;
  const std::int64_t total = batch * seq * heads * head_dim;
  if (total == 0) return 0;
  heads_kernel<false><<<grid_for(total, kLoopThreads), kLoopThreads, 0, as_stream(stream)>>>(src, dst, ld, seq, heads,
                                                                                             head_dim, total);
  return launch_status();
}

}  // namespace meshsim::kernels
