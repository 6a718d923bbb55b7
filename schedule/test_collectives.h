// Test helpers shared by the collective tests (schedule/ and the cpu backend): a case of
// the algorithm x kind x size matrix, its CollectiveSpec, and seeded random inputs laid
// out as rank_buffers says. For tests only.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "schedule/collective.h"

namespace meshsim::testing {

using Buffers = std::vector<std::vector<float>>;

struct CollectiveCase {
  std::string algo;
  CollKind kind = CollKind::AllReduce;
  int p = 2;
  int floats = 8;  // buffer size in floats (all-to-all: what each rank sends in total)
  int per_node = 1;
  int chunks = 0;
  bool uneven = false;  // all-to-all with a p x p size matrix (zeros included)
};

inline CollectiveSpec spec_of(const CollectiveCase& c) {
  CollectiveSpec s;
  s.kind = c.kind;
  s.ranks = c.p;
  s.bytes = static_cast<Bytes>(c.floats) * 4;
  s.root = c.p / 2;
  s.ranks_per_node = c.per_node;
  s.chunks = c.chunks;
  s.element_bytes = 4;
  if (c.uneven) {
    s.alltoall_bytes.assign(c.p, std::vector<Bytes>(c.p, 0));
    for (int a = 0; a < c.p; ++a)
      for (int b = 0; b < c.p; ++b) s.alltoall_bytes[a][b] = 4 * ((a * 7 + b * 3) % 5);
  }
  return s;
}

// Every rank's input buffer, uniform in [-1, 1) from `seed`.
inline Buffers random_inputs(const CollectiveSpec& s, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Buffers in(s.ranks);
  for (int r = 0; r < s.ranks; ++r) {
    in[r].resize(static_cast<std::size_t>(rank_buffers(s, r).send / 4));
    for (float& x : in[r]) x = dist(gen);
  }
  return in;
}

}  // namespace meshsim::testing
