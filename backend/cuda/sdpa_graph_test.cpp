// The attention graph (sdpa_graph.h) computes attention: run on the CPU interpreter, its
// outputs match our attention reference (kernels/attention.h) within a bound derived from
// where the graph rounds to bf16, and a serial reference computed here gives the terms of
// that bound. On a GPU (CudnnOnDevice), the same checks run on what cuDNN computes for the
// same graph through the CUDA plugin (MESHSIM_ATTENTION=cudnn: its fused kernels, no fallback).
#include "backend/cuda/sdpa_graph.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>
#include <set>

#include "backend/cuda/device.h"
#include "backend/cuda/gpu_api.h"
#include "backend/kernel_call.h"
#include "core/error.h"
#include "kernels/attention.h"
#include "kernels/bf16.h"

namespace meshsim::cuda::sdpa {
namespace {

constexpr double kU = 1.0 / 256;  // bf16's unit roundoff, 2^-8 (docs/numerics.md)

std::vector<float> random_bf16(std::size_t n, std::uint32_t seed, float amp) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-amp, amp);
  std::vector<float> v(n);
  for (float& x : v) x = round_to_bf16(u(gen));
  return v;
}

// [b, hk, s, d] -> [b * hq, s, d]: query head i reads key/value head i / (hq / hk).
std::vector<float> expand_heads(const std::vector<float>& x, const Shape& s, std::int64_t seq) {
  const std::int64_t g = s.heads_q / s.heads_kv, row = seq * s.head_dim;
  std::vector<float> out(static_cast<std::size_t>(s.batch * s.heads_q * row));
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads_q; ++h)
      std::copy_n(x.begin() + (b * s.heads_kv + h / g) * row, row, out.begin() + (b * s.heads_q + h) * row);
  return out;
}

// The inverse sum: [b * hq, s, d] -> [b, hk, s, d], each group's heads added.
std::vector<float> sum_groups(const std::vector<float>& x, const Shape& s, std::int64_t seq) {
  const std::int64_t g = s.heads_q / s.heads_kv, row = seq * s.head_dim;
  std::vector<float> out(static_cast<std::size_t>(s.batch * s.heads_kv * row), 0.0f);
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads_q; ++h)
      for (std::int64_t e = 0; e < row; ++e)
        out[(b * s.heads_kv + h / g) * row + e] += x[(b * s.heads_q + h) * row + e];
  return out;
}

kernels::AttentionShape flat(const Shape& s) { return {s.batch * s.heads_q, s.seq_q, s.seq_kv, s.head_dim}; }

struct Case {
  Shape s;
  std::vector<float> q, k, v;  // bf16 values; k, v with heads_kv heads
  std::vector<float> ke, ve;   // expanded to heads_q
};

Case make_case(const Shape& s, std::uint32_t seed) {
  Case c{s, {}, {}, {}, {}, {}};
  const auto nq = static_cast<std::size_t>(s.batch * s.heads_q * s.seq_q * s.head_dim);
  const auto nkv = static_cast<std::size_t>(s.batch * s.heads_kv * s.seq_kv * s.head_dim);
  c.q = random_bf16(nq, seed, 1.5f);
  c.k = random_bf16(nkv, seed + 1, 1.5f);
  c.v = random_bf16(nkv, seed + 2, 1.0f);
  c.ke = expand_heads(c.k, s, s.seq_kv);
  c.ve = expand_heads(c.v, s, s.seq_kv);
  return c;
}

// P_ij of query row (bh, i) for key j, from the reference lse (0 where masked).
double prob(const Case& c, const std::vector<float>& lse, std::int64_t bh, std::int64_t i, std::int64_t j) {
  const Shape& s = c.s;
  if (s.causal && j > i) return 0;
  double dot = 0;
  for (std::int64_t e = 0; e < s.head_dim; ++e)
    dot += static_cast<double>(c.q[(bh * s.seq_q + i) * s.head_dim + e]) * c.ke[(bh * s.seq_kv + j) * s.head_dim + e];
  return std::exp(s.attn_scale() * dot - lse[bh * s.seq_q + i]);
}

// |got - want| <= bound elementwise; reports the worst ratio.
void expect_within(const std::vector<float>& got, const std::vector<float>& want, const std::vector<double>& bound,
                   const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t n = 0; n < want.size(); ++n) {
    const double r = std::abs(static_cast<double>(got[n]) - want[n]) / bound[n];
    if (!(r <= worst)) worst = r, at = n;
  }
  EXPECT_LE(worst, 1.0) << what << ": element " << at << " got " << got[at] << " want " << want[at] << " bound "
                        << bound[at];
}

struct Forward {
  std::vector<float> o, lse;  // graph
  std::vector<float> o_ref, lse_ref;
};

// Executes a graph on its bound buffers: the CPU interpreter, or cuDNN on the GPU.
using Runner = std::function<void(const Graph&, std::map<std::int64_t, std::vector<float>>&)>;
const Runner kInterpreter = [](const Graph& g, std::map<std::int64_t, std::vector<float>>& b) { run_graph_cpu(g, b); };

Forward run_forward(const Case& c, const Graph& g, const Runner& run = kInterpreter) {
  const Shape& s = c.s;
  Forward f;
  f.o_ref.resize(c.q.size());
  f.lse_ref.resize(static_cast<std::size_t>(s.batch * s.heads_q * s.seq_q));
  kernels::attention_forward_cpu(c.q.data(), c.ke.data(), c.ve.data(), f.o_ref.data(), f.lse_ref.data(), flat(s),
                                 static_cast<float>(s.attn_scale()), {s.causal, 0, 0});
  std::map<std::int64_t, std::vector<float>> buf{{kQ, c.q},
                                                 {kK, c.k},
                                                 {kV, c.v},
                                                 {kO, std::vector<float>(c.q.size())},
                                                 {kStats, std::vector<float>(f.lse_ref.size())}};
  run(g, buf);
  f.o = buf[kO];
  f.lse = buf[kStats];
  return f;
}

void check_forward(const Shape& s, std::uint32_t seed, const Runner& run = kInterpreter) {
  const Case c = make_case(s, seed);
  const Forward f = run_forward(c, forward_graph(s), run);
  // O: P is rounded to bf16 before the second matmul (each P_ij moves by <= u P_ij, so
  // o_id by <= u sum_j P_ij |v_jd| =: u m), and O itself is rounded (<= u |o|); float
  // summation adds ~1e-6 m.
  std::vector<double> bound(f.o.size());
  for (std::int64_t bh = 0; bh < s.batch * s.heads_q; ++bh)
    for (std::int64_t i = 0; i < s.seq_q; ++i)
      for (std::int64_t e = 0; e < s.head_dim; ++e) {
        double m = 0;
        for (std::int64_t j = 0; j < s.seq_kv; ++j)
          m += prob(c, f.lse_ref, bh, i, j) * std::abs(c.ve[(bh * s.seq_kv + j) * s.head_dim + e]);
        const std::size_t n = static_cast<std::size_t>((bh * s.seq_q + i) * s.head_dim + e);
        bound[n] = kU * (std::abs(f.o_ref[n]) + (1 + kU) * m) + 1e-5 * m + 1e-7;
      }
  expect_within(f.o, f.o_ref, bound, "O");
  // Stats stays float: max + log(sum) against the kernel's online log-sum-exp.
  std::vector<double> lse_bound(f.lse.size());
  for (std::size_t n = 0; n < lse_bound.size(); ++n) lse_bound[n] = 1e-5 * (1 + std::abs(f.lse_ref[n]));
  expect_within(f.lse, f.lse_ref, lse_bound, "Stats");
}

TEST(SdpaGraph, ForwardIsAttention) {
  check_forward({.batch = 2, .heads_q = 2, .heads_kv = 2, .seq_q = 12, .seq_kv = 20, .head_dim = 64}, 1);
}

TEST(SdpaGraph, ForwardIsCausalAttention) {
  check_forward({.batch = 1, .heads_q = 3, .heads_kv = 3, .seq_q = 17, .seq_kv = 17, .head_dim = 64, .causal = true},
                2);
}

TEST(SdpaGraph, ForwardGroupedQueryHeadsHeadDim128) {
  check_forward({.batch = 2, .heads_q = 4, .heads_kv = 2, .seq_q = 9, .seq_kv = 9, .head_dim = 128, .causal = true}, 3);
}

TEST(SdpaGraph, ForwardWithoutTheMaskFailsTheCausalReference) {
  // The check has teeth: the graph of unmasked attention is far outside the causal bound.
  Shape s{.batch = 1, .heads_q = 2, .heads_kv = 2, .seq_q = 16, .seq_kv = 16, .head_dim = 64, .causal = true};
  const Case c = make_case(s, 4);
  Shape unmasked = s;
  unmasked.causal = false;
  const Forward f = run_forward(c, forward_graph(unmasked));
  double worst = 0;
  for (std::size_t n = 0; n < f.o.size(); ++n) worst = std::max(worst, std::abs(double(f.o[n]) - f.o_ref[n]));
  EXPECT_GT(worst, 100 * kU);
}

void check_backward(const Shape& s, bool dq_accum, std::uint32_t seed, const Runner& run = kInterpreter) {
  const Case c = make_case(s, seed);
  const Forward f = run_forward(c, forward_graph(s));
  // The forward's outputs as training keeps them: O in bf16, lse in float.
  std::vector<float> o(f.o_ref.size());
  for (std::size_t n = 0; n < o.size(); ++n) o[n] = round_to_bf16(f.o_ref[n]);
  const std::vector<float> dout = random_bf16(o.size(), seed + 7, 1.0f);
  std::vector<float> dq(o.size(), 0.0f), dke(c.ke.size(), 0.0f), dve(c.ve.size(), 0.0f);
  kernels::attention_backward_cpu(c.q.data(), c.ke.data(), c.ve.data(), o.data(), dout.data(), f.lse_ref.data(),
                                  dq.data(), dke.data(), dve.data(), flat(s), static_cast<float>(s.attn_scale()),
                                  {s.causal, 0, 0});
  const std::vector<float> dk = sum_groups(dke, s, s.seq_kv), dv = sum_groups(dve, s, s.seq_kv);

  const Graph g = backward_graph(s, dq_accum);
  const std::size_t rows = f.lse_ref.size();
  std::map<std::int64_t, std::vector<float>> buf{
      {kQ, c.q},
      {kK, c.k},
      {kV, c.v},
      {kO, o},
      {kStats, f.lse_ref},
      {kdO, dout},
      {kdQ, std::vector<float>(o.size())},
      {kdK, std::vector<float>(c.k.size())},
      {kdV, std::vector<float>(c.v.size())},
      {kSoftmaxSum, std::vector<float>(rows)},
  };
  if (dq_accum) buf[kDqAccum] = std::vector<float>(o.size(), 0.0f);
  run(g, buf);

  // Magnitudes of the sums each gradient element is made of, from P and dS computed here
  // serially: dV_jd = sum_i P_ij dO_id (P rounded to bf16: u sum_i P_ij |dO_id|);
  // dK_jd = sum_i dS_ij q_id (dS rounded: u sum_i |dS_ij| |q_id|); dQ_id = sum_j dS_ij k_jd,
  // dS rounded too: the graph hands dQ's matmul a float dS, as cuDNN's frontend does, but a
  // fused kernel's tensor cores take bf16 operands, so cuDNN rounds it there (seen on an H200,
  // run 26: dQ off by 0.1-0.5 of this bound, 40-160 times the float-dS one). Grouped heads: each
  // head's dK, dV is rounded to bf16 before the group sum, at most u times the same magnitude
  // again. Every output is rounded once more (u |want|).
  const std::int64_t d = s.head_dim, g_size = s.heads_q / s.heads_kv;
  std::vector<double> mq(o.size(), 0.0), mk(c.k.size(), 0.0), mv(c.v.size(), 0.0);
  const double sc = s.attn_scale();
  for (std::int64_t bh = 0; bh < s.batch * s.heads_q; ++bh) {
    const std::int64_t bkv = (bh / s.heads_q) * s.heads_kv + (bh % s.heads_q) / g_size;
    for (std::int64_t i = 0; i < s.seq_q; ++i) {
      double dsum = 0;
      for (std::int64_t e = 0; e < d; ++e)
        dsum += static_cast<double>(dout[(bh * s.seq_q + i) * d + e]) * o[(bh * s.seq_q + i) * d + e];
      for (std::int64_t j = 0; j < s.seq_kv; ++j) {
        const double p = prob(c, f.lse_ref, bh, i, j);
        double dp = 0;
        for (std::int64_t e = 0; e < d; ++e)
          dp += static_cast<double>(dout[(bh * s.seq_q + i) * d + e]) * c.ve[(bh * s.seq_kv + j) * d + e];
        const double ds = std::abs(sc * p * (dp - dsum));
        for (std::int64_t e = 0; e < d; ++e) {
          mv[(bkv * s.seq_kv + j) * d + e] += p * std::abs(dout[(bh * s.seq_q + i) * d + e]);
          mk[(bkv * s.seq_kv + j) * d + e] += ds * std::abs(c.q[(bh * s.seq_q + i) * d + e]);
          mq[(bh * s.seq_q + i) * d + e] += ds * std::abs(c.ke[(bh * s.seq_kv + j) * d + e]);
        }
      }
    }
  }
  auto bounds = [&](const std::vector<float>& want, const std::vector<double>& m, double rounded_terms) {
    std::vector<double> b(want.size());
    for (std::size_t n = 0; n < b.size(); ++n)
      b[n] = kU * std::abs(want[n]) + rounded_terms * kU * (1 + kU) * m[n] + 1e-5 * m[n] + 1e-7;
    return b;
  };
  const double group = g_size > 1 ? 2 : 1;
  expect_within(buf[kdV], dv, bounds(dv, mv, group), "dV");
  expect_within(buf[kdK], dk, bounds(dk, mk, group), "dK");
  expect_within(buf[kdQ], dq, bounds(dq, mq, 1), "dQ");
}

TEST(SdpaGraph, BackwardIsAttentionsGradient) {
  check_backward({.batch = 2, .heads_q = 2, .heads_kv = 2, .seq_q = 12, .seq_kv = 20, .head_dim = 64}, false, 11);
}

TEST(SdpaGraph, BackwardCausalThroughTheFloatDqAccumulator) {
  check_backward({.batch = 1, .heads_q = 3, .heads_kv = 3, .seq_q = 17, .seq_kv = 17, .head_dim = 64, .causal = true},
                 true, 12);
}

TEST(SdpaGraph, BackwardGroupedQueryHeadsHeadDim128) {
  const Shape s{.batch = 2, .heads_q = 4, .heads_kv = 2, .seq_q = 9, .seq_kv = 9, .head_dim = 128, .causal = true};
  check_backward(s, false, 13);
  check_backward(s, true, 14);
}

// cuDNN through the CUDA plugin: the graph's shape as the bf16 attention call the executor
// makes (batch 1, heads = BH, so no grouped heads), its operands uploaded, GpuApi::kernel with
// MESHSIM_ATTENTION=cudnn (our kernel may not stand in), the outputs read back.
void run_on_cudnn(const Graph& g, std::map<std::int64_t, std::vector<float>>& buf) {
  const Shape& s = g.shape;
  if (s.batch != 1 || s.heads_q != s.heads_kv) throw Error("run_on_cudnn: the executor's calls have no grouped heads");
  const KernelCall c = make_attention_call(g.backward, {s.heads_q, s.seq_q, s.seq_kv, s.head_dim}, s.causal, true);
  const std::vector<std::int64_t> uids = g.backward
                                             ? std::vector<std::int64_t>{kQ, kK, kV, kO, kdO, kStats, kdQ, kdK, kdV}
                                             : std::vector<std::int64_t>{kQ, kK, kV, kO, kStats};
  ASSERT_EQ(static_cast<int>(uids.size()), c.operands());
  std::vector<float> host(static_cast<std::size_t>(c.floats()), 0.0f);
  for (int j = 0; j < c.operands(); ++j) {
    const std::vector<float>& v = buf.at(uids[static_cast<std::size_t>(j)]);
    ASSERT_EQ(static_cast<std::int64_t>(v.size()), c.counts[static_cast<std::size_t>(j)]);
    if (c.elem(j) == KernelCall::Elem::BF16)
      kernels::narrow(v.data(), c.bf16_operand(host.data(), j), v.size());
    else
      std::copy(v.begin(), v.end(), c.operand(host.data(), j));
  }
  GpuApi& api = real_gpu_api();
  const std::size_t bytes = host.size() * sizeof(float);
  void* dev = nullptr;
  ASSERT_EQ(api.set_device(0), 0);
  ASSERT_EQ(api.malloc(&dev, bytes), 0);
  ASSERT_EQ(api.memcpy_to_device(dev, host.data(), bytes), 0);
  setenv("MESHSIM_ATTENTION", "cudnn", 1);
  const int st = api.kernel(c, static_cast<float*>(dev), nullptr);
  unsetenv("MESHSIM_ATTENTION");
  EXPECT_EQ(st, 0) << "cuDNN did not run " << c.text() << ": " << api.error_string(Lib::Cuda, st)
                   << " (the plugin said why on stderr)";
  ASSERT_EQ(api.memcpy_to_host(host.data(), dev, bytes), 0);
  api.free(dev);
  for (int j = 0; j < c.operands(); ++j) {
    std::vector<float>& v = buf[uids[static_cast<std::size_t>(j)]];
    if (c.elem(j) == KernelCall::Elem::BF16)
      kernels::widen(c.bf16_operand(host.data(), j), v.data(), v.size());
    else
      std::copy_n(c.operand(host.data(), j), v.size(), v.begin());
  }
}

bool have_gpu() { return probe_devices().count > 0; }

TEST(SdpaGraphOnCudnn, ForwardMatchesTheReference) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU present: cuDNN's attention is checked in the GPU acceptance run";
  check_forward({.heads_q = 8, .heads_kv = 8, .seq_q = 512, .seq_kv = 512, .head_dim = 64}, 21, run_on_cudnn);
  check_forward({.heads_q = 4, .heads_kv = 4, .seq_q = 384, .seq_kv = 640, .head_dim = 128, .causal = true}, 22,
                run_on_cudnn);
}

TEST(SdpaGraphOnCudnn, BackwardMatchesTheReference) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU present: cuDNN's attention is checked in the GPU acceptance run";
  // Both backward graphs: without the fp32 dQ accumulator (cuDNN's choice below 256 MiB of
  // scores) and with it (its choice above, e.g. the Llama-3 layer; forced here, where the
  // serial reference is affordable). The plugin keeps one plan per shape from its first use,
  // so the two cases use different shapes.
  check_backward({.heads_q = 8, .heads_kv = 8, .seq_q = 512, .seq_kv = 512, .head_dim = 64}, false, 23, run_on_cudnn);
  setenv("MESHSIM_CUDNN_DQ_ACCUM", "1", 1);
  check_backward({.heads_q = 4, .heads_kv = 4, .seq_q = 384, .seq_kv = 640, .head_dim = 128, .causal = true}, true, 24,
                 run_on_cudnn);
  unsetenv("MESHSIM_CUDNN_DQ_ACCUM");
}

TEST(SdpaGraph, DqAccumulatorFollowsThePlannedScoreBytes) {
  // cuDNN keeps dP in a workspace of b * h_q * s_q * s_kv * 2 bytes (rounded to 64) up to 256 MiB,
  // and accumulates dQ in float past that.
  EXPECT_FALSE(backward_uses_dq_accum(
      {.batch = 1, .heads_q = 8, .heads_kv = 8, .seq_q = 4096, .seq_kv = 4096, .head_dim = 128}));  // 256 MiB exactly
  EXPECT_TRUE(backward_uses_dq_accum(
      {.batch = 1, .heads_q = 64, .heads_kv = 8, .seq_q = 4096, .seq_kv = 4096, .head_dim = 128}));  // the Llama-3 70B
                                                                                                     // layer: 2 GiB
  const Shape big{.batch = 1, .heads_q = 64, .heads_kv = 8, .seq_q = 4096, .seq_kv = 4096, .head_dim = 128};
  const auto uids = backward_graph(big).bound_uids();
  EXPECT_EQ(uids, (std::vector<std::int64_t>{kQ, kK, kV, kO, kStats, kdO, kdQ, kdK, kdV, kSoftmaxSum, kDqAccum}));
}

TEST(SdpaGraph, OpsAreInDataflowOrderAndEveryIntermediateIsWrittenOnce) {
  for (bool causal : {false, true})
    for (const Graph& g :
         {forward_graph({.heads_q = 4, .heads_kv = 2, .seq_q = 8, .seq_kv = 8, .head_dim = 64, .causal = causal}),
          backward_graph({.heads_q = 4, .heads_kv = 2, .seq_q = 8, .seq_kv = 8, .head_dim = 64, .causal = causal},
                         true)}) {
      // Ready before the first op: the inputs and the scalars.
      std::set<std::int64_t> ready{kQ, kK, kV};
      if (g.backward) ready.insert({kO, kStats, kdO});
      for (const Tensor& t : g.tensors)
        if (t.by_value) ready.insert(t.uid);
      for (const Op& op : g.ops) {
        for (std::int64_t u : op.in) EXPECT_TRUE(ready.count(u)) << op.name << " reads " << g.tensor(u).name;
        EXPECT_TRUE(ready.insert(op.out).second) << op.name << " writes " << g.tensor(op.out).name << " again";
      }
      for (const Tensor& t : g.tensors) EXPECT_TRUE(ready.count(t.uid)) << t.name << " is never written";
    }
}

TEST(SdpaGraph, RejectsWhatCudnnDoesNotTakeNamingTheField) {
  auto message = [](const Shape& s) {
    try {
      forward_graph(s);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({.heads_q = 6, .heads_kv = 4, .seq_q = 8, .seq_kv = 8, .head_dim = 64}).find("heads_q"),
            std::string::npos);
  EXPECT_NE(message({.heads_q = 4, .heads_kv = 4, .seq_q = 8, .seq_kv = 8, .head_dim = 100}).find("head_dim 100"),
            std::string::npos);
  EXPECT_NE(message({.heads_q = 4, .heads_kv = 4, .seq_q = 8, .seq_kv = 8, .head_dim = 512}).find("head_dim"),
            std::string::npos);
  EXPECT_NE(message({.heads_q = 4, .heads_kv = 4, .seq_q = 0, .seq_kv = 8, .head_dim = 64}).find("seq_q"),
            std::string::npos);
  EXPECT_EQ(unsupported({.heads_q = 64, .heads_kv = 8, .seq_q = 4096, .seq_kv = 4096, .head_dim = 128}), "");
}

TEST(SdpaGraph, DescribeNamesEveryOp) {
  const Graph g = forward_graph({.heads_q = 2, .heads_kv = 2, .seq_q = 4, .seq_kv = 4, .head_dim = 64, .causal = true});
  const std::string text = describe(g);
  EXPECT_NE(text.find("bmm1: matmul(Q, K^T) -> S [1,2,4,4] float virtual"), std::string::npos) << text;
  EXPECT_NE(text.find("gen_row_index: gen_index axis 2"), std::string::npos) << text;
  EXPECT_NE(text.find("bmm2: matmul(P, V) -> O [1,2,4,64] bf16\n"), std::string::npos) << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), static_cast<long>(g.ops.size()));
}

}  // namespace
}  // namespace meshsim::cuda::sdpa
