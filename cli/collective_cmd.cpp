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
#include "sim/collective_sim.h"
#include "sim/scenario.h"
#include "topology/placement.h"
#include "topology/presets.h"

namespace meshsim::cli {

namespace {

struct Options {
  std::string kind;
  int ranks = -1;  // -1: every GPU of the topology (or the mesh size)
  std::string bytes = "1GiB";
  std::string algo = "auto";
  std::string topology = "dgx-h100";
  double max_seconds = 0;  // --max-seconds
  std::string max_memory;  // --max-memory
  std::string mesh;
  std::string placement = "natural";
  std::string group = "all";
  std::string fidelity;   // empty: flow, or nccl with --algo nccl
  std::string nccl_arch;  // empty: from the topology preset's GPU
  int nccl_channels = 0;
  int root = 0;
  int chunks = 0;
  std::string reduce_bw;
  std::string maxbytes;  // nccl-tests' -e: --bytes is then the sweep's MIN
  int stepfactor = 0;    // nccl-tests' -f (our -f is --fidelity): multiply by this; 0 = 2
  std::string format = "meshsim";
  std::string alltoall_sizes;
  bool explain = false;
  bool json = false;
  std::string trace;
};

// Whitespace-separated p x p matrix of sizes (units allowed), one row per sender.
std::vector<std::vector<Bytes>> read_alltoall_sizes(const std::string& path, int p) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("--alltoall-sizes: cannot open '{}'", path));
  std::vector<std::vector<Bytes>> m(p);
  std::string tok;
  int n = 0;
  while (in >> tok) {
    if (n >= p * p) throw Error(fmt::format("--alltoall-sizes: '{}' has more than {}x{} entries", path, p, p));
    m[n / p].push_back(parse_bytes(tok, fmt::format("--alltoall-sizes[{}][{}]", n / p, n % p)));
    ++n;
  }
  if (n != p * p)
    throw Error(fmt::format("--alltoall-sizes: '{}' has {} entries; a {}-rank all-to-all needs {} ({} rows of {})",
                            path, n, p, p * p, p, p));
  return m;
}

Mesh choose_mesh(const Options& o, int ranks) {
  if (!o.mesh.empty()) {
    Mesh m = parse_mesh(o.mesh, "--mesh");
    if (ranks > 0 && m.size() != ranks)
      throw Error(fmt::format("--mesh {} has {} ranks but --ranks is {}; make them agree", o.mesh, m.size(), ranks));
    return m;
  }
  const bool two_d = o.group == "row" || o.group == "col" || o.placement.rfind("bunched", 0) == 0;
  if (two_d) {
    const int q = static_cast<int>(std::lround(std::sqrt(static_cast<double>(ranks))));
    if (q * q != ranks)
      throw Error(
          fmt::format("--group {} / --placement {} need a 2D mesh, and {} ranks is not a square; give "
                      "--mesh row=R,col=C",
                      o.group, o.placement, ranks));
    return parse_mesh(fmt::format("row={},col={}", q, q), "--mesh");
  }
  return parse_mesh(fmt::format("rank={}", ranks), "--ranks");
}

std::vector<std::vector<int>> choose_groups(const Placement& pl, const std::string& group) {
  const Mesh& m = pl.mesh();
  if (group == "all") return {pl.gpus()};
  if (group == "row" || group == "col") {
    if (m.dims.size() != 2)
      throw Error(fmt::format("--group {}: needs a 2D mesh (got {} dimensions); give --mesh row=R,col=C", group,
                              m.dims.size()));
    // Mesh rows vary along the second dimension; columns along the first.
    return pl.groups_along(group == "row" ? m.dims[1].first : m.dims[0].first);
  }
  return pl.groups_along(group);
}

// --ranks (default: every GPU of the topology, or the mesh size), checked against the topology.
int resolve_ranks(const Options& o, const Topology& topo) {
  int ranks = o.ranks;
  if (ranks == -1) ranks = o.mesh.empty() ? topo.num_gpus() : parse_mesh(o.mesh, "--mesh").size();
  if (ranks < 1)
    throw Error(fmt::format("--ranks: {} ranks cannot run a collective; use --ranks N with N >= 1", ranks));
  if (ranks > topo.num_gpus())
    throw Error(
        fmt::format("--ranks {}: topology '{}' has only {} GPUs; use --ranks <= {} or a larger topology "
                    "(e.g. --topology {}:nodes=N)",
                    ranks, o.topology, topo.num_gpus(), topo.num_gpus(), topo.name()));
  return ranks;
}

// The request for every size of the sweep (bytes set per size), options checked in order.
CollectiveRequest make_request(const Options& o, CollKind kind, const Placement& pl) {
  CollectiveRequest req;
  req.kind = kind;
  req.algorithm = o.algo;
  req.fidelity = collective_fidelity(o.fidelity, o.algo, "--fidelity");
  if (req.fidelity != Fidelity::Nccl && (!o.nccl_arch.empty() || o.nccl_channels != 0))
    throw Error("--nccl-arch/--nccl-channels: only apply to NCCL's model; add --algo nccl");
  if (o.nccl_channels < 0 || o.nccl_channels > 64)
    throw Error(
        fmt::format("--nccl-channels: {} is not a channel count NCCL runs; use 1..64 (or 0 = derived from the "
                    "topology)",
                    o.nccl_channels));
  req.nccl.sm = nccl_sm(o.nccl_arch.empty() ? default_gpu_for(o.topology) : o.nccl_arch, "--nccl-arch");
  req.nccl.channels = o.nccl_channels;
  req.groups = choose_groups(pl, o.group);
  req.root = o.root;
  req.chunks = o.chunks;
  if (o.chunks < 0) throw Error("--chunks: must be >= 0 (0 = the algorithm's default)");
  if (!o.reduce_bw.empty()) req.gamma_ps = 1.0 / parse_bandwidth(o.reduce_bw, "--reduce-bw").bytes_per_ps();
  const int group_size = static_cast<int>(req.groups.front().size());
  if (!o.alltoall_sizes.empty()) {
    if (kind != CollKind::AllToAll) throw Error("--alltoall-sizes: only applies to alltoall");
    req.alltoall_bytes = read_alltoall_sizes(o.alltoall_sizes, group_size);
  }
  const bool small = group_size <= 16;
  req.record = req.fidelity != Fidelity::Nccl && (!o.trace.empty() || (o.explain && small));
  if (req.fidelity == Fidelity::Nccl && !o.trace.empty())
    throw Error("--trace: NCCL's model predicts a time, not steps; drop --trace or use --fidelity flow");
  return req;
}

// What the reports say about the run besides its outcome.
CollectiveContext make_context(const Options& o, const Placement& pl, const Mesh& mesh, const CollectiveRequest& req) {
  CollectiveContext ctx;
  ctx.topology = o.topology;
  ctx.placement = pl.kind();
  std::string mesh_text;
  for (const auto& [name, size] : mesh.dims)
    mesh_text += fmt::format("{}{}={}", mesh_text.empty() ? "" : ",", name, size);
  ctx.mesh = mesh_text;
  ctx.group = o.group;
  ctx.requested_algorithm = o.algo;
  ctx.fidelity = req.fidelity;
  ctx.groups = static_cast<int>(req.groups.size());
  ctx.ranks = static_cast<int>(req.groups.front().size());
  return ctx;
}

// The sizes to run as parse_bytes_sweep reads them: --bytes, or MIN:MAX[:FACTOR] from
// --bytes, --maxbytes and --stepfactor.
std::string sweep_text(const Options& o) {
  std::string sweep = o.bytes;
  if (!o.maxbytes.empty()) {
    if (o.bytes.find(':') != std::string::npos)
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
  if (nccl_tests && (o.json || o.explain)) throw Error("--format nccl-tests: a text table; drop --json and --explain");
  return nccl_tests;
}

// --explain for one size: the steps behind `out`.
void print_explanation(const Topology& topo, Router& router, const AlgorithmRegistry& registry,
                       const CollectiveRequest& req, const CollectiveOutcome& out) {
  const bool small = req.groups.front().size() <= 16;
  const CollectiveOutcome* shown = &out;
  CollectiveOutcome flow_view;
  if (!out.flow && !out.nccl && small) {
    // The step table comes from the flow model even when the headline is the formula.
    CollectiveRequest fr = req;
    fr.fidelity = Fidelity::Flow;
    fr.algorithm = out.algorithm->name;
    fr.record = true;
    flow_view = run_collective(topo, router, registry, fr);
    shown = &flow_view;
  }
  std::cout << explain_text(topo, *shown, 200);
}

void write_trace(const Options& o, const Topology& topo, const CollectiveContext& ctx,
                 const std::vector<CollectiveOutcome>& outs) {
  write_file(o.trace, perfetto_trace(topo, ctx, outs).dump() + "\n", "--trace");
  if (!o.json) std::cout << fmt::format("trace written to {} (open in https://ui.perfetto.dev)\n", o.trace);
}

int run(const Options& o) {
  start_budget(o.max_seconds, o.max_memory);
  const auto kind = parse_coll_kind(o.kind);
  if (!kind)
    throw Error(
        fmt::format("collective: unknown kind '{}'; use allreduce, allgather, reducescatter, broadcast, "
                    "reduce, alltoall or sendrecv",
                    o.kind));
  const Topology topo = resolve_topology(o.topology);
  const int ranks = resolve_ranks(o, topo);
  const Mesh mesh = choose_mesh(o, ranks);
  const Placement pl = Placement::parse(o.placement, mesh, topo, "--placement");
  CollectiveRequest req = make_request(o, *kind, pl);
  const int group_size = static_cast<int>(req.groups.front().size());
  const CollectiveContext ctx = make_context(o, pl, mesh, req);

  AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  Router router(topo);
  const std::string sweep = sweep_text(o);
  const bool nccl_tests = nccl_tests_format(o);
  const std::vector<Bytes> sizes = parse_bytes_sweep(sweep, "--bytes");
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
    if (o.explain && sizes.size() == 1 && !o.json) print_explanation(topo, router, registry, req, out);
    if (!o.trace.empty()) outs.push_back(std::move(out));
  }
  if (nccl_tests) std::cout << nccl_tests_footer(busbws);
  if (o.explain && sizes.size() > 1 && !o.json) std::cout << "(--explain applies to a single --bytes size)\n";
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
      "  meshsim collective allreduce -t dgx-h100:nodes=4 --bytes 256MiB --algo nccl --json");
  c->add_option("kind", o->kind, "allreduce, allgather, reducescatter, broadcast, reduce, alltoall, sendrecv")
      ->required();
  c->add_option("--ranks,-n", o->ranks, "Ranks in the mesh (default: every GPU of the topology)");
  c->add_option("--bytes,-b,--minbytes", o->bytes,
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
  c->add_option("--algo,-a", o->algo, algo_help)->capture_default_str();
  c->add_option("--topology,-t", o->topology, "Preset (PRESET or PRESET:key=value,...) or YAML file")
      ->capture_default_str();
  c->add_option("--mesh", o->mesh, "Logical mesh, e.g. row=4,col=4 (default: 1D, or square for row/col groups)");
  c->add_option("--placement,-p", o->placement, "natural, bunched:RxC (block per node) or list:g0,g1,...")
      ->capture_default_str();
  c->add_option("--group,-g", o->group, "all, row, col, or a mesh dimension name; every group runs at once")
      ->capture_default_str();
  c->add_option("--fidelity,-f", o->fidelity,
                "formula (closed form), flow (routed flows, contention; the default) or nccl (NCCL's tuning model, "
                "the default with --algo nccl)");
  c->add_option("--nccl-arch", o->nccl_arch,
                "GPU architecture for --algo nccl: sm70, sm80, sm90 (default: the "
                "topology's GPU, e.g. sm90 for dgx-h100)");
  c->add_option("--nccl-channels", o->nccl_channels, "Channels for --algo nccl (default: derived from the topology)");
  c->add_option("--root", o->root, "Root rank of broadcast/reduce")->capture_default_str();
  c->add_option("--chunks", o->chunks, "Chunks for pipelined algorithms (0 = algorithm default)");
  c->add_option("--reduce-bw", o->reduce_bw, "Reduction speed, e.g. 100GB/s (default: fused with transfers, free)");
  c->add_option("--alltoall-sizes", o->alltoall_sizes, "File with a p x p matrix of per-destination sizes");
  c->add_flag("--explain", o->explain, "Show the formula with numbers and, for small groups, the step table");
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
