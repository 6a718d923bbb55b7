// ring: all-reduce, all-gather and reduce-scatter on a logical ring r -> r+1.
//
// The buffer of n bytes is cut into p slices (slice()). Every step, every rank sends one
// slice to its successor and receives one from its predecessor, so each link carries one
// flow at a time and the ring is bandwidth-optimal.
//
//   p = 4, reduce-scatter (3 steps; [c] = slice c, "+" = reduced into the local copy)
//
//     step 0:  r0 --[3]--> r1 --[0]--> r2 --[1]--> r3 --[2]--> r0   (r1 +=[0], r2 +=[1], ...)
//     step 1:  r0 --[2]--> r1 --[3]--> r2 --[0]--> r3 --[1]--> r0
//     step 2:  r0 --[1]--> r1 --[2]--> r2 --[3]--> r3 --[0]--> r0   -> rank r owns reduced [r]
//
//   all-gather: step s, rank r sends slice r-s (it starts with its own [r]) and copies
//   slice r-s-1 from its predecessor. all-reduce = reduce-scatter then all-gather.
//
// Cost (exact under the step rules): the largest slice M (the last one, ceil(n/p) in
// elements) travels through every step of a phase on one chain of dependencies, and no
// step can take longer than alpha + M*beta (+ M*gamma when it reduces), so
//   reduce-scatter  (p-1)*(alpha + M*beta + M*gamma)
//   all-gather      (p-1)*(alpha + M*beta)
//   all-reduce      2(p-1)*alpha + 2(p-1)*M*beta + (p-1)*M*gamma
// which is the (p-1)/p*n per phase of docs/math.md section 1 when p divides n.
//
// Across nodes (node blocks of g consecutive ranks, g-1 hops inside a node and one between
// nodes) the hops differ, and the step rules let a rank start its next step as soon as its
// own send has drained and its predecessor's message has arrived: rank r's step s ends at
//   max(end(r, s-1) + M*b_r,  end(r-1, s-1) + M*b_{r-1} + a_{r-1})  (+ M*gamma when it reduces)
// with a_r, b_r the latency and per-byte time of r's outgoing hop. The time is the longest
// path through that (rank, step) grid, ring_blocks_ps() below, O(steps * g). In the long run
// a step costs the larger of the slowest hop's drain and the mean over a node's g hops of
// latency plus drain: a ring whose one crossing per node is slow pays that hop's drain every
// step but its latency only as the g hops share it, as NCCL's model charges the ring's
// latencies hop by hop (its nInterSteps and intra steps) rather than the worst every step.
#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "schedule/collectives/common.h"

namespace meshsim::collectives {

namespace {
// One ring step: send slice send_c of the region to next, receive slice recv_c from prev.
void ring_step(const RingView& v, int send_c, int recv_c, RecvOp op, Step& out) {
  const Range a = slice(v.len, v.size, send_c, v.elem);
  const Range b = slice(v.len, v.size, recv_c, v.elem);
  out.sends.push_back(Transfer{v.next, v.base + a.begin, a.size(), send_c});
  out.recvs.push_back(Transfer{v.prev, v.base + b.begin, b.size(), recv_c});
  out.op = op;
}
}  // namespace

void ring_reduce_scatter_step(const RingView& v, int s, Step& out) {
  ring_step(v, mod(v.pos - s - 1, v.size), mod(v.pos - s - 2, v.size), RecvOp::Reduce, out);
}

void ring_all_gather_step(const RingView& v, int s, Step& out) {
  ring_step(v, mod(v.pos - s, v.size), mod(v.pos - s - 1, v.size), RecvOp::Copy, out);
}

double ring_phase_ps(int size, Bytes len, Bytes elem, double alpha, double beta, double gamma) {
  if (size <= 1) return 0.0;
  const double m = static_cast<double>(max_slice(len, size, elem));
  return (size - 1) * (alpha + m * beta + m * gamma);
}

namespace {

// The per-byte time of a ring's one crossing per node: a route between nodes on its own.
double crossing_beta(const CostParams& c) { return c.inter_route_beta_ps > 0 ? c.inter_route_beta_ps : levels(c).be; }

// The ring of p ranks in node blocks of g (the rules at the top of this file): steps_rs Reduce
// steps (M*gamma each) then steps_ag Copy steps, every message M bytes.
double ring_blocks_ps(int g, int steps_rs, int steps_ag, double m, const CostParams& c) {
  const Levels lv = levels(c);
  const double be = crossing_beta(c);
  // Position q = rank mod g: its outgoing hop is inside the node for q < g-1.
  auto drain = [&](int q) { return m * (q < g - 1 ? lv.bi : be); };
  auto hop = [&](int q) { return drain(q) + (q < g - 1 ? lv.ai : lv.ae); };
  std::vector<double> end(static_cast<std::size_t>(g), 0.0), next(end);
  for (int s = 0; s < steps_rs + steps_ag; ++s) {
    const double reduce = s < steps_rs ? m * c.gamma_ps : 0.0;
    for (int q = 0; q < g; ++q) {
      const int prev = (q + g - 1) % g;
      next[static_cast<std::size_t>(q)] =
          std::max(end[static_cast<std::size_t>(q)] + drain(q), end[static_cast<std::size_t>(prev)] + hop(prev)) +
          reduce;
    }
    end.swap(next);
  }
  return *std::max_element(end.begin(), end.end());
}

// Whether `s` runs as a ring across node blocks whose hops differ (ring_blocks_ps).
bool ring_across_nodes(const CollectiveSpec& s, const CostParams& c) {
  const int g = s.ranks_per_node;
  if (g < 2 || s.ranks <= g || s.ranks % g != 0) return false;
  const Levels lv = levels(c);
  return lv.ai != lv.ae || lv.bi != crossing_beta(c);
}

class RingProgram final : public StepProgram {
 public:
  explicit RingProgram(const CollectiveSpec& s) : kind_(s.kind), p_(s.ranks), n_(s.bytes), elem_(s.element_bytes) {}
  int ranks() const override { return p_; }
  int num_steps(int) const override { return kind_ == CollKind::AllReduce ? 2 * (p_ - 1) : p_ - 1; }
  // With equal slices every reduce-scatter step looks alike, and every all-gather step.
  int same_shape_until(int, int s) const override {
    if (p_ < 2 || n_ % (static_cast<Bytes>(p_) * elem_) != 0) return s + 1;
    if (kind_ == CollKind::AllReduce && s < p_ - 1) return p_ - 1;
    return num_steps(0);
  }
  void step(int rank, int s, Step& out) const override {
    const RingView v{p_, rank, (rank + 1) % p_, (rank + p_ - 1) % p_, 0, n_, elem_};
    switch (kind_) {
      case CollKind::ReduceScatter:
        ring_reduce_scatter_step(v, s, out);
        break;
      case CollKind::AllGather:
        ring_all_gather_step(v, s, out);
        break;
      default:
        if (s < p_ - 1)
          ring_reduce_scatter_step(v, s, out);
        else
          ring_all_gather_step(v, s - (p_ - 1), out);
    }
  }

 private:
  CollKind kind_;
  int p_;
  Bytes n_, elem_;
};

const std::vector<CollKind> kKinds = {CollKind::AllReduce, CollKind::AllGather, CollKind::ReduceScatter};

double cost(const CollectiveSpec& s, const CostParams& c) {
  validate_spec(s);
  if (ring_across_nodes(s, c)) {
    const double m = static_cast<double>(max_slice(s.bytes, s.ranks, s.element_bytes));
    const int steps = s.ranks - 1;
    switch (s.kind) {
      case CollKind::ReduceScatter:
        return ring_blocks_ps(s.ranks_per_node, steps, 0, m, c);
      case CollKind::AllGather:
        return ring_blocks_ps(s.ranks_per_node, 0, steps, m, c);
      default:
        return ring_blocks_ps(s.ranks_per_node, steps, steps, m, c);
    }
  }
  const double rs = ring_phase_ps(s.ranks, s.bytes, s.element_bytes, c.alpha_ps, c.beta_ps, c.gamma_ps);
  const double ag = ring_phase_ps(s.ranks, s.bytes, s.element_bytes, c.alpha_ps, c.beta_ps, 0.0);
  switch (s.kind) {
    case CollKind::ReduceScatter:
      return rs;
    case CollKind::AllGather:
      return ag;
    default:
      return rs + ag;
  }
}

std::string explain(const CollectiveSpec& s, const CostParams& c) {
  const int p = s.ranks;
  const Bytes m = p >= 1 ? max_slice(s.bytes, p, s.element_bytes) : 0;
  const std::string a = fmt_alpha(c.alpha_ps), b = fmt_rate(c.beta_ps), g = fmt_rate(c.gamma_ps);
  std::string sym, num;
  switch (s.kind) {
    case CollKind::ReduceScatter:
      sym = "(p-1)*(alpha + M*beta + M*gamma), M = largest slice = ceil(n/p)";
      num = fmt::format("{}*({} + {}B/{} + {}B/{})", p - 1, a, m, b, m, g);
      break;
    case CollKind::AllGather:
      sym = "(p-1)*(alpha + M*beta), M = largest slice = ceil(n/p)";
      num = fmt::format("{}*({} + {}B/{})", p - 1, a, m, b);
      break;
    default:
      sym = "2(p-1)*alpha + 2(p-1)*M*beta + (p-1)*M*gamma, M = largest slice = ceil(n/p)";
      num = fmt::format("2*{}*{} + 2*{}*{}B/{} + {}*{}B/{}", p - 1, a, p - 1, m, b, p - 1, m, g);
  }
  const std::string head = fmt::format("ring {} (p={}, n={}B)", to_string(s.kind), p, s.bytes);
  if (ring_across_nodes(s, c)) {
    const Levels lv = levels(c);
    const double be = crossing_beta(c);
    return explain_text(
        fmt::format("{}, {} nodes of g={}", head, p / s.ranks_per_node, s.ranks_per_node),
        "longest path over the steps: a rank's step ends when its own send has drained (M*b of its hop) and its "
        "predecessor's has arrived (M*b + a of that hop), g-1 hops (a_i, b_i) inside a node and one (a_e, b_e) "
        "between nodes; about max(M*b_e, ((g-1)(a_i + M*b_i) + a_e + M*b_e)/g) per step",
        fmt::format("M = {}B, a_i = {}, b_i = {}, a_e = {}, b_e = {}", m, fmt_alpha(lv.ai), fmt_rate(lv.bi),
                    fmt_alpha(lv.ae), fmt_rate(be)),
        cost(s, c));
  }
  return explain_text(head, sym, num, cost(s, c));
}

}  // namespace

Algorithm make_ring() {
  return basic_algorithm<RingProgram>("ring", "ring r -> r+1: bandwidth-optimal, 2(p-1) latency steps for all-reduce",
                                      kKinds, cost, explain);
}

}  // namespace meshsim::collectives
