#include "report/moe_report.h"

#include <fmt/format.h>

namespace meshsim {

namespace {

double gbps(double bytes, Time t) { return t.seconds() > 0 ? bytes / t.seconds() * 1e-9 : 0.0; }

const char* bound(const MoeDispatchOutcome& out) { return out.nvlink_bound ? "NVLink" : "NIC"; }

}  // namespace

std::string moe_dispatch_text(const MoeDispatchContext& ctx, const MoeDispatchOutcome& out) {
  const int nodes = out.nodes;
  const MoeRouting& r = ctx.routing;
  const MoeDispatchLoads& l = out.loads;
  std::string s = fmt::format(
      "moe-dispatch on {}: {} ranks ({} node{} of {}), {} tokens x {} hidden in {} ({:.0f} B per token), {} experts, "
      "top-{}, at most {} of {} nodes per token\n",
      ctx.topology, out.ranks, nodes, nodes == 1 ? "" : "s", out.ranks_per_node, r.tokens, r.hidden, ctx.dtype,
      l.token_bytes, r.experts, r.topk, out.node_limit, nodes);
  s += fmt::format("  routing ({}): {:.3f} nodes and {:.3f} GPUs per token, own included\n",
                   out.stats.exact ? "closed form" : fmt::format("{} sampled tokens, seed {}", r.samples, r.seed),
                   out.stats.nodes, out.stats.gpus);
  s += fmt::format("  per GPU, sent and received: {:.2f} MB over RDMA, {:.2f} MB over NVLink\n", l.rdma * 1e-6,
                   l.nvlink * 1e-6);
  s += fmt::format("  time ({}): {:.3f} ms   formula: {:.3f} ms ({}-bound)\n", to_string(ctx.fidelity),
                   out.time.seconds() * 1e3, out.formula_time.seconds() * 1e3, bound(out));
  s += fmt::format("  on the wire: {:.2f} GB/s RDMA, {:.2f} GB/s NVLink per GPU\n", gbps(l.rdma, out.time),
                   gbps(l.nvlink, out.time));
  const std::string rdma_count = nodes == 1 ? ""
                                            : fmt::format("{:.2f} GB/s (RDMA: tokens x nodes, own node included), ",
                                                          gbps(l.deepep_rdma, out.time));
  s += fmt::format("  as DeepEP's tests count it: {}{:.2f} GB/s (NVL: tokens received, own included)\n", rdma_count,
                   gbps(l.deepep_nvl, out.time));
  return s;
}

nlohmann::ordered_json moe_dispatch_json(const MoeDispatchContext& ctx, const MoeDispatchOutcome& out) {
  const int nodes = out.nodes;
  const MoeRouting& r = ctx.routing;
  const MoeDispatchLoads& l = out.loads;
  nlohmann::ordered_json j;
  j["topology"] = ctx.topology;
  j["ranks"] = out.ranks;
  j["ranks_per_node"] = out.ranks_per_node;
  j["tokens"] = r.tokens;
  j["hidden"] = r.hidden;
  j["dtype"] = ctx.dtype;
  j["token_bytes"] = l.token_bytes;
  j["experts"] = r.experts;
  j["topk"] = r.topk;
  j["node_limit"] = out.node_limit;
  j["routing"] = {{"nodes_per_token", out.stats.nodes},
                  {"gpus_per_token", out.stats.gpus},
                  {"exact", out.stats.exact},
                  {"samples", out.stats.exact ? 0 : r.samples},
                  {"seed", r.seed}};
  j["bytes_per_gpu"] = {{"rdma", l.rdma}, {"nvlink", l.nvlink}};
  j["fidelity"] = to_string(ctx.fidelity);
  j["time_s"] = out.time.seconds();
  j["formula_time_s"] = out.formula_time.seconds();
  j["bound"] = bound(out);
  j["wire_GBps"] = {{"rdma", gbps(l.rdma, out.time)}, {"nvlink", gbps(l.nvlink, out.time)}};
  j["deepep_GBps"] = {
      {"rdma", nodes == 1 ? nlohmann::ordered_json() : nlohmann::ordered_json(gbps(l.deepep_rdma, out.time))},
      {"nvl", gbps(l.deepep_nvl, out.time)}};
  return j;
}

}  // namespace meshsim
