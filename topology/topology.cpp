// Topology building, sealing (validation) and the cut/flow queries.
#include "topology/topology.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/enum_names.h"
#include "core/error.h"

namespace meshsim {

constexpr EnumName<DeviceKind> kDeviceKindNames[] = {{DeviceKind::Gpu, "gpu"},
                                                     {DeviceKind::NvSwitch, "nvswitch"},
                                                     {DeviceKind::PcieSwitch, "pcie-switch"},
                                                     {DeviceKind::HostBridge, "host-bridge"},
                                                     {DeviceKind::Nic, "nic"},
                                                     {DeviceKind::Switch, "switch"},
                                                     {DeviceKind::LeafSwitch, "leaf"},
                                                     {DeviceKind::SpineSwitch, "spine"},
                                                     {DeviceKind::CoreSwitch, "core"}};
const char* to_string(DeviceKind k) { return enum_name(kDeviceKindNames, k); }

constexpr EnumName<LinkKind> kLinkKindNames[] = {{LinkKind::NvLink, "nvlink"},         {LinkKind::Pcie, "pcie"},
                                                 {LinkKind::InfiniBand, "infiniband"}, {LinkKind::Ethernet, "ethernet"},
                                                 {LinkKind::Generic, "generic"},       {LinkKind::Xgmi, "xgmi"}};
const char* to_string(LinkKind k) { return enum_name(kLinkKindNames, k); }
std::optional<DeviceKind> parse_device_kind(std::string_view name) { return enum_parse(kDeviceKindNames, name); }
std::string device_kind_names() { return enum_list(kDeviceKindNames); }
std::optional<LinkKind> parse_link_kind(std::string_view name) {
  return name == "ib" ? std::optional(LinkKind::InfiniBand) : enum_parse(kLinkKindNames, name);
}
std::string link_kind_names() { return enum_list(kLinkKindNames); }

int Topology::add_device(DeviceKind kind, std::string name, int node) {
  MESHSIM_ASSERT(!sealed_);
  Device d{kind, std::move(name), node, -1, kind != DeviceKind::Gpu};
  if (kind == DeviceKind::Gpu) {
    d.gpu = static_cast<int>(gpus_.size());
    gpus_.push_back(static_cast<int>(devices_.size()));
  }
  devices_.push_back(std::move(d));
  out_.emplace_back();
  return static_cast<int>(devices_.size()) - 1;
}

int Topology::add_link(int a, int b, const LinkSpec& spec) { return add_link(a, b, spec, spec); }

int Topology::add_link(int a, int b, const LinkSpec& a_to_b, const LinkSpec& b_to_a) {
  MESHSIM_ASSERT(!sealed_);
  MESHSIM_ASSERT(a >= 0 && a < num_devices() && b >= 0 && b < num_devices());
  const int id = static_cast<int>(links_.size());
  links_.push_back(DirLink{a, b, a_to_b, id + 1});
  links_.push_back(DirLink{b, a, b_to_a, id});
  out_[a].push_back(id);
  out_[b].push_back(id + 1);
  return id;
}

void Topology::set_forwards(int device, bool forwards) {
  MESHSIM_ASSERT(!sealed_);
  MESHSIM_ASSERT(device >= 0 && device < num_devices());
  devices_[device].forwards = forwards;
  if (devices_[device].kind == DeviceKind::Gpu) forwards_overridden_ = true;
}

void Topology::set_reduce_efficiency(int device, double efficiency) {
  MESHSIM_ASSERT(!sealed_);
  MESHSIM_ASSERT(device >= 0 && device < num_devices());
  if (!(efficiency >= 0 && efficiency <= 1))
    throw Error(fmt::format("device '{}': reduce_efficiency {} must be in [0, 1] (0: the switch cannot reduce)",
                            devices_[device].name, efficiency));
  if (efficiency > 0 && devices_[device].kind == DeviceKind::Gpu)
    throw Error(fmt::format("device '{}': reduce_efficiency is for switches; a GPU reduces in its kernels",
                            devices_[device].name));
  devices_[device].reduce_efficiency = efficiency;
}

namespace {

std::string display_name(const Topology& t) { return t.name().empty() ? std::string("unnamed") : t.name(); }

// Union-find over device ids.
int find_root(std::vector<int>& parent, int v) {
  while (parent[v] != v) {
    parent[v] = parent[parent[v]];
    v = parent[v];
  }
  return v;
}

}  // namespace

void Topology::seal() {
  if (sealed_) return;
  if (gpus_.empty())
    throw Error(fmt::format("topology '{}' has no GPUs; add at least one device of kind gpu", display_name(*this)));

  fabric_reduces_ = std::any_of(devices_.begin(), devices_.end(),
                                [](const Device& d) { return d.node < 0 && d.reduce_efficiency > 0; });
  // GPUs without a node label belong to node 0.
  num_nodes_ = 0;
  for (auto& d : devices_) {
    if (d.kind == DeviceKind::Gpu && d.node < 0) d.node = 0;
    num_nodes_ = std::max(num_nodes_, d.node + 1);
  }
  node_devices_.assign(static_cast<std::size_t>(num_nodes_), {});
  for (int id = 0; id < num_devices(); ++id)
    if (devices_[id].node >= 0) node_devices_[static_cast<std::size_t>(devices_[id].node)].push_back(id);

  // Topologies of GPUs only (ring, torus) route through the GPUs themselves.
  const bool gpus_only = gpus_.size() == devices_.size();
  if (gpus_only && !forwards_overridden_)
    for (auto& d : devices_) d.forwards = true;

  for (const auto& l : links_) {
    if (l.reverse < static_cast<int>(&l - links_.data())) continue;  // check each physical link once
    const auto& a = devices_[l.from].name;
    const auto& b = devices_[l.to].name;
    if (l.from == l.to) throw Error(fmt::format("link {}<->{}: a device cannot link to itself; remove the link", a, b));
    const DirLink* both[2] = {&l, &links_[l.reverse]};
    for (const DirLink* d : both) {
      const auto& from = devices_[d->from].name;
      const auto& to = devices_[d->to].name;
      if (!(d->spec.raw.bytes_per_s() > 0))
        throw Error(
            fmt::format("link {}<->{}: bandwidth must be positive ({}->{} is {} B/s); give a rate such as 25GB/s", a, b,
                        from, to, d->spec.raw.bytes_per_s()));
      if (!(d->spec.efficiency > 0 && d->spec.efficiency <= 1))
        throw Error(
            fmt::format("link {}<->{}: efficiency {} ({}->{}) must be in (0, 1]; e.g. 0.8 for 80% of the line rate", a,
                        b, d->spec.efficiency, from, to));
      if (d->spec.latency < Time())
        throw Error(fmt::format("link {}<->{}: latency must not be negative ({}->{})", a, b, from, to));
    }
  }

  if (const auto cut = unreachable_pair())
    throw Error(fmt::format(
        "topology '{}' is disconnected: gpu {} ({}) cannot reach gpu {} ({}); add a link (or a switch path) "
        "between them",
        display_name(*this), cut->first, devices_[gpus_[cut->first]].name, cut->second,
        devices_[gpus_[cut->second]].name));
  sealed_ = true;
}

void Topology::fail_link(int id) {
  DirLink& l = links_[static_cast<std::size_t>(id)];
  l.down = links_[static_cast<std::size_t>(l.reverse)].down = true;
  if (const auto cut = unreachable_pair())
    throw Error(fmt::format("with {} <-> {} down, gpu {} ({}) cannot reach gpu {} ({}): no other path",
                            devices_[l.from].name, devices_[l.to].name, cut->first, devices_[gpus_[cut->first]].name,
                            cut->second, devices_[gpus_[cut->second]].name));
}

// Reachability under the forwarding rule, over the links that are up. Components of forwarding
// devices (joined by links between forwarding devices); a GPU reaches another when they share a
// component they touch, or are linked directly.
std::optional<std::pair<int, int>> Topology::unreachable_pair() const {
  const int n = num_devices();
  std::vector<int> parent(n);
  std::iota(parent.begin(), parent.end(), 0);
  for (const auto& l : links_)
    if (!l.down && devices_[l.from].forwards && devices_[l.to].forwards)
      parent[find_root(parent, l.from)] = find_root(parent, l.to);
  std::vector<std::vector<int>> touched(gpus_.size());
  for (std::size_t g = 0; g < gpus_.size(); ++g) {
    const int dev = gpus_[g];
    auto& t = touched[g];
    if (devices_[dev].forwards) t.push_back(find_root(parent, dev));
    for (int l : out_[dev])
      if (!links_[l].down && devices_[links_[l].to].forwards) t.push_back(find_root(parent, links_[l].to));
    std::sort(t.begin(), t.end());
    t.erase(std::unique(t.begin(), t.end()), t.end());
  }
  std::vector<int> count(n, 0);
  bool common = false;
  for (const auto& t : touched)
    for (int c : t)
      if (++count[c] == static_cast<int>(gpus_.size())) common = true;
  if (!common && gpus_.size() > 1) {
    auto direct = [&](int ga, int gb) {
      for (int l : out_[gpus_[ga]])
        if (!links_[l].down && links_[l].to == gpus_[gb]) return true;
      return false;
    };
    for (int ga = 0; ga < num_gpus(); ++ga) {
      for (int gb = ga + 1; gb < num_gpus(); ++gb) {
        const auto& ta = touched[ga];
        const auto& tb = touched[gb];
        std::size_t i = 0, j = 0;
        bool shared = false;
        while (i < ta.size() && j < tb.size() && !shared) {
          if (ta[i] == tb[j])
            shared = true;
          else if (ta[i] < tb[j])
            ++i;
          else
            ++j;
        }
        if (shared || direct(ga, gb)) continue;
        return std::pair{ga, gb};
      }
    }
  }
  return std::nullopt;
}

int Topology::gpus_per_node() const {
  if (num_nodes_ <= 0) return 0;
  std::vector<int> count(num_nodes_, 0);
  for (int d : gpus_) ++count[devices_[d].node];
  for (int c : count)
    if (c != count[0]) return 0;
  return count[0];
}

namespace {

// Dinic's max-flow on the directed links (capacities in GB/s), plus a super source
// and a super sink joined to chosen devices with unbounded edges.
class MaxFlow {
 public:
  explicit MaxFlow(int n) : adj_(n), level_(n), it_(n) {}
  void add_edge(int u, int v, double cap) {
    adj_[u].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({v, cap});
    adj_[v].push_back(static_cast<int>(edges_.size()));
    edges_.push_back({u, 0.0});
  }
  double run(int s, int t) {
    double flow = 0;
    while (bfs(s, t)) {
      std::fill(it_.begin(), it_.end(), 0);
      while (true) {
        const double f = dfs(s, t, std::numeric_limits<double>::infinity());
        if (f <= kEps) break;
        flow += f;
      }
    }
    return flow;
  }

 private:
  static constexpr double kEps = 1e-9;
  struct Edge {
    int to;
    double cap;
  };
  bool bfs(int s, int t) {
    std::fill(level_.begin(), level_.end(), -1);
    std::vector<int> q{s};
    level_[s] = 0;
    for (std::size_t h = 0; h < q.size(); ++h)
      for (int e : adj_[q[h]])
        if (edges_[e].cap > kEps && level_[edges_[e].to] < 0) {
          level_[edges_[e].to] = level_[q[h]] + 1;
          q.push_back(edges_[e].to);
        }
    return level_[t] >= 0;
  }
  // Iterative augmenting-path search in the level graph (no deep recursion on big graphs).
  double dfs(int s, int t, double limit) {
    std::vector<int> stack;  // edge ids along the current path
    int u = s;
    while (true) {
      if (u == t) {
        double f = limit;
        for (int e : stack) f = std::min(f, edges_[e].cap);
        for (int e : stack) {
          edges_[e].cap -= f;
          edges_[e ^ 1].cap += f;
        }
        return f;
      }
      bool advanced = false;
      for (int& i = it_[u]; i < static_cast<int>(adj_[u].size()); ++i) {
        const int e = adj_[u][i];
        const int v = edges_[e].to;
        if (edges_[e].cap > kEps && level_[v] == level_[u] + 1) {
          stack.push_back(e);
          u = v;
          advanced = true;
          break;
        }
      }
      if (advanced) continue;
      if (stack.empty()) return 0;
      level_[u] = -1;  // dead end
      const int e = stack.back();
      stack.pop_back();
      u = edges_[e ^ 1].to;
      ++it_[u];
    }
  }
  std::vector<std::vector<int>> adj_;
  std::vector<Edge> edges_;
  std::vector<int> level_;
  std::vector<int> it_;
};

// Max-flow in bytes/s from the devices in `sources` to the devices in `sinks`.
Bandwidth flow_between(const Topology& topo, const std::vector<int>& sources, const std::vector<int>& sinks) {
  const int n = topo.num_devices();
  MaxFlow mf(n + 2);
  for (const auto& l : topo.links())
    if (!l.down) mf.add_edge(l.from, l.to, l.spec.effective().gbytes_per_s());
  constexpr double kInf = 1e18;
  for (int d : sources) mf.add_edge(n, d, kInf);
  for (int d : sinks) mf.add_edge(d, n + 1, kInf);
  return GBps(mf.run(n, n + 1));
}

}  // namespace

Bandwidth gpu_injection_bandwidth(const Topology& topo, int gpu) {
  MESHSIM_ASSERT(gpu >= 0 && gpu < topo.num_gpus());
  double sum = 0;
  for (int l : topo.out_links(topo.gpu_device(gpu)))
    if (!topo.link(l).down) sum += topo.link(l).spec.effective().bytes_per_s();
  return Bps(sum);
}

Bandwidth gpu_offnode_bandwidth(const Topology& topo, int gpu) {
  MESHSIM_ASSERT(gpu >= 0 && gpu < topo.num_gpus());
  const int node = topo.node_of_gpu(gpu);
  std::vector<int> sinks;
  for (int d = 0; d < topo.num_devices(); ++d)
    if (topo.device(d).node != node) sinks.push_back(d);
  if (sinks.empty()) return Bandwidth();
  return flow_between(topo, {topo.gpu_device(gpu)}, sinks);
}

Bandwidth bisection_bandwidth(const Topology& topo) {
  MESHSIM_ASSERT(topo.sealed());
  std::vector<int> first, second;
  if (topo.num_nodes() > 1) {
    const int half = topo.num_nodes() / 2;
    for (int g = 0; g < topo.num_gpus(); ++g)
      (topo.node_of_gpu(g) < half ? first : second).push_back(topo.gpu_device(g));
  } else {
    const int half = topo.num_gpus() / 2;
    for (int g = 0; g < topo.num_gpus(); ++g) (g < half ? first : second).push_back(topo.gpu_device(g));
  }
  if (first.empty() || second.empty()) return Bandwidth();
  return flow_between(topo, first, second);
}

std::string link_name(const Topology& topo, int link) {
  const DirLink& l = topo.link(link);
  return topo.device(l.from).name + " -> " + topo.device(l.to).name;
}

std::string link_tier(const Topology& topo, int link) {
  const DirLink& l = topo.link(link);
  const DeviceKind a = topo.device(l.from).kind, b = topo.device(l.to).kind;
  auto either = [&](DeviceKind k) { return a == k || b == k; };
  if (l.spec.kind == LinkKind::NvLink) return "nvlink";
  if (l.spec.kind == LinkKind::Pcie) return "pcie";
  if (either(DeviceKind::Nic)) return "nic";
  if (either(DeviceKind::LeafSwitch) && either(DeviceKind::SpineSwitch)) return "leaf-spine";
  if (either(DeviceKind::SpineSwitch) && either(DeviceKind::CoreSwitch)) return "spine-core";
  auto is_switch = [](DeviceKind k) {
    return k == DeviceKind::Switch || k == DeviceKind::LeafSwitch || k == DeviceKind::SpineSwitch ||
           k == DeviceKind::CoreSwitch;
  };
  if (is_switch(a) && is_switch(b)) return "switch";
  return to_string(l.spec.kind);
}

}  // namespace meshsim
