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

const std::vector<CollKind> kKinds = {CollKind::AllToAll};

// The largest bytes any rank sends or receives inside its node and across nodes.
struct Loads {
  double intra = 0, inter = 0;
};
Loads loads(const CollectiveSpec& s) {
  const int p = s.ranks, g = std::max(1, s.ranks_per_node);
  Loads m;
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

double cost(const CollectiveSpec& s, const CostParams& c) {
  validate_spec(s);
  if (s.ranks < 2) return 0.0;
  const Levels l = levels(c);
  const Loads m = loads(s);
  if (m.inter == 0) return l.ai + m.intra * l.bi;  // one node
  if (m.intra == 0) return l.ae + m.inter * l.be;  // one rank per node
  if (l.separate) return std::max(l.ai + m.intra * l.bi, l.ae + m.inter * l.be);
  return std::max(l.ai, l.ae) + m.intra * l.bi + m.inter * l.be;
}

std::string explain(const CollectiveSpec& s, const CostParams& c) {
  const Loads m = s.ranks >= 2 ? loads(s) : Loads{};
  const std::string head =
      fmt::format("concurrent alltoall (p={}, g={} per node, n={}B{})", s.ranks, std::max(1, s.ranks_per_node), s.bytes,
                  s.alltoall_bytes.empty() ? "" : ", uneven sizes: an estimate");
  const char* form = m.inter == 0         ? "a_i + S_i*b_i"
                     : m.intra == 0       ? "a_e + S_e*b_e"
                     : levels(c).separate ? "max(a_i + S_i*b_i, a_e + S_e*b_e)"
                                          : "max(a_i, a_e) + S_i*b_i + S_e*b_e";
  return explain_text(head,
                      fmt::format("{}, S_i/S_e = largest bytes a rank sends or receives inside / across nodes", form),
                      fmt::format("S_i = {:.0f}B, S_e = {:.0f}B", m.intra, m.inter), cost(s, c));
}

}  // namespace

Algorithm make_concurrent() {
  return basic_algorithm<ConcurrentProgram>(
      "concurrent",
      "all-to-all with every send posted at once (NCCL's grouped send/recv); NVLink and NICs busy together", kKinds,
      cost, explain);
}

}  // namespace meshsim::collectives
