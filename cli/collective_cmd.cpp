// meshsim collective KIND --ranks N --bytes SIZE[:MAX] [--algo NAME|auto] [--topology PRESET|FILE]
//   [--mesh row=4,col=4] [--placement natural|bunched:RxC|list:...] [--group all|row|col|DIM]
//   [--fidelity formula|flow|nccl] [--nccl-arch SM] [--nccl-channels N] [--explain] [--trace FILE] [--json]
// --algo nccl (or --fidelity nccl): NCCL's tuning model picks the algorithm and protocol
// (sim/nccl_model.h) and prints its candidate table (report/collective_run.h).
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/scenario_flags.h"
#include "report/collective_run.h"
#include "schedule/collective.h"

namespace meshsim::cli {

namespace {

struct Options : CollectiveRunOptions {
  double max_seconds = 0;  // --max-seconds
  std::string max_memory;  // --max-memory
};

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
  return [o]() {
    start_budget(o->max_seconds, o->max_memory);
    print_collective_run(*o);
    return 0;
  };
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
