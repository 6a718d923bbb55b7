// Compute ops of a schedule run for real on this CPU, in float32, with the shape the op
// describes (schedule/kernel.h), so their measured times can be held against the
// simulator's compute model:
//
//   gemm        C[m,n] = A[m,k] B[k,n] through kernels::gemm_cpu (OpenBLAS)
//   attention   kernels::attention_forward_cpu (forward, recompute) or _backward_cpu
//               (backward) over [bh, seq_q, head_dim] x [bh, seq_kv, head_dim], with bh
//               the op's FLOPs over the unmasked per-head FLOPs (a causal op with half the
//               FLOPs runs as half the heads unmasked: the same work)
//   others      norm, elementwise, softmax, optimizer, memcpy: a memory-bound pass that
//               reads op.kernel.bytes / 2 and writes as many (kernels::stream_pass_cpu, y = x / 2)
//
// Operands live in one workspace sized once by reserve() for the role's largest op, and
// hold seeded values (not a model's: this is for timing). An op too large for this host
// is refused by reserve() with an Error naming it and the fix.
//
//   CpuCompute c(seed);
//   c.reserve(role.ops);                     // before the clock starts
//   for (const Op& op : role.ops) if (op.kind == OpKind::Compute) c.run(op);
#pragma once

#include <cstdint>
#include <vector>

#include "core/units.h"
#include "schedule/ir.h"

namespace meshsim::cpu {

class CpuCompute {
 public:
  explicit CpuCompute(std::uint64_t seed) : seed_(seed) {}
  // Sizes the workspace for the compute ops in `ops`. Throws Error when it would exceed
  // `limit` bytes (default: a quarter of this host's memory).
  void reserve(const std::vector<Op>& ops, Bytes limit = 0);
  // The workspace reserve() would allocate for `ops`, with the same check (nothing allocated).
  static Bytes workspace_for(const std::vector<Op>& ops, Bytes limit = 0);
  void run(const Op& op);
  Bytes workspace_bytes() const { return static_cast<Bytes>(ws_.size()) * 4; }

  // The attention shape run for `op` (batch_heads, seq_q, seq_kv, head_dim).
  struct AttentionRun {
    std::int64_t bh = 0, sq = 0, skv = 0, d = 0;
    bool backward = false;
  };
  static AttentionRun attention_of(const Op& op);

 private:
  std::uint64_t seed_;
  std::vector<float> ws_;
};

}  // namespace meshsim::cpu
