// The parallel layout of a training run: how the GPUs are split among data, tensor,
// sequence, context, pipeline and expert parallelism (docs/math.md sections 5-13).
//
//   ParallelSpec p;  p.tp = 8;  p.sp = true;  p.pp = 8;  p.vchunks = 2;  p.dp = 16;
//   p.microbatches = 64;
//   validate_parallel(p, model_preset("gpt3-175b"), /*gpus=*/1024);   // throws on misfit
//
// World size = dp x pp x cp x (tp, or q x q with mesh2d = q). Expert parallelism does not
// add GPUs: the ep ranks of an MoE layer are carved out of the ranks of a stage, as in
// Megatron-Core. With expert tensor parallel etp = tp (Megatron's default) experts are split
// over tp like a dense MLP and the ep ranks come from dp (dp must be a multiple of ep); with
// etp = 1 experts are whole and the ep ranks span tp, then cp, then dp (ep a multiple of
// tp x cp), as DeepSeek-V3's recipe runs EP 64 over TP 2 x DP 32.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "schedule/model.h"
#include "schedule/stack.h"
#include "topology/mesh_axis.h"

namespace meshsim {

// Ops: torchtitan's per-op selective recomputation (selective_ac_option = "op"; docs/memory.md):
// the outputs of every other matrix multiply, of the fused attention kernel and of the
// reduce-scatters are saved, the rest of the block is recomputed before its backward.
enum class RecomputeMode { None, Full, Selective, EveryK, Sqrt, Ops };
const char* to_string(RecomputeMode m);

struct Recompute {
  RecomputeMode mode = RecomputeMode::None;
  int every_k = 0;  // EveryK: checkpoint every K layers, recompute a K-layer segment
  // "none", "full", "selective", "every:K", "sqrt", "ops"; throws Error naming `field`.
  static Recompute parse(const std::string& text, const std::string& field);
  std::string to_string() const;
};

// Upper limits of a layout (docs/scenarios.md), checked by validate_parallel before anything
// is planned: GPUs (and each parallel degree), micro-batches and their size, tokens of one
// micro-batch, and layer passes per pipeline stage (micro-batches x layers per stage: the
// schedule holds an op list per pass).
inline constexpr int kMaxGpus = 1 << 20;
inline constexpr int kMaxMicrobatches = 1 << 20;
inline constexpr std::int64_t kMaxTokensPerMicrobatch = std::int64_t{1} << 31;
inline constexpr std::int64_t kMaxLayerPasses = std::int64_t{1} << 20;

struct ParallelSpec {
  int dp = 1;
  int zero = 0;               // ZeRO stage 0..3 (sharding over dp)
  int tp = 1;                 // Megatron 1D tensor parallel
  bool kv_replicate = false;  // GQA: allow tp > kv_heads by replicating K/V heads
  bool sp = false;            // sequence parallel (with tp)
  int cp = 1;                 // context parallel, ring attention
  bool cp_balance = true;     // causal load balancing (chunks i and 2c-1-i)
  // Pipeline sends without sp: each tp rank sends 1/tp of the activation over its own link and
  // the receiving stage all-gathers it over tp (Megatron's scatter/gather optimization).
  bool pp_scatter_gather = true;
  // Megatron-LM's asynchronous TP backward (LinearWithGradAccumulationAndAsyncCommunication):
  // a column-parallel GEMM's input-gradient collective runs under its weight-gradient GEMM
  // (with sp, the input is re-gathered under the dgrad GEMM). false: the backward runs each
  // collective after its GEMMs, one after another, as PyTorch autograd does with a plain
  // all-reduce Function (Megatron-LM before mid-2021, the Optimus authors' code).
  bool tp_overlap = true;
  int pp = 1;                 // pipeline stages
  int vchunks = 1;            // interleaved 1F1B: model chunks per device (1 = plain 1F1B)
  int microbatches = 1;       // m: micro-batches per iteration (per dp replica)
  int micro_batch_size = 1;   // b: sequences per micro-batch
  int ep = 1;                 // expert parallel (MoE)
  int etp = 0;                // expert tensor parallel with ep > 1: tp (0, the default) or 1
  double ep_imbalance = 1.0;  // tokens at the busiest expert rank / mean (>= 1)
  int mesh2d = 0;             // q > 0: 2D SUMMA tensor parallel on a q x q mesh instead of tp
  Recompute recompute;
  // Megatron's --distribute-saved-activations: under whole-layer recomputation (full,
  // every:K, sqrt) without sp, each tp rank keeps 1/tp of a checkpointed layer input and the
  // input is all-gathered over tp before its segment is recomputed.
  bool distribute_checkpoints = false;
  double dp_bucket_mib = 25;  // DP gradient bucket size
  // The software that runs the layout (schedule/stack.h); a scenario's top-level `stack:`.
  TrainingStack stack;
  // Uneven pipeline stages: the layers of each virtual stage, pp x vchunks entries in
  // virtual-stage order (model chunk c of stage s is entry c * pp + s), adding up to the
  // model's layers; 0 is allowed (a slot holding only the embedding or the loss, as Megatron's
  // account-for-embedding/loss splits do). Empty: layers / (pp x vchunks) each.
  std::vector<int> stage_layers;
  // `stage_layers: balance`: the simulator sets stage_layers so that each stage's layers take
  // about the same time on its GPUs (a heterogeneous cluster, sim/training_sim.h); the planners
  // see the counts it chose.
  bool balance_stages = false;

  // Layers of virtual stage vs (0 .. pp x vchunks - 1) of a model of `layers`, and the global
  // index of its first layer (layers are numbered in virtual-stage order).
  int chunk_layers(int layers, int vs) const {
    return stage_layers.empty() ? layers / (pp * vchunks) : stage_layers[static_cast<std::size_t>(vs)];
  }
  int first_layer(int layers, int vs) const {
    int first = 0;
    for (int v = 0; v < vs; ++v) first += chunk_layers(layers, v);
    return first;
  }
  // All the layers pipeline stage s holds (its vchunks chunks), and its largest chunk.
  int layers_on_stage(int layers, int s) const {
    int n = 0;
    for (int c = 0; c < vchunks; ++c) n += chunk_layers(layers, c * pp + s);
    return n;
  }
  int max_chunk_layers(int layers, int s) const {
    int n = 0;
    for (int c = 0; c < vchunks; ++c) n = std::max(n, chunk_layers(layers, c * pp + s));
    return n;
  }

  // Whether the checkpoints are sharded over tp by distribute_checkpoints (it is set, with
  // whole-layer recomputation, 1D tp > 1 and no sp).
  bool checkpoints_distributed() const {
    return distribute_checkpoints && tp > 1 && !sp && mesh2d == 0 &&
           (recompute.mode == RecomputeMode::Full || recompute.mode == RecomputeMode::EveryK ||
            recompute.mode == RecomputeMode::Sqrt);
  }

  int tensor_size() const { return mesh2d > 0 ? mesh2d * mesh2d : tp; }
  // Ranks that hold the same dense weights and reduce their gradients together: dp x cp (the
  // context-parallel ranks computed them from other tokens of the same sequences; Megatron's
  // data-parallel group "with context parallel", FSDP's dp_shard x cp mesh). ZeRO shards over them.
  int grad_ranks() const { return dp * cp; }
  // Expert tensor parallel: the ranks one expert's weights are split over (tp unless etp says
  // otherwise; meaningful with ep > 1).
  int expert_tp() const { return etp > 0 ? etp : tp; }
  // The ranks one expert's weights are spread over: ep x etp with ep > 1, else the tensor ranks.
  double expert_shard() const { return ep > 1 ? static_cast<double>(ep) * expert_tp() : tensor_size(); }
  // Whether the ep ranks span the tp (and cp) ranks: Megatron-core's layout with etp = 1 and
  // 1D tp > 1 (with mesh2d, tp = 1 and the ep ranks come from dp as before).
  bool ep_spans_tp() const { return ep > 1 && expert_tp() == 1 && tp > 1; }
  // The mesh axis the MoE all-to-alls run over, and the size of the mesh's own "ep" axis (the
  // factor of dp in the ep groups): "ep" (ep ranks of dp), or "ep+cp+tp" with ep_spans_tp().
  MeshAxis ep_axis() const {
    if (!ep_spans_tp()) return MeshAxis::ep();
    return (cp > 1 ? MeshAxis::ep().plus(MeshAxis::cp()) : MeshAxis::ep()).plus(MeshAxis::tp());
  }
  int ep_dp_factor() const { return ep_spans_tp() ? ep / (cp * tp) : ep; }
  // The ranks that hold the same expert weights and reduce their gradients together with
  // ep > 1: the stage's dp x cp x tp ranks over ep x etp, on the axis expert_grad_axis().
  int expert_grad_ranks() const { return dp * cp * tp / (ep * expert_tp()); }
  MeshAxis expert_grad_axis() const {
    return cp > 1 && !ep_spans_tp() ? MeshAxis::edp().plus(MeshAxis::cp()) : MeshAxis::edp();
  }
  // ZeRO 1-2 over grad_ranks() > 1: each rank updates its share of the parameters, all-gathered
  // after the step.
  bool gathers_params() const { return (zero == 1 || zero == 2) && grad_ranks() > 1; }
  int world_size() const { return dp * pp * cp * tensor_size(); }
  std::int64_t global_batch() const { return std::int64_t{dp} * microbatches * micro_batch_size; }
  // Whether stage-to-stage sends are scattered over tp and gathered at the receiver: asked for,
  // and the activation is replicated over a tp group (no sp, no mesh2d) between stages.
  bool pipeline_scatter_gather() const { return pp_scatter_gather && !sp && mesh2d == 0 && tp > 1 && pp > 1; }
};

// Checks the layout against the model and the GPU count; throws Error naming the field
// (e.g. "parallel.tp: 12 does not divide heads = 96 ...") and the fix. The model must have
// passed validate_model already (a resolved Scenario's has: the resolver checks it where it
// reads it, with the file and line; plan_iteration(m, p) and UnitPlanner(m, p), which take
// specs as built, check it themselves), so that a simulation checks each once. Requirements:
//   sizes dp, tp, cp, pp, vchunks, microbatches, micro_batch_size, ep >= 1; mesh2d >= 0;
//   zero in 0..3; ep_imbalance >= 1; dp_bucket_mib > 0; every:K with K >= 1;
//   sp needs tp > 1; mesh2d excludes tp > 1, sp and cp > 1; distribute_checkpoints needs
//   tp > 1, no sp and recompute full, every:K or sqrt;
//   tp divides heads; tp <= kv_heads and divides them, or (kv_replicate) a multiple of them;
//   mesh2d q divides heads, hidden, ffn_hidden, vocab and micro_batch_size (the b x h
//   split of Optimus: each device holds b/q sequences, h/q columns, heads/q heads);
//   dp x pp x cp x (tp or q^2) == gpus;
//   seq divisible by cp x (tp when sp) x (2 when cp > 1 and cp_balance);
//   layers divisible by pp x vchunks; microbatches >= pp; vchunks > 1 needs pp > 1 and
//   microbatches a multiple of pp; ep > 1 needs experts, ep divides experts; etp is 0, tp or 1
//   and set only with ep > 1; with etp = tp ep divides dp; with etp = 1 (tp > 1) ep is a
//   multiple of tp x cp that divides dp x cp x tp.
// `gpus_from` names where the GPU count comes from in messages (e.g. "topology dgx-h100:nodes=2").
void validate_parallel(const ParallelSpec& p, const ModelSpec& m, int gpus, const std::string& gpus_from = "");

// A layout checked against its model and GPU count: what the planners and the simulator's fast
// path take, so that a simulation checks its layout once (parse once, then trust). Made only by
// check_layout, which runs validate_parallel; it keeps its own copies of the two.
class CheckedLayout {
 public:
  const ModelSpec& model() const { return model_; }
  const ParallelSpec& parallel() const { return parallel_; }

 private:
  CheckedLayout(ModelSpec m, ParallelSpec p) : model_(std::move(m)), parallel_(std::move(p)) {}
  friend CheckedLayout check_layout(const ModelSpec& m, const ParallelSpec& p, int gpus, const std::string& gpus_from);
  ModelSpec model_;
  ParallelSpec parallel_;
};
CheckedLayout check_layout(const ModelSpec& m, const ParallelSpec& p, int gpus, const std::string& gpus_from = "");

// How many times this process has run validate_parallel (tests count the checks one
// simulation makes; model_checks() in model.h counts validate_model).
std::int64_t layout_checks();

}  // namespace meshsim
