// meshsim moe-dispatch [--topology PRESET|FILE] [--ranks N] [--tokens T] [--hidden H]
//   [--experts E] [--topk K] [--groups G] [--dtype fp8|bf16] [--fidelity flow|formula]
//   [--seed S] [--samples N] [--json]
// One MoE dispatch (or combine: the same traffic backwards) as DeepEP's normal kernels run
// it, timed on the topology, with bandwidths on the wire and as DeepEP's tests count them
// (sim/moe_dispatch.h).
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>

#include "cli/commands.h"
#include "core/error.h"
#include "sim/moe_dispatch.h"
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

double gbps(double bytes, Time t) { return t.seconds() > 0 ? bytes / t.seconds() * 1e-9 : 0.0; }

int run(Options o) {
  const Topology topo = resolve_topology(o.topology);
  const int ranks = o.ranks == -1 ? topo.num_gpus() : o.ranks;
  if (ranks < 1 || ranks > topo.num_gpus())
    throw Error(
        fmt::format("--ranks: {} is outside 1..{} (the GPUs of '{}'); use a larger topology "
                    "(e.g. --topology {}:nodes=N) or fewer ranks",
                    ranks, topo.num_gpus(), o.topology, topo.name()));
  o.routing.element_bytes = moe_element_bytes(o.dtype, "--dtype");
  const Fidelity fidelity = parse_fidelity(o.fidelity, "--fidelity");
  std::vector<int> gpus(static_cast<std::size_t>(ranks));
  std::iota(gpus.begin(), gpus.end(), 0);
  Router router(topo);
  const MoeDispatchOutcome out = run_moe_dispatch(topo, router, gpus, o.routing, fidelity);
  const int nodes = out.ranks / out.ranks_per_node;
  const int limit = o.routing.groups <= 0 ? nodes : std::min(o.routing.groups, nodes);
  const MoeDispatchLoads& l = out.loads;
  const char* bound = nodes == 1 ? "NVLink" : out.ranks_per_node == 1 ? "NIC" : out.nvlink_bound ? "NVLink" : "NIC";
  if (o.json) {
    nlohmann::ordered_json j;
    j["topology"] = o.topology;
    j["ranks"] = out.ranks;
    j["ranks_per_node"] = out.ranks_per_node;
    j["tokens"] = o.routing.tokens;
    j["hidden"] = o.routing.hidden;
    j["dtype"] = o.dtype;
    j["token_bytes"] = l.token_bytes;
    j["experts"] = o.routing.experts;
    j["topk"] = o.routing.topk;
    j["node_limit"] = limit;
    j["routing"] = {{"nodes_per_token", out.stats.nodes},
                    {"gpus_per_token", out.stats.gpus},
                    {"exact", out.stats.exact},
                    {"samples", out.stats.exact ? 0 : o.routing.samples},
                    {"seed", o.routing.seed}};
    j["bytes_per_gpu"] = {{"rdma", l.rdma}, {"nvlink", l.nvlink}};
    j["fidelity"] = to_string(fidelity);
    j["time_s"] = out.time.seconds();
    j["formula_time_s"] = out.formula_time.seconds();
    j["bound"] = bound;
    j["wire_GBps"] = {{"rdma", gbps(l.rdma, out.time)}, {"nvlink", gbps(l.nvlink, out.time)}};
    j["deepep_GBps"] = {
        {"rdma", nodes == 1 ? nlohmann::ordered_json() : nlohmann::ordered_json(gbps(l.deepep_rdma, out.time))},
        {"nvl", gbps(l.deepep_nvl, out.time)}};
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "moe-dispatch on {}: {} ranks ({} node{} of {}), {} tokens x {} hidden in {} ({:.0f} B per token), {} experts, "
      "top-{}, at most {} of {} nodes per token\n",
      o.topology, out.ranks, nodes, nodes == 1 ? "" : "s", out.ranks_per_node, o.routing.tokens, o.routing.hidden,
      o.dtype, l.token_bytes, o.routing.experts, o.routing.topk, limit, nodes);
  std::cout << fmt::format(
      "  routing ({}): {:.3f} nodes and {:.3f} GPUs per token, own included\n",
      out.stats.exact ? "closed form" : fmt::format("{} sampled tokens, seed {}", o.routing.samples, o.routing.seed),
      out.stats.nodes, out.stats.gpus);
  std::cout << fmt::format("  per GPU, sent and received: {:.2f} MB over RDMA, {:.2f} MB over NVLink\n", l.rdma * 1e-6,
                           l.nvlink * 1e-6);
  std::cout << fmt::format("  time ({}): {:.3f} ms   formula: {:.3f} ms ({}-bound)\n", to_string(fidelity),
                           out.time.seconds() * 1e3, out.formula_time.seconds() * 1e3, bound);
  std::cout << fmt::format("  on the wire: {:.2f} GB/s RDMA, {:.2f} GB/s NVLink per GPU\n", gbps(l.rdma, out.time),
                           gbps(l.nvlink, out.time));
  const std::string rdma_count = nodes == 1 ? ""
                                            : fmt::format("{:.2f} GB/s (RDMA: tokens x nodes, own node included), ",
                                                          gbps(l.deepep_rdma, out.time));
  std::cout << fmt::format("  as DeepEP's tests count it: {}{:.2f} GB/s (NVL: tokens received, own included)\n",
                           rdma_count, gbps(l.deepep_nvl, out.time));
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
