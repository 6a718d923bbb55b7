// dbt: NCCL-style double binary tree all-reduce.
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
// clamp(ceil(n/1MiB), 1, 64), never more chunks than elements of a half.
//
// Closed form (lockstep estimate): UP steps run in slots 0 .. k+H-2 and DOWN steps in
// slots H-1 .. k+2H-3, so a critical path has k+H-1 of each; with every step taking the
// time of its most loaded port, c = the largest chunk (~ n/(2k)):
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

struct TreeNode {
  int parent = -1;
  std::array<int, 2> child{-1, -1};
  int depth = 0;
};

// Slot intervals [lo, hi) where a rank has an UP (or DOWN) step: at most 2 disjoint ones.
struct Slots {
  int n = 0;
  std::array<int, 2> lo{}, hi{};
  void add(int a, int b) {  // intervals arrive with overlapping or disjoint ranges; merge
    for (int i = 0; i < n; ++i)
      if (a <= hi[i] && lo[i] <= b) {
        lo[i] = std::min(lo[i], a);
        hi[i] = std::max(hi[i], b);
        return;
      }
    MESHSIM_ASSERT(n < 2);
    lo[n] = a;
    hi[n] = b;
    ++n;
  }
  int count_below(int t) const {  // |slots ∩ [0, t)|
    int c = 0;
    for (int i = 0; i < n; ++i) c += std::clamp(t - lo[i], 0, hi[i] - lo[i]);
    return c;
  }
  bool has(int t) const {
    for (int i = 0; i < n; ++i)
      if (t >= lo[i] && t < hi[i]) return true;
    return false;
  }
};

class DbtProgram final : public StepProgram {
 public:
  explicit DbtProgram(const CollectiveSpec& s) : p_(s.ranks), k_(chunks_of(s)), n_(s.bytes), elem_(s.element_bytes) {
    half_[0] = slice(n_, 2, 0, elem_);
    half_[1] = slice(n_, 2, 1, elem_);
    if (p_ < 2) return;
    build_trees();
    up_.resize(p_);
    down_.resize(p_);
    for (int r = 0; r < p_; ++r) {
      for (int t = 0; t < 2; ++t) {
        const TreeNode& nd = tree_[t][r];
        const int d = nd.depth;
        const bool inner = nd.child[0] >= 0, has_parent = nd.parent >= 0;
        // UP: inner ranks reduce in [H-d-1, H-d-1+k) and forward in [H-d, H-d+k).
        if (inner && has_parent)
          up_[r].add(h_ - d - 1, h_ - d + k_);
        else if (inner)
          up_[r].add(h_ - d - 1, h_ - d - 1 + k_);
        else if (has_parent)
          up_[r].add(h_ - d, h_ - d + k_);
        // DOWN: receive in [H+d-2, H+d-2+k), forward in [H+d-1, H+d-1+k).
        if (inner && has_parent)
          down_[r].add(h_ + d - 2, h_ + d - 1 + k_);
        else if (inner)
          down_[r].add(h_ + d - 1, h_ + d - 1 + k_);
        else if (has_parent)
          down_[r].add(h_ + d - 2, h_ + d - 2 + k_);
      }
    }
  }
  int ranks() const override { return p_; }
  int num_steps(int rank) const override {
    if (p_ < 2) return 0;
    return up_[rank].count_below(kFar) + down_[rank].count_below(kFar);
  }
  void step(int rank, int s, Step& out) const override {
    const Slots& up = up_[rank];
    const Slots& down = down_[rank];
    // Smallest slot t with more than s steps in slots [0, t].
    int lo = 0, hi = k_ + 2 * h_ + 1;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (up.count_below(mid + 1) + down.count_below(mid + 1) > s)
        hi = mid;
      else
        lo = mid + 1;
    }
    const int t = lo;
    const bool is_up = up.has(t) && up.count_below(t) + down.count_below(t) == s;
    for (int tr = 0; tr < 2; ++tr) {
      const TreeNode& nd = tree_[tr][rank];
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
  static constexpr int kFar = 1 << 30;

  void add(std::vector<Transfer>& v, int tree, int peer, int j) const {
    if (j < 0 || j >= k_) return;
    const Range r = slice(half_[tree].size(), k_, j, elem_);
    v.push_back(Transfer{peer, half_[tree].begin + r.begin, r.size(), tree * k_ + j});
  }

  int rank_at(int tree, int y) const {
    const int x = y - 1;
    if (tree == 0) return x;
    return p_ % 2 == 0 ? p_ - 1 - x : (x + 1) % p_;
  }

  void build_trees() {
    // Parent of every position, then depths top-down (a parent's lowbit exceeds its child's).
    std::vector<int> parent(p_ + 1, 0), depth(p_ + 1, 0);
    int root = 1;
    while (root * 2 <= p_) root *= 2;
    for (int y = 1; y <= p_; ++y) {
      if (y == root) continue;
      const int h = static_cast<int>(lowbit(y));
      const bool left_child = ((y / h) % 4) == 1;  // y = a*2h + h with a even: parent y + h
      int up = left_child ? y + h : y - h;
      if (up > p_) up = y - h;  // the natural parent is past p: hang under y - h instead
      parent[y] = up;
    }
    h_ = 0;
    for (int h = root; h >= 1; h /= 2)
      for (int y = h; y <= p_; y += 2 * h) {
        depth[y] = y == root ? 0 : depth[parent[y]] + 1;
        h_ = std::max(h_, depth[y]);
      }
    for (int t = 0; t < 2; ++t) {
      tree_[t].assign(p_, TreeNode{});
      for (int y = 1; y <= p_; ++y) {
        TreeNode& nd = tree_[t][rank_at(t, y)];
        nd.depth = depth[y];
        if (y == root) continue;
        nd.parent = rank_at(t, parent[y]);
        TreeNode& pn = tree_[t][nd.parent];
        const int slot = pn.child[0] < 0 ? 0 : 1;
        MESHSIM_ASSERT(pn.child[slot] < 0);
        pn.child[slot] = rank_at(t, y);
      }
    }
  }

  int p_, k_, h_ = 0;
  Bytes n_, elem_;
  Range half_[2];
  std::vector<TreeNode> tree_[2];
  std::vector<Slots> up_, down_;
};

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

Algorithm make_double_binary_tree() {
  return basic_algorithm<DbtProgram>(
      "dbt", "NCCL-style double binary tree: two complementary pipelined trees, one per half", kKinds, cost, explain);
}

}  // namespace meshsim::collectives
