// Compute ops of a schedule run for real on this CPU, in float32, with the shape the op
// describes (schedule/kernel.h), so their measured times can be held against the
// simulator's compute model:
//
//   gemm        C[m,n] = A[m,k] B[k,n] through kernels::gemm_cpu (OpenBLAS)
//   others      the CPU reference of the kernel the op names (backend/kernel_call.h):
//               LayerNorm, GeLU, SwiGLU, dropout, softmax, cross-entropy, LSE merge,
//               blocked attention, forward or backward by the op's phase; a memory-bound
//               pass over the op's bytes for optimizer steps and copies
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

// This host's physical memory (8 GiB when the system does not say).
Bytes host_memory();

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

  const float* workspace() const { return ws_.data(); }

 private:
  std::uint64_t seed_;
  std::vector<float> ws_;
};

}  // namespace meshsim::cpu
