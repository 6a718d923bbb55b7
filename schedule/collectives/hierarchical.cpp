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
#include <fmt/format.h>

#include "core/error.h"
#include "schedule/collectives/common.h"

namespace meshsim::collectives {
namespace {

class HierarchicalProgram final : public StepProgram {
 public:
  explicit HierarchicalProgram(const CollectiveSpec& s)
      : p_(s.ranks), g_(s.ranks_per_node), nodes_(s.ranks / s.ranks_per_node), n_(s.bytes), elem_(s.element_bytes) {}
  int ranks() const override { return p_; }
  int num_steps(int) const override { return 2 * (g_ - 1) + 2 * (nodes_ - 1); }
  void step(int rank, int s, Step& out) const override {
    const int node = rank / g_, l = rank % g_;
    const RingView intra{g_, l, node * g_ + (l + 1) % g_, node * g_ + (l + g_ - 1) % g_, 0, n_, elem_};
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

const std::vector<CollKind> kKinds = {CollKind::AllReduce};

std::optional<std::string> unsupported(const CollectiveSpec& s) {
  if (auto k = kind_reason("hierarchical", kKinds, s.kind)) return k;
  return node_blocks_reason("hierarchical", s);
}

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

double cost(const CollectiveSpec& s, const CostParams& c) {
  validate_spec(s);
  if (auto why = unsupported(s)) throw Error(*why);
  const int g = s.ranks_per_node, nodes = s.ranks / g;
  const Level li = intra(c), le = inter(c);
  const Bytes m1 = max_slice(s.bytes, g, s.element_bytes);
  return ring_phase_ps(g, s.bytes, s.element_bytes, li.alpha, li.beta, c.gamma_ps) +
         ring_phase_ps(nodes, m1, s.element_bytes, le.alpha, le.beta, c.gamma_ps) +
         ring_phase_ps(nodes, m1, s.element_bytes, le.alpha, le.beta, 0.0) +
         ring_phase_ps(g, s.bytes, s.element_bytes, li.alpha, li.beta, 0.0);
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

}  // namespace

Algorithm make_hierarchical() {
  Algorithm a = basic_algorithm<HierarchicalProgram>(
      "hierarchical", "intra-node ring reduce-scatter, inter-node ring all-reduce, intra-node ring all-gather", kKinds,
      cost, explain);
  a.unsupported = unsupported;
  return a;
}

}  // namespace meshsim::collectives
