#include "kernels/gemm.h"

#include <gtest/gtest.h>
#include <tbb/task_arena.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/kernels_test_util.h"

namespace meshsim::kernels {
namespace {

using namespace testing;  // kernels_test_util.h

struct Case {
  bool ta, tb;
  std::int64_t m, n, k;
  float alpha, beta;
};

// Naive triple loop in double on the same row-major storage.
std::vector<double> naive(const Case& c, const std::vector<float>& a, std::int64_t lda, const std::vector<float>& b,
                          std::int64_t ldb, const std::vector<float>& c0, std::int64_t ldc) {
  std::vector<double> out(c0.begin(), c0.end());
  for (std::int64_t i = 0; i < c.m; ++i)
    for (std::int64_t j = 0; j < c.n; ++j) {
      double s = 0;
      for (std::int64_t p = 0; p < c.k; ++p) {
        const double av = c.ta ? a[p * lda + i] : a[i * lda + p];
        const double bv = c.tb ? b[j * ldb + p] : b[p * ldb + j];
        s += av * bv;
      }
      out[i * ldc + j] = c.alpha * s + c.beta * c0[i * ldc + j];
    }
  return out;
}

TEST(Gemm, MatchesNaiveTripleLoopForEveryTransposeAndPaddedStrides) {
  for (const Case c : {Case{false, false, 70, 33, 19, 1.f, 0.f}, Case{false, true, 5, 129, 40, 0.5f, 1.f},
                       Case{true, false, 131, 7, 65, -2.f, 0.25f}, Case{true, true, 64, 64, 1, 1.f, 1.f}}) {
    const std::int64_t lda = (c.ta ? c.m : c.k) + 3, ldb = (c.tb ? c.k : c.n) + 2, ldc = c.n + 5;
    const auto a = random_vector((c.ta ? c.k : c.m) * lda, 1);
    const auto b = random_vector((c.tb ? c.n : c.k) * ldb, 2);
    auto got = random_vector(c.m * ldc, 3);
    const auto want = naive(c, a, lda, b, ldb, got, ldc);
    gemm_cpu(c.ta ? Trans::Yes : Trans::No, c.tb ? Trans::Yes : Trans::No, c.m, c.n, c.k, c.alpha, a.data(), lda,
             b.data(), ldb, c.beta, got.data(), ldc);
    expect_near_all(got, want, 1e-4, 1e-5, "C");  // padding columns are checked too: untouched
  }
}

TEST(Gemm, BetaZeroIgnoresOldContentsEvenNaN) {
  const auto a = random_vector(6, 4), b = random_vector(6, 5);
  std::vector<float> c(4, std::numeric_limits<float>::quiet_NaN());
  gemm_cpu(Trans::No, Trans::No, 2, 2, 3, 1.f, a.data(), 3, b.data(), 2, 0.f, c.data(), 2);
  for (float v : c) EXPECT_FALSE(std::isnan(v));
  EXPECT_FLOAT_EQ(c[3], a[3] * b[1] + a[4] * b[3] + a[5] * b[5]);
}

TEST(Gemm, BitIdenticalWithOneThreadOrMany) {
  const std::int64_t m = 300, n = 96, k = 200;
  const auto a = random_vector(m * k, 6), b = random_vector(k * n, 7);
  std::vector<float> many(m * n), one(m * n);
  gemm_cpu(Trans::No, Trans::No, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, many.data(), n);
  tbb::task_arena single(1);
  single.execute([&] { gemm_cpu(Trans::No, Trans::No, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, one.data(), n); });
  EXPECT_EQ(many, one);
}

}  // namespace
}  // namespace meshsim::kernels
