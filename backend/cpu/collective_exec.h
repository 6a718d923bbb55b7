// Runs one rank's part of a collective step program over a Transport, on real float32 data.
//
// The semantics are those of the serial reference executor (schedule/reference_executor.h),
// so every rank ends with exactly the bytes run_reference computes for it:
//   - steps run in order; a step's sends and receives are posted together and the step
//     ends when all sends are handed to the transport and all receives have been applied;
//   - a send carries the buffer AS OF THE STEP START (a send whose range a receive of the
//     same step overwrites is snapshotted first; others go straight from the buffer);
//   - receives are copied, or added (RecvOp::Reduce), in the step's receive order
//     (receives whose ranges overlap are staged and applied in that order; the others are
//     read, and summed, in place as the bytes arrive);
//   - messages between a pair of ranks match in FIFO order and must have the expected size.
//
// Buffers (collective.h): `buffer` holds spec.bytes / 4 floats, laid out for the kind;
// for all-to-all it is the send buffer on entry (blocks by destination) and is replaced by
// the receive buffer (blocks by source) on return. Build the program with
// element_bytes = 4.
//
//   Transport t(rank, p, dir, {.token = "job"});
//   auto prog = reg.find("ring", CollKind::AllReduce)->build(spec);
//   CollectiveRun run = run_collective_cpu(t, *prog, spec, buffer);
//   fmt::print("{} steps in {} us\n", run.steps.size(), run.total.count() / 1000);
#pragma once

#include <chrono>
#include <span>
#include <vector>

#include "backend/cpu/transport.h"
#include "schedule/collective.h"

namespace meshsim::cpu {

struct StepTiming {
  int step = 0;
  std::chrono::steady_clock::time_point start, end;
};

struct CollectiveRun {
  std::vector<StepTiming> steps;      // this rank's steps, in order
  std::chrono::nanoseconds total{0};  // from entry (buffer setup included) to return
};

// members: the transport ranks of the group, in group-rank order (program rank i runs on
// transport rank members[i]); empty = every rank of the transport, in order. The calling
// rank must be a member. Throws Error naming the rank and step on a malformed program, a
// size mismatch or a lost peer (see Transport). reduce_in: how a reducing receive adds
// (ReduceIn, collective.h; Bf16 rounds each sum as NCCL's bf16 reductions do), the same as
// run_reference's.
CollectiveRun run_collective_cpu(Transport& transport, const StepProgram& program, const CollectiveSpec& spec,
                                 std::vector<float>& buffer, std::span<const int> members = {},
                                 ReduceIn reduce_in = ReduceIn::Float32);

}  // namespace meshsim::cpu
