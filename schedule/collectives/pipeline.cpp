// pipeline: chunked, pipelined chain broadcast and reduce.
//
// The ranks form a chain that starts at the root: position i = (r - root) mod p. The
// buffer is cut into k chunks (slice(n, k, j)); while one chunk moves down the chain the
// next follows one hop behind, so for large n every link is busy almost all the time.
//
//   broadcast, p = 4, k = 3 (chunk j shown as j; one hop per step):
//
//     step:     0      1      2      3      4
//     r0->r1    0      1      2
//     r1->r2           0      1      2
//     r2->r3                  0      1      2        (p-1 + k-1 = 5 message times)
//
//   A middle rank's step j (1 <= j < k) sends chunk j-1 downstream while receiving chunk j
//   from upstream; it has k+1 steps (receive 0; k-1 send+receive; send k-1). The root has k
//   sending steps, the last rank k receiving steps.
//
//   reduce: the same chain run towards the root: position p-1 sends first, every middle
//   rank reduces chunk j from upstream while forwarding its reduced chunk j-1 to i-1.
//
// Chunks: k = spec.chunks, or by default one chunk per 512 KiB: clamp(ceil(n/512KiB), 1, 64),
// never more chunks than elements. The chunks are the slices of n in k parts; the last
// chunk is the largest, s_max = ceil(n/k) elements.
//
// Cost (exact under the step rules, which let a rank start its next step as soon as its
// sends have drained: the hop latency alpha is paid by the receiver only). With t_j =
// s_j*beta the drain time of chunk j and g_j = s_j*gamma its reduction (reduce only):
//   the far end (chain index 0) only sends: its step j starts at F_j = t_0 + ... + t_{j-1};
//   a middle rank's step j ends at max(its step j-1's end + t_{j-1}, chunk j's arrival) + g_j;
//   chunk j arrives one drain and one alpha after the step that sends it began.
// The longest path through that grid, in O(k) by pipeline_ps() below (the middle ranks are
// alike, so the p-3 hops between them are taken at the chunk where a hop costs most):
//   broadcast (k | n):          (k-1)*(n/k)*beta + (p-1)*(alpha + (n/k)*beta)
//   reduce (p >= 3, k | n):     (k-1)*(n/k)*(beta + gamma) + (p-1)*(alpha + (n/k)*(beta + gamma))
// so alpha is paid once per hop, not once per chunk and hop: while chunk j waits out its
// hop's latency, chunk j+1 is already draining behind it (docs/math.md section 1).
#include <fmt/format.h>

#include <algorithm>

#include "schedule/collectives/common.h"

namespace meshsim::collectives {
namespace {

constexpr Bytes kChunkTarget = 512 * 1024;

int chunks_of(const CollectiveSpec& s) {
  return s.chunks > 0 ? s.chunks : default_chunks(s.bytes, s.element_bytes, kChunkTarget);
}

class PipelineProgram final : public StepProgram {
 public:
  explicit PipelineProgram(const CollectiveSpec& s)
      : p_(s.ranks),
        root_(s.root),
        k_(chunks_of(s)),
        n_(s.bytes),
        elem_(s.element_bytes),
        reduce_(s.kind == CollKind::Reduce) {}
  int ranks() const override { return p_; }
  int num_steps(int rank) const override {
    if (p_ == 1) return 0;
    const int c = chain(rank);
    return (c == 0 || c == p_ - 1) ? k_ : k_ + 1;
  }
  // Chain index c: 0 is the end that only sends, p-1 the end that only receives.
  void step(int rank, int s, Step& out) const override {
    const int c = chain(rank);
    const bool sends = c<p_ - 1, recvs = c> 0;
    const int recv_chunk = c == 0 ? -1 : s;     // the first chain rank never receives
    const int send_chunk = c == 0 ? s : s - 1;  // others forward what they got a step earlier
    if (sends && send_chunk >= 0 && send_chunk < k_) add(out.sends, member(c + 1), send_chunk);
    if (recvs && recv_chunk >= 0 && recv_chunk < k_) add(out.recvs, member(c - 1), recv_chunk);
    out.op = reduce_ ? RecvOp::Reduce : RecvOp::Copy;
  }

 private:
  void add(std::vector<Transfer>& v, int peer, int j) const {
    const Range r = slice(n_, k_, j, elem_);
    v.push_back(Transfer{peer, r.begin, r.size(), j});
  }
  // Broadcast: chain index = position from the root. Reduce: the chain runs towards the root.
  int chain(int rank) const {
    const int pos = mod(rank - root_, p_);
    return reduce_ ? p_ - 1 - pos : pos;
  }
  int member(int c) const {
    const int pos = reduce_ ? p_ - 1 - c : c;
    return (pos + root_) % p_;
  }
  int p_, root_, k_;
  Bytes n_, elem_;
  bool reduce_;
};

const std::vector<CollKind> kKinds = {CollKind::Broadcast, CollKind::Reduce};

// Longest path of the pipeline (the rules above): b = end of chain rank 1's step j (rank 1 is
// the first middle rank), mid = the end of chain rank p-2's step j (after the p-3 hops between
// middle ranks), last = the end of the receiving end's step j. gamma = 0 for a broadcast.
double pipeline_ps(int p, int k, Bytes n, Bytes elem, const CostParams& cp, double gamma_ps) {
  if (p <= 1) return 0.0;
  constexpr double kNone = -1e300;
  double far = 0, b = kNone, mid = kNone, last = kNone, prev_t = 0;
  for (int j = 0; j < k; ++j) {
    const double s = static_cast<double>(slice(n, k, j, elem).size());
    const double t = s * cp.beta_ps, g = s * gamma_ps, hop = t + cp.alpha_ps;
    if (j > 0) far += prev_t;
    if (p == 2) {
      last = std::max(last, far + hop) + g;
    } else {
      b = std::max(b + prev_t, far + hop) + g;
      mid = std::max(b + (p - 3) * (hop + g), mid + prev_t + g);
      last = std::max(last, mid + hop) + g;
    }
    prev_t = t;
  }
  return last;
}

double cost(const CollectiveSpec& s, const CostParams& c) {
  validate_spec(s);
  const int k = chunks_of(s);
  return pipeline_ps(s.ranks, k, s.bytes, s.element_bytes, c, s.kind == CollKind::Reduce ? c.gamma_ps : 0.0);
}

std::string explain(const CollectiveSpec& s, const CostParams& c) {
  const int k = chunks_of(s), p = s.ranks;
  const Bytes sm = max_slice(s.bytes, k, s.element_bytes);
  const std::string head = fmt::format("pipeline {} (p={}, n={}B, k={} chunks{})", to_string(s.kind), p, s.bytes, k,
                                       s.chunks > 0 ? "" : ", default ceil(n/512KiB) in [1,64]");
  if (s.kind == CollKind::Reduce)
    return explain_text(head,
                        "(k-1)*s*(beta + gamma) + (p-1)*(alpha + s*beta + s*gamma), s = ceil(n/k) (p >= 3; "
                        "exact longest path for p = 2 or uneven chunks)",
                        fmt::format("{}*{}B*(1/{} + 1/{}) + {}*({} + {}B/{} + {}B/{})", k - 1, sm, fmt_rate(c.beta_ps),
                                    fmt_rate(c.gamma_ps), p - 1, fmt_alpha(c.alpha_ps), sm, fmt_rate(c.beta_ps), sm,
                                    fmt_rate(c.gamma_ps)),
                        cost(s, c));
  return explain_text(head, "(n-s)*beta + (p-1)*(alpha + s*beta), s = ceil(n/k)",
                      fmt::format("{}B/{} + {}*({} + {}B/{})", s.bytes - sm, fmt_rate(c.beta_ps), p - 1,
                                  fmt_alpha(c.alpha_ps), sm, fmt_rate(c.beta_ps)),
                      cost(s, c));
}

}  // namespace

Algorithm make_pipeline() {
  return basic_algorithm<PipelineProgram>(
      "pipeline",
      "chunked chain from/to the root: (p-1 + k-1) chunk times, one latency per hop, bandwidth-optimal for large n",
      kKinds, cost, explain);
}

}  // namespace meshsim::collectives
