// Vocabulary-parallel cross-entropy and embedding CUDA kernels against the CPU references
// (skipped without a GPU). Targets include ignored rows (-1) and targets in other shards.
//
// Tolerances (|gpu - cpu| <= atol + rtol |cpu|): local max exact; stats and loss 1e-5 +
// 1e-5 (the GPU sums exp in float, the reference in double); dlogits 1e-7 + 1e-5; embedding
// forward and backward exact (copies, and the backward adds rows in the reference's order).
// bf16 logits: the float reference on them widened; the max exact, stats float with the float
// tolerance, bf16 dlogits within the float tolerance plus one bf16 ulp (bf16_tolerance,
// cuda_test_util.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda_ops.h"
#include "kernels/cuda_test_util.h"
#include "kernels/kernels_test_util.h"
#include "kernels/vocab.h"

namespace meshsim::kernels {
namespace {

using namespace testing;  // kernels_test_util.h and cuda_test_util.h

#if defined(MESHSIM_HAVE_CUDA)
// Global targets in [0, vocab), every 5th row ignored (-1).
std::vector<std::int64_t> random_targets(std::int64_t rows, std::int64_t vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int64_t> u(0, vocab - 1);
  std::vector<std::int64_t> t(rows);
  for (std::int64_t r = 0; r < rows; ++r) t[r] = r % 5 == 4 ? -1 : u(rng);
  return t;
}
#endif

TEST(VocabCuda, CrossEntropyPiecesMatchCpu) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  struct Case {
    std::int64_t rows, v_local, v0, vocab;
  };
  for (const Case c :
       {Case{3, 5, 5, 15}, Case{64, 1000, 0, 4000}, Case{33, 12563, 12563, 50252}, Case{16, 50257, 0, 50257}}) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + " v_local " + std::to_string(c.v_local) + " v0 " +
                 std::to_string(c.v0));
    const std::size_t n = c.rows * c.v_local;
    auto logits = random_vector(n, 1, -10.f, 10.f);
    auto targets = random_targets(c.rows, c.vocab, 2);
    std::vector<float> local_max(c.rows), stats(2 * c.rows), loss(c.rows), dlogits(n);
    cross_entropy_local_max_cpu(logits.data(), local_max.data(), c.rows, c.v_local);
    // A single shard stands in for the group: the "global" max and stats are the local ones.
    cross_entropy_local_stats_cpu(logits.data(), local_max.data(), targets.data(), stats.data(), c.rows, c.v_local,
                                  c.v0);
    cross_entropy_loss_cpu(local_max.data(), stats.data(), targets.data(), loss.data(), c.rows);
    const float grad_scale = 1.f / static_cast<float>(c.rows);
    cross_entropy_backward_cpu(logits.data(), local_max.data(), stats.data(), targets.data(), grad_scale,
                               dlogits.data(), c.rows, c.v_local, c.v0);

    DeviceBuffer<float> d_logits(logits), d_max(c.rows), d_stats(2 * c.rows), d_loss(c.rows), d_dlogits(n);
    DeviceBuffer<std::int64_t> d_targets(targets);
    ASSERT_EQ(cuda_error(cross_entropy_local_max_cuda(d_logits.get(), d_max.get(), c.rows, c.v_local, nullptr)), "");
    ASSERT_EQ(synchronize(), "");
    EXPECT_EQ(d_max.download(), local_max);
    ASSERT_EQ(cuda_error(cross_entropy_local_stats_cuda(d_logits.get(), d_max.get(), d_targets.get(), d_stats.get(),
                                                        c.rows, c.v_local, c.v0, nullptr)),
              "");
    ASSERT_EQ(synchronize(), "");
    expect_near_all(d_stats.download(), stats, 1e-5, 1e-5, "stats");
    d_stats.upload(stats);  // identical inputs for the last two pieces
    ASSERT_EQ(
        cuda_error(cross_entropy_loss_cuda(d_max.get(), d_stats.get(), d_targets.get(), d_loss.get(), c.rows, nullptr)),
        "");
    ASSERT_EQ(cuda_error(cross_entropy_backward_cuda(d_logits.get(), d_max.get(), d_stats.get(), d_targets.get(),
                                                     grad_scale, d_dlogits.get(), c.rows, c.v_local, c.v0, nullptr)),
              "");
    ASSERT_EQ(synchronize(), "");
    expect_near_all(d_loss.download(), loss, 1e-5, 1e-5, "loss");
    expect_near_all(d_dlogits.download(), dlogits, 1e-7, 1e-5, "dlogits");
    // dlogits may alias logits.
    ASSERT_EQ(cuda_error(cross_entropy_backward_cuda(d_logits.get(), d_max.get(), d_stats.get(), d_targets.get(),
                                                     grad_scale, d_logits.get(), c.rows, c.v_local, c.v0, nullptr)),
              "");
    ASSERT_EQ(synchronize(), "");
    expect_near_all(d_logits.download(), dlogits, 1e-7, 1e-5, "dlogits in place");
  }
#endif
}

TEST(VocabCuda, Bf16CrossEntropyPiecesMatchCpu) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  struct Case {
    std::int64_t rows, v_local, v0, vocab;
  };
  // v_local % 4 == 0 (four bf16 per load) and not; 32064 = Llama-3's 128256 over 4 shards.
  for (const Case c :
       {Case{3, 5, 5, 15}, Case{64, 1000, 0, 4000}, Case{33, 12563, 12563, 50252}, Case{16, 32064, 32064, 128256}}) {
    SCOPED_TRACE("bf16 rows " + std::to_string(c.rows) + " v_local " + std::to_string(c.v_local) + " v0 " +
                 std::to_string(c.v0));
    const std::size_t n = c.rows * c.v_local;
    const auto logits = to_bf16_vector(random_vector(n, 1, -10.f, 10.f));
    const auto lf = to_float_vector(logits);
    auto targets = random_targets(c.rows, c.vocab, 2);
    std::vector<float> local_max(c.rows), stats(2 * c.rows), dlogits(n);
    cross_entropy_local_max_cpu(lf.data(), local_max.data(), c.rows, c.v_local);
    cross_entropy_local_stats_cpu(lf.data(), local_max.data(), targets.data(), stats.data(), c.rows, c.v_local, c.v0);
    const float grad_scale = 1.f / static_cast<float>(c.rows);
    cross_entropy_backward_cpu(lf.data(), local_max.data(), stats.data(), targets.data(), grad_scale, dlogits.data(),
                               c.rows, c.v_local, c.v0);

    DeviceBuffer<bf16> d_logits(logits), d_dlogits(n);
    DeviceBuffer<float> d_max(c.rows), d_stats(2 * c.rows);
    DeviceBuffer<std::int64_t> d_targets(targets);
    ASSERT_EQ(cuda_error(cross_entropy_local_max_cuda(d_logits.get(), d_max.get(), c.rows, c.v_local, nullptr)), "");
    ASSERT_EQ(synchronize(), "");
    EXPECT_EQ(d_max.download(), local_max);
    ASSERT_EQ(cuda_error(cross_entropy_local_stats_cuda(d_logits.get(), d_max.get(), d_targets.get(), d_stats.get(),
                                                        c.rows, c.v_local, c.v0, nullptr)),
              "");
    ASSERT_EQ(synchronize(), "");
    expect_near_all(d_stats.download(), stats, 1e-5, 1e-5, "stats");
    d_stats.upload(stats);
    ASSERT_EQ(cuda_error(cross_entropy_backward_cuda(d_logits.get(), d_max.get(), d_stats.get(), d_targets.get(),
                                                     grad_scale, d_dlogits.get(), c.rows, c.v_local, c.v0, nullptr)),
              "");
    ASSERT_EQ(synchronize(), "");
    expect_bf16_near_all(d_dlogits.download(), dlogits, 1e-7, 1e-5, "dlogits");
    ASSERT_EQ(cuda_error(cross_entropy_backward_cuda(d_logits.get(), d_max.get(), d_stats.get(), d_targets.get(),
                                                     grad_scale, d_logits.get(), c.rows, c.v_local, c.v0, nullptr)),
              "");
    ASSERT_EQ(synchronize(), "");
    expect_bf16_near_all(d_logits.download(), dlogits, 1e-7, 1e-5, "dlogits in place");
  }
#endif
}

TEST(VocabCuda, EmbeddingMatchesCpuExactly) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  const std::int64_t rows = 300, h = 96, v_local = 50, v0 = 50;
  auto ids = random_targets(rows, 150, 3);  // ids below, in and above the shard; repeats; -1
  auto table = random_vector(v_local * h, 4), dout = random_vector(rows * h, 5);
  auto dtable0 = random_vector(v_local * h, 6);
  std::vector<float> out(rows * h), dtable = dtable0;
  embedding_forward_cpu(ids.data(), table.data(), out.data(), rows, h, v_local, v0);
  embedding_backward_cpu(ids.data(), dout.data(), dtable.data(), rows, h, v_local, v0);
  DeviceBuffer<std::int64_t> d_ids(ids);
  DeviceBuffer<float> d_table(table), d_out(rows * h), d_dout(dout), d_dtable(dtable0);
  ASSERT_EQ(cuda_error(embedding_forward_cuda(d_ids.get(), d_table.get(), d_out.get(), rows, h, v_local, v0, nullptr)),
            "");
  ASSERT_EQ(
      cuda_error(embedding_backward_cuda(d_ids.get(), d_dout.get(), d_dtable.get(), rows, h, v_local, v0, nullptr)),
      "");
  ASSERT_EQ(synchronize(), "");
  EXPECT_EQ(d_out.download(), out);
  EXPECT_EQ(d_dtable.download(), dtable);
#endif
}

}  // namespace
}  // namespace meshsim::kernels
