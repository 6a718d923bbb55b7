// recursive_doubling: all-reduce and all-gather in log2 p exchange steps (p a power of two).
//
// Step s pairs rank r with r XOR 2^s; both send at once, so each link carries one flow.
//
//   p = 4:   step 0: 0<->1  2<->3        step 1: 0<->2  1<->3
//
//   all-reduce: every step exchanges the whole buffer and reduces it (latency-optimal,
//     log2 p messages, but n bytes per step):   log2 p * (alpha + n*beta + n*gamma)
//   all-gather: before step s a rank holds the aligned block of 2^s slices containing its
//     own slice; it sends that block and receives the partner's:
//       0:[0]  1:[1]  2:[2]  3:[3]  --s=0-->  0,1:[0 1]  2,3:[2 3]  --s=1-->  all:[0 1 2 3]
//     cost sum_s (alpha + B_s*beta) with B_s the largest aligned block of 2^s slices
//     (the last one); = log2 p * alpha + (p-1)/p * n*beta when p divides n. Exact under
//     the step rules: the rank p-1 carries the largest block in every step.
//   With the group in node blocks, each step's beta is that of where its pairs are
//   (xor_step_beta: inside a node, or all of a node's ranks crossing its NICs at once).
#include <fmt/format.h>

#include "core/error.h"
#include "schedule/collectives/common.h"

namespace meshsim::collectives {

namespace {

// The aligned block of `count` slices that contains slice `index`, as a byte range.
Range block(Bytes n, int p, Bytes elem, int index, int count) {
  const int lo = index & ~(count - 1);
  return Range{slice(n, p, lo, elem).begin, slice(n, p, lo + count - 1, elem).end};
}

class RdProgram final : public StepProgram {
 public:
  explicit RdProgram(const CollectiveSpec& s)
      : p_(s.ranks),
        steps_(floor_log2(s.ranks)),
        n_(s.bytes),
        elem_(s.element_bytes),
        gather_(s.kind == CollKind::AllGather) {}
  int ranks() const override { return p_; }
  int num_steps(int) const override { return steps_; }
  void step(int rank, int s, Step& out) const override {
    const int mask = 1 << s, peer = rank ^ mask;
    if (!gather_) {
      out.sends.push_back(Transfer{peer, 0, n_, 0});
      out.recvs.push_back(Transfer{peer, 0, n_, 0});
      out.op = RecvOp::Reduce;
      return;
    }
    const Range mine = block(n_, p_, elem_, rank, mask), theirs = block(n_, p_, elem_, peer, mask);
    out.sends.push_back(Transfer{peer, mine.begin, mine.size(), rank & ~(mask - 1)});
    out.recvs.push_back(Transfer{peer, theirs.begin, theirs.size(), peer & ~(mask - 1)});
    out.op = RecvOp::Copy;
  }

 private:
  int p_, steps_;
  Bytes n_, elem_;
  bool gather_;
};

const std::vector<CollKind> kKinds = {CollKind::AllReduce, CollKind::AllGather};

std::optional<std::string> unsupported(const CollectiveSpec& s) {
  if (auto k = kind_reason("recursive_doubling", kKinds, s.kind)) return k;
  return pow2_reason("recursive doubling", s.ranks);
}

double cost(const CollectiveSpec& s, const CostParams& c) {
  validate_spec(s);
  const int steps = floor_log2(s.ranks);
  if (s.kind == CollKind::AllGather) {
    double t = 0;
    for (int i = 0; i < steps; ++i) {
      const Range b = block(s.bytes, s.ranks, s.element_bytes, s.ranks - 1, 1 << i);
      t += c.alpha_ps + static_cast<double>(b.size()) * xor_step_beta(s, c, 1 << i);
    }
    return t;
  }
  const double n = static_cast<double>(s.bytes);
  double t = 0;
  for (int i = 0; i < steps; ++i) t += c.alpha_ps + n * xor_step_beta(s, c, 1 << i) + n * c.gamma_ps;
  return t;
}

std::string explain(const CollectiveSpec& s, const CostParams& c) {
  const int steps = floor_log2(s.ranks);
  const std::string head = fmt::format("recursive_doubling {} (p={}, n={}B)", to_string(s.kind), s.ranks, s.bytes);
  if (s.kind == CollKind::AllGather)
    return explain_text(
        head, "log2 p*alpha + sum_s B_s*beta, B_s = largest block of 2^s slices (= (p-1)/p*n)",
        fmt::format("{}*{} + {}B/{}", steps, fmt_alpha(c.alpha_ps),
                    s.bytes - slice(s.bytes, s.ranks, s.ranks - 1, s.element_bytes).size(), fmt_rate(c.beta_ps)),
        cost(s, c));
  return explain_text(head, "log2 p*(alpha + n*beta + n*gamma)",
                      fmt::format("{}*({} + {}B/{} + {}B/{})", steps, fmt_alpha(c.alpha_ps), s.bytes,
                                  fmt_rate(c.beta_ps), s.bytes, fmt_rate(c.gamma_ps)),
                      cost(s, c));
}

}  // namespace

Algorithm make_recursive_doubling() {
  return basic_algorithm<RdProgram>(
      "recursive_doubling", "pairwise exchanges with r XOR 2^s: log2 p steps, latency-optimal (power-of-two groups)",
      kKinds, cost, explain, unsupported);
}

}  // namespace meshsim::collectives
