// CUDA vocabulary-parallel cross-entropy and embedding (kernels/vocab.h has the math). The
// row reductions (local max, local stats) run one block per row with float4 loads where
// aligned; the loss is one thread per row in double, as the reference computes it. The
// logits-reading kernels are templated on the logits' element type T (float or bf16, widened
// on load; dlogits narrowed once); max, stats and loss are float.
#include <cmath>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"

namespace meshsim::kernels {
namespace {

using namespace cuda_detail;

constexpr int kThreads = 256;

__device__ __forceinline__ bool in_shard(std::int64_t id, std::int64_t v_local, std::int64_t v0) {
  return id >= v0 && id < v0 + v_local;
}

template <int W, class T>
__global__ void local_max_kernel(const T* logits, float* local_max, std::int64_t rows, int v_local) {
  const int nvec = v_local / W;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* lr = logits + r * v_local;
    float m = -INFINITY;
    for (int t = threadIdx.x; t < nvec; t += blockDim.x) {
      float x[W];
      load_vec<W>(lr + t * W, x);
#pragma unroll
      for (int w = 0; w < W; ++w) m = fmaxf(m, x[w]);
    }
    m = block_max(m);
    if (threadIdx.x == 0) local_max[r] = m;
  }
}

template <int W, class T>
__global__ void local_stats_kernel(const T* logits, const float* global_max, const std::int64_t* targets, float* stats,
                                   std::int64_t rows, int v_local, std::int64_t v0) {
  const int nvec = v_local / W;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* lr = logits + r * v_local;
    const float m = global_max[r];
    float s = 0.f;
    for (int t = threadIdx.x; t < nvec; t += blockDim.x) {
      float x[W];
      load_vec<W>(lr + t * W, x);
#pragma unroll
      for (int w = 0; w < W; ++w) s += expf(x[w] - m);
    }
    s = block_sum(s);
    if (threadIdx.x == 0) {
      stats[2 * r] = s;
      stats[2 * r + 1] = in_shard(targets[r], v_local, v0) ? load(lr, targets[r] - v0) : 0.f;
    }
  }
}

__global__ void loss_kernel(const float* global_max, const float* stats, const std::int64_t* targets, float* loss,
                            std::int64_t rows) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += stride)
    loss[r] = targets[r] < 0
                  ? 0.f
                  : static_cast<float>(log(static_cast<double>(stats[2 * r])) + static_cast<double>(global_max[r]) -
                                       static_cast<double>(stats[2 * r + 1]));
}

// Flat over rows * (v_local / W); dlogits may alias logits (each element read then written once).
template <int W, class T>
__global__ void ce_backward_kernel(const T* logits, const float* global_max, const float* stats,
                                   const std::int64_t* targets, float grad_scale, T* dlogits, std::int64_t rows,
                                   std::int64_t v_local, std::int64_t v0) {
  const std::int64_t nvec = v_local / W, total = rows * nvec;
  for (std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
       t += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = t / nvec, c = (t - r * nvec) * W;
    float x[W];
    if (targets[r] < 0) {
#pragma unroll
      for (int w = 0; w < W; ++w) x[w] = 0.f;
    } else {
      load_vec<W>(logits + r * v_local + c, x);
      const float inv_sum = 1.f / stats[2 * r], m = global_max[r];
#pragma unroll
      for (int w = 0; w < W; ++w) {
        const float p = expf(x[w] - m) * inv_sum;
        x[w] = grad_scale * (p - (targets[r] == v0 + c + w ? 1.f : 0.f));
      }
    }
    store_vec<W>(dlogits + r * v_local + c, x);
  }
}

__global__ void embedding_forward_kernel(const std::int64_t* ids, const float* table, float* out, std::int64_t rows,
                                         std::int64_t h, std::int64_t v_local, std::int64_t v0) {
  const std::int64_t total = rows * h, stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::int64_t r = e / h, c = e - r * h;
    out[e] = in_shard(ids[r], v_local, v0) ? table[(ids[r] - v0) * h + c] : 0.f;
  }
}

// One thread per column, rows in order: repeated ids add in row order, as in the reference.
__global__ void embedding_backward_kernel(const std::int64_t* ids, const float* dout, float* dtable, std::int64_t rows,
                                          std::int64_t h, std::int64_t v_local, std::int64_t v0) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < h; c += stride)
    for (std::int64_t r = 0; r < rows; ++r)
      if (in_shard(ids[r], v_local, v0)) dtable[(ids[r] - v0) * h + c] += dout[r * h + c];
}

template <class T>
int ce_local_max(const T* logits, float* local_max, std::int64_t rows, std::int64_t v_local, void* stream) {
  if (rows < 0 || !fits_int(v_local)) return kInvalidValue;
  if (rows == 0) return 0;
  const cudaStream_t s = as_stream(stream);
  const int v = static_cast<int>(v_local);
  if (v_local % 4 == 0 && aligned16(logits))
    local_max_kernel<4, T><<<row_grid(rows), kThreads, 0, s>>>(logits, local_max, rows, v);
  else
    local_max_kernel<1, T><<<row_grid(rows), kThreads, 0, s>>>(logits, local_max, rows, v);
  return launch_status();
}

template <class T>
int ce_local_stats(const T* logits, const float* global_max, const std::int64_t* targets, float* stats,
                   std::int64_t rows, std::int64_t v_local, std::int64_t v0, void* stream) {
  if (rows < 0 || !fits_int(v_local) || v0 < 0) return kInvalidValue;
  if (rows == 0) return 0;
  const cudaStream_t s = as_stream(stream);
  const int v = static_cast<int>(v_local);
  if (v_local % 4 == 0 && aligned16(logits))
    local_stats_kernel<4, T><<<row_grid(rows), kThreads, 0, s>>>(logits, global_max, targets, stats, rows, v, v0);
  else
    local_stats_kernel<1, T><<<row_grid(rows), kThreads, 0, s>>>(logits, global_max, targets, stats, rows, v, v0);
  return launch_status();
}

template <class T>
int ce_backward(const T* logits, const float* global_max, const float* stats, const std::int64_t* targets,
                float grad_scale, T* dlogits, std::int64_t rows, std::int64_t v_local, std::int64_t v0, void* stream) {
  if (rows < 0 || v_local < 0 || v0 < 0) return kInvalidValue;
  if (rows == 0 || v_local == 0) return 0;
  const cudaStream_t s = as_stream(stream);
  if (v_local % 4 == 0 && aligned16(logits) && aligned16(dlogits))
    ce_backward_kernel<4, T><<<grid_for(rows * v_local / 4, kThreads), kThreads, 0, s>>>(
        logits, global_max, stats, targets, grad_scale, dlogits, rows, v_local, v0);
  else
    ce_backward_kernel<1, T><<<grid_for(rows * v_local, kThreads), kThreads, 0, s>>>(
        logits, global_max, stats, targets, grad_scale, dlogits, rows, v_local, v0);
  return launch_status();
}

}  // namespace

int cross_entropy_local_max_cuda(const float* logits, float* local_max, std::int64_t rows, std::int64_t v_local,
                                 void* stream) {
  return ce_local_max(logits, local_max, rows, v_local, stream);
}
int cross_entropy_local_max_cuda(const bf16* logits, float* local_max, std::int64_t rows, std::int64_t v_local,
                                 void* stream) {
  return ce_local_max(logits, local_max, rows, v_local, stream);
}

int cross_entropy_local_stats_cuda(const float* logits, const float* global_max, const std::int64_t* targets,
                                   float* stats, std::int64_t rows, std::int64_t v_local, std::int64_t v0,
                                   void* stream) {
  return ce_local_stats(logits, global_max, targets, stats, rows, v_local, v0, stream);
}
int cross_entropy_local_stats_cuda(const bf16* logits, const float* global_max, const std::int64_t* targets,
                                   float* stats, std::int64_t rows, std::int64_t v_local, std::int64_t v0,
                                   void* stream) {
  return ce_local_stats(logits, global_max, targets, stats, rows, v_local, v0, stream);
}

int cross_entropy_backward_cuda(const float* logits, const float* global_max, const float* stats,
                                const std::int64_t* targets, float grad_scale, float* dlogits, std::int64_t rows,
                                std::int64_t v_local, std::int64_t v0, void* stream) {
  return ce_backward(logits, global_max, stats, targets, grad_scale, dlogits, rows, v_local, v0, stream);
}
int cross_entropy_backward_cuda(const bf16* logits, const float* global_max, const float* stats,
                                const std::int64_t* targets, float grad_scale, bf16* dlogits, std::int64_t rows,
                                std::int64_t v_local, std::int64_t v0, void* stream) {
  return ce_backward(logits, global_max, stats, targets, grad_scale, dlogits, rows, v_local, v0, stream);
}

int cross_entropy_loss_cuda(const float* global_max, const float* stats, const std::int64_t* targets, float* loss,
                            std::int64_t rows, void* stream) {
  if (rows < 0) return kInvalidValue;
  if (rows == 0) return 0;
  loss_kernel<<<grid_for(rows, kThreads), kThreads, 0, as_stream(stream)>>>(global_max, stats, targets, loss, rows);
  return launch_status();
}

int embedding_forward_cuda(const std::int64_t* ids, const float* table, float* out, std::int64_t rows, std::int64_t h,
                           std::int64_t v_local, std::int64_t v0, void* stream) {
  if (rows < 0 || h < 0 || v_local < 0) return kInvalidValue;
  if (rows == 0 || h == 0) return 0;
  embedding_forward_kernel<<<grid_for(rows * h, kThreads), kThreads, 0, as_stream(stream)>>>(ids, table, out, rows, h,
                                                                                             v_local, v0);
  return launch_status();
}

int embedding_backward_cuda(const std::int64_t* ids, const float* dout, float* dtable, std::int64_t rows,
                            std::int64_t h, std::int64_t v_local, std::int64_t v0, void* stream) {
  if (rows < 0 || h < 0 || v_local < 0) return kInvalidValue;
  if (rows == 0 || h == 0) return 0;
  embedding_backward_kernel<<<grid_for(h, kThreads), kThreads, 0, as_stream(stream)>>>(ids, dout, dtable, rows, h,
                                                                                       v_local, v0);
  return launch_status();
}

}  // namespace meshsim::kernels
