// Formula fidelity in milliseconds: the same iteration simulate_schedule times, without
// expanding every micro-batch into ops.
//
// All micro-batches of a pipeline stage run the same ops, so each distinct pipeline unit
// (forward or backward of one model chunk; the last micro-batch's backward units carry the
// gradient buckets and are planned one by one) is planned and simulated once, alone. Its
// ops run back to back on the compute stream or are awaited by it, so their timing does
// not depend on when the unit starts. The unit then becomes a few fused compute ops, cut
// where it issues something that outlives it (a pipeline send, a gradient bucket), each
// carrying its duration, its activation-memory excursion and its breakdown. The fused
// schedule (about one op per unit instead of hundreds) runs on the same runner.
// Results equal simulate_schedule's (iteration time, breakdown, activation peaks, FLOPs),
// held by a test across layouts, where compute does not slow beside communication
// (GpuSpec::comm_sms 0); with it, a segment that another unit's communication overlaps for
// part of its length is charged its slowdown over the whole of it: the iteration is within
// 1% of simulate_schedule's and not below it (docs/compute.md). There is no per-op trace.
//
//   std::optional<ScheduleSimResult> r = simulate_iteration_fast(layout, topo, router, placement,
//                                                                compute, registry, options);
//   if (!r) ...  // not applicable: flow fidelity, or ZeRO-3
#pragma once

#include <optional>

#include "schedule/model.h"
#include "schedule/parallel.h"
#include "sim/schedule_sim.h"

namespace meshsim {

// nullopt where the shortcut does not hold: `flow` fidelity (collectives of a stage share
// links with other stages at different times) and ZeRO-3 (its parameter gathers queue on
// the dp stream behind gradient buckets of other units).
std::optional<ScheduleSimResult> simulate_iteration_fast(const CheckedLayout& layout, const Topology& topo,
                                                         Router& router, const Placement& placement,
                                                         const ComputeModel& compute, const AlgorithmRegistry& registry,
                                                         const ScheduleSimOptions& options);

}  // namespace meshsim
