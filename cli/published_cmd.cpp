// meshsim check-published [PATH] [--json] [--only SOURCE[/GROUP]]
//   predicted vs measured for every published case (validation/published, docs/validation/published.md);
//   exit 1 when a group's mean or worst |error| passes the bound recorded for it.
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "sim/published.h"

namespace meshsim::cli {

namespace {

struct PublishedFlags {
  std::string path;
  std::string only;
  bool json = false;
};

std::string unit(PublishedMetric m) { return m == PublishedMetric::ActivationPct ? "pp" : "%"; }

int run_check_published(const PublishedFlags& f) {
  PublishedSuite suite = load_published_suite(f.path);
  if (!f.only.empty()) {
    const auto slash = f.only.find('/');
    const std::string src = f.only.substr(0, slash), grp = slash == std::string::npos ? "" : f.only.substr(slash + 1);
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
                      f.only, f.path));
    suite.sources = std::move(kept);
  }
  const PublishedReport report = check_published(suite, AlgorithmRegistry::builtin());
  if (f.json) {
    nlohmann::json j;
    j["within_bounds"] = report.within_bounds();
    j["groups"] = nlohmann::json::array();
    for (const PublishedGroupResult& g : report.groups) {
      nlohmann::json jg{{"source", g.source_key},
                        {"group", g.group},
                        {"where", g.where},
                        {"mean_error", g.mean_error},
                        {"mean_abs_error", g.mean_abs_error},
                        {"worst_abs_error", g.worst_abs_error},
                        {"bound_mean_abs", g.bound_mean},
                        {"bound_worst_abs", g.bound_worst},
                        {"within_bound", g.within_bound}};
      jg["cases"] = nlohmann::json::array();
      for (const PublishedCaseResult& c : g.cases)
        jg["cases"].push_back({{"id", c.id},
                               {"metric", to_string(c.metric)},
                               {"measured", c.measured},
                               {"predicted", c.predicted},
                               {"error", c.error},
                               {"error_unit", unit(c.metric)}});
      j["groups"].push_back(std::move(jg));
    }
    std::cout << j.dump(2) << "\n";
  } else {
    for (const PublishedGroupResult& g : report.groups) {
      std::cout << fmt::format("{} / {}: {}\n", g.source_key, g.group, g.where);
      std::cout << fmt::format("  {:<28} {:<18} {:>12} {:>12} {:>9}\n", "case", "metric", "measured", "predicted",
                               "error");
      for (const PublishedCaseResult& c : g.cases)
        std::cout << fmt::format("  {:<28} {:<18} {:>12.4g} {:>12.4g} {:>+8.2f}{}\n", c.id, to_string(c.metric),
                                 c.measured, c.predicted, c.error, unit(c.metric));
      std::cout << fmt::format(
          "  mean {:+.2f}, mean |error| {:.2f} (bound {:.2f}), worst |error| {:.2f} (bound {:.2f}): {}\n\n",
          g.mean_error, g.mean_abs_error, g.bound_mean, g.worst_abs_error, g.bound_worst,
          g.within_bound ? "ok" : "OUT OF BOUND");
    }
  }
  if (!report.within_bounds()) {
    std::cerr << "meshsim: check-published: a group's error passed its recorded bound (see above); "
                 "explain the change in docs/validation/published.md or fix the model\n";
    return 1;
  }
  return 0;
}

}  // namespace

Run add_check_published_command(CLI::App& app) {
  auto f = std::make_shared<PublishedFlags>();
  f->path = "validation/published";
  CLI::App* c = app.add_subcommand("check-published",
                                   "predicted vs published measurements (validation/published/*.yaml): signed error "
                                   "per case, mean and worst per group");
  c->add_option("path", f->path, "suite directory or one source file (default: validation/published)");
  c->add_option("--only", f->only, "one source (file stem) or source/group, e.g. korthikanti2022/table5");
  c->add_flag("--json", f->json, "JSON instead of the table");
  c->footer("Example: meshsim check-published validation/published --only korthikanti2022/table4");
  return [f] { return run_check_published(*f); };
}

}  // namespace meshsim::cli
