// meshsim collective past its flags: see collective_run.h.
#include "report/collective_run.h"

#include <fmt/format.h>

#include <iostream>
#include <vector>

#include "core/error.h"
#include "core/output_file.h"
#include "report/collective_report.h"
#include "report/teaching_html.h"
#include "schedule/buffer_view.h"
#include "sim/collective_sim.h"
#include "topology/presets.h"

namespace meshsim {

namespace {

// The sizes to run as parse_bytes_sweep reads them: --bytes, or MIN:MAX[:FACTOR] from
// --bytes, --maxbytes and --stepfactor.
std::string sweep_text(const CollectiveRunOptions& o) {
  std::string sweep = o.job.bytes;
  if (!o.maxbytes.empty()) {
    if (o.job.bytes.find(':') != std::string::npos)
      throw Error("--maxbytes: give the sweep either as --bytes MIN:MAX or as --bytes MIN --maxbytes MAX, not both");
    sweep += ":" + o.maxbytes;
  }
  if (o.stepfactor != 0) {
    if (sweep.find(':') == std::string::npos)
      throw Error("--stepfactor: applies to a sweep; add --maxbytes MAX (nccl-tests' -e) or --bytes MIN:MAX");
    sweep += ":" + std::to_string(o.stepfactor);
  }
  return sweep;
}

// Whether --format asks for nccl-tests' table (checked against --json and --explain).
bool nccl_tests_format(const CollectiveRunOptions& o) {
  const bool nccl_tests = o.format == "nccl-tests";
  if (!nccl_tests && o.format != "meshsim")
    throw Error(fmt::format("--format: unknown table format '{}'; use meshsim or nccl-tests", o.format));
  if (nccl_tests && (o.json || o.job.explain))
    throw Error("--format nccl-tests: a text table; drop --json and --explain");
  return nccl_tests;
}

// --html: the teaching page of the one size run.
void write_teaching_page(const CollectiveRunOptions& o, const Topology& topo, Router& router,
                         const AlgorithmRegistry& registry, const CollectiveRequest& req,
                         const CollectiveOutcome& out) {
  if (out.algorithm == nullptr)
    throw Error("--html: NCCL's model predicts a time, not steps to draw; use --algo NAME or auto");
  const auto program = out.algorithm->build(out.spec);
  const std::string title = fmt::format("meshsim collective {}: {} on {} ranks, {}", to_string(out.spec.kind),
                                        out.algorithm->name, out.spec.ranks, format_bytes(out.spec.bytes));
  write_file(
      o.html,
      teaching_html(buffer_view(*program, out.spec), out.spec, title, explanation(topo, router, registry, req, out)),
      "--html");
  say_wrote(o.html, "the teaching page: open it in a browser");
}

void write_trace(const CollectiveRunOptions& o, const Topology& topo, const CollectiveContext& ctx,
                 const std::vector<CollectiveOutcome>& outs) {
  write_file(o.trace, perfetto_trace(topo, ctx, outs).dump() + "\n", "--trace");
  if (!o.json) std::cout << fmt::format("trace written to {} (open in https://ui.perfetto.dev)\n", o.trace);
}

}  // namespace

void print_collective_run(const CollectiveRunOptions& o) {
  CollectiveJob job = o.job;  // and what the other flags add to it
  job.bytes = sweep_text(o);
  job.trace = !o.trace.empty();
  job.explain = job.explain || !o.html.empty();  // the page shows the step table too
  ResolvedCollective c = resolve_collective_job(job);
  const Topology& topo = *c.topology;
  const CollKind* kind = &c.kind;
  CollectiveRequest& req = c.request;
  const int group_size = static_cast<int>(req.groups.front().size());
  const CollectiveContext ctx = collective_context(job, c);

  AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  Router router(topo);
  const bool nccl_tests = nccl_tests_format(o);
  const std::vector<Bytes>& sizes = c.sizes;
  if (!o.html.empty() && sizes.size() != 1) throw Error("--html: the page draws one size; give --bytes SIZE");
  std::vector<double> busbws;
  std::vector<CollectiveOutcome> outs;
  nlohmann::ordered_json json_out = nlohmann::ordered_json::array();
  if (nccl_tests)
    std::cout << nccl_tests_header(ctx, *kind) << std::flush;
  else if (sizes.size() > 1 && !o.json)
    std::cout << sweep_header(ctx, *kind) << std::flush;
  for (Bytes b : sizes) {
    req.bytes = b;
    CollectiveOutcome out = run_collective(topo, router, registry, req);
    if (nccl_tests) {
      std::cout << nccl_tests_row(out) << std::flush;
      busbws.push_back(bandwidths(*kind, group_size, b, out.time).busbw_GBps);
    } else if (o.json) {
      json_out.push_back(outcome_json(topo, ctx, out));
    } else if (sizes.size() > 1) {
      std::cout << sweep_row(out) << std::flush;
    } else {
      std::cout << summary_text(topo, ctx, out);
    }
    if (o.job.explain && sizes.size() == 1 && !o.json) std::cout << explanation(topo, router, registry, req, out);
    if (!o.html.empty()) write_teaching_page(o, topo, router, registry, req, out);
    if (!o.trace.empty()) outs.push_back(std::move(out));
  }
  if (nccl_tests) std::cout << nccl_tests_footer(busbws);
  if (o.job.explain && sizes.size() > 1 && !o.json) std::cout << "(--explain applies to a single --bytes size)\n";
  if (o.json) std::cout << (sizes.size() == 1 ? json_out.front() : json_out).dump(2) << "\n";
  if (!o.trace.empty()) write_trace(o, topo, ctx, outs);
}

}  // namespace meshsim
