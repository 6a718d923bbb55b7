// Timing collectives: step programs on a topology, at `formula` or `flow` fidelity.
//
// `flow`: each group's step program runs rank by rank; every send becomes a flow from
// the sender's GPU to the receiver's GPU on its routed path (FlowNetwork); the send is
// done when it drains, and the message is delivered the path latency after that.
// Several groups run at once (e.g. a broadcast along every column of a mesh), so their
// flows contend for shared links.
// `formula`: the algorithm's closed form with alpha/beta read off the topology for the
// group (CostParams): the teaching baseline, blind to contention.
// `nccl`: NCCL's own tuning model (sim/nccl_model.h): NCCL picks the algorithm and
// protocol, the time is its prediction; no step program runs (algorithm is nullptr and
// `nccl` holds the choice). Requested with fidelity nccl or algorithm "nccl" (the two
// imply each other; another algorithm name with fidelity nccl is an error).
//
//   Router router(topo);
//   CollectiveRequest req{CollKind::AllReduce, GiB(1)};
//   req.groups = {{0,1,2,3,4,5,6,7}};
//   CollectiveOutcome out = run_collective(topo, router, registry, req);
//   out.time, out.algorithm->name, out.busiest_link
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "schedule/collective.h"
#include "sim/flow_network.h"
#include "sim/nccl_model.h"
#include "topology/topology.h"

namespace meshsim {

enum class Fidelity { Formula, Flow, Nccl };
Fidelity parse_fidelity(const std::string& s, const std::string& field);
const char* to_string(Fidelity f);

// One step of one rank, as the flow simulation saw it (recorded on request).
struct StepRecord {
  int group = 0, rank = 0, step = 0;
  Time start, end;
};
struct TransferRecord {
  int group = 0, src = 0, dst = 0, step = 0, chunk = 0;
  Bytes bytes = 0;
  bool reduce = false;
  Time start, delivered;
};

struct GroupProgram {
  std::vector<int> gpus;  // group rank -> GPU index
  const StepProgram* program = nullptr;
  // The runtime protocol its steps run under (schedule/protocol.h): the group starts after
  // its launch; a message is delivered the larger of its route's latency and the
  // protocol's hop latency after it drains; its bytes take 1 / payload fraction of the
  // link time (the links carry the protocol's flags). None: the bare model.
  Protocol protocol = Protocol::None;
  // The protocol's latency rows its hops pay (Algorithm::hop_rows); on a group spanning nodes
  // an LL hop inside a node pays NCCL's multi-node factor (scope.multi_node).
  HopRows hop_rows;
  // The group and message the protocol's rates depend on (protocol_scope).
  ProtocolScope scope;
};

struct FlowSimOptions {
  double gamma_ps = 0;  // reduction time per byte
  bool record = false;  // keep step/transfer records and link intervals
  // Steady-state fast-forward: when every rank has started its last 4 steps exactly one
  // common period apart, inside a run of same-shape steps (StepProgram::same_shape_until),
  // the whole state (pending events, flow clocks, step counters, link bytes) is moved K
  // periods ahead at once. Off while recording. Results equal the full simulation
  // (tested bit for bit); it only saves the work of repeating identical periods.
  bool fast_forward = true;
  // Per-link state reused across runs on one fabric (sim/flow_network.h); nullptr: the run
  // builds its own.
  FlowNetwork::Scratch* scratch = nullptr;
};

struct FlowSimResult {
  Time total;
  std::vector<Time> group_time;
  std::vector<LinkUse> used_links;  // ascending; the other links carried nothing
  std::vector<StepRecord> steps;
  std::vector<TransferRecord> transfers;
  std::vector<LinkInterval> link_intervals;
  std::uint64_t messages = 0;
  std::uint64_t events = 0;
  std::uint64_t solves = 0;
  std::uint64_t skipped_steps = 0;  // steps per rank advanced by fast-forward
};

// Runs the groups' programs together on the flow model.
FlowSimResult simulate_flow(const Topology& topo, Router& router, const std::vector<GroupProgram>& groups,
                            const FlowSimOptions& options);

// alpha/beta of a group read off its routes: flat = worst hop over neighbour and root
// pairs; intra = pairs on one node, inter = pairs across nodes.
CostParams derive_cost_params(Router& router, const std::vector<int>& gpus, double gamma_ps);
// Consecutive group ranks sharing a node, when every node block has the same size; else 1.
int detect_ranks_per_node(const Topology& topo, const std::vector<int>& gpus);
// Whether every link of a route is NVLink (a protocol's NVLink hop; else PCI in a node).
bool all_nvlink(const Topology& topo, const Path& path);

struct CollectiveRequest {
  CollKind kind = CollKind::AllReduce;
  Bytes bytes = 0;
  AlgorithmChoice algorithm;
  Fidelity fidelity = Fidelity::Flow;
  std::vector<std::vector<int>> groups;  // GPU indices; all run at once
  int root = 0;
  int chunks = 0;
  double gamma_ps = 0;
  bool record = false;
  bool fast_forward = true;
  std::vector<std::vector<Bytes>> alltoall_bytes;
  NcclConfig nccl;  // fidelity nccl: GPU arch and channel override
  // Fidelity flow: per-link state to reuse (one per fabric, FlowSimOptions::scratch); nullptr:
  // each flow run builds its own.
  FlowNetwork::Scratch* flow_scratch = nullptr;
};

struct BusiestLink {
  int link = -1;
  double bytes = 0;
  double utilization = 0;  // bytes / (effective bandwidth * time)
};

// The `n` links of highest utilization, bytes[l] / (effective bandwidth of l x `over`), ties
// to the lower link id; links that carried nothing are left out.
std::vector<BusiestLink> busiest_links(const Topology& topo, const std::vector<double>& bytes, Time over,
                                       std::size_t n = 5);
// The same from a flow run's used links (ascending).
std::vector<BusiestLink> busiest_links(const Topology& topo, const std::vector<LinkUse>& used, Time over,
                                       std::size_t n = 5);

struct CollectiveOutcome {
  const Algorithm* algorithm = nullptr;  // nullptr at fidelity nccl (see `nccl`)
  std::optional<NcclPrediction> nccl;    // fidelity nccl: NCCL's choice for group 0
  CollectiveSpec spec;                   // of group 0
  CostParams params;                     // of group 0
  Time time;                             // simulated (flow), closed-form (formula) or NCCL's model (nccl)
  Time formula_time;                     // closed form of group 0, always computed
  std::optional<FlowSimResult> flow;     // present at flow fidelity
  BusiestLink busiest;
  std::vector<BusiestLink> top_links;  // up to 5, highest utilization first (flow fidelity)
  // The runtime protocol the algorithm runs with (best_protocol for group 0; every group
  // runs its own best); None where the topology has no protocols or at fidelity nccl.
  Protocol protocol = Protocol::None;
};

// The most rank-steps (sum over ranks of their program's steps) a flow run takes on: a
// 4096-rank ring all-reduce is 3.4e7 and runs in about 12 s on one core.
inline constexpr double kMaxFlowRankSteps = 2e8;
// The most messages a flow run keeps in flight at once (ranks x a step's sends, over every
// group): each is a flow with its route, event and share of the max-min records, about 600
// bytes. A 1024-rank all-to-all on a fat-tree (1e6 at once) takes 7 s and 600 MB since the
// solver resumes its records (sim/flow_network.h); a 4096-rank one (1.7e7) took 6.8 GB before.
// A ring has one send per rank.
inline constexpr double kMaxFlowConcurrent = 2e6;

// `auto` at flow fidelity also times, under contention, the closed forms' three favourites
// and ring, when each is at most this many rank-steps per group (a 256-rank ring
// all-reduce is 1.3e5); above it the closed form's choice stands.
inline constexpr double kAutoFlowCheckRankSteps = 1.5e5;

// A collective's fidelity as asked for: `text` parsed (its error names `field`), or, when
// empty, nccl for `--algo nccl` (NCCL's own choice is only known to its model) and flow else.
Fidelity collective_fidelity(const std::string& text, const AlgorithmChoice& algorithm, const std::string& field);

// Validates the request (throws meshsim::Error naming the flag and the fix), picks the
// algorithm (`auto`: lowest closed-form time for group 0 among those rank_algorithms lets
// compete; at flow fidelity, the fastest
// under flow of the closed forms' favourites and ring, where cheap), and times it. At
// fidelity nccl every group is predicted by NCCL's model and the slowest one is the time.
CollectiveOutcome run_collective(const Topology& topo, Router& router, const AlgorithmRegistry& registry,
                                 const CollectiveRequest& req);

}  // namespace meshsim
