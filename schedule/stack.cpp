#include "schedule/stack.h"

#include <fmt/format.h>

#include "core/enum_names.h"
#include "core/error.h"

namespace meshsim {

namespace {

constexpr EnumName<StackKind> kStacks[] = {{StackKind::Megatron, "megatron"},
                                           {StackKind::MegatronTE, "megatron-te"},
                                           {StackKind::PytorchFsdp, "pytorch-fsdp"},
                                           {StackKind::PytorchFsdp2, "pytorch-fsdp2"}};
constexpr EnumName<AttentionLibrary> kLibraries[] = {{AttentionLibrary::Generic, "generic"},
                                                     {AttentionLibrary::FlashAttention2, "fa2"},
                                                     {AttentionLibrary::CuDNN, "cudnn"},
                                                     {AttentionLibrary::Triton, "triton"}};
constexpr EnumName<Fp8Recipe> kFp8Recipes[] = {{Fp8Recipe::Off, "off"},
                                               {Fp8Recipe::Delayed, "delayed"},
                                               {Fp8Recipe::Tensorwise, "tensorwise"},
                                               {Fp8Recipe::Blockwise, "blockwise"},
                                               {Fp8Recipe::Mxfp8, "mxfp8"}};
constexpr EnumName<OptimizerImpl> kOptimizers[] = {{OptimizerImpl::Megatron, "megatron"},
                                                   {OptimizerImpl::TorchFused, "torch-fused"},
                                                   {OptimizerImpl::TorchLoop, "torch-loop"}};

// SMs a pipelined reduce-scatter of TE's userbuffers holds while its GEMM runs beside it:
// NeMo's H100 userbuffers configurations give proj_fprop and fc2_fprop's "pipeline" method
// 16 to 32 SMs (24 the most common) with set_sm_margin, so the GEMM is launched on the rest.
constexpr int kTeReduceScatterSms = 24;

}  // namespace

const char* to_string(AttentionLibrary a) { return enum_name(kLibraries, a); }

const char* to_string(StackKind k) { return enum_name(kStacks, k); }

std::vector<std::string> training_stacks() {
  std::vector<std::string> v;
  for (const EnumName<StackKind>& s : kStacks) v.emplace_back(s.name);
  return v;
}

TrainingStack training_stack(const std::string& name) {
  if (const std::optional<StackKind> kind = enum_parse(kStacks, name)) {
    TrainingStack t;
    t.kind = *kind;
    switch (*kind) {
      case StackKind::Megatron:
        break;
      case StackKind::MegatronTE:  // TE's DotProductAttention picks cuDNN's fused attention on Hopper
        t.attention = AttentionLibrary::CuDNN;
        t.tp_comm_overlap = true;
        t.tp_overlap_sms = kTeReduceScatterSms;
        t.overlap_param_gather = true;  // NeMo's recipes: distributed optimizer, parameter sync overlapped
        break;
      case StackKind::PytorchFsdp:   // FSDP1 as Composer runs it (llm-foundry), eager kernels
      case StackKind::PytorchFsdp2:  // FSDP2 (fully_shard) as torchtitan runs it
        t.attention = AttentionLibrary::FlashAttention2;
        t.reduce_every_microbatch = true;
        t.eager = true;
        // Gradients reduce-scattered in fp32: torchtitan's default (mixed_precision_reduce) and
        // Composer's "DEFAULT" mixed precision since v0.16 (param_dtype bf16, reduce_dtype fp32).
        t.reduce_bytes = 4;
        t.fsdp = *kind == StackKind::PytorchFsdp ? 1 : 2;
        // Composer's FSDP config defaults to BACKWARD_POST (PyTorch's own FSDP1 default is
        // BACKWARD_PRE); FSDP2 prefetches the next block when the current one's backward starts.
        t.backward_prefetch = *kind == StackKind::PytorchFsdp ? BackwardPrefetch::Post : BackwardPrefetch::Pre;
        // llm-foundry's optimizer is Composer's DecoupledAdamW, a loop of PyTorch ops per
        // parameter; torchtitan's AdamW is torch's fused kernel (its optimizer.implementation
        // default). Both clip through torch's clip_grad_norm_ (FSDP's for FSDP1).
        t.optimizer = *kind == StackKind::PytorchFsdp ? OptimizerImpl::TorchLoop : OptimizerImpl::TorchFused;
        break;
    }
    return t;
  }
  throw Error(fmt::format("stack: unknown stack '{}'; use one of {}", name, enum_list(kStacks)));
}

AttentionLibrary parse_attention_library(const std::string& text, const std::string& field) {
  if (const std::optional<AttentionLibrary> lib = enum_parse(kLibraries, text)) return *lib;
  throw Error(
      fmt::format("{}: '{}' is not an attention library; use generic, fa2 (flash-attn 2), cudnn or triton "
                  "(FlashAttention's Triton kernel)",
                  field, text));
}

const char* to_string(BackwardPrefetch b) { return b == BackwardPrefetch::Pre ? "pre" : "post"; }

BackwardPrefetch parse_backward_prefetch(const std::string& text, const std::string& field) {
  if (text == "pre") return BackwardPrefetch::Pre;
  if (text == "post") return BackwardPrefetch::Post;
  throw Error(
      fmt::format("{}: '{}' is not a prefetch mode; use pre (gather the next block when the current "
                  "block's backward starts: BACKWARD_PRE) or post (when its gradients are ready: "
                  "BACKWARD_POST)",
                  field, text));
}

const char* to_string(Fp8Recipe r) { return enum_name(kFp8Recipes, r); }

Fp8Recipe parse_fp8_recipe(const std::string& text, const std::string& field) {
  if (const std::optional<Fp8Recipe> r = enum_parse(kFp8Recipes, text)) return *r;
  throw Error(fmt::format("{}: '{}' is not an FP8 recipe; use one of {} (Megatron-core's --fp8-recipe)", field, text,
                          enum_list(kFp8Recipes)));
}

const char* to_string(OptimizerImpl o) { return enum_name(kOptimizers, o); }

OptimizerImpl parse_optimizer_impl(const std::string& text, const std::string& field) {
  if (const std::optional<OptimizerImpl> o = enum_parse(kOptimizers, text)) return *o;
  throw Error(fmt::format("{}: '{}' is not an optimizer step; use one of {} (docs/compute.md, \"The optimizer step\")",
                          field, text, enum_list(kOptimizers)));
}

}  // namespace meshsim
