#include "schedule/kernel.h"

#include <iterator>

#include "core/enum_names.h"
#include "core/error.h"

namespace meshsim {

constexpr EnumName<KernelKind> kKernelKindNames[] = {
    {KernelKind::Gemm, "gemm"},       {KernelKind::Attention, "attention"},
    {KernelKind::Norm, "norm"},       {KernelKind::Elementwise, "elementwise"},
    {KernelKind::Softmax, "softmax"}, {KernelKind::Optimizer, "optimizer"},
    {KernelKind::Memcpy, "memcpy"}};
static_assert(std::size(kKernelKindNames) == kKernelKinds, "every KernelKind needs a name");
const char* to_string(KernelKind k) { return enum_name(kKernelKindNames, k); }

constexpr EnumName<KernelFn> kKernelFnNames[] = {
    {KernelFn::Pass, "pass"},          {KernelFn::LayerNorm, "layernorm"},
    {KernelFn::Gelu, "gelu"},          {KernelFn::SwiGLU, "swiglu"},
    {KernelFn::Dropout, "dropout"},    {KernelFn::DropoutAdd, "dropout_add"},
    {KernelFn::Softmax, "softmax"},    {KernelFn::CrossEntropy, "cross_entropy"},
    {KernelFn::LseMerge, "lse_merge"}, {KernelFn::LayerNorm2d, "layernorm2d"},
    {KernelFn::AdamW, "adamw"},        {KernelFn::RmsNorm, "rmsnorm"},
    {KernelFn::Rope, "rope"}};
const char* to_string(KernelFn f) { return enum_name(kKernelFnNames, f); }

std::optional<KernelKind> parse_kernel_kind(const std::string& s) { return enum_parse(kKernelKindNames, s); }
std::optional<KernelFn> parse_kernel_fn(const std::string& s) { return enum_parse(kKernelFnNames, s); }

Kernel Kernel::gemm(std::int64_t m, std::int64_t n, std::int64_t k, int dtype_bytes) {
  MESHSIM_ASSERT(m > 0 && n > 0 && k > 0 && dtype_bytes > 0);
  Kernel g;
  g.kind = KernelKind::Gemm;
  g.m = m;
  g.n = n;
  g.k = k;
  g.dtype_bytes = dtype_bytes;
  const double dm = static_cast<double>(m), dn = static_cast<double>(n), dk = static_cast<double>(k);
  g.flops = 2.0 * dm * dn * dk;
  g.bytes = (dm * dk + dk * dn + dm * dn) * dtype_bytes;
  return g;
}

Kernel Kernel::attention(std::int64_t batch_heads, std::int64_t seq_q, std::int64_t seq_kv, std::int64_t head_dim,
                         int dtype_bytes, bool causal) {
  MESHSIM_ASSERT(batch_heads > 0 && seq_q > 0 && seq_kv > 0 && head_dim > 0 && dtype_bytes > 0);
  Kernel a;
  a.kind = KernelKind::Attention;
  a.m = seq_q;
  a.n = seq_kv;
  a.k = head_dim;
  a.dtype_bytes = dtype_bytes;
  a.batch = batch_heads;
  a.causal = causal;
  const double bh = static_cast<double>(batch_heads), sq = static_cast<double>(seq_q),
               skv = static_cast<double>(seq_kv), d = static_cast<double>(head_dim);
  a.flops = 4.0 * bh * sq * skv * d * (causal ? 0.5 : 1.0);     // Q K^T and P V, 2 FLOPs per multiply-add
  a.bytes = bh * (2.0 * sq * d + 2.0 * skv * d) * dtype_bytes;  // read Q, K, V; write O
  return a;
}

Kernel Kernel::elementwise(KernelKind kind, double flops, double bytes, int dtype_bytes) {
  MESHSIM_ASSERT(flops >= 0 && bytes >= 0 && dtype_bytes > 0);
  Kernel e;
  e.kind = kind;
  e.flops = flops;
  e.bytes = bytes;
  e.dtype_bytes = dtype_bytes;
  return e;
}

Kernel Kernel::rowwise(KernelKind kind, KernelFn fn, std::int64_t rows, std::int64_t cols, double flops, double bytes,
                       int dtype_bytes) {
  MESHSIM_ASSERT(rows > 0 && cols > 0);
  Kernel r = elementwise(kind, flops, bytes, dtype_bytes);
  r.fn = fn;
  r.m = rows;
  r.n = cols;
  return r;
}

}  // namespace meshsim
