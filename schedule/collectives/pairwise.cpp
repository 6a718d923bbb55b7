// pairwise: all-to-all in p-1 steps; at step s (distance d = s+1) rank r sends its block
// for rank r+d and receives the block of rank r-d, so each port carries one flow per step.
//
//   p = 4 (send block r->q written rq):
//     step 0 (d=1): 0->1 1->2 2->3 3->0      blocks 01 12 23 30
//     step 1 (d=2): 0->2 1->3 2->0 3->1      blocks 02 13 20 31
//     step 2 (d=3): 0->3 1->0 2->1 3->2      blocks 03 10 21 32
//   the block rr stays local (the executor copies it before step 0).
//
// Sizes: spec.alltoall_bytes[src][dst] (a p x p matrix of non-negative multiples of
// element_bytes), or even: every block floor(e/p) elements of e = bytes/element_bytes,
// with n = bytes the total each rank sends (its own block included).
// Send buffer of rank r: its blocks in destination order; receive buffer: in source order.
//
// Cost:
//   even    (p-1)*(alpha + (n/p)*beta) = (p-1)*alpha + (p-1)/p*n*beta, exact (all ranks in step)
//   uneven  sum_{d=1}^{p-1} (alpha + max_r bytes(r -> r+d) * beta): the LOCKSTEP ESTIMATE,
//           as if every rank waited for the largest block of each step. Uneven ranks drift
//           apart in a real run, which can make it shorter (or, when a fast rank's next
//           message lands on a port still busy, slightly different).
#include <fmt/format.h>

#include <algorithm>

#include "schedule/collectives/common.h"

namespace meshsim::collectives {
namespace {

class PairwiseProgram final : public StepProgram {
 public:
  explicit PairwiseProgram(const CollectiveSpec& s) : p_(s.ranks), even_(s.alltoall_bytes.empty()) {
    if (even_) {
      block_ = alltoall_block(s, 0, 0);
      return;
    }
    // Prefix sums: the input is already p x p, so these tables are the size of the input.
    sizes_ = s.alltoall_bytes;
    off_ = alltoall_offsets(s);
  }
  int ranks() const override { return p_; }
  int num_steps(int) const override { return p_ - 1; }
  void step(int rank, int s, Step& out) const override {
    const int dst = (rank + s + 1) % p_, src = mod(rank - s - 1, p_);
    if (even_) {
      out.sends.push_back(Transfer{dst, dst * block_, block_, dst});
      out.recvs.push_back(Transfer{src, src * block_, block_, src});
    } else {
      out.sends.push_back(Transfer{dst, off_.send[rank][dst], sizes_[rank][dst], dst});
      out.recvs.push_back(Transfer{src, off_.recv[rank][src], sizes_[src][rank], src});
    }
    out.op = RecvOp::Copy;
  }

 private:
  int p_;
  bool even_;
  Bytes block_ = 0;
  std::vector<std::vector<Bytes>> sizes_;
  AllToAllOffsets off_;
};

const std::vector<CollKind> kKinds = {CollKind::AllToAll};

double cost(const CollectiveSpec& s, const CostParams& c) {
  validate_spec(s);
  const int p = s.ranks;
  if (s.alltoall_bytes.empty())
    return (p - 1) * (c.alpha_ps + static_cast<double>(alltoall_block(s, 0, 1 % p)) * c.beta_ps);
  double t = 0;
  for (int d = 1; d < p; ++d) {
    Bytes m = 0;
    for (int r = 0; r < p; ++r) m = std::max(m, s.alltoall_bytes[r][(r + d) % p]);
    t += c.alpha_ps + static_cast<double>(m) * c.beta_ps;
  }
  return t;
}

std::string explain(const CollectiveSpec& s, const CostParams& c) {
  const int p = s.ranks;
  const std::string head =
      fmt::format("pairwise alltoall (p={}, n={}B{})", p, s.bytes, s.alltoall_bytes.empty() ? "" : ", uneven sizes");
  if (s.alltoall_bytes.empty())
    return explain_text(
        head, "(p-1)*(alpha + (n/p)*beta)",
        fmt::format("{}*({} + {}B/{})", p - 1, fmt_alpha(c.alpha_ps), alltoall_block(s, 0, 0), fmt_rate(c.beta_ps)),
        cost(s, c));
  Bytes sum = 0;
  for (int d = 1; d < p; ++d) {
    Bytes m = 0;
    for (int r = 0; r < p; ++r) m = std::max(m, s.alltoall_bytes[r][(r + d) % p]);
    sum += m;
  }
  return explain_text(head, "sum_d (alpha + max_r bytes(r->r+d)*beta)  (lockstep estimate)",
                      fmt::format("{}*{} + {}B/{}", p - 1, fmt_alpha(c.alpha_ps), sum, fmt_rate(c.beta_ps)),
                      cost(s, c));
}

}  // namespace

Algorithm make_pairwise() {
  return basic_algorithm<PairwiseProgram>(
      "pairwise", "all-to-all in p-1 steps, step d sends to r+d and receives from r-d (uneven sizes allowed)", kKinds,
      cost, explain);
}

}  // namespace meshsim::collectives
