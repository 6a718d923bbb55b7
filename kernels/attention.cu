// CUDA blocked attention, forward and backward (kernels/attention.h has the math).
//
// Forward (flash-style): a block of 4 warps owns 16 query rows of one batch*head (4 per
// warp) and walks the keys in tiles of 32 staged in shared memory. Lane j scores key j of the
// tile against the warp's row, the warp keeps the online-softmax state (running max m, sum l)
// and lane c accumulates output columns c, c + 32, ... (C = ceil(D / 32) registers per row).
// Shared rows are padded to D + 1 floats so the lane-per-key reads hit distinct banks.
//
//   smem: Q[16][D+1] | K[32][D+1] | V[32][D+1]
//
// Backward, two passes that each recompute P = exp(s - lse) and D_i = dO_i . o_i:
//   dQ pass  (per 16 query rows, over key tiles):    dQ_i += scale sum_j dS_ij k_j
//   dKV pass (per 16 key rows, over query tiles of 32): dK_j += scale sum_i dS_ij q_i,
//                                                       dV_j += sum_i P_ij dO_i
// Each output row is owned by one warp, so there are no atomics and the sums run in a fixed
// order. fp32 on CUDA cores: correct for any D <= 256, not tuned (no tensor cores).
//
// Every kernel is templated on the element type T of q, k, v, o, dO, dQ, dK, dV (float or
// bf16): rows are widened into the float shared-memory tiles when staged, outputs narrowed
// once; lse is float. bf16 dQ/dK/dV accumulate as float would: old value + the pass's sum,
// in float, then one narrowing.
#include <cmath>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"

namespace meshsim::kernels {
namespace {

using namespace cuda_detail;

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;  // 16 query rows (forward, dQ) or key rows (dKV)
constexpr int kTile = kWarp;                          // 32 keys (forward, dQ) or queries (dKV) per tile
constexpr int kMaxHeadDim = 256;

struct Mask {
  bool causal;
  std::int64_t q0, k0;
  __device__ bool masked(std::int64_t i, std::int64_t j) const { return causal && k0 + j > q0 + i; }
};

// Copies rows [r0, r0 + n) of a [rows, D] matrix into smem rows of stride ld, zeros past `rows`.
template <class T>
__device__ void stage_rows(float* smem, int ld, const T* src, std::int64_t r0, int n, std::int64_t rows, int d) {
  for (int e = threadIdx.x; e < n * d; e += blockDim.x) {
    const int r = e / d, c = e % d;
    smem[r * ld + c] = r0 + r < rows ? load(src, (r0 + r) * d + c) : 0.f;
  }
}

__device__ __forceinline__ float smem_dot(const float* a, const float* b, int d) {
  float s = 0.f;
  for (int c = 0; c < d; ++c) s += a[c] * b[c];
  return s;
}

// dot(a_row, b_row) of two global rows, summed over the warp (every lane gets it).
template <class T>
__device__ __forceinline__ float warp_dot(const T* a, const T* b, int d) {
  float s = 0.f;
  for (int c = threadIdx.x % kWarp; c < d; c += kWarp) s += load(a, c) * load(b, c);
  return warp_sum(s);
}

template <int C, class T>
__global__ void attention_forward_kernel(const T* q, const T* k, const T* v, T* o, float* lse, std::int64_t bhs,
                                         std::int64_t sq, std::int64_t skv, int d, float scale, Mask mask) {
  extern __shared__ float smem[];
  const int ld = d + 1;
  float* qs = smem;
  float* ks = qs + kRowsPerBlock * ld;
  float* vs = ks + kTile * ld;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const std::int64_t qblocks = (sq + kRowsPerBlock - 1) / kRowsPerBlock;
  for (std::int64_t task = blockIdx.x; task < bhs * qblocks; task += gridDim.x) {
    const std::int64_t bh = task / qblocks, i0 = (task % qblocks) * kRowsPerBlock;
    const std::int64_t i1 = i0 + kRowsPerBlock < sq ? i0 + kRowsPerBlock : sq;
    __syncthreads();  // the previous task is done with shared memory
    stage_rows(qs, ld, q + bh * sq * d, i0, kRowsPerBlock, sq, d);
    float m[kRowsPerWarp], l[kRowsPerWarp], acc[kRowsPerWarp][C];
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      m[rr] = -INFINITY;
      l[rr] = 0.f;
#pragma unroll
      for (int ch = 0; ch < C; ++ch) acc[rr][ch] = 0.f;
    }
    for (std::int64_t j0 = 0; j0 < skv; j0 += kTile) {
      if (mask.masked(i1 - 1, j0)) break;  // this tile and all later ones are masked for every row
      __syncthreads();
      stage_rows(ks, ld, k + bh * skv * d, j0, kTile, skv, d);
      stage_rows(vs, ld, v + bh * skv * d, j0, kTile, skv, d);
      __syncthreads();
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        const int li = warp * kRowsPerWarp + rr;
        const std::int64_t i = i0 + li, j = j0 + lane;
        if (i >= sq) continue;
        const bool visible = j < skv && !mask.masked(i, j);
        const float s = visible ? scale * smem_dot(qs + li * ld, ks + lane * ld, d) : -INFINITY;
        const float tile_max = warp_max(s);
        if (tile_max == -INFINITY) continue;  // nothing visible to this row in the tile
        const float m_new = fmaxf(m[rr], tile_max);
        const float correction = expf(m[rr] - m_new);  // 0 on the first visible tile
        const float p = visible ? expf(s - m_new) : 0.f;
        l[rr] = l[rr] * correction + warp_sum(p);
#pragma unroll
        for (int ch = 0; ch < C; ++ch) acc[rr][ch] *= correction;
        for (int jj = 0; jj < kTile; ++jj) {
          const float pj = __shfl_sync(kFullMask, p, jj);
#pragma unroll
          for (int ch = 0; ch < C; ++ch) {
            const int c = lane + ch * kWarp;
            if (c < d) acc[rr][ch] += pj * vs[jj * ld + c];
          }
        }
        m[rr] = m_new;
      }
    }
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const std::int64_t i = i0 + warp * kRowsPerWarp + rr;
      if (i >= sq) continue;
      const std::int64_t row = bh * sq + i;
      const float inv = l[rr] == 0.f ? 0.f : 1.f / l[rr];
#pragma unroll
      for (int ch = 0; ch < C; ++ch) {
        const int c = lane + ch * kWarp;
        if (c < d) store(o, row * d + c, acc[rr][ch] * inv);
      }
      if (lane == 0) lse[row] = l[rr] == 0.f ? -INFINITY : m[rr] + logf(l[rr]);
    }
  }
}

// dQ pass. smem: Q[16] | dO[16] | K[32] | V[32], rows of ld = D + 1.
template <int C, class T>
__global__ void attention_dq_kernel(const T* q, const T* k, const T* v, const T* o, const T* dout, const float* lse,
                                    T* dq, std::int64_t bhs, std::int64_t sq, std::int64_t skv, int d, float scale,
                                    Mask mask) {
  extern __shared__ float smem[];
  const int ld = d + 1;
  float* qs = smem;
  float* dos = qs + kRowsPerBlock * ld;
  float* ks = dos + kRowsPerBlock * ld;
  float* vs = ks + kTile * ld;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const std::int64_t qblocks = (sq + kRowsPerBlock - 1) / kRowsPerBlock;
  for (std::int64_t task = blockIdx.x; task < bhs * qblocks; task += gridDim.x) {
    const std::int64_t bh = task / qblocks, i0 = (task % qblocks) * kRowsPerBlock;
    const std::int64_t i1 = i0 + kRowsPerBlock < sq ? i0 + kRowsPerBlock : sq;
    __syncthreads();
    stage_rows(qs, ld, q + bh * sq * d, i0, kRowsPerBlock, sq, d);
    stage_rows(dos, ld, dout + bh * sq * d, i0, kRowsPerBlock, sq, d);
    float delta[kRowsPerWarp], row_lse[kRowsPerWarp], acc[kRowsPerWarp][C];
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const std::int64_t i = i0 + warp * kRowsPerWarp + rr;
      const std::int64_t row = bh * sq + i;
      delta[rr] = i < sq ? warp_dot(dout + row * d, o + row * d, d) : 0.f;
      row_lse[rr] = i < sq ? lse[row] : -INFINITY;
#pragma unroll
      for (int ch = 0; ch < C; ++ch) acc[rr][ch] = 0.f;
    }
    for (std::int64_t j0 = 0; j0 < skv; j0 += kTile) {
      if (mask.masked(i1 - 1, j0)) break;
      __syncthreads();
      stage_rows(ks, ld, k + bh * skv * d, j0, kTile, skv, d);
      stage_rows(vs, ld, v + bh * skv * d, j0, kTile, skv, d);
      __syncthreads();
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        const int li = warp * kRowsPerWarp + rr;
        const std::int64_t i = i0 + li, j = j0 + lane;
        if (i >= sq || row_lse[rr] == -INFINITY) continue;  // a fully masked row has no gradient
        const bool visible = j < skv && !mask.masked(i, j);
        float ds = 0.f;
        if (visible) {
          const float p = expf(scale * smem_dot(qs + li * ld, ks + lane * ld, d) - row_lse[rr]);
          ds = p * (smem_dot(dos + li * ld, vs + lane * ld, d) - delta[rr]);
        }
        for (int jj = 0; jj < kTile; ++jj) {
          const float dsj = __shfl_sync(kFullMask, ds, jj);
#pragma unroll
          for (int ch = 0; ch < C; ++ch) {
            const int c = lane + ch * kWarp;
            if (c < d) acc[rr][ch] += dsj * ks[jj * ld + c];
          }
        }
      }
    }
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const std::int64_t i = i0 + warp * kRowsPerWarp + rr;
      if (i >= sq) continue;
#pragma unroll
      for (int ch = 0; ch < C; ++ch) {
        const int c = lane + ch * kWarp;
        if (c < d) {
          const std::int64_t x = (bh * sq + i) * d + c;
          store(dq, x, load(dq, x) + scale * acc[rr][ch]);  // float: dq[x] += ...
        }
      }
    }
  }
}

// dK/dV pass. smem: K[16] | V[16] | Q[32] | dO[32] (ld = D + 1) | lse[32] | delta[32].
template <int C, class T>
__global__ void attention_dkv_kernel(const T* q, const T* k, const T* v, const T* o, const T* dout, const float* lse,
                                     T* dk, T* dv, std::int64_t bhs, std::int64_t sq, std::int64_t skv, int d,
                                     float scale, Mask mask) {
  extern __shared__ float smem[];
  const int ld = d + 1;
  float* ks = smem;
  float* vs = ks + kRowsPerBlock * ld;
  float* qs = vs + kRowsPerBlock * ld;
  float* dos = qs + kTile * ld;
  float* lses = dos + kTile * ld;
  float* deltas = lses + kTile;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const std::int64_t kblocks = (skv + kRowsPerBlock - 1) / kRowsPerBlock;
  for (std::int64_t task = blockIdx.x; task < bhs * kblocks; task += gridDim.x) {
    const std::int64_t bh = task / kblocks, j0 = (task % kblocks) * kRowsPerBlock;
    __syncthreads();
    stage_rows(ks, ld, k + bh * skv * d, j0, kRowsPerBlock, skv, d);
    stage_rows(vs, ld, v + bh * skv * d, j0, kRowsPerBlock, skv, d);
    float dk_acc[kRowsPerWarp][C], dv_acc[kRowsPerWarp][C];
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr)
#pragma unroll
      for (int ch = 0; ch < C; ++ch) dk_acc[rr][ch] = dv_acc[rr][ch] = 0.f;
    for (std::int64_t i0 = 0; i0 < sq; i0 += kTile) {
      const std::int64_t i_last = i0 + kTile - 1 < sq ? i0 + kTile - 1 : sq - 1;
      if (mask.masked(i_last, j0)) continue;  // every (query, key) pair of the tile is masked
      __syncthreads();
      stage_rows(qs, ld, q + bh * sq * d, i0, kTile, sq, d);
      stage_rows(dos, ld, dout + bh * sq * d, i0, kTile, sq, d);
      // lse and D_i for the tile's queries: warp w computes rows w, w + 4, ...
      for (int t = warp; t < kTile; t += kWarps) {
        const std::int64_t i = i0 + t;
        const float dlt = i < sq ? warp_dot(dout + (bh * sq + i) * d, o + (bh * sq + i) * d, d) : 0.f;
        if (lane == 0) {
          deltas[t] = dlt;
          lses[t] = i < sq ? lse[bh * sq + i] : -INFINITY;
        }
      }
      __syncthreads();
      const std::int64_t i = i0 + lane;
      const float row_lse = lses[lane], row_delta = deltas[lane];
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        const int lj = warp * kRowsPerWarp + rr;
        const std::int64_t j = j0 + lj;
        if (j >= skv) continue;
        const bool visible = i < sq && row_lse != -INFINITY && !mask.masked(i, j);
        float p = 0.f, ds = 0.f;
        if (visible) {
          p = expf(scale * smem_dot(qs + lane * ld, ks + lj * ld, d) - row_lse);
          ds = p * (smem_dot(dos + lane * ld, vs + lj * ld, d) - row_delta);
        }
        for (int ii = 0; ii < kTile; ++ii) {
          const float pi = __shfl_sync(kFullMask, p, ii), dsi = __shfl_sync(kFullMask, ds, ii);
#pragma unroll
          for (int ch = 0; ch < C; ++ch) {
            const int c = lane + ch * kWarp;
            if (c < d) {
              dk_acc[rr][ch] += dsi * qs[ii * ld + c];
              dv_acc[rr][ch] += pi * dos[ii * ld + c];
            }
          }
        }
      }
    }
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const std::int64_t j = j0 + warp * kRowsPerWarp + rr;
      if (j >= skv) continue;
#pragma unroll
      for (int ch = 0; ch < C; ++ch) {
        const int c = lane + ch * kWarp;
        if (c < d) {
          const std::int64_t x = (bh * skv + j) * d + c;
          store(dk, x, load(dk, x) + scale * dk_acc[rr][ch]);
          store(dv, x, load(dv, x) + dv_acc[rr][ch]);
        }
      }
    }
  }
}

// Launches kernel<C> for C = ceil(D / 32) rounded up to 1, 2, 4 or 8, with `smem` bytes of
// dynamic shared memory (opting in above 48 KiB).
template <class Launch>
int launch_by_head_dim(int d, std::size_t smem, Launch&& launch) {
  auto go = [&](auto c) -> int {
    auto* kernel = launch.template kernel<decltype(c)::value>();
    if (smem > 48 * 1024) {
      const cudaError_t e =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      if (e != cudaSuccess) return static_cast<int>(e);
    }
    launch(kernel);
    return launch_status();
  };
  if (d <= 32) return go(std::integral_constant<int, 1>{});
  if (d <= 64) return go(std::integral_constant<int, 2>{});
  if (d <= 128) return go(std::integral_constant<int, 4>{});
  return go(std::integral_constant<int, 8>{});
}

bool valid(const AttentionShape& s) {
  return s.batch_heads >= 0 && s.seq_q >= 0 && s.seq_kv >= 0 && s.head_dim > 0 && s.head_dim <= kMaxHeadDim;
}

Mask to_device(const AttentionMask& m) { return Mask{m.causal, m.q0, m.k0}; }

template <class T>
struct ForwardLaunch {
  const T *q, *k, *v;
  T* o;
  float* lse;
  const AttentionShape& sh;
  float scale;
  Mask mask;
  int grid;
  std::size_t smem;
  cudaStream_t stream;
  template <int C>
  static auto kernel() {
    return &attention_forward_kernel<C, T>;
  }
  template <class K>
  void operator()(K* kern) const {
    kern<<<grid, kWarps * kWarp, smem, stream>>>(q, k, v, o, lse, sh.batch_heads, sh.seq_q, sh.seq_kv,
                                                 static_cast<int>(sh.head_dim), scale, mask);
  }
};

template <class T>
struct DqLaunch {
  const T *q, *k, *v, *o, *dout;
  const float* lse;
  T* dq;
  const AttentionShape& sh;
  float scale;
  Mask mask;
  int grid;
  std::size_t smem;
  cudaStream_t stream;
  template <int C>
  static auto kernel() {
    return &attention_dq_kernel<C, T>;
  }
  template <class K>
  void operator()(K* kern) const {
    kern<<<grid, kWarps * kWarp, smem, stream>>>(q, k, v, o, dout, lse, dq, sh.batch_heads, sh.seq_q, sh.seq_kv,
                                                 static_cast<int>(sh.head_dim), scale, mask);
  }
};

template <class T>
struct DkvLaunch {
  const T *q, *k, *v, *o, *dout;
  const float* lse;
  T *dk, *dv;
  const AttentionShape& sh;
  float scale;
  Mask mask;
  int grid;
  std::size_t smem;
  cudaStream_t stream;
  template <int C>
  static auto kernel() {
    return &attention_dkv_kernel<C, T>;
  }
  template <class K>
  void operator()(K* kern) const {
    kern<<<grid, kWarps * kWarp, smem, stream>>>(q, k, v, o, dout, lse, dk, dv, sh.batch_heads, sh.seq_q, sh.seq_kv,
                                                 static_cast<int>(sh.head_dim), scale, mask);
  }
};

int task_grid(std::int64_t bh, std::int64_t seq) { return row_grid(bh * ((seq + kRowsPerBlock - 1) / kRowsPerBlock)); }

template <class T>
int attention_forward(const T* q, const T* k, const T* v, T* o, float* lse, const AttentionShape& shape, float scale,
                      AttentionMask mask, void* stream) {
  if (!valid(shape)) return kInvalidValue;
  if (shape.batch_heads == 0 || shape.seq_q == 0) return 0;
  const std::size_t ld = static_cast<std::size_t>(shape.head_dim) + 1;
  const std::size_t smem = (kRowsPerBlock + 2 * kTile) * ld * sizeof(float);
  const ForwardLaunch<T> launch{q,
                                k,
                                v,
                                o,
                                lse,
                                shape,
                                scale,
                                to_device(mask),
                                task_grid(shape.batch_heads, shape.seq_q),
                                smem,
                                as_stream(stream)};
  return launch_by_head_dim(static_cast<int>(shape.head_dim), smem, launch);
}

template <class T>
int attention_backward(const T* q, const T* k, const T* v, const T* o, const T* dout, const float* lse, T* dq, T* dk,
                       T* dv, const AttentionShape& shape, float scale, AttentionMask mask, void* stream) {
  if (!valid(shape)) return kInvalidValue;
  if (shape.batch_heads == 0 || shape.seq_q == 0 || shape.seq_kv == 0) return 0;
  const std::size_t ld = static_cast<std::size_t>(shape.head_dim) + 1;
  const std::size_t smem = (2 * kRowsPerBlock + 2 * kTile) * ld * sizeof(float);
  const Mask m = to_device(mask);
  const cudaStream_t s = as_stream(stream);
  const int d = static_cast<int>(shape.head_dim);
  const DqLaunch<T> dq_launch{q,    k, v, o, dout, lse, dq, shape, scale, m, task_grid(shape.batch_heads, shape.seq_q),
                              smem, s};
  if (const int e = launch_by_head_dim(d, smem, dq_launch)) return e;
  const DkvLaunch<T> dkv_launch{q,
                                k,
                                v,
                                o,
                                dout,
                                lse,
                                dk,
                                dv,
                                shape,
                                scale,
                                m,
                                task_grid(shape.batch_heads, shape.seq_kv),
                                smem + 2 * kTile * sizeof(float),
                                s};
  return launch_by_head_dim(d, dkv_launch.smem, dkv_launch);
}

}  // namespace

int attention_forward_cuda(const float* q, const float* k, const float* v, float* o, float* lse,
                           const AttentionShape& shape, float scale, AttentionMask mask, void* stream) {
  return attention_forward(q, k, v, o, lse, shape, scale, mask, stream);
}
int attention_forward_cuda(const bf16* q, const bf16* k, const bf16* v, bf16* o, float* lse,
                           const AttentionShape& shape, float scale, AttentionMask mask, void* stream) {
  return attention_forward(q, k, v, o, lse, shape, scale, mask, stream);
}

int attention_backward_cuda(const float* q, const float* k, const float* v, const float* o, const float* dout,
                            const float* lse, float* dq, float* dk, float* dv, const AttentionShape& shape, float scale,
                            AttentionMask mask, void* stream) {
  return attention_backward(q, k, v, o, dout, lse, dq, dk, dv, shape, scale, mask, stream);
}
int attention_backward_cuda(const bf16* q, const bf16* k, const bf16* v, const bf16* o, const bf16* dout,
                            const float* lse, bf16* dq, bf16* dk, bf16* dv, const AttentionShape& shape, float scale,
                            AttentionMask mask, void* stream) {
  return attention_backward(q, k, v, o, dout, lse, dq, dk, dv, shape, scale, mask, stream);
}

}  // namespace meshsim::kernels
