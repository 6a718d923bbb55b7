// Softmax, blocked attention (forward with LSE, backward), the LSE merge and the head
// permutations: CUDA kernels against the CPU references (skipped without a GPU).
//
// Tolerances (|gpu - cpu| <= atol + rtol |cpu|): softmax 1e-6 + 1e-4; attention o and lse
// 1e-5 + 1e-4; dQ/dK/dV 1e-4 + 1e-3 (sums over up to a few hundred keys in another order);
// merge 1e-6 + 1e-5; the head permutations are copies and must be exact. Fully masked rows
// must give exactly o = 0, lse = -inf and zero gradients on both sides. bf16 overloads: bf16
// inputs, the float reference on them widened; bf16 outputs (y, dx, o, dq, dk, dv, merged o)
// within the float tolerance plus one bf16 ulp (bf16_tolerance, cuda_test_util.h), lse float
// with the float tolerance. A backward gets the bf16-rounded forward outputs on both sides.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cuda_ops.h"
#include "kernels/cuda_test_util.h"
#include "kernels/kernels_test_util.h"

namespace meshsim::kernels {
namespace {

using namespace testing;  // kernels_test_util.h and cuda_test_util.h

#if defined(MESHSIM_HAVE_CUDA)
constexpr float kInf = std::numeric_limits<float>::infinity();

// -inf must match -inf exactly; every other entry within atol + rtol |want|.
void expect_lse_near(const std::vector<float>& got, const std::vector<float>& want, double atol, double rtol) {
  ASSERT_EQ(got.size(), want.size());
  std::vector<float> g = got, w = want;
  for (std::size_t i = 0; i < g.size(); ++i)
    if (w[i] == -kInf) {
      EXPECT_EQ(g[i], -kInf) << "lse[" << i << "]";
      g[i] = w[i] = 0.f;
    }
  expect_near_all(g, w, atol, rtol, "lse");
}

std::string mask_text(const AttentionMask& m) {
  return m.causal ? "causal q0 " + std::to_string(m.q0) + " k0 " + std::to_string(m.k0) : "full";
}
#endif

TEST(AttentionCuda, SoftmaxMatchesCpu) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  struct Case {
    std::int64_t batches, sq, sk;
    AttentionMask mask;
  };
  // Includes rows with every key masked (k0 > q0 + i), rows past the register path (40000),
  // and seq_k % 4 != 0 (scalar loads).
  for (const Case c : {Case{2, 3, 5, {}}, Case{2, 16, 128, {true, 0, 0}}, Case{2, 16, 130, {true, 0, 8}},
                       Case{1, 64, 4096, {}}, Case{1, 32, 2048, {true, 2016, 0}}, Case{1, 3, 40000, {true, 100, 0}}}) {
    SCOPED_TRACE(std::to_string(c.batches) + "x" + std::to_string(c.sq) + "x" + std::to_string(c.sk) + " " +
                 mask_text(c.mask));
    const std::size_t n = c.batches * c.sq * c.sk;
    auto x = random_vector(n, 1, -8.f, 8.f), dy = random_vector(n, 2);
    std::vector<float> y(n), dx(n);
    const float scale = 0.37f;
    softmax_forward_cpu(x.data(), y.data(), c.batches, c.sq, c.sk, scale, c.mask);
    softmax_backward_cpu(dy.data(), y.data(), dx.data(), c.batches, c.sq, c.sk, scale);
    DeviceBuffer<float> d_x(x), d_y(n), d_dy(dy), d_dx(n), d_ycpu(y);
    ASSERT_EQ(cuda_error(softmax_forward_cuda(d_x.get(), d_y.get(), c.batches, c.sq, c.sk, scale, c.mask, nullptr)),
              "");
    // The backward reads the CPU's y so both sides see identical inputs.
    ASSERT_EQ(
        cuda_error(softmax_backward_cuda(d_dy.get(), d_ycpu.get(), d_dx.get(), c.batches, c.sq, c.sk, scale, nullptr)),
        "");
    ASSERT_EQ(synchronize(), "");
    expect_near_all(d_y.download(), y, 1e-6, 1e-4, "y");
    expect_near_all(d_dx.download(), dx, 1e-6, 1e-4, "dx");
  }
#endif
}

TEST(AttentionCuda, ForwardAndBackwardMatchCpu) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  struct Case {
    AttentionShape shape;
    AttentionMask mask;
  };
  // Head dims across every register width (C = 1, 2, 4, 8; 100 is not a multiple of 32, 256
  // needs > 48 KiB of shared memory), lengths that are not tile multiples, a ring step whose
  // early queries see no key of the chunk (all -inf rows), and a moderately large case.
  const Case cases[] = {
      {{2, 5, 7, 16}, {}},
      {{3, 37, 45, 64}, {true, 0, 0}},
      {{2, 40, 33, 100}, {true, 0, 20}},
      {{1, 50, 70, 128}, {true, 64, 0}},
      {{2, 33, 65, 256}, {}},
      {{4, 256, 256, 64}, {true, 256, 0}},
  };
  for (const Case& c : cases) {
    const AttentionShape& s = c.shape;
    SCOPED_TRACE("BH " + std::to_string(s.batch_heads) + " Sq " + std::to_string(s.seq_q) + " Skv " +
                 std::to_string(s.seq_kv) + " D " + std::to_string(s.head_dim) + " " + mask_text(c.mask));
    const std::size_t nq = s.batch_heads * s.seq_q * s.head_dim, nk = s.batch_heads * s.seq_kv * s.head_dim;
    const std::size_t rows = s.batch_heads * s.seq_q;
    const float scale = 1.f / std::sqrt(static_cast<float>(s.head_dim));
    auto q = random_vector(nq, 1), k = random_vector(nk, 2), v = random_vector(nk, 3), dout = random_vector(nq, 4);
    auto dq0 = random_vector(nq, 5), dk0 = random_vector(nk, 6), dv0 = random_vector(nk, 7);  // += onto these
    std::vector<float> o(nq), lse(rows), dq = dq0, dk = dk0, dv = dv0;
    attention_forward_cpu(q.data(), k.data(), v.data(), o.data(), lse.data(), s, scale, c.mask);
    attention_backward_cpu(q.data(), k.data(), v.data(), o.data(), dout.data(), lse.data(), dq.data(), dk.data(),
                           dv.data(), s, scale, c.mask);

    DeviceBuffer<float> d_q(q), d_k(k), d_v(v), d_o(nq), d_lse(rows), d_dout(dout), d_dq(dq0), d_dk(dk0), d_dv(dv0);
    ASSERT_EQ(cuda_error(attention_forward_cuda(d_q.get(), d_k.get(), d_v.get(), d_o.get(), d_lse.get(), s, scale,
                                                c.mask, nullptr)),
              "");
    ASSERT_EQ(synchronize(), "");
    expect_near_all(d_o.download(), o, 1e-5, 1e-4, "o");
    expect_lse_near(d_lse.download(), lse, 1e-5, 1e-4);
    // The backward gets the CPU's o and lse so both sides see identical inputs.
    d_o.upload(o);
    d_lse.upload(lse);
    ASSERT_EQ(cuda_error(attention_backward_cuda(d_q.get(), d_k.get(), d_v.get(), d_o.get(), d_dout.get(), d_lse.get(),
                                                 d_dq.get(), d_dk.get(), d_dv.get(), s, scale, c.mask, nullptr)),
              "");
    ASSERT_EQ(synchronize(), "");
    expect_near_all(d_dq.download(), dq, 1e-4, 1e-3, "dq");
    expect_near_all(d_dk.download(), dk, 1e-4, 1e-3, "dk");
    expect_near_all(d_dv.download(), dv, 1e-4, 1e-3, "dv");
  }
#endif
}

TEST(AttentionCuda, MergeMatchesCpuIncludingInfinitiesAndAliasing) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  for (const std::int64_t d : {std::int64_t{16}, std::int64_t{128}, std::int64_t{100}}) {
    SCOPED_TRACE("D " + std::to_string(d));
    const std::int64_t rows = 1000;
    auto o1 = random_vector(rows * d, 1), o2 = random_vector(rows * d, 2);
    auto lse1 = random_vector(rows, 3, -5.f, 5.f), lse2 = random_vector(rows, 4, -5.f, 5.f);
    for (std::int64_t r = 0; r < rows; r += 7) lse1[r] = -kInf;
    for (std::int64_t r = 0; r < rows; r += 5) lse2[r] = -kInf;  // r % 35 == 0: both -inf
    std::vector<float> o(rows * d), lse(rows);
    attention_merge_cpu(o1.data(), lse1.data(), o2.data(), lse2.data(), o.data(), lse.data(), rows, d);
    // Merge into the first operand in place (o aliases o1, lse aliases lse1).
    DeviceBuffer<float> d_o1(o1), d_lse1(lse1), d_o2(o2), d_lse2(lse2);
    ASSERT_EQ(cuda_error(attention_merge_cuda(d_o1.get(), d_lse1.get(), d_o2.get(), d_lse2.get(), d_o1.get(),
                                              d_lse1.get(), rows, d, nullptr)),
              "");
    ASSERT_EQ(synchronize(), "");
    expect_near_all(d_o1.download(), o, 1e-6, 1e-5, "o");
    expect_lse_near(d_lse1.download(), lse, 1e-6, 1e-5);
  }
#endif
}

TEST(AttentionCuda, HeadPermutationsAreExactCopies) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  const std::int64_t batch = 2, seq = 9, heads = 3, d = 8, ld = 3 * heads * d;  // Q of a fused QKV
  auto qkv = random_vector(batch * seq * ld, 1);
  std::vector<float> split(batch * heads * seq * d), merged(batch * seq * ld, 0.f);
  split_heads_cpu(qkv.data() + heads * d, ld, split.data(), batch, seq, heads, d);  // the K third
  merge_heads_cpu(split.data(), merged.data(), ld, batch, seq, heads, d);
  DeviceBuffer<float> d_qkv(qkv), d_split(split.size()), d_merged(std::vector<float>(merged.size(), 0.f));
  ASSERT_EQ(cuda_error(split_heads_cuda(d_qkv.get() + heads * d, ld, d_split.get(), batch, seq, heads, d, nullptr)),
            "");
  ASSERT_EQ(cuda_error(merge_heads_cuda(d_split.get(), d_merged.get(), ld, batch, seq, heads, d, nullptr)), "");
  ASSERT_EQ(synchronize(), "");
  EXPECT_EQ(d_split.download(), split);
  EXPECT_EQ(d_merged.download(), merged);
#endif
}

TEST(AttentionCuda, Bf16SoftmaxMatchesCpu) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  struct Case {
    std::int64_t batches, sq, sk;
    AttentionMask mask;
  };
  for (const Case c : {Case{2, 3, 5, {}}, Case{2, 16, 128, {true, 0, 0}}, Case{2, 16, 130, {true, 0, 8}},
                       Case{1, 64, 4096, {}}, Case{1, 32, 2048, {true, 2016, 0}}, Case{1, 3, 40000, {true, 100, 0}}}) {
    SCOPED_TRACE("bf16 " + std::to_string(c.batches) + "x" + std::to_string(c.sq) + "x" + std::to_string(c.sk) + " " +
                 mask_text(c.mask));
    const std::size_t n = c.batches * c.sq * c.sk;
    const auto x = to_bf16_vector(random_vector(n, 1, -8.f, 8.f)), dy = to_bf16_vector(random_vector(n, 2));
    const auto xf = to_float_vector(x), dyf = to_float_vector(dy);
    const float scale = 0.37f;
    std::vector<float> y(n), dx(n);
    softmax_forward_cpu(xf.data(), y.data(), c.batches, c.sq, c.sk, scale, c.mask);
    // The backward's y: the forward's output as bf16 holds it, on both sides.
    const auto yb = to_bf16_vector(y);
    const auto ybf = to_float_vector(yb);
    softmax_backward_cpu(dyf.data(), ybf.data(), dx.data(), c.batches, c.sq, c.sk, scale);
    DeviceBuffer<bf16> d_x(x), d_y(n), d_dy(dy), d_dx(n), d_yb(yb);
    ASSERT_EQ(cuda_error(softmax_forward_cuda(d_x.get(), d_y.get(), c.batches, c.sq, c.sk, scale, c.mask, nullptr)),
              "");
    ASSERT_EQ(
        cuda_error(softmax_backward_cuda(d_dy.get(), d_yb.get(), d_dx.get(), c.batches, c.sq, c.sk, scale, nullptr)),
        "");
    ASSERT_EQ(synchronize(), "");
    expect_bf16_near_all(d_y.download(), y, 1e-6, 1e-4, "y");
    expect_bf16_near_all(d_dx.download(), dx, 1e-6, 1e-4, "dx");
  }
#endif
}

TEST(AttentionCuda, Bf16ForwardAndBackwardMatchCpu) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  struct Case {
    AttentionShape shape;
    AttentionMask mask;
  };
  // Head dims 64 and 128 (the production ones) causal and not, lengths that are not tile
  // multiples, fully masked rows (k0 > q0), plus 16, 100 and 256 for the other register widths.
  const Case cases[] = {
      {{2, 5, 7, 16}, {}},
      {{3, 37, 45, 64}, {}},
      {{3, 37, 45, 64}, {true, 0, 0}},
      {{2, 40, 33, 100}, {true, 0, 20}},
      {{2, 50, 70, 128}, {}},
      {{1, 50, 70, 128}, {true, 64, 0}},
      {{2, 33, 65, 256}, {}},
      {{4, 200, 200, 64}, {true, 200, 0}},
  };
  for (const Case& c : cases) {
    const AttentionShape& s = c.shape;
    SCOPED_TRACE("bf16 BH " + std::to_string(s.batch_heads) + " Sq " + std::to_string(s.seq_q) + " Skv " +
                 std::to_string(s.seq_kv) + " D " + std::to_string(s.head_dim) + " " + mask_text(c.mask));
    const std::size_t nq = s.batch_heads * s.seq_q * s.head_dim, nk = s.batch_heads * s.seq_kv * s.head_dim;
    const std::size_t rows = s.batch_heads * s.seq_q;
    const float scale = 1.f / std::sqrt(static_cast<float>(s.head_dim));
    const auto q = to_bf16_vector(random_vector(nq, 1)), k = to_bf16_vector(random_vector(nk, 2)),
               v = to_bf16_vector(random_vector(nk, 3)), dout = to_bf16_vector(random_vector(nq, 4));
    const auto dq0 = to_bf16_vector(random_vector(nq, 5)), dk0 = to_bf16_vector(random_vector(nk, 6)),
               dv0 = to_bf16_vector(random_vector(nk, 7));  // += onto these
    const auto qf = to_float_vector(q), kf = to_float_vector(k), vf = to_float_vector(v), doutf = to_float_vector(dout);
    std::vector<float> o(nq), lse(rows);
    attention_forward_cpu(qf.data(), kf.data(), vf.data(), o.data(), lse.data(), s, scale, c.mask);

    DeviceBuffer<bf16> d_q(q), d_k(k), d_v(v), d_o(nq), d_dout(dout), d_dq(dq0), d_dk(dk0), d_dv(dv0);
    DeviceBuffer<float> d_lse(rows);
    ASSERT_EQ(cuda_error(attention_forward_cuda(d_q.get(), d_k.get(), d_v.get(), d_o.get(), d_lse.get(), s, scale,
                                                c.mask, nullptr)),
              "");
    ASSERT_EQ(synchronize(), "");
    expect_bf16_near_all(d_o.download(), o, 1e-5, 1e-4, "o");
    expect_lse_near(d_lse.download(), lse, 1e-5, 1e-4);

    // The backward: o as bf16 holds it and the CPU's lse, on both sides.
    const auto ob = to_bf16_vector(o);
    const auto obf = to_float_vector(ob);
    std::vector<float> dq = to_float_vector(dq0), dk = to_float_vector(dk0), dv = to_float_vector(dv0);
    attention_backward_cpu(qf.data(), kf.data(), vf.data(), obf.data(), doutf.data(), lse.data(), dq.data(), dk.data(),
                           dv.data(), s, scale, c.mask);
    d_o.upload(ob);
    d_lse.upload(lse);
    ASSERT_EQ(cuda_error(attention_backward_cuda(d_q.get(), d_k.get(), d_v.get(), d_o.get(), d_dout.get(), d_lse.get(),
                                                 d_dq.get(), d_dk.get(), d_dv.get(), s, scale, c.mask, nullptr)),
              "");
    ASSERT_EQ(synchronize(), "");
    expect_bf16_near_all(d_dq.download(), dq, 1e-4, 1e-3, "dq");
    expect_bf16_near_all(d_dk.download(), dk, 1e-4, 1e-3, "dk");
    expect_bf16_near_all(d_dv.download(), dv, 1e-4, 1e-3, "dv");
  }
#endif
}

TEST(AttentionCuda, Bf16MergeMatchesCpuIncludingInfinitiesAndAliasing) {
  if (const std::string why = gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
#if defined(MESHSIM_HAVE_CUDA)
  for (const std::int64_t d : {std::int64_t{16}, std::int64_t{128}, std::int64_t{100}}) {
    SCOPED_TRACE("bf16 D " + std::to_string(d));
    const std::int64_t rows = 1000;
    const auto o1 = to_bf16_vector(random_vector(rows * d, 1)), o2 = to_bf16_vector(random_vector(rows * d, 2));
    const auto o1f = to_float_vector(o1), o2f = to_float_vector(o2);
    auto lse1 = random_vector(rows, 3, -5.f, 5.f), lse2 = random_vector(rows, 4, -5.f, 5.f);
    for (std::int64_t r = 0; r < rows; r += 7) lse1[r] = -kInf;
    for (std::int64_t r = 0; r < rows; r += 5) lse2[r] = -kInf;
    std::vector<float> o(rows * d), lse(rows);
    attention_merge_cpu(o1f.data(), lse1.data(), o2f.data(), lse2.data(), o.data(), lse.data(), rows, d);
    DeviceBuffer<bf16> d_o1(o1), d_o2(o2);
    DeviceBuffer<float> d_lse1(lse1), d_lse2(lse2);
    ASSERT_EQ(cuda_error(attention_merge_cuda(d_o1.get(), d_lse1.get(), d_o2.get(), d_lse2.get(), d_o1.get(),
                                              d_lse1.get(), rows, d, nullptr)),
              "");
    ASSERT_EQ(synchronize(), "");
    expect_bf16_near_all(d_o1.download(), o, 1e-6, 1e-5, "o");
    expect_lse_near(d_lse1.download(), lse, 1e-6, 1e-5);
  }
#endif
}

}  // namespace
}  // namespace meshsim::kernels
