#include "kernels/dropout.h"

#include "core/error.h"
#include "kernels/parallel.h"

namespace meshsim::kernels {
namespace {

constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
constexpr std::uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
constexpr int kRounds = 10;
constexpr std::int64_t kCountersPerTask = 1024;

PhiloxCounter counter_of(std::uint64_t block) {
  return {static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32), 0u, 0u};
}
PhiloxKey key_of(std::uint64_t seed) {
  return {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
}
float to_uniform(std::uint32_t bits) { return static_cast<float>(bits >> 8) * 0x1p-24f; }

// out[i] = keep(offset + i) ? in[i] * scale : 0, one Philox call per four global indices.
void apply_mask(const float* in, float* out, std::size_t n, float p, std::uint64_t seed, std::uint64_t offset) {
  MESHSIM_ASSERT(p >= 0.f && p <= 1.f);
  if (n == 0) return;
  const float scale = p < 1.f ? 1.f / (1.f - p) : 0.f;
  const PhiloxKey key = key_of(seed);
  const std::uint64_t first = offset / 4, last = (offset + n - 1) / 4;  // counter blocks
  const auto blocks = static_cast<std::int64_t>(last - first + 1);
  detail::for_each_index((blocks + kCountersPerTask - 1) / kCountersPerTask, [&](std::int64_t t) {
    const std::uint64_t b0 = first + static_cast<std::uint64_t>(t * kCountersPerTask);
    const std::uint64_t b1 = std::min<std::uint64_t>(last + 1, b0 + kCountersPerTask);
    for (std::uint64_t b = b0; b < b1; ++b) {
      const PhiloxCounter r = philox4x32_10(counter_of(b), key);
      for (std::uint64_t lane = 0; lane < 4; ++lane) {
        const std::uint64_t j = 4 * b + lane;
        if (j < offset || j - offset >= n) continue;
        const std::size_t i = j - offset;
        out[i] = to_uniform(r[lane]) >= p ? in[i] * scale : 0.f;
      }
    }
  });
}

}  // namespace

PhiloxCounter philox4x32_10(PhiloxCounter c, PhiloxKey k) {
  for (int round = 0; round < kRounds; ++round) {
    if (round > 0) {
      k[0] += kW0;
      k[1] += kW1;
    }
    const std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * c[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<std::uint32_t>(p0)};
  }
  return c;
}

float dropout_uniform(std::uint64_t seed, std::uint64_t j) {
  return to_uniform(philox4x32_10(counter_of(j / 4), key_of(seed))[j % 4]);
}

void dropout_forward_cpu(const float* x, float* y, std::size_t n, float p, std::uint64_t seed, std::uint64_t offset) {
  apply_mask(x, y, n, p, seed, offset);
}

void dropout_backward_cpu(const float* dy, float* dx, std::size_t n, float p, std::uint64_t seed,
                          std::uint64_t offset) {
  apply_mask(dy, dx, n, p, seed, offset);
}

}  // namespace meshsim::kernels
