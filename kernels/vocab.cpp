#include "kernels/vocab.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/parallel.h"

namespace meshsim::kernels {
namespace {

bool in_shard(std::int64_t id, std::int64_t v_local, std::int64_t v0) { return id >= v0 && id < v0 + v_local; }

}  // namespace

void cross_entropy_local_max_cpu(const float* logits, float* local_max, std::int64_t rows, std::int64_t v_local) {
  MESHSIM_ASSERT(rows >= 0 && v_local >= 0);
  detail::for_each_index(rows, [&](std::int64_t r) {
    const float* lr = logits + r * v_local;
    float m = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j < v_local; ++j) m = std::max(m, lr[j]);
    local_max[r] = m;
  });
}

void cross_entropy_local_stats_cpu(const float* logits, const float* global_max, const std::int64_t* targets,
                                   float* stats, std::int64_t rows, std::int64_t v_local, std::int64_t v0) {
  MESHSIM_ASSERT(rows >= 0 && v_local >= 0 && v0 >= 0);
  detail::for_each_index(rows, [&](std::int64_t r) {
    const float* lr = logits + r * v_local;
    double s = 0;
    for (std::int64_t j = 0; j < v_local; ++j) s += std::exp(static_cast<double>(lr[j]) - global_max[r]);
    stats[2 * r] = static_cast<float>(s);
    stats[2 * r + 1] = in_shard(targets[r], v_local, v0) ? lr[targets[r] - v0] : 0.f;
  });
}

void cross_entropy_loss_cpu(const float* global_max, const float* stats, const std::int64_t* targets, float* loss,
                            std::int64_t rows) {
  MESHSIM_ASSERT(rows >= 0);
  detail::for_each_index(rows, [&](std::int64_t r) {
    loss[r] = targets[r] < 0
                  ? 0.f
                  : static_cast<float>(std::log(static_cast<double>(stats[2 * r])) + global_max[r] - stats[2 * r + 1]);
  });
}

void cross_entropy_backward_cpu(const float* logits, const float* global_max, const float* stats,
                                const std::int64_t* targets, float grad_scale, float* dlogits, std::int64_t rows,
                                std::int64_t v_local, std::int64_t v0) {
  MESHSIM_ASSERT(rows >= 0 && v_local >= 0 && v0 >= 0);
  detail::for_each_index(rows, [&](std::int64_t r) {
    const float* lr = logits + r * v_local;
    float* dr = dlogits + r * v_local;
    if (targets[r] < 0) {
      std::fill(dr, dr + v_local, 0.f);
      return;
    }
    const float inv_sum = 1.f / stats[2 * r];
    for (std::int64_t j = 0; j < v_local; ++j) {
      const float p = std::exp(lr[j] - global_max[r]) * inv_sum;
      dr[j] = grad_scale * (p - (targets[r] == v0 + j ? 1.f : 0.f));
    }
  });
}

void embedding_forward_cpu(const std::int64_t* ids, const float* table, float* out, std::int64_t rows, std::int64_t h,
                           std::int64_t v_local, std::int64_t v0) {
  MESHSIM_ASSERT(rows >= 0 && h >= 0 && v_local >= 0);
  detail::for_each_index(rows, [&](std::int64_t r) {
    float* o = out + r * h;
    if (in_shard(ids[r], v_local, v0))
      std::copy_n(table + (ids[r] - v0) * h, h, o);
    else
      std::fill(o, o + h, 0.f);
  });
}

void embedding_backward_cpu(const std::int64_t* ids, const float* dout, float* dtable, std::int64_t rows,
                            std::int64_t h, std::int64_t v_local, std::int64_t v0) {
  MESHSIM_ASSERT(rows >= 0 && h >= 0 && v_local >= 0);
  // Column blocks in parallel; within a block, rows in order (repeated ids add in row order).
  detail::for_each_column_block(h, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t r = 0; r < rows; ++r) {
      if (!in_shard(ids[r], v_local, v0)) continue;
      float* t = dtable + (ids[r] - v0) * h;
      for (std::int64_t c = c0; c < c1; ++c) t[c] += dout[r * h + c];
    }
  });
}

}  // namespace meshsim::kernels
