// CUDA LayerNorm, whole and 2D-split (kernels/norm.h has the math). One block per row; rows
// that fit are held in registers (cuda_common.cuh), longer ones in shared memory while the GPU
// gives enough (asked for past the default 48 KiB), longer still re-read global memory. Every
// kernel is templated on the element type T of x, y, dy, dx, gamma and beta (float or bf16:
// widened on load, narrowed once on store); statistics and dgamma/dbeta are float.
#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"

namespace meshsim::kernels {
namespace {

using namespace cuda_detail;

// ---- forward ----------------------------------------------------------------------------

template <int K, int W, class T>
__global__ void __launch_bounds__(kMaxRowThreads)
    ln_forward_cached(const T* x, const T* gamma, const T* beta, T* y, float* mean, float* rstd, std::int64_t rows,
                      int h, float eps) {
  const int nvec = h / W;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    RowRegs<K, W> xr;
    xr.load(x + r * h, nvec);
    float s = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int w = 0; w < W; ++w) s += xr.v[k][w];
    const float mu = mean != nullptr ? block_sum(s) / static_cast<float>(h) : 0.f;  // RMSNorm: no centring
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (xr.vec_index(k) < nvec)
#pragma unroll
        for (int w = 0; w < W; ++w) ss += (xr.v[k][w] - mu) * (xr.v[k][w] - mu);
    const float rs = 1.f / sqrtf(block_sum(ss) / static_cast<float>(h) + eps);
    if (threadIdx.x == 0) {
      if (mean != nullptr) mean[r] = mu;
      rstd[r] = rs;
    }
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (xr.vec_index(k) >= nvec) continue;
      float g[W], b[W] = {};
      load_vec<W>(gamma + xr.vec_index(k) * W, g);
      if (beta != nullptr) load_vec<W>(beta + xr.vec_index(k) * W, b);
#pragma unroll
      for (int w = 0; w < W; ++w) xr.v[k][w] = (xr.v[k][w] - mu) * rs * g[w] + b[w];
    }
    xr.store(y + r * h, nvec);
  }
}

template <class T>
__global__ void ln_forward_loop(const T* x, const T* gamma, const T* beta, T* y, float* mean, float* rstd,
                                std::int64_t rows, int h, float eps) {
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * h;
    float s = 0.f;
    if (mean != nullptr)
      for (int j = threadIdx.x; j < h; j += blockDim.x) s += load(xr, j);
    const float mu = mean != nullptr ? block_sum(s) / static_cast<float>(h) : 0.f;
    float ss = 0.f;
    for (int j = threadIdx.x; j < h; j += blockDim.x) ss += (load(xr, j) - mu) * (load(xr, j) - mu);
    const float rs = 1.f / sqrtf(block_sum(ss) / static_cast<float>(h) + eps);
    if (threadIdx.x == 0) {
      if (mean != nullptr) mean[r] = mu;
      rstd[r] = rs;
    }
    for (int j = threadIdx.x; j < h; j += blockDim.x)
      store(y, r * h + j, (load(xr, j) - mu) * rs * load(gamma, j) + (beta != nullptr ? load(beta, j) : 0.f));
  }
}

// Rows past the register plan, up to what shared memory holds: the row is read from global
// memory once, into shared memory, and the three passes (mean, variance, output) read it
// there. Each thread only ever touches the elements it loaded, so no barrier is needed
// besides those in block_sum. (GPT-3's 12288 columns took the loop below before, which reads
// x three times: 164 us for a 2048 x 12288 LayerNorm on an H200, docs/validation/gpu-h200.md.)
template <int W, class T>
__global__ void __launch_bounds__(256) ln_forward_smem(const T* x, const T* gamma, const T* beta, T* y, float* mean,
                                                       float* rstd, std::int64_t rows, int h, float eps) {
  extern __shared__ float4 smem_forward[];
  float* row = reinterpret_cast<float*>(smem_forward);
  const int nvec = h / W;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float s = 0.f;
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
      float v[W];
      load_vec<W>(x + r * h + i * W, v);
#pragma unroll
      for (int w = 0; w < W; ++w) {
        row[i * W + w] = v[w];
        s += v[w];
      }
    }
    const float mu = mean != nullptr ? block_sum(s) / static_cast<float>(h) : 0.f;
    float ss = 0.f;
    for (int i = threadIdx.x; i < nvec; i += blockDim.x)
#pragma unroll
      for (int w = 0; w < W; ++w) ss += (row[i * W + w] - mu) * (row[i * W + w] - mu);
    const float rs = 1.f / sqrtf(block_sum(ss) / static_cast<float>(h) + eps);
    if (threadIdx.x == 0) {
      if (mean != nullptr) mean[r] = mu;
      rstd[r] = rs;
    }
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
      float g[W], b[W] = {}, out[W];
      load_vec<W>(gamma + i * W, g);
      if (beta != nullptr) load_vec<W>(beta + i * W, b);
#pragma unroll
      for (int w = 0; w < W; ++w) out[w] = (row[i * W + w] - mu) * rs * g[w] + b[w];
      store_vec<W>(y + r * h + i * W, out);
    }
  }
}

// ---- backward (dx) ----------------------------------------------------------------------

// dx for rows past the register plan, as ln_forward_smem: g = dy * gamma and xhat are kept in
// shared memory (2h floats), so dy and x are read once.
template <int W, class T>
__global__ void __launch_bounds__(256) ln_backward_smem(const T* dy, const T* x, const T* gamma, const float* mean,
                                                        const float* rstd, T* dx, std::int64_t rows, int h) {
  extern __shared__ float4 smem_backward[];
  float* gs = reinterpret_cast<float*>(smem_backward);
  float* xh = gs + h;
  const int nvec = h / W;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float mu = mean != nullptr ? mean[r] : 0.f, rs = rstd[r];
    float2 s = make_float2(0.f, 0.f);
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
      float d[W], xv[W], gm[W];
      load_vec<W>(dy + r * h + i * W, d);
      load_vec<W>(x + r * h + i * W, xv);
      load_vec<W>(gamma + i * W, gm);
#pragma unroll
      for (int w = 0; w < W; ++w) {
        const float g = d[w] * gm[w], xhat = (xv[w] - mu) * rs;
        gs[i * W + w] = g;
        xh[i * W + w] = xhat;
        s.x += g;
        s.y += g * xhat;
      }
    }
    s = block_sum2(s);
    const float mg = mean != nullptr ? s.x / static_cast<float>(h) : 0.f, mgx = s.y / static_cast<float>(h);
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
      float out[W];
#pragma unroll
      for (int w = 0; w < W; ++w) out[w] = rs * (gs[i * W + w] - mg - xh[i * W + w] * mgx);
      store_vec<W>(dx + r * h + i * W, out);
    }
  }
}

// Shared memory for a row-cached kernel of `bytes` (dynamic, beside the kernel's own static
// shared memory: block_sum's), or false when this GPU cannot give it. Past what a launch may
// take by default (48 KiB in all), the kernel must ask for it first
// (cudaFuncAttributeMaxDynamicSharedMemorySize); an H200 gives up to 227 KiB.
template <class Kernel>
bool smem_for(Kernel kernel, std::int64_t bytes) {
  cudaFuncAttributes attr{};
  int device = 0, most = 0;
  if (cudaFuncGetAttributes(&attr, kernel) != cudaSuccess || cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: the loop kernel runs instead
    return false;
  }
  if (bytes + static_cast<std::int64_t>(attr.sharedSizeBytes) > most) return false;
  if (bytes <= attr.maxDynamicSharedSizeBytes) return true;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return true;
}

template <int K, int W, class T>
__global__ void __launch_bounds__(kMaxRowThreads)
    ln_backward_cached(const T* dy, const T* x, const T* gamma, const float* mean, const float* rstd, T* dx,
                       std::int64_t rows, int h) {
  const int nvec = h / W;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    RowRegs<K, W> g, xh;  // g = dy * gamma, xh = xhat
    g.load(dy + r * h, nvec);
    xh.load(x + r * h, nvec);
    const float mu = mean != nullptr ? mean[r] : 0.f, rs = rstd[r];
    float2 s = make_float2(0.f, 0.f);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (g.vec_index(k) >= nvec) continue;
      float gm[W];
      load_vec<W>(gamma + g.vec_index(k) * W, gm);
#pragma unroll
      for (int w = 0; w < W; ++w) {
        g.v[k][w] *= gm[w];
        xh.v[k][w] = (xh.v[k][w] - mu) * rs;
        s.x += g.v[k][w];
        s.y += g.v[k][w] * xh.v[k][w];
      }
    }
    s = block_sum2(s);
    const float mg = mean != nullptr ? s.x / static_cast<float>(h) : 0.f, mgx = s.y / static_cast<float>(h);
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int w = 0; w < W; ++w) g.v[k][w] = rs * (g.v[k][w] - mg - xh.v[k][w] * mgx);
    g.store(dx + r * h, nvec);
  }
}

// dx for the whole form (dstats == nullptr: computes the sums) and the 2D apply (dstats given,
// globally summed over the full row length h; this rank holds h_local columns).
template <class T>
__global__ void ln_backward_loop(const T* dy, const T* x, const T* gamma, const float* mean, const float* rstd,
                                 const float* dstats, T* dx, std::int64_t rows, int h_local, float h) {
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* dyr = dy + r * h_local;
    const T* xr = x + r * h_local;
    const float mu = mean != nullptr ? mean[r] : 0.f, rs = rstd[r];
    float2 s;
    if (dstats == nullptr) {
      s = make_float2(0.f, 0.f);
      for (int j = threadIdx.x; j < h_local; j += blockDim.x) {
        const float g = load(dyr, j) * load(gamma, j);
        s.x += g;
        s.y += g * ((load(xr, j) - mu) * rs);
      }
      s = block_sum2(s);
    } else {
      s = make_float2(dstats[2 * r], dstats[2 * r + 1]);
    }
    const float mg = mean != nullptr ? s.x / h : 0.f, mgx = s.y / h;
    for (int j = threadIdx.x; j < h_local; j += blockDim.x) {
      const float g = load(dyr, j) * load(gamma, j);
      store(dx, r * h_local + j, rs * (g - mg - (load(xr, j) - mu) * rs * mgx));
    }
  }
}

// dgamma += sum_r dy * xhat, dbeta += sum_r dy: both column sums in one pass over dy and x
// (fixed order). RMSNorm: mean == nullptr (0) and dbeta == nullptr (not written).
// dgamma and dbeta are float for either T.
template <class T>
struct ParamTerms {
  const T* dy;
  const T* x;
  const float* mean;
  const float* rstd;
  std::int64_t cols;
  __device__ float2 operator()(std::int64_t r, std::int64_t c) const {
    const float d = load(dy, r * cols + c);
    return make_float2(d * ((load(x, r * cols + c) - (mean != nullptr ? mean[r] : 0.f)) * rstd[r]), d);
  }
};

template <class T>
int param_grads(const T* dy, const T* x, const float* mean, const float* rstd, float* dgamma, float* dbeta,
                std::int64_t rows, std::int64_t cols, cudaStream_t s) {
  return launch_column_sum2(ParamTerms<T>{dy, x, mean, rstd, cols}, dgamma, dbeta, rows, cols, s);
}

// ---- 2D pieces --------------------------------------------------------------------------

// stats[r] = {sum x, sum x^2} (dy == nullptr) or dstats[r] = {sum g, sum g xhat}, g = dy gamma.
template <class T>
__global__ void row_stats_kernel(const T* dy, const T* x, const T* gamma, const float* mean, const float* rstd,
                                 float* stats, std::int64_t rows, int h_local) {
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * h_local;
    float2 s = make_float2(0.f, 0.f);
    if (dy == nullptr) {
      for (int j = threadIdx.x; j < h_local; j += blockDim.x) {
        const float v = load(xr, j);
        s.x += v;
        s.y += v * v;
      }
    } else {
      const T* dyr = dy + r * h_local;
      const float mu = mean[r], rs = rstd[r];
      for (int j = threadIdx.x; j < h_local; j += blockDim.x) {
        const float g = load(dyr, j) * load(gamma, j);
        s.x += g;
        s.y += g * ((load(xr, j) - mu) * rs);
      }
    }
    s = block_sum2(s);
    if (threadIdx.x == 0) {
      stats[2 * r] = s.x;
      stats[2 * r + 1] = s.y;
    }
  }
}

template <class T>
__global__ void ln2d_apply_kernel(const T* x, const float* stats, const T* gamma, const T* beta, T* y, float* mean,
                                  float* rstd, std::int64_t rows, int h_local, double h, float eps) {
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    // Per-row scalars in double, as the reference does (one evaluation per thread, no traffic).
    const double mu = static_cast<double>(stats[2 * r]) / h;
    const double var = fmax(0.0, static_cast<double>(stats[2 * r + 1]) / h - mu * mu);
    const float muf = static_cast<float>(mu);
    const float rs = static_cast<float>(1.0 / sqrt(var + eps));
    if (threadIdx.x == 0) {
      mean[r] = muf;
      rstd[r] = rs;
    }
    const T* xr = x + r * h_local;
    for (int j = threadIdx.x; j < h_local; j += blockDim.x)
      store(y, r * h_local + j, (load(xr, j) - muf) * rs * load(gamma, j) + load(beta, j));
  }
}

constexpr int kLoopThreads = 256;

// The host wrappers, for T = float and T = bf16 (x, y, dy, dx, gamma, beta of type T; mean,
// rstd, stats, dstats, dgamma, dbeta float).
template <class T>
int ln_forward(const T* x, const T* gamma, const T* beta, T* y, float* mean, float* rstd, std::int64_t rows,
               std::int64_t h, float eps, void* stream) {
  if (rows < 0 || h <= 0 || !fits_int(h)) return kInvalidValue;
  if (rows == 0) return 0;
  const cudaStream_t s = as_stream(stream);
  const RowPlan plan = plan_row(h, aligned16(x) && aligned16(y) && aligned16(gamma) && aligned16(beta));
  const int hi = static_cast<int>(h);
  if (!plan.cached) {
    const std::int64_t bytes = h * static_cast<std::int64_t>(sizeof(float));  // the row cache is float
    if (plan.w == 4 && smem_for(ln_forward_smem<4, T>, bytes))
      ln_forward_smem<4, T><<<row_grid(rows), kLoopThreads, bytes, s>>>(x, gamma, beta, y, mean, rstd, rows, hi, eps);
    else if (plan.w == 1 && smem_for(ln_forward_smem<1, T>, bytes))
      ln_forward_smem<1, T><<<row_grid(rows), kLoopThreads, bytes, s>>>(x, gamma, beta, y, mean, rstd, rows, hi, eps);
    else
      ln_forward_loop<T><<<row_grid(rows), kLoopThreads, 0, s>>>(x, gamma, beta, y, mean, rstd, rows, hi, eps);
    return launch_status();
  }
  dispatch_row(plan, [&](auto k, auto w) {
    ln_forward_cached<decltype(k)::value, decltype(w)::value, T>
        <<<row_grid(rows), plan.threads, 0, s>>>(x, gamma, beta, y, mean, rstd, rows, hi, eps);
  });
  return launch_status();
}

template <class T>
int ln_backward(const T* dy, const T* x, const T* gamma, const float* mean, const float* rstd, T* dx, float* dgamma,
                float* dbeta, std::int64_t rows, std::int64_t h, void* stream) {
  if (rows < 0 || h <= 0 || !fits_int(h)) return kInvalidValue;
  if (rows == 0) return 0;
  const cudaStream_t s = as_stream(stream);
  const RowPlan plan = plan_row(h, aligned16(dy) && aligned16(x) && aligned16(gamma) && aligned16(dx));
  const int hi = static_cast<int>(h);
  const std::int64_t bytes = 2 * h * static_cast<std::int64_t>(sizeof(float));  // float g and xhat
  if (!plan.cached && plan.w == 4 && smem_for(ln_backward_smem<4, T>, bytes)) {
    ln_backward_smem<4, T><<<row_grid(rows), kLoopThreads, bytes, s>>>(dy, x, gamma, mean, rstd, dx, rows, hi);
  } else if (!plan.cached && plan.w == 1 && smem_for(ln_backward_smem<1, T>, bytes)) {
    ln_backward_smem<1, T><<<row_grid(rows), kLoopThreads, bytes, s>>>(dy, x, gamma, mean, rstd, dx, rows, hi);
  } else if (!plan.cached) {
    ln_backward_loop<T><<<row_grid(rows), kLoopThreads, 0, s>>>(dy, x, gamma, mean, rstd, nullptr, dx, rows, hi,
                                                                static_cast<float>(h));
  } else {
    dispatch_row(plan, [&](auto k, auto w) {
      ln_backward_cached<decltype(k)::value, decltype(w)::value, T>
          <<<row_grid(rows), plan.threads, 0, s>>>(dy, x, gamma, mean, rstd, dx, rows, hi);
    });
  }
  if (const int e = launch_status()) return e;
  return param_grads(dy, x, mean, rstd, dgamma, dbeta, rows, h, s);
}

template <class T>
int ln2d_stats(const T* x, float* stats, std::int64_t rows, std::int64_t h_local, void* stream) {
  if (rows < 0 || !fits_int(h_local)) return kInvalidValue;
  if (rows == 0) return 0;
  row_stats_kernel<T><<<row_grid(rows), kLoopThreads, 0, as_stream(stream)>>>(
      static_cast<const T*>(nullptr), x, static_cast<const T*>(nullptr), nullptr, nullptr, stats, rows,
      static_cast<int>(h_local));
  return launch_status();
}

template <class T>
int ln2d_apply(const T* x, const float* stats, const T* gamma, const T* beta, T* y, float* mean, float* rstd,
               std::int64_t rows, std::int64_t h_local, std::int64_t h, float eps, void* stream) {
  if (rows < 0 || !fits_int(h_local) || h < h_local || h <= 0) return kInvalidValue;
  if (rows == 0) return 0;
  ln2d_apply_kernel<T><<<row_grid(rows), kLoopThreads, 0, as_stream(stream)>>>(
      x, stats, gamma, beta, y, mean, rstd, rows, static_cast<int>(h_local), static_cast<double>(h), eps);
  return launch_status();
}

template <class T>
int ln2d_backward_stats(const T* dy, const T* x, const T* gamma, const float* mean, const float* rstd, float* dstats,
                        std::int64_t rows, std::int64_t h_local, void* stream) {
  if (rows < 0 || !fits_int(h_local)) return kInvalidValue;
  if (rows == 0) return 0;
  row_stats_kernel<T><<<row_grid(rows), kLoopThreads, 0, as_stream(stream)>>>(dy, x, gamma, mean, rstd, dstats, rows,
                                                                              static_cast<int>(h_local));
  return launch_status();
}

template <class T>
int ln2d_backward_apply(const T* dy, const T* x, const T* gamma, const float* mean, const float* rstd,
                        const float* dstats, T* dx, float* dgamma, float* dbeta, std::int64_t rows,
                        std::int64_t h_local, std::int64_t h, void* stream) {
  if (rows < 0 || !fits_int(h_local) || h < h_local || h <= 0) return kInvalidValue;
  if (rows == 0) return 0;
  const cudaStream_t s = as_stream(stream);
  ln_backward_loop<T><<<row_grid(rows), kLoopThreads, 0, s>>>(dy, x, gamma, mean, rstd, dstats, dx, rows,
                                                              static_cast<int>(h_local), static_cast<float>(h));
  if (const int e = launch_status()) return e;
  return param_grads(dy, x, mean, rstd, dgamma, dbeta, rows, h_local, s);
}

}  // namespace

int layernorm_forward_cuda(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                           std::int64_t rows, std::int64_t h, float eps, void* stream) {
  return ln_forward(x, gamma, beta, y, mean, rstd, rows, h, eps, stream);
}
int layernorm_forward_cuda(const bf16* x, const bf16* gamma, const bf16* beta, bf16* y, float* mean, float* rstd,
                           std::int64_t rows, std::int64_t h, float eps, void* stream) {
  return ln_forward(x, gamma, beta, y, mean, rstd, rows, h, eps, stream);
}

int layernorm_backward_cuda(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                            float* dx, float* dgamma, float* dbeta, std::int64_t rows, std::int64_t h, void* stream) {
  return ln_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, rows, h, stream);
}
int layernorm_backward_cuda(const bf16* dy, const bf16* x, const bf16* gamma, const float* mean, const float* rstd,
                            bf16* dx, float* dgamma, float* dbeta, std::int64_t rows, std::int64_t h, void* stream) {
  return ln_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, rows, h, stream);
}

// RMSNorm: the LayerNorm kernels with no mean (no centring: mean taken as 0, mean(g) dropped)
// and no beta (norm.h).
int rmsnorm_forward_cuda(const float* x, const float* gamma, float* y, float* rstd, std::int64_t rows, std::int64_t h,
                         float eps, void* stream) {
  return ln_forward(x, gamma, static_cast<const float*>(nullptr), y, nullptr, rstd, rows, h, eps, stream);
}
int rmsnorm_forward_cuda(const bf16* x, const bf16* gamma, bf16* y, float* rstd, std::int64_t rows, std::int64_t h,
                         float eps, void* stream) {
  return ln_forward(x, gamma, static_cast<const bf16*>(nullptr), y, nullptr, rstd, rows, h, eps, stream);
}
int rmsnorm_backward_cuda(const float* dy, const float* x, const float* gamma, const float* rstd, float* dx,
                          float* dgamma, std::int64_t rows, std::int64_t h, void* stream) {
  return ln_backward(dy, x, gamma, nullptr, rstd, dx, dgamma, nullptr, rows, h, stream);
}
int rmsnorm_backward_cuda(const bf16* dy, const bf16* x, const bf16* gamma, const float* rstd, bf16* dx, float* dgamma,
                          std::int64_t rows, std::int64_t h, void* stream) {
  return ln_backward(dy, x, gamma, nullptr, rstd, dx, dgamma, nullptr, rows, h, stream);
}

int layernorm2d_stats_cuda(const float* x, float* stats, std::int64_t rows, std::int64_t h_local, void* stream) {
  return ln2d_stats(x, stats, rows, h_local, stream);
}
int layernorm2d_stats_cuda(const bf16* x, float* stats, std::int64_t rows, std::int64_t h_local, void* stream) {
  return ln2d_stats(x, stats, rows, h_local, stream);
}

int layernorm2d_apply_cuda(const float* x, const float* stats, const float* gamma, const float* beta, float* y,
                           float* mean, float* rstd, std::int64_t rows, std::int64_t h_local, std::int64_t h, float eps,
                           void* stream) {
  return ln2d_apply(x, stats, gamma, beta, y, mean, rstd, rows, h_local, h, eps, stream);
}
int layernorm2d_apply_cuda(const bf16* x, const float* stats, const bf16* gamma, const bf16* beta, bf16* y, float* mean,
                           float* rstd, std::int64_t rows, std::int64_t h_local, std::int64_t h, float eps,
                           void* stream) {
  return ln2d_apply(x, stats, gamma, beta, y, mean, rstd, rows, h_local, h, eps, stream);
}

int layernorm2d_backward_stats_cuda(const float* dy, const float* x, const float* gamma, const float* mean,
                                    const float* rstd, float* dstats, std::int64_t rows, std::int64_t h_local,
                                    void* stream) {
  return ln2d_backward_stats(dy, x, gamma, mean, rstd, dstats, rows, h_local, stream);
}
int layernorm2d_backward_stats_cuda(const bf16* dy, const bf16* x, const bf16* gamma, const float* mean,
                                    const float* rstd, float* dstats, std::int64_t rows, std::int64_t h_local,
                                    void* stream) {
  return ln2d_backward_stats(dy, x, gamma, mean, rstd, dstats, rows, h_local, stream);
}

int layernorm2d_backward_apply_cuda(const float* dy, const float* x, const float* gamma, const float* mean,
                                    const float* rstd, const float* dstats, float* dx, float* dgamma, float* dbeta,
                                    std::int64_t rows, std::int64_t h_local, std::int64_t h, void* stream) {
  return ln2d_backward_apply(dy, x, gamma, mean, rstd, dstats, dx, dgamma, dbeta, rows, h_local, h, stream);
}
int layernorm2d_backward_apply_cuda(const bf16* dy, const bf16* x, const bf16* gamma, const float* mean,
                                    const float* rstd, const float* dstats, bf16* dx, float* dgamma, float* dbeta,
                                    std::int64_t rows, std::int64_t h_local, std::int64_t h, void* stream) {
  return ln2d_backward_apply(dy, x, gamma, mean, rstd, dstats, dx, dgamma, dbeta, rows, h_local, h, stream);
}

}  // namespace meshsim::kernels
