// Test helpers for kernels/: seeded random inputs and central finite differences.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace meshsim::kernels::testing {

inline std::vector<float> random_vector(std::size_t n, std::uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// d loss / d x[i] by central differences, for every element of x (restored afterwards).
// loss() must read x by reference and return a double.
inline std::vector<double> numeric_grad(const std::function<double()>& loss, std::vector<float>& x, float eps = 1e-2f) {
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float keep = x[i];
    x[i] = keep + eps;
    const double up = loss();
    x[i] = keep - eps;
    const double down = loss();
    x[i] = keep;
    g[i] = (up - down) / (2.0 * static_cast<double>(eps));
  }
  return g;
}

// Weighted sum sum_i w[i] * y[i] in double: a scalar loss whose gradient wrt y is w.
inline double weighted_sum(const std::vector<float>& y, const std::vector<float>& w) {
  double s = 0;
  for (std::size_t i = 0; i < y.size(); ++i) s += static_cast<double>(y[i]) * w[i];
  return s;
}

template <class Got, class Want>
void expect_near_all(const Got& got, const Want& want, double atol, double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int bad = 0;
  for (std::size_t i = 0; i < got.size() && bad < 5; ++i) {
    const double g = got[i], w = want[i];
    if (!(std::abs(g - w) <= atol + rtol * std::abs(w))) {
      ADD_FAILURE() << what << "[" << i << "]: got " << g << ", want " << w;
      ++bad;
    }
  }
}

}  // namespace meshsim::kernels::testing
