// `meshsim run` and `meshsim validate` on one rank: the scenario's schedule executed for real
// on a backend (backend/make_executor.h), every rank's measured events gathered on rank 0,
// and, for validate, the same schedule simulated on a model of this machine, set side by side
// (report/comparison.h) as text, JSON or nccl-tests' table, with a Perfetto trace of both.
//
//   RunOptions o;  o.validate = true;                 // what the flags asked for
//   const int n = ranks_to_start(o, sc, nprocs);      // the launcher's side: ranks to start
//   return run_rank(o, sc);                           // each rank, started by a launcher
//
// Collective workloads (the scenario's `workload:`) run here (run_report.cpp): the machine
// model is the scenario's `topology:` or, when it has none, a switch whose latency (ping-pong
// between ranks 0 and 1) and bandwidth (a ring shift of every rank at once) are measured before
// the run, with the reduction cost per byte measured on rank 0 (backend/rank_session.h); with
// --backend cuda and no `topology:`, the scenario's default topology preset (nothing is
// measured). Training schedules run in run_training.cpp: every rank its pipeline stage's ops,
// predicted with the compute model of the scenario's `profile:`, else (cpu) this host measured
// or (cuda) the GPU preset matching the device name. Errors name run's flags (-n, --timeout).
#pragma once

#include <string>
#include <vector>

#include "backend/make_executor.h"
#include "backend/rank_session.h"
#include "schedule/ir.h"
#include "sim/scenario.h"

namespace meshsim {

// What run and validate were asked for, past the scenario and the ranks to start.
struct RunOptions {
  bool validate = false;
  Backend backend = Backend::Cpu;
  CollectivesMode collectives = CollectivesMode::Ours;  // cuda: our step programs, or NCCL's own collectives
  std::string trace;                                    // --trace: the Perfetto trace to write ("": none)
  bool json = false;
  double timeout_s = 120;
  int warmup = 1;                  // cuda: untimed passes of the step before the timed one
  bool fp32_kernels = false;       // cuda: --kernels fp32 (a 2-byte model's non-GEMM kernels in float32, not bf16)
  std::string format = "meshsim";  // collective workloads: meshsim's table, or nccl-tests' layout
};

// The backend as run and validate name it in their first line: "cpu", or "cuda (collectives: ours)".
std::string backend_label(const RunOptions& o);

// The launcher's side, before any rank starts: how many ranks to start for the scenario
// (`nprocs`, -n, when given; a training layout's size; a workload's ranks), checking once
// what would otherwise fail on every rank (-n against the layout, the cpu backend's buffers
// and workspace against this host's memory).
int ranks_to_start(const RunOptions& o, const Scenario& sc, int nprocs);

// One rank of the run (every rank calls it, started by a launcher): rank 0 prints the result
// and writes the trace. A numerics mismatch is an Error after the report.
int run_rank(const RunOptions& o, const Scenario& sc);

// The training path of run_rank (the scenario has no workload: section; run_training.cpp).
int run_training_rank(const RunOptions& o, const Scenario& sc, RankSession& s);

// Writes the measured events (a track per rank) and, for validate, the predicted ones (a
// track per pipeline stage) into one Perfetto trace at `path` (--trace); op names come from
// the schedule.
void write_side_by_side_trace(const std::string& path, const Schedule& schedule, Backend backend,
                              const std::vector<TraceEvent>& measured, const Trace* predicted);

}  // namespace meshsim
