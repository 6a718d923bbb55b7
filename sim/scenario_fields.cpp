#include "sim/scenario_fields.h"

#include <fmt/format.h>

#include <array>

namespace meshsim {

namespace {

constexpr std::array kFields = std::to_array<ScenarioField>({
    // The top level.
    {"", "name", "text", "scenario", "a label for reports"},
    {"", "model", "preset name or map", "-",
     "the model: a preset (docs/models.md), {preset: llama3-70b, seq: 131072}, or fields (the model section)"},
    {"", "parallel", "map", "all 1", "the layout: degrees, micro-batches, recomputation (the parallel section)"},
    {"", "stack", "stack name or map", "megatron",
     "the training stack that runs the layout (docs/compute.md, \"Training stacks\"): megatron, megatron-te, "
     "pytorch-fsdp, pytorch-fsdp2, or {name: ..., field: value} overriding its defaults (the stack section)"},
    {"", "topology", "preset spec or YAML path", "dgx-h100",
     "the cluster: a preset with options (dgx-h100:nodes=128) or a topology file (docs/topology.md)"},
    {"", "placement", "natural | bunched:RxC | list:0,1,...", "natural",
     "where mesh ranks sit on the GPUs: in order, blocked over the last two mesh axes, or listed"},
    {"", "order", "list or comma-separated axes", "dp, pp, cp, tp",
     "mesh axes outermost first, each once (with ep: edp, ep, ...; with mesh2d: ..., row, col)"},
    {"", "gpu", "compute preset", "the topology's GPU", "the GPU's compute figures (h100, a100, rtx5000, ...)"},
    {"", "node_gpus", "NODES=GPU,...", "-",
     "a heterogeneous cluster: nodes whose GPUs are another compute preset, e.g. 8-15=a100 (the fabric stays the "
     "topology's); a stage runs at its slowest GPU kind's pace"},
    {"", "run", "map", "-", "how it is timed (the run section)"},
    {"", "perturb", "map", "-", "parts below their nominal rate: stragglers, degraded links (the perturb section)"},
    {"", "workload", "map", "-",
     "a collective workload instead of a model: what meshsim run and validate execute (the workload section)"},
    {"", "jobs", "list of maps", "-",
     "several training jobs on the topology at once, sharing its links (flow fidelity; meshsim simulate): each a "
     "map of its own sections over the top level's, on its nodes or GPUs (the jobs section)"},
    // model:
    {"model", "preset", "model preset name", "-", "start from a preset and change the fields given beside it"},
    {"model", "name", "text", "the preset's, or custom", "a label for reports"},
    {"model", "layers", "integer 1..10000", "1", "transformer blocks"},
    {"model", "hidden", "integer", "1024", "model width h"},
    {"model", "heads", "integer", "16", "attention heads (divides hidden)"},
    {"model", "kv_heads", "integer", "heads", "key/value heads (grouped-query attention; divides heads)"},
    {"model", "ffn_hidden", "integer", "4096", "MLP width (per expert for MoE)"},
    {"model", "ffn", "gelu | swiglu", "gelu", "the MLP's activation (swiglu: three projections)"},
    {"model", "vocab", "integer", "51200", "vocabulary size"},
    {"model", "seq", "integer", "2048", "sequence length in tokens"},
    {"model", "experts", "integer", "0", "routed experts per MoE layer (0: a dense MLP)"},
    {"model", "top_k", "integer", "1", "experts each token runs"},
    {"model", "shared_experts", "integer", "0", "MLPs of ffn_hidden every token runs beside its top_k"},
    {"model", "dtype", "bf16 | fp16 | fp32", "bf16", "the training precision"},
    {"model", "attention", "plain | flash", "plain", "attention kernel: materialized scores or fused flash attention"},
    {"model", "norm", "layernorm | rmsnorm", "layernorm (Llama-family presets: rmsnorm)",
     "the layer's norms (rmsnorm: no centring, no bias)"},
    {"model", "position", "absolute | rope", "absolute (Llama-family presets: rope)",
     "absolute: added at the embedding (or ALiBi), no kernel in the layer; rope: rotary embedding of queries and "
     "keys, a kernel each way"},
    {"model", "bias", "true | false", "true", "linear-layer biases (true: GPT; false: Llama-style)"},
    {"model", "tied_embeddings", "true | false", "true", "the output projection shares the embedding table"},
    {"model", "q_lora_rank", "integer", "0", "multi-head latent attention: query compression rank (0: none)"},
    {"model", "kv_lora_rank", "integer", "0",
     "multi-head latent attention: key/value compression rank (> 0 turns MLA on)"},
    {"model", "qk_nope_head_dim", "integer", "0", "MLA: per-head query/key width without RoPE"},
    {"model", "qk_rope_head_dim", "integer", "0", "MLA: per-head query/key width with RoPE"},
    {"model", "v_head_dim", "integer", "0", "MLA: per-head value width"},
    // parallel:
    {"parallel", "dp", "integer >= 1 | auto", "1",
     "data parallel; auto: the topology's GPUs / (pp x cp x tp), which must divide"},
    {"parallel", "zero", "0..3", "0", "ZeRO stage: shards optimizer states, gradients, parameters over dp x cp"},
    {"parallel", "tp", "integer >= 1", "1", "Megatron 1D tensor parallel (divides heads)"},
    {"parallel", "sp", "true | false", "false", "sequence parallelism with tp"},
    {"parallel", "cp", "integer >= 1", "1", "context parallel (ring attention)"},
    {"parallel", "cp_balance", "true | false", "true", "causal load balancing of cp's chunks (i and 2cp-1-i)"},
    {"parallel", "pp", "integer >= 1", "1", "pipeline stages (1F1B)"},
    {"parallel", "vchunks", "integer >= 1", "1", "model chunks per device: interleaved 1F1B when > 1"},
    {"parallel", "stage_layers", "list of integers | balance", "even",
     "uneven stages: the layers of each of the pp x vchunks virtual stages (chunk c of stage s is entry "
     "c x pp + s), adding up to the model's layers, 0 allowed; balance: as many layers on each stage as its "
     "GPUs' speed gives it (node_gpus)"},
    {"parallel", "microbatches", "integer >= 1", "1", "micro-batches per iteration and dp replica"},
    {"parallel", "micro_batch_size", "integer >= 1", "1", "sequences per micro-batch"},
    {"parallel", "global_batch", "integer", "-",
     "sequences per iteration: sets microbatches = global_batch / (dp x micro_batch_size), which must divide; "
     "not with microbatches"},
    {"parallel", "ep", "integer >= 1", "1", "expert parallel (MoE), carved out of dp (or tp x cp x dp with etp 1)"},
    {"parallel", "etp", "0 (tp) | 1", "tp", "expert tensor parallel: experts split over tp like a dense MLP, or whole"},
    {"parallel", "ep_imbalance", "number 1..ep", "1", "tokens at the busiest expert rank over the mean"},
    {"parallel", "mesh2d", "integer >= 0", "0", "q > 0: 2D SUMMA (Optimus) on a q x q mesh instead of tp"},
    {"parallel", "recompute", "none | full | selective | every:K | sqrt | ops", "none",
     "activation recomputation: none, whole layers, attention's core (Korthikanti), one layer in K, sqrt(L) "
     "checkpoints, or torchtitan's per-op policy"},
    {"parallel", "dp_bucket", "size", "25MiB", "data-parallel gradient bucket"},
    {"parallel", "kv_replicate", "true | false", "false", "allow tp > kv_heads by replicating key/value heads"},
    {"parallel", "pp_scatter_gather", "true | false", "true",
     "without sp: each tp rank sends 1/tp of a stage's activation and the receiver all-gathers it over tp"},
    {"parallel", "tp_overlap", "true | false", "true",
     "Megatron's async TP backward: the input-gradient collective runs under the weight-gradient GEMM"},
    {"parallel", "distribute_checkpoints", "true | false", "false",
     "Megatron's --distribute-saved-activations: with whole-layer recompute, tp > 1 and no sp, each tp rank keeps "
     "1/tp of a checkpoint"},
    // stack:
    {"stack", "name", "megatron | megatron-te | pytorch-fsdp | pytorch-fsdp2", "-",
     "the stack whose defaults the other fields override"},
    {"stack", "attention", "fa2 | cudnn | triton | generic", "generic (megatron-te: cudnn, pytorch-fsdp*: fa2)",
     "the attention library's kernels"},
    {"stack", "tp_comm_overlap", "true | false", "false (megatron-te: true)",
     "Transformer Engine's TP communication overlap (with sp)"},
    {"stack", "tp_overlap_sms", "integer >= 0", "0 (megatron-te: TE's reduce-scatter SMs)",
     "SMs the overlapped TP communication takes from the GEMMs"},
    {"stack", "reduce_every_microbatch", "true | false", "false (pytorch-fsdp*: true)",
     "the gradient reduce-scatter runs every micro-batch (FSDP), not once per iteration"},
    {"stack", "eager", "true | false", "false (pytorch-fsdp*: true)",
     "PyTorch eager kernels: unfused element-wise passes"},
    {"stack", "reshard_after_forward", "true | false", "true",
     "ZeRO-3 frees gathered parameters after the forward (false: FSDP's SHARD_GRAD_OP)"},
    {"stack", "reduce_dtype", "model | bf16 | fp32", "model (pytorch-fsdp*: fp32)",
     "dtype of the data-parallel gradient reduction"},
    {"stack", "overlap_param_gather", "true | false", "false (megatron-te: true)",
     "the distributed optimizer's parameter all-gather overlaps the next forward"},
    {"stack", "fsdp", "0 | 1 | 2", "0 (pytorch-fsdp: 1, pytorch-fsdp2: 2)",
     "FSDP's own memory passes: none, FSDP1's or FSDP2's"},
    {"stack", "backward_prefetch", "pre | post", "pre (pytorch-fsdp: post)",
     "when the backward gathers the next block: BACKWARD_PRE or BACKWARD_POST"},
    {"stack", "optimizer", "megatron | torch-fused | torch-loop",
     "megatron (pytorch-fsdp: torch-loop, pytorch-fsdp2: "
     "torch-fused)",
     "how the optimizer step runs: Megatron's, or torch's clipping (always scaling) with a fused AdamW or a loop of "
     "PyTorch ops (Composer's DecoupledAdamW)"},
    {"stack", "fp8", "off | delayed | tensorwise | blockwise | mxfp8", "off",
     "Transformer Engine's FP8 for the blocks' linear layers (Megatron-core's --fp8-recipe): FP8 GEMMs at the GPU's "
     "FP8 rate plus the casts of each recipe (docs/compute.md, \"FP8\")"},
    // run:
    {"run", "fidelity", "formula | flow | nccl", "formula",
     "closed forms per collective, flows sharing links (max-min), or NCCL's own tuning model"},
    {"run", "algorithm", "auto | nccl | algorithm name", "auto", "the collectives' algorithm (docs/collectives.md)"},
    {"run", "profile", "YAML path", "-",
     "a machine profile (meshsim calibrate's output) replacing the presets' figures"},
    {"run", "link_sharing", "true | false", "true", "at flow fidelity, whether the ops in flight share the links"},
    // perturb:
    {"perturb", "gpu_factors", "GPU=FACTOR,...", "-",
     "GPUs at a fraction of their compute speed (a straggler, a throttled clock), e.g. 17=0.8: the stage holding "
     "the GPU runs at its slowest GPU's pace (the op-level simulation)"},
    {"perturb", "link_factors", "LINK=FACTOR | LINK=down,...", "-",
     "links at a fraction of their bandwidth, named as the reports print them, e.g. 'n0.nic0 -> su0.rail0=0.5' (one "
     "direction), or down: the cable fails both ways and routes take another path (an error naming two GPUs "
     "when none is left)"},
    {"perturb", "gpu_draw", "normal(SD) | uniform(LO, HI) | stragglers(P, F)", "-",
     "every GPU's speed drawn from a distribution, GPU by GPU from the seed and its index (deterministic); a stage "
     "runs at its slowest GPU's pace, factors kept within [0.05, 1]; combines with gpu_factors"},
    {"perturb", "seed", "integer >= 0", "1", "the seed of gpu_draw's draws"},
    // jobs: (each entry)
    {"jobs", "name", "text", "job0, job1, ...", "the job's label in the table"},
    {"jobs", "nodes", "indices and ranges, e.g. 0-7,16-23", "-",
     "the nodes the job runs on (its GPUs in node order); this or gpus, not both; no GPU in two jobs"},
    {"jobs", "gpus", "indices and ranges, e.g. 0-63", "-",
     "the GPUs the job runs on (natural and listed placements only); this or nodes"},
    {"jobs", "model", "as the top level's", "the top level's", "the job's model"},
    {"jobs", "parallel", "as the top level's", "the top level's", "the job's layout (dp: auto divides the job's GPUs)"},
    {"jobs", "stack", "as the top level's", "the top level's", "the job's training stack"},
    {"jobs", "placement", "natural | bunched:RxC | list:...", "the top level's",
     "where its ranks sit on its GPUs, laid out as over a cluster of its own (list: the topology's GPU indices, "
     "all the job's)"},
    {"jobs", "order", "as the top level's", "the top level's", "the job's mesh order"},
    {"jobs", "gpu", "compute preset", "the top level's", "the job's GPUs' compute figures"},
    // workload:
    {"workload", "collective", "allreduce | allgather | reducescatter | broadcast | reduce | alltoall", "-",
     "the collective every iteration runs"},
    {"workload", "bytes", "size", "-", "the collective's size"},
    {"workload", "algorithm", "auto | algorithm name", "auto", "the algorithm the executors run"},
    {"workload", "iterations", "integer >= 1", "5", "timed repetitions"},
    {"workload", "root", "integer", "0", "root rank of broadcast and reduce"},
    {"workload", "ranks", "integer", "0 (as many as run)", "ranks in the collective"},
    {"workload", "mesh", "axes, e.g. dp=2,tp=4", "-", "a device mesh whose groups run the collective at once"},
    {"workload", "group", "all | a mesh axis", "all", "with a mesh: the axis the collectives run along"},
});

constexpr std::array kSections =
    std::to_array<std::string_view>({"", "model", "parallel", "stack", "run", "perturb", "workload", "jobs"});

// A table cell: '|' escaped so that Markdown keeps the columns.
std::string cell(std::string_view text) {
  std::string out;
  for (const char c : text) {
    if (c == '|') out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

std::span<const ScenarioField> scenario_fields() { return kFields; }

std::vector<std::string> section_keys(std::string_view section) {
  std::vector<std::string> keys;
  for (const ScenarioField& f : kFields)
    if (f.section == section) keys.emplace_back(f.key);
  return keys;
}

std::string scenario_fields_markdown() {
  std::string out;
  for (std::string_view section : kSections) {
    out += fmt::format("{}### {}\n\n", out.empty() ? "" : "\n",
                       section.empty() ? "Top level" : "`" + std::string(section) + ":`");
    out += "| field | takes | default | meaning |\n|---|---|---|---|\n";
    for (const ScenarioField& f : kFields)
      if (f.section == section)
        out += fmt::format("| `{}` | {} | {} | {} |\n", f.path(), cell(f.values), cell(f.fallback), cell(f.help));
  }
  return out;
}

}  // namespace meshsim
