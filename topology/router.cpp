// Router: shortest-hop routes between GPUs with deterministic ECMP, cached per pair.
//
// A cache miss finds, for every device on a shortest-hop route from the source GPU to the
// destination, its hop count from the source and its least latency so far: either by a
// breadth-first search from the source that stops once the destination is discovered (every
// device of the levels before it is final then: BFS finishes a level before the next), or by
// searches from both ends (search_both_ends). The scratch arrays are allocated once per
// Router; an entry counts only when its stamp equals the current epoch, so nothing is cleared
// per call.
//
// The path is rebuilt from the destination backwards: at each device, the candidate
// predecessors are those one hop closer to the source (and allowed to forward) whose
// latency-so-far plus the hop's latency is least; among the remaining ties (the spines
// of a fat-tree) one is picked by splitmix64(hash(src, dst), level).
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "core/hash.h"
#include "topology/topology.h"

namespace meshsim {

Router::Router(const Topology& topo, Search search) : topo_(topo), search_(search) {
  if (!topo.sealed()) throw Error(fmt::format("router: topology '{}' must be sealed before routing", topo.name()));
  const auto n = static_cast<std::size_t>(topo.num_devices());
  dist_.assign(n, 0);
  lat_.assign(n, 0);
  stamp_.assign(n, 0);
  bdist_.assign(n, 0);
  bstamp_.assign(n, 0);
  queue_.reserve(n);
  // The graph as compact arrays for the BFS: per device, its outgoing links that are up (their
  // ids, neighbours and latencies), and whether it relays. Endpoints that do not forward have
  // their edges kept too (a source expands them); the BFS skips relaying through them.
  adj_begin_.assign(n + 1, 0);
  // A group's parameters read about six routes per rank (sim/group_links.cpp): room for them.
  summaries_.reserve(static_cast<std::size_t>(topo.num_gpus()) * 6);
  adj_.reserve(topo.links().size());
  adj_link_.reserve(topo.links().size());
  for (std::size_t d = 0; d < n; ++d) {
    for (int l : topo.out_links(static_cast<int>(d))) {
      const DirLink& link = topo.links()[static_cast<std::size_t>(l)];
      if (link.down) continue;
      adj_.push_back({link.to, link.spec.latency.ps()});
      adj_link_.push_back(l);
    }
    adj_begin_[d + 1] = static_cast<int>(adj_.size());
  }
  forwards_.assign(n, 0);
  for (std::size_t d = 0; d < n; ++d) forwards_[d] = topo.devices()[d].forwards ? 1 : 0;
}

void Router::new_epoch() {
  if (++epoch_ == 0) {  // wrapped around: old stamps could alias, clear once
    std::fill(stamp_.begin(), stamp_.end(), 0u);
    std::fill(bstamp_.begin(), bstamp_.end(), 0u);
    epoch_ = 1;
  }
}

// The BFS from `src` resumes where the last query from the same source stopped: every
// device it has stamped already has its final hop count and least latency (its level's
// predecessors were all expanded before it was discovered), so consecutive queries from
// one source cost one BFS in all.
void Router::search_from_source(int src, int dst) {
  if (src != bfs_src_ || stamp_[static_cast<std::size_t>(src)] != epoch_) {
    new_epoch();
    bfs_src_ = src;
    bfs_head_ = 0;
    queue_.clear();
    queue_.push_back(src);
    fstart_.assign(1, 0);
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
        if (fstart_.size() == static_cast<std::size_t>(dist_[v])) fstart_.push_back(queue_.size());  // a new level
        queue_.push_back(v);
        if (v == dst) found = true;
      } else if (dist_[v] == dist_[u] + 1 && w < lat_[v]) {
        lat_[v] = w;
      }
    }
    ++bfs_head_;
  }
  MESHSIM_ASSERT(found);  // seal() guarantees every GPU reaches every other
}

// Both ends at once: whole levels of a BFS from `src` and of one from `dst` over reversed links,
// always the level that is cheaper to expand (fewer links out of devices that relay), until a
// device that may relay (or an end) is on both: then the hop count is a + b, the levels the two
// have reached. The forward search has the final hop count and least latency of every device up
// to level a; past it, the devices of a shortest route are those of the backward search's level
// hops - k that a device of level k - 1 links to, and pulling their least latency from those
// gives what the full BFS gives (every shortest-hop predecessor of a device on a shortest route
// is on one too). Both searches keep their levels (queue_/fstart_, bq_/bstart_), so the pull and
// the backtracking visit the links of small levels, not of a spine with thousands of leaves.
void Router::search_both_ends(int src, int dst) {
  new_epoch();
  bfs_src_ = -1;  // the scratch holds no resumable search
  stamp_[src] = epoch_;
  dist_[src] = 0;
  lat_[src] = 0;
  bstamp_[dst] = epoch_;
  bdist_[dst] = 0;
  queue_.assign(1, src);
  fstart_.assign({0, 1});
  bq_.assign(1, dst);
  bstart_.assign({0, 1});
  auto relays = [&](int v) { return forwards_[static_cast<std::size_t>(v)] != 0; };
  auto cost = [&](const std::vector<int>& q, std::size_t from, std::size_t to, int end) {
    std::size_t c = 0;
    for (std::size_t i = from; i < to; ++i)
      if (q[i] == end || relays(q[i])) c += 1 + static_cast<std::size_t>(degree(q[i]));
    return c;
  };
  int a = 0, b = 0;
  bool met = false;
  while (!met) {
    const std::size_t fc = cost(queue_, fstart_[a], fstart_[a + 1], src),
                      bc = cost(bq_, bstart_[b], bstart_[b + 1], dst);
    MESHSIM_ASSERT(fc > 0 && bc > 0);  // seal() guarantees every GPU reaches every other
    if (fc <= bc) {
      for (std::size_t i = fstart_[a]; i < fstart_[a + 1]; ++i) {
        const int u = queue_[i];
        if (u != src && !relays(u)) continue;
        const Edge* e_end = adj_.data() + adj_begin_[static_cast<std::size_t>(u) + 1];
        for (const Edge* e = adj_.data() + adj_begin_[static_cast<std::size_t>(u)]; e != e_end; ++e) {
          const int v = e->to;
          const std::int64_t w = lat_[u] + e->latency_ps;
          if (stamp_[v] != epoch_) {
            stamp_[v] = epoch_;
            dist_[v] = a + 1;
            lat_[v] = w;
            queue_.push_back(v);
            met = met || (bstamp_[v] == epoch_ && (v == dst || relays(v)));
          } else if (dist_[v] == a + 1 && w < lat_[v]) {
            lat_[v] = w;
          }
        }
      }
      fstart_.push_back(queue_.size());
      ++a;
    } else {
      for (std::size_t i = bstart_[b]; i < bstart_[b + 1]; ++i) {
        const int u = bq_[i];
        if (u != dst && !relays(u)) continue;
        for (int l : live_links(u)) {  // the link back into u from its neighbour
          const int v = topo_.links()[static_cast<std::size_t>(l)].to;
          if (bstamp_[v] == epoch_) continue;
          bstamp_[v] = epoch_;
          bdist_[v] = b + 1;
          bq_.push_back(v);
          met = met || (stamp_[v] == epoch_ && (v == src || relays(v)));
        }
      }
      bstart_.push_back(bq_.size());
      ++b;
    }
  }
  // Levels a+1 .. a+b: each device of backward level a+b-k that may relay (or is dst) pulls its
  // least latency from its neighbours of forward level k-1.
  const auto& links = topo_.links();
  for (int k = a + 1; k <= a + b; ++k) {
    const int j = a + b - k;
    for (std::size_t i = bstart_[static_cast<std::size_t>(j)]; i < bstart_[static_cast<std::size_t>(j) + 1]; ++i) {
      const int v = bq_[i];
      if (v != dst && !relays(v)) continue;
      for (int l : live_links(v)) {
        const int u = links[static_cast<std::size_t>(l)].to;
        if (stamp_[u] != epoch_ || dist_[u] != k - 1 || (u != src && !relays(u))) continue;
        const std::int64_t w =
            lat_[u] + links[static_cast<std::size_t>(links[static_cast<std::size_t>(l)].reverse)].spec.latency.ps();
        if (stamp_[v] != epoch_) {
          stamp_[v] = epoch_;
          dist_[v] = k;
          lat_[v] = w;
          queue_.push_back(v);
        } else if (w < lat_[v]) {
          lat_[v] = w;
        }
      }
    }
    fstart_.push_back(queue_.size());
  }
  MESHSIM_ASSERT(stamp_[dst] == epoch_ && dist_[dst] == a + b);
}

// The links u -> v from devices u of level `level - 1` whose latency so far plus the link's is
// least, in the order of v's links (ECMP picks among them by position). Read from v's links, or,
// when that level has fewer links than v (v a spine, the level one leaf), from the level's links
// into v, sorted back into v's order (v's links are numbered in the order added, and each is its
// reverse's id plus or minus one).
void Router::collect_candidates(int v, int level, int src) {
  const auto& links = topo_.links();
  candidates_.clear();
  std::int64_t best = std::numeric_limits<std::int64_t>::max();
  auto offer = [&](int u, int in) {
    if (stamp_[u] != epoch_ || dist_[u] != level - 1) return;
    if (u != src && !forwards_[static_cast<std::size_t>(u)]) return;
    const std::int64_t c = lat_[u] + links[static_cast<std::size_t>(in)].spec.latency.ps();
    if (c < best) {
      best = c;
      candidates_.clear();
    }
    if (c == best) candidates_.push_back(in);
  };
  const std::span<const int> v_links = live_links(v);
  // Level level-1 is queue_[first, last): complete, since v of the level after it was reached.
  const std::size_t first = fstart_[static_cast<std::size_t>(level) - 1];
  const std::size_t last =
      static_cast<std::size_t>(level) < fstart_.size() ? fstart_[static_cast<std::size_t>(level)] : queue_.size();
  std::size_t level_links = 0;  // counted until they are as many as v's
  for (std::size_t i = first; i < last && level_links < v_links.size(); ++i)
    level_links += static_cast<std::size_t>(degree(queue_[i]));
  const bool by_level = level_links < v_links.size();
  if (!by_level) {
    for (int l : v_links) offer(links[static_cast<std::size_t>(l)].to, links[static_cast<std::size_t>(l)].reverse);
    return;
  }
  for (std::size_t i = first; i < last; ++i) {
    const int u = queue_[i];
    for (int l : live_links(u))
      if (links[static_cast<std::size_t>(l)].to == v) offer(u, l);
  }
  std::sort(candidates_.begin(), candidates_.end());
}

namespace {
std::uint64_t pair_key(int src_gpu, int dst_gpu) {
  return (static_cast<std::uint64_t>(src_gpu) << 32) | static_cast<std::uint32_t>(dst_gpu);
}

void check_pair(const Topology& topo, int src_gpu, int dst_gpu) {
  const int n = topo.num_gpus();
  if (src_gpu < 0 || src_gpu >= n || dst_gpu < 0 || dst_gpu >= n)
    throw Error(fmt::format("router: gpu pair ({}, {}) out of range; topology '{}' has GPUs 0..{}", src_gpu, dst_gpu,
                            topo.name(), n - 1));
}

// A route's latency, bottleneck, hops, first link and kinds, read off its links (not empty).
RouteSummary summarize(const Topology& topo, const std::vector<int>& links) {
  RouteSummary s;
  s.bottleneck = Bps(std::numeric_limits<double>::infinity());
  for (int l : links) {
    const LinkSpec& spec = topo.link(l).spec;
    s.latency += spec.latency;
    if (spec.effective() < s.bottleneck) s.bottleneck = spec.effective();
    s.nvlink_only = s.nvlink_only && spec.kind == LinkKind::NvLink;
  }
  s.hops = static_cast<int>(links.size());
  s.first_link = links.front();
  return s;
}
}  // namespace

const Path& Router::path(int src_gpu, int dst_gpu) {
  check_pair(topo_, src_gpu, dst_gpu);
  const std::uint64_t key = pair_key(src_gpu, dst_gpu);
  if (auto it = cache_.find(key); it != cache_.end()) return it->second;
  Path p;
  if (src_gpu == dst_gpu) return cache_.emplace(key, std::move(p)).first->second;
  find_route(src_gpu, dst_gpu, key, p.links);
  const RouteSummary s = summarize(topo_, p.links);
  p.latency = s.latency;
  p.bottleneck = s.bottleneck;
  return cache_.emplace(key, std::move(p)).first->second;
}

const RouteSummary& Router::summary(int src_gpu, int dst_gpu) {
  check_pair(topo_, src_gpu, dst_gpu);
  const std::uint64_t key = pair_key(src_gpu, dst_gpu);
  if (auto it = summaries_.find(key); it != summaries_.end()) return it->second;
  return summaries_.emplace(key, new_summary(src_gpu, dst_gpu, key)).first->second;
}

RouteSummary Router::summary_once(int src_gpu, int dst_gpu) {
  check_pair(topo_, src_gpu, dst_gpu);
  const std::uint64_t key = pair_key(src_gpu, dst_gpu);
  if (auto it = summaries_.find(key); it != summaries_.end()) return it->second;
  return new_summary(src_gpu, dst_gpu, key);
}

RouteSummary Router::new_summary(int src_gpu, int dst_gpu, std::uint64_t key) {
  if (src_gpu == dst_gpu) return RouteSummary{};
  if (const auto cached = cache_.find(key); cached != cache_.end()) return summarize(topo_, cached->second.links);
  find_route(src_gpu, dst_gpu, key, scratch_links_);
  return summarize(topo_, scratch_links_);
}

void Router::find_route(int src_gpu, int dst_gpu, std::uint64_t key, std::vector<int>& route) {
  const int src = topo_.gpu_device(src_gpu);
  const int dst = topo_.gpu_device(dst_gpu);
  const auto& links = topo_.links();

  // A source asking for its fourth route in a row (an all-to-all, a root's fan-out) or one whose
  // BFS is already held pays for one BFS over the whole fabric that its later queries reuse; a
  // lone pair meets in the middle.
  constexpr int kStreak = 4;
  streak_ = src == last_src_ ? streak_ + 1 : 1;
  last_src_ = src;
  Search how = search_;
  if (how == Search::Auto) how = (src == bfs_src_ || streak_ >= kStreak) ? Search::FromSource : Search::BothEnds;
  if (how == Search::FromSource)
    search_from_source(src, dst);
  else
    search_both_ends(src, dst);

  const std::uint64_t pair_hash = splitmix64(key);
  const int hops = dist_[dst];
  route.assign(static_cast<std::size_t>(hops), -1);
  int v = dst;
  for (int level = hops; level > 0; --level) {
    collect_candidates(v, level, src);
    MESHSIM_ASSERT(!candidates_.empty());
    const std::size_t pick =
        candidates_.size() == 1 ? 0 : splitmix64(pair_hash ^ static_cast<std::uint64_t>(level)) % candidates_.size();
    const int chosen = candidates_[pick];
    route[static_cast<std::size_t>(level - 1)] = chosen;
    v = links[chosen].from;
  }
  MESHSIM_ASSERT(v == src);
}

}  // namespace meshsim
