// meshsim moe-dispatch [--topology PRESET|FILE] [--ranks N] [--tokens T] [--hidden H]
//   [--experts E] [--topk K] [--groups G] [--dtype fp8|bf16] [--fidelity flow|formula]
//   [--seed S] [--samples N] [--json]
// One MoE dispatch (or combine: the same traffic backwards) as DeepEP's normal kernels run
// it, timed on the topology, with bandwidths on the wire and as DeepEP's tests count them
// (sim/moe_dispatch.h).

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "report/moe_report.h"
#include "sim/scenario.h"
#include "topology/presets.h"

namespace meshsim::cli {

namespace {

struct Options {
  std::string topology = "dgx-h100";
  int ranks = -1;  // every GPU of the topology
  MoeRouting routing;
  std::string dtype = "fp8";
  std::string fidelity = "flow";
  bool json = false;
};

int run(Options o) {
  const Topology topo = resolve_topology(o.topology);
  o.routing.element_bytes = moe_element_bytes(o.dtype, "--dtype");
  const Fidelity fidelity = parse_fidelity(o.fidelity, "--fidelity");
  const MoeDispatchOutcome out =
      run_moe_dispatch(topo, o.ranks == -1 ? topo.num_gpus() : o.ranks, "--ranks", o.routing, fidelity);
  const MoeDispatchContext ctx{o.topology, o.dtype, fidelity, o.routing};
  if (o.json)
    std::cout << moe_dispatch_json(ctx, out).dump(2) << "\n";
  else
    std::cout << moe_dispatch_text(ctx, out);
  return 0;
}

}  // namespace

Run add_moe_dispatch_command(CLI::App& app) {
  auto o = std::make_shared<Options>();
  o->routing.groups = 4;  // DeepEP's test: min(nodes, 4)
  CLI::App* c = app.add_subcommand(
      "moe-dispatch",
      "Time one MoE token dispatch (or combine) as DeepEP's normal kernels run it on a modeled cluster");
  c->footer(
      "Examples:\n"
      "  meshsim moe-dispatch -t dgx-h100:nvlink_bandwidth=200GB/s,nvlink_efficiency=0.8,nodes=4   # DeepEP's EP32\n"
      "  meshsim moe-dispatch -t dgx-h100 --dtype bf16 --json");
  c->add_option("--topology,-t", o->topology, "Preset (PRESET or PRESET:key=value,...) or YAML file")
      ->capture_default_str();
  c->add_option("--ranks,-n", o->ranks, "Expert-parallel ranks, whole nodes (default: every GPU of the topology)");
  c->add_option("--tokens", o->routing.tokens, "Tokens per rank")->capture_default_str();
  c->add_option("--hidden", o->routing.hidden, "Hidden size (elements per token)")->capture_default_str();
  c->add_option("--experts", o->routing.experts, "Routed experts, a multiple of --ranks")->capture_default_str();
  c->add_option("--topk", o->routing.topk, "Experts per token")->capture_default_str();
  c->add_option("--groups", o->routing.groups,
                "Nodes a token may use (node-limited gating, DeepEP's num_topk_groups; 0 = no limit)")
      ->capture_default_str();
  c->add_option("--dtype", o->dtype, "Wire format: fp8 (with a float scale per 128 elements) or bf16")
      ->capture_default_str();
  c->add_option("--fidelity,-f", o->fidelity, "formula (closed form) or flow (routed flows, contention)")
      ->capture_default_str();
  c->add_option("--seed", o->routing.seed, "Seed of the sampled routing (node-limited gating)")->capture_default_str();
  c->add_option("--samples", o->routing.samples, "Tokens sampled to estimate node-limited routing")
      ->capture_default_str();
  c->add_flag("--json", o->json, "Print JSON instead of text");
  return [o]() { return run(*o); };
}

}  // namespace meshsim::cli
