// Published measurements to check the simulator against: a suite of YAML files, one per
// source (validation/published/*.yaml, format in docs/validation/published.md), each with
// groups of cases; a case is a scenario (the group's base with `set:` overrides), the
// figure the paper measured and which figure of the simulation it compares with.
//
//   PublishedSuite suite = load_published_suite("validation/published");
//   PublishedReport r = check_published(suite, AlgorithmRegistry::builtin());
//   for (const PublishedGroupResult& g : r.groups) g.mean_abs_error, g.worst_abs_error, g.within_bound
//
// Metrics (what `measured` is):
//   iteration_s          one training iteration, seconds
//   layer_forward_ms     one transformer layer's forward on the first stage, first micro-batch,
//   layer_backward_ms    or its backward with any recomputation: the span from its first op to
//                        its last, collectives included (option `layer`, default 1)
//   layers_throughput    sequences per second through the layers only: global batch over the
//                        forward plus backward spans of all layers (pp = 1, one micro-batch;
//                        embedding, loss and optimizer not counted)
//   activation_pct       one layer's stored activation bytes as a percentage of the same layer
//                        under `baseline:` overrides (e.g. sp=false, recompute=none)
// Error: (predicted - measured) / measured in percent; for activation_pct the difference in
// percentage points.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "schedule/collective.h"
#include "sim/scenario.h"

namespace meshsim {

// layers_forward_s / layers_backward_s: the forward (backward, recompute included) time of all
// the layers of one step divided by the global batch, as Xu et al. tabulate it. collective_us:
// one collective of a workload scenario (`workload:` kind, bytes, algorithm) over every GPU of
// its topology at the scenario's fidelity, in microseconds (nccl-tests' time column).
enum class PublishedMetric {
  IterationS,
  LayerForwardMs,
  LayerBackwardMs,
  LayersThroughput,
  LayersForwardS,
  LayersBackwardS,
  ActivationPct,
  CollectiveUs
};
const char* to_string(PublishedMetric m);

struct PublishedCase {
  std::string id;  // unique within its group, e.g. "175b-selective-sp"
  PublishedMetric metric = PublishedMetric::IterationS;
  double measured = 0;
  std::vector<std::string> set;       // overrides of the group's base scenario
  std::vector<std::string> baseline;  // activation_pct: overrides giving the 100% layer
  int layer = 1;                      // layer_*_ms: which layer
  std::string note;
};

struct PublishedGroup {
  std::string name;   // e.g. "table5"
  std::string where;  // e.g. "Table 5, end-to-end iteration time (s)"
  std::string base;   // the base scenario as YAML text
  std::vector<PublishedCase> cases;
  double bound_mean = 0;  // |error| bounds recorded in docs/validation/published.md
  double bound_worst = 0;
};

struct PublishedSource {
  std::string file;    // path it was read from
  std::string key;     // file stem, e.g. "korthikanti2022"
  std::string source;  // citation
  std::string counts;  // what the paper's figures include
  std::vector<PublishedGroup> groups;
};

struct PublishedSuite {
  std::vector<PublishedSource> sources;
};

// Reads every *.yaml in `dir` (sorted by name), or one file. Errors name file:line and field.
PublishedSuite load_published_suite(const std::string& path);
PublishedSource parse_published_source(const std::string& text, const std::string& file);

// --only SOURCE[/GROUP]: the suite cut to one source (its file stem) or one group of it; an
// Error naming --only and `path` (the suite's) when nothing matches.
void keep_only(PublishedSuite& suite, const std::string& only, const std::string& path);

struct PublishedCaseResult {
  std::string id;
  PublishedMetric metric = PublishedMetric::IterationS;
  double measured = 0, predicted = 0;
  double error = 0;  // signed: percent, or percentage points for activation_pct
};

struct PublishedGroupResult {
  std::string source_key, group, where;
  std::vector<PublishedCaseResult> cases;
  double mean_abs_error = 0, worst_abs_error = 0, mean_error = 0;
  double bound_mean = 0, bound_worst = 0;
  bool within_bound = true;
};

struct PublishedReport {
  std::vector<PublishedGroupResult> groups;
  bool within_bounds() const;
};

// Evaluates one case's predicted figure.
double predict_published(const PublishedGroup& g, const PublishedCase& c, const AlgorithmRegistry& registry);
PublishedReport check_published(const PublishedSuite& suite, const AlgorithmRegistry& registry);

}  // namespace meshsim
