// One device allocation per rank, planned before the step: every op's buffers at fixed
// offsets, so nothing is allocated or freed while the step runs.
//
// Rule (why reuse is safe): the workspace holds one arena per schedule stream the role
// uses, laid end to end in Stream order. All ops of a stream lay their buffers out from
// the start of that stream's arena, so they reuse the same bytes; a CUDA stream runs its
// ops one at a time, in order, so two ops of one stream are never live together. Ops on
// different streams may overlap in time; their arenas are disjoint, so they never alias.
// An arena is as large as the largest op of its stream. Every buffer starts at a multiple
// of kWorkspaceAlign (256 B, what cuBLAS and vectorized kernels want). Buffers carry no
// data from one op to the next: the executor measures time, not a model's numerics
// (collective workloads, whose numerics are checked, fill their buffer before each op).
//
//   stream Compute: gemm 1024x1024x1024 bf16 -> cublas 32 MiB | a 2 MiB | b 2 MiB | c 2 MiB
//   stream Dp:      allreduce 64 MiB         -> data 64 MiB | stage ...
//   total = arena(Compute) + arena(Dp)
//
// A GEMM's first buffer is its stream's cuBLAS workspace, so it sits at the arena start for
// every GEMM of the stream and the stream's cuBLAS handle keeps one workspace.
//
// Step programs on one buffer (all-reduce, ...): a step's sends and receives run together
// in one NCCL group, so a receive that reduces (or that overlaps another receive) lands in
// a staging area and is applied after the group, in receive order; a send whose range a
// copy-receive of the same step overwrites goes from a snapshot taken before the group.
//   StepLayout l = cuda_step_layout(step, /*shared_buffer=*/true);   // offsets in stage/snapshot
#pragma once

#include <cstdint>
#include <vector>

#include "schedule/collective.h"
#include "schedule/ir.h"

namespace meshsim::cuda {

inline constexpr std::int64_t kWorkspaceAlign = 256;
inline constexpr std::int64_t kCublasWorkspace = 32LL << 20;  // per stream that runs GEMMs

std::int64_t align_up(std::int64_t bytes, std::int64_t align = kWorkspaceAlign);

// The buffers an op can have: a GEMM's cuBLAS workspace and operands A, B, C; a collective's
// one buffer (Data) or two (Send, Recv) and its steps' Stage and Snapshot areas; a kernel's
// operands (Args).
enum class Buf { Cublas, A, B, C, Data, Send, Recv, Stage, Snapshot, Args };
const char* to_string(Buf b);  // "cublas", "a", "b", "c", "data", "send", "recv", "stage", "snapshot", "args"

struct BufferNeed {
  Buf buf;
  std::int64_t bytes = 0;
};

struct Region {
  Buf buf;
  std::int64_t offset = 0;  // from the workspace start
  std::int64_t bytes = 0;
  std::int64_t end() const { return offset + bytes; }
};

struct Arena {
  Stream stream;
  std::int64_t offset = 0;
  std::int64_t bytes = 0;
};

struct WorkspacePlan {
  std::int64_t total = 0;
  std::vector<Arena> arenas;             // one per used stream, in Stream order
  std::vector<std::vector<Region>> ops;  // per op: its buffers, in the order of its needs
  // Op `op`'s buffer `b`; throws Error (naming both) when absent.
  const Region& region(int op, Buf b) const;
};

// The core: op i runs on streams[i] and needs needs[i] (sizes >= 0; throws Error otherwise).
WorkspacePlan plan_workspace(const std::vector<Stream>& streams, const std::vector<std::vector<BufferNeed>>& needs);

// Staging of one step of a step program (see above): schedule/collective.h's layout_step
// with reductions staged (they run as a kernel after the NCCL group) and scratch aligned.
inline StepLayout cuda_step_layout(const Step& step, bool shared_buffer) {
  return layout_step(step, shared_buffer, /*stage_reductions=*/true, kWorkspaceAlign);
}

// What a collective op needs when run as rank `group_rank`'s part of `program` on `spec`:
// its data buffer(s) (rank_buffers) and the largest staging and snapshot areas of its steps.
std::vector<BufferNeed> step_program_needs(const StepProgram& program, const CollectiveSpec& spec, int group_rank);
// Native NCCL: all-reduce, all-gather, reduce-scatter, broadcast and reduce work in place
// on one buffer of spec.bytes; all-to-all has a send and a receive buffer of spec.bytes.
std::vector<BufferNeed> native_collective_needs(const CollectiveSpec& spec);
// Compute and point-to-point ops: a GEMM (cublas, a, b, c by shape and dtype_bytes), any
// other kernel (args: its operands, kernel_call.h; `bf16`: as kernel_call runs it), Send/Recv
// (data: op.bytes). Collective ops: throws (use the two functions above).
std::vector<BufferNeed> op_needs(const Op& op, bool bf16 = false);

}  // namespace meshsim::cuda
