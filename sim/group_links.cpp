// A group's link parameters read off its routes (sim/collective_sim.h: derive_cost_params,
// detect_ranks_per_node): the alpha-beta levels, the node's reducing switch, in-fabric
// reduction and the protocols' rates, each a capability the algorithms read.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>

#include "core/budget.h"
#include "core/error.h"
#include "sim/collective_sim.h"

namespace meshsim {

// Whether every link of a route is NVLink (a protocol's NVLink hop; else PCI in a node).
bool all_nvlink(const Topology& topo, const Path& path) {
  for (int l : path.links)
    if (topo.link(l).spec.kind != LinkKind::NvLink) return false;
  return true;
}

int detect_ranks_per_node(const Topology& topo, const std::vector<int>& gpus) {
  const int p = static_cast<int>(gpus.size());
  if (p == 0) return 1;
  int g = 1;
  while (g < p && topo.node_of_gpu(gpus[g]) == topo.node_of_gpu(gpus[0])) ++g;
  if (p % g != 0) return 1;
  // Blocks must be on distinct nodes (seen by node + 1: a GPU outside any node is -1).
  std::vector<char> seen(static_cast<std::size_t>(topo.num_nodes()) + 1, 0);
  for (int b = 0; b < p; b += g) {
    const int node = topo.node_of_gpu(gpus[b]);
    for (int i = b; i < b + g; ++i)
      if (topo.node_of_gpu(gpus[i]) != node) return 1;
    if (seen[static_cast<std::size_t>(node + 1)]++) return 1;
  }
  return g;
}

namespace {
// CostParams::switch_*: inside every node, each route from a group rank to the next of its node
// must be GPU -> S -> GPU through a switch S that reduces, one S per node; their reduce and
// multicast traffic runs at the reduce efficiency of the slowest of those links. One S for the
// whole group (one node, or nodes on one shared switch): NVLS's case; one per node:
// switch_per_node, NVLS-Tree's.
void set_switch_params(Router& router, const std::vector<int>& gpus, CostParams& cp) {
  const Topology& topo = router.topology();
  const int p = static_cast<int>(gpus.size());
  if (p < 2) return;
  // Each rank and the next of its node (the first of its node after the last): one switch per
  // node, every hop GPU -> switch -> GPU through it.
  std::map<int, int> switch_of_node;
  double alpha = 0, bw = INFINITY, efficiency = 1;
  for (int i = 0; i < p; ++i) {
    const int node = topo.node_of_gpu(gpus[i]);
    int j = (i + 1) % p;
    if (topo.node_of_gpu(gpus[j]) != node) {  // wrap to the node's first rank
      j = i;
      while (j > 0 && topo.node_of_gpu(gpus[j - 1]) == node) --j;
    }
    if (j == i) continue;  // the node's only rank: nothing to reduce inside it
    const RouteSummary& route = router.summary(gpus[i], gpus[j]);
    if (route.hops != 2) return;
    const int via = topo.link(route.first_link).to;
    const auto it = switch_of_node.emplace(node, via).first;
    if (it->second != via || topo.device(via).reduce_efficiency <= 0) return;
    alpha = std::max(alpha, static_cast<double>(route.latency.ps()));
    bw = std::min(bw, route.bottleneck.bytes_per_ps());
    efficiency = std::min(efficiency, topo.device(via).reduce_efficiency);
  }
  if (switch_of_node.empty() || !std::isfinite(bw)) return;
  cp.switch_alpha_ps = alpha;
  cp.switch_beta_ps = 1.0 / (bw * efficiency);
  // Each node on a switch of its own, not one switch the whole group shares: NVLS-Tree's case.
  const int first = switch_of_node.begin()->second;
  cp.switch_per_node =
      std::any_of(switch_of_node.begin(), switch_of_node.end(), [&](const auto& e) { return e.second != first; });
}

// CostParams::net_switch_*: the group in node blocks of g on at least two nodes, and every route
// from a rank to the rank of the same local index on another node crossing only fabric switches
// (devices of no node) that reduce, at least one. Routes from each rail's first rank to every
// other node's and back are visited (the reduction tree of a rail spans them).
void set_net_switch_params(Router& router, const std::vector<int>& gpus, int g, CostParams& cp) {
  const Topology& topo = router.topology();
  const int p = static_cast<int>(gpus.size());
  if (g < 1 || p % g != 0 || p / g < 2) return;
  double alpha = 0, bw = INFINITY, efficiency = 1;
  auto visit = [&](int a, int b) -> bool {
    const Path& path = router.path(gpus[static_cast<std::size_t>(a)], gpus[static_cast<std::size_t>(b)]);
    bool fabric = false;
    for (std::size_t i = 0; i + 1 < path.links.size(); ++i) {
      const Device& d = topo.device(topo.link(path.links[i]).to);
      if (d.kind == DeviceKind::Gpu || d.node >= 0) continue;  // in a node: not the fabric's
      if (d.reduce_efficiency <= 0) return false;
      fabric = true;
      efficiency = std::min(efficiency, d.reduce_efficiency);
    }
    alpha = std::max(alpha, static_cast<double>(path.latency.ps()));
    bw = std::min(bw, path.bottleneck.bytes_per_ps());
    return fabric;
  };
  if (!topo.fabric_reduces()) return;
  // Each rail from its first rank to every other node's (one BFS per rail), and back from the
  // last node's.
  for (int l = 0; l < g; ++l) {
    for (int b = l + g; b < p; b += g)
      if (!visit(l, b)) return;
    if (!visit(p - g + l, l)) return;
  }
  if (!std::isfinite(bw)) return;
  cp.net_switch_alpha_ps = alpha;
  cp.net_switch_beta_ps = 1.0 / (bw * efficiency);
  cp.net_switch_efficiency = efficiency;
}
}  // namespace

namespace {
// LL's rate on the group (ProtocolScope): NCCL's llMaxBw for its GPUs and nodes as a fraction
// of its slowest route's rate, and the ring channels NCCL's search would give it.
void set_ll_rate(const Topology& topo, Router& router, const std::vector<int>& gpus, double slowest_bytes_per_ps,
                 CostParams& cp) {
  std::set<int> nodes;
  for (int g : gpus) nodes.insert(topo.node_of_gpu(g));
  const double cap_GBps = nccl_ll_max_bw_GBps(topo.gpu_sm, static_cast<int>(nodes.size()));
  cp.ll_cap_fraction = cap_GBps / (slowest_bytes_per_ps * 1e3);
  const NcclConfig config{.sm = topo.gpu_sm};
  cp.channels = nccl_graph(nccl_shape(topo, router, gpus, topo.gpu_sm), config).channels;
}
}  // namespace

CostParams derive_cost_params(Router& router, const std::vector<int>& gpus, double gamma_ps) {
  const Topology& topo = router.topology();
  CostParams cp;
  cp.gamma_ps = gamma_ps;
  const int p = static_cast<int>(gpus.size());
  double a_all = 0, a_in = 0, a_out = 0;
  double bw_all = INFINITY, bw_in = INFINITY, bw_out = INFINITY;
  bool intra_nvlink = true;  // every intra-node route visited is NVLink only
  std::uint64_t routed = 0;
  // A training schedule asks for the same group's parameters once per collective kind and size,
  // so its groups' pairs are kept in the router's table; a group larger than any training axis
  // (a collective over a whole 100k-GPU cluster) is read once, and storing its 4p answers would
  // cost more than finding them (131,072 ranks: 1.06 -> 0.82 s, docs/performance.md).
  constexpr int kKeepSummariesUpTo = 16384;
  const bool keep = p <= kKeepSummariesUpTo;
  auto visit = [&](int i, int j) {
    if (i == j) return;
    budget::tick_work("routing the group's GPU pairs", ++routed);  // --max-seconds; a word on a terminal
    const RouteSummary route = keep ? router.summary(gpus[i], gpus[j]) : router.summary_once(gpus[i], gpus[j]);
    const double a = static_cast<double>(route.latency.ps());
    const double bw = route.bottleneck.bytes_per_ps();
    a_all = std::max(a_all, a);
    bw_all = std::min(bw_all, bw);
    if (topo.node_of_gpu(gpus[i]) == topo.node_of_gpu(gpus[j])) {
      a_in = std::max(a_in, a);
      bw_in = std::min(bw_in, bw);
      intra_nvlink = intra_nvlink && route.nvlink_only;
    } else {
      a_out = std::max(a_out, a);
      bw_out = std::min(bw_out, bw);
    }
  };
  // Neighbour pairs both ways and root pairs both ways: the root's fan-out first (the router
  // answers a source's run of queries from one BFS), then each rank's three lone pairs.
  for (int i = 0; i < p; ++i) visit(0, i);
  for (int i = 0; i < p; ++i) {
    visit(i, (i + 1) % p);
    visit(i, (i + p - 1) % p);
    visit(i, 0);
  }
  // Inter-node pairs the neighbour walk may have missed (hierarchical: same local index).
  const int g = detect_ranks_per_node(topo, gpus);
  if (g > 1 && g < p) {
    visit(0, g);
    const int in = router.summary(gpus[0], gpus[1]).first_link;
    const int out = router.summary(gpus[0], gpus[static_cast<std::size_t>(g)]).first_link;
    cp.shared_uplink = in >= 0 && out >= 0 && in == out;
  }
  // A full mesh: every pair one hop apart over a link between the two GPUs (small groups only:
  // a mesh of direct links is a node's, p(p-1) routes).
  if (p >= 2 && p <= 16) {
    cp.direct_links = true;
    for (int i = 0; i < p && cp.direct_links; ++i)
      for (int j = 0; j < p && cp.direct_links; ++j)
        if (i != j)
          cp.direct_links =
              router.summary(gpus[static_cast<std::size_t>(i)], gpus[static_cast<std::size_t>(j)]).hops == 1;
  }
  set_switch_params(router, gpus, cp);
  if (g >= 1 && g < p) set_net_switch_params(router, gpus, g, cp);
  // The runtime's protocols: LL128 where the GPUs of a node are joined by NVLink (a group
  // with one GPU per node: where the GPU has NVLink at all).
  cp.protocols = topo.protocols;
  cp.multi_node = std::isfinite(bw_out);
  if (!std::isfinite(bw_in) && p > 0) {
    intra_nvlink = false;
    for (int l : topo.out_links(topo.gpu_device(gpus[0])))
      intra_nvlink = intra_nvlink || topo.link(l).spec.kind == LinkKind::NvLink;
  }
  cp.intra_hop = intra_nvlink ? HopKind::NvLink : HopKind::Pci;
  cp.ll128 = intra_nvlink;
  if (cp.protocols && p >= 2) set_ll_rate(topo, router, gpus, bw_all, cp);
  if (!std::isfinite(bw_all)) bw_all = 1;  // p == 1: no communication
  cp.alpha_ps = a_all;
  cp.beta_ps = 1.0 / bw_all;
  cp.intra_alpha_ps = std::isfinite(bw_in) ? a_in : a_all;
  cp.intra_beta_ps = 1.0 / (std::isfinite(bw_in) ? bw_in : bw_all);
  cp.inter_alpha_ps = std::isfinite(bw_out) ? a_out : a_all;
  cp.inter_beta_ps = 1.0 / (std::isfinite(bw_out) ? bw_out : bw_all);
  cp.inter_route_beta_ps = cp.inter_beta_ps;
  // The inter-node phase of a hierarchical collective runs g rings at once, one per local
  // index, and all of them leave the node through its NICs: each gets at most 1/g of the
  // node's egress (one FDR NIC shared by 4 GPUs on frontera-rtx; a NIC per GPU on DGX).
  if (g > 1 && g < p && std::isfinite(bw_out)) {
    // A node's egress: its links that are up and leave it, summed in link order.
    std::vector<int> leaving;
    auto egress = [&](int node) {
      leaving.clear();
      for (int d : topo.node_devices(node))
        for (int l : topo.out_links(d))
          if (!topo.link(l).down && topo.device(topo.link(l).to).node != node) leaving.push_back(l);
      std::sort(leaving.begin(), leaving.end());
      double sum = 0;
      for (int l : leaving) sum += topo.link(l).spec.effective().bytes_per_ps();
      return sum;
    };
    double share = INFINITY;
    for (int i = 0; i < p; i += g) share = std::min(share, egress(topo.node_of_gpu(gpus[i])) / g);
    if (share > 0 && share < bw_out) cp.inter_beta_ps = 1.0 / share;
  }
  return cp;
}

}  // namespace meshsim
