#include "sim/published.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/yaml_reader.h"
#include "schedule/memory.h"
#include "sim/training_sim.h"
#include "topology/presets.h"

namespace meshsim {

namespace {

namespace fs = std::filesystem;

struct MetricName {
  PublishedMetric metric;
  const char* name;
};
constexpr MetricName kMetrics[] = {{PublishedMetric::IterationS, "iteration_s"},
                                   {PublishedMetric::LayerForwardMs, "layer_forward_ms"},
                                   {PublishedMetric::LayerBackwardMs, "layer_backward_ms"},
                                   {PublishedMetric::LayersThroughput, "layers_throughput"},
                                   {PublishedMetric::LayersForwardS, "layers_forward_s"},
                                   {PublishedMetric::LayersBackwardS, "layers_backward_s"},
                                   {PublishedMetric::ActivationPct, "activation_pct"},
                                   {PublishedMetric::CollectiveUs, "collective_us"}};

// Reads one source file; every error names file:line and the field.
class Reader : public YamlReader {
 public:
  using YamlReader::YamlReader;
  void only_keys(const YAML::Node& n, const std::string& field, std::initializer_list<const char*> keys) const {
    YamlReader::only_keys(n, field, keys, "{field: value} (see docs/validation/published.md)");
  }
  double number(const YAML::Node& v, const std::string& field) const { return positive_number(v, field); }
  std::vector<std::string> texts(const YAML::Node& v, const std::string& field) const {
    return YamlReader::texts(v, field, "[parallel.tp=8, model=gpt-22b]");
  }
};

PublishedMetric parse_metric(const Reader& r, const YAML::Node& v, const std::string& field) {
  const std::string t = r.text(v, field);
  std::string known;
  for (const MetricName& m : kMetrics) {
    if (t == m.name) return m.metric;
    known += (known.empty() ? "" : ", ") + std::string(m.name);
  }
  r.fail(v, field, fmt::format("unknown metric '{}'; use one of {}", t, known));
}

PublishedCase parse_case(const Reader& r, const YAML::Node& n, const std::string& field) {
  r.only_keys(n, field, {"id", "metric", "measured", "set", "baseline", "layer", "note"});
  PublishedCase c;
  c.id = r.text(r.required(n, "id", field), field + ".id");
  c.metric = parse_metric(r, r.required(n, "metric", field), field + ".metric");
  c.measured = r.number(r.required(n, "measured", field), field + ".measured");
  if (n["set"]) c.set = r.texts(n["set"], field + ".set");
  if (n["baseline"]) c.baseline = r.texts(n["baseline"], field + ".baseline");
  if (c.metric == PublishedMetric::ActivationPct && !n["baseline"])
    r.fail(n, field, "activation_pct needs 'baseline:' overrides giving the 100% layer, e.g. [parallel.sp=false]");
  if (n["layer"]) {
    const double l = r.number(n["layer"], field + ".layer");
    if (l != std::floor(l) || l > 1e6) r.fail(n["layer"], field + ".layer", "expected a layer index such as 1");
    c.layer = static_cast<int>(l);
  }
  if (n["note"]) c.note = r.text(n["note"], field + ".note");
  return c;
}

PublishedGroup parse_group(const Reader& r, const YAML::Node& n, const std::string& field) {
  r.only_keys(n, field, {"name", "where", "scenario", "bound", "cases"});
  PublishedGroup g;
  g.name = r.text(r.required(n, "name", field), field + ".name");
  g.where = r.text(r.required(n, "where", field), field + ".where");
  const YAML::Node base = r.required(n, "scenario", field);
  if (!base.IsMap())
    r.fail(base, field + ".scenario", "expected a scenario mapping (model:, parallel:, topology:, ...)");
  YAML::Emitter out;
  out << base;
  g.base = out.c_str();
  const YAML::Node bound = r.required(n, "bound", field);
  r.only_keys(bound, field + ".bound", {"mean_abs", "worst_abs"});
  g.bound_mean = r.number(r.required(bound, "mean_abs", field + ".bound"), field + ".bound.mean_abs");
  g.bound_worst = r.number(r.required(bound, "worst_abs", field + ".bound"), field + ".bound.worst_abs");
  const YAML::Node cases = r.required(n, "cases", field);
  if (!cases.IsSequence() || cases.size() == 0) r.fail(cases, field + ".cases", "expected a non-empty list of cases");
  std::set<std::string> ids;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::string f = fmt::format("{}.cases[{}]", field, i);
    g.cases.push_back(parse_case(r, cases[i], f));
    if (!ids.insert(g.cases.back().id).second)
      r.fail(cases[i], f + ".id", "'" + g.cases.back().id + "' is used twice in this group; ids must be unique");
  }
  return g;
}

ScenarioNode case_node(const PublishedGroup& g, const std::vector<std::string>& sets, const std::string& what) {
  ScenarioNode n = ScenarioNode::parse(g.base, what);
  for (const std::string& s : sets) n.set(s);
  return n;
}

// The span [first start, last end] of role 0's ops that `pick` selects, in seconds.
template <class Pick>
double span_s(const TrainingResult& r, Pick pick, const std::string& what) {
  Time first = Time::from_ps(std::numeric_limits<std::int64_t>::max()), last;
  bool any = false;
  for (const TraceEvent& ev : r.sim.trace.events) {
    if (ev.role != 0) continue;
    const Op& op = r.schedule.roles[0].ops[ev.op];
    if (!pick(op)) continue;
    any = true;
    first = std::min(first, ev.start);
    last = std::max(last, ev.end);
  }
  if (!any) throw Error(what + ": the first stage runs no such op; check the case's layer and layout");
  return static_cast<double>((last - first).ps()) * 1e-12;
}

bool backward_like(Phase p) { return p == Phase::Backward || p == Phase::Recompute; }

}  // namespace

const char* to_string(PublishedMetric m) {
  for (const MetricName& n : kMetrics)
    if (n.metric == m) return n.name;
  return "?";
}

PublishedSource parse_published_source(const std::string& text, const std::string& file) {
  const Reader r(file);
  const YAML::Node root = parse_yaml_text(text, file);
  if (!root.IsMap()) throw Error(file + ": a published source is a mapping with source:, counts: and groups:");
  r.only_keys(root, "source file", {"source", "counts", "groups"});
  PublishedSource s;
  s.file = file;
  s.key = fs::path(file).stem().string();
  s.source = r.text(r.required(root, "source", "source file"), "source");
  s.counts = r.text(r.required(root, "counts", "source file"), "counts");
  const YAML::Node groups = r.required(root, "groups", "source file");
  if (!groups.IsSequence() || groups.size() == 0) r.fail(groups, "groups", "expected a non-empty list of groups");
  for (std::size_t i = 0; i < groups.size(); ++i)
    s.groups.push_back(parse_group(r, groups[i], fmt::format("groups[{}]", i)));
  return s;
}

PublishedSuite load_published_suite(const std::string& path) {
  std::vector<fs::path> files;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.path().extension() == ".yaml") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    if (files.empty())
      throw Error(path + ": no *.yaml published sources in this directory; see docs/validation/published.md");
  } else if (fs::is_regular_file(path, ec)) {
    files.push_back(path);
  } else {
    throw Error(path +
                ": no such file or directory; give the suite directory (validation/published) or one source file");
  }
  PublishedSuite suite;
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw Error(f.string() + ": cannot read the file; check its permissions");
    std::stringstream text;
    text << in.rdbuf();
    suite.sources.push_back(parse_published_source(text.str(), f.string()));
  }
  return suite;
}

double predict_published(const PublishedGroup& g, const PublishedCase& c, const AlgorithmRegistry& registry) {
  const std::string what = fmt::format("{} case '{}'", g.name, c.id);
  const Scenario s = case_node(g, c.set, what).resolve();
  if ((c.metric == PublishedMetric::CollectiveUs) != s.workload.has_value())
    throw Error(fmt::format("{}: {}", what,
                            s.workload ? "a workload scenario is measured with metric collective_us"
                                       : "collective_us needs a workload scenario (workload: {collective, bytes})"));
  switch (c.metric) {
    case PublishedMetric::CollectiveUs: {
      const Topology topo = resolve_topology(s.topology);
      Router router(topo);
      CollectiveRequest req;
      req.kind = s.workload->kind;
      req.bytes = s.workload->bytes;
      req.algorithm = s.workload->algorithm.kind == AlgorithmChoice::Kind::Auto ? s.algorithm : s.workload->algorithm;
      req.fidelity = s.fidelity;
      const int n = s.workload->ranks > 0 ? s.workload->ranks : topo.num_gpus();
      if (n < 2 || n > topo.num_gpus())
        throw Error(fmt::format("{}: workload.ranks = {} does not fit the topology's {} GPUs; use 2..{} (0: all)", what,
                                n, topo.num_gpus(), topo.num_gpus()));
      std::vector<int> all(static_cast<std::size_t>(n));
      for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
      req.groups = {all};
      return static_cast<double>(run_collective(topo, router, registry, req).time.ps()) * 1e-6;
    }
    case PublishedMetric::IterationS:
      return static_cast<double>(simulate_training(s, registry, false).sim.iteration.ps()) * 1e-12;
    case PublishedMetric::LayerForwardMs:
    case PublishedMetric::LayerBackwardMs: {
      validate_parallel(s.parallel, s.model, s.parallel.world_size());
      const int first_chunk = s.parallel.chunk_layers(s.model.layers, 0);
      if (c.layer < 0 || c.layer >= first_chunk)
        throw Error(fmt::format("{}: layer {} is not on the first stage; use 0..{}", what, c.layer, first_chunk - 1));
      const TrainingResult r = simulate_training(s, registry, true);
      const bool fwd = c.metric == PublishedMetric::LayerForwardMs;
      return 1e3 * span_s(
                       r,
                       [&](const Op& op) {
                         return op.layer == c.layer && op.microbatch == 0 &&
                                (fwd ? op.phase == Phase::Forward : backward_like(op.phase));
                       },
                       what);
    }
    case PublishedMetric::LayersThroughput:
    case PublishedMetric::LayersForwardS:
    case PublishedMetric::LayersBackwardS: {
      if (s.parallel.pp != 1 || s.parallel.microbatches != 1)
        throw Error(
            fmt::format("{}: {} needs parallel.pp = 1 and parallel.microbatches = 1", what, to_string(c.metric)));
      const TrainingResult r = simulate_training(s, registry, true);
      const double fwd = span_s(
          r, [](const Op& op) { return op.layer >= 0 && op.phase == Phase::Forward; }, what);
      const double bwd = span_s(
          r, [](const Op& op) { return op.layer >= 0 && backward_like(op.phase); }, what);
      const double batch = static_cast<double>(s.parallel.global_batch());
      if (c.metric == PublishedMetric::LayersForwardS) return fwd / batch;
      if (c.metric == PublishedMetric::LayersBackwardS) return bwd / batch;
      return batch / (fwd + bwd);
    }
    case PublishedMetric::ActivationPct: {
      const Scenario b = case_node(
                             g,
                             [&] {
                               std::vector<std::string> all = c.set;
                               all.insert(all.end(), c.baseline.begin(), c.baseline.end());
                               return all;
                             }(),
                             what + " baseline")
                             .resolve();
      validate_parallel(s.parallel, s.model, s.parallel.world_size());
      validate_parallel(b.parallel, b.model, b.parallel.world_size());
      return 100.0 * static_cast<double>(layer_activation_bytes(s.model, s.parallel)) /
             static_cast<double>(layer_activation_bytes(b.model, b.parallel));
    }
  }
  return 0;
}

bool PublishedReport::within_bounds() const {
  return std::all_of(groups.begin(), groups.end(), [](const PublishedGroupResult& g) { return g.within_bound; });
}

PublishedReport check_published(const PublishedSuite& suite, const AlgorithmRegistry& registry) {
  PublishedReport report;
  for (const PublishedSource& src : suite.sources)
    for (const PublishedGroup& g : src.groups) {
      PublishedGroupResult gr;
      gr.source_key = src.key;
      gr.group = g.name;
      gr.where = g.where;
      gr.bound_mean = g.bound_mean;
      gr.bound_worst = g.bound_worst;
      for (const PublishedCase& c : g.cases) {
        PublishedCaseResult cr;
        cr.id = c.id;
        cr.metric = c.metric;
        cr.measured = c.measured;
        cr.predicted = predict_published(g, c, registry);
        cr.error = c.metric == PublishedMetric::ActivationPct ? cr.predicted - cr.measured
                                                              : 100.0 * (cr.predicted - cr.measured) / cr.measured;
        gr.mean_error += cr.error;
        gr.mean_abs_error += std::abs(cr.error);
        gr.worst_abs_error = std::max(gr.worst_abs_error, std::abs(cr.error));
        gr.cases.push_back(cr);
      }
      const double n = static_cast<double>(gr.cases.size());
      gr.mean_error /= n;
      gr.mean_abs_error /= n;
      gr.within_bound = gr.mean_abs_error <= gr.bound_mean && gr.worst_abs_error <= gr.bound_worst;
      report.groups.push_back(std::move(gr));
    }
  return report;
}

void keep_only(PublishedSuite& suite, const std::string& only, const std::string& path) {
  const auto slash = only.find('/');
  const std::string src = only.substr(0, slash), grp = slash == std::string::npos ? "" : only.substr(slash + 1);
  std::vector<PublishedSource> kept;
  for (PublishedSource& s : suite.sources) {
    if (s.key != src) continue;
    if (!grp.empty()) std::erase_if(s.groups, [&](const PublishedGroup& g) { return g.name != grp; });
    if (!s.groups.empty()) kept.push_back(std::move(s));
  }
  if (kept.empty())
    throw Error(
        fmt::format("--only: '{}' matches no source/group of {}; use a file stem such as korthikanti2022 "
                    "or korthikanti2022/table5",
                    only, path));
  suite.sources = std::move(kept);
}

}  // namespace meshsim
