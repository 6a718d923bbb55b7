// Reporting a simulated training iteration: terminal summary, itemized memory table,
// JSON, Perfetto trace (one process per stage, one track per stream), and the data the
// HTML report draws.
//
//   TrainingResult r = simulate_training(scenario, registry);
//   std::cout << training_summary_text(r);
//   write_json(training_json(r));
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "report/html_report.h"
#include "sim/training_sim.h"

namespace meshsim {

std::string layout_text(const Scenario& s);
std::string training_summary_text(const TrainingResult& r);
// The itemized memory table per pipeline stage (meshsim memory).
std::string memory_table_text(const ModelSpec& m, const ParallelSpec& p, const std::vector<RankMemory>& stages,
                              Bytes capacity);
// The same as JSON (meshsim memory --json): {"layout", "capacity_bytes", "fits", "stages":
// [{"stage", "role", "items": [{"category", "name", "formula", "bytes"}], "total_bytes"}]}.
nlohmann::ordered_json memory_json(const Scenario& s, const std::vector<RankMemory>& stages, Bytes capacity);
nlohmann::ordered_json training_json(const TrainingResult& r);
// Several jobs on one fabric (meshsim simulate on a scenario with jobs:): a table of each
// job's iteration alone and together, then each job's summary in the shared run; and as JSON,
// {"scenario", "topology", "fidelity", "jobs": [{"name", "gpus", "gpus_from", "alone_s",
// "together_s", "slowdown", "alone": training_json, "together": training_json}]}.
std::string jobs_summary_text(const JobsResult& r);
nlohmann::ordered_json jobs_json(const JobsResult& r);
nlohmann::ordered_json training_trace(const TrainingResult& r);
// An op's category in every trace and report (compute, recompute, optimizer, tp, dp, pp, ...).
std::string op_category(const Op& op);
HtmlReport training_html(const TrainingResult& r);

// Link load per tier (nvlink, pcie, nic, leaf-spine, spine-core, switch, then others by
// name): how many links carried bytes, the bytes, and the busiest link (points into `links`).
struct TierLoad {
  std::string tier;
  int links = 0;
  double bytes = 0;
  const LinkReport* busiest = nullptr;
};
std::vector<TierLoad> tier_loads(const std::vector<LinkReport>& links);
// `simulate --links FILE`: every link that carried bytes, one row each, by link id:
// link,name,tier,capacity_GBps,bytes,utilization,peak
std::string links_csv(const TrainingResult& r);
// The same rows as JSON objects with the CSV's keys (the Python module's `links=True`).
nlohmann::ordered_json links_json(const TrainingResult& r);
inline constexpr std::size_t kHtmlLinksPerTier = 4;  // rows per tier in the report's link-load section

// `simulate --collectives FILE`: the iteration's collectives and sends per stage, one row per
// (stage, axis, kind, bytes, group size): how many ran, their time in all and on average, and
// how much of it the stage's compute stream sat idle for (exposed: the part no compute op of the
// stage overlapped). From the op-level simulation (r.schedule and r.sim.trace).
struct CollectiveRow {
  int stage = 0;
  std::string axis, kind;  // "tp", "allreduce"; sends: "pp", "send"
  Bytes bytes = 0;
  int group = 1;
  int count = 0;
  double time_s = 0, exposed_s = 0;
};
std::vector<CollectiveRow> collective_rows(const TrainingResult& r);
std::string collective_rows_csv(const std::vector<CollectiveRow>& rows);
nlohmann::ordered_json collective_rows_json(const std::vector<CollectiveRow>& rows);

// Breakdown rows in a fixed order: (label, time).
std::vector<std::pair<std::string, Time>> breakdown_rows(const Breakdown& b);

}  // namespace meshsim
