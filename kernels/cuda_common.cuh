// Internal to kernels/*.cu: warp and block reductions, register-held rows, launch helpers.
//
// Row kernels run one block per row (grid-stride over rows). A row of `cols` elements is
// read as vectors of W elements (W = 4: a float4, or four bf16 in 8 bytes, when cols % 4 == 0
// and the pointers are 16-byte aligned, else W = 1); thread t owns vectors t, t + blockDim.x,
// ..., K of them, held in registers as float (RowRegs<K, W>), so a row is read from memory
// once however many passes the math makes over it. plan_row picks K in {1, 2, 4, 8} and the
// block size (<= 256); rows too long for that fall back to kernels that loop over global
// memory. The kernels are templated on the element type T of their activation operands
// (float or kernels::bf16: widened on load, narrowed once on store, math in float).
//
//   const RowPlan plan = plan_row(cols, aligned16(x) && aligned16(y));
//   if (plan.cached) dispatch_row(plan, [&](auto k, auto w) { kern<k.value, w.value><<<...>>>(...); });
//
// Reductions use xor shuffles, so every lane ends with the same value, and a fixed tree, so
// results are deterministic.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <limits>
#include <type_traits>

#include "kernels/bf16.h"

namespace meshsim::kernels::cuda_detail {

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kInvalidValue = static_cast<int>(cudaErrorInvalidValue);
// Grid-stride kernels launch at most this many blocks; row kernels at most this many rows at once.
constexpr std::int64_t kMaxBlocks = 65535;
constexpr std::int64_t kMaxRowBlocks = std::int64_t{1} << 20;

inline int launch_status() { return static_cast<int>(cudaGetLastError()); }
inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }
inline bool fits_int(std::int64_t v) { return v >= 0 && v <= std::numeric_limits<int>::max(); }

inline int grid_for(std::int64_t work, int threads) {
  const std::int64_t want = (work + threads - 1) / threads;
  return static_cast<int>(want < 1 ? 1 : (want < kMaxBlocks ? want : kMaxBlocks));
}
inline int row_grid(std::int64_t rows) { return static_cast<int>(rows < kMaxRowBlocks ? rows : kMaxRowBlocks); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Sum (kMax = false) or max (kMax = true) over the block, returned to every thread. Safe to
// call repeatedly in one kernel; every thread of the block must call it.
template <bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float partial[kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = (blockDim.x + kWarp - 1) / kWarp;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // a previous call's readers are done with `partial`
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const float identity = kMax ? -INFINITY : 0.f;
  v = lane < warps ? partial[lane] : identity;
  return kMax ? warp_max(v) : warp_sum(v);
}
__device__ __forceinline__ float block_sum(float v) { return block_reduce<false>(v); }
__device__ __forceinline__ float block_max(float v) { return block_reduce<true>(v); }

// Two sums at once (one round of barriers).
__device__ inline float2 block_sum2(float2 v) {
  __shared__ float2 partial[kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = (blockDim.x + kWarp - 1) / kWarp;
  v.x = warp_sum(v.x);
  v.y = warp_sum(v.y);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  v = lane < warps ? partial[lane] : make_float2(0.f, 0.f);
  v.x = warp_sum(v.x);
  v.y = warp_sum(v.y);
  return v;
}

// Vector loads and stores of W elements, widened to / narrowed from float registers. float,
// W = 4: one float4 (16-byte aligned). bf16, W = 4: one uint2 of four bf16 (8-byte aligned; the
// callers pick W = 4 with the same test as for float, 16-byte aligned pointers and a multiple
// of 4 elements per row, which implies it). W = 8: two float4, or one uint4 of eight bf16
// (16-byte aligned), which the element-wise maps and SwiGLU use for bf16 (the row kernels' plans
// stay at 4: twice the cases). Every narrowing is to_bf16 (round to nearest, ties to even), as
// kernels::store does.
template <int W>
__device__ __forceinline__ void load_vec(const float* p, float (&v)[W]) {
  if constexpr (W == 8) {
    const float4 t = *reinterpret_cast<const float4*>(p), u = *reinterpret_cast<const float4*>(p + 4);
    v[0] = t.x;
    v[1] = t.y;
    v[2] = t.z;
    v[3] = t.w;
    v[4] = u.x;
    v[5] = u.y;
    v[6] = u.z;
    v[7] = u.w;
  } else if constexpr (W == 4) {
    const float4 t = *reinterpret_cast<const float4*>(p);
    v[0] = t.x;
    v[1] = t.y;
    v[2] = t.z;
    v[3] = t.w;
  } else {
#pragma unroll
    for (int i = 0; i < W; ++i) v[i] = p[i];
  }
}
template <int W>
__device__ __forceinline__ void load_vec(const bf16* p, float (&v)[W]) {
  if constexpr (W == 8) {
    const uint4 t = *reinterpret_cast<const uint4*>(p);
    const std::uint32_t words[4] = {t.x, t.y, t.z, t.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = __uint_as_float(words[i] << 16);
      v[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
  } else if constexpr (W == 4) {
    // Little-endian: element 2i is the low half of word i. Widening is a 16-bit shift (exact).
    const uint2 t = *reinterpret_cast<const uint2*>(p);
    v[0] = __uint_as_float(t.x << 16);
    v[1] = __uint_as_float(t.x & 0xffff0000u);
    v[2] = __uint_as_float(t.y << 16);
    v[3] = __uint_as_float(t.y & 0xffff0000u);
  } else {
#pragma unroll
    for (int i = 0; i < W; ++i) v[i] = to_float(p[i]);
  }
}
template <int W>
__device__ __forceinline__ void store_vec(float* p, const float (&v)[W]) {
  if constexpr (W == 8) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    *reinterpret_cast<float4*>(p + 4) = make_float4(v[4], v[5], v[6], v[7]);
  } else if constexpr (W == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int i = 0; i < W; ++i) p[i] = v[i];
  }
}
__device__ __forceinline__ std::uint32_t pack_bf16x2(float lo, float hi) {
  return static_cast<std::uint32_t>(to_bf16(lo).bits) | (static_cast<std::uint32_t>(to_bf16(hi).bits) << 16);
}
template <int W>
__device__ __forceinline__ void store_vec(bf16* p, const float (&v)[W]) {
  if constexpr (W == 8) {
    *reinterpret_cast<uint4*>(p) =
        make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]), pack_bf16x2(v[6], v[7]));
  } else if constexpr (W == 4) {
    *reinterpret_cast<uint2*>(p) = make_uint2(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]));
  } else {
#pragma unroll
    for (int i = 0; i < W; ++i) p[i] = to_bf16(v[i]);
  }
}

// Thread t's share of one row: vectors t + k * blockDim.x for k < K, zero past the row end.
// The row is float or bf16 in memory (T), always float in registers (K * W floats a thread).
template <int K, int W>
struct RowRegs {
  float v[K][W];
  __device__ __forceinline__ static int vec_index(int k) { return threadIdx.x + k * blockDim.x; }
  // Element index of v[k][w] in the row.
  __device__ __forceinline__ static int col(int k, int w) { return vec_index(k) * W + w; }
  template <class T>
  __device__ __forceinline__ void load(const T* row, int nvec) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      if (vec_index(k) < nvec) {
        load_vec<W>(row + vec_index(k) * W, v[k]);
      } else {
#pragma unroll
        for (int w = 0; w < W; ++w) v[k][w] = 0.f;
      }
    }
  }
  template <class T>
  __device__ __forceinline__ void store(T* row, int nvec) const {
#pragma unroll
    for (int k = 0; k < K; ++k)
      if (vec_index(k) < nvec) store_vec<W>(row + vec_index(k) * W, v[k]);
  }
};

struct RowPlan {
  bool cached = false;  // false: use the global-memory fallback kernel
  int k = 1;            // vectors per thread
  int w = 1;            // floats per vector
  int threads = 32;
};

// Register-row kernels are declared __launch_bounds__(kMaxRowThreads): with K = 8 float4 they
// need ~130 registers a thread, which 512 or 1024 threads per block could not get.
constexpr int kMaxRowThreads = 256;

// The register plan for rows of `cols` floats; `aligned`: every row pointer involved is 16-byte
// aligned (rows then are too when cols % 4 == 0). Cached up to 8192 floats (float4) or 2048.
inline RowPlan plan_row(std::int64_t cols, bool aligned) {
  RowPlan p;
  p.w = aligned && cols % 4 == 0 ? 4 : 1;
  const std::int64_t nvec = cols / p.w;
  for (const int k : {1, 2, 4, 8}) {
    const std::int64_t threads = ((nvec + k - 1) / k + kWarp - 1) / kWarp * kWarp;
    if (threads <= kMaxRowThreads) {
      p.cached = true;
      p.k = k;
      p.threads = static_cast<int>(threads < kWarp ? kWarp : threads);
      return p;
    }
  }
  return p;
}

// Calls f(std::integral_constant<int, K>{}, std::integral_constant<int, W>{}) for the plan.
template <class F>
void dispatch_row(const RowPlan& p, F&& f) {
  auto with_w = [&](auto k) {
    if (p.w == 4)
      f(k, std::integral_constant<int, 4>{});
    else
      f(k, std::integral_constant<int, 1>{});
  };
  switch (p.k) {
    case 1:
      with_w(std::integral_constant<int, 1>{});
      break;
    case 2:
      with_w(std::integral_constant<int, 2>{});
      break;
    case 4:
      with_w(std::integral_constant<int, 4>{});
      break;
    default:
      with_w(std::integral_constant<int, 8>{});
      break;
  }
}

// Deterministic column sums over rows: out[c] += sum_r term(r, c), one block per 32 columns,
// 32 row lanes per column, a fixed tree over the lanes. `term` is a device functor returning a
// float (one sum, into out.x) or a float2 (two sums of one pass over the rows, into out.x and
// out.y, each in the same order as a float term's).
constexpr int kColRows = 32;
struct ColumnOut {
  float* x;
  float* y;  // the second sum's columns (float2 terms only)
};
__device__ inline void add_to(float& a, float b) { a += b; }
__device__ inline void add_to(float2& a, float2 b) {
  a.x += b.x;
  a.y += b.y;
}
__device__ inline void add_out(const ColumnOut& out, std::int64_t c, float v) { out.x[c] += v; }
__device__ inline void add_out(const ColumnOut& out, std::int64_t c, float2 v) {
  out.x[c] += v.x;
  if (out.y != nullptr) out.y[c] += v.y;  // RMSNorm's backward has no dbeta
}
template <class Term>
__global__ void __launch_bounds__(kWarp* kColRows)
    column_sum_kernel(Term term, ColumnOut out, std::int64_t rows, std::int64_t cols) {
  using Value = decltype(term(std::int64_t{0}, std::int64_t{0}));
  __shared__ Value part[kColRows][kWarp + 1];
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * kWarp + threadIdx.x;
  Value acc{};
  if (c < cols)
    for (std::int64_t r = threadIdx.y; r < rows; r += kColRows) add_to(acc, term(r, c));
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  for (int s = kColRows / 2; s > 0; s /= 2) {
    if (static_cast<int>(threadIdx.y) < s) add_to(part[threadIdx.y][threadIdx.x], part[threadIdx.y + s][threadIdx.x]);
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < cols) add_out(out, c, part[0][threadIdx.x]);
}

template <class Term>
int launch_column_sums(Term term, ColumnOut out, std::int64_t rows, std::int64_t cols, cudaStream_t s) {
  if (cols == 0) return 0;
  const std::int64_t blocks = (cols + kWarp - 1) / kWarp;
  if (!fits_int(blocks)) return kInvalidValue;
  column_sum_kernel<<<static_cast<int>(blocks), dim3(kWarp, kColRows), 0, s>>>(term, out, rows, cols);
  return launch_status();
}
// One sum (term returns a float).
template <class Term>
int launch_column_sum(Term term, float* out, std::int64_t rows, std::int64_t cols, cudaStream_t s) {
  return launch_column_sums(term, ColumnOut{out, nullptr}, rows, cols, s);
}
// Two sums in one pass over the rows (term returns a float2): one read of what both share.
template <class Term>
int launch_column_sum2(Term term, float* out_x, float* out_y, std::int64_t rows, std::int64_t cols, cudaStream_t s) {
  return launch_column_sums(term, ColumnOut{out_x, out_y}, rows, cols, s);
}

}  // namespace meshsim::kernels::cuda_detail
