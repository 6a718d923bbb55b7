// Reporting a timed collective: terminal summary, nccl-tests-like sweep table, the
// teaching step table, JSON, and a Chrome/Perfetto trace.
//
// Bandwidth follows NCCL's test suite: algbw = bytes / time, busbw = algbw * factor
// (2(p-1)/p all-reduce; (p-1)/p all-gather, reduce-scatter, all-to-all; 1 otherwise),
// so simulated figures compare directly with all_reduce_perf and friends.
//
//   CollectiveContext ctx{...};
//   std::cout << summary_text(topo, ctx, outcome);
//   write_perfetto_trace("out.json", topo, ctx, outcome);   // open in ui.perfetto.dev
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sim/collective_job.h"
#include "sim/collective_sim.h"
#include "topology/topology.h"

namespace meshsim {

// What the user asked for, echoed in reports.
struct CollectiveContext {
  std::string topology;   // preset spec or file
  std::string placement;  // "natural", "bunched:2x2", ...
  std::string mesh;       // "row=4,col=4"
  std::string group;      // "all", "row", "col", ...
  AlgorithmChoice requested_algorithm;
  Fidelity fidelity = Fidelity::Flow;
  int groups = 1;
  int ranks = 0;  // per group
};

struct Bandwidths {
  double algbw_GBps = 0;
  double busbw_GBps = 0;
  double factor = 1;
};
Bandwidths bandwidths(CollKind kind, int ranks, Bytes bytes, Time t);

std::string summary_text(const Topology& topo, const CollectiveContext& ctx, const CollectiveOutcome& out);

// One row per size of a --bytes A:B sweep, like nccl-tests' output.
std::string sweep_header(const CollectiveContext& ctx, CollKind kind);
std::string sweep_row(const CollectiveOutcome& out);
// The same sweep in nccl-tests' layout (its columns in its order, out-of-place then in-place,
// fp32, so that a script that reads nccl-tests output reads this): #wrong is N/A, nothing
// was computed; in-place is the out-of-place time (the simulator moves the same bytes).
// The footer is nccl-tests' closing lines with the average bus bandwidth over the rows.
std::string nccl_tests_header(const CollectiveContext& ctx, CollKind kind);
std::string nccl_tests_row(const CollectiveOutcome& out);
std::string nccl_tests_footer(const std::vector<double>& busbw_GBps);
// The same layout for any figures (run and validate print measured ones): the three column
// heading lines, a row of one size at `time` with #wrong as given ("0", "N/A"), and the
// footer with its out-of-bounds line.
struct NcclTestsRow {
  CollKind kind = CollKind::AllReduce;
  int ranks = 0;
  Bytes bytes = 0;
  int root = 0;
  Time time;
  std::string wrong = "N/A";
};
std::string nccl_tests_columns();
std::string nccl_tests_row(const NcclTestsRow& row);
std::string nccl_tests_footer(const std::vector<double>& busbw_GBps, const std::string& out_of_bounds);

// The teaching view: the formula with numbers, and (when recorded) the step table.
std::string explain_text(const Topology& topo, const CollectiveOutcome& out, std::size_t max_rows);
// The same for one size of a run, as meshsim collective --explain prints it (and Python's
// collective(explain=True) returns it): for groups of up to 16 ranks the step table comes from
// the flow model even when the headline is the formula's.
std::string explanation(const Topology& topo, Router& router, const AlgorithmRegistry& registry,
                        const CollectiveRequest& req, const CollectiveOutcome& out);

// What the reports echo of a resolved job (sim/collective_job.h) as the user wrote it.
CollectiveContext collective_context(const CollectiveJob& job, const ResolvedCollective& c);

nlohmann::ordered_json outcome_json(const Topology& topo, const CollectiveContext& ctx, const CollectiveOutcome& out);

// Chrome trace-event JSON: a track per rank (steps, transfers) and per busy link.
nlohmann::ordered_json perfetto_trace(const Topology& topo, const CollectiveContext& ctx,
                                      const std::vector<CollectiveOutcome>& outs);

}  // namespace meshsim
