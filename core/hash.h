// splitmix64: a small, well-mixed 64-bit hash, used wherever meshsim needs deterministic
// pseudo-randomness (ECMP choices in the router, seeded inputs in the cpu backend): the
// same input gives the same output on every machine and rank.
//
//   std::uint64_t h = splitmix64(key);
#pragma once

#include <cstdint>

namespace meshsim {

constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace meshsim
