// Reporting a sweep: see sweep_report.h.
#include "report/sweep_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "core/units.h"

namespace meshsim {

using sweep::RankMetric;
using sweep::Row;
using sweep::Sweep;

namespace {

// The ranked table's cells, a header row first.
std::vector<std::vector<std::string>> ranked_table(const std::vector<const Row*>& order) {
  std::vector<std::vector<std::string>> table{
      {"rank", "variant", "GPUs", "batch", "iteration", "tokens/s", "MFU", "peak mem", "fits"}};
  for (std::size_t k = 0; k < order.size(); ++k) {
    const Row& v = *order[k];
    if (v.excluded()) break;  // last in the order; counted in the summary, their rows in the files
    if (!v.valid) {
      table.push_back({std::to_string(k + 1), v.label, "-", "-", "-", "-", "-", "-", "invalid: " + v.error});
      continue;
    }
    table.push_back(
        {std::to_string(k + 1), v.label, std::to_string(v.gpus), std::to_string(v.global_batch),
         format_time(v.iteration), fmt::format("{:.0f}", v.tokens_per_s), fmt::format("{:.1f}%", 100 * v.mfu),
         fmt::format("{:.1f} GiB", static_cast<double>(v.peak) / (1 << 30)), v.fits ? "yes" : "NO (out of memory)"});
  }
  return table;
}

// Each cell padded to its column's width, two spaces apart; the last column unpadded.
std::string table_text(const std::vector<std::vector<std::string>>& table) {
  std::vector<std::size_t> width(table.front().size(), 0);
  for (const auto& row : table)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  std::string out;
  for (const auto& row : table) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c)
      line += (c ? "  " : "") + (c + 1 == row.size() ? row[c] : fmt::format("{:<{}}", row[c], width[c]));
    out += line + "\n";
  }
  return out;
}

// The scaling plot of the ranked metric: against the first --vary whose values are all
// numbers (one series per combination of the others); else against the GPU count, or the
// variant index when every variant has the same GPU count.
void add_plot(HtmlReport& h, const Sweep& sweep, const std::vector<Row>& rows, const RankMetric& metric) {
  h.sweep_y_label = metric.axis;
  h.sweep_y_unit = metric.unit;
  const auto& vs = sweep.varies();
  std::size_t axis = vs.size();
  for (std::size_t k = 0; k < vs.size() && axis == vs.size(); ++k)
    if (std::all_of(vs[k].values.begin(), vs[k].values.end(),
                    [](const std::string& v) { return sweep::number(v).has_value(); }))
      axis = k;
  std::vector<int> gpus;
  for (const Row& r : rows)
    if (r.valid) gpus.push_back(r.gpus);
  const bool same_gpus = std::adjacent_find(gpus.begin(), gpus.end(), std::not_equal_to<>()) == gpus.end();
  h.sweep_x_label = axis < vs.size() ? vs[axis].path : same_gpus ? "variant" : "GPUs";
  for (const Row& r : rows) {
    if (!r.valid) continue;
    std::string series;
    for (std::size_t k = 0; k < r.sets.size(); ++k)
      if (k != axis) series += (series.empty() ? "" : " ") + r.sets[k];
    double x = same_gpus ? static_cast<double>(r.index + 1) : r.gpus;
    if (axis < vs.size()) x = *sweep::number(r.sets[axis].substr(vs[axis].path.size() + 1));
    h.sweep.push_back({series.empty() ? metric.name : series, x, metric.of(r) * metric.scale, r.label, r.fits});
  }
}

// The summary line after the table (sweep_report.h).
std::string sweep_summary(const std::vector<const Row*>& order, const RankMetric& metric) {
  long fit = 0, oom = 0, invalid = 0, excluded = 0;
  for (const Row* r : order) (r->excluded() ? excluded : !r->valid ? invalid : r->fits ? fit : oom)++;
  std::string best = "none fits";
  if (fit > 0) best = fmt::format("best: {} ({})", order.front()->label, metric.text(metric.of(*order.front())));
  return fmt::format("{} variants: {} fit, {} out of memory, {} invalid{}; {}\n", order.size(), fit, oom, invalid,
                     excluded > 0 ? fmt::format(", {} excluded by --where", excluded) : "", best);
}

}  // namespace

std::string sweep_text(const std::vector<const Row*>& order, const RankMetric& metric) {
  return table_text(ranked_table(order)) + sweep_summary(order, metric);
}

nlohmann::ordered_json sweep_json(const std::vector<const Row*>& order) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (std::size_t k = 0; k < order.size(); ++k) {
    nlohmann::ordered_json j{{"rank", k + 1}};
    j.update(sweep::row_json(*order[k]));
    out.push_back(std::move(j));
  }
  return out;
}

HtmlReport sweep_html(const std::string& source, const Sweep& sweep, const std::vector<Row>& rows,
                      const std::vector<const Row*>& order, const RankMetric& metric) {
  HtmlReport h;
  h.title = "meshsim sweep: " + source;
  h.summary = {{"scenario", source}, {"variants", std::to_string(rows.size())}};
  h.table = ranked_table(order);
  add_plot(h, sweep, rows, metric);
  return h;
}

}  // namespace meshsim
