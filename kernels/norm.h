// LayerNorm over the last dimension of a row-major [rows, h] tensor, whole or split.
//
// Forward, per row r (means over the h elements of the row):
//   mean = E[x],  rstd = 1 / sqrt(E[(x - mean)^2] + eps),  xhat = (x - mean) * rstd,
//   y = xhat * gamma + beta                         (gamma, beta: [h])
// Backward, with g = dy * gamma:
//   dx = rstd * (g - E[g] - xhat * E[g * xhat]),  dgamma += sum_r dy * xhat,  dbeta += sum_r dy
// dgamma and dbeta ACCUMULATE (+=) so callers can sum over micro-batches and shards;
// zero them before the first call. mean and rstd ([rows]) are saved by the forward and
// read by the backward.
//
//   layernorm_forward_cpu(x, gamma, beta, y, mean, rstd, rows, h, 1e-5f);
//   layernorm_backward_cpu(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, rows, h);
//
// RMSNorm (Llama, Mixtral, DeepSeek) is LayerNorm without the centring and the bias:
//   rstd = 1 / sqrt(E[x^2] + eps),  xhat = x * rstd,  y = xhat * gamma
//   dx = rstd * (g - xhat * E[g * xhat]),  dgamma += sum_r dy * xhat      (g = dy * gamma)
// so it runs on the same code with mean taken as 0 and no beta:
//   rmsnorm_forward_cpu(x, gamma, y, rstd, rows, h, 1e-5f);
//   rmsnorm_backward_cpu(dy, x, gamma, rstd, dx, dgamma, rows, h);
//
// 2D (SUMMA) tensor parallelism splits each row's h elements over the q ranks of a mesh
// row; each rank holds [rows, h_local] of x, y, dy, dx and the matching h_local slice of
// gamma, beta, dgamma, dbeta. The same math, in two halves around an all-reduce:
//   forward:  stats[rows][2] = {sum x, sum x^2} over the local slice   (layernorm2d_stats_cpu)
//             all-reduce(sum) stats along the mesh row
//             y = (x - mean) * rstd * gamma + beta, mean = S1/h,
//             rstd = 1/sqrt(S2/h - mean^2 + eps)                      (layernorm2d_apply_cpu)
//   backward: dstats[rows][2] = {sum dy*gamma, sum dy*gamma*xhat} over the slice
//                                                          (layernorm2d_backward_stats_cpu)
//             all-reduce(sum) dstats along the mesh row
//             dx = rstd * (g - D1/h - xhat * D2/h); dgamma, dbeta += local slice
//                                                          (layernorm2d_backward_apply_cpu)
// The variance comes from E[x^2] - mean^2 (one all-reduce instead of two), which loses
// precision when |mean| >> std; the partial sums are taken in double before rounding.
// With q = 1 the split form equals the whole form up to rounding.
//
// All rows are independent; the CPU versions run rows in parallel (oneTBB) and reduce
// within a row serially, and dgamma/dbeta per column serially over rows, so results do
// not depend on the thread count. The CUDA kernels in cuda_ops.h mirror these signatures.
#pragma once

#include <cstdint>

namespace meshsim::kernels {

void layernorm_forward_cpu(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                           std::int64_t rows, std::int64_t h, float eps);

void layernorm_backward_cpu(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                            float* dx, float* dgamma, float* dbeta, std::int64_t rows, std::int64_t h);

void rmsnorm_forward_cpu(const float* x, const float* gamma, float* y, float* rstd, std::int64_t rows, std::int64_t h,
                         float eps);
void rmsnorm_backward_cpu(const float* dy, const float* x, const float* gamma, const float* rstd, float* dx,
                          float* dgamma, std::int64_t rows, std::int64_t h);

// stats: [rows][2] = {sum x, sum x^2} over the local h_local columns.
void layernorm2d_stats_cpu(const float* x, float* stats, std::int64_t rows, std::int64_t h_local);

// stats: the globally summed [rows][2]; h: the full row length. Writes y, mean, rstd.
void layernorm2d_apply_cpu(const float* x, const float* stats, const float* gamma, const float* beta, float* y,
                           float* mean, float* rstd, std::int64_t rows, std::int64_t h_local, std::int64_t h,
                           float eps);

// dstats: [rows][2] = {sum dy*gamma, sum dy*gamma*xhat} over the local columns.
void layernorm2d_backward_stats_cpu(const float* dy, const float* x, const float* gamma, const float* mean,
                                    const float* rstd, float* dstats, std::int64_t rows, std::int64_t h_local);

// dstats: the globally summed [rows][2]. Writes dx; dgamma, dbeta (+=) for the local slice.
void layernorm2d_backward_apply_cpu(const float* dy, const float* x, const float* gamma, const float* mean,
                                    const float* rstd, const float* dstats, float* dx, float* dgamma, float* dbeta,
                                    std::int64_t rows, std::int64_t h_local, std::int64_t h);

}  // namespace meshsim::kernels
