// meshsim collective KIND --ranks N --bytes SIZE[:MAX] [--algo NAME|auto] [--topology PRESET|FILE]
//   [--mesh row=4,col=4] [--placement natural|bunched:RxC|list:...] [--group all|row|col|DIM]
//   [--fidelity formula|flow|nccl] [--nccl-arch SM] [--nccl-channels N] [--explain] [--trace FILE] [--json]
// --algo nccl (or --fidelity nccl): NCCL's tuning model picks the algorithm and protocol
// (sim/nccl_model.h) and prints its candidate table.
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/scenario_flags.h"
#include "core/budget.h"
#include "core/error.h"
#include "report/collective_report.h"
#include "report/teaching_html.h"
#include "schedule/buffer_view.h"
#include "sim/collective_job.h"
#include "sim/collective_sim.h"
#include "sim/scenario.h"
#include "topology/placement.h"
#include "topology/presets.h"

namespace meshsim::cli {

namespace {

struct Options {
  CollectiveJob job;       // what the flags bound to it ask for; --bytes as given
  double max_seconds = 0;  // --max-seconds
  std::string max_memory;  // --max-memory
  std::string maxbytes;    // nccl-tests' -e: --bytes is then the sweep's MIN
  int stepfactor = 0;      // nccl-tests' -f (our -f is --fidelity): multiply by this; 0 = 2
  std::string format = "meshsim";
  bool json = false;
  std::string trace;
  std::string html;  // the teaching page
};

// The sizes to run as parse_bytes_sweep reads them: --bytes, or MIN:MAX[:FACTOR] from
// --bytes, --maxbytes and --stepfactor.
std::string sweep_text(const Options& o) {
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
bool nccl_tests_format(const Options& o) {
  const bool nccl_tests = o.format == "nccl-tests";
  if (!nccl_tests && o.format != "meshsim")
    throw Error(fmt::format("--format: unknown table format '{}'; use meshsim or nccl-tests", o.format));
  if (nccl_tests && (o.json || o.job.explain))
    throw Error("--format nccl-tests: a text table; drop --json and --explain");
  return nccl_tests;
}

// --html: the teaching page of the one size run.
void write_teaching_page(const Options& o, const Topology& topo, Router& router, const AlgorithmRegistry& registry,
                         const CollectiveRequest& req, const CollectiveOutcome& out) {
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

void write_trace(const Options& o, const Topology& topo, const CollectiveContext& ctx,
                 const std::vector<CollectiveOutcome>& outs) {
  write_file(o.trace, perfetto_trace(topo, ctx, outs).dump() + "\n", "--trace");
  if (!o.json) std::cout << fmt::format("trace written to {} (open in https://ui.perfetto.dev)\n", o.trace);
}

int run(const Options& o) {
  start_budget(o.max_seconds, o.max_memory);
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
  return 0;
}

}  // namespace

Run add_collective_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  CLI::App* c = app.add_subcommand("collective", "Simulate one collective (or a size sweep) on a modeled cluster");
  c->footer(
      "Examples:\n"
      "  meshsim collective allreduce -t dgx-h100 --bytes 8GiB\n"
      "  meshsim collective reducescatter -t dgx-h100:nodes=2 --bytes 1GiB --algo multiring --explain\n"
      "  meshsim collective allreduce -t dgx-h100 -b 8 -e 8G --stepfactor 2 --format nccl-tests   # nccl-tests' table\n"
      "  meshsim collective allreduce -t dgx-h100:nodes=4 --bytes 256MiB --algo nccl --json\n"
      "  meshsim collective allreduce -n 8 --bytes 64MiB --algo dbt --html dbt.html   # the teaching page");
  c->add_option("kind", o->job.kind, "allreduce, allgather, reducescatter, broadcast, reduce, alltoall, sendrecv")
      ->required();
  c->add_option("--ranks,-n", o->job.ranks, "Ranks in the mesh (default: every GPU of the topology)");
  c->add_option("--bytes,-b,--minbytes", o->job.bytes,
                "Size, e.g. 64MiB, or a sweep MIN:MAX (doubling, e.g. 1KiB:4GiB) or MIN:MAX:F (times F)")
      ->capture_default_str();
  c->add_option("--maxbytes,-e", o->maxbytes, "Sweep from --bytes up to this size, as nccl-tests' -b MIN -e MAX");
  c->add_option("--stepfactor", o->stepfactor, "Sweep step factor, as nccl-tests' -f (default 2)");
  c->add_option("--format", o->format,
                "Table layout: meshsim, or nccl-tests (its columns and its Avg bus bandwidth line)")
      ->capture_default_str();
  std::string algo_help =
      "Algorithm, auto (lowest closed-form time; on a topology running NCCL's protocols, among the algorithms NCCL "
      "runs), or nccl (NCCL 2.20's tuning model picks algorithm and protocol). Available:";
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  for (const auto& a : registry.all()) {
    std::string kinds;
    for (CollKind k : a.kinds) kinds += (kinds.empty() ? "" : ",") + std::string(to_string(k));
    algo_help += fmt::format("\n  {:<20} [{}] {}", a.name, kinds, a.summary);
  }
  c->add_option("--algo,-a", o->job.algo, algo_help)->capture_default_str();
  c->add_option("--topology,-t", o->job.topology, "Preset (PRESET or PRESET:key=value,...) or YAML file")
      ->capture_default_str();
  c->add_option("--mesh", o->job.mesh, "Logical mesh, e.g. row=4,col=4 (default: 1D, or square for row/col groups)");
  c->add_option("--placement,-p", o->job.placement, "natural, bunched:RxC (block per node) or list:g0,g1,...")
      ->capture_default_str();
  c->add_option("--group,-g", o->job.group, "all, row, col, or a mesh dimension name; every group runs at once")
      ->capture_default_str();
  c->add_option("--fidelity,-f", o->job.fidelity,
                "formula (closed form), flow (routed flows, contention; the default) or nccl (NCCL's tuning model, "
                "the default with --algo nccl)");
  c->add_option("--nccl-arch", o->job.nccl_arch,
                "GPU architecture for --algo nccl: sm70, sm80, sm90 (default: the "
                "topology's GPU, e.g. sm90 for dgx-h100)");
  c->add_option("--nccl-channels", o->job.nccl_channels,
                "Channels for --algo nccl (default: derived from the topology)");
  c->add_option("--root", o->job.root, "Root rank of broadcast/reduce")->capture_default_str();
  c->add_option("--chunks", o->job.chunks, "Chunks for pipelined algorithms (0 = algorithm default)");
  c->add_option("--reduce-bw", o->job.reduce_bw, "Reduction speed, e.g. 100GB/s (default: fused with transfers, free)");
  c->add_option("--alltoall-sizes", o->job.alltoall_sizes, "File with a p x p matrix of per-destination sizes");
  c->add_flag("--explain", o->job.explain, "Show the formula with numbers and, for small groups, the step table");
  c->add_option("--html", o->html,
                "Write the teaching page: who sends to whom and every rank's buffer round by round (groups of up to "
                "16 ranks), stepped in a browser");
  c->add_option("--trace", o->trace, "Write a Chrome/Perfetto trace JSON file");
  c->add_flag("--json", o->json, "Print JSON instead of text");
  add_budget(c, o->max_seconds, o->max_memory);
  return [o]() { return run(*o); };
}

Run add_algorithms_command(CLI::App& app) {
  app.add_subcommand("algorithms", "List the collective algorithms and the kinds each implements")
      ->footer(
          "Example:\n  meshsim algorithms   # then: meshsim collective allgather --algo recursive_doubling --explain");
  return []() {
    const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
    for (const auto& a : registry.all()) {
      std::string kinds;
      for (CollKind k : a.kinds) kinds += (kinds.empty() ? "" : ", ") + std::string(to_string(k));
      std::cout << fmt::format("{:<20} {:<40} {}\n", a.name, kinds, a.summary);
    }
    return 0;
  };
}

}  // namespace meshsim::cli
