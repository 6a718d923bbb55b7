// Collective algorithms as step programs, with their closed-form alpha-beta costs.
//
// A step program says, for every rank of a group and every step, which chunks the rank
// sends to which peers and receives from which peers, and whether a received chunk is
// reduced into the local buffer or copied. It is generated on demand per (rank, step),
// so a 16k-rank ring costs O(ranks) memory, not O(ranks x steps).
//
// Step semantics (shared by every executor): a rank executes its steps in order. Within
// a step, all sends and receives run concurrently; the step ends when every send is done
// (its bytes have left: in time, drained from the links) and every receive has arrived (and,
// for Reduce steps, been reduced). A message arrives a hop latency after it drained, so a
// rank that only sends does not wait that latency out. Messages between one (sender,
// receiver) pair are matched in FIFO order.
//
//   ring all-reduce, p = 3, buffer of 3 chunks c0 c1 c2, step s (reduce-scatter half):
//     rank r sends chunk (r - s) mod p to r+1, receives chunk (r - s - 1) mod p from r-1
//     and reduces it into its own copy.
//
// Buffers: all-reduce, broadcast and reduce work in place on one buffer of `bytes`.
// All-gather works in the output buffer of `bytes` (rank r's input sits at its slice);
// reduce-scatter in the input buffer of `bytes` (rank r keeps slice r). Slices split
// `bytes` as evenly as possible: slice i = [i*n/p, (i+1)*n/p) (see slice()).
// All-to-all has a send buffer and a receive buffer: Transfer offsets of sends point
// into the send buffer and those of receives into the receive buffer; both are laid
// out by destination / source rank with the sizes of CollectiveSpec::alltoall_bytes.
// The block a rank keeps for itself (src == dst) is not a transfer: the executor copies
// it from the send buffer to the receive buffer before step 0.
//
// Element size: slices and chunks are cut at multiples of CollectiveSpec::element_bytes
// (1 = any byte; 4 for float32 data, which the reference executor and the cpu backend
// need), so slice i = [floor(i*e/p), floor((i+1)*e/p)) elements of e = bytes/element_bytes.
//
// Choosing: choose_algorithm() returns the supported algorithm with the lowest closed form.
//   AlgorithmRegistry reg = AlgorithmRegistry::builtin();
//   CollectiveSpec spec{.kind = CollKind::AllReduce, .ranks = 8, .bytes = MiB(64)};
//   const Algorithm& a = choose_algorithm(reg, spec, params);
//   std::unique_ptr<StepProgram> prog = a.build(spec);
// Per-algorithm pictures and formulas: docs/collectives.md and collectives/*.cpp.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/units.h"
#include "schedule/protocol.h"

namespace meshsim {

enum class CollKind { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce, AllToAll, SendRecv };
const char* to_string(CollKind k);
std::optional<CollKind> parse_coll_kind(const std::string& s);  // "allreduce", ...
const std::vector<CollKind>& all_coll_kinds();
// Whether a collective sums its ranks' inputs (all-reduce, reduce-scatter, reduce).
bool reduces(CollKind k);

struct CollectiveSpec {
  CollKind kind = CollKind::AllReduce;
  int ranks = 2;
  Bytes bytes = 0;         // n of docs/math.md section 1 (see buffer rules above)
  int root = 0;            // broadcast / reduce root; send/recv: sender is rank 0, receiver rank 1
  int ranks_per_node = 1;  // consecutive group ranks sharing a node (hierarchical algorithms)
  int chunks = 0;          // pipelined algorithms: number of chunks (0 = algorithm default)
  // All-to-all with uneven sizes: alltoall_bytes[src][dst]; empty = even (bytes/p each).
  std::vector<std::vector<Bytes>> alltoall_bytes;
  // Slices and chunks are cut at multiples of this many bytes (see above); `bytes` and
  // every alltoall_bytes entry must be multiples of it.
  Bytes element_bytes = 1;
};

// How the executors add a reducing receive (RecvOp::Reduce) into the buffer. Float32: a
// float add. Bf16: as NCCL reduces ncclBfloat16 data, each add widens both operands, adds in
// float and rounds the sum to the nearest bf16 (ties to even, kernels/bf16.h); the buffers
// hold bf16 values in float32 slots, and a sum is rounded once per step that adds into it,
// so its error depends on the algorithm's order (docs/numerics.md, "bf16").
enum class ReduceIn { Float32, Bf16 };

// The most chunks a pipelined algorithm may cut a buffer into (NCCL's own are far fewer).
inline constexpr int kMaxChunks = 1 << 16;

// Checks the fields every algorithm relies on; throws Error naming the field and the fix.
void validate_spec(const CollectiveSpec& spec);

// Bytes rank `src` sends to rank `dst` in an all-to-all: alltoall_bytes[src][dst], or
// for even all-to-all floor(e/p) elements of e = bytes/element_bytes.
Bytes alltoall_block(const CollectiveSpec& spec, int src, int dst);

// Per-destination sizes of an all-to-all among `ranks` where destination 0 receives
// `imbalance` x the mean block of bytes/ranks and the others share the rest evenly (the
// busiest expert of a skewed MoE routing); blocks are cut down to whole element_bytes.
std::vector<std::vector<Bytes>> skewed_alltoall(Bytes bytes, int ranks, double imbalance, Bytes element_bytes = 1);

// The buffers of one rank, as every executor lays them out (see the buffer rules above):
// the input (send) and output (receive) sizes, and, for all-to-all, where the block the
// rank keeps for itself sits in each (the executor copies it before step 0). Other kinds
// work in place on one buffer of `bytes`: send = recv = bytes, own = 0.
struct RankBuffers {
  Bytes send = 0, recv = 0;
  Bytes self_send = 0, self_recv = 0, own = 0;
};
RankBuffers rank_buffers(const CollectiveSpec& spec, int rank);

// [begin, end) of slice i when `bytes` is split into `parts` nearly equal slices.
struct Range {
  Bytes begin = 0, end = 0;
  Bytes size() const { return end - begin; }
};
Range slice(Bytes bytes, int parts, int i);
// The same, cut at multiples of `element_bytes` (bytes must be a multiple of it).
Range slice(Bytes bytes, int parts, int i, Bytes element_bytes);

struct Transfer {
  int peer = 0;      // group-local rank
  Bytes offset = 0;  // offset in the local buffer (see buffer rules)
  Bytes bytes = 0;
  int chunk = 0;  // chunk label for teaching views (which slice/piece this is)
};

enum class RecvOp { Copy, Reduce };

struct Step {
  std::vector<Transfer> sends;
  std::vector<Transfer> recvs;
  RecvOp op = RecvOp::Copy;  // applies to every recv of the step
  void clear() {
    sends.clear();
    recvs.clear();
    op = RecvOp::Copy;
  }
};

// How an executor lays out one step's buffers (the buffer rules above, in one place for
// every backend). A receive is staged (received into scratch, then applied) when it
// overlaps another receive of the step, or when the executor applies reductions after
// the transfer (`stage_reductions`: a GPU receives into scratch and runs a reduce kernel;
// a socket transport that sums on arrival does not). On a shared send/receive buffer a
// send whose bytes an unstaged receive of the same step overwrites is snapshotted first,
// so it carries the buffer as of the step start. Scratch offsets are rounded up to `align`.
struct StepLayout {
  std::vector<Bytes> recv_stage;     // per receive: offset in the stage scratch, -1 = in place
  std::vector<Bytes> send_snapshot;  // per send: offset in the snapshot scratch, -1 = none
  Bytes stage_bytes = 0;
  Bytes snapshot_bytes = 0;
};
StepLayout layout_step(const Step& step, bool shared_buffer, bool stage_reductions, Bytes align = 1);

class StepProgram {
 public:
  virtual ~StepProgram() = default;
  virtual int ranks() const = 0;
  virtual int num_steps(int rank) const = 0;
  // Fills `out` (cleared first by the caller) with rank's step s, 0 <= s < num_steps(rank).
  virtual void step(int rank, int s, Step& out) const = 0;
  // The first step after s whose shape (peers, bytes, op; not offsets or chunk labels)
  // may differ from the step shape_period() before it. Steps [s, same_shape_until(rank, s))
  // look alike (or, with a period of 2, alternate between two shapes), so a simulator may
  // fast-forward through them once they run periodically. Default: s + 1.
  virtual int same_shape_until(int /*rank*/, int s) const { return s + 1; }
  // Inside such a run, step s has the shape of step s - shape_period() (1: every step alike;
  // 2: two kinds of step in turn, as a tree's UP and DOWN steps). At most 2.
  virtual int shape_period() const { return 1; }
};

// The alpha-beta-gamma parameters a closed form is evaluated with. `intra_*` describe a
// hop between two GPUs of one node, `inter_*` a hop between nodes; flat algorithms use
// `alpha`/`beta` (the worst hop among the group). gamma: reduction time per byte.
// A level whose intra (or inter) alpha and beta are both 0 falls back to alpha/beta.
struct CostParams {
  double alpha_ps = 0;  // per message
  double beta_ps = 0;   // per byte (1 / bandwidth)
  double gamma_ps = 0;  // per byte reduced
  double intra_alpha_ps = 0, intra_beta_ps = 0;
  double inter_alpha_ps = 0, inter_beta_ps = 0;
  // One route between nodes on its own (the slowest), where inter_beta_ps is that route's
  // share of a node's egress when all g ranks of the node cross at once (a NIC shared by a
  // node's GPUs): what one rank crossing alone gets, as a ring's one crossing per node.
  // 0: inter_beta_ps.
  double inter_route_beta_ps = 0;
  // Whether a GPU's intra-node and inter-node traffic leave it over the same first link (one
  // uplink to a switch or a PCIe tree), so that they add up; false: separate paths (NVLink
  // to the NVSwitch, a NIC of its own), so that they overlap.
  bool shared_uplink = false;
  // Every two of the group's GPUs are joined by a link of their own (a full mesh, as the xGMI
  // links of an MI300X platform): rings laid over different links do not share (mesh_rings).
  bool direct_links = false;
  // In-switch reduction: when every GPU of the group hangs off one switch that reduces and
  // multicasts (Device::reduce_efficiency > 0; NVLS on an NVSwitch), the latency of a trip
  // GPU -> switch -> GPU and the time per byte of that traffic on a GPU's link to or from
  // the switch (the slowest such link, at the switch's reduce efficiency). 0: no such switch.
  double switch_alpha_ps = 0, switch_beta_ps = 0;
  // The group spans several nodes and each node's GPUs hang off a reducing switch of their
  // own (NVLS-Tree's case): switch_* then describe those switches, and no one switch joins
  // the whole group (what the one-node `nvls` needs).
  bool switch_per_node = false;
  // In-network reduction across nodes (SHARP on InfiniBand switches): the group sits in node
  // blocks on at least two nodes, and every route between two of its ranks with the same local
  // index (a rail) on different nodes crosses only fabric switches that reduce. The latency of
  // the longest such route, the time per byte of a rank's stream into (and back out of) the
  // fabric's reduction tree (the slowest link of those routes at the lowest reduce efficiency),
  // and that efficiency. 0: the network cannot reduce.
  double net_switch_alpha_ps = 0, net_switch_beta_ps = 0;
  double net_switch_efficiency = 0;
  // The GPU runtime's protocols (schedule/protocol.h), when the topology runs them
  // (Topology::protocols): whether LL128 may run (the group's GPUs of a node joined by
  // NVLink, as NCCL requires), the kind of the group's hop inside a node (across nodes it
  // is NET) and whether the group spans nodes. best_protocol() picks one.
  bool protocols = false;
  bool ll128 = false;
  HopKind intra_hop = HopKind::NvLink;
  bool multi_node = false;
  // LL's rate (ProtocolScope): NCCL's llMaxBw for the group's GPUs and nodes over its slowest
  // link's rate, and the ring channels NCCL's search gives the group (0: not narrowed).
  double ll_cap_fraction = 1.0;
  int channels = 0;
};

// The ProtocolScope of `spec` on links `cp`.
ProtocolScope protocol_scope(const CostParams& cp, const CollectiveSpec& spec);

// The parameters a closed form of `spec` sees when its steps run under protocol `p`: every
// level's alpha at least p's latency for that level's hop kind (from the algorithm's rows, with
// NCCL's multi-node LL factor when cp.multi_node), every beta over p's payload fraction for
// `spec` (the launch is not in them: ProtocolCost adds it). Protocol::None: unchanged.
CostParams with_protocol(const CostParams& cp, Protocol p, const CollectiveSpec& spec, HopRows rows = {});

struct Algorithm {
  std::string name;     // "ring", "binomial", ...
  std::string summary;  // one line for the CLI help
  std::vector<CollKind> kinds;
  // Why this algorithm cannot run `spec` (e.g. "needs a power-of-two group"), or nullopt.
  std::function<std::optional<std::string>(const CollectiveSpec&)> unsupported;
  // Why the group's links cannot run it although the spec is fine (nvls: no switch that
  // reduces), or nullopt; unset: always available. `auto` skips an unavailable algorithm.
  std::function<std::optional<std::string>(const CollectiveSpec&, const CostParams&)> unavailable;
  // Constructs the step program; called by build() once the spec is valid and supported.
  std::function<std::unique_ptr<StepProgram>(const CollectiveSpec&)> make;
  // The transfers as the links carry them, for the flow fidelity, where hardware does part
  // of the work and they differ from make's (nvls: the switch reduces and multicasts, so a
  // GPU's link carries fewer bytes than the program's rank-to-rank sends). Unset: make's.
  std::function<std::unique_ptr<StepProgram>(const CollectiveSpec&, const CostParams&)> make_timing;
  // Closed form of docs/math.md section 1, in picoseconds.
  std::function<double(const CollectiveSpec&, const CostParams&)> cost_ps;
  // The same formula as text, symbolic and with the numbers put in (for --explain).
  std::function<std::string(const CollectiveSpec&, const CostParams&)> explain;
  // The one protocol it runs under, where the runtime has no choice (nvls: NvlsSimple);
  // nullopt: the runtime picks among LL, LL128 and Simple.
  std::optional<Protocol> only_protocol;
  // Which of NCCL's latency rows its hops pay under LL and LL128 (schedule/protocol.h): a
  // ring's point-to-point steps (the default) or a tree's (nccl_tree, dbt; hierarchical_tree
  // between the nodes).
  HopRows hop_rows;
  // Whether NCCL itself runs it (AlgorithmRegistry::builtin marks them). On a topology whose
  // collectives run under NCCL's protocols, `auto` chooses among these only.
  bool nccl = false;
  // The protocol costs its steps pay for `spec` under `p` on links `cp` (rows, launch,
  // multi-node LL, LL's rate for the message).
  ProtocolCosts protocol_costs(Protocol p, const CostParams& cp, const CollectiveSpec& spec) const;
  bool supports(CollKind k) const;
  // validate_spec(spec), then unsupported(spec) (thrown as Error with its reason), then make.
  std::unique_ptr<StepProgram> build(const CollectiveSpec& spec) const;
};

// How a collective's algorithm is chosen, parsed once where a front end hands its text over
// (a flag, a YAML field, a Python argument): `auto` (or empty: the registry's algorithms ranked
// by their closed forms), `nccl` (NCCL's tuning model chooses, at fidelity nccl) or one
// algorithm of the registry by name. Past the front ends nothing compares strings to "auto".
struct AlgorithmChoice {
  enum class Kind { Auto, Nccl, Named };
  Kind kind = Kind::Auto;
  std::string name;  // Kind::Named: the registry's name for it
  AlgorithmChoice() = default;
  AlgorithmChoice(const std::string& text);  // NOLINT(google-explicit-constructor): the front ends' text
  AlgorithmChoice(const char* text) : AlgorithmChoice(std::string(text)) {}  // NOLINT(google-explicit-constructor)
  std::string text() const;                                                  // "auto", "nccl" or the name
  bool operator==(const AlgorithmChoice&) const = default;
};

// The table of algorithms: a value, built once by the caller and passed in.
class AlgorithmRegistry {
 public:
  static AlgorithmRegistry builtin();
  void add(Algorithm a);
  const Algorithm* find(const std::string& name, CollKind kind) const;  // nullptr if none
  std::vector<const Algorithm*> for_kind(CollKind kind) const;
  const std::vector<Algorithm>& all() const { return algos_; }

 private:
  std::vector<Algorithm> algos_;
};

// The protocol a runtime runs `a` with for `spec` (the lowest launch + closed form under
// with_protocol; ties to the earlier of LL, LL128, Simple, as in NCCL) and that time in
// picoseconds. Without protocols (CostParams::protocols false): Protocol::None and the
// bare closed form. Every caller that times a closed form goes through this.
struct ProtocolCost {
  Protocol protocol = Protocol::None;
  double ps = 0;
};
ProtocolCost best_protocol(const Algorithm& a, const CollectiveSpec& spec, const CostParams& cp);

// Bus-bandwidth factor of NCCL's test suite: 2(p-1)/p all-reduce, (p-1)/p all-gather,
// reduce-scatter and all-to-all, 1 for broadcast, reduce and send/recv.
double busbw_factor(CollKind kind, int ranks);

// `auto`: the algorithm of `registry` that supports `spec` with the lowest cost_ps
// (ties go to the earlier registry entry). Where the links run NCCL's protocols
// (CostParams::protocols: the runtime is NCCL), only the algorithms NCCL runs
// (Algorithm::nccl) compete, unless none of them can run the spec; the others stay
// available by name. Throws Error listing every algorithm's reason when none supports
// the spec.
const Algorithm& choose_algorithm(const AlgorithmRegistry& registry, const CollectiveSpec& spec,
                                  const CostParams& params);
// Every algorithm `auto` may choose for `spec` on these links (as above), cheapest closed
// form first (ties in registry order); choose_algorithm is its front. Throws as choose_algorithm does.
struct RankedAlgorithm {
  const Algorithm* algorithm;
  double cost_ps;
};
std::vector<RankedAlgorithm> rank_algorithms(const AlgorithmRegistry& registry, const CollectiveSpec& spec,
                                             const CostParams& params);

}  // namespace meshsim
