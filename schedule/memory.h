// Itemized device memory of a training run: weights, gradients, optimizer state,
// activations (docs/math.md section 11), extras, temporaries and a communication workspace,
// per pipeline stage. Every byte comes from a named item with its formula, so a report
// can show where the memory goes instead of one summary number.
//
//   ModelSpec m = model_preset("gpt3-175b");
//   ParallelSpec p;  p.tp = 8;  p.sp = true;  p.pp = 8;  p.microbatches = 64;  p.dp = 8;
//   for (const MemoryItem& i : layer_activation_items(m, p))     // 2sbh/t, 4sbh/t, ...
//     fmt::print("{} {} {}\n", i.name, i.formula, i.bytes);
//   RankMemory r = rank_memory(m, p, /*stage=*/0);               // r.total(), r.bytes("activations")
//
// Symbols: s = model.seq, b = micro_batch_size, h = hidden, a = heads, h_kv = kv_hidden,
// f = ffn_hidden, v = vocab, t = tensor_size (tp, or q^2 for mesh2d), c = cp, P = dtype bytes,
// n_kv = kv_heads, d = dp, e = ep, N = parameters held by the rank.
//
// Per layer, per micro-batch (layer_activation_items):
//   Plain attention (the GPT layer of Korthikanti et al., with dropout): the 14 items of
//   docs/math.md section 11. Tensors take P bytes per element, dropout masks 1 byte, so for
//   16-bit data the items are exactly the paper's (2sbh, 4sbh, 2as^2b, as^2b, ...) and sum
//   to sbh(34 + 5as/h) without parallelism. Generalized: Q and K take sb(h + h_kv), V
//   sb*h_kv (GQA); the MLP's GeLU input and second-linear input take sbf each (SwiGLU:
//   gate and up outputs 2sbf, down input sbf). Tensors inside the TP region (heads or f
//   split) are divided by t; LayerNorm inputs, the QKV and first-linear inputs and the
//   dropout masks are divided by t only with sp. Everything is divided by c (the s^2
//   items too: s/c queries against all s keys).
//   Flash attention (modern layer, no dropout): the six items of docs/math.md section 11,
//   summing to sbP(5h + 2h_kv + 2f)/(c*t) with sp; the MLP item "down_input" is 2sbf
//   (the GeLU input and output, or SwiGLU's gate and up outputs).
//   MoE: expert-side MLP items are multiplied by top_k (each token is dispatched k times)
//   and by ep_imbalance when ep > 1 (the busiest rank); plus fp32 router probabilities.
//   GQA with kv_replicate (tp > kv_heads): K/V items are divided by kv_heads, not t.
//   Recompute: None keeps all items; Selective drops the attention core (softmax output,
//   its dropout mask and dropout output: 5as^2b/t for 16-bit; Flash has none to drop);
//   Full keeps the layer input only (Psbh/(c*t) with sp or distribute_checkpoints, Psbh/c
//   without). EveryK and
//   Sqrt return the None items here; rank_memory places their checkpoints and segment.
//
// Per stage (rank_memory): see docs/memory.md for every assumption.
#pragma once

#include <string>
#include <vector>

#include "core/units.h"
#include "schedule/model.h"
#include "schedule/parallel.h"

namespace meshsim {

struct MemoryItem {
  std::string category;  // weights | gradients | optimizer | activations | extras | temporaries | workspace
  std::string name;      // e.g. "attn.softmax_output"
  std::string formula;   // symbolic, e.g. "2as^2b/t", "2sbh/t x 12 layers x 8 in flight"
  Bytes bytes = 0;
};

Bytes total_bytes(const std::vector<MemoryItem>& items);

// Activations one layer stores between its forward and backward for one micro-batch
// (b = p.micro_batch_size sequences of model.seq tokens) under p's tp, sp, cp, mesh2d and
// recompute mode (or `mode` when given).
std::vector<MemoryItem> layer_activation_items(const ModelSpec& m, const ParallelSpec& p);
std::vector<MemoryItem> layer_activation_items(const ModelSpec& m, const ParallelSpec& p, RecomputeMode mode);
Bytes layer_activation_bytes(const ModelSpec& m, const ParallelSpec& p);

// torchtitan's per-op selective recomputation (RecomputeMode::Ops) of the plan's GEMMs
// (attn.qkv, attn.proj, mlp.fc1, mlp.fc2): counting a block's matrix multiplies in forward
// order as torchtitan's Llama writes them (wq, wk, wv, wo, w1, w3, w2; w1 alone without a
// gate), the odd-numbered ones' outputs are saved and the even-numbered ones recomputed. Per
// GEMM: the fraction of its output columns recomputed, and the output columns saved per token
// on one tensor-parallel rank (a row-parallel GEMM's output is the whole width, partial sums).
struct OpSacGemm {
  std::string name;
  double recomputed_fraction = 0;
  double saved_columns = 0;
};
std::vector<OpSacGemm> op_sac_gemms(const ModelSpec& m, const ParallelSpec& p);

// (micro-batch, model chunk) pairs whose activations pipeline stage `stage` holds at its
// peak under 1F1B: min(m, pp - stage) for plain 1F1B; interleaved (vchunks = v > 1), as
// Megatron's warm-up: min(m*v, 2(pp - stage - 1) + (v - 1)pp + 1). Each pair holds
// layers/(pp*v) layers, so the first stage holds L(1 + (pp-1)/(pp*v)) layers' worth.
int inflight_chunks(const ParallelSpec& p, int stage);

// Layers per recompute segment for EveryK (every_k) and Sqrt (round(sqrt(layers per
// model chunk)), at least 1), capped at the layers of one model chunk; 0 otherwise.
int recompute_segment_layers(const ModelSpec& m, const ParallelSpec& p);

struct RankMemory {
  std::string role;  // e.g. "stage 0 of 8 (first: embedding)"
  std::vector<MemoryItem> items;
  Bytes total() const;
  Bytes bytes(const std::string& category) const;  // sum of one category
};

// Memory of one GPU of pipeline stage `stage` (0 <= stage < p.pp); throws Error otherwise.
// The layout is assumed valid (validate_parallel).
RankMemory rank_memory(const ModelSpec& m, const ParallelSpec& p, int stage);

// Adam's state per parameter: fp32 master weights and two moments (12 bytes) in 16-bit mixed
// precision, the two moments (8) in fp32 training.
int optimizer_bytes_per_param(const ModelSpec& m);
// A checkpoint of the whole model: every parameter's weights and optimizer state, written once
// however the layout shards them (what a restart reads back).
Bytes checkpoint_bytes(const ModelSpec& m);

}  // namespace meshsim
