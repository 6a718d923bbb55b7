// Test helpers for the numerics tests: ranks as threads over real TCP transports, and the
// comparison of distributed results with the single-rank reference.
//
// Tolerance (docs/numerics.md): |got - want| <= kRtol * |want| + kAtol * max|want over the
// tensor|. A distributed run sums the same terms in another order (partial GEMMs added by an
// all-reduce, reductions over shards, merged attention blocks), so each element differs by a
// few fp32 roundings of the largest terms that entered it: about 1e-7 relative per rounding,
// grown by two layers of backward. kRtol = 1e-4 and kAtol = 2e-5 leave ~100x headroom over
// what the tests see, and are ~1000x below the error of a wrong partition (a missing
// all-reduce, a wrong shard, a wrong mask), which the *Fails tests check.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/numerics/comm.h"
#include "backend/cpu/numerics/model.h"
#include "backend/cpu/test_util.h"
#include "backend/cpu/transport.h"

namespace meshsim::numerics::testing {

constexpr double kRtol = 1e-4;
constexpr double kAtol = 2e-5;

// Runs fn(rank, transport) on `world` threads connected by TCP; returns each rank's error ("" = none).
inline std::vector<std::string> run_world(int world, const std::function<void(int, cpu::Transport&)>& fn) {
  cpu::InMemoryDirectory dir;
  return cpu::testing::run_ranks(world, [&](int r) {
    cpu::Transport t(r, world, dir, cpu::TransportOptions{.token = "numerics"});
    fn(r, t);
  });
}

inline void expect_no_errors(const std::vector<std::string>& errors) {
  for (std::size_t r = 0; r < errors.size(); ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

// Runs step(rank, comm) on `ranks` threads whose one Comm is the whole world (members
// 0..ranks-1, the builtin algorithms), expects no rank to fail, and returns each rank's result.
template <class F>
auto run_group(int ranks, F&& step) {
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  std::vector<std::invoke_result_t<F&, int, Comm&>> results(ranks);
  std::vector<int> members(ranks);
  for (int i = 0; i < ranks; ++i) members[i] = i;
  expect_no_errors(run_world(ranks, [&](int r, cpu::Transport& t) {
    Comm comm(t, members, reg);
    results[r] = step(r, comm);
  }));
  return results;
}

// The small model of the parallelism tests: 2 layers, hidden 16, 4 heads, seq 8, batch 4,
// vocab 32, ffn 32, dropout 0.1; a test changes the sizes its partition needs.
inline ModelConfig small_config(std::uint64_t seed) {
  ModelConfig c;
  c.layers = 2, c.hidden = 16, c.heads = 4, c.seq = 8, c.batch = 4, c.vocab = 32, c.ffn = 32;
  c.dropout = 0.1f, c.seed = seed;
  return c;
}

// Largest violation of the tolerance, as a multiple of the allowed error (<= 1 passes).
inline double worst_ratio(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double scale = 0;
  for (float w : want) scale = std::max(scale, double(std::abs(w)));
  double worst = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double(got[i]) - want[i]);
    const double allowed = kRtol * std::abs(want[i]) + kAtol * scale + 1e-30;
    worst = std::max(worst, std::isfinite(err) ? err / allowed : INFINITY);
  }
  return worst;
}

inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_LE(worst_ratio(got, want), 1.0) << what << ": outside the fp32 tolerance";
  if (std::getenv("NUMERICS_PRINT_RATIO")) std::printf("%s %.3g\n", what.c_str(), worst_ratio(got, want));
}

// Every tensor of want must be in got (same shape) and close.
inline void expect_maps_close(const TensorMap& got, const TensorMap& want, const std::string& what) {
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << ": missing " << name;
    EXPECT_EQ(it->second.rows, w.rows) << what << " " << name;
    EXPECT_EQ(it->second.cols, w.cols) << what << " " << name;
    expect_close(it->second.data, w.data, what + " " + name);
  }
}

// Max over tensors of worst_ratio (for the tests that show a wrong partition fails).
inline double worst_map_ratio(const TensorMap& got, const TensorMap& want) {
  double worst = 0;
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    if (it == got.end()) return INFINITY;
    worst = std::max(worst, worst_ratio(it->second.data, w.data));
  }
  return worst;
}

}  // namespace meshsim::numerics::testing
