// Trace assembly: CUDA-event times of one rank's ops -> a Trace with the schedule's ids.
//
// The executor records one start event per rank (after the common start barrier, waited
// on by every stream) and a start and an end event around every op. cudaEventElapsedTime
// gives float milliseconds from the rank's start event; they become integer picoseconds,
// rounded to nearest (halves away from zero) after widening to double, so the same floats
// always give the same Trace. A time below zero (the events' ~0.5 us resolution) is 0;
// an end before its start is the start.
//
//   std::vector<OpTiming> t = {{.op = 0, .start_ms = 0.0f, .end_ms = 1.25f}};
//   Trace tr = assemble_trace(/*role=*/1, /*rank=*/5, t);
//   tr.source == "cuda"; tr.events[0].end == Time::from_ps(1'250'000'000)
#pragma once

#include <vector>

#include "schedule/ir.h"

namespace meshsim::cuda {

struct OpTiming {
  int op = 0;          // index into the role's ops
  float start_ms = 0;  // cudaEventElapsedTime(rank start, op start)
  float end_ms = 0;    // cudaEventElapsedTime(rank start, op end)
};

Time ms_to_time(float ms);  // >= 0, rounded to the nearest picosecond

// Events in op order (whatever the order of `timings`), each {role, op, rank, start, end}.
// Throws Error when an op index appears twice.
Trace assemble_trace(int role, int rank, const std::vector<OpTiming>& timings);

}  // namespace meshsim::cuda
