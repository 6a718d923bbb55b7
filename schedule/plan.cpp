// plan_iteration: pipeline order, stage boundaries, data-parallel buckets and the optimizer
// around the per-layer builders of plan_layer.cpp / plan_summa.cpp. See plan.h.
//
// 1F1B on p = 4 stages, m = 6 micro-batches (F = forward, B = backward, by micro-batch):
//   stage 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5
//   stage 3: F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5
// Interleaved (v chunks): Megatron's order; forward unit k runs chunk (k / p) % v of
// micro-batch (k / (p v)) p + k % p; warm-up 2(p - s - 1) + (v - 1) p units.
#include "schedule/plan.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "core/enum_names.h"
#include "core/error.h"
#include "schedule/memory.h"
#include "schedule/plan_internal.h"

namespace meshsim {

CollectiveSpec collective_spec(const Op& op, int ranks, Bytes element_bytes) {
  MESHSIM_ASSERT(element_bytes >= 1);
  CollectiveSpec spec;
  spec.kind = op.coll;
  spec.ranks = ranks;
  spec.bytes = op.bytes / element_bytes * element_bytes;
  spec.root = op.root;
  spec.element_bytes = element_bytes;
  if (op.coll == CollKind::AllToAll && op.imbalance != 1.0)
    spec.alltoall_bytes = skewed_alltoall(spec.bytes, ranks, op.imbalance, element_bytes);
  return spec;
}

constexpr EnumName<OpKind> kOpKindNames[] = {
    {OpKind::Compute, "compute"}, {OpKind::Collective, "collective"}, {OpKind::Send, "send"}, {OpKind::Recv, "recv"}};
const char* to_string(OpKind k) { return enum_name(kOpKindNames, k); }
constexpr EnumName<Phase> kPhaseNames[] = {{Phase::Forward, "forward"},
                                           {Phase::Backward, "backward"},
                                           {Phase::Recompute, "recompute"},
                                           {Phase::Optimizer, "optimizer"}};
const char* to_string(Phase p) { return enum_name(kPhaseNames, p); }
constexpr EnumName<Stream> kStreamNames[] = {{Stream::Compute, "compute"}, {Stream::Tp, "tp"}, {Stream::Cp, "cp"},
                                             {Stream::Ep, "ep"},           {Stream::Pp, "pp"}, {Stream::Dp, "dp"}};
static_assert(std::size(kStreamNames) == kStreams, "every Stream needs a name");
const char* to_string(Stream s) { return enum_name(kStreamNames, s); }

double ring_bytes_moved(CollKind kind, Bytes n, int p) {
  const double f = p > 1 ? static_cast<double>(p - 1) / p : 0.0;
  switch (kind) {
    case CollKind::AllReduce:
      return 2 * f * static_cast<double>(n);
    case CollKind::AllGather:
    case CollKind::ReduceScatter:
    case CollKind::AllToAll:
      return f * static_cast<double>(n);
    default:
      return static_cast<double>(n);
  }
}

std::vector<std::pair<std::string, int>> mesh_axes(const ParallelSpec& p) {
  std::vector<std::pair<std::string, int>> axes;
  if (p.ep > 1) {
    // dp = edp x ep: the ep ranks' factor of dp (all of ep, or ep / (tp x cp) when the ep
    // groups span tp and cp: ParallelSpec::ep_axis).
    axes.emplace_back("edp", p.dp / p.ep_dp_factor());
    axes.emplace_back("ep", p.ep_dp_factor());
  } else {
    axes.emplace_back("dp", p.dp);
  }
  axes.emplace_back("pp", p.pp);
  axes.emplace_back("cp", p.cp);
  if (p.mesh2d > 0) {
    axes.emplace_back("row", p.mesh2d);
    axes.emplace_back("col", p.mesh2d);
  } else {
    axes.emplace_back("tp", p.tp);
  }
  return axes;
}

namespace plan {

int Emitter::push(Op op) {
  role_.ops.push_back(std::move(op));
  return size() - 1;
}

int Emitter::compute(Phase phase, const std::string& name, int layer, int mb, const Kernel& k) {
  Op op = op_of(OpKind::Compute, phase, Stream::Compute, name, layer, mb);
  op.kernel = k;
  op.deps = std::move(pending_);
  pending_.clear();
  last_compute_ = push(std::move(op));
  return last_compute_;
}

int Emitter::blocking(Op op) {
  op.deps = std::move(pending_);
  pending_.clear();
  if (last_compute_ >= 0) op.deps.push_back(last_compute_);
  const int i = push(std::move(op));
  pending_.push_back(i);
  return i;
}

int Emitter::follow(Op op) {
  op.deps = std::move(pending_);
  pending_.clear();
  const int i = push(std::move(op));
  pending_.push_back(i);
  return i;
}

int Emitter::async(Op op) {
  if (last_compute_ >= 0) op.deps.push_back(last_compute_);
  return push(std::move(op));
}

int Emitter::recv(Op op) {
  const int i = push(std::move(op));
  pending_.push_back(i);
  return i;
}

std::int64_t i64(double v) { return static_cast<std::int64_t>(std::llround(v)); }
std::int64_t dim(double v) { return std::max<std::int64_t>(i64(v), 1); }

Kernel attention_kernel(double batch_heads, double seq_q, double seq_kv, double head_dim, bool causal, double flops,
                        double bytes, int P) {
  Kernel k = Kernel::attention(dim(batch_heads), dim(seq_q), dim(seq_kv), dim(head_dim), P, causal);
  k.flops = flops;
  k.bytes = bytes;
  return k;
}

Op op_of(OpKind kind, Phase phase, Stream stream, const std::string& name, int layer, int mb) {
  Op op;
  op.kind = kind;
  op.phase = phase;
  op.stream = stream;
  op.name = name;
  op.layer = layer;
  op.microbatch = mb;
  return op;
}

Op collective(Phase phase, Stream stream, CollKind kind, const MeshAxis& axis, int group, Bytes bytes,
              const std::string& name, int layer, int mb) {
  Op op = op_of(OpKind::Collective, phase, stream, name, layer, mb);
  op.coll = kind;
  op.axis = axis;
  op.group_size = group;
  op.bytes = bytes;
  return op;
}

struct Unit {
  bool forward = true;
  int mb = 0;
  int chunk = 0;
};

// The order of forward and backward units on stage s (see the file comment).
std::vector<Unit> pipeline_order(int p, int v, int m, int s) {
  const int total = m * v;
  auto unit = [&](int k, bool fwd) {
    const int chunk = (k / p) % v;
    return Unit{fwd, (k / (p * v)) * p + k % p, fwd ? chunk : v - 1 - chunk};
  };
  int warmup = v == 1 ? p - s - 1 : 2 * (p - s - 1) + (v - 1) * p;
  warmup = std::min(warmup, total);
  std::vector<Unit> order;
  order.reserve(static_cast<std::size_t>(2 * total));
  for (int k = 0; k < warmup; ++k) order.push_back(unit(k, true));
  for (int i = 0; i < total - warmup; ++i) {
    order.push_back(unit(warmup + i, true));
    order.push_back(unit(i, false));
  }
  for (int k = total - warmup; k < total; ++k) order.push_back(unit(k, false));
  return order;
}

struct Planner {
  const ModelSpec& m;
  const ParallelSpec& p;
  Ctx ctx;
  int P;
  int V;                 // virtual stages = pp * vchunks
  Bytes stash;           // activation bytes one layer keeps from forward to backward
  Bytes checkpoint = 0;  // a segment input kept under whole-layer recomputation
  Bytes full;            // the same without recomputation (held while a recomputed segment runs)
  Bytes boundary;        // activation crossing a stage boundary
  Bytes bucket;

  Planner(const ModelSpec& model, const ParallelSpec& par)
      : m(model), p(par), ctx{model, par, model.dtype_bytes(), 0, {}}, P(model.dtype_bytes()) {
    ctx.tokens = static_cast<double>(p.micro_batch_size) * m.seq / p.cp;
    ctx.dp_axis = p.ep > 1 ? MeshAxis::edp().plus(MeshAxis::ep()) : MeshAxis::dp();
    if (p.cp > 1) ctx.dp_axis = ctx.dp_axis.plus(MeshAxis::cp());
    V = p.pp * p.vchunks;
    full = total_bytes(layer_activation_items(m, p, RecomputeMode::None));
    // Whole-layer recomputation keeps only each segment's input (a full-mode checkpoint;
    // 1/t of it per tp rank with distribute_checkpoints).
    checkpoint = total_bytes(layer_activation_items(m, p, RecomputeMode::Full));
    stash = recompute_whole_layers() ? checkpoint : layer_activation_bytes(m, p);
    const double shard =
        p.mesh2d > 0 ? static_cast<double>(p.mesh2d) * p.mesh2d : (p.sp || p.pipeline_scatter_gather() ? p.tp : 1);
    boundary = static_cast<Bytes>(ctx.tokens * m.hidden / shard) * P;
    bucket = static_cast<Bytes>(p.dp_bucket_mib * 1024 * 1024);
  }

  // Pipeline scatter/gather: without sp each tp rank sends its 1/tp slice, and the receiving
  // stage all-gathers the whole activation over tp.
  void receive(Emitter& e, Op recv) {
    const Phase phase = recv.phase;
    const int mb = recv.microbatch;
    e.recv(std::move(recv));
    if (p.pipeline_scatter_gather())
      e.follow(collective(phase, Stream::Tp, CollKind::AllGather, MeshAxis::tp(), p.tp, boundary * p.tp,
                          phase == Phase::Forward ? "pp.gather.activation" : "pp.gather.grad", -1, mb));
  }

  // Gradient bytes of one layer on one rank: dense parameters over the tensor group,
  // experts over ep x etp.
  std::pair<Bytes, Bytes> layer_grad_bytes() const {
    const double experts = m.expert_params_per_layer();
    const double dense = m.params_per_layer() - experts;
    const double t = p.tensor_size();
    return {static_cast<Bytes>(dense / t) * P, static_cast<Bytes>(experts / p.expert_shard()) * P};
  }

  // What layer i of a chunk keeps between its forward and backward.
  Bytes stash_of(int vs, int i) const {
    if (!recompute_whole_layers()) return stash;
    return i % segment(vs) == 0 ? checkpoint : 0;
  }

  bool recompute_whole_layers() const {
    return p.recompute.mode == RecomputeMode::Full || p.recompute.mode == RecomputeMode::EveryK ||
           p.recompute.mode == RecomputeMode::Sqrt;
  }
  int Lc(int vs) const { return p.chunk_layers(m.layers, vs); }  // layers of virtual stage vs
  int segment(int vs) const {
    if (p.recompute.mode == RecomputeMode::EveryK || p.recompute.mode == RecomputeMode::Sqrt)
      return std::max(1, std::min(recompute_segment_layers(m, p), Lc(vs)));
    return 1;
  }

  void forward_layer(Emitter& e, int layer, int mb, Phase phase) {
    if (p.mesh2d > 0)
      plan::summa_layer_forward(ctx, e, layer, mb, phase);
    else
      plan::layer_forward(ctx, e, layer, mb, phase);
  }
  void backward_layer(Emitter& e, int layer, int mb) {
    if (p.mesh2d > 0)
      plan::summa_layer_backward(ctx, e, layer, mb);
    else
      plan::layer_backward(ctx, e, layer, mb);
  }

  // ZeRO-3: the all-gather of one layer's parameters. The output is what one tensor-parallel
  // rank holds of the layer (layer_grad_bytes, already / t); each of the dp x cp ranks that hold
  // it (grad_ranks) contributes its share.
  Op zero3_gather_op(int layer, int mb, Phase phase) const {
    const auto [dense, experts] = layer_grad_bytes();
    return collective(phase, Stream::Dp, CollKind::AllGather, ctx.dp_axis, p.grad_ranks(), dense + experts,
                      "zero3.allgather.params", layer, mb);
  }

  // The parameter uses of one unit in compute order, (layer, phase), each preceded by
  // before_use(k) and followed by after_use(k). Under ZeRO-3 (dp > 1) use k's gather is issued
  // on the dp stream when use k - 1 starts computing (the first two at the start of the unit),
  // as FSDP prefetches the next block, or, with `issue_after` (the backward under
  // BackwardPrefetch::Post), only when use k - 1 has finished; use k's first op waits for it.
  // Under FSDP2 the gathered parameters are copied out of the all-gather buffer before the use.
  // Otherwise nothing is emitted.
  struct Zero3Prefetch {
    Planner& pl;
    Emitter& e;
    int mb;
    bool issue_after = false;
    std::vector<std::pair<int, Phase>> uses;
    std::vector<int> ops;
    bool active() const { return pl.p.zero >= 3 && pl.p.grad_ranks() > 1 && !uses.empty(); }
    void issue(std::size_t j) {
      if (ops.empty()) ops.assign(uses.size(), -1);
      if (j < uses.size() && ops[j] < 0) ops[j] = e.async(pl.zero3_gather_op(uses[j].first, mb, uses[j].second));
    }
    void before_use(std::size_t k) {
      if (!active()) return;
      issue(k);
      if (!issue_after) issue(k + 1);
      e.wait_for(ops[k]);
      if (pl.p.stack.fsdp == 2) {  // foreach_all_gather_copy_out: read and write every gathered element
        const auto [dense, experts] = pl.layer_grad_bytes();
        pl.memory_pass(e, uses[k].second, "fsdp.allgather.copy_out", uses[k].first, mb,
                       2.0 * static_cast<double>(dense + experts));
      }
    }
    void after_use(std::size_t k) {
      if (active() && issue_after) issue(k + 1);
    }
  };

  // A memory-bound pass of `bytes` read and written, on the compute stream.
  void memory_pass(Emitter& e, Phase phase, const char* name, int layer, int mb, double bytes) const {
    e.compute(phase, name, layer, mb, Kernel::elementwise(KernelKind::Elementwise, 0, bytes, P));
  }

  // FSDP's passes over one block's unsharded gradient after its backward, before its
  // reduce-scatter (TrainingStack::fsdp; docs/compute.md), per element of the block's
  // parameters on this rank: FSDP1 concatenates them into the flat gradient (autograd's backward
  // of the views' split: read and write P bytes), then, when they are reduced, casts it to the
  // reduce dtype R (P + R) and divides it by the pre-divide factor (2R); FSDP2 copies them into
  // the reduce-scatter buffer in R (P + R) and lets NCCL's AVG divide. `ready` runs between the
  // flat gradient and the rest: FSDP1's post-backward hook, where BACKWARD_POST prefetches.
  template <class Ready>
  void fsdp_grad_passes(Emitter& e, int layer, int mb, bool reduced, Ready ready) const {
    const bool on = p.stack.fsdp > 0 && p.zero == 3 && p.grad_ranks() > 1;
    const auto [dense, experts] = layer_grad_bytes();
    const double n = static_cast<double>(dense + experts) / P;
    const double R = p.stack.reduce_bytes > 0 ? p.stack.reduce_bytes : P;
    if (on && p.stack.fsdp == 1) memory_pass(e, Phase::Backward, "fsdp.grad.flatten", layer, mb, 2.0 * P * n);
    ready();
    if (!on || !reduced) return;
    if (p.stack.fsdp == 2) {
      memory_pass(e, Phase::Backward, "fsdp.grad.copy_in", layer, mb, (P + R) * n);
      return;
    }
    if (R != P) memory_pass(e, Phase::Backward, "fsdp.grad.cast", layer, mb, (P + R) * n);
    memory_pass(e, Phase::Backward, "fsdp.grad.predivide", layer, mb, 2.0 * R * n);
  }

  struct DpState {
    Bytes dense = 0, experts = 0;
    std::vector<int> ops;
  };

  void flush(Emitter& e, DpState& dp, bool force) {
    auto emit = [&](Bytes& acc, const MeshAxis& axis, int group) {
      if (acc == 0 || group == 1 || (!force && acc < bucket)) return;
      const CollKind kind = p.zero >= 1 ? CollKind::ReduceScatter : CollKind::AllReduce;
      // Reduce-scatter input is the whole bucket; sizes are rounded to whole elements per rank.
      // The gradients travel in the stack's reduce dtype (stack.reduce_bytes; 0: the model's).
      Bytes n = p.stack.reduce_bytes > 0 ? acc / P * p.stack.reduce_bytes : acc;
      if (kind == CollKind::ReduceScatter) n = (n + group - 1) / group * group;
      dp.ops.push_back(e.async(collective(Phase::Backward, Stream::Dp, kind, axis, group, n,
                                          p.zero >= 1 ? "dp.reduce_scatter.grads" : "dp.allreduce.grads", -1, -1)));
      acc = 0;
    };
    emit(dp.dense, ctx.dp_axis, p.grad_ranks());
    if (p.ep > 1)
      emit(dp.experts, p.expert_grad_axis(), p.expert_grad_ranks());
    else
      emit(dp.experts, ctx.dp_axis, p.grad_ranks());
  }

  Op p2p(OpKind kind, Phase phase, int peer, std::int64_t tag, int mb, const std::string& name) const {
    Op op = op_of(kind, phase, Stream::Pp, name, -1, mb);
    op.bytes = boundary;
    op.peer = peer;
    op.tag = tag;
    op.axis = MeshAxis::pp();
    op.group_size = 2;
    return op;
  }

  void embedding(Emitter& e, int mb, bool backward) {
    const double bytes = 2.0 * ctx.tokens * m.hidden * P / (p.mesh2d > 0 ? p.mesh2d : 1);
    e.compute(backward ? Phase::Backward : Phase::Forward, backward ? "embedding.bwd" : "embedding", -1, mb,
              Kernel::elementwise(backward ? KernelKind::Elementwise : KernelKind::Memcpy, 0, bytes, P));
  }

  void logits(Emitter& e, int mb, bool backward) {
    const double t = p.tensor_size();
    const double rows = p.mesh2d > 0 ? ctx.tokens / p.mesh2d : ctx.tokens;
    const double vocab = p.mesh2d > 0 ? static_cast<double>(m.vocab) / p.mesh2d : m.vocab / t;
    const auto T = static_cast<std::int64_t>(std::llround(rows));
    const auto Vn = static_cast<std::int64_t>(std::llround(vocab));
    const std::int64_t H = m.hidden;
    const double ce_bytes = 2.0 * 4 * rows * vocab;  // fp32 logits read and written
    const MeshAxis& axis = p.mesh2d > 0 ? MeshAxis::col() : MeshAxis::tp();
    const int group = p.mesh2d > 0 ? p.mesh2d : p.tp;
    if (!backward) {
      e.compute(Phase::Forward, "logits", -1, mb, Kernel::gemm(T, Vn, H, P));
      e.compute(Phase::Forward, "cross_entropy", -1, mb,
                Kernel::rowwise(KernelKind::Softmax, KernelFn::CrossEntropy, T, Vn, 5 * rows * vocab, ce_bytes, 4));
      if (group > 1)  // vocab-parallel cross-entropy: max and sum of exp over the vocabulary shards
        e.blocking(collective(Phase::Forward, Stream::Tp, CollKind::AllReduce, axis, group,
                              static_cast<Bytes>(rows) * 4 * 2, axis.str() + ".cross_entropy", -1, mb));
    } else {
      e.compute(Phase::Backward, "cross_entropy.bwd", -1, mb,
                Kernel::rowwise(KernelKind::Softmax, KernelFn::CrossEntropy, T, Vn, 2 * rows * vocab, ce_bytes, 4));
      e.compute(Phase::Backward, "logits.dgrad", -1, mb, Kernel::gemm(T, H, Vn, P));
      e.compute(Phase::Backward, "logits.wgrad", -1, mb, Kernel::gemm(H, Vn, T, P));
    }
  }

  std::int64_t tag(int mb, int vs, bool grad) const {
    return (static_cast<std::int64_t>(mb) * V + vs) * 2 + (grad ? 1 : 0);
  }

  // One pipeline unit of stage s: micro-batch u.mb's forward or backward of chunk u.chunk.
  void unit(Emitter& e, int s, const Unit& u, DpState& dp) {
    const int vs = u.chunk * p.pp + s;
    const int first_layer = p.first_layer(m.layers, vs), Lc = this->Lc(vs);
    auto layer_of = [&](int i) { return first_layer + i; };
    Zero3Prefetch z3{*this, e, u.mb, !u.forward && p.stack.backward_prefetch == BackwardPrefetch::Post, {}, {}};
    if (u.forward) {
      if (vs > 0)
        receive(e, p2p(OpKind::Recv, Phase::Forward, (vs - 1) % p.pp, tag(u.mb, vs - 1, false), u.mb,
                       "pp.recv.activation"));
      if (vs == 0) embedding(e, u.mb, false);
      for (int i = 0; i < Lc; ++i) z3.uses.emplace_back(layer_of(i), Phase::Forward);
      for (int i = 0; i < Lc; ++i) {
        z3.before_use(static_cast<std::size_t>(i));
        const int first = e.size();
        forward_layer(e, layer_of(i), u.mb, Phase::Forward);
        if (first < e.size()) e.op(first).alloc += stash_of(vs, i);
        z3.after_use(static_cast<std::size_t>(i));
      }
      if (vs == V - 1)
        logits(e, u.mb, false);
      else
        e.async(p2p(OpKind::Send, Phase::Forward, (vs + 1) % p.pp, tag(u.mb, vs, false), u.mb, "pp.send.activation"));
      return;
    }
    if (vs == V - 1)
      logits(e, u.mb, true);
    else
      receive(e, p2p(OpKind::Recv, Phase::Backward, (vs + 1) % p.pp, tag(u.mb, vs, true), u.mb, "pp.recv.grad"));
    const bool last_mb = u.mb == p.microbatches - 1;
    const int seg = segment(vs);
    // Backward order, as (layer index in the chunk, phase): each recomputed segment (its first
    // layer's input was kept) forward, just before the backward of its last layer.
    std::vector<std::pair<int, Phase>> steps;
    for (int i = Lc - 1; i >= 0; --i) {
      if (recompute_whole_layers() && (i == Lc - 1 || (i + 1) % seg == 0))
        for (int j = (i / seg) * seg; j <= i; ++j) steps.emplace_back(j, Phase::Recompute);
      steps.emplace_back(i, Phase::Backward);
    }
    // Parameters kept from the forward (stack.reshard_after_forward false) need no gather here.
    // A recomputed layer's backward right after its recomputation uses the same gather (FSDP
    // skips its pre-forward logic in the recomputed forward: the backward has unsharded it).
    std::vector<std::size_t> use_of(steps.size());
    for (std::size_t k = 0; k < steps.size(); ++k) {
      const bool shares = k > 0 && steps[k].second == Phase::Backward && steps[k - 1].second == Phase::Recompute &&
                          steps[k - 1].first == steps[k].first;
      if (!shares && p.stack.reshard_after_forward) z3.uses.emplace_back(layer_of(steps[k].first), steps[k].second);
      use_of[k] = z3.uses.empty() ? 0 : z3.uses.size() - 1;
    }
    // FSDP under gradient accumulation (TrainingStack::reduce_every_microbatch): each block's
    // gradients are reduce-scattered after its backward in every micro-batch.
    const bool per_block = p.stack.reduce_every_microbatch && p.zero == 3;
    for (std::size_t k = 0; k < steps.size(); ++k) {
      const auto [i, phase] = steps[k];
      const int layer = layer_of(i);
      const bool new_use = k == 0 || use_of[k] != use_of[k - 1];
      if (phase == Phase::Recompute && (k == 0 || steps[k - 1].second != Phase::Recompute) &&
          p.checkpoints_distributed())  // the segment's input, kept as 1/t per tp rank, gathered whole
        e.blocking(collective(Phase::Recompute, Stream::Tp, CollKind::AllGather, MeshAxis::tp(), p.tp,
                              static_cast<Bytes>(ctx.tokens * m.hidden) * P, "tp.allgather.checkpoint", layer, u.mb));
      if (new_use) z3.before_use(use_of[k]);
      if (phase == Phase::Recompute) {
        const int first = e.size();
        forward_layer(e, layer, u.mb, Phase::Recompute);
        if (first < e.size()) e.op(first).alloc += full;
        if (k + 1 == steps.size() || use_of[k + 1] != use_of[k]) z3.after_use(use_of[k]);
        continue;
      }
      backward_layer(e, layer, u.mb);
      Op& last = e.op(e.size() - 1);
      last.free += stash_of(vs, i) + (recompute_whole_layers() ? full : 0);
      const bool reduced = last_mb || per_block;
      fsdp_grad_passes(e, layer, u.mb, reduced, [&] { z3.after_use(use_of[k]); });
      if (reduced) {
        const auto [dense, experts] = layer_grad_bytes();
        dp.dense += dense;
        dp.experts += experts;
        flush(e, dp, per_block);
      }
    }
    if (vs > 0)
      e.async(p2p(OpKind::Send, Phase::Backward, (vs - 1) % p.pp, tag(u.mb, vs - 1, true), u.mb, "pp.send.grad"));
    if (vs == 0) embedding(e, u.mb, true);
  }

  // After the last unit: embedding (first stage) and output projection and final LayerNorm
  // (last stage) gradients, the last bucket, the optimizer. The last stage holds its own
  // output projection unless it is the first stage's tied table (rank_memory's "head").
  void epilogue(Emitter& e, int s, DpState& dp) {
    const Bytes emb = static_cast<Bytes>(static_cast<double>(m.vocab) * m.hidden / p.tensor_size()) * P;
    if (s == 0) dp.dense += emb;
    if (s == p.pp - 1) dp.dense += (p.pp > 1 || !m.tied_embeddings ? emb : 0) + static_cast<Bytes>(m.norm_params()) * P;
    flush(e, dp, true);
    optimizer(e, dp, s);
  }

  Role role(int s) {
    Role r;
    r.name = "stage " + std::to_string(s);
    r.stage = s;
    Emitter e(r);
    DpState dp;
    // overlap_param_gather: the previous step's parameter all-gather, under this step's forward.
    if (p.gathers_params() && p.stack.overlap_param_gather) e.async(param_gather_op(held_params(s) / p.grad_ranks()));
    for (const Unit& u : pipeline_order(p.pp, p.vchunks, p.microbatches, s)) unit(e, s, u, dp);
    epilogue(e, s, dp);
    return r;
  }

  // Megatron's finalize_model_grads under sp, after the DP reduction: every tp rank holds the
  // norms' weights and biases (4h per layer; 2h with RMSNorm) and the row-parallel biases (2h with biases)
  // whole, but computed their gradients from its 1/t of the tokens, so those gradients are
  // all-reduced over tp, as fp32 main gradients, for all the layers of the stage.
  void sp_grads_allreduce(Emitter& e, int s) {
    const int layers = p.layers_on_stage(m.layers, s);
    if (!p.sp || p.tp < 2 || layers == 0) return;
    // MLA's down projections are duplicated over tp too (Megatron-core marks them sequence-parallel).
    const double mla_down =
        m.mla() ? static_cast<double>(m.hidden) * m.mla_latent() + m.q_lora_rank + m.kv_lora_rank : 0.0;
    const double per_layer = 2 * m.norm_params() + (m.bias ? 2.0 * m.hidden : 0.0) + mla_down;
    const auto bytes = static_cast<Bytes>(per_layer * layers) * 4;
    e.blocking(collective(Phase::Optimizer, Stream::Tp, CollKind::AllReduce, MeshAxis::tp(), p.tp, bytes,
                          "tp.allreduce.sp_grads", -1, -1));
  }

  // The optimizer step over the parameters this rank updates (its 1/dp shard under ZeRO 1-2,
  // the distributed optimizer), as the stack runs it (TrainingStack::optimizer), per element:
  //   grad_norm   read the fp32 gradients once (the global norm for clipping)
  //   clip        torch's clip_grad_norm_: scale them by the clamped coefficient, always (read
  //               and write); Megatron scales only when the norm exceeds the clip (not counted)
  //   adam        AdamW on fp32 weights and moments: fused, read p, g, m, v and write p, m, v
  //               (28 bytes); torch-loop: eight PyTorch ops (m.mul_, m.add_, v.mul_, v.addcmul_,
  //               sqrt, the bias-correction divide, add_(eps), param.addcdiv_), each reading its
  //               operands and writing its result (80 bytes; a decoupled weight decay would add
  //               param.mul_, 8 more: llm-foundry's MPT recipes set weight_decay 0)
  //   copy_params fp32 weights -> P-byte model weights (mixed precision only)
  //   zero_grads  Megatron clears the fp32 gradient buffer of every parameter the rank holds;
  //               PyTorch's zero_grad(set_to_none) frees them instead
  void optimizer(Emitter& e, DpState& dp, int s) {
    for (int op : dp.ops) e.wait_for(op);
    sp_grads_allreduce(e, s);
    const double params = held_params(s);
    const double updated = p.zero >= 1 && p.zero < 3 ? params / p.grad_ranks() : params;
    auto pass = [&](const char* name, KernelKind kind, double flops, double bytes) {
      e.compute(Phase::Optimizer, name, -1, -1, Kernel::elementwise(kind, flops, bytes, 4));
    };
    const OptimizerImpl impl = p.stack.optimizer;
    pass("optimizer.grad_norm", KernelKind::Optimizer, 2 * updated, 4 * updated);
    if (impl != OptimizerImpl::Megatron) pass("optimizer.clip", KernelKind::Optimizer, updated, 8 * updated);
    const auto n = static_cast<std::int64_t>(std::ceil(updated));
    if (impl == OptimizerImpl::TorchLoop)
      pass("optimizer.adam", KernelKind::Optimizer, 12 * updated, 80 * updated);
    else
      e.compute(Phase::Optimizer, "optimizer.adam", -1, -1,
                n > 0 ? Kernel::rowwise(KernelKind::Optimizer, KernelFn::AdamW, 1, n, 12 * updated, 28 * updated, 4)
                      : Kernel::elementwise(KernelKind::Optimizer, 0, 0, 4));
    if (P < 4) pass("optimizer.copy_params", KernelKind::Elementwise, updated, (4.0 + P) * updated);
    if (impl == OptimizerImpl::Megatron) pass("optimizer.zero_grads", KernelKind::Memcpy, 0, 4 * params);
    if (p.gathers_params() && !p.stack.overlap_param_gather) e.blocking(param_gather_op(updated));
  }

  // The parameters stage s's rank holds (its weights over P; sharded under ZeRO 3).
  double held_params(int s) const {
    double weights = 0;
    for (const MemoryItem& it : rank_memory(m, p, s).items)
      if (it.category == "weights") weights += static_cast<double>(it.bytes);
    return weights / P;
  }

  // ZeRO 1-2: the all-gather over dp x cp of the parameters, each rank contributing the
  // `updated` ones (its share).
  Op param_gather_op(double updated) const {
    const Bytes shard = static_cast<Bytes>(updated) * P;
    return collective(Phase::Optimizer, Stream::Dp, CollKind::AllGather, ctx.dp_axis, p.grad_ranks(),
                      shard * p.grad_ranks(), "zero.allgather.params", -1, -1);
  }
};

}  // namespace plan

std::vector<PipelineUnit> pipeline_units(const ParallelSpec& p, int stage) {
  std::vector<PipelineUnit> out;
  for (const plan::Unit& u : plan::pipeline_order(p.pp, p.vchunks, p.microbatches, stage))
    out.push_back({u.forward, u.mb, u.chunk});
  return out;
}

namespace {
// Specs as a caller built them (not a resolved scenario): the model first, then the layout on
// its own GPUs.
CheckedLayout check_specs(const ModelSpec& m, const ParallelSpec& p) {
  validate_model(m, "model");
  return check_layout(m, p, p.world_size());
}
}  // namespace

struct UnitPlanner::Impl {
  CheckedLayout layout;  // the planner refers to these copies
  plan::Planner planner;
  std::vector<plan::Planner::DpState> dp;
  explicit Impl(const CheckedLayout& l)
      : layout(l), planner(layout.model(), layout.parallel()), dp(static_cast<std::size_t>(layout.parallel().pp)) {}
};

UnitPlanner::UnitPlanner(const CheckedLayout& layout) : impl_(std::make_unique<Impl>(layout)) {}
UnitPlanner::UnitPlanner(const ModelSpec& m, const ParallelSpec& p) : UnitPlanner(check_specs(m, p)) {}
UnitPlanner::~UnitPlanner() = default;

Role UnitPlanner::unit(int stage, const PipelineUnit& u) {
  Role r;
  r.name = "stage " + std::to_string(stage);
  r.stage = stage;
  plan::Emitter e(r);
  auto& dp = impl_->dp[static_cast<std::size_t>(stage)];
  impl_->planner.unit(e, stage, plan::Unit{u.forward, u.microbatch, u.chunk}, dp);
  dp.ops.clear();  // indices into this unit's role
  return r;
}

Role UnitPlanner::epilogue(int stage) {
  Role r;
  r.name = "stage " + std::to_string(stage);
  r.stage = stage;
  plan::Emitter e(r);
  impl_->planner.epilogue(e, stage, impl_->dp[static_cast<std::size_t>(stage)]);
  return r;
}

Schedule plan_collectives(const CollectiveWorkload& w) {
  if (w.ranks < 1) throw Error("workload.ranks: " + std::to_string(w.ranks) + " must be >= 1");
  if (w.bytes < 0) throw Error("workload.bytes: must be >= 0");
  if (w.iterations < 1) throw Error("workload.iterations: " + std::to_string(w.iterations) + " must be >= 1");
  Schedule s;
  s.axes = {{"rank", w.ranks}};
  MeshAxis axis = MeshAxis::rank();
  int group_size = w.ranks;
  if (!w.mesh.empty()) {
    s.axes = w.mesh;
    int size = 1;
    std::string names;
    for (const auto& [name, n] : w.mesh) {
      if (n < 1) throw Error("workload.mesh: dimension " + name + " has size " + std::to_string(n) + "; use >= 1");
      size *= n;
      names += name + ", ";
    }
    if (size != w.ranks)
      throw Error("workload.mesh: " + std::to_string(size) + " ranks but workload.ranks is " + std::to_string(w.ranks) +
                  "; make them agree");
    axis = MeshAxis::parse(w.group, "workload.group");
    group_size = size;
    if (w.group != "all") {
      const auto it = std::find_if(w.mesh.begin(), w.mesh.end(), [&](const auto& d) { return d.first == w.group; });
      if (it == w.mesh.end())
        throw Error("workload.group: '" + w.group + "' is not a dimension of workload.mesh; use one of " + names +
                    "all");
      group_size = it->second;
    }
  }
  s.pp_axis = {};
  Role r;
  r.name = "all ranks";
  for (int i = 0; i < w.iterations; ++i) {
    Op op = plan::collective(Phase::Forward, Stream::Dp, w.kind, axis, group_size, w.bytes,
                             std::string(to_string(w.kind)) + "." + std::to_string(i), -1, i);
    op.root = w.root;
    op.algorithm = w.algorithm.kind == AlgorithmChoice::Kind::Auto ? std::string() : w.algorithm.text();
    if (i > 0) op.deps.push_back(i - 1);
    r.ops.push_back(std::move(op));
  }
  s.roles.push_back(std::move(r));
  return s;
}

Schedule plan_iteration(const ModelSpec& m, const ParallelSpec& p) { return plan_iteration(check_specs(m, p)); }

Schedule plan_iteration(const CheckedLayout& layout) {
  const ModelSpec& m = layout.model();
  const ParallelSpec& p = layout.parallel();
  plan::Planner planner(m, p);
  Schedule s;
  s.axes = mesh_axes(p);
  s.roles.reserve(static_cast<std::size_t>(p.pp));
  for (int stage = 0; stage < p.pp; ++stage) s.roles.push_back(planner.role(stage));
  return s;
}

}  // namespace meshsim
