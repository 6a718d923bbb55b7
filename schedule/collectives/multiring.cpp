// multiring: all-reduce, all-gather and reduce-scatter as NCCL runs them across nodes: one
// ring per channel, C = g channels for g = spec.ranks_per_node consecutive ranks per node
// (N = p/g nodes; C = 1, a plain ring, on one node). All C rings step together, each moving
// its own C-th of the data.
//
// Ring c visits the nodes in order; inside node k it starts at local rank (c - k) mod g and
// walks up, so it leaves node k from local rank l = (c - k - 1) mod g and enters node k+1 at
// the same local rank l: every cross-node hop of ring c but the wrap from the last node to
// the first joins two GPUs of one rail, and the C rings leave each node through C
// different GPUs (their NICs). A single ring sends every
// byte that crosses nodes through one NIC per node; the C rings spread it over all of them.
//
//   p = 4, g = 2 (nodes {0,1}, {2,3}), C = 2:
//     ring 0:  0 -> 1 => 3 -> 2 => 0      (=> crosses nodes: 1 => 3 on local rank 1, 2 => 0 on 0)
//     ring 1:  1 -> 0 => 2 -> 3 => 1      (0 => 2 on local rank 0, 3 => 1 on 1)
//
// Rank r's slice of the buffer (n/p, as a ring's) is cut into C chunks, chunk c travelling
// on ring c, so a reduce-scatter leaves rank r with its slice r and an all-gather starts
// from it, as the buffer rules of every other algorithm have it.
// Per step every rank sends C chunks of at most M = a C-th of the largest slice: in the one
// ring where it is a node's exit, its chunk crosses nodes; the other C-1 stay inside
// the node. With separate intra- and inter-node paths (NVLink and a NIC per GPU; CostParams
// with an intra/inter split), a step takes the slower of the two:
//   step = max(a_i + (C-1)*M*b_i, a_e + M*b_e) + C*M*gamma (reduce steps)
// and when both leave the GPU over one link (CostParams::shared_uplink: one uplink to a
// switch, a PCIe tree) or no split is known, the C chunks share it:
//   step = max(a_i, a_e) + ((C-1)*b_i + b_e)*M + C*M*gamma.
// all-reduce = (p-1) reduce steps + (p-1) copy steps; reduce-scatter and all-gather one phase.
// When p divides the parts evenly, C*M = n/p: at large n the all-reduce moves
// 2(p-1)/p*n at max((C-1)/C*b_i, b_e/C) per byte, the NIC term C times smaller than a ring's.
// The flow fidelity times the same program over the routed links, shared paths included.
#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "schedule/collectives/common.h"

namespace meshsim::collectives {
namespace {

struct Shape {
  int p, g, nodes, channels;
};
Shape shape_of(const CollectiveSpec& s) {
  const int g = std::max(1, s.ranks_per_node), nodes = s.ranks / g;
  return {s.ranks, g, nodes, nodes > 1 ? g : 1};
}

class MultiRingProgram final : public StepProgram {
 public:
  explicit MultiRingProgram(const CollectiveSpec& s)
      : kind_(s.kind), sh_(shape_of(s)), n_(s.bytes), elem_(s.element_bytes) {}
  int ranks() const override { return sh_.p; }
  int num_steps(int) const override { return kind_ == CollKind::AllReduce ? 2 * (sh_.p - 1) : sh_.p - 1; }
  int same_shape_until(int, int s) const override {
    if (sh_.p < 2 || n_ % (static_cast<Bytes>(sh_.p) * sh_.channels * elem_) != 0) return s + 1;
    if (kind_ == CollKind::AllReduce && s < sh_.p - 1) return sh_.p - 1;
    return num_steps(0);
  }
  void step(int rank, int s, Step& out) const override {
    ring_channels_step(
        kind_, sh_.p, sh_.channels, n_, elem_, rank, s, [this](int c, int pos) { return at(c, pos); },
        [this](int c, int r) { return position(c, r); }, out);
  }

 private:
  // Node k's first member in ring c: local rank (c - k) mod g.
  int start(int c, int node) const { return mod(c - node, sh_.g); }
  // The rank at position pos of ring c, and the position of `rank` in it.
  int at(int c, int pos) const {
    pos = mod(pos, sh_.p);
    const int node = pos / sh_.g;
    return node * sh_.g + mod(start(c, node) + pos % sh_.g, sh_.g);
  }
  int position(int c, int rank) const {
    const int node = rank / sh_.g;
    return node * sh_.g + mod(rank % sh_.g - start(c, node), sh_.g);
  }

  CollKind kind_;
  Shape sh_;
  Bytes n_, elem_;
};

const std::vector<CollKind> kKinds = {CollKind::AllReduce, CollKind::AllGather, CollKind::ReduceScatter};

std::optional<std::string> unsupported(const CollectiveSpec& s) {
  if (auto k = kind_reason("multiring", kKinds, s.kind)) return k;
  return node_blocks_reason("multiring", s);
}

// One step's time, without its reduction; the largest chunk M of every part.
RingChannelsStep step_cost(const CollectiveSpec& s, const CostParams& c) {
  const Shape sh = shape_of(s);
  const auto m = static_cast<double>(ring_channel_max_chunk(s, sh.channels));
  const Levels l = levels(c);
  double t = 0;
  if (sh.nodes == 1)
    t = l.ai + m * l.bi;  // one node: a plain ring over its path
  else if (!l.separate)
    t = std::max(l.ai, l.ae) + ((sh.channels - 1) * l.bi + l.be) * m;
  else
    t = std::max(l.ai + (sh.channels - 1) * m * l.bi, l.ae + m * l.be);
  return {t, m, sh.channels};
}

double cost(const CollectiveSpec& s, const CostParams& c) {
  validate_spec(s);
  if (auto why = unsupported(s)) throw Error(*why);
  if (s.ranks < 2) return 0.0;
  return ring_channels_cost(s.kind, s.ranks, step_cost(s, c), c.gamma_ps);
}

std::string explain(const CollectiveSpec& s, const CostParams& c) {
  const Shape sh = shape_of(s);
  const RingChannelsStep st = s.ranks >= 2 ? step_cost(s, c) : RingChannelsStep{0, 0, 1};
  const char* step = sh.nodes == 1        ? "a_i + M*b_i"
                     : levels(c).separate ? "max(a_i + (C-1)*M*b_i, a_e + M*b_e)"
                                          : "max(a_i, a_e) + ((C-1)*b_i + b_e)*M";
  const std::string phases = ring_channels_phases(s.kind);
  return explain_text(
      fmt::format("multiring {} (p={}, g={} per node, N={} nodes, C={} rings, n={}B)", to_string(s.kind), s.ranks, sh.g,
                  sh.nodes, sh.channels, s.bytes),
      fmt::format("{}, step = {}, M = largest chunk (a C-th of the largest n/p slice)", phases, step),
      fmt::format("p-1 = {}, step = {}, M = {}B, C*M*gamma = {}", s.ranks - 1, fmt_alpha(st.transfer_ps),
                  static_cast<Bytes>(st.chunk_bytes), fmt_alpha(st.channels * st.chunk_bytes * c.gamma_ps)),
      cost(s, c));
}

}  // namespace

Algorithm make_multiring() {
  return basic_algorithm<MultiRingProgram>(
      "multiring", "one ring per GPU of a node (NCCL's channels), each crossing nodes on its own rail/NIC", kKinds,
      cost, explain, unsupported);
}

}  // namespace meshsim::collectives
