// dbt: NCCL-style double binary tree all-reduce; and nccl_tree, NCCL's Tree with channels
// and chains inside the nodes (bottom of the file). Both are sets of trees run on one grid
// of slots (TreeSetProgram): the rules below hold for any such set.
//
// The buffer is split in two halves; half T (T = A, B) is reduced up and broadcast down
// its own binary tree, pipelined in k chunks. The two trees have the same shape and are
// complementary: every rank is an inner node in at most one of them, so over both trees a
// rank has at most 2 children and 2 parents, and no rank is a bottleneck for both halves.
//
// Tree shape (positions y = 1..p, an in-order tree read off the binary digits): y's height
// is log2 lowbit(y), odd y are leaves, the root is the largest power of two <= p, inner
// node y has children y - lowbit/2 and y + lowbit/2 (the right one moved down to
// y + lowbit/4, ... when it would pass p). Tree A puts rank y-1 at position y. Tree B
// mirrors it (rank p-y) when p is even and shifts it (rank y mod p) when p is odd, so
// A's inner ranks are odd and B's inner ranks are even. Height H = floor(log2 p).
//
//   p = 8:   tree A (ranks)        tree B (ranks, mirrored)
//                  7                      0
//                  3                      4
//                1   5                  6   2
//               0 2 4 6                7 5 3 1
//
//   p = 3:   A: 0 <- 1 -> 2 (root 1)   B: 1 <- 2 -> 0 (root 2)   rank 0 is a leaf in both
//   p = 2:   A: 0 -> 1 (root 1)        B: 1 -> 0 (root 0)        (an exchange per step)
//
// Schedule: global slots t = 0, 1, ...; each slot has an UP step (reduce toward the root)
// and then a DOWN step (broadcast away from it); a rank skips steps where it has nothing
// to do. In tree T a rank at depth d
//   UP   sends chunk j to its parent at slot j + H - d, reduces chunk j from its children
//        at slot j + H - d - 1 (one slot before it forwards it);
//   DOWN receives chunk j from its parent at slot j + H + d - 2 and sends it to its
//        children at slot j + H + d - 1.
// So the root reduces chunk j in the UP step of slot j + H - 1 and starts its broadcast in
// the DOWN step of that same slot. Every message is sent and received in the same (slot,
// UP/DOWN) step of both ends, so the program is deadlock-free. UP steps are Reduce steps,
// DOWN steps Copy steps (a step never mixes the two).
//
// Per-step port load in the steady state: an UP step sends one chunk per tree in which the
// rank is not the root (2) and reduces one per child (<= 2); a DOWN step receives one
// chunk per tree (2) and sends one per child (<= 2). So every busy port carries L = 2
// flows (L = 1 for p = 2, where each step is a plain exchange).
//
// Chunks: k = spec.chunks, or by default one chunk per 512 KiB of each half:
// clamp(ceil(n/1MiB), 1, 64), never more chunks than elements of a half. A tree's part is cut
// as NCCL cuts a buffer: k-1 equal pieces and the rest in the last (equal_piece), so the steps
// of the pipeline's middle slots come in two shapes, UP and DOWN, in turn (shape_period 2).
//
// Closed form (lockstep estimate): UP steps run in slots 0 .. k+H-2 and DOWN steps in
// slots H-1 .. k+2H-3, so a critical path has k+H-1 of each; with every step taking the
// time of its most loaded port, c = ceil(n/(2k)) (a middle piece, rounded up; the last piece
// carries the remainder too, fewer than k elements more):
//   T = (k + H - 1) * (2*alpha + 2*L*c*beta + R*c*gamma),   L = R = 2 (1 when p = 2)
//     ~ 2k*alpha + 2n*beta + n*gamma for k >> H.
// Assumptions: all ranks move in lockstep and every step on the critical path carries the
// steady-state load. This is exact for p = 2 and p = 3 (every step has the same load on
// all ranks) and an upper estimate otherwise: while the pipeline fills and drains some
// ports carry one flow and finish early; with many ranks the drift between depths also
// lets a third flow onto some ports (measured on the flow model: p = 1000, large n, the
// simulation is up to 25% slower than this estimate; see docs/collectives.md).
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "schedule/collectives/common.h"

namespace meshsim::collectives {
namespace {

constexpr Bytes kChunkTarget = 1024 * 1024;  // 512 KiB of each half

int chunks_of(const CollectiveSpec& s) {
  if (s.chunks > 0) return s.chunks;
  const Bytes half = slice(s.bytes, 2, 1, s.element_bytes).size();
  const Bytes k = std::min<Bytes>(default_chunks(s.bytes, s.element_bytes, kChunkTarget),
                                  std::max<Bytes>(half / s.element_bytes, 1));
  return static_cast<int>(k);
}

// One tree of a tree set: the region of the buffer it carries and, per rank, its parent,
// children (at most 3: two in a binary tree plus the next rank of a node's chain) and depth
// (the root's is 0).
struct TreeNode {
  int parent = -1;
  std::array<int, 3> child{-1, -1, -1};
  int depth = 0;
};
struct TreePart {
  Range part;
  std::vector<TreeNode> nodes;  // one per rank
};

void add_child(std::vector<TreeNode>& nodes, int parent, int child) {
  TreeNode& pn = nodes[static_cast<std::size_t>(parent)];
  for (int& c : pn.child)
    if (c < 0) {
      c = child;
      nodes[static_cast<std::size_t>(child)].parent = parent;
      return;
    }
  MESHSIM_ASSERT(false);
}

// Several trees over the same ranks, each reducing its region up to its root and
// broadcasting it back down, pipelined in k chunks on one grid of slots (the rules at the top
// of this file, with H the deepest depth of any tree). A rank's steps are its (slot, UP) and
// (slot, DOWN) steps of every tree, merged in (slot, UP before DOWN) order; both ends of
// every message take it in the same (slot, phase) step, so the program cannot deadlock.
class TreeSetProgram final : public StepProgram, public DbtSlots {
 public:
  TreeSetProgram(int p, int k, Bytes elem, std::vector<TreePart> trees)
      : p_(p), k_(k), elem_(elem), trees_(std::move(trees)) {
    if (p_ < 2) return;
    for (const TreePart& t : trees_)
      for (const TreeNode& nd : t.nodes) h_ = std::max(h_, nd.depth);
    slots_.resize(static_cast<std::size_t>(p_));
    for (int r = 0; r < p_; ++r) {
      std::array<std::vector<std::pair<int, int>>, 2> iv;  // [lo, hi) slot intervals of UP (0), DOWN (1)
      auto add = [&](int phase, int lo, int hi) {
        if (hi > std::max(lo, 0)) iv[static_cast<std::size_t>(phase)].emplace_back(std::max(lo, 0), hi);
      };
      for (const TreePart& tp : trees_) {
        const TreeNode& nd = tp.nodes[static_cast<std::size_t>(r)];
        const int d = nd.depth;
        const bool inner = nd.child[0] >= 0, has_parent = nd.parent >= 0;
        // UP: inner ranks reduce in [H-d-1, H-d-1+k) and forward in [H-d, H-d+k).
        if (inner) add(0, h_ - d - 1, h_ - d - 1 + k_);
        if (has_parent) add(0, h_ - d, h_ - d + k_);
        // DOWN: receive in [H+d-2, H+d-2+k), forward in [H+d-1, H+d-1+k).
        if (has_parent) add(1, h_ + d - 2, h_ + d - 2 + k_);
        if (inner) add(1, h_ + d - 1, h_ + d - 1 + k_);
      }
      for (int phase = 0; phase < 2; ++phase) {
        auto& v = iv[static_cast<std::size_t>(phase)];
        std::sort(v.begin(), v.end());
        auto& merged = slots_[static_cast<std::size_t>(r)][static_cast<std::size_t>(phase)];
        for (const auto& [lo, hi] : v)
          if (!merged.empty() && lo <= merged.back().second)
            merged.back().second = std::max(merged.back().second, hi);
          else
            merged.emplace_back(lo, hi);
      }
    }
  }
  int ranks() const override { return p_; }
  int num_steps(int rank) const override { return p_ < 2 ? 0 : steps_before(rank, kFar); }
  void step(int rank, int s, Step& out) const override {
    // The smallest slot t with more than s steps in slots [0, t]; UP comes before DOWN in it.
    int lo = 0, hi = k_ + 2 * h_ + 1;
    while (lo < hi) {
      const int mid = lo + (hi - lo) / 2;
      if (steps_before(rank, mid + 1) > s)
        hi = mid;
      else
        lo = mid + 1;
    }
    const int t = lo;
    slot(rank, t, has(rank, 0, t) && steps_before(rank, t) == s, out);
  }
  // In slots 2H .. k-2 every rank has an UP and a DOWN step, and every piece they move is a
  // middle one (chunks t-2H+1 .. t of its trees): the steps alternate between two shapes.
  int same_shape_until(int rank, int s) const override {
    if (p_ < 2 || 2 * h_ >= k_ - 1) return s + 1;
    const int lo = steps_before(rank, 2 * h_), hi = steps_before(rank, k_ - 1);
    return s >= lo && s < hi ? hi : s + 1;
  }
  int shape_period() const override { return 2; }
  int slots() const override { return p_ < 2 ? 0 : k_ + 2 * h_; }
  void slot(int rank, int t, bool is_up, Step& out) const override {
    for (std::size_t tr = 0; tr < trees_.size(); ++tr) {
      const TreeNode& nd = trees_[tr].nodes[static_cast<std::size_t>(rank)];
      const int d = nd.depth;
      if (is_up) {
        if (nd.parent >= 0) add(out.sends, tr, nd.parent, t - (h_ - d));
        for (int c : nd.child)
          if (c >= 0) add(out.recvs, tr, c, t - (h_ - d - 1));
      } else {
        if (nd.parent >= 0) add(out.recvs, tr, nd.parent, t - (h_ + d - 2));
        for (int c : nd.child)
          if (c >= 0) add(out.sends, tr, c, t - (h_ + d - 1));
      }
    }
    out.op = is_up ? RecvOp::Reduce : RecvOp::Copy;
  }

 private:
  void add(std::vector<Transfer>& v, std::size_t tree, int peer, int j) const {
    if (j < 0 || j >= k_) return;
    const Range& part = trees_[tree].part;
    const Range r = equal_piece(part.size(), k_, j, elem_);
    v.push_back(Transfer{peer, part.begin + r.begin, r.size(), static_cast<int>(tree) * k_ + j});
  }

  static constexpr int kFar = 1 << 30;
  using Intervals = std::vector<std::pair<int, int>>;  // merged, sorted [lo, hi) slots

  // The rank's steps in slots [0, t): its UP and DOWN slots below t.
  int steps_before(int rank, int t) const {
    int c = 0;
    for (const Intervals& v : slots_[static_cast<std::size_t>(rank)])
      for (const auto& [lo, hi] : v) c += std::clamp(t - lo, 0, hi - lo);
    return c;
  }
  bool has(int rank, int phase, int t) const {
    for (const auto& [lo, hi] : slots_[static_cast<std::size_t>(rank)][static_cast<std::size_t>(phase)])
      if (t >= lo && t < hi) return true;
    return false;
  }

  int p_, k_, h_ = 0;
  Bytes elem_;
  std::vector<TreePart> trees_;
  std::vector<std::array<Intervals, 2>> slots_;  // per rank: UP and DOWN slots
};

// The two complementary binary trees over p members (the shape at the top of this file):
// [0] tree A (member y-1 at position y), [1] tree B (mirrored for even p, shifted for odd).
std::array<std::vector<TreeNode>, 2> dbt_trees(int p) {
  std::array<std::vector<TreeNode>, 2> trees;
  if (p < 1) return trees;
  auto member_at = [p](int tree, int y) {
    const int x = y - 1;
    if (tree == 0) return x;
    return p % 2 == 0 ? p - 1 - x : (x + 1) % p;
  };
  // Parent of every position, then depths top-down (a parent's lowbit exceeds its child's).
  std::vector<int> parent(static_cast<std::size_t>(p + 1), 0), depth(static_cast<std::size_t>(p + 1), 0);
  int root = 1;
  while (root * 2 <= p) root *= 2;
  for (int y = 1; y <= p; ++y) {
    if (y == root) continue;
    const int h = static_cast<int>(lowbit(y));
    const bool left_child = ((y / h) % 4) == 1;  // y = a*2h + h with a even: parent y + h
    int up = left_child ? y + h : y - h;
    if (up > p) up = y - h;  // the natural parent is past p: hang under y - h instead
    parent[static_cast<std::size_t>(y)] = up;
  }
  for (int h = root; h >= 1; h /= 2)
    for (int y = h; y <= p; y += 2 * h)
      depth[static_cast<std::size_t>(y)] = y == root ? 0 : depth[static_cast<std::size_t>(parent[y])] + 1;
  for (int t = 0; t < 2; ++t) {
    trees[t].assign(static_cast<std::size_t>(p), TreeNode{});
    for (int y = 1; y <= p; ++y) trees[t][static_cast<std::size_t>(member_at(t, y))].depth = depth[y];
    for (int y = 1; y <= p; ++y)
      if (y != root) add_child(trees[t], member_at(t, parent[y]), member_at(t, y));
  }
  return trees;
}

std::unique_ptr<TreeSetProgram> dbt_tree_set(const CollectiveSpec& s) {
  const int k = chunks_of(s);
  std::vector<TreePart> parts;
  if (s.ranks >= 2) {
    auto trees = dbt_trees(s.ranks);
    for (int t = 0; t < 2; ++t) parts.push_back(TreePart{slice(s.bytes, 2, t, s.element_bytes), std::move(trees[t])});
  }
  return std::make_unique<TreeSetProgram>(s.ranks, k, s.element_bytes, std::move(parts));
}
std::unique_ptr<StepProgram> dbt_program(const CollectiveSpec& s) { return dbt_tree_set(s); }

const std::vector<CollKind> kKinds = {CollKind::AllReduce};

struct Terms {
  int k, h, load;
  Bytes c;
};

Terms terms(const CollectiveSpec& s) {
  const int k = chunks_of(s);
  return Terms{k, floor_log2(s.ranks), s.ranks == 2 ? 1 : 2,
               max_slice(slice(s.bytes, 2, 1, s.element_bytes).size(), k, s.element_bytes)};
}

double cost(const CollectiveSpec& s, const CostParams& cp) {
  validate_spec(s);
  if (s.ranks < 2) return 0.0;
  const Terms t = terms(s);
  const double c = static_cast<double>(t.c);
  return (t.k + t.h - 1) * (2 * cp.alpha_ps + 2.0 * t.load * c * cp.beta_ps + t.load * c * cp.gamma_ps);
}

std::string explain(const CollectiveSpec& s, const CostParams& cp) {
  const Terms t = terms(s);
  return explain_text(
      fmt::format("dbt allreduce (p={}, n={}B, k={} chunks{}, tree height H={})", s.ranks, s.bytes, t.k,
                  s.chunks > 0 ? "" : " = clamp(ceil(n/1MiB),1,64)", t.h),
      "(k + H - 1)*(2*alpha + 2*L*c*beta + L*c*gamma), c = ceil(n/2/k), L = 2 flows per port (1 if p = 2); "
      "lockstep estimate",
      fmt::format("({} + {} - 1)*(2*{} + 2*{}*{}B/{} + {}*{}B/{})", t.k, t.h, fmt_alpha(cp.alpha_ps), t.load, t.c,
                  fmt_rate(cp.beta_ps), t.load, t.c, fmt_rate(cp.gamma_ps)),
      cost(s, cp));
}

}  // namespace

std::unique_ptr<StepProgram> make_dbt_program(const CollectiveSpec& s) { return dbt_program(s); }
std::unique_ptr<DbtSlots> make_dbt_slots(const CollectiveSpec& s) { return dbt_tree_set(s); }
double dbt_cost_ps(const CollectiveSpec& s, const CostParams& c) { return cost(s, c); }

namespace {

// ---- nccl_tree ------------------------------------------------------------------------------
// C = g channels (one per GPU of a node, as NCCL spreads its tree channels over the NICs);
// channel c carries a 1/C share of the buffer as two halves, each on its own tree: inside
// every node a chain that starts at local rank c (the head, whose NIC is on rail c) and runs
// c, c+1, ..., c+g-1 (mod g); across nodes the heads form dbt's tree A (first half) or tree
// B (second half) over the N nodes. So a chunk climbs the chain to the head, the tree to the
// root, and comes back down the same way, pipelined in k chunks.
int tree_parts(const CollectiveSpec& s) { return 2 * s.ranks_per_node; }

// The depth of the trees: floor(log2 N) across the nodes plus g - 1 along the chain.
int nccl_tree_depth(const CollectiveSpec& s) {
  const int nodes = s.ranks / s.ranks_per_node;
  return (nodes > 1 ? floor_log2(nodes) : 0) + s.ranks_per_node - 1;
}

// NCCL's chunk rule for Tree (enqueue.cc, Simple protocol): start from 512 KiB and halve the
// chunk while a channel's share holds fewer than 8 x depth chunks (down to 128 KiB), 4 x depth
// (down to 64 KiB), depth (down to 32 KiB), so a deep tree still fills its pipeline. A
// channel's share here is one tree's part, n/(2g). Never more chunks than elements, nor than
// kMaxTreeChunks: past 2 GiB a part gets larger chunks (the pipeline's fill is then < 1% of
// the time, and the simulation's steps stay bounded).
constexpr Bytes kMaxTreeChunks = 4096;
int nccl_tree_chunks(const CollectiveSpec& s) {
  if (s.chunks > 0) return s.chunks;
  const int parts = tree_parts(s);
  const Bytes part = max_slice(s.bytes, parts, s.element_bytes);
  const Bytes smallest = slice(s.bytes, parts, 0, s.element_bytes).size();
  const Bytes depth = std::max(nccl_tree_depth(s), 1);
  Bytes chunk = 512 * 1024;
  while (part / chunk < depth * 8 && chunk > 128 * 1024) chunk /= 2;
  while (part / chunk < depth * 4 && chunk > 64 * 1024) chunk /= 2;
  while (part / chunk < depth && chunk > 32 * 1024) chunk /= 2;
  const Bytes k = std::clamp<Bytes>((part + chunk - 1) / chunk, 1, kMaxTreeChunks);
  return static_cast<int>(std::min<Bytes>(k, std::max<Bytes>(smallest / s.element_bytes, 1)));
}

std::unique_ptr<StepProgram> nccl_tree_program(const CollectiveSpec& s) {
  const int p = s.ranks, g = s.ranks_per_node, nodes = p / g;
  const auto node_trees = dbt_trees(nodes);
  std::vector<TreePart> parts;
  for (int c = 0; c < g; ++c)
    for (int t = 0; t < 2; ++t) {
      TreePart tp{slice(s.bytes, 2 * g, 2 * c + t, s.element_bytes),
                  std::vector<TreeNode>(static_cast<std::size_t>(p))};
      auto member = [&](int node, int i) { return node * g + (c + i) % g; };  // i-th of the node's chain
      for (int n = 0; n < nodes; ++n) {
        const TreeNode& nn = node_trees[static_cast<std::size_t>(t)][static_cast<std::size_t>(n)];
        for (int i = 0; i < g; ++i) tp.nodes[static_cast<std::size_t>(member(n, i))].depth = nn.depth + i;
      }
      for (int n = 0; n < nodes; ++n) {  // heads under heads, in dbt's child order
        for (int child : node_trees[static_cast<std::size_t>(t)][static_cast<std::size_t>(n)].child)
          if (child >= 0) add_child(tp.nodes, member(n, 0), member(child, 0));
        for (int i = 1; i < g; ++i) add_child(tp.nodes, member(n, i - 1), member(n, i));  // the chain
      }
      parts.push_back(std::move(tp));
    }
  return std::make_unique<TreeSetProgram>(p, nccl_tree_chunks(s), s.element_bytes, std::move(parts));
}

// The closed form's terms: k chunks of at most c bytes per tree, the trees' depth H =
// H_N + g - 1 (H_N = floor(log2 N) across nodes, g - 1 along the chain), the flows a busy port
// carries: L on a head's NIC (dbt's: 2, 1 for two nodes, 0 for one), 2 on a chain hop (the
// channel's two halves), F_i on a GPU's NVLink port in the steady state (2 per channel whose
// chunk is at its depth: at most min(k, g - 1) channels at once), and R chunks reduced per
// UP step.
struct TreeTerms {
  int k, h_nodes, chain, flows_e, flows_i, reduced;
  Bytes c;
};
TreeTerms nccl_tree_terms(const CollectiveSpec& s) {
  const int g = s.ranks_per_node, nodes = s.ranks / g;
  const int k = nccl_tree_chunks(s);
  const int flows_e = nodes > 2 ? 2 : nodes == 2 ? 1 : 0;
  const int flows_i = 2 * std::min(k, g - 1);
  return TreeTerms{k,
                   nccl_tree_depth(s) - (g - 1),
                   g - 1,
                   flows_e,
                   flows_i,
                   flows_i + flows_e,
                   max_slice(max_slice(s.bytes, tree_parts(s), s.element_bytes), k, s.element_bytes)};
}

std::optional<std::string> nccl_tree_unsupported(const CollectiveSpec& s) {
  if (auto k = kind_reason("nccl_tree", kKinds, s.kind)) return k;
  return node_blocks_reason("nccl_tree", s);
}

// How many of the integers lo .. hi lie in [a, b].
int overlap(int lo, int hi, int a, int b) { return std::max(0, std::min(hi, b) - std::max(lo, a) + 1); }

// Lockstep estimate, slot by slot (the slot rules at the top of this file): slot t's UP step and
// then its DOWN step, each as long as the busiest GPU's busier level (its NVLink flows to and
// from its chain neighbours, its NIC's to and from the heads of the neighbouring nodes, the
// larger of a GPU's sends and receives on each). A GPU's chain position differs per channel, so
// every GPU of a node carries the same flows; they depend only on its node's depths and
// children in the two node trees. A rank at depth d sends UP in slots H-d .. H-d+k-1 and DOWN
// in slots H+d-1 .. H+d+k-2, so a level's flows in a slot are counts of chain positions in a
// window, O(1) each. The pipeline's fill and drain slots carry the few chunks in flight, its
// middle slots every channel whose chunk is at the GPU's depth. With one rank per node (g = 1)
// it is dbt's closed form.
double nccl_tree_cost(const CollectiveSpec& s, const CostParams& cp) {
  validate_spec(s);
  if (auto why = nccl_tree_unsupported(s)) throw Error(*why);
  if (s.ranks < 2) return 0.0;
  const int g = s.ranks_per_node, nodes = s.ranks / g;
  if (g == 1) return cost(s, cp);
  const TreeTerms t = nccl_tree_terms(s);
  const Levels lv = levels(cp);
  const double c = static_cast<double>(t.c);
  const int k = t.k, h = nccl_tree_depth(s);
  // Node classes: (depth, children, has parent) in tree A and in tree B, each counted once.
  struct NodeRole {
    int depth, children, parent;
    bool operator==(const NodeRole&) const = default;
  };
  std::vector<std::array<NodeRole, 2>> classes;
  const auto trees = dbt_trees(nodes);
  for (int n = 0; n < nodes; ++n) {
    std::array<NodeRole, 2> r{};
    for (int tr = 0; tr < 2; ++tr) {
      const TreeNode& nd = trees[static_cast<std::size_t>(tr)][static_cast<std::size_t>(n)];
      r[static_cast<std::size_t>(tr)] = {
          nd.depth, static_cast<int>(std::count_if(nd.child.begin(), nd.child.end(), [](int ch) { return ch >= 0; })),
          nd.parent >= 0 ? 1 : 0};
    }
    if (std::find(classes.begin(), classes.end(), r) == classes.end()) classes.push_back(r);
  }
  auto level_cost = [&](int nvl, int net) {
    return two_level_step_ps({lv.ai, nvl * c * lv.bi, nvl > 0}, {lv.ae, net * c * lv.be, net > 0}, lv.separate);
  };
  auto slot_ps = [&](int slot) {
    double up = 0, down = 0;
    for (const auto& r : classes) {
      int up_nvl_out = 0, up_nvl_in = 0, up_net_out = 0, up_net_in = 0;
      int dn_nvl_out = 0, dn_nvl_in = 0, dn_net_out = 0, dn_net_in = 0;
      for (const NodeRole& tr : r) {
        // UP: depth d sends in slot `slot` when d lies in [h - slot, h - slot + k - 1].
        const int ulo = h - slot - tr.depth, uhi = h - slot + k - 1 - tr.depth;  // chain positions i
        up_nvl_out += overlap(ulo, uhi, 1, g - 1);                               // to the chain parent i - 1
        up_nvl_in += overlap(ulo - 1, uhi - 1, 0, g - 2);                        // from the chain child i + 1
        up_net_out += tr.parent * overlap(ulo, uhi, 0, 0);                       // the head to its node's parent
        up_net_in += tr.children * overlap(ulo - 1, uhi - 1, 0, 0);              // from the child nodes' heads
        // DOWN: depth d sends in slot `slot` when d lies in [slot - k + 2 - h, slot + 1 - h].
        const int dlo = slot - k + 2 - h - tr.depth, dhi = slot + 1 - h - tr.depth;
        dn_nvl_out += overlap(dlo, dhi, 0, g - 2);         // to the chain child i + 1
        dn_nvl_in += overlap(dlo + 1, dhi + 1, 1, g - 1);  // from the chain parent i - 1
        dn_net_out += tr.children * overlap(dlo, dhi, 0, 0);
        dn_net_in += tr.parent * overlap(dlo + 1, dhi + 1, 0, 0);
      }
      up = std::max(up, level_cost(std::max(up_nvl_out, up_nvl_in), std::max(up_net_out, up_net_in)));
      down = std::max(down, level_cost(std::max(dn_nvl_out, dn_nvl_in), std::max(dn_net_out, dn_net_in)));
    }
    return up + down;
  };
  // From slot 2H+1 to slot k-2 every window covers every chain position (margin one for the
  // receives), so those slots are alike: one is timed and counted for all.
  double total = 0;
  const int same_from = 2 * h + 1, same_to = k - 2;
  for (int slot = 0; slot < k + 2 * h; ++slot) {
    if (slot == same_from && same_to > same_from) {
      total += (same_to - same_from + 1) * slot_ps(slot);
      slot = same_to;
      continue;
    }
    total += slot_ps(slot);
  }
  const double reduced = (2.0 * t.chain + t.h_nodes * t.flows_e + (t.k - 1.0) * t.reduced) * c;  // UP steps
  return total + reduced * cp.gamma_ps;
}

std::string nccl_tree_explain(const CollectiveSpec& s, const CostParams& cp) {
  const TreeTerms t = nccl_tree_terms(s);
  const Levels lv = levels(cp);
  return explain_text(
      fmt::format("nccl_tree allreduce (p={}, g={} per node = channels, N={} nodes, n={}B, k={} chunks)", s.ranks,
                  s.ranks_per_node, s.ranks / s.ranks_per_node, s.bytes, t.k),
      "sum over the k + 2H slots of an UP and a DOWN step, each max(a_i + F_t*c*b_i, a_e + L_t*c*b_e) on the "
      "busiest GPU (the sum when its first link is shared; a level without flows costs nothing), F_t and L_t its "
      "chain and node-tree flows in the slot (in the middle slots F = 2 min(k, g-1), L = 2, 1 on two nodes), "
      "+ gamma on the bytes reduced; c = largest chunk ~ n/(2gk), H = floor(log2 N) + g - 1; lockstep estimate",
      fmt::format("{} slots, the middle steps max({} + {}*{}B/{}, {} + {}*{}B/{})", t.k + 2 * nccl_tree_depth(s),
                  fmt_alpha(lv.ai), t.flows_i, t.c, fmt_rate(lv.bi), fmt_alpha(lv.ae), t.flows_e, t.c, fmt_rate(lv.be)),
      nccl_tree_cost(s, cp));
}

}  // namespace

Algorithm make_nccl_tree() {
  Algorithm a = basic_algorithm(
      "nccl_tree",
      "NCCL's Tree: per channel (one per GPU of a node) a chain inside each node and a double binary tree of the "
      "nodes, pipelined",
      kKinds, nccl_tree_program, nccl_tree_cost, nccl_tree_explain);
  a.unsupported = nccl_tree_unsupported;
  a.hop_rows = {HopRow::Tree, HopRow::Tree};  // NCCL's Tree: the chain and the node tree
  return a;
}

Algorithm make_double_binary_tree() {
  Algorithm a = basic_algorithm("dbt", "NCCL-style double binary tree: two complementary pipelined trees, one per half",
                                kKinds, dbt_program, cost, explain);
  a.hop_rows = {HopRow::Tree, HopRow::Tree};
  return a;
}

}  // namespace meshsim::collectives
