// hierarchical: two-level all-reduce for g = spec.ranks_per_node consecutive ranks per node
// and N = p/g nodes. Rank r is local rank l = r % g on node r / g.
//
//   1. intra-node ring reduce-scatter over the whole buffer (g-1 steps): local rank l
//      ends with slice l of the g slices, reduced over its node;
//   2. inter-node ring all-reduce of that slice among the N ranks with the same l
//      (2(N-1) steps, each moving sub-slices of n/g/N bytes over the network);
//   3. intra-node ring all-gather of the g slices (g-1 steps).
//
//   p = 4, g = 2 (nodes {0,1} and {2,3}):
//     phase 1:  0<->1 and 2<->3 exchange halves, reduce        (node sums of half l)
//     phase 2:  0<->2 (half 0) and 1<->3 (half 1): ring all-reduce across nodes
//     phase 3:  0<->1 and 2<->3 exchange their reduced halves
//
// Cost (exact under the step rules; largest slices M1 = slice(n, g, g-1), M2 = slice(M1, N, N-1)):
//   (g-1)*(a_i + M1*b_i + M1*gamma) + 2(N-1)*a_e + 2(N-1)*M2*b_e + (N-1)*M2*gamma + (g-1)*(a_i + M1*b_i)
//   = 2(g-1)*a_i + 2(g-1)/g*n*b_i + 2(N-1)*a_e + 2(N-1)/p*n*b_e + (p-1)/p*n*gamma   when p divides n
// with a_i, b_i = CostParams intra_alpha/intra_beta and a_e, b_e = inter_alpha/inter_beta.
// The largest slice is always the last one, and the ranks holding it (local rank g-1,
// then the last sub-slice of its ring) form one chain that is critical in every phase.
// When a level's pair (alpha, beta) is left at 0 the flat alpha/beta are used for it.
// g = 1 is a plain ring all-reduce over the nodes; N = 1 a ring inside the node.
//
// hierarchical_tree: the same three phases, with phase 2 run as `dbt` (double_binary_tree.cpp:
// two complementary binary trees over the N nodes, pipelined in k chunks) instead of a ring,
// one tree pair per local rank l, so each rail carries its own trees. This is the shape of
// NCCL's multi-node all-reduce on NVSwitch systems (NVLS-Tree: reduce-scatter inside the
// node, trees across nodes per NIC, all-gather inside), with rings inside the node in place
// of the in-switch reduction. Phase 2 takes about k + 2 log2 N steps where the ring takes
// 2(N-1): the tree's latency grows with log N, the ring's with N, and at large sizes both move
// about 2 n/g bytes per GPU across the network.
// Cost: the two intra ring phases as above plus dbt's lockstep estimate for an all-reduce of
// the largest slice M1 among N ranks at the inter alpha and beta (an upper estimate past
// N = 3, docs/collectives.md):
//   2(g-1)*a_i + 2(g-1)*M1*b_i + (g-1)*M1*gamma + dbt(N, M1; a_e, b_e, gamma)
#include <fmt/format.h>

#include <memory>
#include <vector>

#include "core/error.h"
#include "schedule/collectives/common.h"

namespace meshsim::collectives {
namespace {

// The ring of rank's node (g consecutive ranks) over the whole buffer: phases 1 and 3.
RingView node_ring(int g, int rank, Bytes n, Bytes elem) {
  const int node = rank / g, l = rank % g;
  return RingView{g, l, node * g + (l + 1) % g, node * g + (l + g - 1) % g, 0, n, elem};
}

class HierarchicalProgram final : public StepProgram {
 public:
  explicit HierarchicalProgram(const CollectiveSpec& s)
      : p_(s.ranks), g_(s.ranks_per_node), nodes_(s.ranks / s.ranks_per_node), n_(s.bytes), elem_(s.element_bytes) {}
  int ranks() const override { return p_; }
  int num_steps(int) const override { return 2 * (g_ - 1) + 2 * (nodes_ - 1); }
  void step(int rank, int s, Step& out) const override {
    const int node = rank / g_, l = rank % g_;
    const RingView intra = node_ring(g_, rank, n_, elem_);
    if (s < g_ - 1) return ring_reduce_scatter_step(intra, s, out);
    s -= g_ - 1;
    if (s < 2 * (nodes_ - 1)) {
      const Range mine = slice(n_, g_, l, elem_);
      const RingView inter{
          nodes_,      node, ((node + 1) % nodes_) * g_ + l, ((node + nodes_ - 1) % nodes_) * g_ + l, mine.begin,
          mine.size(), elem_};
      if (s < nodes_ - 1) return ring_reduce_scatter_step(inter, s, out);
      return ring_all_gather_step(inter, s - (nodes_ - 1), out);
    }
    s -= 2 * (nodes_ - 1);
    ring_all_gather_step(intra, s, out);
  }

 private:
  int p_, g_, nodes_;
  Bytes n_, elem_;
};

// Phase 2 as dbt: trees_[l] is the all-reduce of slice l among the N ranks with local rank
// l (tree rank = node), its peers and offsets mapped back to the group and the buffer.
class HierarchicalTreeProgram final : public StepProgram {
 public:
  explicit HierarchicalTreeProgram(const CollectiveSpec& s)
      : p_(s.ranks), g_(s.ranks_per_node), n_(s.bytes), elem_(s.element_bytes) {
    for (int l = 0; l < g_; ++l) {
      const Range mine = slice(n_, g_, l, elem_);
      trees_.push_back(make_dbt_program(rail_spec(s, mine.size(), s.chunks)));
      base_.push_back(mine.begin);
    }
  }
  int ranks() const override { return p_; }
  int num_steps(int rank) const override {
    return 2 * (g_ - 1) + trees_[static_cast<std::size_t>(rank % g_)]->num_steps(rank / g_);
  }
  void step(int rank, int s, Step& out) const override {
    const int node = rank / g_, l = rank % g_;
    const RingView intra = node_ring(g_, rank, n_, elem_);
    if (s < g_ - 1) return ring_reduce_scatter_step(intra, s, out);
    s -= g_ - 1;
    const StepProgram& tree = *trees_[static_cast<std::size_t>(l)];
    const int inter_steps = tree.num_steps(node);
    if (s < inter_steps) {
      const std::size_t sends = out.sends.size(), recvs = out.recvs.size();
      tree.step(node, s, out);
      auto to_group = [&](Transfer& t) {
        t.peer = t.peer * g_ + l;
        t.offset += base_[static_cast<std::size_t>(l)];
      };
      for (std::size_t i = sends; i < out.sends.size(); ++i) to_group(out.sends[i]);
      for (std::size_t i = recvs; i < out.recvs.size(); ++i) to_group(out.recvs[i]);
      return;
    }
    ring_all_gather_step(intra, s - inter_steps, out);
  }

 private:
  int p_, g_;
  Bytes n_, elem_;
  std::vector<std::unique_ptr<StepProgram>> trees_;
  std::vector<Bytes> base_;
};

const std::vector<CollKind> kKinds = {CollKind::AllReduce};

std::optional<std::string> unsupported_as(const std::string& name, const CollectiveSpec& s) {
  if (auto k = kind_reason(name, kKinds, s.kind)) return k;
  return node_blocks_reason(name, s);
}
std::optional<std::string> unsupported(const CollectiveSpec& s) { return unsupported_as("hierarchical", s); }
std::optional<std::string> unsupported_tree(const CollectiveSpec& s) { return unsupported_as("hierarchical_tree", s); }

struct Level {
  double alpha, beta;
};
Level intra(const CostParams& c) {
  if (c.intra_alpha_ps == 0 && c.intra_beta_ps == 0) return {c.alpha_ps, c.beta_ps};
  return {c.intra_alpha_ps, c.intra_beta_ps};
}
Level inter(const CostParams& c) {
  if (c.inter_alpha_ps == 0 && c.inter_beta_ps == 0) return {c.alpha_ps, c.beta_ps};
  return {c.inter_alpha_ps, c.inter_beta_ps};
}

// The intra phases of both variants: reduce-scatter (with the reduction) and all-gather.
double intra_phases_ps(int g, const CollectiveSpec& s, const Level& li, double gamma) {
  return ring_phase_ps(g, s.bytes, s.element_bytes, li.alpha, li.beta, gamma) +
         ring_phase_ps(g, s.bytes, s.element_bytes, li.alpha, li.beta, 0.0);
}

double cost(const CollectiveSpec& s, const CostParams& c) {
  validate_spec(s);
  if (auto why = unsupported(s)) throw Error(*why);
  const int g = s.ranks_per_node, nodes = s.ranks / g;
  const Level li = intra(c), le = inter(c);
  const Bytes m1 = max_slice(s.bytes, g, s.element_bytes);
  return intra_phases_ps(g, s, li, c.gamma_ps) +
         ring_phase_ps(nodes, m1, s.element_bytes, le.alpha, le.beta, c.gamma_ps) +
         ring_phase_ps(nodes, m1, s.element_bytes, le.alpha, le.beta, 0.0);
}

std::string explain(const CollectiveSpec& s, const CostParams& c) {
  const int g = s.ranks_per_node, nodes = s.ranks / g;
  const Level li = intra(c), le = inter(c);
  const Bytes m1 = max_slice(s.bytes, g, s.element_bytes), m2 = max_slice(m1, nodes, s.element_bytes);
  return explain_text(
      fmt::format("hierarchical allreduce (p={}, g={} per node, N={} nodes, n={}B)", s.ranks, g, nodes, s.bytes),
      "2(g-1)*a_i + 2(g-1)*M1*b_i + (g-1)*M1*gamma + 2(N-1)*a_e + 2(N-1)*M2*b_e + (N-1)*M2*gamma, "
      "M1 = ceil(n/g), M2 = ceil(M1/N)",
      fmt::format("2*{}*{} + 2*{}*{}B/{} + {}*{}B/{} + 2*{}*{} + 2*{}*{}B/{} + {}*{}B/{}", g - 1, fmt_alpha(li.alpha),
                  g - 1, m1, fmt_rate(li.beta), g - 1, m1, fmt_rate(c.gamma_ps), nodes - 1, fmt_alpha(le.alpha),
                  nodes - 1, m2, fmt_rate(le.beta), nodes - 1, m2, fmt_rate(c.gamma_ps)),
      cost(s, c));
}

// Phase 2 of hierarchical_tree: dbt's estimate for the largest slice at the inter level.
double tree_phase_ps(const CollectiveSpec& s, const CostParams& c) {
  const Level le = inter(c);
  CostParams ce = c;
  ce.alpha_ps = le.alpha;
  ce.beta_ps = le.beta;
  return dbt_cost_ps(rail_spec(s, max_slice(s.bytes, s.ranks_per_node, s.element_bytes), s.chunks), ce);
}

double tree_cost(const CollectiveSpec& s, const CostParams& c) {
  validate_spec(s);
  if (auto why = unsupported_tree(s)) throw Error(*why);
  return intra_phases_ps(s.ranks_per_node, s, intra(c), c.gamma_ps) + tree_phase_ps(s, c);
}

std::string tree_explain(const CollectiveSpec& s, const CostParams& c) {
  const int g = s.ranks_per_node, nodes = s.ranks / g;
  const Level li = intra(c), le = inter(c);
  const Bytes m1 = max_slice(s.bytes, g, s.element_bytes);
  return explain_text(
      fmt::format("hierarchical_tree allreduce (p={}, g={} per node, N={} nodes, n={}B)", s.ranks, g, nodes, s.bytes),
      "2(g-1)*a_i + 2(g-1)*M1*b_i + (g-1)*M1*gamma + dbt(N ranks, M1 bytes; a_e, b_e), M1 = ceil(n/g)",
      fmt::format("2*{}*{} + 2*{}*{}B/{} + {}*{}B/{} + dbt({}, {}B; {}, {})", g - 1, fmt_alpha(li.alpha), g - 1, m1,
                  fmt_rate(li.beta), g - 1, m1, fmt_rate(c.gamma_ps), nodes, m1, fmt_alpha(le.alpha),
                  fmt_rate(le.beta)),
      tree_cost(s, c));
}

}  // namespace

CollectiveSpec rail_spec(const CollectiveSpec& s, Bytes bytes, int chunks) {
  CollectiveSpec sub;
  sub.kind = CollKind::AllReduce;
  sub.ranks = s.ranks / s.ranks_per_node;
  sub.bytes = bytes;
  sub.chunks = chunks;
  sub.element_bytes = s.element_bytes;
  return sub;
}

std::unique_ptr<StepProgram> make_hierarchical_tree_program(const CollectiveSpec& s) {
  return std::make_unique<HierarchicalTreeProgram>(s);
}

Algorithm make_hierarchical_tree() {
  Algorithm a = basic_algorithm<HierarchicalTreeProgram>(
      "hierarchical_tree",
      "intra-node ring reduce-scatter, inter-node double binary tree all-reduce per local rank, intra-node ring "
      "all-gather",
      kKinds, tree_cost, tree_explain, unsupported_tree);
  a.hop_rows.net = HopRow::Tree;  // dbt between the nodes; rings inside them
  return a;
}

Algorithm make_hierarchical() {
  return basic_algorithm<HierarchicalProgram>(
      "hierarchical", "intra-node ring reduce-scatter, inter-node ring all-reduce, intra-node ring all-gather", kKinds,
      cost, explain, unsupported);
}

}  // namespace meshsim::collectives
