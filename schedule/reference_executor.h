// The reference executor: runs a StepProgram serially on real float32 buffers, one per
// rank, with the step semantics every executor shares (collective.h). It is the oracle
// the algorithm tests compare against a direct serial reduction/gather, and the model the
// cpu backend follows over sockets.
//
// Semantics:
//   - each rank runs its steps in order; entering a step posts all its sends at once
//     (eager: the payload is copied from the buffer AS OF THE STEP START into a FIFO
//     queue per (sender, receiver) pair), then the rank blocks until every receive of the
//     step has a message at the head of its queue; receives are applied (copied, or added
//     for RecvOp::Reduce) and the rank moves on;
//   - a receive must match the message size exactly; every transfer must lie inside the
//     buffer and be whole float32 elements (build programs with element_bytes = 4);
//   - when no rank can move and some are unfinished, the run throws Error("step program
//     deadlocked: rank r at step s waits for ..."); messages left unconsumed at the end
//     throw too.
//
// Buffers (the rules of collective.h): inputs[r] is rank r's buffer as laid out for the
// kind (bytes/4 floats; for all-gather rank r's data sits in slice r; for all-to-all it
// is the send buffer, blocks in destination order). The result is every rank's buffer
// after the run (for all-to-all the receive buffer, blocks in source order; the local
// block is copied before step 0).
//
//   auto prog = reg.find("ring", CollKind::AllReduce)->build(spec);   // spec.element_bytes = 4
//   std::vector<std::vector<float>> out = run_reference(*prog, spec, inputs);
#pragma once

#include <vector>

#include "schedule/collective.h"

namespace meshsim {

// reduce_in: how a reducing receive adds (ReduceIn, collective.h).
std::vector<std::vector<float>> run_reference(const StepProgram& program, const CollectiveSpec& spec,
                                              std::vector<std::vector<float>> inputs,
                                              ReduceIn reduce_in = ReduceIn::Float32);

}  // namespace meshsim
