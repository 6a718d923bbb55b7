#include "kernels/vocab.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/kernels_test_util.h"
#include "kernels/reduce.h"

namespace meshsim::kernels {
namespace {

using namespace testing;  // kernels_test_util.h

// Per-row loss and gradient of the mean loss over non-ignored rows, naively in double.
void naive_cross_entropy(const std::vector<float>& logits, const std::vector<std::int64_t>& targets, std::int64_t vocab,
                         std::vector<double>& loss, std::vector<double>& grad) {
  const auto rows = static_cast<std::int64_t>(targets.size());
  std::int64_t counted = 0;
  for (auto t : targets) counted += t >= 0;
  loss.assign(rows, 0.0);
  grad.assign(rows * vocab, 0.0);
  for (std::int64_t r = 0; r < rows; ++r) {
    if (targets[r] < 0) continue;
    double z = 0;
    for (std::int64_t j = 0; j < vocab; ++j) z += std::exp(double(logits[r * vocab + j]));
    loss[r] = std::log(z) - logits[r * vocab + targets[r]];
    for (std::int64_t j = 0; j < vocab; ++j)
      grad[r * vocab + j] = (std::exp(double(logits[r * vocab + j])) / z - (j == targets[r])) / counted;
  }
}

// The shard computation around its two all-reduces, for shards of the given widths.
void sharded_cross_entropy(const std::vector<float>& logits, const std::vector<std::int64_t>& targets,
                           const std::vector<std::int64_t>& widths, float grad_scale, std::vector<float>& loss,
                           std::vector<float>& grad) {
  const auto rows = static_cast<std::int64_t>(targets.size());
  std::int64_t vocab = 0;
  for (auto w : widths) vocab += w;
  std::vector<std::vector<float>> shards;
  std::vector<std::int64_t> starts;
  for (std::int64_t v0 = 0; auto w : widths) {
    std::vector<float> s(rows * w);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < w; ++j) s[r * w + j] = logits[r * vocab + v0 + j];
    shards.push_back(s);
    starts.push_back(v0);
    v0 += w;
  }
  std::vector<float> gmax(rows, -std::numeric_limits<float>::infinity()), part(2 * rows), stats(2 * rows, 0.f);
  for (std::size_t k = 0; k < shards.size(); ++k) {
    cross_entropy_local_max_cpu(shards[k].data(), part.data(), rows, widths[k]);
    reduce_max_cpu(gmax.data(), part.data(), rows);
  }
  for (std::size_t k = 0; k < shards.size(); ++k) {
    cross_entropy_local_stats_cpu(shards[k].data(), gmax.data(), targets.data(), part.data(), rows, widths[k],
                                  starts[k]);
    reduce_sum_cpu(stats.data(), part.data(), part.size());
  }
  loss.assign(rows, 0.f);
  cross_entropy_loss_cpu(gmax.data(), stats.data(), targets.data(), loss.data(), rows);
  grad.assign(rows * vocab, 0.f);
  for (std::size_t k = 0; k < shards.size(); ++k) {
    std::vector<float> g(shards[k].size());
    cross_entropy_backward_cpu(shards[k].data(), gmax.data(), stats.data(), targets.data(), grad_scale, g.data(), rows,
                               widths[k], starts[k]);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < widths[k]; ++j) grad[r * vocab + starts[k] + j] = g[r * widths[k] + j];
  }
}

TEST(CrossEntropy, ShardsCombineToTheUnshardedLossAndGradient) {
  const std::int64_t rows = 6, vocab = 48;
  const auto logits = random_vector(rows * vocab, 1, -8.f, 12.f);
  const std::vector<std::int64_t> targets = {0, 47, 13, -1, 24, 12};  // shard edges, one ignored row
  std::vector<double> want_loss, want_grad;
  naive_cross_entropy(logits, targets, vocab, want_loss, want_grad);
  for (const auto& widths : {std::vector<std::int64_t>{48}, std::vector<std::int64_t>{12, 12, 12, 12},
                             std::vector<std::int64_t>{5, 20, 23}}) {
    std::vector<float> loss, grad;
    sharded_cross_entropy(logits, targets, widths, 1.f / 5, loss, grad);
    expect_near_all(loss, want_loss, 1e-5, 1e-5, "loss");
    expect_near_all(grad, want_grad, 1e-6, 1e-4, "grad");
  }
}

TEST(CrossEntropy, GradientMatchesFiniteDifferencesOfTheMeanLoss) {
  const std::int64_t rows = 3, vocab = 10;
  auto logits = random_vector(rows * vocab, 2, -2.f, 2.f);
  const std::vector<std::int64_t> targets = {3, 9, 0};
  std::vector<float> loss, grad;
  auto mean_loss = [&] {
    std::vector<float> g;
    sharded_cross_entropy(logits, targets, {4, 6}, 1.f / rows, loss, g);
    return (double(loss[0]) + loss[1] + loss[2]) / rows;
  };
  sharded_cross_entropy(logits, targets, {4, 6}, 1.f / rows, loss, grad);
  expect_near_all(grad, numeric_grad(mean_loss, logits, 1e-2f), 1e-4, 1e-2, "dlogits");
}

TEST(Embedding, ShardsSumToTheLookupAndBackwardAccumulatesRepeatedIds) {
  const std::int64_t rows = 5, h = 70, vocab = 9;  // h > one column block
  const auto table = random_vector(vocab * h, 3), dout = random_vector(rows * h, 4);
  const std::vector<std::int64_t> ids = {3, 8, 3, 0, 5};
  std::vector<float> sum(rows * h, 0.f), dtable(vocab * h, 0.5f);
  for (const std::int64_t v0 : {0, 4, 7}) {  // shards [0,4) [4,7) [7,9)
    const std::int64_t vl = v0 == 0 ? 4 : v0 == 4 ? 3 : 2;
    std::vector<float> out(rows * h);
    embedding_forward_cpu(ids.data(), table.data() + v0 * h, out.data(), rows, h, vl, v0);
    reduce_sum_cpu(sum.data(), out.data(), out.size());
    embedding_backward_cpu(ids.data(), dout.data(), dtable.data() + v0 * h, rows, h, vl, v0);
  }
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < h; ++c) ASSERT_EQ(sum[r * h + c], table[ids[r] * h + c]);
  for (std::int64_t t = 0; t < vocab; ++t)
    for (std::int64_t c = 0; c < h; ++c) {
      double want = 0.5;
      for (std::int64_t r = 0; r < rows; ++r)
        if (ids[r] == t) want += dout[r * h + c];
      ASSERT_NEAR(dtable[t * h + c], want, 1e-6) << t << "," << c;
    }
}

}  // namespace
}  // namespace meshsim::kernels
