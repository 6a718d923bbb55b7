#include "report/comparison.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "report/table.h"

namespace meshsim {

double error_pct(double measured_s, double predicted_s) {
  return predicted_s > 0 ? 100.0 * (measured_s - predicted_s) / predicted_s : 0.0;
}

std::string op_kind_label(const Op& op) {
  switch (op.kind) {
    case OpKind::Compute:
      return to_string(op.kernel.kind);
    case OpKind::Collective:
      return op.axis.str() + " " + to_string(op.coll);
    case OpKind::Send:
      return "pp send";
    case OpKind::Recv:
      return "pp recv";
  }
  return "?";
}

Comparison op_comparison(const Schedule& schedule, const std::vector<Time>& measured,
                         const ScheduleSimResult* predicted, CollKind kind, Bytes bytes, int ranks) {
  Comparison c;
  c.shape = Comparison::Shape::PerOp;
  c.predicted = predicted != nullptr;
  const std::vector<Op>& ops = schedule.roles[0].ops;
  const double factor = busbw_factor(kind, ranks);
  double measured_total = 0, predicted_total = 0;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    ComparisonRow row;
    row.name = ops[i].name;
    const Time t = measured[i];
    const double secs = t.seconds();
    const double algbw = secs > 0 ? static_cast<double>(bytes) / secs : 0;
    measured_total += secs;
    row.measured = ComparedTime::of(t);
    row.algbw_GBps = algbw * 1e-9;
    row.busbw_GBps = algbw * factor * 1e-9;
    if (predicted) {
      const TraceEvent& e = predicted->trace.events[i];
      row.predicted = ComparedTime::of(e.end - e.start);
      predicted_total += row.predicted.seconds;
      row.error_pct = error_pct(secs, row.predicted.seconds);
    }
    c.rows.push_back(std::move(row));
  }
  c.total.name = "total";
  c.total.measured = ComparedTime::of_seconds(measured_total);
  if (predicted) {
    c.total.predicted = ComparedTime::of_seconds(predicted_total);
    // Not error_pct(): a total predicted as 0 (a one-rank run) prints +inf% (JSON null), as
    // run and validate always have; the rows beside it say 0.
    c.total.error_pct = 100.0 * (measured_total - predicted_total) / predicted_total;
  }
  return c;
}

Comparison op_kind_comparison(const Schedule& schedule, const std::vector<TraceEvent>& measured, int world,
                              const ScheduleSimResult* predicted) {
  Comparison c;
  c.shape = Comparison::Shape::PerOpKind;
  c.predicted = predicted != nullptr;
  // Per (role, op): the duration summed over the role's ranks (each rank's own start to end).
  std::vector<std::vector<double>> busy(schedule.roles.size());
  for (std::size_t r = 0; r < schedule.roles.size(); ++r) busy[r].assign(schedule.roles[r].ops.size(), 0.0);
  const double ranks_per_role = static_cast<double>(world) / static_cast<double>(schedule.roles.size());
  Time measured_iter;
  for (const TraceEvent& e : measured) {
    busy[static_cast<std::size_t>(e.role)][static_cast<std::size_t>(e.op)] += (e.end - e.start).seconds();
    measured_iter = std::max(measured_iter, e.end);
  }

  struct Sum {
    int ops = 0;
    double measured = 0, predicted = 0;
  };
  std::map<std::string, Sum> kinds;  // by name: the rows' order
  for (std::size_t r = 0; r < schedule.roles.size(); ++r)
    for (std::size_t i = 0; i < schedule.roles[r].ops.size(); ++i) {
      Sum& s = kinds[op_kind_label(schedule.roles[r].ops[i])];
      ++s.ops;
      s.measured += busy[r][i] / ranks_per_role;
    }
  if (predicted)
    for (const TraceEvent& e : predicted->trace.events)
      kinds[op_kind_label(schedule.roles[e.role].ops[e.op])].predicted += (e.end - e.start).seconds();

  for (const auto& [kind, s] : kinds) {
    ComparisonRow row;
    row.name = kind;
    row.ops = s.ops;
    row.measured = ComparedTime::of_seconds(s.measured);
    if (predicted) {
      row.predicted = ComparedTime::of_seconds(s.predicted);
      row.error_pct = error_pct(s.measured, s.predicted);
    }
    c.rows.push_back(std::move(row));
  }
  c.total.name = "iteration";
  c.total.measured = ComparedTime::of(measured_iter);
  if (predicted) {
    c.total.predicted = ComparedTime::of(predicted->iteration);
    c.total.error_pct = error_pct(measured_iter.seconds(), predicted->iteration.seconds());
  }
  return c;
}

namespace {

std::string pct_cell(double e) { return fmt::format("{:>+7.1f}%", e); }

}  // namespace

std::string comparison_text(const Comparison& c) {
  const bool per_op = c.shape == Comparison::Shape::PerOp;
  std::vector<TextColumn> columns;
  if (per_op)
    columns = {{"op", 16, Align::Left}, {"measured", 12}, {"algbw", 12}, {"busbw", 12}};
  else
    columns = {{"op kind (summed)", 22, Align::Left}, {"ops", 6}, {"measured", 12}};
  if (c.predicted) columns.insert(columns.end(), {{"predicted", 12}, {"error", 8}});
  TextTable table(std::move(columns));
  auto add = [&](const ComparisonRow& r, std::vector<std::string> cells) {
    // Nothing predicted for what was measured (a pipeline receive's wait, which the simulator
    // counts as bubble): no error to give, rather than +0.0%.
    const bool none = r.predicted.time.ps() == 0 && r.measured.time.ps() != 0;
    if (c.predicted)
      cells.insert(cells.end(),
                   {format_time(r.predicted.time), none ? fmt::format("{:>8}", "-") : pct_cell(r.error_pct)});
    table.add_row(std::move(cells));
  };
  for (const ComparisonRow& r : c.rows)
    if (r.measured.time.ps() == 0 && r.predicted.time.ps() == 0)
      continue;  // an empty row: nothing measured, nothing predicted
    else if (per_op)
      add(r, {r.name, format_time(r.measured.time), fmt::format("{:>9.2f}GB/s", r.algbw_GBps),
              fmt::format("{:>9.2f}GB/s", r.busbw_GBps)});
    else
      add(r, {r.name, fmt::format("{}", r.ops), format_time(r.measured.time)});
  if (!per_op) add(c.total, {c.total.name, "", format_time(c.total.measured.time)});

  std::string out = table.text("  ");
  if (per_op) {
    out += fmt::format("  total measured {}", format_time(c.total.measured.time));
    if (c.predicted)
      out += fmt::format(", predicted {} ({:+.1f}%)", format_time(c.total.predicted.time), c.total.error_pct);
    out += "\n";
  } else {
    out +=
        "  (op kinds: each op's time, averaged over its stage's ranks, summed over ops and stages; a collective's "
        "time includes waiting for its slowest member)\n";
  }
  return out;
}

void add_comparison_json(nlohmann::ordered_json& j, const Comparison& c) {
  const bool per_op = c.shape == Comparison::Shape::PerOp;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const ComparisonRow& r : c.rows) {
    nlohmann::ordered_json row;
    if (per_op) {
      row = {{"op", r.name},
             {"measured_s", r.measured.seconds},
             {"algbw_GBps", r.algbw_GBps},
             {"busbw_GBps", r.busbw_GBps}};
    } else {
      row = {{"kind", r.name}, {"ops", r.ops}, {"measured_s", r.measured.seconds}};
    }
    if (c.predicted) {
      row["predicted_s"] = r.predicted.seconds;
      row["error_pct"] = r.error_pct;
    }
    rows.push_back(row);
  }
  j[per_op ? "ops" : "kinds"] = rows;
  j[per_op ? "measured_total_s" : "measured_iteration_s"] = c.total.measured.seconds;
  if (c.predicted) {
    j[per_op ? "predicted_total_s" : "predicted_iteration_s"] = c.total.predicted.seconds;
    j["error_pct"] = c.total.error_pct;
  }
}

}  // namespace meshsim
