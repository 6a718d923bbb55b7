#include "kernels/elementwise.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/parallel.h"

namespace meshsim::kernels {
namespace {

constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluA = 0.044715f;
constexpr std::int64_t kChunk = 4096;  // elements per task for flat element-wise loops

template <class F>
void for_each_chunk(std::size_t n, F&& f) {
  const auto total = static_cast<std::int64_t>(n);
  detail::for_each_index((total + kChunk - 1) / kChunk, [&](std::int64_t c) {
    const std::int64_t end = std::min(total, (c + 1) * kChunk);
    for (std::int64_t i = c * kChunk; i < end; ++i) f(i);
  });
}

float sigmoid(float a) { return 1.f / (1.f + std::exp(-a)); }

}  // namespace

void gelu_forward_cpu(const float* x, float* y, std::size_t n) {
  for_each_chunk(n, [&](std::int64_t i) {
    const float v = x[i];
    const float t = std::tanh(kGeluC * (v + kGeluA * v * v * v));
    y[i] = 0.5f * v * (1.f + t);
  });
}

void gelu_backward_cpu(const float* dy, const float* x, float* dx, std::size_t n) {
  for_each_chunk(n, [&](std::int64_t i) {
    const float v = x[i];
    const float t = std::tanh(kGeluC * (v + kGeluA * v * v * v));
    const float du = kGeluC * (1.f + 3.f * kGeluA * v * v);
    dx[i] = dy[i] * (0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * du);
  });
}

void swiglu_forward_cpu(const float* a, const float* b, std::int64_t ld_in, float* out, std::int64_t rows,
                        std::int64_t cols) {
  MESHSIM_ASSERT(rows >= 0 && cols >= 0 && ld_in >= cols);
  detail::for_each_index(rows, [&](std::int64_t r) {
    for (std::int64_t j = 0; j < cols; ++j) {
      const float av = a[r * ld_in + j];
      out[r * cols + j] = av * sigmoid(av) * b[r * ld_in + j];
    }
  });
}

void swiglu_backward_cpu(const float* dout, const float* a, const float* b, std::int64_t ld_in, float* da, float* db,
                         std::int64_t rows, std::int64_t cols) {
  MESHSIM_ASSERT(rows >= 0 && cols >= 0 && ld_in >= cols);
  detail::for_each_index(rows, [&](std::int64_t r) {
    for (std::int64_t j = 0; j < cols; ++j) {
      const float av = a[r * ld_in + j], bv = b[r * ld_in + j], g = dout[r * cols + j];
      const float s = sigmoid(av);
      da[r * ld_in + j] = g * bv * s * (1.f + av * (1.f - s));
      db[r * ld_in + j] = g * av * s;
    }
  });
}

void add_bias_cpu(float* y, const float* bias, std::int64_t rows, std::int64_t cols) {
  MESHSIM_ASSERT(rows >= 0 && cols >= 0);
  detail::for_each_index(rows, [&](std::int64_t r) {
    for (std::int64_t j = 0; j < cols; ++j) y[r * cols + j] += bias[j];
  });
}

void bias_backward_cpu(const float* dy, float* dbias, std::int64_t rows, std::int64_t cols) {
  MESHSIM_ASSERT(rows >= 0 && cols >= 0);
  detail::for_each_column_block(cols, [&](std::int64_t c0, std::int64_t c1) {
    std::vector<double> acc(c1 - c0, 0.0);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = c0; j < c1; ++j) acc[j - c0] += dy[r * cols + j];
    for (std::int64_t j = c0; j < c1; ++j) dbias[j] += static_cast<float>(acc[j - c0]);
  });
}

}  // namespace meshsim::kernels
