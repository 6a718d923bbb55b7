#include "report/published_report.h"

#include <fmt/format.h>

namespace meshsim {

namespace {

std::string unit(PublishedMetric m) { return m == PublishedMetric::ActivationPct ? "pp" : "%"; }

}  // namespace

nlohmann::json published_json(const PublishedReport& report) {
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
  return j;
}

std::string published_text(const PublishedReport& report) {
  std::string s;
  for (const PublishedGroupResult& g : report.groups) {
    s += fmt::format("{} / {}: {}\n", g.source_key, g.group, g.where);
    s += fmt::format("  {:<28} {:<18} {:>12} {:>12} {:>9}\n", "case", "metric", "measured", "predicted", "error");
    for (const PublishedCaseResult& c : g.cases)
      s += fmt::format("  {:<28} {:<18} {:>12.4g} {:>12.4g} {:>+8.2f}{}\n", c.id, to_string(c.metric), c.measured,
                       c.predicted, c.error, unit(c.metric));
    s += fmt::format("  mean {:+.2f}, mean |error| {:.2f} (bound {:.2f}), worst |error| {:.2f} (bound {:.2f}): {}\n\n",
                     g.mean_error, g.mean_abs_error, g.bound_mean, g.worst_abs_error, g.bound_worst,
                     g.within_bound ? "ok" : "OUT OF BOUND");
  }
  return s;
}

}  // namespace meshsim
