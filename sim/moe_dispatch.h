// MoE token dispatch as DeepEP's high-throughput ("normal") kernels run it across nodes, and
// its time on a topology.
//
// Each of `tokens` tokens of a rank goes to the GPUs holding its top-k experts. DeepEP sends
// a token once per destination node, over RDMA to the GPU of that node on the sender's rail
// (same local index), which forwards it over NVLink to every GPU of its node that holds one
// of the token's experts; a token for the sender's own node goes over NVLink directly, and a
// copy to the sender itself stays local. Combine is the same traffic backwards.
//
// Routing is DeepEP's test routing (tests/test_internode.py): every score independent and
// identically distributed, experts numbered GPU by GPU (experts / ranks each), a token
// restricted to the `groups` nodes with the highest maximum score (DeepSeek-V3's node-limited
// gating) and then sent to its top-k experts among those nodes' experts. Only the ranking of
// the scores matters, so uniform draws give the same routing as DeepEP's |N(0,1)| + 1.
//
// Two expectations per token decide every byte count: D_n, the distinct nodes it goes to
// (its own included), and D_g, the distinct GPUs (itself included). By symmetry every node
// and every GPU is equally likely, so with p ranks, g per node and N = p / g nodes, per GPU
// and per dispatch (b = bytes of one token):
//   RDMA sent = received  T * D_n * (N-1)/N * b
//   NVLink sent = received  T * N * (g-1) * (D_g/p) * b    (its own tokens for local peers,
//                                                          plus the tokens it forwards)
// and DeepEP's test reports (docs/validation/collectives.md):
//   "RDMA" bytes  T * D_n * b      (own node included: counted although it never leaves)
//   "NVL"  bytes  T * D_g * b      (the tokens the GPU receives, its own included)
// Without a node limit (groups >= N) D_n and D_g have closed forms (a node or GPU holding
// E_x of the E experts is missed with probability C(E - E_x, k) / C(E, k)); with a limit they
// are estimated from `samples` routed tokens of a seeded generator (deterministic).
#pragma once

#include <cstdint>
#include <string>

#include "core/units.h"
#include "schedule/collective.h"
#include "sim/collective_sim.h"

namespace meshsim {

// Sampling cost bound: sampled tokens x experts scored (5e8 takes about 6 s).
inline constexpr double kMaxRoutedScores = 5e8;
// The most flows a flow-fidelity dispatch starts at once, as for any flow run
// (kMaxFlowConcurrent). Flows that climb to spines share one max-min component, resumed
// as they drain (sim/flow_network.h): on DGX nodes on a fat-tree, 512 ranks (3.6e4 flows)
// take 0.4 s, 2048 ranks (5.4e5) 7 s and 400 MB.
inline constexpr double kMaxDispatchFlows = kMaxFlowConcurrent;

struct MoeRouting {
  int tokens = 4096;  // per rank
  int hidden = 7168;
  double element_bytes = 2;  // bytes per hidden element on the wire: 2 (bf16), 1 + 4/128 (fp8 with scales)
  int experts = 256;
  int topk = 8;
  int groups = 0;  // nodes a token may use (DeepEP's num_topk_groups); 0 or >= nodes: no limit
  std::uint64_t seed = 1;
  int samples = 20000;  // routed tokens sampled when groups limit the nodes
};

// Bytes per hidden element of DeepEP's wire formats: "bf16" (2) or "fp8" (1 byte each plus
// one float scale per 128 elements). Throws naming `field` otherwise.
double moe_element_bytes(const std::string& dtype, const std::string& field);

struct MoeRoutingStats {
  double nodes = 0;    // D_n: distinct nodes a token goes to, its own included
  double gpus = 0;     // D_g: distinct GPUs, its own included
  bool exact = false;  // closed form (true) or sampled
};

// Checks the routing against p ranks of g per node (experts divisible by ranks, top-k <=
// the experts a token may use, ...); throws Error naming the --flag of moe-dispatch.
void validate_moe_routing(const MoeRouting& r, int ranks, int ranks_per_node);
MoeRoutingStats moe_routing_stats(const MoeRouting& r, int ranks, int ranks_per_node);
// The sampled estimate whatever the limit (tests compare it with the closed form).
MoeRoutingStats moe_routing_stats_sampled(const MoeRouting& r, int ranks, int ranks_per_node);

struct MoeDispatchLoads {
  double token_bytes = 0;
  double rdma = 0;         // per GPU, sent (and received) over its NIC
  double nvlink = 0;       // per GPU, sent (and received) over NVLink
  double deepep_rdma = 0;  // DeepEP's "RDMA" bytes (see above)
  double deepep_nvl = 0;   // DeepEP's "NVL" bytes
};
MoeDispatchLoads moe_dispatch_loads(const MoeRouting& r, const MoeRoutingStats& s, int ranks, int ranks_per_node);

// One dispatch's per-GPU loads as one step of simultaneous sends (DeepEP pipelines the two
// hops in chunks, so they overlap): rank (a, i) sends RDMA bytes / (N-1) to each (b, i), b !=
// a, and NVLink bytes / (g-1) to each local peer. Offsets are 0: only the loads count.
std::unique_ptr<StepProgram> make_moe_dispatch_program(const MoeDispatchLoads& l, int ranks, int ranks_per_node);

struct MoeDispatchOutcome {
  MoeRoutingStats stats;
  MoeDispatchLoads loads;
  int ranks = 0, ranks_per_node = 1, nodes = 1;
  int node_limit = 1;  // nodes a token may use: r.groups, or every node
  Time time;           // at the fidelity asked for
  Time formula_time;   // max(a_i + NVLink * b_i, a_e + RDMA * b_e) with the group's alpha/beta
  // The level that binds by the closed form: NVLink (always on one node) or the NICs
  // (always with one rank per node).
  bool nvlink_bound = false;
};

// Times one dispatch of `r` among the GPUs `gpus` (whole nodes of the same size) at
// `fidelity` (formula or flow).
MoeDispatchOutcome run_moe_dispatch(const Topology& topo, Router& router, const std::vector<int>& gpus,
                                    const MoeRouting& r, Fidelity fidelity);
// The same on the first `ranks` GPUs of `topo`; a count outside 1..GPUs is an Error naming
// `field` (the command's --ranks, Python's ranks).
MoeDispatchOutcome run_moe_dispatch(const Topology& topo, int ranks, const std::string& field, const MoeRouting& r,
                                    Fidelity fidelity);

}  // namespace meshsim
