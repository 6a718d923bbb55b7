#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/kernels.h"  // the umbrella header compiles on its own
#include "kernels/kernels_test_util.h"

namespace meshsim::kernels {
namespace {

using namespace testing;  // kernels_test_util.h

constexpr double kInf = std::numeric_limits<double>::infinity();

// Unblocked attention in double: scores, mask, softmax, weighted sum.
void naive_attention(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                     const AttentionShape& s, double scale, AttentionMask mask, std::vector<double>& o,
                     std::vector<double>& lse) {
  o.assign(s.batch_heads * s.seq_q * s.head_dim, 0.0);
  lse.assign(s.batch_heads * s.seq_q, -kInf);
  for (std::int64_t b = 0; b < s.batch_heads; ++b)
    for (std::int64_t i = 0; i < s.seq_q; ++i) {
      std::vector<double> sc(s.seq_kv, -kInf);
      double m = -kInf;
      for (std::int64_t j = 0; j < s.seq_kv; ++j) {
        if (mask.causal && mask.k0 + j > mask.q0 + i) continue;
        double d = 0;
        for (std::int64_t c = 0; c < s.head_dim; ++c)
          d += double(q[(b * s.seq_q + i) * s.head_dim + c]) * k[(b * s.seq_kv + j) * s.head_dim + c];
        sc[j] = scale * d;
        m = std::max(m, sc[j]);
      }
      if (m == -kInf) continue;
      double z = 0;
      for (std::int64_t j = 0; j < s.seq_kv; ++j) z += std::exp(sc[j] - m);
      lse[b * s.seq_q + i] = m + std::log(z);
      for (std::int64_t j = 0; j < s.seq_kv; ++j)
        for (std::int64_t c = 0; c < s.head_dim; ++c)
          o[(b * s.seq_q + i) * s.head_dim + c] += std::exp(sc[j] - m) / z * v[(b * s.seq_kv + j) * s.head_dim + c];
    }
}

void expect_lse(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], -std::numeric_limits<float>::infinity()) << i;
    } else {
      EXPECT_NEAR(got[i], want[i], 1e-5 + 1e-5 * std::abs(want[i])) << i;
    }
  }
}

TEST(Attention, BlockedForwardMatchesNaiveWithGlobalCausalOffsets) {
  // 37 queries and 150 keys cross the 16-row and 64-key tiles. k0 = 40 > q0 = 30 leaves
  // query rows 0..9 with no visible key (fully masked).
  const AttentionShape s{3, 37, 150, 8};
  const auto q = random_vector(s.batch_heads * s.seq_q * s.head_dim, 1, -2.f, 2.f);
  const auto k = random_vector(s.batch_heads * s.seq_kv * s.head_dim, 2, -2.f, 2.f);
  const auto v = random_vector(s.batch_heads * s.seq_kv * s.head_dim, 3);
  for (const AttentionMask mask :
       {AttentionMask{}, AttentionMask{true, 0, 0}, AttentionMask{true, 30, 40}, AttentionMask{true, 140, 10}}) {
    std::vector<float> o(q.size(), 7.f), lse(s.batch_heads * s.seq_q);
    attention_forward_cpu(q.data(), k.data(), v.data(), o.data(), lse.data(), s, 0.35f, mask);
    std::vector<double> want_o, want_lse;
    naive_attention(q, k, v, s, 0.35f, mask, want_o, want_lse);
    expect_near_all(o, want_o, 1e-5, 1e-4, "o");
    expect_lse(lse, want_lse);
  }
}

// Small sizes so that central differences over every input element stay fast.
TEST(Attention, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const AttentionShape s{2, 9, 13, 4};
  auto q = random_vector(s.batch_heads * s.seq_q * s.head_dim, 4);
  auto k = random_vector(s.batch_heads * s.seq_kv * s.head_dim, 5);
  auto v = random_vector(s.batch_heads * s.seq_kv * s.head_dim, 6);
  const auto w = random_vector(q.size(), 7);                                       // dO
  for (const AttentionMask mask : {AttentionMask{}, AttentionMask{true, 2, 4}}) {  // row 0, 1 fully masked
    std::vector<float> o(q.size()), lse(s.batch_heads * s.seq_q);
    auto loss = [&] {
      attention_forward_cpu(q.data(), k.data(), v.data(), o.data(), lse.data(), s, 0.5f, mask);
      return weighted_sum(o, w);
    };
    loss();
    std::vector<float> dq(q.size(), 1.f), dk(k.size(), 1.f), dv(v.size(), 1.f);  // accumulated onto
    attention_backward_cpu(q.data(), k.data(), v.data(), o.data(), w.data(), lse.data(), dq.data(), dk.data(),
                           dv.data(), s, 0.5f, mask);
    for (auto* g : {&dq, &dk, &dv})
      for (auto& x : *g) x -= 1.f;
    expect_near_all(dq, numeric_grad(loss, q, 1e-2f), 1e-3, 1e-2, "dq");
    expect_near_all(dk, numeric_grad(loss, k, 1e-2f), 1e-3, 1e-2, "dk");
    expect_near_all(dv, numeric_grad(loss, v, 1e-2f), 1e-3, 1e-2, "dv");
    for (float x : dq) ASSERT_FALSE(std::isnan(x));
  }
}

// Ring attention: the queries see the keys in two chunks [0, 40) and [40, 90). Merging the
// two partial results equals attention over all keys; the backward per chunk, given the
// merged O and LSE, sums to the whole backward.
TEST(Attention, MergeOfTwoKeyChunksEqualsWholeForwardAndBackward) {
  const std::int64_t bh = 2, sq = 30, d = 8, split = 40, skv = 90;
  const auto q = random_vector(bh * sq * d, 8, -2.f, 2.f);
  const auto k = random_vector(bh * skv * d, 9, -2.f, 2.f);
  const auto v = random_vector(bh * skv * d, 10);
  const auto dout = random_vector(bh * sq * d, 11);
  auto chunk = [&](const std::vector<float>& x, std::int64_t j0, std::int64_t j1) {
    std::vector<float> c;
    for (std::int64_t b = 0; b < bh; ++b)
      c.insert(c.end(), x.begin() + (b * skv + j0) * d, x.begin() + (b * skv + j1) * d);
    return c;
  };
  // Queries at global positions 20..49: with causal masking some rows see only chunk 1
  // (chunk 2 fully masked for them), and chunk 2 is partly masked.
  for (const bool causal : {false, true}) {
    const AttentionMask whole_mask{causal, 20, 0};
    std::vector<float> o(q.size()), lse(bh * sq);
    attention_forward_cpu(q.data(), k.data(), v.data(), o.data(), lse.data(), {bh, sq, skv, d}, 0.3f, whole_mask);
    std::vector<float> dq(q.size(), 0.f), dk(k.size(), 0.f), dv(v.size(), 0.f);
    attention_backward_cpu(q.data(), k.data(), v.data(), o.data(), dout.data(), lse.data(), dq.data(), dk.data(),
                           dv.data(), {bh, sq, skv, d}, 0.3f, whole_mask);

    const std::int64_t bounds[3] = {0, split, skv};
    std::vector<float> acc_o, acc_lse;
    for (int c = 0; c < 2; ++c) {
      const auto kc = chunk(k, bounds[c], bounds[c + 1]), vc = chunk(v, bounds[c], bounds[c + 1]);
      std::vector<float> oc(q.size()), lc(bh * sq);
      attention_forward_cpu(q.data(), kc.data(), vc.data(), oc.data(), lc.data(),
                            {bh, sq, bounds[c + 1] - bounds[c], d}, 0.3f, {causal, 20, bounds[c]});
      if (c == 0) {
        acc_o = oc;
        acc_lse = lc;
      } else {
        attention_merge_cpu(acc_o.data(), acc_lse.data(), oc.data(), lc.data(), acc_o.data(), acc_lse.data(), bh * sq,
                            d);
      }
    }
    expect_near_all(acc_o, o, 1e-5, 1e-4, "merged o");
    expect_near_all(acc_lse, lse, 1e-5, 1e-5, "merged lse");

    std::vector<float> ring_dq(q.size(), 0.f);
    for (int c = 0; c < 2; ++c) {
      const std::int64_t len = bounds[c + 1] - bounds[c];
      const auto kc = chunk(k, bounds[c], bounds[c + 1]), vc = chunk(v, bounds[c], bounds[c + 1]);
      std::vector<float> dkc(kc.size(), 0.f), dvc(vc.size(), 0.f);
      attention_backward_cpu(q.data(), kc.data(), vc.data(), acc_o.data(), dout.data(), acc_lse.data(), ring_dq.data(),
                             dkc.data(), dvc.data(), {bh, sq, len, d}, 0.3f, {causal, 20, bounds[c]});
      expect_near_all(dkc, chunk(dk, bounds[c], bounds[c + 1]), 1e-5, 1e-4, "dk chunk");
      expect_near_all(dvc, chunk(dv, bounds[c], bounds[c + 1]), 1e-5, 1e-4, "dv chunk");
    }
    expect_near_all(ring_dq, dq, 1e-5, 1e-4, "ring dq");
  }
}

TEST(Attention, MergeHandlesFullyMaskedSides) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // Row 0: side 2 empty. Row 1: both empty. Row 2: side 1 empty (its O is garbage, ignored).
  const std::vector<float> o1 = {1, 2, 9, 9, nan, nan}, l1 = {0.5f, -inf, -inf};
  const std::vector<float> o2 = {9, 9, 9, 9, 3, 4}, l2 = {-inf, -inf, 1.5f};
  std::vector<float> o(6), l(3);
  attention_merge_cpu(o1.data(), l1.data(), o2.data(), l2.data(), o.data(), l.data(), 3, 2);
  EXPECT_EQ(o, (std::vector<float>{1, 2, 0, 0, 3, 4}));
  EXPECT_EQ(l, (std::vector<float>{0.5f, -inf, 1.5f}));
}

TEST(Softmax, ForwardMatchesNaiveAndBackwardMatchesFiniteDifferences) {
  const std::int64_t batches = 2, sq = 5, sk = 7;
  auto x = random_vector(batches * sq * sk, 12, -3.f, 3.f);
  const auto w = random_vector(x.size(), 13);
  const AttentionMask mask{true, 1, 3};  // query row 0 (position 1) sees no key (positions >= 3)
  std::vector<float> y(x.size());
  auto loss = [&] {
    softmax_forward_cpu(x.data(), y.data(), batches, sq, sk, 0.7f, mask);
    return weighted_sum(y, w);
  };
  loss();
  for (std::int64_t r = 0; r < batches * sq; ++r) {
    const std::int64_t i = r % sq;
    double z = 0;
    for (std::int64_t j = 0; j < sk; ++j)
      if (3 + j <= 1 + i) z += std::exp(0.7 * x[r * sk + j]);
    for (std::int64_t j = 0; j < sk; ++j) {
      const double want = (3 + j <= 1 + i) ? std::exp(0.7 * x[r * sk + j]) / z : 0.0;
      EXPECT_NEAR(y[r * sk + j], want, 1e-6) << r << "," << j;
    }
  }
  std::vector<float> dx(x.size());
  softmax_backward_cpu(w.data(), y.data(), dx.data(), batches, sq, sk, 0.7f);
  expect_near_all(dx, numeric_grad(loss, x, 1e-3f), 1e-3, 1e-2, "dx");
}

TEST(Heads, SplitPicksColumnsOfAFusedProjectionAndMergeInvertsIt) {
  const std::int64_t batch = 2, seq = 3, heads = 4, d = 5, hidden = heads * d, ld = 3 * hidden;
  const auto qkv = random_vector(batch * seq * ld, 14);
  std::vector<float> kh(batch * heads * seq * d);
  split_heads_cpu(qkv.data() + hidden, ld, kh.data(), batch, seq, heads, d);  // the K third
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < seq; ++t)
      for (std::int64_t h = 0; h < heads; ++h)
        for (std::int64_t c = 0; c < d; ++c)
          ASSERT_EQ(kh[((b * heads + h) * seq + t) * d + c], qkv[(b * seq + t) * ld + hidden + h * d + c]);
  std::vector<float> back(qkv.size(), 0.f);
  merge_heads_cpu(kh.data(), back.data() + hidden, ld, batch, seq, heads, d);
  for (std::int64_t r = 0; r < batch * seq; ++r)
    for (std::int64_t c = 0; c < ld; ++c)
      ASSERT_EQ(back[r * ld + c], (c >= hidden && c < 2 * hidden) ? qkv[r * ld + c] : 0.f);
}

}  // namespace
}  // namespace meshsim::kernels
