#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "kernels/parallel.h"

namespace meshsim::kernels {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr std::int64_t kQueryBlock = 16;  // query rows per task (forward)
constexpr std::int64_t kKeyBlock = 64;    // keys per tile (forward)

float dot(const float* a, const float* b, std::int64_t n) {
  float s = 0.f;
  for (std::int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void check(const AttentionShape& s) {
  MESHSIM_ASSERT(s.batch_heads >= 0 && s.seq_q >= 0 && s.seq_kv >= 0 && s.head_dim > 0);
}

}  // namespace

void softmax_forward_cpu(const float* x, float* y, std::int64_t batches, std::int64_t seq_q, std::int64_t seq_k,
                         float scale, AttentionMask mask) {
  MESHSIM_ASSERT(batches >= 0 && seq_q >= 0 && seq_k >= 0);
  detail::for_each_index(batches * seq_q, [&](std::int64_t r) {
    const std::int64_t i = r % seq_q;
    const float* xr = x + r * seq_k;
    float* yr = y + r * seq_k;
    float m = kNegInf;
    for (std::int64_t j = 0; j < seq_k; ++j)
      if (!mask.masked(i, j)) m = std::max(m, scale * xr[j]);
    if (m == kNegInf) {  // every key masked (or none): an all-zero row
      std::fill(yr, yr + seq_k, 0.f);
      return;
    }
    float sum = 0.f;
    for (std::int64_t j = 0; j < seq_k; ++j) {
      yr[j] = mask.masked(i, j) ? 0.f : std::exp(scale * xr[j] - m);
      sum += yr[j];
    }
    const float inv = 1.f / sum;
    for (std::int64_t j = 0; j < seq_k; ++j) yr[j] *= inv;
  });
}

void softmax_backward_cpu(const float* dy, const float* y, float* dx, std::int64_t batches, std::int64_t seq_q,
                          std::int64_t seq_k, float scale) {
  MESHSIM_ASSERT(batches >= 0 && seq_q >= 0 && seq_k >= 0);
  detail::for_each_index(batches * seq_q, [&](std::int64_t r) {
    const float* dyr = dy + r * seq_k;
    const float* yr = y + r * seq_k;
    const float d = dot(dyr, yr, seq_k);
    float* dxr = dx + r * seq_k;
    for (std::int64_t j = 0; j < seq_k; ++j) dxr[j] = scale * yr[j] * (dyr[j] - d);
  });
}

void attention_forward_cpu(const float* q, const float* k, const float* v, float* o, float* lse,
                           const AttentionShape& shape, float scale, AttentionMask mask) {
  check(shape);
  const std::int64_t sq = shape.seq_q, skv = shape.seq_kv, d = shape.head_dim;
  const std::int64_t qblocks = (sq + kQueryBlock - 1) / kQueryBlock;
  detail::for_each_index(shape.batch_heads * qblocks, [&](std::int64_t task) {
    const std::int64_t bh = task / qblocks;
    const std::int64_t i0 = (task % qblocks) * kQueryBlock;
    const std::int64_t i1 = std::min(sq, i0 + kQueryBlock);
    const float* qb = q + bh * sq * d;
    const float* kb = k + bh * skv * d;
    const float* vb = v + bh * skv * d;
    // Running state per query row: max m, sum l of exp(s - m), accumulator acc = sum exp(s - m) v.
    std::vector<float> m(i1 - i0, kNegInf), l(i1 - i0, 0.f), acc((i1 - i0) * d, 0.f);
    std::vector<float> s(kKeyBlock);
    for (std::int64_t j0 = 0; j0 < skv; j0 += kKeyBlock) {
      const std::int64_t j1 = std::min(skv, j0 + kKeyBlock);
      if (mask.masked(i1 - 1, j0)) break;  // this tile and all later ones are masked for every row
      for (std::int64_t i = i0; i < i1; ++i) {
        const std::int64_t li = i - i0;
        float tile_max = kNegInf;
        for (std::int64_t j = j0; j < j1; ++j) {
          s[j - j0] = mask.masked(i, j) ? kNegInf : scale * dot(qb + i * d, kb + j * d, d);
          tile_max = std::max(tile_max, s[j - j0]);
        }
        if (tile_max == kNegInf) continue;  // nothing visible to this row in the tile
        const float m_new = std::max(m[li], tile_max);
        const float correction = std::exp(m[li] - m_new);  // exp(-inf) = 0 on the first tile
        float* a = acc.data() + li * d;
        l[li] *= correction;
        for (std::int64_t c = 0; c < d; ++c) a[c] *= correction;
        for (std::int64_t j = j0; j < j1; ++j) {
          if (s[j - j0] == kNegInf) continue;
          const float p = std::exp(s[j - j0] - m_new);
          l[li] += p;
          const float* vj = vb + j * d;
          for (std::int64_t c = 0; c < d; ++c) a[c] += p * vj[c];
        }
        m[li] = m_new;
      }
    }
    for (std::int64_t i = i0; i < i1; ++i) {
      const std::int64_t li = i - i0;
      float* oi = o + (bh * sq + i) * d;
      if (l[li] == 0.f) {
        std::fill(oi, oi + d, 0.f);
        lse[bh * sq + i] = kNegInf;
        continue;
      }
      const float inv = 1.f / l[li];
      for (std::int64_t c = 0; c < d; ++c) oi[c] = acc[li * d + c] * inv;
      lse[bh * sq + i] = m[li] + std::log(l[li]);
    }
  });
}

void attention_backward_cpu(const float* q, const float* k, const float* v, const float* o, const float* dout,
                            const float* lse, float* dq, float* dk, float* dv, const AttentionShape& shape, float scale,
                            AttentionMask mask) {
  check(shape);
  const std::int64_t sq = shape.seq_q, skv = shape.seq_kv, d = shape.head_dim;
  const std::int64_t bhs = shape.batch_heads;
  // D_i = dO_i . o_i
  std::vector<float> delta(bhs * sq);
  detail::for_each_index(bhs * sq, [&](std::int64_t r) { delta[r] = dot(dout + r * d, o + r * d, d); });
  // P_ij and dS_ij for query row r = bh * sq + i and key j of the same bh; false when P is 0.
  auto probs = [&](std::int64_t bh, std::int64_t i, std::int64_t j, float& p, float& ds) {
    const std::int64_t r = bh * sq + i;
    if (mask.masked(i, j) || lse[r] == kNegInf) return false;
    const float* qi = q + r * d;
    const float* kj = k + (bh * skv + j) * d;
    const float* vj = v + (bh * skv + j) * d;
    p = std::exp(scale * dot(qi, kj, d) - lse[r]);
    ds = p * (dot(dout + r * d, vj, d) - delta[r]);
    return true;
  };
  // dQ: one task per query row, serial over keys.
  detail::for_each_index(bhs * sq, [&](std::int64_t r) {
    const std::int64_t bh = r / sq, i = r % sq;
    float* dqi = dq + r * d;
    for (std::int64_t j = 0; j < skv; ++j) {
      float p, ds;
      if (!probs(bh, i, j, p, ds)) continue;
      const float* kj = k + (bh * skv + j) * d;
      for (std::int64_t c = 0; c < d; ++c) dqi[c] += scale * ds * kj[c];
    }
  });
  // dK, dV: one task per key row, serial over queries.
  detail::for_each_index(bhs * skv, [&](std::int64_t kr) {
    const std::int64_t bh = kr / skv, j = kr % skv;
    float* dkj = dk + kr * d;
    float* dvj = dv + kr * d;
    for (std::int64_t i = 0; i < sq; ++i) {
      float p, ds;
      if (!probs(bh, i, j, p, ds)) continue;
      const float* qi = q + (bh * sq + i) * d;
      const float* doi = dout + (bh * sq + i) * d;
      for (std::int64_t c = 0; c < d; ++c) {
        dkj[c] += scale * ds * qi[c];
        dvj[c] += p * doi[c];
      }
    }
  });
}

void attention_merge_cpu(const float* o1, const float* lse1, const float* o2, const float* lse2, float* o, float* lse,
                         std::int64_t rows, std::int64_t head_dim) {
  MESHSIM_ASSERT(rows >= 0 && head_dim > 0);
  detail::for_each_index(rows, [&](std::int64_t r) {
    const float a = lse1[r], b = lse2[r];
    const float m = std::max(a, b);
    float w1 = 0.f, w2 = 0.f, out = kNegInf;
    if (m != kNegInf) {
      const float e1 = std::exp(a - m), e2 = std::exp(b - m);  // one of them is 1
      out = m + std::log(e1 + e2);
      w1 = e1 / (e1 + e2);
      w2 = e2 / (e1 + e2);
    }
    for (std::int64_t c = 0; c < head_dim; ++c) {
      const std::int64_t x = r * head_dim + c;
      // A -inf side has weight 0; skip it so an uninitialized (NaN) partial never leaks in.
      o[x] = (w1 != 0.f ? w1 * o1[x] : 0.f) + (w2 != 0.f ? w2 * o2[x] : 0.f);
    }
    lse[r] = out;
  });
}

void split_heads_cpu(const float* src, std::int64_t ld, float* dst, std::int64_t batch, std::int64_t seq,
                     std::int64_t heads, std::int64_t head_dim) {
  MESHSIM_ASSERT(ld >= heads * head_dim);
  detail::for_each_index(batch * seq, [&](std::int64_t row) {
    const std::int64_t b = row / seq, t = row % seq;
    for (std::int64_t h = 0; h < heads; ++h)
      std::copy_n(src + row * ld + h * head_dim, head_dim, dst + ((b * heads + h) * seq + t) * head_dim);
  });
}

void merge_heads_cpu(const float* src, float* dst, std::int64_t ld, std::int64_t batch, std::int64_t seq,
                     std::int64_t heads, std::int64_t head_dim) {
  MESHSIM_ASSERT(ld >= heads * head_dim);
  detail::for_each_index(batch * seq, [&](std::int64_t row) {
    const std::int64_t b = row / seq, t = row % seq;
    for (std::int64_t h = 0; h < heads; ++h)
      std::copy_n(src + ((b * heads + h) * seq + t) * head_dim, head_dim, dst + row * ld + h * head_dim);
  });
}

}  // namespace meshsim::kernels
