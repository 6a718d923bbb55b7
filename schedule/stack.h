// The training stack: the software that runs a layout, as a model input (docs/compute.md,
// "Training stacks"). The same layout runs differently under Megatron-LM of 2022, NeMo with
// Transformer Engine, or PyTorch FSDP: which attention kernel a layer calls, whether the
// tensor-parallel collectives are pipelined with the GEMMs, how often FSDP reduces gradients.
//
//   TrainingStack s = training_stack("megatron-te");   // cuDNN attention, TE's TP-comm overlap
//   s.attention = AttentionLibrary::FlashAttention2;   // NVTE_FUSED_ATTN=0 (flash-attn 2)
//
// Scenario files name a stack with `stack: megatron-te` or `stack: {name: megatron-te,
// attention: fa2}` (docs/scenarios.md); without one the stack is `megatron`, the model meshsim
// had before stacks existed, so existing scenarios keep their results.
#pragma once

#include <string>
#include <vector>

namespace meshsim {

// Which attention kernel the stack calls. `generic` is the efficiency curve of the GPU preset
// (attention_efficiency rising with the sequence); the others are the measured rates of that
// library on the GPU, by pass, sequence length and mask (sim/compute_model.cpp).
// `triton`: FlashAttention's Triton kernel (flash_attn_triton, llm-foundry's attn_impl: triton).
enum class AttentionLibrary { Generic, FlashAttention2, CuDNN, Triton };
const char* to_string(AttentionLibrary a);

enum class StackKind { Megatron, MegatronTE, PytorchFsdp, PytorchFsdp2 };
const char* to_string(StackKind k);

// When FSDP gathers the next block's parameters in the backward (FSDP1's backward_prefetch):
// `Pre` when the current block's backward starts (PyTorch's default, FSDP2's only way), so the
// gather runs under it; `Post` when the current block's gradients are ready (Composer's
// default), so the next block's backward waits for the whole gather.
enum class BackwardPrefetch { Pre, Post };
const char* to_string(BackwardPrefetch b);

// Transformer Engine's FP8 training of the transformer blocks' linear layers (Megatron-core's
// --fp8-recipe): the GEMMs take FP8 operands (e4m3 forward, e5m2 gradients) and run at the
// GPU's FP8 rate, and every linear layer pays memory-bound casts: its input cast to FP8 with
// a transpose for the weight gradient (Hopper's FP8 GEMMs take K-major operands only), its
// output gradient likewise in the backward, and its weight once per iteration (docs/compute.md,
// "FP8"). The recipes differ in the casts: `delayed` scales by the amax history, so a cast is
// one pass; `tensorwise` (current scaling) reads the tensor once more for its amax first;
// `blockwise` (1x128 and 128x128 scales, Hopper) and `mxfp8` (32-element blocks, Blackwell's
// native format) scale per block within the cast's one pass and write the scales beside it.
// Attention's core, the embedding and the output layer stay in the model's dtype.
enum class Fp8Recipe { Off, Delayed, Tensorwise, Blockwise, Mxfp8 };
const char* to_string(Fp8Recipe r);

// How the stack runs the optimizer step over the parameters a rank updates (docs/compute.md,
// "The optimizer step"), each a memory pass over fp32 state:
//   megatron     Megatron's: the gradient norm (read), fused Adam (read p, g, m, v; write p, m,
//                v), the fp32 -> model-dtype copy of the weights, the gradient buffer zeroed;
//                the clipping scale runs only when the norm exceeds the threshold (not counted).
//   torch-fused  torch.nn.utils.clip_grad_norm_ (or FSDP's): the norm, then the gradients
//                scaled by the clamped coefficient always (no host sync to skip it: read and
//                write), torch.optim.AdamW(fused=True), zero_grad(set_to_none): no zeroing.
//   torch-loop   the same clipping, then an Adam written as one PyTorch op per line, looped over
//                the parameters (Composer's DecoupledAdamW): eight kernels, 80 bytes per element
//                (without weight decay, as llm-foundry's MPT recipes run it).
// All three keep the cast of the fp32 weights to the model's dtype (FSDP casts its shard before
// each gather; one pass per step is counted).
enum class OptimizerImpl { Megatron, TorchFused, TorchLoop };
const char* to_string(OptimizerImpl o);

struct TrainingStack {
  StackKind kind = StackKind::Megatron;
  AttentionLibrary attention = AttentionLibrary::Generic;
  // Transformer Engine's userbuffers TP-comm overlap (ub_tp_comm_overlap, with sp): the
  // forward all-gather before a column-parallel GEMM and the reduce-scatter after a
  // row-parallel one are cut into tp chunks and pipelined with the GEMM's chunks; the
  // reduce-scatter's kernels hold `tp_overlap_sms` SMs, which the GEMM under it cannot use.
  bool tp_comm_overlap = false;
  int tp_overlap_sms = 0;
  // PyTorch FSDP FULL_SHARD with gradient accumulation: every micro-batch's backward
  // reduce-scatters its gradients (no no_sync: the unsharded gradients are not kept).
  bool reduce_every_microbatch = false;
  // Eager PyTorch: elementwise ops run as separate kernels (the residual add apart from the
  // dropout, SwiGLU's SiLU apart from its product), each its own pass over memory.
  bool eager = false;
  // ZeRO-3 / FSDP: whether a block's gathered parameters are freed after its forward and
  // gathered again for its backward (FULL_SHARD, FSDP2's default) or kept from the forward to
  // the backward (SHARD_GRAD_OP, reshard_after_forward=False: one all-gather per block and
  // micro-batch, the unsharded parameters held meanwhile).
  bool reshard_after_forward = true;
  // Megatron's distributed optimizer with overlap_param_gather (ZeRO 1-2): the all-gather of
  // the updated parameters runs under the next iteration's forward instead of after the
  // optimizer step; in one simulated iteration it starts with the iteration, beside its forward.
  bool overlap_param_gather = false;
  // Bytes per element of the data-parallel gradient reduction: 0 = the model's dtype; 4 = fp32
  // (FSDP's MixedPrecision reduce_dtype=float32, Megatron's grad_reduce_in_fp32).
  int reduce_bytes = 0;
  // Which FSDP runs ZeRO-3 (zero: 3), for the memory passes it adds around its collectives
  // (docs/compute.md, "FSDP's own passes"): 0 none; 1 FSDP1 (FlatParameter: autograd
  // concatenates a block's gradients into one flat gradient, which is cast to the reduce dtype
  // and divided by the pre-divide factor before its reduce-scatter); 2 FSDP2 (fully_shard:
  // gathered parameters copied out of the all-gather buffer, gradients copied into the
  // reduce-scatter buffer in the reduce dtype, the mean taken by NCCL's AVG).
  int fsdp = 0;
  BackwardPrefetch backward_prefetch = BackwardPrefetch::Pre;
  Fp8Recipe fp8 = Fp8Recipe::Off;
  OptimizerImpl optimizer = OptimizerImpl::Megatron;
};

// The named stacks: megatron (default), megatron-te, pytorch-fsdp, pytorch-fsdp2. Unknown: Error
// listing them.
TrainingStack training_stack(const std::string& name);
std::vector<std::string> training_stacks();
// "generic", "fa2", "cudnn"; unknown: Error naming `field`.
AttentionLibrary parse_attention_library(const std::string& text, const std::string& field);
// "pre", "post"; unknown: Error naming `field`.
BackwardPrefetch parse_backward_prefetch(const std::string& text, const std::string& field);
// "off", "delayed", "tensorwise", "blockwise", "mxfp8"; unknown: Error naming `field`.
Fp8Recipe parse_fp8_recipe(const std::string& text, const std::string& field);
// "megatron", "torch-fused", "torch-loop"; unknown: Error naming `field`.
OptimizerImpl parse_optimizer_impl(const std::string& text, const std::string& field);

}  // namespace meshsim
