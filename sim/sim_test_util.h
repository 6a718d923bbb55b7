// Helpers shared by the tests of sim/: the builtin registry, built once, group ranks, and a
// three-GPU star for hand-worked flow cases.
#pragma once

#include <numeric>
#include <vector>

#include <string>

#include "schedule/collective.h"
#include "topology/topology.h"

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

// Three GPUs on one switch, links of 1 byte/ps (1 TB/s) each way, 1 ns per hop. Link ids:
// g0->sw 0, sw->g0 1, g1->sw 2, sw->g1 3, g2->sw 4, sw->g2 5.
inline Topology star3() {
  Topology t("star3");
  const int sw = t.add_device(DeviceKind::Switch, "sw");
  for (int i = 0; i < 3; ++i) {
    const int g = t.add_device(DeviceKind::Gpu, "g" + std::to_string(i), i);
    t.add_link(g, sw, LinkSpec{LinkKind::Generic, GBps(1000), 1.0, ns(1)});
  }
  t.seal();
  return t;
}

}  // namespace meshsim::sim_testing
