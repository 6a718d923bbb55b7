#include "kernels/gemm.h"

#include <cblas.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <climits>
#include <mutex>

#include "core/error.h"

namespace meshsim::kernels {
namespace {

// Rows of C per task. Fixed (never derived from the thread count) so results are bitwise
// independent of how many threads run the blocks.
constexpr std::int64_t kRowBlock = 64;

void single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

bool fits_int(std::int64_t v) { return v >= 0 && v <= INT_MAX; }

}  // namespace

void gemm_cpu(Trans trans_a, Trans trans_b, std::int64_t m, std::int64_t n, std::int64_t k, float alpha, const float* a,
              std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c, std::int64_t ldc) {
  const bool ta = trans_a == Trans::Yes, tb = trans_b == Trans::Yes;
  MESHSIM_ASSERT(fits_int(m) && fits_int(n) && fits_int(k));
  MESHSIM_ASSERT(fits_int(lda) && fits_int(ldb) && fits_int(ldc));
  MESHSIM_ASSERT(lda >= (ta ? m : k) && lda >= 1);
  MESHSIM_ASSERT(ldb >= (tb ? k : n) && ldb >= 1);
  MESHSIM_ASSERT(ldc >= n && ldc >= 1);
  if (m == 0 || n == 0) return;
  single_threaded_blas();
  const auto op_a = ta ? CblasTrans : CblasNoTrans;
  const auto op_b = tb ? CblasTrans : CblasNoTrans;
  const std::int64_t blocks = (m + kRowBlock - 1) / kRowBlock;
  tbb::parallel_for(std::int64_t{0}, blocks, [&](std::int64_t blk) {
    const std::int64_t r0 = blk * kRowBlock;
    const std::int64_t rows = std::min(kRowBlock, m - r0);
    // Rows r0.. of op(A): row-major A starts at row r0 (no trans) or column r0 (trans).
    const float* a_blk = ta ? a + r0 : a + r0 * lda;
    cblas_sgemm(CblasRowMajor, op_a, op_b, static_cast<int>(rows), static_cast<int>(n), static_cast<int>(k), alpha,
                a_blk, static_cast<int>(lda), b, static_cast<int>(ldb), beta, c + r0 * ldc, static_cast<int>(ldc));
  });
}

}  // namespace meshsim::kernels
