// A compute kernel as the schedule describes it: what it is and how much work it does.
// Executors decide how long it takes (sim: roofline with efficiency curves; real
// backends: run it).
//
//   Kernel k = Kernel::gemm(4096, 12288, 36864, 2);   // m x k times k x n, bf16
//   k.flops == 2.0 * 4096 * 36864 * 12288
//   Kernel a = Kernel::attention(/*batch_heads=*/32, 2048, 2048, 128, 2, /*causal=*/true);
//   Kernel n = Kernel::elementwise(KernelKind::Norm, 5.0 * elems, 2.0 * elems * 2, 2);
//   Kernel ln = Kernel::rowwise(KernelKind::Norm, KernelFn::LayerNorm, tokens, hidden, flops, bytes, 2);
//
// The simulator times a kernel by its kind, FLOPs and bytes (and a GEMM's or attention's
// shape). The real backends also need to know which kernel to run and on what shape: GEMMs
// and attention carry their shapes, row kernels name their function (`fn`) and rows x cols.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace meshsim {

enum class KernelKind { Gemm, Attention, Norm, Elementwise, Softmax, Optimizer, Memcpy };
const char* to_string(KernelKind k);                                // "gemm", "attention", "norm", ...
std::optional<KernelKind> parse_kernel_kind(const std::string& s);  // inverse of to_string
inline constexpr int kKernelKinds = 7;

// The kernels/ function a row kernel runs on the real backends (forward or backward by the
// op's phase). Pass: no function of its own, a memory-bound pass over its bytes (copies,
// MoE routing). AdamW: the optimizer step over 1 x (parameters updated).
// LayerNorm2d: the 2D (SUMMA) split, a [rows, cols] block of rows `k` long whose row sums are
// all-reduced along the mesh row between its two halves (the schedule's separate collective).
// RmsNorm: LayerNorm without centring or bias (Llama-family models). Rope: rotary position
// embedding of the queries and keys, rows = tokens x heads of head_dim cols, `k` heads a token.
enum class KernelFn {
  Pass,
  LayerNorm,
  Gelu,
  SwiGLU,
  Dropout,
  DropoutAdd,
  Softmax,
  CrossEntropy,
  LseMerge,
  LayerNorm2d,
  AdamW,
  RmsNorm,
  Rope
};
const char* to_string(KernelFn f);                              // "pass", "layernorm", "gelu", "swiglu", "dropout", ...
std::optional<KernelFn> parse_kernel_fn(const std::string& s);  // inverse of to_string
inline constexpr int kKernelFns = 13;
// A function that runs along rows, whose rate depends on the row length (a profile's
// row_kernels points): every one but Pass (no function), AdamW (a flat parameter vector) and
// Rope (its rows are a head's few elements; it streams like an element-wise map).
constexpr bool is_row_fn(KernelFn f) { return f != KernelFn::Pass && f != KernelFn::AdamW && f != KernelFn::Rope; }

struct Kernel {
  KernelKind kind = KernelKind::Elementwise;
  double flops = 0;                  // floating-point operations (multiply-add = 2)
  double bytes = 0;                  // bytes read + written from device memory
  std::int64_t m = 0, n = 0, k = 0;  // GEMM shape (C[m,n] = A[m,k] B[k,n]); 0 otherwise
                                     // (attention: m = seq_q, n = seq_kv, k = head_dim;
                                     //  row kernels: m = rows, n = cols; LayerNorm2d: k = full row;
                                     //  Rope: k = heads per token)
  int dtype_bytes = 2;
  KernelFn fn = KernelFn::Pass;  // row kernels only
  std::int64_t batch = 0;        // attention: batch x heads (0: no shape)
  bool causal = false;           // attention: a causal mask over the block
  int sms_reserved = 0;          // GEMM: SMs held by a communication kernel running beside it

  // flops = 2mnk, bytes = (mk + kn + mn) * dtype_bytes (each operand read once, C written once).
  static Kernel gemm(std::int64_t m, std::int64_t n, std::int64_t k, int dtype_bytes);
  // Fused (flash) attention forward: flops = 4 * batch_heads * seq_q * seq_kv * head_dim (QK^T and PV),
  // halved when causal; bytes = batch_heads * (2 seq_q + 2 seq_kv) * head_dim * dtype_bytes (Q, K, V in, O out).
  // The backward pass does 2.5x the forward FLOPs; a schedule may scale `flops` (the shape stays).
  static Kernel attention(std::int64_t batch_heads, std::int64_t seq_q, std::int64_t seq_kv, std::int64_t head_dim,
                          int dtype_bytes, bool causal);
  // Any kind described only by its work (no shape): copies, routing.
  static Kernel elementwise(KernelKind kind, double flops, double bytes, int dtype_bytes);
  // A row kernel: the work as the schedule counts it, and the rows x cols that `fn` runs on
  // (LayerNorm: tokens x hidden; softmax: score rows x keys; GeLU: tokens x ffn columns;
  // SwiGLU: tokens x ffn output columns, reading twice as many; LseMerge: rows x head_dim).
  static Kernel rowwise(KernelKind kind, KernelFn fn, std::int64_t rows, std::int64_t cols, double flops, double bytes,
                        int dtype_bytes);
};

}  // namespace meshsim
