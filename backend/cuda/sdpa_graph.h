// Scaled dot-product attention as an operation graph: the form cuDNN's fused flash-attention
// engines take (issue 34, item 2). cuDNN 9 has no "attention" call for causal training at
// 9.19: a program describes attention as a graph of matmuls, pointwise ops and reductions,
// and cuDNN's heuristics match that graph to a fused kernel. This file builds the graph as
// plain data, with no cuDNN include, so it is checked everywhere: `run_graph_cpu` executes
// it on the CPU, element by element, and the tests compare that with our attention reference
// (kernels/attention.h). cudnn_sdpa.h lowers the same graph to cuDNN's backend descriptors.
//
// Layout (BHSD, row-major, as our kernels store it when batch = 1 and heads = BH):
//   Q, O, dQ, dO  [b, h_q, s_q, d]     K, V, dK, dV  [b, h_kv, s_kv, d]     Stats [b, h_q, s_q, 1]
// Query head i reads key/value head i / (h_q / h_kv) (grouped-query attention; h_kv = h_q is
// plain multi-head). Stats is the log-sum-exp of each row's scaled, masked scores: our
// kernels' lse. Causal masking is top-left: key j is masked for query i when j > i.
//
// Forward:  S = scale Q K^T; S masked to -inf above the diagonal; M = rowmax S;
//           E = exp(S - M); Z = rowsum E; Stats = M + log Z; P = E / Z (bf16); O = P V.
// Backward: D = rowsum(dO * O) (scratch "softmax_sum"); P = exp(scale Q K^T (masked) - Stats);
//           dV = P^T dO; dP = dO V^T; dS = scale P (dP - D); dK = dS^T Q; dQ = dS K
//           (into an fp32 scratch "dq_accum" first, when the shape is large: see below).
// With grouped heads, dK and dV are computed per query head and summed over each group.
//
//   sdpa::Shape s{.batch = 1, .heads_q = 64, .heads_kv = 8, .seq_q = 4096, .seq_kv = 4096,
//                 .head_dim = 128, .causal = true};
//   sdpa::Graph g = sdpa::backward_graph(s);          // throws Error when the shape is unsupported
//   sdpa::run_graph_cpu(g, buffers);                  // buffers: uid -> float storage
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace meshsim::cuda::sdpa {

struct Shape {
  std::int64_t batch = 1;
  std::int64_t heads_q = 1;
  std::int64_t heads_kv = 1;
  std::int64_t seq_q = 0;
  std::int64_t seq_kv = 0;
  std::int64_t head_dim = 0;
  bool causal = false;
  // 0: 1 / sqrt(head_dim).
  double scale = 0;
  double attn_scale() const;
};

// "" when cuDNN's fused attention takes the shape; else why not (one line, naming the field).
// Taken: every size positive, heads_q a multiple of heads_kv, head_dim a multiple of 8 and at
// most 256 (cuDNN 9's support surface for bf16 on Hopper).
std::string unsupported(const Shape& s);

enum class DataType { Float, Bf16, Int32, Bool };
const char* to_string(DataType t);

// The operands a caller binds to memory, by uid.
enum Uid : std::int64_t {
  kQ = 1,
  kK = 2,  // described as K^T: [b, h_kv, d, s_kv] with strides swapped (the same memory as K)
  kV = 3,
  kO = 4,
  kStats = 5,
  kdO = 6,
  kdQ = 7,
  kdK = 8,
  kdV = 9,
  kSoftmaxSum = 10,  // backward scratch: [b, h_q, s_q, 1] float
  kDqAccum = 11,     // backward scratch: [b, h_q, s_q, d] float, zeroed before each run
};

struct Tensor {
  std::int64_t uid = 0;
  std::string name;
  DataType type = DataType::Float;
  std::vector<std::int64_t> dims, strides;  // 4 each
  bool is_virtual = false;                  // lives inside the fused kernel only
  bool by_value = false;                    // a scalar passed with the graph (value)
  double value = 0;
  std::int64_t elements() const;  // storage span: 1 + sum (dims - 1) * strides
};

enum class OpKind { Matmul, Pointwise, Reduction, Reshape };
enum class Pointwise { Add, Sub, Mul, Div, Exp, Log, Identity, GenIndex, CmpGe, BinarySelect };
enum class Reduce { Add, Max };

struct Op {
  OpKind kind = OpKind::Pointwise;
  std::string name;
  Pointwise pw = Pointwise::Identity;  // Pointwise
  Reduce reduce = Reduce::Add;         // Reduction
  int axis = -1;                       // GenIndex
  DataType compute = DataType::Float;  // math precision
  std::vector<std::int64_t> in;        // uids; BinarySelect: x, b, t (y = t ? x : b)
  std::int64_t out = 0;
};

struct Graph {
  Shape shape;
  bool backward = false;
  std::vector<Tensor> tensors;  // uid order of creation
  std::vector<Op> ops;          // topological order
  const Tensor& tensor(std::int64_t uid) const;
  // Non-virtual tensors the caller allocates: the operands above that this graph uses, in
  // uid order (including the scratch ones).
  std::vector<std::int64_t> bound_uids() const;
};

// Throw Error (naming the field) when unsupported(s) is not "".
Graph forward_graph(const Shape& s);
// dq_accum: route dQ through the fp32 kDqAccum scratch (cuDNN's choice for shapes whose
// b * h_q * s_q * s_kv * 2 bytes exceed 256 MiB; default: decided from the shape that way).
Graph backward_graph(const Shape& s);
Graph backward_graph(const Shape& s, bool dq_accum);
bool backward_uses_dq_accum(const Shape& s);

// Executes `g` on the CPU: `buffers` maps each bound uid to its storage (Tensor::elements()
// floats, element (i0..i3) at sum i_k * strides_k); outputs and scratch are written there.
// Bf16 tensors, virtual ones included, hold values rounded to bf16 (round to nearest even),
// as the fused kernel stores them; Float tensors hold float32; Int32/Bool hold exact small
// integers. Throws Error when a bound buffer is missing or too small.
void run_graph_cpu(const Graph& g, std::map<std::int64_t, std::vector<float>>& buffers);

// One line per op: "bmm1: matmul(Q, K^T) -> S [1,4,16,16] float virtual" (for logs and docs).
std::string describe(const Graph& g);

}  // namespace meshsim::cuda::sdpa
