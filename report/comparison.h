// Measured against predicted: the table `meshsim run` and `validate` print after running a
// schedule for real. One Comparison is built from the measured times (and, for validate, the
// simulator's), and both the text and the JSON are rendered from it, so the two never
// disagree on a row or a figure.
//
//   Comparison c = op_comparison(schedule, measured, predicted ? &*predicted : nullptr, kind, bytes, ranks);
//   text << comparison_text(c);      // the table and its total line
//   add_comparison_json(j, c);       // "ops": [...], "measured_total_s", "predicted_total_s", "error_pct"
//
// Two shapes, one per kind of schedule:
//   PerOp      collective workloads: a row per op (role 0) with algbw and busbw (NCCL's
//              test-suite definitions, collective_report.h), and a total line;
//   PerOpKind  training schedules: a row per op kind (op_kind_label) with how many ops it
//              sums, and the iteration as the last row.
// Error is (measured - predicted) / predicted in percent: > 0 where the run was slower than
// predicted.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "schedule/collective.h"
#include "schedule/ir.h"
#include "sim/schedule_sim.h"

namespace meshsim {

// A time as the comparison prints it: the JSON gets `seconds`, the text format_time(`time`).
// A time measured as a Time keeps both exact (of); one summed or averaged in seconds (over
// ranks, over ops) keeps its exact seconds for the JSON and prints as the whole picoseconds
// below them (of_seconds).
struct ComparedTime {
  double seconds = 0;
  Time time;
  static ComparedTime of(Time t) { return {t.seconds(), t}; }
  static ComparedTime of_seconds(double s) { return {s, Time::from_ps(static_cast<std::int64_t>(s * 1e12))}; }
};

// (measured - predicted) / predicted in percent; 0 where the prediction is not positive (an
// op the simulator times as free, a pipeline receive say).
double error_pct(double measured_s, double predicted_s);

struct ComparisonRow {
  std::string name;  // the op (PerOp), or the op kind (PerOpKind)
  int ops = 0;       // PerOpKind: the ops the row sums
  ComparedTime measured;
  double algbw_GBps = 0, busbw_GBps = 0;  // PerOp
  ComparedTime predicted;                 // when Comparison::predicted
  double error_pct = 0;                   // when Comparison::predicted
};

struct Comparison {
  enum class Shape { PerOp, PerOpKind };
  Shape shape = Shape::PerOp;
  bool predicted = false;  // validate: predicted times and errors beside the measured ones
  std::vector<ComparisonRow> rows;
  // PerOp: the sums over the rows (name "total"); PerOpKind: the iteration, the latest end
  // of any rank's op against the simulated iteration (name "iteration").
  ComparisonRow total;
};

// The kind a training op is compared under: "gemm", "attention", ... for compute; "tp
// allreduce", "cp sendrecv", ... for collectives (axis and kind); "pp send" / "pp recv" for
// pipeline messages.
std::string op_kind_label(const Op& op);

// Collective workloads: a row per op of role 0, measured[i] its time (the slowest rank's end
// minus the earliest start), algbw = bytes / time and busbw = algbw x busbw_factor(kind,
// ranks); with `predicted`, each op's simulated time (its trace event i) beside it.
Comparison op_comparison(const Schedule& schedule, const std::vector<Time>& measured,
                         const ScheduleSimResult* predicted, CollKind kind, Bytes bytes, int ranks);

// Training schedules: `measured` is every rank's events, rank by rank (role, op, start and end
// on that rank), from `world` ranks with world / roles per stage. A row per op kind: each op's
// time averaged over its stage's ranks, summed over the kind's ops and stages; with
// `predicted`, the simulated times summed the same way (one rank per stage).
Comparison op_kind_comparison(const Schedule& schedule, const std::vector<TraceEvent>& measured, int world,
                              const ScheduleSimResult* predicted);

// The table, indented by two spaces, then the total: PerOp a line "total measured X,
// predicted Y (E%)"; PerOpKind the iteration row and a note on what the rows sum.
std::string comparison_text(const Comparison& c);

// Appends the rows and the total to `j`. PerOp: "ops": [{"op", "measured_s", "algbw_GBps",
// "busbw_GBps", "predicted_s", "error_pct"}], "measured_total_s", "predicted_total_s",
// "error_pct"; PerOpKind: "kinds": [{"kind", "ops", "measured_s", "predicted_s",
// "error_pct"}], "measured_iteration_s", "predicted_iteration_s", "error_pct". Predicted
// figures and errors only when c.predicted; an error that is not a number is null.
void add_comparison_json(nlohmann::ordered_json& j, const Comparison& c);

}  // namespace meshsim
