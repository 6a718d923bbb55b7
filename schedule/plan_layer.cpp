// One Megatron-family transformer layer (tp, sp, cp, moe/ep) as a list of steps, emitted
// forward in order and backward in reverse (docs/math.md sections 5, 7 and 8).
//
//   forward (tp = t, no SP)                       backward (reverse, conjugates)
//   ln1 ─ f ─ qkv ─ attention ─ proj ─ f̄ ─ drop    ... proj dgrad/wgrad ─ attention bwd ─ qkv ─ AR(f) ─ ln1
//   ln2 ─ f ─ fc1 ─ act ─ fc2 ─ f̄ ─ drop
//   f: identity forward, all-reduce backward; f̄: all-reduce forward, identity backward.
//   With SP, f becomes all-gather / reduce-scatter (g) and f̄ reduce-scatter / all-gather (ḡ).
#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>

#include "schedule/memory.h"
#include "schedule/plan_internal.h"

namespace meshsim::plan {
namespace {

struct LayerStep {
  enum class Type { Gemm, Kern, Coll, Ring } type = Type::Kern;
  std::string name;
  Kernel k{};
  bool core = false;  // attention core: what selective recomputation recomputes
  std::optional<CollKind> fwd{}, bwd{};
  MeshAxis axis{};
  int group = 1;
  Bytes bytes = 0;
  Stream stream = Stream::Tp;
  double imbalance = 1.0;
  // f (g with SP) before a column-parallel GEMM: its backward collective on the input
  // gradient runs while that GEMM computes its weight gradient (Megatron's asynchronous
  // tensor-parallel communication); with SP the GEMM's input is gathered again for the
  // weight gradient while the data gradient computes.
  bool overlaps_wgrad = false;
  // A Kern step whose backward moves other bytes than 1.5x its forward's (an FP8 cast); < 0: 1.5x.
  double bwd_bytes = -1;
  // A Coll step whose all-gathers move other bytes than `bytes` (an FP8 GEMM's input, gathered
  // in FP8); 0: bytes.
  Bytes gather_bytes = 0;
  // A tp Coll step TE's userbuffers may pipeline with its GEMM (ub_overlap): those of the
  // attention's and the dense MLP's linear layers. The MoE dispatcher's gather and scatter of the
  // routed tokens over tp are plain NCCL collectives.
  bool userbuffers = true;
};

LayerStep gemm(const std::string& name, double m, double n, double k, int P, bool core = false) {
  return LayerStep{
      .type = LayerStep::Type::Gemm, .name = name, .k = Kernel::gemm(i64(m), i64(n), i64(k), P), .core = core};
}
// A row kernel running `fn` on rows x cols (KernelFn::Pass: no shape).
LayerStep kern(const std::string& name, KernelKind kind, KernelFn fn, double rows, double cols, double flops,
               double bytes, int P, bool core = false) {
  return LayerStep{.type = LayerStep::Type::Kern,
                   .name = name,
                   .k = fn == KernelFn::Pass ? Kernel::elementwise(kind, flops, bytes, P)
                                             : Kernel::rowwise(kind, fn, dim(rows), dim(cols), flops, bytes, P),
                   .core = core};
}

LayerStep coll(const std::string& name, std::optional<CollKind> fwd, std::optional<CollKind> bwd, const MeshAxis& axis,
               int group, Bytes bytes, Stream stream) {
  return LayerStep{.type = LayerStep::Type::Coll,
                   .name = name,
                   .fwd = fwd,
                   .bwd = bwd,
                   .axis = axis,
                   .group = group,
                   .bytes = bytes,
                   .stream = stream};
}

// The steps of one layer's forward for micro-batch tokens c.tokens (= b*s/c), appended block
// by block.
class LayerSteps {
 public:
  explicit LayerSteps(const Ctx& c)
      : m(c.m),
        p(c.p),
        P(c.P),
        t(p.tp),
        cp(p.cp),
        T(c.tokens),
        h(m.hidden),
        Tn(p.sp ? T / t : T),
        b(p.micro_batch_size),
        s_local(static_cast<double>(m.seq) / cp),
        heads_local(static_cast<double>(m.heads) / t),
        // MLA: the mean of its query/key and value head widths, (d_n + d_r + d_v) / 2, gives the
        // attention's FLOPs (2 s^2 (d_qk + d_v) per head) and its K + V bytes.
        hd(m.mla() ? (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim) / 2.0 : m.head_dim()),
        kv_local(m.mla() ? heads_local * hd : hd * std::max(1.0, static_cast<double>(m.kv_heads) / t)),
        q_local(m.mla() ? heads_local * hd : h / t),
        act(static_cast<Bytes>(T * h) * P),
        ffn(m.ffn_hidden),
        up(m.ffn == FfnKind::SwiGLU ? 2 * ffn : ffn),
        // SwiGLU fused reads gate and up and writes the product; eager PyTorch runs SiLU (read
        // gate, write) and the product (read two, write) as two kernels: 5 passes, not 3.
        act_bytes_per(m.ffn == FfnKind::SwiGLU ? (p.stack.eager ? 5.0 : 3.0) : 2.0),
        act_fn(m.ffn == FfnKind::SwiGLU ? KernelFn::SwiGLU : KernelFn::Gelu) {}

  std::vector<LayerStep> steps() && {
    attention_block();
    mlp_block();
    return std::move(v);
  }

 private:
  void tp_in(const std::string& where) {  // f (or g with SP) before a column-parallel GEMM
    if (t == 1) return;
    if (p.sp)
      v.push_back(
          coll("tp.g." + where, CollKind::AllGather, CollKind::ReduceScatter, MeshAxis::tp(), t, act, Stream::Tp));
    else
      v.push_back(coll("tp.f." + where, std::nullopt, CollKind::AllReduce, MeshAxis::tp(), t, act, Stream::Tp));
    v.back().overlaps_wgrad = true;
  }
  void tp_out(const std::string& where) {  // f-bar (g-bar with SP) after a row-parallel GEMM
    if (t == 1) return;
    if (p.sp)
      v.push_back(
          coll("tp.gbar." + where, CollKind::ReduceScatter, CollKind::AllGather, MeshAxis::tp(), t, act, Stream::Tp));
    else
      v.push_back(coll("tp.fbar." + where, CollKind::AllReduce, std::nullopt, MeshAxis::tp(), t, act, Stream::Tp));
  }
  // LayerNorm or RMSNorm: the same bytes (read x, write y); RMSNorm skips the mean and the bias.
  void norm(const std::string& name) {
    const bool rms = m.norm == NormKind::RmsNorm;
    v.push_back(kern(name, KernelKind::Norm, rms ? KernelFn::RmsNorm : KernelFn::LayerNorm, Tn, h,
                     (rms ? 5 : 8) * Tn * h, 2.0 * P * Tn * h, P));
  }
  // RoPE on this rank's query and key heads after their projection (Megatron-core's
  // apply_rotary_pos_emb, TE's fused kernel): `heads` heads a token of width d, read and
  // written once each way (its backward turns the gradient back; nothing is saved). Not part
  // of the attention core, so selective recomputation does not redo it.
  void rope(double heads, double d) {
    if (m.position != PositionKind::Rope) return;
    const double rows = T * heads;
    LayerStep r =
        kern("attn.rope", KernelKind::Elementwise, KernelFn::Rope, rows, d, 3 * rows * d, 2.0 * P * rows * d, P);
    r.k.k = dim(heads);
    r.bwd_bytes = r.k.bytes;
    v.push_back(r);
  }
  void dropout_residual(const std::string& name) {
    v.push_back(kern(name, KernelKind::Elementwise, KernelFn::DropoutAdd, Tn, h, 3 * Tn * h, 4.0 * P * Tn * h, P));
  }

  // --- attention block ---
  void attention_block() {
    if (m.mla()) return latent_attention_block();
    norm("ln1");
    tp_in("attn");
    v.push_back(gemm("attn.qkv", T, h / t + 2 * kv_local, h, P));
    rope(heads_local + kv_local / hd, hd);
    attention_core();
    v.push_back(gemm("attn.proj", T, h, h / t, P));
    tp_out("attn");
    dropout_residual("attn.dropout_residual");
  }

  // Multi-head latent attention as Megatron-core runs it (MLASelfAttention, docs/math.md
  // section 4): the down projections to the latents are duplicated on every tp rank; with sp
  // they run on the rank's T/t tokens and the latents (r_q + r_kv + d_r wide, not h) are
  // all-gathered over tp; the latent norms, then the up projections (column-parallel, H/t
  // heads), the attention, and the row-parallel output projection.
  void latent_attention_block() {
    norm("ln1");
    const double rq = m.q_lora_rank, rkv = m.kv_lora_rank, dr = m.qk_rope_head_dim;
    const double dqk = m.qk_nope_head_dim + dr, dv = m.v_head_dim;
    const bool gather_latents = p.sp && t > 1 && rq > 0;
    if (!gather_latents) tp_in("attn");  // the whole activation (sp) or f's backward all-reduce
    const double Td = gather_latents ? Tn : T;
    if (rq > 0) v.push_back(gemm("attn.q_down", Td, rq, h, P));
    v.push_back(gemm("attn.kv_down", Td, rkv + dr, h, P));
    if (gather_latents) {
      v.push_back(coll("tp.g.attn_latents", CollKind::AllGather, CollKind::ReduceScatter, MeshAxis::tp(), t,
                       static_cast<Bytes>(T * m.mla_latent()) * P, Stream::Tp));
      v.back().overlaps_wgrad = true;
    }
    v.push_back(kern("attn.latent_norm", KernelKind::Norm, KernelFn::LayerNorm, T, rq + rkv, 8 * T * (rq + rkv),
                     2.0 * P * T * (rq + rkv), P));
    v.push_back(gemm("attn.q_up", T, heads_local * dqk, rq > 0 ? rq : h, P));
    v.push_back(gemm("attn.kv_up", T, heads_local * (m.qk_nope_head_dim + dv), rkv, P));
    rope(heads_local + 1, dr);  // the queries' RoPE part and the one key part the heads share
    attention_core();
    v.push_back(gemm("attn.proj", T, h, heads_local * dv, P));
    tp_out("attn");
    dropout_residual("attn.dropout_residual");
  }

  // Context parallelism: ring attention over cp ranks, one K/V block per step.
  LayerStep ring_attention() const {
    LayerStep r;
    r.type = LayerStep::Type::Ring;
    r.name = "attn.ring";
    r.core = true;
    r.axis = MeshAxis::cp();
    r.group = cp;
    r.stream = Stream::Cp;
    r.bytes = static_cast<Bytes>(2 * b * s_local * kv_local) * P;  // this rank's K and V block
    // One step's attention: b*(s/c) queries against s/c keys, heads/t heads, full block.
    const double fl = 4 * b * s_local * s_local * heads_local * hd;
    r.k = attention_kernel(b * heads_local, s_local, s_local, hd, false, fl,
                           P * (2 * T * q_local + 2 * b * s_local * kv_local), P);
    return r;
  }

  LayerStep flash_attention() const {
    const bool causal_skip = m.attention == AttentionKind::Flash;
    const double fl = 4 * b * s_local * s_local * heads_local * hd * (causal_skip ? 0.5 : 1.0);
    LayerStep a;
    a.type = LayerStep::Type::Kern;
    a.name = "attn.flash";
    a.core = true;
    a.k = attention_kernel(b * heads_local, s_local, s_local, hd, causal_skip, fl,
                           P * (2 * T * q_local + 2 * T * kv_local), P);
    return a;
  }

  void attention_core() {
    if (cp > 1) {
      v.push_back(ring_attention());
    } else if (m.attention == AttentionKind::Flash) {
      v.push_back(flash_attention());
    } else {
      const double rows = b * heads_local * s_local;  // score rows
      v.push_back(gemm("attn.scores", rows, s_local, hd, P, true));
      v.push_back(kern("attn.softmax", KernelKind::Softmax, KernelFn::Softmax, rows, s_local, 5 * rows * s_local,
                       2.0 * P * rows * s_local, P, true));
      v.push_back(kern("attn.dropout", KernelKind::Elementwise, KernelFn::Dropout, rows, s_local, rows * s_local,
                       3.0 * P * rows * s_local, P, true));
      v.push_back(gemm("attn.sv", rows, hd, s_local, P, true));
    }
  }

  // --- MLP block ---
  void mlp_block() {
    norm("ln2");
    if (!m.moe())
      dense_mlp();
    else if (p.ep == 1)
      replicated_experts();
    else
      expert_parallel();
    dropout_residual("mlp.dropout_residual");
  }

  void dense_mlp() {
    tp_in("mlp");
    v.push_back(gemm("mlp.fc1", T, up / t, h, P));
    v.push_back(kern(m.ffn == FfnKind::SwiGLU ? "mlp.swiglu" : "mlp.gelu", KernelKind::Elementwise, act_fn, T, ffn / t,
                     8 * T * ffn / t, act_bytes_per * P * T * ffn / t, P));
    v.push_back(gemm("mlp.fc2", T, h, ffn / t, P));
    tp_out("mlp");
  }

  // Megatron-core's token permutation around the experts (moe_utils.py permute/unpermute, TE's
  // fused moe_permute): a memory-bound pass each way, no FLOPs worth counting.
  //   moe.permute    gathers each of `tokens` tokens into its top_k experts' rows: reads
  //                  tokens x h, writes tokens x top_k x h; its backward sums them back.
  //   moe.unpermute  the experts' rows back into token order, weighted by the router's
  //                  probabilities: reads tokens x top_k x h, writes tokens x h; its backward
  //                  also reads the experts' rows again for the probabilities' gradient.
  //   moe.sort_chunks / moe.unsort_chunks (expert parallel with more than one local expert):
  //                  the received tokens regrouped by local expert after the dispatch and back
  //                  before the combine, rows x h read and written.
  void token_pass(const std::string& name, double fwd_bytes, double bwd_bytes) {
    LayerStep s = kern(name, KernelKind::Elementwise, KernelFn::Pass, 0, 0, 0, fwd_bytes, P);
    s.bwd_bytes = bwd_bytes;
    v.push_back(s);
  }
  void permute(double tokens) {
    const double in = tokens * h, out = tokens * m.top_k * h;
    token_pass("moe.permute", P * (in + out), P * (in + out));
  }
  void unpermute(double tokens) {
    const double in = tokens * m.top_k * h, out = tokens * h;
    token_pass("moe.unpermute", P * (in + out), P * (out + 2 * in));
  }

  // Every rank holds every expert, split over tp like a dense MLP.
  void replicated_experts() {
    tp_in("moe");
    v.push_back(gemm("moe.router", T, m.experts, h, P));
    v.push_back(
        kern("moe.topk", KernelKind::Elementwise, KernelFn::Pass, 0, 0, T * m.experts, 2.0 * P * T * m.experts, P));
    permute(T);
    const double routed = T * m.top_k;
    v.push_back(gemm("moe.fc1", routed, up / t, h, P));
    v.push_back(kern("moe.act", KernelKind::Elementwise, act_fn, routed, ffn / t, 8 * routed * ffn / t,
                     act_bytes_per * P * routed * ffn / t, P));
    v.push_back(gemm("moe.fc2", routed, h, ffn / t, P));
    unpermute(T);
    shared_experts(T, t);
    tp_out("moe");
  }

  // The shared experts as one MLP of shared_experts x ffn_hidden on `tokens` tokens, its
  // weights split `split` ways (t beside replicated experts; whole on the T/t tokens a rank
  // keeps with expert parallelism, the same FLOPs).
  void shared_experts(double tokens, double split) {
    if (m.shared_experts <= 0) return;
    const double n = m.shared_experts;
    v.push_back(gemm("moe.shared.fc1", tokens, n * up / split, h, P));
    v.push_back(kern("moe.shared.act", KernelKind::Elementwise, act_fn, tokens, n * ffn / split,
                     8 * tokens * n * ffn / split, act_bytes_per * P * tokens * n * ffn / split, P));
    v.push_back(gemm("moe.shared.fc2", tokens, h, n * ffn / split, P));
  }

  // Expert parallel: this rank's tokens (its 1/t share when tp > 1) go to the ranks that own
  // their top-k experts over the ep group (ParallelSpec::ep_axis). With etp = 1 experts are
  // whole; with etp = t > 1 (Megatron-core's default) each is split over the tp ranks like a
  // dense MLP: the routed tokens are all-gathered over tp before the experts and
  // reduce-scattered after them (its MoE all-to-all dispatcher), the same FLOPs on t times the
  // rows and 1/t of the columns.
  void expert_parallel() {
    const double Te = T / t;
    const Bytes a2a = static_cast<Bytes>(Te * m.top_k * h) * P;
    v.push_back(gemm("moe.router", Te, m.experts, h, P));
    v.push_back(
        kern("moe.topk", KernelKind::Elementwise, KernelFn::Pass, 0, 0, Te * m.experts, 2.0 * P * Te * m.experts, P));
    shared_experts(Te, 1);
    permute(Te);
    LayerStep d = coll("ep.dispatch", CollKind::AllToAll, CollKind::AllToAll, p.ep_axis(), p.ep, a2a, Stream::Ep);
    d.imbalance = p.ep_imbalance;
    v.push_back(d);
    const int et = p.expert_tp();
    const double routed = Te * m.top_k * p.ep_imbalance * et;  // tokens at the busiest expert rank
    const Bytes gathered = static_cast<Bytes>(routed * h) * P;
    if (et > 1) {
      v.push_back(coll("tp.gather.experts", CollKind::AllGather, CollKind::ReduceScatter, MeshAxis::tp(), et, gathered,
                       Stream::Tp));
      v.back().userbuffers = false;
    }
    // The received tokens come grouped by source rank: with several local experts they are
    // regrouped by expert, their rows read and written, and back after the experts.
    const bool sort = m.experts / p.ep > 1;
    const double sorted = 2.0 * static_cast<double>(gathered);
    if (sort) token_pass("moe.sort_chunks", sorted, sorted);
    v.push_back(gemm("moe.fc1", routed, up / et, h, P));
    v.push_back(kern("moe.act", KernelKind::Elementwise, act_fn, routed, ffn / et, 8 * routed * ffn / et,
                     act_bytes_per * P * routed * ffn / et, P));
    v.push_back(gemm("moe.fc2", routed, h, ffn / et, P));
    if (sort) token_pass("moe.unsort_chunks", sorted, sorted);
    if (et > 1) {
      v.push_back(coll("tp.scatter.experts", CollKind::ReduceScatter, CollKind::AllGather, MeshAxis::tp(), et, gathered,
                       Stream::Tp));
      v.back().userbuffers = false;
    }
    LayerStep cmb = d;
    cmb.name = "ep.combine";
    v.push_back(cmb);
    unpermute(Te);
    if (t > 1 && !p.sp)  // restore the tp-replicated activation
      v.push_back(
          coll("tp.gather.moe", CollKind::AllGather, CollKind::ReduceScatter, MeshAxis::tp(), t, act, Stream::Tp));
  }

  const ModelSpec& m;
  const ParallelSpec& p;
  const int P, t, cp;
  const double T, h;
  const double Tn;  // tokens LayerNorm and dropout run on
  const double b, s_local;
  const double heads_local;
  const double hd;
  const double kv_local;  // K/V width per rank
  const double q_local;   // query (and attention output) width per rank
  const Bytes act;        // b*s/c*h*P
  const double ffn;
  const double up;  // gate + up for SwiGLU
  const double act_bytes_per;
  const KernelFn act_fn;
  std::vector<LayerStep> v;
};

// FP8 (TrainingStack::fp8, docs/compute.md "FP8"): every linear layer of the block (not
// attention's core, not the MoE router) multiplies 1-byte operands, after a cast step: its
// forward casts the input X (m x k) to FP8 with the transposed copy the weight gradient needs,
// its backward the output gradient dY (m x n) likewise. Per element, reading bf16 and writing
// two FP8 copies is 4 bytes; current scaling (tensorwise) reads the tensor once more for its
// amax (6); block recipes write a scale per block beside each copy. A cast fuses into the
// kernel that produced its tensor where Transformer Engine fuses it: a norm or activation
// before the GEMM writes its output as the FP8 copies (no extra bytes), as does the
// activation's backward for the GEMM before it; current scaling cannot fuse (the amax needs
// the whole tensor first).
double fp8_cast_bytes(Fp8Recipe r, bool fused) {
  switch (r) {
    case Fp8Recipe::Off:
      return 0;
    case Fp8Recipe::Delayed:
      return fused ? 0 : 4;
    case Fp8Recipe::Tensorwise:
      return 6;
    case Fp8Recipe::Blockwise:  // a 4-byte scale per 128 elements, for each of the two copies
      return (fused ? 0 : 4) + 2 * 4.0 / 128;
    case Fp8Recipe::Mxfp8:  // a 1-byte E8M0 scale per 32 elements, for each copy
      return (fused ? 0 : 4) + 2 * 1.0 / 32;
  }
  return 0;
}

bool feeds_fp8(const LayerStep& s) {
  if (s.type != LayerStep::Type::Kern) return false;
  return s.k.kind == KernelKind::Norm || s.k.fn == KernelFn::Gelu || s.k.fn == KernelFn::SwiGLU;
}

std::vector<LayerStep> with_fp8(const std::vector<LayerStep>& steps, Fp8Recipe recipe) {
  std::vector<LayerStep> out;
  auto compute_near = [&](std::size_t i, int dir) -> const LayerStep* {
    for (auto j = static_cast<std::ptrdiff_t>(i) + dir; j >= 0 && j < static_cast<std::ptrdiff_t>(steps.size());
         j += dir)
      if (steps[static_cast<std::size_t>(j)].type != LayerStep::Type::Coll) return &steps[static_cast<std::size_t>(j)];
    return nullptr;
  };
  auto fp8_gemm = [](const LayerStep* s) {
    return s != nullptr && s->type == LayerStep::Type::Gemm && !s->core && s->name != "moe.router";
  };
  for (std::size_t i = 0; i < steps.size(); ++i) {
    LayerStep s = steps[i];
    // Sequence parallelism's all-gather before an FP8 GEMM gathers its input already cast
    // (Transformer Engine's FP8 all-gather): 1 byte an element, in the forward and the
    // backward's re-gather.
    if (s.type == LayerStep::Type::Coll && s.fwd == CollKind::AllGather && fp8_gemm(compute_near(i, +1)))
      s.gather_bytes = std::max<Bytes>(1, s.bytes / std::max(1, compute_near(i, +1)->k.dtype_bytes));
    if (!fp8_gemm(&s)) {
      out.push_back(std::move(s));
      continue;
    }
    const LayerStep* before = compute_near(i, -1);
    const LayerStep* after = compute_near(i, +1);
    const double in = static_cast<double>(s.k.m) * static_cast<double>(s.k.k);
    const double grad = static_cast<double>(s.k.m) * static_cast<double>(s.k.n);
    const double fwd_bytes = in * fp8_cast_bytes(recipe, before && feeds_fp8(*before));
    LayerStep cast{
        .type = LayerStep::Type::Kern,
        .name = s.name + ".fp8_cast",
        .k = Kernel::elementwise(KernelKind::Elementwise, fwd_bytes > 0 ? in : 0, fwd_bytes, s.k.dtype_bytes)};
    cast.bwd_bytes = grad * fp8_cast_bytes(recipe, after && feeds_fp8(*after));
    out.push_back(std::move(cast));
    s.k.dtype_bytes = 1;
    s.k.bytes = static_cast<double>(s.k.m * s.k.k + s.k.k * s.k.n + s.k.m * s.k.n);
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<LayerStep> layer_steps(const Ctx& c) {
  std::vector<LayerStep> steps = LayerSteps(c).steps();
  if (c.p.stack.fp8 == Fp8Recipe::Off) return steps;  // moved, not copied
  return with_fp8(steps, c.p.stack.fp8);
}

// FP8's weight casts: at a layer's first micro-batch, Transformer Engine casts each FP8 linear
// layer's weight (k x n) to its two FP8 copies (reading bf16, writing both: 4 bytes a weight,
// plus the block recipes' scales) and keeps them for the iteration's other micro-batches.
double fp8_weight_cast_bytes(const std::vector<LayerStep>& steps, Fp8Recipe recipe) {
  double weights = 0;
  for (const LayerStep& s : steps)
    if (s.type == LayerStep::Type::Gemm && s.k.dtype_bytes == 1)
      weights += static_cast<double>(s.k.k) * static_cast<double>(s.k.n);
  return weights * fp8_cast_bytes(recipe, false);
}

Op make_op(Phase phase, const LayerStep& s, CollKind kind, int layer, int mb) {
  const Bytes bytes = kind == CollKind::AllGather && s.gather_bytes > 0 ? s.gather_bytes : s.bytes;
  Op op = collective(phase, s.stream, kind, s.axis, s.group, bytes, s.name, layer, mb);
  op.imbalance = s.imbalance;
  return op;
}

// Ring attention (docs/math.md section 7): c steps; at step j the rank computes its queries
// against the K/V block in hand while passing that block to the next rank; a log-sum-exp
// merge folds each step into the running output; the backward's last hop returns each
// block's dK, dV to its owner. Causal masks: with load balancing every
// rank does half a block per step; without it the ranks run in lockstep behind the one
// that computes a full block at every step but the first.
void ring(const Ctx& c, Emitter& e, const LayerStep& s, Phase phase, int layer, int mb, bool backward) {
  const int steps = c.p.cp;
  const bool causal_skip = c.m.attention == AttentionKind::Flash;
  const double merge_bytes = 4.0 * 4 * c.tokens * c.m.hidden / c.p.tp;  // fp32 (v, lse) read+write
  int arrived = -1;
  for (int j = 0; j < steps; ++j) {
    if (arrived >= 0) e.wait_for(arrived);
    int transfer = -1;
    if (j + 1 < steps) {
      Op op = make_op(phase, s, CollKind::SendRecv, layer, mb);
      op.name = backward ? "cp.ring.kv+dkv" : "cp.ring.kv";
      if (backward) op.bytes *= 2;  // K, V forward along the ring; dK, dV travel with them
      transfer = e.async(std::move(op));
    }
    double factor = 1.0;
    if (causal_skip) factor = (c.p.cp_balance || j == 0) ? 0.5 : 1.0;
    Kernel k = s.k;
    k.flops *= factor * (backward ? 2 : 1);
    k.bytes *= backward ? 2 : 1;
    k.causal = factor < 1;  // half a block's work: a causal mask over it
    e.compute(phase, std::string(backward ? "attn.ring.bwd" : "attn.ring") + "." + std::to_string(j), layer, mb, k);
    if (j > 0 && !backward)
      e.compute(phase, "attn.lse_merge", layer, mb,
                Kernel::rowwise(KernelKind::Elementwise, KernelFn::LseMerge, dim(c.tokens * c.m.heads / c.p.tp),
                                dim(c.m.head_dim()), 3 * c.tokens * c.m.hidden / c.p.tp, merge_bytes, 4));
    arrived = transfer;
  }
  // After the last step each rank holds another rank's block with its dK, dV complete: one
  // more hop brings them home before the K/V projection's backward can use them.
  if (backward && steps > 1) {
    Op home = make_op(phase, s, CollKind::SendRecv, layer, mb);
    home.name = "cp.ring.dkv";
    e.blocking(std::move(home));
  }
}

void emit_forward(const Ctx& c, Emitter& e, const LayerStep& s, Phase phase, int layer, int mb) {
  switch (s.type) {
    case LayerStep::Type::Gemm:
    case LayerStep::Type::Kern:
      if (s.k.bytes == 0 && s.k.flops == 0) break;  // an FP8 cast fused into its tensor's producer
      e.compute(phase, s.name, layer, mb, s.k);
      break;
    case LayerStep::Type::Coll:
      if (s.fwd) e.blocking(make_op(phase, s, *s.fwd, layer, mb));
      break;
    case LayerStep::Type::Ring:
      ring(c, e, s, phase, layer, mb, false);
      break;
  }
}

// The backward GEMMs of C[m,n] = A[m,k] B[k,n]: dA = dC B^T (m x k, inner n) and
// dB = A^T dC (k x n, inner m).
Kernel dgrad_of(const Kernel& f) { return Kernel::gemm(f.m, f.k, f.n, f.dtype_bytes); }
Kernel wgrad_of(const Kernel& f) { return Kernel::gemm(f.k, f.n, f.m, f.dtype_bytes); }

// Backward of an elementwise or row kernel: twice its forward FLOPs; it reads the saved
// input and the output gradient and writes the input gradient, three tensors where the
// forward touched two, hence 1.5x its forward bytes.
constexpr double kBackwardBytesFactor = 1.5;

void emit_backward(const Ctx& c, Emitter& e, const LayerStep& s, int layer, int mb) {
  const Phase ph = Phase::Backward;
  switch (s.type) {
    case LayerStep::Type::Gemm:
      e.compute(ph, s.name + ".dgrad", layer, mb, dgrad_of(s.k));
      e.compute(ph, s.name + ".wgrad", layer, mb, wgrad_of(s.k));
      break;
    case LayerStep::Type::Kern: {
      if (s.bwd_bytes == 0) break;  // an FP8 cast fused into its gradient's producer
      Kernel k = s.k;
      k.flops = s.bwd_bytes > 0 ? s.bwd_bytes / 4 : k.flops * 2;  // a cast: about one operation per element
      k.bytes = s.bwd_bytes > 0 ? s.bwd_bytes : k.bytes * kBackwardBytesFactor;
      e.compute(ph, s.name + ".bwd", layer, mb, k);
      break;
    }
    case LayerStep::Type::Coll:
      if (s.bwd) e.blocking(make_op(ph, s, *s.bwd, layer, mb));
      break;
    case LayerStep::Type::Ring:
      ring(c, e, s, ph, layer, mb, true);
      break;
  }
}

// A column-parallel GEMM's backward with its input collective `in` overlapped, as Megatron's
// LinearWithGradAccumulationAndAsyncCommunication runs it:
//   SP:     all-gather the input again (async) | dgrad; reduce-scatter dgrad (async) | wgrad
//   no SP:  dgrad; all-reduce dgrad (async) | wgrad
// The next compute op (the LayerNorm's backward) waits for the gradient collective.
void emit_overlapped_backward(const Ctx& c, Emitter& e, const LayerStep& gemm, const LayerStep& in, int layer, int mb) {
  const Phase ph = Phase::Backward;
  int gathered = -1;
  if (c.p.sp) {
    Op ag = make_op(ph, in, CollKind::AllGather, layer, mb);
    ag.name = in.name + ".regather";
    gathered = e.async(std::move(ag));
  }
  e.compute(ph, gemm.name + ".dgrad", layer, mb, dgrad_of(gemm.k));
  const int reduced = e.async(make_op(ph, in, *in.bwd, layer, mb));
  if (gathered >= 0) e.wait_for(gathered);
  e.compute(ph, gemm.name + ".wgrad", layer, mb, wgrad_of(gemm.k));
  e.wait_for(reduced);
}

// Transformer Engine's userbuffers TP-comm overlap (TrainingStack::tp_comm_overlap, with sp):
//   all-gather | GEMM  (ring exchange): the GEMM starts on the chunks in hand while the rest
//       arrive over the copy engines; only the last chunk's 1/t of the GEMM waits for the
//       whole gather: time = max(AG, G (t-1)/t) + G/t;
//   GEMM | reduce-scatter (pipeline, kUbSplits chunks): each finished chunk's reduce-scatter
//       runs under the next chunks, whose GEMM loses the SMs the reduce-scatter kernels hold
//       (Kernel::sms_reserved); the last chunk's reduce-scatter is exposed:
//       time = G/n + max(RS (n-1)/n, G' (n-1)/n) + RS/n.
// The backward's all-gather before a row-parallel GEMM's data gradient (proj_dgrad,
// fc2_dgrad) is a ring exchange too.
constexpr int kUbSplits = 4;  // NeMo's userbuffers configurations: num_splits 4

bool ub_overlap(const Ctx& c) { return c.p.stack.tp_comm_overlap && c.p.sp && c.p.tp > 1 && c.p.mesh2d == 0; }

Kernel rows_part(const Kernel& g, double frac, int sms_reserved = 0) {
  Kernel k = Kernel::gemm(dim(static_cast<double>(g.m) * frac), g.n, g.k, g.dtype_bytes);
  k.sms_reserved = sms_reserved;
  return k;
}

Op part_of(Op op, double frac, int group) {
  const auto per_rank = static_cast<Bytes>(static_cast<double>(op.bytes) * frac / group);
  op.bytes = std::max<Bytes>(per_rank, 1) * group;
  op.holds_no_sms = true;  // its SMs are the GEMM's sms_reserved
  return op;
}

// A ring-exchange all-gather `ag` feeding the GEMM `g`.
void emit_gathered_gemm(const Ctx& c, Emitter& e, Op ag, const Kernel& g, Phase phase, const std::string& name,
                        int layer, int mb) {
  const double t = c.p.tp;
  ag.holds_no_sms = true;  // copy engines
  const int gathered = e.async(std::move(ag));
  e.compute(phase, name, layer, mb, rows_part(g, (t - 1) / t));
  e.wait_for(gathered);
  e.compute(phase, name, layer, mb, rows_part(g, 1 / t));
}

// The GEMM `g` feeding a pipelined reduce-scatter `rs`.
void emit_scattered_gemm(const Ctx& c, Emitter& e, const Op& rs, const Kernel& g, Phase phase, const std::string& name,
                         int layer, int mb) {
  const double n = kUbSplits, rest = (n - 1) / n;
  e.compute(phase, name, layer, mb, rows_part(g, 1 / n));
  const int early = e.async(part_of(rs, rest, c.p.tp));
  e.compute(phase, name, layer, mb, rows_part(g, rest, c.p.stack.tp_overlap_sms));
  e.blocking(part_of(rs, 1 / n, c.p.tp));
  e.wait_for(early);
}

}  // namespace

void layer_forward(const Ctx& c, Emitter& e, int layer, int mb, Phase phase) {
  const std::vector<LayerStep> steps = layer_steps(c);
  if (c.p.stack.fp8 != Fp8Recipe::Off && mb == 0 && phase == Phase::Forward) {
    const double bytes = fp8_weight_cast_bytes(steps, c.p.stack.fp8);
    e.compute(phase, "fp8.weight_cast", layer, mb, Kernel::elementwise(KernelKind::Elementwise, bytes / 4, bytes, c.P));
  }
  const bool ub = ub_overlap(c) && phase == Phase::Forward;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const LayerStep& s = steps[i];
    const LayerStep* next = i + 1 < steps.size() ? &steps[i + 1] : nullptr;
    const bool tp_coll = s.type == LayerStep::Type::Coll && s.axis == MeshAxis::tp() && s.fwd && s.userbuffers;
    if (ub && tp_coll && *s.fwd == CollKind::AllGather && next && next->type == LayerStep::Type::Gemm) {
      emit_gathered_gemm(c, e, make_op(phase, s, CollKind::AllGather, layer, mb), next->k, phase, next->name, layer,
                         mb);
      ++i;
      continue;
    }
    const bool rs_next = next && next->type == LayerStep::Type::Coll && next->axis == MeshAxis::tp() && next->fwd &&
                         *next->fwd == CollKind::ReduceScatter && next->userbuffers;
    if (ub && s.type == LayerStep::Type::Gemm && rs_next) {
      emit_scattered_gemm(c, e, make_op(phase, *next, CollKind::ReduceScatter, layer, mb), s.k, phase, s.name, layer,
                          mb);
      ++i;
      continue;
    }
    emit_forward(c, e, s, phase, layer, mb);
  }
}

// torchtitan's per-op selective recomputation (RecomputeMode::Ops): the block's forward again,
// but for what its policy saved: the odd-numbered matrix multiplies (op_sac_gemms), the fused
// attention kernel and the reduce-scatters.
void recompute_ops(const Ctx& c, Emitter& e, const std::vector<LayerStep>& steps, int layer, int mb) {
  const std::vector<OpSacGemm> gemms = op_sac_gemms(c.m, c.p);
  for (const LayerStep& s : steps) {
    if (s.type == LayerStep::Type::Gemm) {
      const auto g = std::find_if(gemms.begin(), gemms.end(), [&](const OpSacGemm& o) { return o.name == s.name; });
      const double fraction = g == gemms.end() ? 1.0 : g->recomputed_fraction;
      if (fraction > 0)
        e.compute(Phase::Recompute, s.name, layer, mb,
                  Kernel::gemm(s.k.m, dim(static_cast<double>(s.k.n) * fraction), s.k.k, s.k.dtype_bytes));
    } else if ((s.type == LayerStep::Type::Kern && !s.core) ||
               (s.type == LayerStep::Type::Coll && s.fwd && *s.fwd != CollKind::ReduceScatter)) {
      emit_forward(c, e, s, Phase::Recompute, layer, mb);
    }
  }
}

void layer_backward(const Ctx& c, Emitter& e, int layer, int mb) {
  const std::vector<LayerStep> steps = layer_steps(c);
  if (c.p.recompute.mode == RecomputeMode::Selective) {
    for (const LayerStep& s : steps)
      if (s.core) emit_forward(c, e, s, Phase::Recompute, layer, mb);
  }
  if (c.p.recompute.mode == RecomputeMode::Ops) recompute_ops(c, e, steps, layer, mb);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const auto next = std::next(it);
    if (ub_overlap(c) && it->type == LayerStep::Type::Coll && it->axis == MeshAxis::tp() && it->userbuffers &&
        it->bwd && *it->bwd == CollKind::AllGather && next != steps.rend() && next->type == LayerStep::Type::Gemm) {
      emit_gathered_gemm(c, e, make_op(Phase::Backward, *it, CollKind::AllGather, layer, mb), dgrad_of(next->k),
                         Phase::Backward, next->name + ".dgrad", layer, mb);
      e.compute(Phase::Backward, next->name + ".wgrad", layer, mb, wgrad_of(next->k));
      it = next;
      continue;
    }
    if (c.p.tp_overlap && it->type == LayerStep::Type::Gemm && next != steps.rend() && next->overlaps_wgrad &&
        next->bwd) {
      emit_overlapped_backward(c, e, *it, *next, layer, mb);
      it = next;
      continue;
    }
    emit_backward(c, e, *it, layer, mb);
  }
}

}  // namespace meshsim::plan
