// concurrent: all-to-all with every send and receive posted at once, as NCCL runs one (a
// grouped ncclSend/ncclRecv to every peer) and as MoE dispatch/combine kernels do. One
// step: rank r sends its block for q to every q != r and receives every block for it.
//
//   p = 4 (send block r->q written rq), one step:
//     0 -> 1,2,3 (01 02 03)   1 -> 0,2,3   2 -> 0,1,3   3 -> 0,1,2;  block rr stays local
//
// Buffers as pairwise's: send buffer of rank r in destination order, receive buffer in
// source order; sizes from spec.alltoall_bytes, or even blocks (see alltoall_block).
//
// Unlike pairwise's lockstep, a node's NICs and its NVLink carry traffic at the same time:
// with g ranks per node (spec.ranks_per_node) each rank sends (g-1) blocks inside its node
// and (p-g) to other nodes. With separate intra- and inter-node links (NVLink and a NIC per
// GPU), the two overlap; when they share the GPU's first link (CostParams::shared_uplink)
// or no split is known, they add up. For blocks of b bytes:
//   split    t = max(a_i + (g-1)*b*b_i, a_e + (p-g)*b*b_e)
//   shared   t = max(a_i, a_e) + ((g-1)*b_i + (p-g)*b_e)*b
// Exact for even blocks when every port carries only its own rank's flows (the flow run
// equals it on one switch). Uneven sizes: the same with b*(count) replaced by the largest
// per-rank total sent or received at each level, an estimate (ranks drift in a real run).
//
// pxn: the same all-to-all with NCCL's PXN routing: a block for a rank on
// another node travels first over NVLink to the GPU of its own node on the destination's
// rail (same local index), which sends it over its NIC, so every NIC carries only traffic
// between GPUs of one local index (one rail) and no block climbs to a spine to change
// rails. (DeepEP's normal kernels relay on the receiving node instead, over the NIC of
// the sender's rail first and NVLink after: for even blocks the same loads.) Rank r =
// (node a, local i) relays, for each local peer (a, j), the blocks (a, j) has for (b, i),
// b != a. Per rank, with N nodes of g ranks and blocks of b bytes:
//   NVLink  N(g-1)*b  (its own blocks for local peers plus the blocks it hands over)
//   NIC     (N-1)g*b  (the same as concurrent: the node's whole traffic for rail i)
//   split    t = max(a_i + N(g-1)*b*b_i, a_e + (N-1)g*b*b_e)
//   shared   t = max(a_i, a_e) + (N(g-1)*b_i + (N-1)g*b_e)*b
// NCCL pipelines the relay in chunks, so the two hops overlap; the closed form charges the
// busier level (the second hop's latency is not added). Executed (make): the direct sends
// of `concurrent`, the same data where it belongs; timed (make_timing): one step with the
// relayed loads above, so that at flow fidelity the NICs and rails carry what PXN puts on
// them. With one rank per node, or one node, pxn is concurrent.
#include <fmt/format.h>

#include <algorithm>

#include "schedule/collectives/common.h"

namespace meshsim::collectives {
namespace {

class ConcurrentProgram final : public StepProgram {
 public:
  explicit ConcurrentProgram(const CollectiveSpec& s) : spec_(s), off_(alltoall_offsets(s)) {}
  int ranks() const override { return spec_.ranks; }
  int num_steps(int) const override { return spec_.ranks < 2 ? 0 : 1; }
  void step(int rank, int, Step& out) const override {
    const auto r = static_cast<std::size_t>(rank);
    for (int d = 1; d < spec_.ranks; ++d) {  // peers in pairwise's order: r+1, r+2, ...
      const int dst = (rank + d) % spec_.ranks, src = mod(rank - d, spec_.ranks);
      const auto ud = static_cast<std::size_t>(dst), us = static_cast<std::size_t>(src);
      out.sends.push_back(Transfer{dst, off_.send[r][ud], alltoall_block(spec_, rank, dst), dst});
      out.recvs.push_back(Transfer{src, off_.recv[r][us], alltoall_block(spec_, src, rank), src});
    }
    out.op = RecvOp::Copy;
  }

 private:
  CollectiveSpec spec_;
  AllToAllOffsets off_;
};

// PXN's link loads (see above) as one step: rank r sends to each local peer its own block
// plus the blocks it hands over for that peer's rail, and to each rank of its rail on other
// nodes the blocks of its whole node for that rank. Offsets are 0: only the loads count.
class PxnLoadProgram final : public StepProgram {
 public:
  explicit PxnLoadProgram(const CollectiveSpec& s) : spec_(s), g_(group_size(s)), nodes_(s.ranks / g_) {}
  int ranks() const override { return spec_.ranks; }
  int num_steps(int) const override { return spec_.ranks < 2 ? 0 : 1; }
  void step(int rank, int, Step& out) const override {
    const int a = rank / g_, i = rank % g_;
    for (int j = 0; j < g_; ++j) {  // local peers: direct block + the relay for rail j
      if (j == i) continue;
      const int q = a * g_ + j;
      out.sends.push_back(Transfer{q, 0, to_local(rank, q), q});
      out.recvs.push_back(Transfer{q, 0, to_local(q, rank), q});
    }
    for (int b = 0; b < nodes_; ++b) {  // the same rail on other nodes: the whole node's blocks
      if (b == a) continue;
      const int q = b * g_ + i;
      out.sends.push_back(Transfer{q, 0, to_rail(a, q), q});
      out.recvs.push_back(Transfer{q, 0, to_rail(b, rank), q});
    }
    out.op = RecvOp::Copy;
  }
  // What a rank sends inside its node and out of it, the largest over ranks (received alike).
  static std::pair<double, double> max_loads(const CollectiveSpec& s) {
    const PxnLoadProgram p(s);
    if (s.alltoall_bytes.empty() && s.ranks >= 2) {  // even blocks B: every rank alike
      const auto block = static_cast<double>(alltoall_block(s, 0, 1));
      return {block * nodes_times(p.g_ - 1, p.nodes_), block * nodes_times(p.nodes_ - 1, p.g_)};
    }
    double intra = 0, inter = 0;
    Step st;
    for (int r = 0; r < s.ranks && s.ranks >= 2; ++r) {
      st.clear();
      p.step(r, 0, st);
      for (const auto* list : {&st.sends, &st.recvs}) {
        double in = 0, out = 0;
        for (const Transfer& t : *list) (t.peer / p.g_ == r / p.g_ ? in : out) += static_cast<double>(t.bytes);
        intra = std::max(intra, in);
        inter = std::max(inter, out);
      }
    }
    return {intra, inter};
  }

 private:
  // Ranks per node when the group cuts into whole nodes of them, else 1 (no relay).
  static int group_size(const CollectiveSpec& s) {
    const int g = std::max(1, s.ranks_per_node);
    return s.ranks % g == 0 ? g : 1;
  }
  // (g - 1) local peers with `nodes` blocks each (one its own, the rest relayed for its rail);
  // (nodes - 1) rail peers with g blocks each: a product of the two counts.
  static double nodes_times(int a, int b) { return static_cast<double>(a) * static_cast<double>(b); }
  // r's block for local peer q plus r's blocks for every (b, rail of q), b != node of r.
  Bytes to_local(int r, int q) const {
    Bytes sum = alltoall_block(spec_, r, q);
    for (int b = 0; b < nodes_; ++b)
      if (b != r / g_) sum += alltoall_block(spec_, r, b * g_ + q % g_);
    return sum;
  }
  // The blocks of every rank of node a for rank q (on another node).
  Bytes to_rail(int a, int q) const {
    Bytes sum = 0;
    for (int j = 0; j < g_; ++j) sum += alltoall_block(spec_, a * g_ + j, q);
    return sum;
  }
  CollectiveSpec spec_;
  int g_, nodes_;
};

const std::vector<CollKind> kKinds = {CollKind::AllToAll};

// The largest bytes any rank sends or receives inside its node and across nodes.
struct Loads {
  double intra = 0, inter = 0;
};
Loads loads(const CollectiveSpec& s) {
  const int p = s.ranks, g = std::max(1, s.ranks_per_node);
  Loads m;
  if (s.alltoall_bytes.empty()) {  // even blocks: the fullest node inside, the emptiest across
    const auto block = static_cast<double>(alltoall_block(s, 0, std::min(1, p - 1)));
    const int fullest = std::min(g, p), emptiest = p % g == 0 || p < g ? fullest : p % g;
    return {block * (fullest - 1), block * (p - emptiest)};
  }
  for (int r = 0; r < p; ++r) {
    Loads out, in;
    for (int q = 0; q < p; ++q) {
      if (q == r) continue;
      const bool same = r / g == q / g;
      (same ? out.intra : out.inter) += static_cast<double>(alltoall_block(s, r, q));
      (same ? in.intra : in.inter) += static_cast<double>(alltoall_block(s, q, r));
    }
    m.intra = std::max({m.intra, out.intra, in.intra});
    m.inter = std::max({m.inter, out.inter, in.inter});
  }
  return m;
}

Loads pxn_loads(const CollectiveSpec& s) {
  const auto [intra, inter] = PxnLoadProgram::max_loads(s);
  return {intra, inter};
}

// Both algorithms' closed form, from the loads of each level.
double level_cost(const Loads& m, const CostParams& c) { return two_level_cost(m.intra, m.inter, c); }

double cost(const CollectiveSpec& s, const CostParams& c) {
  validate_spec(s);
  if (s.ranks < 2) return 0.0;
  return level_cost(loads(s), c);
}

double pxn_cost(const CollectiveSpec& s, const CostParams& c) {
  validate_spec(s);
  if (s.ranks < 2) return 0.0;
  return level_cost(pxn_loads(s), c);
}

// Explain text of either algorithm: `name`, its loads and its cost.
std::string explain_levels(const std::string& name, const CollectiveSpec& s, const CostParams& c, const Loads& m,
                           double ps) {
  const std::string head =
      fmt::format("{} alltoall (p={}, g={} per node, n={}B{})", name, s.ranks, std::max(1, s.ranks_per_node), s.bytes,
                  s.alltoall_bytes.empty() ? "" : ", uneven sizes: an estimate");
  const char* form = m.inter == 0         ? "a_i + S_i*b_i"
                     : m.intra == 0       ? "a_e + S_e*b_e"
                     : levels(c).separate ? "max(a_i + S_i*b_i, a_e + S_e*b_e)"
                                          : "max(a_i, a_e) + S_i*b_i + S_e*b_e";
  const char* what =
      name == "pxn" ? "inside (own blocks and relayed ones) / across nodes (its rail only)" : "inside / across nodes";
  return explain_text(head, fmt::format("{}, S_i/S_e = largest bytes a rank sends or receives {}", form, what),
                      fmt::format("S_i = {:.0f}B, S_e = {:.0f}B", m.intra, m.inter), ps);
}

std::string explain(const CollectiveSpec& s, const CostParams& c) {
  return explain_levels("concurrent", s, c, s.ranks >= 2 ? loads(s) : Loads{}, cost(s, c));
}

std::string pxn_explain(const CollectiveSpec& s, const CostParams& c) {
  return explain_levels("pxn", s, c, s.ranks >= 2 ? pxn_loads(s) : Loads{}, pxn_cost(s, c));
}

}  // namespace

Algorithm make_concurrent() {
  return basic_algorithm<ConcurrentProgram>(
      "concurrent",
      "all-to-all with every send posted at once (NCCL's grouped send/recv); NVLink and NICs busy together", kKinds,
      cost, explain);
}

Algorithm make_pxn() {
  Algorithm a = basic_algorithm<ConcurrentProgram>(
      "pxn",
      "all-to-all as NCCL's PXN runs it: blocks for another node go over NVLink to the GPU on the "
      "destination's rail first, so NICs carry rail-aligned traffic only",
      kKinds, pxn_cost, pxn_explain);
  a.make_timing = [](const CollectiveSpec& s, const CostParams&) -> std::unique_ptr<StepProgram> {
    return std::make_unique<PxnLoadProgram>(s);
  };
  return a;
}

}  // namespace meshsim::collectives
