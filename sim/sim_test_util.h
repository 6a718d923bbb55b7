// Helpers shared by the tests of sim/: the builtin registry, built once, and group ranks.
#pragma once

#include <numeric>
#include <vector>

#include "schedule/collective.h"

namespace meshsim::sim_testing {

inline const AlgorithmRegistry& registry() {
  static const AlgorithmRegistry r = AlgorithmRegistry::builtin();
  return r;
}

// GPUs 0, 1, ..., n-1.
inline std::vector<int> iota(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

}  // namespace meshsim::sim_testing
