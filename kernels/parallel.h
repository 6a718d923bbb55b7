// Internal to kernels/: the one way CPU references use threads.
//
// for_each_index(n, f) calls f(i) for i in [0, n) on oneTBB threads. Each f(i) must write
// only its own outputs (a row, a column block), so the result never depends on the thread
// count or the order in which threads pick up work.
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cstdint>

namespace meshsim::kernels::detail {

template <class F>
void for_each_index(std::int64_t n, F&& f) {
  if (n <= 0) return;
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n), [&](const tbb::blocked_range<std::int64_t>& r) {
    for (std::int64_t i = r.begin(); i != r.end(); ++i) f(i);
  });
}

// Column blocks of this width are the unit of work for per-column sums over rows.
constexpr std::int64_t kColumnBlock = 64;

// f(c0, c1) for column blocks [c0, c1) covering [0, cols).
template <class F>
void for_each_column_block(std::int64_t cols, F&& f) {
  const std::int64_t blocks = (cols + kColumnBlock - 1) / kColumnBlock;
  for_each_index(blocks, [&](std::int64_t b) { f(b * kColumnBlock, std::min(cols, (b + 1) * kColumnBlock)); });
}

}  // namespace meshsim::kernels::detail
