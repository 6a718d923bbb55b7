// Reporting a sweep (sim/sweep.h) as `meshsim sweep` and `meshsim sweep-merge` print it: the
// ranked table and summary line, --json's ranked objects, and the HTML report's scaling plot.
//
//   const std::vector<const sweep::Row*> order = sweep::ranked(rows, metric);
//   std::cout << sweep_text(order, metric);      // the table, then "16 variants: 9 fit, ..."
//   sweep_json(order).dump(2);                   // [{"rank": 1, "variant": ..., ...}, ...]
//   write_html_report(sweep_html(source, sweep, rows, order, metric), path);
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "report/html_report.h"
#include "sim/sweep.h"

namespace meshsim {

// The ranked table (rank, variant, GPUs, batch, iteration, tokens/s, MFU, peak memory, fits;
// the variants --where excluded left out), then the summary line: "16 variants: 9 fit, 3 out of
// memory, 4 invalid; best: parallel.tp=4 parallel.pp=2 (20167 tokens/s)".
std::string sweep_text(const std::vector<const sweep::Row*>& order, const sweep::RankMetric& metric);
// --json: each row's sweep::row_json after its "rank", best first.
nlohmann::ordered_json sweep_json(const std::vector<const sweep::Row*>& order);
// The HTML report: the scenario, the ranked table and the scaling plot of the ranked metric.
// `rows` in variant order.
HtmlReport sweep_html(const std::string& source, const sweep::Sweep& sweep, const std::vector<sweep::Row>& rows,
                      const std::vector<const sweep::Row*>& order, const sweep::RankMetric& metric);

}  // namespace meshsim
