// nvls_tree: all-reduce across nodes whose GPUs hang off a switch that reduces (NVLink SHARP on
// each node's NVSwitch), as NCCL's NVLS-Tree runs it: inside every node the switch reduces and
// multicasts (as `nvls` does on one node), and between the nodes each local rank l carries
// slice l of the buffer on dbt's two trees over the N nodes, through its own NIC. NCCL runs the
// three parts at once on a stream of chunks; so does the timing program below.
//
// Executed (make): hierarchical_tree's program (ring reduce-scatter inside the node, dbt per
// local rank across the nodes, ring all-gather), the same result by hand where no switch helps.
//
// Timed (make_timing): k chunks of every rail's slice, cut as NCCL cuts a buffer into equal chunks
// with a shorter (here: longer) last one: each tree's piece of chunk j < k-1 holds q elements,
// q = floor(E / 2k) for E the elements of the smallest rail, and chunk k-1 the rest of the rail
// (in tree B's piece). So the middle steps repeat byte for byte and the flow runner can skip
// their periods once the pipeline has settled. One step per slot t,
// every rank the same number of steps, every message sent and received in the same step:
//   - chunk t's reduce-scatter through the switch (t < k),
//   - dbt's UP half of its slot t-1 and its DOWN half of slot t-2, over the heads of each rail
//     (dbt over N with the rail's slice, k chunks; the DOWN half one slot later, so that a root
//     forwards a chunk the step after it has reduced it),
//   - chunk j = t - 2H - 1's multicast back through the switch (0 <= j < k), after its last
//     DOWN receive (dbt slot j + 2H - 2).
// So k + 2H + 1 steps, H = floor(log2 N) dbt's height. The switch traffic is timed by its link
// loads as nvls's: a GPU's link to the switch carries c (its whole chunk, to be reduced) plus
// c/g (its reduced slice, to be multicast) each way, c = n/k, at the switch's reduce efficiency;
// as rank-to-rank sends of equal size to each of the node's other ranks (the larger of the two
// directions in the steps where only one half runs).
//
// Closed form (lockstep estimate): the sum over the k + 2H + 1 steps of each step's own load,
//   T = sum_t max(a_s + S_t c b_s,  a_e + L_t (c/g) b_e)
// (the sum of the byte terms and the larger alpha when a GPU's switch and NIC traffic share its
// first link; a level with no traffic in a step costs nothing there). S_t = 1 + 1/g while both
// chunk t's reduce-scatter and chunk t-2H-1's multicast run, 1 where one does; L_t counts the
// dbt halves in the step, UP (steps 1 .. k+H-1) and DOWN (steps H+1 .. k+2H-1), each 1 beyond two
// nodes (a rank sends one rail half-chunk per tree up, an inner rank both halves of its tree
// down) and 1/2 on two (each NIC one half per tree). In the middle steps that is
// max(a_s + c(1 + 1/g) b_s, a_e + L (c/g) b_e), L = 2 (1 on two nodes); the fill and drain steps
// carry one half of it. With one rank per node no switch term. The chunk count minimises
// (k + 2H + 1) middle steps:
// k = sqrt(B (2H + 1) / A) for A the step's alpha and B its byte terms at k = 1,
// within [1, 1024] and the elements of a rail's half. Reductions are charged no gamma: the
// switch reduces inside the node, and the trees' reductions run fused with their loads.
//
// nvls_sharp: the same with SHARP on the InfiniBand switches between the nodes (NCCL's NVLS
// algorithm across nodes, which needs CollNet): instead of dbt's trees, local rank l streams its
// reduced slice of each chunk (c/g) into the fabric's reduction tree and gets the sum back, so
// each NIC carries c/g each way and each chunk spends one step there: k + 2 steps, each at its
// own load as above (the network in steps 1 .. k), about
//   T = 2 (a_s + c b_s) + k * max(a_s + c(1 + 1/g) b_s,  a_n + (c/g) b_n)
// with a_n the longest route between two ranks of a rail and b_n the per-byte time of that
// stream (CostParams::net_switch_*: the route's slowest link at the switches' reduce
// efficiency). Timed as one ring step per chunk over each rail: rank (node a, l) sends c/g to
// (node a+1, l). Its NIC carries c/g each way, as SHARP's, and every switch subtree holding a
// contiguous block of the group's nodes sees exactly one c/g stream leave and one enter, as the
// reduction tree's one stream per subtree; a route's latency is the neighbour's, not the tree
// root's (the runtime's NET hop latency, 14 us under Simple, is the larger on the presets).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "core/error.h"
#include "schedule/collectives/common.h"

namespace meshsim::collectives {
namespace {

const std::vector<CollKind> kKinds = {CollKind::AllReduce};
constexpr int kMaxChunks = 1024;

// How the nodes combine their slices: dbt's two trees over each rail (nvls_tree) or the
// fabric's switches (nvls_sharp).
enum class Across { Trees, Sharp };
const char* name_of(Across a) { return a == Across::Trees ? "nvls_tree" : "nvls_sharp"; }

// At least two nodes: on one, NCCL runs NVLS (here `nvls`, whose protocol carries the switch's
// round trip). One rank per node (g = 1) runs, as dbt (or SHARP) across the nodes with nothing
// for a switch to do (and, for nvls_tree, no switch to make it available to `auto`).
std::optional<std::string> unsupported(Across across, const CollectiveSpec& s) {
  const char* name = name_of(across);
  if (auto k = kind_reason(name, kKinds, s.kind)) return k;
  if (auto b = node_blocks_reason(name, s)) return b;
  if (s.ranks / s.ranks_per_node < 2)
    return fmt::format("{} needs at least 2 nodes (got {} ranks, {} per node); on one node use nvls", name, s.ranks,
                       s.ranks_per_node);
  return std::nullopt;
}

std::optional<std::string> unavailable(Across across, const CollectiveSpec& s, const CostParams& c) {
  if (across == Across::Sharp && c.net_switch_beta_ps <= 0)
    return std::string(
        "nvls_sharp needs SHARP between the nodes: every switch on the routes between the group's nodes must reduce "
        "in-network (dgx-h100's, dgx-a100's and fat-tree's sharp_efficiency, or reduce_efficiency on a topology "
        "file's switches)");
  if (c.switch_beta_ps > 0 || (across == Across::Sharp && s.ranks_per_node == 1)) return std::nullopt;
  return fmt::format(
      "{} needs each node's GPUs on a switch that reduces in-network (NVLink SHARP: dgx-h100's "
      "nvls_efficiency, or reduce_efficiency on a topology file's switch)",
      name_of(across));
}

struct Shape {
  Across across;
  int g, nodes, h;
  int flows;  // L: rail slices per NIC per step
  int depth;  // steps from a chunk's reduce-scatter to its multicast: 2H + 1 (trees), 2 (SHARP)
};
Shape shape_of(Across across, const CollectiveSpec& s) {
  const int g = s.ranks_per_node, nodes = s.ranks / g, h = floor_log2(nodes);
  if (across == Across::Sharp) return {across, g, nodes, h, 1, 2};
  return {across, g, nodes, h, nodes == 2 ? 1 : 2, 2 * h + 1};
}

// The two levels of a step for chunk size c (whole-buffer bytes per chunk): each one's alpha
// and byte term (the switch's are 0 with one rank per node).
struct StepTerms {
  double switch_alpha, inter_alpha, intra_bytes_ps, inter_bytes_ps;
  bool separate;
  double alpha() const { return std::max(switch_alpha, inter_alpha); }
};
// The network level between the nodes: dbt's trees over the NICs, or SHARP's streams into the
// fabric; its alpha and per-byte time.
struct NetLevel {
  double alpha_ps, beta_ps;
};
NetLevel net_level(const Shape& sh, const CostParams& c) {
  if (sh.across == Across::Sharp) return {c.net_switch_alpha_ps, c.net_switch_beta_ps};
  const Levels lv = levels(c);
  return {lv.ae, lv.be};
}
StepTerms step_terms(const Shape& sh, const CostParams& c, double chunk) {
  const double intra = sh.g > 1 ? chunk * (1.0 + 1.0 / sh.g) * c.switch_beta_ps : 0.0;
  const NetLevel net = net_level(sh, c);
  return {sh.g > 1 ? c.switch_alpha_ps : 0.0, net.alpha_ps, intra, sh.flows * chunk / sh.g * net.beta_ps,
          levels(c).separate};
}
int chunks_of(const Shape& sh, const CollectiveSpec& s, const CostParams& c) {
  if (s.chunks > 0) return s.chunks;
  const StepTerms t = step_terms(sh, c, static_cast<double>(s.bytes));
  const double bytes_ps =
      t.separate ? std::max(t.intra_bytes_ps, t.inter_bytes_ps) : t.intra_bytes_ps + t.inter_bytes_ps;
  const double depth = sh.depth;
  double k = t.alpha() > 0 ? std::sqrt(bytes_ps * depth / t.alpha()) : kMaxChunks;
  // Never more chunks than elements in the smallest half of a rail's slice.
  const Bytes half = slice(slice(s.bytes, sh.g, 0, s.element_bytes).size(), 2, 0, s.element_bytes).size();
  const Bytes most = std::max<Bytes>(1, std::min<Bytes>(kMaxChunks, half / s.element_bytes));
  return static_cast<int>(std::clamp(std::round(k), 1.0, static_cast<double>(most)));
}

class NvlsTreeTiming final : public StepProgram {
 public:
  // scale: the switch traffic at the links' rate (1 / its reduce efficiency); net_scale: SHARP's.
  NvlsTreeTiming(const CollectiveSpec& s, const Shape& sh, int k, double scale, double net_scale)
      : p_(s.ranks), sh_(sh), k_(k), scale_(scale), net_scale_(net_scale) {
    // Equal pieces: every rail's chunk j < k-1 carries 2q elements (q per tree), q from the
    // smallest rail (chunks_of keeps k within its elements); each rail's last chunk carries the
    // rest of its slice. So the middle steps are alike byte for byte (same_shape_until).
    Bytes smallest = s.bytes;
    for (int l = 0; l < sh_.g; ++l) {
      rail_bytes_.push_back(slice(s.bytes, sh_.g, l, s.element_bytes).size());
      smallest = std::min(smallest, rail_bytes_.back());
    }
    piece_ = std::max<Bytes>(1, smallest / s.element_bytes / (2 * static_cast<Bytes>(k))) * s.element_bytes;
    for (int l = 0; l < sh_.g; ++l)
      if (sh_.across == Across::Trees) rails_.push_back(make_dbt_slots(rail_spec(s, rail_bytes_[l], k)));
    for (int j = 0; j < k; ++j) {
      double sum = 0;
      for (int l = 0; l < sh_.g; ++l) sum += static_cast<double>(rail_chunk(l, j));
      chunk_bytes_.push_back(sum);
    }
  }
  int ranks() const override { return p_; }
  int num_steps(int) const override { return k_ + sh_.depth; }
  // Steps depth .. k-2 carry equal chunks on every part (the switch's chunk t and chunk
  // t - depth; the trees' chunks from t - 2H - 1 to t - 1; SHARP's t - 1).
  int same_shape_until(int, int t) const override { return t >= sh_.depth && t < k_ - 1 ? k_ - 1 : t + 1; }
  void step(int rank, int t, Step& out) const override {
    const int node = rank / sh_.g, l = rank % sh_.g;
    // Through the switch: chunk t's reduce-scatter, chunk t - depth's multicast.
    const int back = t - sh_.depth;
    const double rs = t < k_ ? chunk_bytes_[static_cast<std::size_t>(t)] : 0;
    const double ag = back >= 0 && back < k_ ? chunk_bytes_[static_cast<std::size_t>(back)] : 0;
    const double up = rs + ag / sh_.g, down = rs / sh_.g + ag;
    // The larger direction, spread evenly over the node's other ranks.
    const auto each = sh_.g > 1 ? static_cast<Bytes>(std::llround(std::max(up, down) * scale_ / (sh_.g - 1))) : 0;
    if (each > 0)
      for (int i = 0; i < sh_.g; ++i) {
        if (i == l) continue;
        const int q = node * sh_.g + i;
        out.sends.push_back(Transfer{q, 0, each, t});
        out.recvs.push_back(Transfer{q, 0, each, t});
      }
    if (sh_.across == Across::Sharp) {
      // Across the nodes: chunk t - 1's slice into the fabric and back, as one ring step.
      const int j = t - 1;
      if (j >= 0 && j < k_) {
        const auto bytes = static_cast<Bytes>(std::llround(static_cast<double>(rail_chunk(l, j)) * net_scale_));
        if (bytes > 0) {
          out.sends.push_back(Transfer{mod(node + 1, sh_.nodes) * sh_.g + l, 0, bytes, j});
          out.recvs.push_back(Transfer{mod(node - 1, sh_.nodes) * sh_.g + l, 0, bytes, j});
        }
      }
      out.op = RecvOp::Copy;  // the switches reduce
      return;
    }
    // Across the nodes: rail l's trees, UP of slot t-1 and DOWN of slot t-2, each piece
    // re-sized to the equal pieces above (a tree's transfer is labelled tree * k + chunk).
    const DbtSlots& rail = *rails_[static_cast<std::size_t>(l)];
    const std::size_t sends = out.sends.size(), recvs = out.recvs.size();
    if (t >= 1 && t - 1 < rail.slots()) rail.slot(node, t - 1, true, out);
    if (t >= 2 && t - 2 < rail.slots()) rail.slot(node, t - 2, false, out);
    auto place = [&](Transfer& x) {
      x.peer = x.peer * sh_.g + l;
      x.bytes = tree_piece(l, x.chunk / k_, x.chunk % k_);
    };
    for (std::size_t i = sends; i < out.sends.size(); ++i) place(out.sends[i]);
    for (std::size_t i = recvs; i < out.recvs.size(); ++i) place(out.recvs[i]);
    out.op = RecvOp::Copy;  // no gamma: see the top of the file
  }

 private:
  // Rail l's chunk j (both trees' pieces), and tree `tree`'s piece of it: q elements each,
  // the rest of the rail's slice in tree B's piece of the last chunk.
  Bytes rail_chunk(int l, int j) const {
    return j < k_ - 1 ? 2 * piece_ : rail_bytes_[static_cast<std::size_t>(l)] - 2 * piece_ * (k_ - 1);
  }
  Bytes tree_piece(int l, int tree, int j) const {
    return tree == 0 || j < k_ - 1 ? piece_ : rail_chunk(l, j) - piece_;
  }

  int p_;
  Shape sh_;
  int k_;
  double scale_, net_scale_;
  Bytes piece_ = 0;                               // elements of a tree's piece of a chunk, in bytes
  std::vector<Bytes> rail_bytes_;                 // per rail: its slice of the buffer
  std::vector<double> chunk_bytes_;               // per chunk, of the whole buffer
  std::vector<std::unique_ptr<DbtSlots>> rails_;  // trees only
};

void check(Across across, const CollectiveSpec& s, const CostParams& c) {
  validate_spec(s);
  if (auto why = unsupported(across, s)) throw Error(*why);
  if (auto why = unavailable(across, s, c)) throw Error(*why);
}

// The lockstep estimate step by step: step t's switch traffic (chunk t's reduce-scatter while
// t < k, chunk t - depth's multicast from t = depth on) and network traffic (trees: dbt's UP
// half in steps 1 .. k+H-1 and its DOWN half in steps H+1 .. k+2H-1, each one rail half-chunk
// per tree on the busiest NIC, so c/g per half beyond two nodes and c/(2g) on two; SHARP: c/g
// in steps 1 .. k), each at its own load. The pipeline's fill and drain steps carry one of
// the two halves, where a middle step carries both.
double cost(Across across, const CollectiveSpec& s, const CostParams& c) {
  check(across, s, c);
  const Shape sh = shape_of(across, s);
  const int k = chunks_of(sh, s, c);
  const double chunk = static_cast<double>(s.bytes) / k;
  const bool separate = levels(c).separate;
  const NetLevel net = net_level(sh, c);
  const double half = sh.nodes == 2 ? 0.5 : 1.0;  // a tree half's share of c/g on the busiest NIC
  auto in = [](int t, int lo, int hi) { return t >= lo && t < hi ? 1.0 : 0.0; };
  double total = 0;
  for (int t = 0; t < k + sh.depth; ++t) {
    const double rs = in(t, 0, k), mc = in(t, sh.depth, k + sh.depth);
    const double units =
        across == Across::Sharp ? in(t, 1, k + 1) : half * (in(t, 1, k + sh.h) + in(t, sh.h + 1, k + 2 * sh.h));
    const double sw = sh.g > 1 ? chunk * std::max(rs + mc / sh.g, rs / sh.g + mc) * c.switch_beta_ps : 0.0;
    const double ex = units * chunk / sh.g * net.beta_ps;
    total += two_level_step_ps({c.switch_alpha_ps, sw, sw > 0}, {net.alpha_ps, ex, units > 0}, separate);
  }
  return total;
}

std::string explain(Across across, const CollectiveSpec& s, const CostParams& c) {
  const std::string head =
      fmt::format("{} allreduce (p={}, g={} per node, n={}B)", name_of(across), s.ranks, s.ranks_per_node, s.bytes);
  if (auto why = unsupported(across, s)) return fmt::format("{}: {}", head, *why);
  if (auto why = unavailable(across, s, c)) return fmt::format("{}: not available here: {}", head, *why);
  const Shape sh = shape_of(across, s);
  const int k = chunks_of(sh, s, c);
  const double chunk = static_cast<double>(s.bytes) / k;
  if (across == Across::Sharp)
    return explain_text(
        fmt::format("{}, N={} nodes, k={} chunks", head, sh.nodes, k),
        "sum over the k + 2 steps of max(a_s + S_t*c*b_s, a_n + (c/g)*b_n), c = n/k, S_t = 1 + 1/g while a "
        "chunk's reduce-scatter and another's multicast both run, else 1 (no switch term with g = 1; the network "
        "in steps 1 .. k); SHARP between the nodes; k = sqrt(2B/A); lockstep estimate",
        fmt::format("{} steps, the middle ones max({} + {:.0f}B/{}, {} + {:.0f}B/{})", k + sh.depth,
                    fmt_alpha(c.switch_alpha_ps), chunk * (1.0 + 1.0 / sh.g), fmt_rate(c.switch_beta_ps),
                    fmt_alpha(c.net_switch_alpha_ps), chunk / sh.g, fmt_rate(c.net_switch_beta_ps)),
        cost(across, s, c));
  const Levels lv = levels(c);
  return explain_text(
      fmt::format("{}, N={} nodes, k={} chunks, H={}", head, sh.nodes, k, sh.h),
      "sum over the k + 2H + 1 steps of max(a_s + S_t*c*b_s, a_e + L_t*(c/g)*b_e), c = n/k; in the middle steps "
      "S = 1 + 1/g and L = 2 (1 on 2 nodes), the fill and drain steps carry one of the reduce-scatter and "
      "multicast, one of dbt's UP and DOWN halves; k = sqrt(B(2H+1)/A); lockstep estimate",
      fmt::format("{} steps, the middle ones max({} + {:.0f}B/{}, {} + {}*{:.0f}B/{})", k + sh.depth,
                  fmt_alpha(c.switch_alpha_ps), chunk * (1.0 + 1.0 / sh.g), fmt_rate(c.switch_beta_ps),
                  fmt_alpha(lv.ae), sh.flows, chunk / sh.g, fmt_rate(lv.be)),
      cost(across, s, c));
}

// NCCL runs NVLS-Tree under Simple with its own latencies (NVLS's 25 us once, 20.9 us per
// network hop). NVLS over CollNet has no calibration of its own in NCCL's table that we use:
// plain Simple (the Ring rows: 3.4 us per NVLink step, 14 us per network step).
Protocol runtime_protocol(Across across) {
  return across == Across::Trees ? Protocol::NvlsTreeSimple : Protocol::Simple;
}

std::unique_ptr<StepProgram> make_timing(Across across, const CollectiveSpec& s, const CostParams& c) {
  check(across, s, c);
  const Shape sh = shape_of(across, s);
  // Chunks as the closed form picks them under the protocol the runtime uses.
  const CostParams run = c.protocols ? with_protocol(c, runtime_protocol(across), s) : c;
  const double link_beta = c.intra_beta_ps > 0 ? c.intra_beta_ps : c.beta_ps;
  const double scale = link_beta > 0 && c.switch_beta_ps > 0 ? c.switch_beta_ps / link_beta : 1.0;
  const double net_scale = c.net_switch_efficiency > 0 ? 1.0 / c.net_switch_efficiency : 1.0;
  return std::make_unique<NvlsTreeTiming>(s, sh, chunks_of(sh, s, run), scale, net_scale);
}

Algorithm make_variant(Across across, const std::string& summary) {
  Algorithm a = basic_algorithm(
      name_of(across), summary, kKinds, make_hierarchical_tree_program,
      [across](const CollectiveSpec& s, const CostParams& c) { return cost(across, s, c); },
      [across](const CollectiveSpec& s, const CostParams& c) { return explain(across, s, c); });
  // executed by hand, as hierarchical_tree
  a.unsupported = [across](const CollectiveSpec& s) { return unsupported(across, s); };
  a.unavailable = [across](const CollectiveSpec& s, const CostParams& c) { return unavailable(across, s, c); };
  a.make_timing = [across](const CollectiveSpec& s, const CostParams& c) { return make_timing(across, s, c); };
  a.only_protocol = runtime_protocol(across);
  return a;
}

}  // namespace

Algorithm make_nvls_tree() {
  return make_variant(Across::Trees,
                      "NCCL's NVLS-Tree: reduce and multicast in each node's switch (NVLink SHARP), double binary "
                      "trees across the nodes per NIC, pipelined in chunks");
}

Algorithm make_nvls_sharp() {
  return make_variant(Across::Sharp,
                      "NCCL's NVLS across nodes (CollNet): reduce and multicast in each node's switch (NVLink SHARP) "
                      "and in the InfiniBand switches between the nodes (SHARP), pipelined in chunks");
}

}  // namespace meshsim::collectives
