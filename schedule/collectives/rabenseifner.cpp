// rabenseifner: all-reduce = recursive-halving reduce-scatter + recursive-doubling
// all-gather (p a power of two). Latency 2 log2 p, bandwidth as good as the ring.
//
// Reduce-scatter by halving: at step s (mask = p / 2^(s+1)) rank r pairs with r XOR mask.
// Each pair splits its current block of 2*mask slices in two; r keeps the half holding
// its own slice, sends the other half and reduces the half it receives.
//
//   p = 4, slices [0 1 2 3]:
//     step 0 (mask 2): 0<->2  1<->3   r0,r1 keep [0 1], r2,r3 keep [2 3]   (n/2 each way)
//     step 1 (mask 1): 0<->1  2<->3   rank r keeps reduced [r]             (n/4 each way)
//   then the recursive-doubling all-gather (mask 1, 2) puts the blocks back together:
//     step 2: 0<->1  2<->3  exchange [r]          step 3: 0<->2  1<->3  exchange [r r^1]
//
// Cost (exact under the step rules; B(q) = largest aligned block of p/q slices = the last
// one, i.e. slice(n, q, q-1)):
//   sum_{s=0}^{L-1} (alpha + B(2^(s+1))*(beta + gamma))  +  sum_{s=0}^{L-1} (alpha + B(p/2^s)*beta)
//   = 2 log2 p*alpha + 2(p-1)/p*n*beta + (p-1)/p*n*gamma   when p divides n.
// Rank p-1 holds the largest block in every step of both halves, so that path is critical.
// With the group in node blocks, each step's beta is that of where its pairs are
// (xor_step_beta: inside a node, or all of a node's ranks crossing its NICs at once).
#include <fmt/format.h>

#include "core/error.h"
#include "schedule/collectives/common.h"

namespace meshsim::collectives {
namespace {

// Slices [lo, lo+count) as a byte range.
Range slices(Bytes n, int p, Bytes elem, int lo, int count) {
  return Range{slice(n, p, lo, elem).begin, slice(n, p, lo + count - 1, elem).end};
}

class RabenseifnerProgram final : public StepProgram {
 public:
  explicit RabenseifnerProgram(const CollectiveSpec& s)
      : p_(s.ranks), l_(floor_log2(s.ranks)), n_(s.bytes), elem_(s.element_bytes) {}
  int ranks() const override { return p_; }
  int num_steps(int) const override { return 2 * l_; }
  void step(int rank, int s, Step& out) const override {
    if (s < l_) {  // recursive halving
      const int mask = p_ >> (s + 1), peer = rank ^ mask;
      const int keep = rank & ~(mask - 1), give = peer & ~(mask - 1);
      const Range k = slices(n_, p_, elem_, keep, mask), g = slices(n_, p_, elem_, give, mask);
      out.sends.push_back(Transfer{peer, g.begin, g.size(), give});
      out.recvs.push_back(Transfer{peer, k.begin, k.size(), keep});
      out.op = RecvOp::Reduce;
    } else {  // recursive doubling
      const int mask = 1 << (s - l_), peer = rank ^ mask;
      const int mine = rank & ~(mask - 1), theirs = peer & ~(mask - 1);
      const Range a = slices(n_, p_, elem_, mine, mask), b = slices(n_, p_, elem_, theirs, mask);
      out.sends.push_back(Transfer{peer, a.begin, a.size(), mine});
      out.recvs.push_back(Transfer{peer, b.begin, b.size(), theirs});
      out.op = RecvOp::Copy;
    }
  }

 private:
  int p_, l_;
  Bytes n_, elem_;
};

const std::vector<CollKind> kKinds = {CollKind::AllReduce};

std::optional<std::string> unsupported(const CollectiveSpec& s) {
  if (auto k = kind_reason("rabenseifner", kKinds, s.kind)) return k;
  return pow2_reason("rabenseifner", s.ranks);
}

double cost(const CollectiveSpec& s, const CostParams& c) {
  validate_spec(s);
  const int p = s.ranks, l = floor_log2(p);
  double t = 0;
  for (int i = 0; i < l; ++i) {
    const double half = static_cast<double>(max_slice(s.bytes, 2 << i, s.element_bytes));  // halving step i
    const double dbl = static_cast<double>(max_slice(s.bytes, p >> i, s.element_bytes));   // doubling step i
    t += c.alpha_ps + half * (xor_step_beta(s, c, p >> (i + 1)) + c.gamma_ps);
    t += c.alpha_ps + dbl * xor_step_beta(s, c, 1 << i);
  }
  return t;
}

std::string explain(const CollectiveSpec& s, const CostParams& c) {
  const int p = s.ranks, l = floor_log2(p);
  const Bytes moved = s.bytes - max_slice(s.bytes, p, s.element_bytes);  // (p-1)/p*n
  return explain_text(fmt::format("rabenseifner allreduce (p={}, n={}B)", p, s.bytes),
                      "2 log2 p*alpha + 2(p-1)/p*n*beta + (p-1)/p*n*gamma",
                      fmt::format("2*{}*{} + 2*{}B/{} + {}B/{}", l, fmt_alpha(c.alpha_ps), moved, fmt_rate(c.beta_ps),
                                  moved, fmt_rate(c.gamma_ps)),
                      cost(s, c));
}

}  // namespace

Algorithm make_rabenseifner() {
  return basic_algorithm<RabenseifnerProgram>(
      "rabenseifner", "recursive-halving reduce-scatter + recursive-doubling all-gather (power-of-two groups)", kKinds,
      cost, explain, unsupported);
}

}  // namespace meshsim::collectives
