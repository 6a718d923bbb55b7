// mesh_rings: all-reduce, all-gather and reduce-scatter on GPUs joined pairwise by links of their
// own (a full mesh: the eight xGMI-linked GPUs of an AMD MI300X platform), as RCCL runs them: many
// rings at once, laid so that together they use every direct link, each ring moving its own part
// of the data.
//
// The rings are a decomposition of the complete directed graph on the p ranks into arc-disjoint
// Hamiltonian cycles: C = p-1 rings, each with p hops, use each of the p(p-1) directed links
// exactly once. Such a decomposition exists for every p but 4 and 6 (Tillson, 1980); there the
// most arc-disjoint rings the search finds are used (2 of a possible 3, 4 of 5). The rings are
// found once per p by a depth-first search over rings that start at rank 0 (ranks in increasing
// order at each branch), so they are the same on every machine.
//
//   p = 3, C = 2:  ring 0:  0 -> 1 -> 2 -> 0      ring 1:  0 -> 2 -> 1 -> 0
//
// Rank r's slice of the buffer (n/p, as a ring's) is cut into C chunks, chunk c travelling on ring
// c (multiring's buffer rule, so a reduce-scatter leaves rank r with its slice r). Per step every
// rank sends C chunks of at most M = a C-th of the largest slice, each to its successor in one
// ring: over C different links when the GPUs are pairwise linked (CostParams::direct_links), so
//   step = a + M*b,
// and otherwise all through the GPU's one link to a switch, C*M*b. all-reduce = (p-1) reduce
// steps + (p-1) copy steps, with C*M*gamma per reduce step. At large n on a full mesh the
// all-reduce moves 2(p-1)/p*n at (p-1) links' rate: bus bandwidth (p-1) times one link's.
#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "core/error.h"
#include "schedule/collectives/common.h"

namespace meshsim::collectives {

namespace {

constexpr int kMaxRanks = 16;

// Arc-disjoint Hamiltonian cycles of the complete digraph on p vertices, each from vertex 0,
// by depth-first search with backtracking across cycles; the most found when p-1 cannot be
// (p = 4, 6: the search is exhaustive there, about a million steps for p = 6).
class Decomposer {
 public:
  explicit Decomposer(int p)
      : p_(p), used_(static_cast<std::size_t>(p * p), 0), in_path_(static_cast<std::size_t>(p), 0) {
    for (int i = 0; i < p; ++i) arc(i, i) = 1;
  }
  std::vector<std::vector<int>> run() {
    cycle(0);
    return best_;
  }

 private:
  char& arc(int u, int v) { return used_[static_cast<std::size_t>(u * p_ + v)]; }
  // Finds cycles k, k+1, ..., p-2; true when all were found.
  bool cycle(int k) {
    if (k == p_ - 1) return true;
    std::vector<int> path{0};
    std::fill(in_path_.begin(), in_path_.end(), 0);
    in_path_[0] = 1;
    return extend(k, path);
  }
  bool extend(int k, std::vector<int>& path) {
    const int u = path.back();
    if (static_cast<int>(path.size()) == p_) {
      if (arc(u, 0)) return false;
      arc(u, 0) = 1;
      cycles_.push_back(path);
      if (cycles_.size() > best_.size()) best_ = cycles_;
      const std::vector<char> in_path = in_path_;  // the next cycle's search reuses the marks
      if (cycle(k + 1)) return true;
      in_path_ = in_path;
      cycles_.pop_back();
      arc(u, 0) = 0;
      return false;
    }
    for (int v = 0; v < p_ && steps_ < kBudget; ++v) {
      if (in_path_[static_cast<std::size_t>(v)] || arc(u, v)) continue;
      ++steps_;
      arc(u, v) = 1;
      in_path_[static_cast<std::size_t>(v)] = 1;
      path.push_back(v);
      if (extend(k, path)) return true;
      path.pop_back();
      in_path_[static_cast<std::size_t>(v)] = 0;
      arc(u, v) = 0;
    }
    return false;
  }

  static constexpr long kBudget = 20'000'000;  // far above p = 6's exhaustive search
  int p_;
  long steps_ = 0;
  std::vector<char> used_, in_path_;
  std::vector<std::vector<int>> cycles_, best_;
};

// The rings of p ranks (2 <= p <= kMaxRanks), found once.
const std::vector<std::vector<int>>& ring_orders(int p) {
  static const std::array<std::vector<std::vector<int>>, kMaxRanks + 1> table = [] {
    std::array<std::vector<std::vector<int>>, kMaxRanks + 1> t;
    for (int q = 2; q <= kMaxRanks; ++q) t[static_cast<std::size_t>(q)] = Decomposer(q).run();
    return t;
  }();
  MESHSIM_ASSERT(p >= 2 && p <= kMaxRanks);
  return table[static_cast<std::size_t>(p)];
}

class MeshRingsProgram final : public StepProgram {
 public:
  explicit MeshRingsProgram(const CollectiveSpec& s) : kind_(s.kind), p_(s.ranks), n_(s.bytes), elem_(s.element_bytes) {
    if (p_ < 2) return;
    orders_ = &ring_orders(p_);
    pos_.assign(orders_->size() * static_cast<std::size_t>(p_), 0);
    for (std::size_t c = 0; c < orders_->size(); ++c)
      for (int i = 0; i < p_; ++i)
        pos_[c * static_cast<std::size_t>(p_) + static_cast<std::size_t>((*orders_)[c][static_cast<std::size_t>(i)])] =
            i;
  }
  int ranks() const override { return p_; }
  int num_steps(int) const override {
    if (p_ < 2) return 0;
    return kind_ == CollKind::AllReduce ? 2 * (p_ - 1) : p_ - 1;
  }
  int same_shape_until(int, int s) const override {
    if (p_ < 2 || n_ % (static_cast<Bytes>(p_) * channels() * elem_) != 0) return s + 1;
    if (kind_ == CollKind::AllReduce && s < p_ - 1) return p_ - 1;
    return num_steps(0);
  }
  void step(int rank, int s, Step& out) const override {
    ring_channels_step(
        kind_, p_, channels(), n_, elem_, rank, s, [this](int c, int pos) { return at(c, pos); },
        [this](int c, int r) { return position(c, r); }, out);
  }

 private:
  int channels() const { return static_cast<int>(orders_->size()); }
  int at(int c, int pos) const {
    return (*orders_)[static_cast<std::size_t>(c)][static_cast<std::size_t>(mod(pos, p_))];
  }
  int position(int c, int rank) const {
    return pos_[static_cast<std::size_t>(c) * static_cast<std::size_t>(p_) + static_cast<std::size_t>(rank)];
  }

  CollKind kind_;
  int p_;
  Bytes n_, elem_;
  const std::vector<std::vector<int>>* orders_ = nullptr;
  std::vector<int> pos_;  // pos_[c*p + r]: r's position in ring c
};

const std::vector<CollKind> kKinds = {CollKind::AllReduce, CollKind::AllGather, CollKind::ReduceScatter};

std::optional<std::string> unsupported(const CollectiveSpec& s) {
  if (auto k = kind_reason("mesh_rings", kKinds, s.kind)) return k;
  if (s.ranks > kMaxRanks)
    return fmt::format("mesh_rings: {} ranks; its rings cover a full mesh of at most {} GPUs (xGMI meshes are 8)",
                       s.ranks, kMaxRanks);
  return std::nullopt;
}

std::optional<std::string> unavailable(const CollectiveSpec& s, const CostParams& c) {
  if (s.ranks < 2 || c.direct_links) return std::nullopt;
  return std::string(
      "mesh_rings: the group's GPUs are not joined pairwise by links of their own (a full mesh, as "
      "MI300X's xGMI); its rings would share each GPU's one link");
}

RingChannelsStep step_cost(const CollectiveSpec& s, const CostParams& c) {
  const int channels = static_cast<int>(ring_orders(s.ranks).size());
  const auto m = static_cast<double>(ring_channel_max_chunk(s, channels));
  return {c.alpha_ps + (c.direct_links ? 1 : channels) * m * c.beta_ps, m, channels};
}

double cost(const CollectiveSpec& s, const CostParams& c) {
  validate_spec(s);
  if (auto why = unsupported(s)) throw Error(*why);
  if (s.ranks < 2) return 0.0;
  return ring_channels_cost(s.kind, s.ranks, step_cost(s, c), c.gamma_ps);
}

std::string explain(const CollectiveSpec& s, const CostParams& c) {
  const RingChannelsStep st = s.ranks >= 2 ? step_cost(s, c) : RingChannelsStep{0, 0, 1};
  const std::string phases = ring_channels_phases(s.kind);
  return explain_text(
      fmt::format("mesh_rings {} (p={}, C={} rings, n={}B, {})", to_string(s.kind), s.ranks, st.channels, s.bytes,
                  c.direct_links ? "each ring's hops on links of their own" : "the rings share each GPU's link"),
      fmt::format("{}, step = {}, M = largest chunk (a C-th of the largest n/p slice)", phases,
                  c.direct_links ? "a + M*b" : "a + C*M*b"),
      fmt::format("p-1 = {}, step = {}, M = {}B, C*M*gamma = {}", s.ranks - 1, fmt_alpha(st.transfer_ps),
                  static_cast<Bytes>(st.chunk_bytes), fmt_alpha(st.channels * st.chunk_bytes * c.gamma_ps)),
      cost(s, c));
}

}  // namespace

std::vector<std::vector<int>> mesh_ring_orders(int p) { return ring_orders(p); }

Algorithm make_mesh_rings() {
  Algorithm a = basic_algorithm<MeshRingsProgram>(
      "mesh_rings",
      "rings over a full mesh of direct links (RCCL on MI300X's xGMI): p-1 arc-disjoint rings use every link at once",
      kKinds, cost, explain, unsupported);
  a.unavailable = unavailable;
  return a;
}

}  // namespace meshsim::collectives
