// Pipeline message order and issue order (see p2p_plan.h).
#include "backend/cuda/p2p_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <queue>

#include "core/error.h"

namespace meshsim::cuda {
namespace {

bool is_p2p(const Op& op) { return op.kind == OpKind::Send || op.kind == OpKind::Recv; }

// Kahn's algorithm over nodes 0..n-1 with `succ` edges; ties go to the smallest key.
// Returns the order, shorter than n when there is a cycle.
template <typename Key>
std::vector<int> topo(const std::vector<std::vector<int>>& succ, const std::vector<Key>& key) {
  const std::size_t n = succ.size();
  std::vector<int> indeg(n, 0);
  for (const auto& s : succ)
    for (int v : s) ++indeg[static_cast<std::size_t>(v)];
  using Item = std::pair<Key, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> ready;
  for (std::size_t v = 0; v < n; ++v)
    if (indeg[v] == 0) ready.emplace(key[v], static_cast<int>(v));
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    const int v = ready.top().second;
    ready.pop();
    order.push_back(v);
    for (int w : succ[static_cast<std::size_t>(v)])
      if (--indeg[static_cast<std::size_t>(w)] == 0) ready.emplace(key[static_cast<std::size_t>(w)], w);
  }
  return order;
}

// Edges of one role: deps, and the order of every stream but pp.
void role_edges(const std::vector<Op>& ops, int base, std::vector<std::vector<int>>& succ) {
  std::vector<int> last(static_cast<std::size_t>(kStreams), -1);
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const int v = base + static_cast<int>(i);
    for (int d : ops[i].deps)
      if (d >= 0 && d < static_cast<int>(i)) succ[static_cast<std::size_t>(base + d)].push_back(v);
    if (ops[i].stream == Stream::Pp && is_p2p(ops[i])) continue;
    int& l = last[static_cast<std::size_t>(ops[i].stream)];
    if (l >= 0) succ[static_cast<std::size_t>(base + l)].push_back(v);
    l = static_cast<int>(i);
  }
}

}  // namespace

std::vector<std::vector<int>> plan_p2p_order(const Schedule& schedule) {
  const std::size_t roles = schedule.roles.size();
  std::map<int, int> role_of_stage;
  std::vector<int> base(roles + 1, 0);
  for (std::size_t r = 0; r < roles; ++r) {
    role_of_stage[schedule.roles[r].stage] = static_cast<int>(r);
    base[r + 1] = base[r] + static_cast<int>(schedule.roles[r].ops.size());
  }
  const auto n = static_cast<std::size_t>(base[roles]);
  std::vector<std::vector<int>> succ(n);
  std::vector<std::pair<int, int>> key(n);              // (op index, role): ranks advance together
  std::map<std::pair<bool, std::int64_t>, int> end_of;  // (is_send, tag) -> node
  for (std::size_t r = 0; r < roles; ++r) {
    const std::vector<Op>& ops = schedule.roles[r].ops;
    role_edges(ops, base[r], succ);
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const int v = base[r] + static_cast<int>(i);
      key[static_cast<std::size_t>(v)] = {static_cast<int>(i), static_cast<int>(r)};
      if (!is_p2p(ops[i])) continue;
      const auto k = std::make_pair(ops[i].kind == OpKind::Send, ops[i].tag);
      if (end_of.count(k) != 0)
        throw Error(
            fmt::format("backend cuda: pipeline: tag {} is {} twice (role {} op {} '{}'); every message "
                        "needs one send and one receive",
                        ops[i].tag, ops[i].kind == OpKind::Send ? "sent" : "received", r, i, ops[i].name));
      end_of[k] = v;
    }
  }
  auto role_of_node = [&](int v) {
    return static_cast<int>(std::upper_bound(base.begin(), base.end(), v) - base.begin()) - 1;
  };
  for (const auto& [k, v] : end_of) {
    const int r = role_of_node(v);
    const Op& op = schedule.roles[r].ops[v - base[static_cast<std::size_t>(r)]];
    auto other = end_of.find({!k.first, k.second});
    auto peer = role_of_stage.find(op.peer);
    if (other == end_of.end() || peer == role_of_stage.end() || role_of_node(other->second) != peer->second)
      throw Error(fmt::format("backend cuda: pipeline: role {} op '{}' (tag {}) {} stage {}, which has no matching {}",
                              r, op.name, op.tag, k.first ? "sends to" : "receives from", op.peer,
                              k.first ? "receive" : "send"));
    if (k.first) succ[static_cast<std::size_t>(v)].push_back(other->second);
  }
  const std::vector<int> order = topo(succ, key);
  if (order.size() != n)
    throw Error(
        "backend cuda: pipeline: the schedule's messages and dependencies form a cycle; it cannot run on any "
        "backend (a malformed schedule)");
  std::vector<int> pos(n);
  for (std::size_t i = 0; i < n; ++i) pos[static_cast<std::size_t>(order[i])] = static_cast<int>(i);
  // A message's rank: where its send landed.
  std::vector<std::vector<std::pair<int, int>>> ranked(roles);
  for (const auto& [k, v] : end_of) {
    const int send = k.first ? v : end_of.at({true, k.second});
    const int r = role_of_node(v);
    ranked[static_cast<std::size_t>(r)].emplace_back(pos[static_cast<std::size_t>(send)],
                                                     v - base[static_cast<std::size_t>(r)]);
  }
  std::vector<std::vector<int>> out(roles);
  for (std::size_t r = 0; r < roles; ++r) {
    std::sort(ranked[r].begin(), ranked[r].end());
    for (const auto& [rank, i] : ranked[r]) out[r].push_back(i);
  }
  return out;
}

std::vector<int> issue_order(const Schedule& schedule, int role, const std::vector<int>& p2p_order) {
  const std::vector<Op>& ops = schedule.roles[role].ops;
  const std::size_t n = ops.size();
  std::vector<std::vector<int>> succ(n);
  role_edges(ops, 0, succ);
  for (std::size_t j = 1; j < p2p_order.size(); ++j)
    succ[static_cast<std::size_t>(p2p_order[j - 1])].push_back(p2p_order[j]);
  std::vector<int> key(n);
  for (std::size_t i = 0; i < n; ++i) key[i] = static_cast<int>(i);
  std::vector<int> order = topo(succ, key);
  if (order.size() != n)
    throw Error(
        fmt::format("backend cuda: role {}: its pipeline messages cannot be issued in message order without "
                    "breaking a dependency (a malformed schedule)",
                    role));
  return order;
}

}  // namespace meshsim::cuda
