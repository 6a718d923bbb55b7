// Router: shortest-hop routes between GPUs with deterministic ECMP, cached per pair.
//
// A cache miss runs a breadth-first search from the source GPU's device that stops as
// soon as the destination is discovered. At that moment every device of the layers
// before it is final (BFS finishes a layer before the next one), and those are all the
// backtracking below needs. The scratch arrays are allocated once per Router; an entry
// counts only when its stamp equals the current epoch, so nothing is cleared per call.
//
// The path is rebuilt from the destination backwards: at each device, the candidate
// predecessors are those one hop closer to the source (and allowed to forward) whose
// latency-so-far plus the hop's latency is least; among the remaining ties (the spines
// of a fat-tree) one is picked by splitmix64(hash(src, dst), level).
#include <fmt/format.h>

#include <limits>

#include "core/error.h"
#include "core/hash.h"
#include "topology/topology.h"

namespace meshsim {

Router::Router(const Topology& topo) : topo_(topo) {
  if (!topo.sealed()) throw Error(fmt::format("router: topology '{}' must be sealed before routing", topo.name()));
  const auto n = static_cast<std::size_t>(topo.num_devices());
  dist_.assign(n, 0);
  lat_.assign(n, 0);
  stamp_.assign(n, 0);
  queue_.reserve(n);
  // The graph as compact arrays for the BFS: per device, its outgoing (neighbour, latency),
  // and whether it relays. Endpoints that do not forward have their edges kept too (a
  // source expands them); the BFS skips relaying through them.
  adj_begin_.assign(n + 1, 0);
  for (std::size_t d = 0; d < n; ++d)
    adj_begin_[d + 1] = adj_begin_[d] + static_cast<int>(topo.out_links(static_cast<int>(d)).size());
  adj_.reserve(static_cast<std::size_t>(adj_begin_[n]));
  for (std::size_t d = 0; d < n; ++d)
    for (int l : topo.out_links(static_cast<int>(d)))
      adj_.push_back(
          {topo.links()[static_cast<std::size_t>(l)].to, topo.links()[static_cast<std::size_t>(l)].spec.latency.ps()});
  forwards_.assign(n, 0);
  for (std::size_t d = 0; d < n; ++d) forwards_[d] = topo.devices()[d].forwards ? 1 : 0;
}

const Path& Router::path(int src_gpu, int dst_gpu) {
  const int n = topo_.num_gpus();
  if (src_gpu < 0 || src_gpu >= n || dst_gpu < 0 || dst_gpu >= n)
    throw Error(fmt::format("router: gpu pair ({}, {}) out of range; topology '{}' has GPUs 0..{}", src_gpu, dst_gpu,
                            topo_.name(), n - 1));
  const std::uint64_t key = (static_cast<std::uint64_t>(src_gpu) << 32) | static_cast<std::uint32_t>(dst_gpu);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;

  Path p;
  if (src_gpu == dst_gpu) return cache_.emplace(key, std::move(p)).first->second;

  const int src = topo_.gpu_device(src_gpu);
  const int dst = topo_.gpu_device(dst_gpu);
  const auto& links = topo_.links();
  const auto& devices = topo_.devices();

  // The BFS from `src` resumes where the last query from the same source stopped: every
  // device it has stamped already has its final hop count and least latency (its level's
  // predecessors were all expanded before it was discovered), so consecutive queries from
  // one source (derive_cost_params asks them in that order) cost one BFS in all.
  if (src != bfs_src_ || stamp_[static_cast<std::size_t>(src)] != epoch_) {
    if (++epoch_ == 0) {  // wrapped around: old stamps could alias, clear once
      std::fill(stamp_.begin(), stamp_.end(), 0u);
      epoch_ = 1;
    }
    bfs_src_ = src;
    bfs_head_ = 0;
    queue_.clear();
    queue_.push_back(src);
    stamp_[src] = epoch_;
    dist_[src] = 0;
    lat_[src] = 0;
  }
  bool found = stamp_[dst] == epoch_;
  while (!found && bfs_head_ < queue_.size()) {
    const int u = queue_[bfs_head_];
    if (u != src && !forwards_[static_cast<std::size_t>(u)]) {
      ++bfs_head_;
      continue;  // endpoints do not relay
    }
    // Expand u completely before stopping, so a later query can resume after it.
    const Edge* e = adj_.data() + adj_begin_[static_cast<std::size_t>(u)];
    const Edge* e_end = adj_.data() + adj_begin_[static_cast<std::size_t>(u) + 1];
    for (; e != e_end; ++e) {
      const int v = e->to;
      const std::int64_t w = lat_[u] + e->latency_ps;
      if (stamp_[v] != epoch_) {
        stamp_[v] = epoch_;
        dist_[v] = dist_[u] + 1;
        lat_[v] = w;
        queue_.push_back(v);
        if (v == dst) found = true;
      } else if (dist_[v] == dist_[u] + 1 && w < lat_[v]) {
        lat_[v] = w;
      }
    }
    ++bfs_head_;
  }
  MESHSIM_ASSERT(found);  // seal() guarantees every GPU reaches every other

  const std::uint64_t pair_hash = splitmix64(key);
  const int hops = dist_[dst];
  p.links.assign(static_cast<std::size_t>(hops), -1);
  int v = dst;
  for (int level = hops; level > 0; --level) {
    std::int64_t best = std::numeric_limits<std::int64_t>::max();
    candidates_.clear();
    for (int l : topo_.out_links(v)) {
      const int u = links[l].to;
      if (stamp_[u] != epoch_ || dist_[u] != level - 1) continue;
      if (u != src && !devices[u].forwards) continue;
      const int in = links[l].reverse;  // u -> v
      const std::int64_t c = lat_[u] + links[in].spec.latency.ps();
      if (c < best) {
        best = c;
        candidates_.clear();
      }
      if (c == best) candidates_.push_back(in);
    }
    MESHSIM_ASSERT(!candidates_.empty());
    const std::size_t pick =
        candidates_.size() == 1 ? 0 : splitmix64(pair_hash ^ static_cast<std::uint64_t>(level)) % candidates_.size();
    const int chosen = candidates_[pick];
    p.links[static_cast<std::size_t>(level - 1)] = chosen;
    v = links[chosen].from;
  }
  MESHSIM_ASSERT(v == src);

  p.bottleneck = Bps(std::numeric_limits<double>::infinity());
  for (int l : p.links) {
    p.latency += links[l].spec.latency;
    const Bandwidth e = links[l].spec.effective();
    if (e < p.bottleneck) p.bottleneck = e;
  }
  return cache_.emplace(key, std::move(p)).first->second;
}

}  // namespace meshsim
