// binomial: broadcast and reduce over a binomial tree rooted at spec.root, whole buffer
// per message, ceil(log2 p) message times on the critical path.
//
// Relative rank v = (r - root) mod p.
//
// Broadcast (MPICH's tree): v receives from v - lowbit(v), then sends to v + mask for
// every power of two mask below min(lowbit(v), p - v), the FARTHEST child first, so the
// deepest subtree starts earliest. The root counts as lowbit = infinity.
//
//   p = 8:   step 0: 0->4                  0
//            step 1: 0->2, 4->6          / | |
//            step 2: 0->1, 2->3,        4  2 1
//                    4->5, 6->7        /|  |
//                                     6 5  3
//                                     |
//                                     7
//   p = 4:   0->2, then 0->1 and 2->3.
//
// Reduce (the same tree run backwards in time, built so that no parent ever has two
// children's messages in flight at once). With w = (root - r) mod p and x = w (x = p for
// the root), x's parent is min(x + lowbit(x), p) and x's children are x - 1, x - 2, ...,
// x - lowbit(x)/2: every subtree below the root is COMPLETE (size lowbit(x)), the root's
// children have subtrees of the sizes of the binary digits of p-1. A rank reduces its
// children smallest subtree first (one child per step) and then sends to its parent.
// A child whose subtree has 2^i ranks is ready after i rounds, exactly when its parent
// expects it, so each downlink carries one flow at a time. For a power-of-two p this is
// exactly the broadcast tree with every edge reversed.
//
//   p = 4 (w labels):   step 0: 1->2, 3->0(root)     step 1: 2->0(root)
//
// (MPICH's own reduce tree, the broadcast tree reversed, truncates the last subtree when
// p is not a power of two; that child then sends while its sibling's message is still in
// flight and the two share the parent's downlink, which the closed form below ignores.)
//
// Cost (exact under the step rules, one flow per link at any time). A sender starts its next
// send as soon as the last has drained (n*beta), the receiver has it alpha later; so the i-th
// child a rank sends to (i = 0, 1, ...) has the buffer (i+1)*n*beta + alpha after its parent.
//   broadcast  the latest arrival, bcast_ps() below; ceil(log2 p) * (alpha + n*beta) when p is
//              a power of two (the chain of first children), less where the tree is cut
//              (p = 3: 2*n*beta + alpha, the root's two sends back to back)
//   reduce     ceil(log2 p) * (alpha + n*beta + n*gamma) (every step waits for a receive)
#include <fmt/format.h>

#include <algorithm>

#include "schedule/collectives/common.h"

namespace meshsim::collectives {
namespace {

class BinomialBcast final : public StepProgram {
 public:
  explicit BinomialBcast(const CollectiveSpec& s) : p_(s.ranks), root_(s.root), n_(s.bytes) {}
  int ranks() const override { return p_; }
  int num_steps(int rank) const override {
    const int v = rel(rank);
    return (v == 0 ? 0 : 1) + ceil_log2(limit(v));
  }
  void step(int rank, int s, Step& out) const override {
    const int v = rel(rank);
    if (v != 0) {
      if (s == 0) {
        out.recvs.push_back(Transfer{abs(v - static_cast<int>(lowbit(v))), 0, n_, 0});
        return;
      }
      --s;
    }
    const int mask = 1 << (ceil_log2(limit(v)) - 1 - s);  // farthest child first
    out.sends.push_back(Transfer{abs(v + mask), 0, n_, 0});
  }

 private:
  int rel(int r) const { return mod(r - root_, p_); }
  int abs(int v) const { return (v + root_) % p_; }
  // Children are v + mask for the powers of two mask below this limit.
  int limit(int v) const { return v == 0 ? p_ : std::min(static_cast<int>(lowbit(v)), p_ - v); }
  int p_, root_;
  Bytes n_;
};

class BinomialReduce final : public StepProgram {
 public:
  explicit BinomialReduce(const CollectiveSpec& s) : p_(s.ranks), root_(s.root), n_(s.bytes) {}
  int ranks() const override { return p_; }
  int num_steps(int rank) const override {
    const int x = label(rank);
    if (x == p_) return popcount(p_ - 1);
    return floor_log2(lowbit(x)) + 1;
  }
  void step(int rank, int s, Step& out) const override {
    const int x = label(rank);
    if (x == p_) {  // root: children are p-1 with its lowest s set bits cleared
      int y = p_ - 1;
      for (int i = 0; i < s; ++i) y -= static_cast<int>(lowbit(y));
      out.recvs.push_back(Transfer{rank_of(y), 0, n_, 0});
      out.op = RecvOp::Reduce;
      return;
    }
    const int nchildren = floor_log2(lowbit(x));
    if (s < nchildren) {
      out.recvs.push_back(Transfer{rank_of(x - (1 << s)), 0, n_, 0});
      out.op = RecvOp::Reduce;
    } else {
      out.sends.push_back(Transfer{rank_of(std::min(x + static_cast<int>(lowbit(x)), p_)), 0, n_, 0});
    }
  }

 private:
  static int popcount(int v) {
    int c = 0;
    for (; v != 0; v &= v - 1) ++c;
    return c;
  }
  int label(int r) const {
    const int w = mod(root_ - r, p_);
    return w == 0 ? p_ : w;
  }
  int rank_of(int x) const { return mod(root_ - (x % p_), p_); }
  int p_, root_;
  Bytes n_;
};

const std::vector<CollKind> kKinds = {CollKind::Broadcast, CollKind::Reduce};

// The latest arrival in a broadcast subtree of `size` ranks (a rank and the range it sends
// to), after the subtree's top has the buffer. Its children get masks 2^(c-1), ..., 1
// (c = ceil(log2 size)), in that order; the first child's subtree has size - 2^(c-1) ranks,
// the i-th's (i >= 1) a complete 2^(c-1-i), whose latest arrival is (c-1-i)*(t + alpha).
double bcast_subtree_ps(int size, double t, double alpha) {
  if (size <= 1) return 0.0;
  const int c = ceil_log2(size);
  double worst = t + alpha + bcast_subtree_ps(size - (1 << (c - 1)), t, alpha);
  if (c >= 2) worst = std::max(worst, c * t + (c - 1) * alpha);  // i = 1: 2t + alpha + (c-2)(t + alpha)
  return worst;
}

double cost(const CollectiveSpec& s, const CostParams& c) {
  validate_spec(s);
  const double n = static_cast<double>(s.bytes);
  if (s.kind == CollKind::Reduce) return ceil_log2(s.ranks) * (c.alpha_ps + n * c.beta_ps + n * c.gamma_ps);
  return bcast_subtree_ps(s.ranks, n * c.beta_ps, c.alpha_ps);
}

std::string explain(const CollectiveSpec& s, const CostParams& c) {
  const int d = ceil_log2(s.ranks);
  const std::string head = fmt::format("binomial {} (p={}, n={}B)", to_string(s.kind), s.ranks, s.bytes);
  if (s.kind == CollKind::Reduce)
    return explain_text(head, "ceil(log2 p)*(alpha + n*beta + n*gamma)",
                        fmt::format("{}*({} + {}B/{} + {}B/{})", d, fmt_alpha(c.alpha_ps), s.bytes, fmt_rate(c.beta_ps),
                                    s.bytes, fmt_rate(c.gamma_ps)),
                        cost(s, c));
  if ((s.ranks & (s.ranks - 1)) == 0)
    return explain_text(head, "ceil(log2 p)*(alpha + n*beta)",
                        fmt::format("{}*({} + {}B/{})", d, fmt_alpha(c.alpha_ps), s.bytes, fmt_rate(c.beta_ps)),
                        cost(s, c));
  return explain_text(head, "the latest arrival; a rank's i-th child has the buffer (i+1)*n*beta + alpha after it",
                      fmt::format("n*beta = {}B/{}, alpha = {}", s.bytes, fmt_rate(c.beta_ps), fmt_alpha(c.alpha_ps)),
                      cost(s, c));
}

}  // namespace

Algorithm make_binomial() {
  Algorithm a = basic_algorithm<BinomialBcast>(
      "binomial", "binomial tree from/to the root: ceil(log2 p) whole-buffer messages, latency-optimal", kKinds, cost,
      explain);
  a.make = [](const CollectiveSpec& s) -> std::unique_ptr<StepProgram> {
    if (s.kind == CollKind::Reduce) return std::make_unique<BinomialReduce>(s);
    return std::make_unique<BinomialBcast>(s);
  };
  return a;
}

}  // namespace meshsim::collectives
