#include "backend/cpu/numerics/data_parallel.h"

#include <fmt/format.h>

#include "core/error.h"

namespace meshsim::numerics {

DpStep data_parallel_step(const ModelConfig& cfg, const TensorMap& params, const Batch& batch, Comm& dp,
                          ZeroStage stage, const kernels::AdamW& adam) {
  const int d = dp.size(), r = dp.rank();
  if (cfg.batch % d != 0)
    throw Error(fmt::format("data parallel: batch {} does not split over {} ranks; use a multiple of the group size",
                            cfg.batch, d));
  const int per = cfg.batch / d;
  // Mixed precision: the step computes with the bf16 copy; Adam updates the fp32 masters.
  const TensorMap model = cfg.bf16 ? bf16_copy(params) : TensorMap{};
  const TensorMap& weights = cfg.bf16 ? model : params;
  LocalAttention attn(cfg.heads, cfg.head_dim(), cfg.seq, cfg.bf16);
  LocalFfn ffn(cfg, weights);
  StepResult part = partial_step(cfg, weights, batch, r * per, per, attn, ffn);

  DpStep out;
  out.loss = double(dp.allreduce(float(part.loss))) / double(cfg.tokens());
  out.logits = std::move(part.logits);

  std::vector<float> flat = flatten(cfg, part.grads);
  const std::int64_t n = std::int64_t(flat.size());
  const std::int64_t padded = (n + d - 1) / d * d, shard = padded / d;
  flat.resize(static_cast<std::size_t>(padded), 0.f);
  std::vector<float> w = flatten(cfg, params);
  w.resize(static_cast<std::size_t>(padded), 0.f);
  out.shard_begin = shard * r;

  if (stage == ZeroStage::None) {
    dp.allreduce(flat);
    AdamState st(padded);
    adam_step(adam, 1, w.data(), flat.data(), st, padded);
    out.grad_shard.assign(flat.begin() + out.shard_begin, flat.begin() + out.shard_begin + shard);
    out.grads = unflatten(cfg, flat);
    out.updated = unflatten(cfg, w);
    return out;
  }
  if (stage == ZeroStage::One) {
    dp.allreduce(flat);
    out.grads = unflatten(cfg, flat);
    out.grad_shard.assign(flat.begin() + out.shard_begin, flat.begin() + out.shard_begin + shard);
  } else {
    out.grad_shard = dp.reducescatter(flat);
  }
  // Sharded optimizer: this rank's moments and parameter slice only.
  AdamState st(shard);
  std::vector<float> wshard(w.begin() + out.shard_begin, w.begin() + out.shard_begin + shard);
  adam_step(adam, 1, wshard.data(), out.grad_shard.data(), st, shard);
  out.updated = unflatten(cfg, dp.allgather(wshard));
  return out;
}

TensorMap reference_adam_step(const ModelConfig& cfg, const TensorMap& params, const TensorMap& grads,
                              const kernels::AdamW& adam) {
  std::vector<float> w = flatten(cfg, params);
  const std::vector<float> g = flatten(cfg, grads);
  AdamState st(std::int64_t(w.size()));
  adam_step(adam, 1, w.data(), g.data(), st, std::int64_t(w.size()));
  return unflatten(cfg, w);
}

}  // namespace meshsim::numerics
