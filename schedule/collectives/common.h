// Internal helpers shared by the algorithm files of schedule/collectives/ (not public API).
//
// - one factory per algorithm file (make_ring(), ...), called by AlgorithmRegistry::builtin();
// - integer bit helpers for the tree and power-of-two algorithms;
// - the ring primitive (one reduce-scatter or all-gather step of a ring over any subset
//   of ranks and any byte region), used by `ring` and `hierarchical`;
// - the default chunk rule of the pipelined algorithms;
// - text helpers for Algorithm::explain;
// - basic_algorithm(), the Algorithm entry most algorithm files return as it is.
//
//   RingView v{.size = 4, .pos = r, .next = (r+1)%4, .prev = (r+3)%4, .base = 0, .len = n, .elem = 1};
//   ring_reduce_scatter_step(v, s, out);   // rank r's step s of a 4-rank ring reduce-scatter
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "schedule/collective.h"

namespace meshsim::collectives {

Algorithm make_ring();
Algorithm make_binomial();
Algorithm make_pipeline();
Algorithm make_recursive_doubling();
Algorithm make_rabenseifner();
Algorithm make_double_binary_tree();
Algorithm make_nccl_tree();
Algorithm make_pairwise();
Algorithm make_hierarchical();
Algorithm make_hierarchical_tree();
Algorithm make_multiring();
Algorithm make_nvls();
Algorithm make_nvls_tree();
Algorithm make_nvls_sharp();
Algorithm make_concurrent();
Algorithm make_pxn();
Algorithm make_direct();
Algorithm make_mesh_rings();
// mesh_rings' rings on p ranks (2 <= p <= 16): arc-disjoint Hamiltonian cycles, each from rank 0.
std::vector<std::vector<int>> mesh_ring_orders(int p);

// ---- bits -------------------------------------------------------------------------------
constexpr bool is_pow2(std::int64_t x) { return x > 0 && (x & (x - 1)) == 0; }
constexpr std::int64_t lowbit(std::int64_t x) { return x & -x; }
// floor(log2 x) for x >= 1.
constexpr int floor_log2(std::int64_t x) {
  int r = 0;
  while (x > 1) {
    x >>= 1;
    ++r;
  }
  return r;
}
// ceil(log2 x) for x >= 1 (0 for x = 1); also the number of powers of two below x.
constexpr int ceil_log2(std::int64_t x) { return x <= 1 ? 0 : floor_log2(x - 1) + 1; }
constexpr int mod(int a, int m) { return ((a % m) + m) % m; }

// ---- ring primitive ---------------------------------------------------------------------
// A ring of `size` members over the region [base, base+len) of the buffer, cut into `size`
// slices (multiples of elem). This rank is member `pos`; `next`/`prev` are group ranks.
struct RingView {
  int size = 1, pos = 0, next = 0, prev = 0;
  Bytes base = 0, len = 0, elem = 1;
};
// Step s in [0, size-1): send slice pos-s-1 to next, receive slice pos-s-2 from prev and
// reduce it; afterwards member pos holds slice pos reduced over the ring.
void ring_reduce_scatter_step(const RingView& v, int s, Step& out);
// Step s in [0, size-1): send slice pos-s to next, receive slice pos-s-1 from prev (copy).
void ring_all_gather_step(const RingView& v, int s, Step& out);
// Exact time of one ring phase under the step rules: the largest slice (the last one)
// crosses every one of the size-1 steps, so (size-1) * (alpha + M*beta + M*gamma).
double ring_phase_ps(int size, Bytes len, Bytes elem, double alpha, double beta, double gamma);
// Piece j of `len` bytes cut into k pieces as NCCL cuts a buffer into chunks: k-1 pieces of
// floor(E/k) elements (E = len / elem) and the rest in the last, so the pieces but the last are
// alike byte for byte (a pipeline's middle steps repeat exactly). Needs E >= k.
inline Range equal_piece(Bytes len, int k, int j, Bytes elem) {
  const Bytes q = len / elem / k * elem;
  return j < k - 1 ? Range{j * q, (j + 1) * q} : Range{(k - 1) * q, len};
}
// Size of the largest slice (always the last one with the floor split).
inline Bytes max_slice(Bytes len, int parts, Bytes elem) { return slice(len, parts, parts - 1, elem).size(); }
// Part j of `total` bytes cut in `parts` near-equal parts: floor((j+1)T/parts) - floor(jT/parts),
// without overflow; the parts add up to exactly T (nvls spreads a rank's switch
// traffic over its peers so).
inline Bytes even_share(Bytes total, int parts, int j) {
  const Bytes q = total / parts, r = total % parts;
  auto cut = [&](int i) { return q * i + r * i / parts; };
  return cut(j + 1) - cut(j);
}

// ---- rings stepping together (multiring, mesh_rings) -------------------------------------
// C rings over the same p ranks, each moving its own part of the buffer: rank r's n/p slice is
// cut into C chunks and chunk c travels on ring c, so a reduce-scatter leaves rank r with its
// slice r and an all-gather starts from it. `at(c, pos)` is the rank at position pos (taken mod p)
// of ring c, `position(c, rank)` its inverse. Reduce-scatter step k sends the chunk of position
// pos-k-1 and reduces the one of pos-k-2; all-gather step k sends pos-k and copies in pos-k-1
// (ring.cpp's order, chunks named by their owner rank); all-reduce is the two phases.
inline Range ring_channel_chunk(Bytes n, int p, int channels, int c, int owner, Bytes elem) {
  const Range mine = slice(n, p, owner, elem);
  const Range sub = slice(mine.size(), channels, c, elem);
  return {mine.begin + sub.begin, mine.begin + sub.end};
}
// The largest chunk M: a C-th of the largest n/p slice.
inline Bytes ring_channel_max_chunk(const CollectiveSpec& s, int channels) {
  return max_slice(max_slice(s.bytes, s.ranks, s.element_bytes), channels, s.element_bytes);
}
template <class At, class Position>
void ring_channels_step(CollKind kind, int p, int channels, Bytes n, Bytes elem, int rank, int s, At at,
                        Position position, Step& out) {
  const bool reduce = kind == CollKind::ReduceScatter || (kind == CollKind::AllReduce && s < p - 1);
  const int k = kind == CollKind::AllReduce && s >= p - 1 ? s - (p - 1) : s;
  const int send_back = reduce ? k + 1 : k;
  for (int c = 0; c < channels; ++c) {
    const int pos = position(c, rank);
    const int send_owner = at(c, pos - send_back), recv_owner = at(c, pos - send_back - 1);
    const Range a = ring_channel_chunk(n, p, channels, c, send_owner, elem);
    const Range b = ring_channel_chunk(n, p, channels, c, recv_owner, elem);
    out.sends.push_back(Transfer{at(c, pos + 1), a.begin, a.size(), c * p + send_owner});
    out.recvs.push_back(Transfer{at(c, pos - 1), b.begin, b.size(), c * p + recv_owner});
  }
  out.op = reduce ? RecvOp::Reduce : RecvOp::Copy;
}
// One step's time without its reduction, the largest chunk M and the ring count C.
struct RingChannelsStep {
  double transfer_ps, chunk_bytes;
  int channels;
};
// The collective's time: p-1 steps a phase, each reduce step adding C*M*gamma.
inline double ring_channels_cost(CollKind kind, int ranks, const RingChannelsStep& st, double gamma_ps) {
  const double steps = ranks - 1, reduce = st.channels * st.chunk_bytes * gamma_ps;
  switch (kind) {
    case CollKind::ReduceScatter:
      return steps * (st.transfer_ps + reduce);
    case CollKind::AllGather:
      return steps * st.transfer_ps;
    default:
      return steps * (2 * st.transfer_ps + reduce);
  }
}
// That time as explain writes it.
inline const char* ring_channels_phases(CollKind kind) {
  return kind == CollKind::AllReduce       ? "(p-1)*(2*step + C*M*gamma)"
         : kind == CollKind::ReduceScatter ? "(p-1)*(step + C*M*gamma)"
                                           : "(p-1)*step";
}

// ---- the double binary tree, as a phase of another algorithm (hierarchical_tree) ----------
// The all-reduce among the N = ranks / ranks_per_node ranks of one rail (the ranks with one
// local rank, one per node) of `bytes`, in `chunks` chunks (0: dbt's default).
CollectiveSpec rail_spec(const CollectiveSpec& s, Bytes bytes, int chunks);
// dbt's program and closed form (alpha_ps, beta_ps, gamma_ps of c) for an all-reduce spec.
std::unique_ptr<StepProgram> make_dbt_program(const CollectiveSpec& s);
double dbt_cost_ps(const CollectiveSpec& s, const CostParams& c);
// dbt's grid of slots (double_binary_tree.cpp), for an algorithm that runs it in step with
// other work (nvls_tree): slot t's UP or DOWN half of one rank's transfers, appended to out.
class DbtSlots {
 public:
  virtual ~DbtSlots() = default;
  virtual int slots() const = 0;  // every slot of any rank is below this
  virtual void slot(int rank, int t, bool up, Step& out) const = 0;
};
std::unique_ptr<DbtSlots> make_dbt_slots(const CollectiveSpec& s);
// hierarchical_tree's program (hierarchical.cpp): ring reduce-scatter in the node, dbt per rail,
// ring all-gather; nvls_tree executes it (the same sum, by hand).
std::unique_ptr<StepProgram> make_hierarchical_tree_program(const CollectiveSpec& s);

// ---- exchange steps across nodes ---------------------------------------------------------
// The per-byte time of a step in which every rank r exchanges with r XOR mask at once. The
// group's ranks sit in node blocks of g = s.ranks_per_node. When the aligned blocks of 2*mask
// ranks nest in the node blocks, every pair stays inside its node (intra beta); otherwise all
// g ranks of a node cross at once, each at the inter beta, which derive_cost_params caps at
// 1/g of the node's egress. Without a node structure (g = 1, or CostParams that carry no
// intra/inter split) it is the group's single beta.
inline double xor_step_beta(const CollectiveSpec& s, const CostParams& c, int mask) {
  const int g = s.ranks_per_node;
  if (g <= 1 || (c.intra_beta_ps == 0 && c.inter_beta_ps == 0)) return c.beta_ps;
  return g % (2 * mask) == 0 ? c.intra_beta_ps : c.inter_beta_ps;
}

// The intra- and inter-node alpha and beta of `c` (a level whose alpha and beta are both 0
// falls back to the flat ones), and whether the two leave a GPU by separate links: an
// intra/inter split is known and the GPU's first link is not shared (multiring, concurrent).
struct Levels {
  double ai, bi, ae, be;
  bool separate;
};
inline Levels levels(const CostParams& c) {
  const bool intra = c.intra_alpha_ps != 0 || c.intra_beta_ps != 0,
             inter = c.inter_alpha_ps != 0 || c.inter_beta_ps != 0;
  return {intra ? c.intra_alpha_ps : c.alpha_ps, intra ? c.intra_beta_ps : c.beta_ps,
          inter ? c.inter_alpha_ps : c.alpha_ps, inter ? c.inter_beta_ps : c.beta_ps,
          (intra || inter) && !c.shared_uplink};
}

// One level of a step's traffic on a GPU: its alpha and the time of its bytes, and whether it
// carries anything (a level that does not costs nothing, not even its alpha).
struct LevelLoad {
  double alpha_ps = 0, bytes_ps = 0;
  bool active = false;
};
// A step whose traffic leaves each GPU at two levels at once: the busier level when they leave
// by separate links, their sum behind the larger alpha when they share one.
inline double two_level_step_ps(const LevelLoad& a, const LevelLoad& b, bool separate) {
  if (!a.active) return b.active ? b.alpha_ps + b.bytes_ps : 0.0;
  if (!b.active) return a.alpha_ps + a.bytes_ps;
  if (separate) return std::max(a.alpha_ps + a.bytes_ps, b.alpha_ps + b.bytes_ps);
  return std::max(a.alpha_ps, b.alpha_ps) + a.bytes_ps + b.bytes_ps;
}

// Time of traffic that leaves each GPU at two levels at once, `intra` bytes to peers of its
// node and `inter` bytes to other nodes (the largest per GPU); with no traffic it is one
// intra-node alpha.
inline double two_level_cost(double intra, double inter, const CostParams& c) {
  const Levels l = levels(c);
  return two_level_step_ps({l.ai, intra * l.bi, intra != 0 || inter == 0}, {l.ae, inter * l.be, inter != 0},
                           l.separate);
}

// Where each block of an all-to-all sits (the buffer rules of collective.h): send[r][q] is
// the offset of rank r's block for q in r's send buffer (destination order), recv[r][q] the
// offset of q's block for r in r's receive buffer (source order). p x p, like the sizes.
struct AllToAllOffsets {
  std::vector<std::vector<Bytes>> send, recv;
};
AllToAllOffsets alltoall_offsets(const CollectiveSpec& s);

// ---- chunking ---------------------------------------------------------------------------
// Default chunk count of the pipelined algorithms: one chunk per `target` bytes, at least 1,
// at most 64, and never more chunks than elements. Depends on the spec only.
int default_chunks(Bytes bytes, Bytes elem, Bytes target);

// ---- explain text -----------------------------------------------------------------------
std::string fmt_alpha(double alpha_ps);    // "5.000us"
std::string fmt_rate(double per_byte_ps);  // beta or gamma as "25.00GB/s" ("inf" when 0)
std::string fmt_result(double ps);         // "123.456us"
// "<name> <kind>: <symbolic>\n  = <numeric>\n  = <result>"
std::string explain_text(const std::string& head, const std::string& symbolic, const std::string& numeric, double ps);
// Reason for a kind the algorithm does not implement, or nullopt if it does.
std::optional<std::string> kind_reason(const std::string& name, const std::vector<CollKind>& kinds, CollKind k);
// Reason a group of s.ranks cannot be cut into whole nodes of s.ranks_per_node, or nullopt.
std::optional<std::string> node_blocks_reason(const std::string& name, const CollectiveSpec& s);
// Reason a group of `ranks` is not a power of two, or nullopt.
std::optional<std::string> pow2_reason(const std::string& name, int ranks);

// ---- the Algorithm entry ----------------------------------------------------------------
// The fields every algorithm file fills the same way: `unsupported` rejects the kinds not in
// `kinds` (kind_reason) and `make` builds a `Program` from the spec. An algorithm with more
// rules (unavailable, make_timing, only_protocol) sets them afterwards:
//   Algorithm a = basic_algorithm<RingProgram>("ring", "ring r -> r+1 ...", kKinds, cost, explain);
// The same with the program built by `make` (a program class without a spec constructor).
inline Algorithm basic_algorithm(std::string name, std::string summary, std::vector<CollKind> kinds,
                                 std::function<std::unique_ptr<StepProgram>(const CollectiveSpec&)> make,
                                 std::function<double(const CollectiveSpec&, const CostParams&)> cost_ps,
                                 std::function<std::string(const CollectiveSpec&, const CostParams&)> explain) {
  Algorithm a;
  a.name = std::move(name);
  a.summary = std::move(summary);
  a.kinds = std::move(kinds);
  a.unsupported = [name = a.name, kinds = a.kinds](const CollectiveSpec& s) {
    return kind_reason(name, kinds, s.kind);
  };
  a.make = std::move(make);
  a.cost_ps = std::move(cost_ps);
  a.explain = std::move(explain);
  return a;
}
// `unsupported`, when given, is the algorithm's own rule in place of kind_reason's.
template <class Program>
Algorithm basic_algorithm(std::string name, std::string summary, std::vector<CollKind> kinds,
                          std::function<double(const CollectiveSpec&, const CostParams&)> cost_ps,
                          std::function<std::string(const CollectiveSpec&, const CostParams&)> explain,
                          std::function<std::optional<std::string>(const CollectiveSpec&)> unsupported = {}) {
  Algorithm a = basic_algorithm(
      std::move(name), std::move(summary), std::move(kinds),
      [](const CollectiveSpec& s) -> std::unique_ptr<StepProgram> { return std::make_unique<Program>(s); },
      std::move(cost_ps), std::move(explain));
  if (unsupported) a.unsupported = std::move(unsupported);
  return a;
}

}  // namespace meshsim::collectives
