// Single-precision matrix multiply on the CPU, through OpenBLAS's CBLAS interface.
//
// Row-major, BLAS argument order: C = alpha * op(A) * op(B) + beta * C, where op(A) is
// m x k and op(B) is k x n. A is stored m x k (lda >= k) when trans_a is kNo and k x m
// (lda >= m) when kYes; likewise B is k x n (ldb >= n) or n x k (ldb >= k); C is m x n
// (ldc >= n). beta = 0 overwrites C (its old contents, even NaN, are ignored); beta = 1
// accumulates, which is how weight gradients are summed over micro-batches.
//
//   // y[rows, out] = x[rows, in] * W[in, out]       (forward of a linear layer)
//   gemm_cpu(Trans::No, Trans::No, rows, out, in, 1.f, x, in, W, out, 0.f, y, out);
//   // dx[rows, in] = dy[rows, out] * W^T            (input gradient)
//   gemm_cpu(Trans::No, Trans::Yes, rows, in, out, 1.f, dy, out, W, out, 0.f, dx, in);
//   // dW[in, out] += x^T * dy                       (weight gradient, accumulated)
//   gemm_cpu(Trans::Yes, Trans::No, in, out, rows, 1.f, x, in, dy, out, 1.f, dW, out);
//
// Determinism: OpenBLAS runs single-threaded here (gemm_cpu sets openblas_set_num_threads(1)
// once per process), and the parallelism comes from oneTBB over fixed blocks of C's rows:
// the block boundaries do not depend on the thread count, so the same inputs give the
// same bits on every run and with any number of threads. A CUDA version will mirror this
// signature on device pointers (through cuBLAS).
#pragma once

#include <cstdint>

namespace meshsim::kernels {

enum class Trans { No, Yes };

void gemm_cpu(Trans trans_a, Trans trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
              std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc);

}  // namespace meshsim::kernels
