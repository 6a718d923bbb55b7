#include "backend/cpu/numerics/ring_attention.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "kernels/kernels.h"

namespace meshsim::numerics {
namespace k = meshsim::kernels;

void validate_cp(const ModelConfig& cfg, int c) {
  validate(cfg);
  if (c < 1 || cfg.seq % (2 * c) != 0)
    throw Error(fmt::format("context parallel: seq {} does not split into 2 x cp = {} chunks; use a multiple of {}",
                            cfg.seq, 2 * c, 2 * c));
}

std::vector<std::int64_t> cp_rows(const ModelConfig& cfg, int c, int r) {
  validate_cp(cfg, c);
  const std::int64_t n = cfg.seq / (2 * c);
  std::vector<std::int64_t> rows;
  for (std::int64_t b = 0; b < cfg.batch; ++b)
    for (std::int64_t chunk : {std::int64_t(r), std::int64_t(2 * c - 1 - r)})
      for (std::int64_t i = 0; i < n; ++i) rows.push_back(b * cfg.seq + chunk * n + i);
  return rows;
}

RingAttention::RingAttention(Comm& cp, int heads, int head_dim, int batch, int chunk, bool bf16)
    : cp_(cp), heads_(heads), d_(head_dim), batch_(batch), n_(chunk), bf16_(bf16) {}

namespace {
struct RingSaved : Saved {
  std::vector<float> q, kv, o, lse;  // kv: [K | V] of this rank's block
};
}  // namespace

// Local layout after split_heads over 2*batch "sequences" of n rows: slot (b, j) (j = 0: the
// early chunk r, j = 1: the late chunk 2c-1-r) occupies heads consecutive [n, D] blocks.
template <class Fn>
void RingAttention::for_each_block_pair(int t, Fn&& fn) const {
  const int c = cp_.size(), r = cp_.rank(), src = ((r - t) % c + c) % c;
  auto chunk_of = [&](int rank, int j) { return j == 0 ? rank : 2 * c - 1 - rank; };
  for (std::int64_t b = 0; b < batch_; ++b)
    for (int j = 0; j < 2; ++j)
      for (int jj = 0; jj < 2; ++jj) {
        const int qc = chunk_of(r, j), kc = chunk_of(src, jj);
        if (kc > qc) continue;  // entirely in the causal future
        fn(b * 2 + j, b * 2 + jj,
           k::AttentionMask{.causal = true, .q0 = std::int64_t(qc) * n_, .k0 = std::int64_t(kc) * n_});
      }
}

std::unique_ptr<Saved> RingAttention::forward(const float* qkv, std::int64_t rows, float* ctx) {
  const int c = cp_.size(), r = cp_.rank();
  const std::int64_t hl = std::int64_t(heads_) * d_, slots = 2 * std::int64_t(batch_);
  if (rows != slots * n_) throw Error(fmt::format("ring attention: {} rows, expected {}", rows, slots * n_));
  const std::int64_t n = rows * hl, block = std::int64_t(heads_) * n_ * d_, lblock = std::int64_t(heads_) * n_;
  auto s = std::make_unique<RingSaved>();
  s->q.resize(n), s->kv.resize(2 * n), s->o.assign(n, 0.f);
  s->lse.assign(rows * heads_, -std::numeric_limits<float>::infinity());
  k::split_heads_cpu(qkv, 3 * hl, s->q.data(), slots, n_, heads_, d_);
  k::split_heads_cpu(qkv + hl, 3 * hl, s->kv.data(), slots, n_, heads_, d_);
  k::split_heads_cpu(qkv + 2 * hl, 3 * hl, s->kv.data() + n, slots, n_, heads_, d_);
  const float scale = 1.f / std::sqrt(float(d_));
  std::vector<float> held = s->kv, next(held.size()), ob(block), lb(lblock);
  for (int t = 0; t < c; ++t) {
    for_each_block_pair(t, [&](std::int64_t qslot, std::int64_t kslot, const k::AttentionMask& mask) {
      const std::int64_t qoff = qslot * block, koff = kslot * block;
      k::attention_forward_cpu(s->q.data() + qoff, held.data() + koff, held.data() + n + koff, ob.data(), lb.data(),
                               {heads_, n_, n_, d_}, scale, mask);
      round_if(bf16_, ob.data(), block);
      float* o = s->o.data() + qoff;
      float* lse = s->lse.data() + qslot * lblock;
      k::attention_merge_cpu(o, lse, ob.data(), lb.data(), o, lse, lblock, d_);
    });
    if (t + 1 < c) {
      cp_.sendrecv((r + 1) % c, held.data(), std::int64_t(held.size()), (r - 1 + c) % c, next.data(),
                   std::int64_t(next.size()));
      std::swap(held, next);
    }
  }
  round_if(bf16_, s->o.data(), n);  // the output, and the O the backward reads
  k::merge_heads_cpu(s->o.data(), ctx, hl, slots, n_, heads_, d_);
  return s;
}

void RingAttention::backward(const Saved& saved, const float* dctx, std::int64_t rows, float* dqkv) {
  const auto& s = static_cast<const RingSaved&>(saved);
  const int c = cp_.size(), r = cp_.rank();
  const std::int64_t hl = std::int64_t(heads_) * d_, slots = 2 * std::int64_t(batch_);
  const std::int64_t n = rows * hl, block = std::int64_t(heads_) * n_ * d_, lblock = std::int64_t(heads_) * n_;
  std::vector<float> dout(n), dq(n, 0.f);
  k::split_heads_cpu(dctx, hl, dout.data(), slots, n_, heads_, d_);
  // travelling buffer: [K | V | dK | dV] of one rank's block
  std::vector<float> held(4 * n, 0.f), next(4 * n);
  std::copy(s.kv.begin(), s.kv.end(), held.begin());
  const float scale = 1.f / std::sqrt(float(d_));
  std::vector<float> dqb(bf16_ ? block : 0), dkb(dqb.size()), dvb(dqb.size());
  for (int t = 0; t < c; ++t) {
    for_each_block_pair(t, [&](std::int64_t qslot, std::int64_t kslot, const k::AttentionMask& mask) {
      const std::int64_t qoff = qslot * block, koff = kslot * block;
      float* const dqa = dq.data() + qoff;
      float* const dka = held.data() + 2 * n + koff;
      float* const dva = held.data() + 3 * n + koff;
      if (bf16_)  // this pair's bf16 dq, dk, dv, then added into the fp32 accumulators
        for (auto* b : {&dqb, &dkb, &dvb}) std::fill(b->begin(), b->end(), 0.f);
      k::attention_backward_cpu(s.q.data() + qoff, held.data() + koff, held.data() + n + koff, s.o.data() + qoff,
                                dout.data() + qoff, s.lse.data() + qslot * lblock, bf16_ ? dqb.data() : dqa,
                                bf16_ ? dkb.data() : dka, bf16_ ? dvb.data() : dva, {heads_, n_, n_, d_}, scale, mask);
      if (bf16_)
        for (auto [b, acc] : {std::pair{&dqb, dqa}, std::pair{&dkb, dka}, std::pair{&dvb, dva}}) {
          round_bf16(*b);
          add_into(acc, b->data(), block);
        }
    });
    if (c > 1) {  // c passes in all: the last one brings every block home
      cp_.sendrecv((r + 1) % c, held.data(), std::int64_t(held.size()), (r - 1 + c) % c, next.data(),
                   std::int64_t(next.size()));
      std::swap(held, next);
    }
  }
  round_if(bf16_, dq.data(), n);
  round_if(bf16_, held.data() + 2 * n, 2 * n);  // dK, dV: home, complete
  k::merge_heads_cpu(dq.data(), dqkv, 3 * hl, slots, n_, heads_, d_);
  k::merge_heads_cpu(held.data() + 2 * n, dqkv + hl, 3 * hl, slots, n_, heads_, d_);
  k::merge_heads_cpu(held.data() + 3 * n, dqkv + 2 * hl, 3 * hl, slots, n_, heads_, d_);
}

CpStep context_parallel_step(const ModelConfig& cfg, const TensorMap& params, const Batch& batch, Comm& cp) {
  const int c = cp.size();
  validate_cp(cfg, c);
  if (cfg.moe.experts > 0) throw Error("context parallel: use a dense model (MoE is covered by expert parallelism)");
  RingAttention attn(cp, cfg.heads, cfg.head_dim(), cfg.batch, cfg.seq / (2 * c), cfg.bf16);
  LocalFfn ffn(cfg, params);
  CpStep out;
  out.rows = cp_rows(cfg, c, cp.rank());
  StepResult part = rows_step(cfg, params, batch, out.rows, attn, ffn);
  out.loss = double(cp.allreduce(float(part.loss))) / double(cfg.tokens());
  out.logits = std::move(part.logits);
  std::vector<float> flat = flatten(cfg, part.grads);
  cp.allreduce(flat);
  out.grads = unflatten(cfg, flat);
  return out;
}

}  // namespace meshsim::numerics
