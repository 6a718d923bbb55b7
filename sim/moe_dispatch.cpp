#include "sim/moe_dispatch.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "core/error.h"
#include "core/flag.h"
#include "schedule/collectives/common.h"

namespace meshsim {

double moe_element_bytes(const std::string& dtype, const std::string& field) {
  if (dtype == "bf16") return 2.0;
  if (dtype == "fp8") return 1.0 + 4.0 / 128.0;  // e4m3 values plus one float scale per 128
  throw Error(fmt::format("{}: unknown wire format '{}'; use bf16 or fp8", field, dtype));
}

namespace {

int nodes_of(int ranks, int g) { return ranks / std::max(1, g); }

// Nodes a token may use: `groups`, or every node when 0 or at least the node count.
int allowed_nodes(const MoeRouting& r, int nodes) { return r.groups <= 0 ? nodes : std::min(r.groups, nodes); }

// Probability that a set of `held` of the E experts gets none of a token's top-k, when the
// top-k is a uniformly random k-subset: C(E - held, k) / C(E, k).
double miss_probability(int experts, int held, int k) {
  double p = 1.0;
  for (int i = 0; i < k; ++i) {
    const double num = static_cast<double>(experts - held - i);
    if (num <= 0) return 0.0;
    p *= num / static_cast<double>(experts - i);
  }
  return p;
}

}  // namespace

void validate_moe_routing(const MoeRouting& r, int ranks, int ranks_per_node) {
  if (ranks < 1) throw Error(fmt::format("{}: {} ranks cannot dispatch; use at least 1", flag("ranks"), ranks));
  const int g = std::max(1, ranks_per_node);
  if (ranks % g != 0)
    throw Error(
        fmt::format("{}: {} ranks do not fill whole nodes of {}; use a multiple of {}", flag("ranks"), ranks, g, g));
  if (r.tokens < 1 || r.tokens > 10'000'000)
    throw Error(fmt::format("{}: {} tokens per rank is outside 1..10000000", flag("tokens"), r.tokens));
  if (r.hidden < 1 || r.hidden > 1'000'000)
    throw Error(fmt::format("{}: {} is outside 1..1000000", flag("hidden"), r.hidden));
  if (!(r.element_bytes > 0) || r.element_bytes > 16)
    throw Error(
        fmt::format("{}: {} bytes per element is not a wire format; use bf16 or fp8", flag("dtype"), r.element_bytes));
  if (r.experts < 1 || r.experts > 1'000'000)
    throw Error(fmt::format("{}: {} is outside 1..1000000", flag("experts"), r.experts));
  if (r.experts % ranks != 0)
    throw Error(fmt::format("{}: {} experts do not split evenly over {} ranks; use a multiple of {}", flag("experts"),
                            r.experts, ranks, ranks));
  if (r.groups < 0)
    throw Error(fmt::format("{}: {} is negative; use 0 (no node limit) or a node count", flag("groups"), r.groups));
  const int nodes = nodes_of(ranks, g);
  const int usable = allowed_nodes(r, nodes) * (r.experts / nodes);
  if (r.topk < 1 || r.topk > usable)
    throw Error(fmt::format("{}: {} experts per token; a token may use {} experts ({} of {} nodes), so use 1..{}",
                            flag("topk"), r.topk, usable, allowed_nodes(r, nodes), nodes, usable));
  if (r.samples < 1 || r.samples > 10'000'000)
    throw Error(fmt::format("{}: {} is outside 1..10000000", flag("samples"), r.samples));
  if (allowed_nodes(r, nodes) < nodes && static_cast<double>(r.samples) * r.experts > kMaxRoutedScores)
    throw Error(
        fmt::format("{}: {} tokens of {} expert scores each would take more than about 6 s to route; use "
                    "{} <= {:.0f}",
                    flag("samples"), r.samples, r.experts, flag("samples"), kMaxRoutedScores / r.experts));
}

namespace {

// The sampled estimate, of a routing already validated.
MoeRoutingStats sample_routing(const MoeRouting& r, int ranks, int ranks_per_node) {
  const int g = std::max(1, ranks_per_node), nodes = nodes_of(ranks, g), keep = allowed_nodes(r, nodes);
  const int per_node = r.experts / nodes, per_gpu = r.experts / ranks;
  std::mt19937_64 rng(r.seed);
  // 53 random bits -> [0, 1): the same numbers on every platform (std's distributions are not).
  auto uniform = [&rng] { return static_cast<double>(rng() >> 11) * 0x1.0p-53; };
  std::vector<double> score(static_cast<std::size_t>(r.experts)), node_max(static_cast<std::size_t>(nodes));
  std::vector<int> order(static_cast<std::size_t>(nodes)), cand;
  std::vector<char> seen_node(static_cast<std::size_t>(nodes)), seen_gpu(static_cast<std::size_t>(ranks));
  double sum_nodes = 0, sum_gpus = 0;
  for (int s = 0; s < r.samples; ++s) {
    for (double& x : score) x = uniform();
    cand.clear();
    if (keep < nodes) {  // node-limited gating: the `keep` nodes of highest maximum score
      for (int n = 0; n < nodes; ++n) {
        const auto first = score.begin() + static_cast<std::ptrdiff_t>(n) * per_node;
        node_max[static_cast<std::size_t>(n)] = *std::max_element(first, first + per_node);
      }
      std::iota(order.begin(), order.end(), 0);
      std::partial_sort(order.begin(), order.begin() + keep, order.end(), [&](int a, int b) {
        const double x = node_max[static_cast<std::size_t>(a)], y = node_max[static_cast<std::size_t>(b)];
        return x != y ? x > y : a < b;
      });
      for (int i = 0; i < keep; ++i)
        for (int e = 0; e < per_node; ++e) cand.push_back(order[static_cast<std::size_t>(i)] * per_node + e);
    } else {
      cand.resize(static_cast<std::size_t>(r.experts));
      std::iota(cand.begin(), cand.end(), 0);
    }
    std::partial_sort(cand.begin(), cand.begin() + r.topk, cand.end(), [&](int a, int b) {
      const double x = score[static_cast<std::size_t>(a)], y = score[static_cast<std::size_t>(b)];
      return x != y ? x > y : a < b;
    });
    std::fill(seen_node.begin(), seen_node.end(), 0);
    std::fill(seen_gpu.begin(), seen_gpu.end(), 0);
    for (int i = 0; i < r.topk; ++i) {
      const int e = cand[static_cast<std::size_t>(i)];
      sum_nodes += seen_node[static_cast<std::size_t>(e / per_node)] ? 0 : 1;
      sum_gpus += seen_gpu[static_cast<std::size_t>(e / per_gpu)] ? 0 : 1;
      seen_node[static_cast<std::size_t>(e / per_node)] = 1;
      seen_gpu[static_cast<std::size_t>(e / per_gpu)] = 1;
    }
  }
  return {sum_nodes / r.samples, sum_gpus / r.samples, false};
}

}  // namespace

MoeRoutingStats moe_routing_stats_sampled(const MoeRouting& r, int ranks, int ranks_per_node) {
  validate_moe_routing(r, ranks, ranks_per_node);
  return sample_routing(r, ranks, ranks_per_node);
}

MoeRoutingStats moe_routing_stats(const MoeRouting& r, int ranks, int ranks_per_node) {
  validate_moe_routing(r, ranks, ranks_per_node);
  const int g = std::max(1, ranks_per_node), nodes = nodes_of(ranks, g);
  if (allowed_nodes(r, nodes) < nodes) return sample_routing(r, ranks, ranks_per_node);
  const double dn = nodes * (1.0 - miss_probability(r.experts, r.experts / nodes, r.topk));
  const double dg = ranks * (1.0 - miss_probability(r.experts, r.experts / ranks, r.topk));
  return {dn, dg, true};
}

MoeDispatchLoads moe_dispatch_loads(const MoeRouting& r, const MoeRoutingStats& s, int ranks, int ranks_per_node) {
  const int g = std::max(1, ranks_per_node), nodes = nodes_of(ranks, g);
  MoeDispatchLoads l;
  l.token_bytes = r.hidden * r.element_bytes;
  const double t = r.tokens * l.token_bytes;
  l.rdma = t * s.nodes * (nodes - 1) / nodes;
  l.nvlink = t * nodes * (g - 1) * (s.gpus / ranks);
  l.deepep_rdma = t * s.nodes;
  l.deepep_nvl = t * s.gpus;
  return l;
}

namespace {

class MoeDispatchProgram final : public StepProgram {
 public:
  MoeDispatchProgram(const MoeDispatchLoads& l, int ranks, int g) : ranks_(ranks), g_(g), nodes_(ranks / g) {
    if (nodes_ > 1) rdma_ = static_cast<Bytes>(std::llround(l.rdma / (nodes_ - 1)));
    if (g_ > 1) nvlink_ = static_cast<Bytes>(std::llround(l.nvlink / (g_ - 1)));
  }
  int ranks() const override { return ranks_; }
  int num_steps(int) const override { return ranks_ < 2 ? 0 : 1; }
  void step(int rank, int, Step& out) const override {
    const int a = rank / g_, i = rank % g_;
    for (int j = 0; j < g_; ++j)
      if (j != i && nvlink_ > 0) {
        out.sends.push_back(Transfer{a * g_ + j, 0, nvlink_, 0});
        out.recvs.push_back(Transfer{a * g_ + j, 0, nvlink_, 0});
      }
    for (int b = 0; b < nodes_; ++b)
      if (b != a && rdma_ > 0) {
        out.sends.push_back(Transfer{b * g_ + i, 0, rdma_, 0});
        out.recvs.push_back(Transfer{b * g_ + i, 0, rdma_, 0});
      }
    out.op = RecvOp::Copy;
  }

 private:
  int ranks_, g_, nodes_;
  Bytes rdma_ = 0, nvlink_ = 0;
};

}  // namespace

std::unique_ptr<StepProgram> make_moe_dispatch_program(const MoeDispatchLoads& l, int ranks, int ranks_per_node) {
  return std::make_unique<MoeDispatchProgram>(l, ranks, std::max(1, ranks_per_node));
}

MoeDispatchOutcome run_moe_dispatch(const Topology& topo, Router& router, const std::vector<int>& gpus,
                                    const MoeRouting& r, Fidelity fidelity) {
  if (fidelity == Fidelity::Nccl)
    throw Error(flag("fidelity") + ": NCCL's model has no MoE dispatch (DeepEP is not NCCL); use formula or flow");
  MoeDispatchOutcome out;
  out.ranks = static_cast<int>(gpus.size());
  out.ranks_per_node = detect_ranks_per_node(topo, gpus);
  if (out.ranks > 1 && out.ranks_per_node == 1 && topo.node_of_gpu(gpus[0]) == topo.node_of_gpu(gpus[1]))
    throw Error(
        fmt::format("{}: {} ranks do not fill whole nodes of the topology ({} GPUs per node); "
                    "use a multiple of the GPUs per node",
                    flag("ranks"), out.ranks, topo.gpus_per_node()));
  if (out.ranks_per_node > 1)  // DeepEP moves tokens inside a node over NVLink only
    for (int l : router.path(gpus[0], gpus[1]).links)
      if (topo.link(l).spec.kind != LinkKind::NvLink)
        throw Error(
            fmt::format("{}: DeepEP's kernels move tokens inside a node over NVLink, and the GPUs of "
                        "a node here are joined by {} ({}); use a topology with NVLink (e.g. dgx-h100)",
                        flag("topology"), to_string(topo.link(l).spec.kind), link_name(topo, l)));
  out.stats = moe_routing_stats(r, out.ranks, out.ranks_per_node);
  out.loads = moe_dispatch_loads(r, out.stats, out.ranks, out.ranks_per_node);
  out.nodes = nodes_of(out.ranks, out.ranks_per_node);
  out.node_limit = allowed_nodes(r, out.nodes);
  const CostParams cp = derive_cost_params(router, gpus, 0);
  const collectives::Levels l = collectives::levels(cp);
  out.nvlink_bound =
      out.loads.rdma == 0 || (out.loads.nvlink > 0 && l.ai + out.loads.nvlink * l.bi >= l.ae + out.loads.rdma * l.be);
  const double ps = out.ranks < 2 ? 0.0 : collectives::two_level_cost(out.loads.nvlink, out.loads.rdma, cp);
  out.formula_time = duration_ps(ps, "the dispatch");
  out.time = out.formula_time;
  if (fidelity == Fidelity::Flow && out.ranks > 1) {
    const double flows = static_cast<double>(out.ranks) * (out.ranks_per_node - 1 + out.nodes - 1);
    if (flows > kMaxDispatchFlows)
      throw Error(
          fmt::format("{}: {} ranks start {:.0f} flows at once, more than the {:.0f} a flow run "
                      "keeps in flight (about 600 bytes each); use {} (exact when no link is shared) or fewer ranks",
                      flag("fidelity", "flow"), out.ranks, flows, kMaxDispatchFlows, flag("fidelity", "formula")));
    const auto program = make_moe_dispatch_program(out.loads, out.ranks, out.ranks_per_node);
    GroupProgram gp;
    gp.gpus = gpus;
    gp.program = program.get();
    out.time = simulate_flow(topo, router, {gp}, FlowSimOptions{}).total;
  }
  return out;
}

MoeDispatchOutcome run_moe_dispatch(const Topology& topo, int ranks, const std::string& field, const MoeRouting& r,
                                    Fidelity fidelity) {
  if (ranks < 1 || ranks > topo.num_gpus())
    throw Error(
        fmt::format("{}: {} is outside 1..{} (the GPUs of the topology); use a larger topology "
                    "(e.g. {}:nodes=N) or fewer ranks",
                    field, ranks, topo.num_gpus(), flag("topology", topo.name())));
  std::vector<int> gpus(static_cast<std::size_t>(ranks));
  std::iota(gpus.begin(), gpus.end(), 0);
  Router router(topo);
  return run_moe_dispatch(topo, router, gpus, r, fidelity);
}

}  // namespace meshsim
