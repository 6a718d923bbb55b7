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
// Cost (exact under the step rules; c_j = alpha + s_j*beta, g_j = s_j*gamma):
//   broadcast: every hop-move of the critical path can be taken by the largest chunk, so
//     sum_{j<k-1} c_j + (p-1)*c_max  =  (k-1)*alpha + (n - s_max)*beta + (p-1)*(alpha + s_max*beta)
//     which is (p-1 + k-1)*(alpha + (n/k)*beta) when k divides n (docs/math.md section 1).
//   reduce: a Reduce step ends gamma*(received bytes) after it would otherwise end, so a
//     middle rank's step costs c + g; the root only receives and the far end only sends.
//     The closed form is the longest path through that grid, evaluated in O(k) by
//     pipeline_reduce_ps() below; for p >= 3 and k | n it is
//       (p-1 + k-1)*(alpha + (n/k)*beta + (n/k)*gamma)
//     and for p = 2 (no middle rank: the root's reduce of chunk j overlaps the transfer of
//     chunk j+1) it is k*(alpha + (n/k)*beta) + (n/k)*gamma when gamma <= beta.
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

double bcast_ps(int p, int k, Bytes n, Bytes elem, const CostParams& c) {
  if (p <= 1) return 0.0;
  const double smax = static_cast<double>(max_slice(n, k, elem));
  return (k - 1) * c.alpha_ps + (static_cast<double>(n) - smax) * c.beta_ps + (p - 1) * (c.alpha_ps + smax * c.beta_ps);
}

// Longest path of the reduce pipeline. Rows: the far end (sends only), the middle ranks
// (send chunk j-1 while reducing chunk j), the root (reduces only). A = start of the far
// end's step j; B = end of chain rank 1's step j; C = the same after the p-3 further
// hops between middle ranks (taken at the chunk where they cost most); D = root's step j.
double pipeline_reduce_ps(int p, int k, Bytes n, Bytes elem, const CostParams& cp) {
  if (p <= 1) return 0.0;
  constexpr double kNone = -1e300;
  double a = 0, b = kNone, cc = kNone, d = kNone, prev_c = 0;
  for (int j = 0; j < k; ++j) {
    const double s = static_cast<double>(slice(n, k, j, elem).size());
    const double c = cp.alpha_ps + s * cp.beta_ps, g = s * cp.gamma_ps;
    if (j > 0) a += prev_c;
    if (p == 2) {
      d = std::max(a + c + g, d + g);
    } else {
      b = std::max(a + c + g, b + prev_c + g);
      cc = std::max(b + (p - 3) * (c + g), cc + prev_c + g);
      d = std::max(cc + c + g, d + g);
    }
    prev_c = c;
  }
  return d;
}

double cost(const CollectiveSpec& s, const CostParams& c) {
  validate_spec(s);
  const int k = chunks_of(s);
  if (s.kind == CollKind::Reduce) return pipeline_reduce_ps(s.ranks, k, s.bytes, s.element_bytes, c);
  return bcast_ps(s.ranks, k, s.bytes, s.element_bytes, c);
}

std::string explain(const CollectiveSpec& s, const CostParams& c) {
  const int k = chunks_of(s), p = s.ranks;
  const Bytes sm = max_slice(s.bytes, k, s.element_bytes);
  const std::string head = fmt::format("pipeline {} (p={}, n={}B, k={} chunks{})", to_string(s.kind), p, s.bytes, k,
                                       s.chunks > 0 ? "" : ", default ceil(n/512KiB) in [1,64]");
  if (s.kind == CollKind::Reduce)
    return explain_text(head,
                        "(p-1 + k-1)*(alpha + s*beta + s*gamma), s = ceil(n/k) (p >= 3; exact longest path "
                        "for p = 2 or uneven chunks)",
                        fmt::format("({} + {})*({} + {}B/{} + {}B/{})", p - 1, k - 1, fmt_alpha(c.alpha_ps), sm,
                                    fmt_rate(c.beta_ps), sm, fmt_rate(c.gamma_ps)),
                        cost(s, c));
  return explain_text(head, "(k-1)*alpha + (n-s)*beta + (p-1)*(alpha + s*beta), s = ceil(n/k)",
                      fmt::format("{}*{} + {}B/{} + {}*({} + {}B/{})", k - 1, fmt_alpha(c.alpha_ps), s.bytes - sm,
                                  fmt_rate(c.beta_ps), p - 1, fmt_alpha(c.alpha_ps), sm, fmt_rate(c.beta_ps)),
                      cost(s, c));
}

}  // namespace

Algorithm make_pipeline() {
  return basic_algorithm<PipelineProgram>(
      "pipeline", "chunked chain from/to the root: (p-1 + k-1) chunk times, bandwidth-optimal for large n", kKinds,
      cost, explain);
}

}  // namespace meshsim::collectives
