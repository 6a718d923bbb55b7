// The physical cluster: devices joined by full-duplex links, and routes between GPUs.
//
// A Topology is a graph of devices (GPUs, NVSwitches, PCIe switches, host bridges,
// NICs, InfiniBand leaf/spine/core switches). Each physical link is full duplex and
// becomes two directed links, each with its own bandwidth and latency. The bandwidth a
// flow can use is the link's raw rate times the achievable efficiency of its kind
// (what NCCL's tests reach on such a link), see docs/topology.md for the figures.
//
//   node0:  GPU0 ─┐                       GPU0 ──► NVSwitch ──► GPU1   (directed links)
//           GPU1 ─┼─ NVSwitch              route(gpu 0 -> gpu 1) = {link 0->sw, link sw->1}
//           GPU2 ─┘
//
//   Topology t;                                      // builder, then seal()
//   int g = t.add_device(DeviceKind::Gpu, "n0.gpu0", /*node=*/0);
//   int s = t.add_device(DeviceKind::NvSwitch, "n0.nvsw", 0);
//   t.add_link(g, s, LinkSpec{LinkKind::NvLink, GBps(450), 0.8, us(0.5)});
//   t.seal();                                        // validates; throws meshsim::Error
//   Router r(t);  const Path& p = r.path(0, 1);     // GPU indices, not device ids
//
// GPUs are numbered 0..num_gpus()-1 in the order they were added. A node is a
// label (server) that placements and hierarchical algorithms use.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/units.h"

namespace meshsim {

enum class DeviceKind { Gpu, NvSwitch, PcieSwitch, HostBridge, Nic, Switch, LeafSwitch, SpineSwitch, CoreSwitch };
// Xgmi: AMD's Infinity Fabric links between the GPUs of an MI300X platform (a full mesh).
enum class LinkKind { NvLink, Pcie, InfiniBand, Ethernet, Generic, Xgmi };

const char* to_string(DeviceKind k);
std::optional<DeviceKind> parse_device_kind(std::string_view name);  // inverse of to_string
std::string device_kind_names();                                     // "a, b, ..." for messages
const char* to_string(LinkKind k);
std::optional<LinkKind> parse_link_kind(std::string_view name);  // inverse of to_string (also "ib" for infiniband)
std::string link_kind_names();                                   // "a, b, ..." for messages

// Parameters of one direction of a link.
struct LinkSpec {
  LinkKind kind = LinkKind::Generic;
  Bandwidth raw;            // line rate of this direction
  double efficiency = 1.0;  // achievable fraction of `raw` (0 < e <= 1)
  Time latency;             // per-hop latency of this direction
  Bandwidth effective() const { return raw * efficiency; }
};

struct Device {
  DeviceKind kind;
  std::string name;
  int node = -1;  // server index for GPUs/NICs/in-node switches; -1 for fabric switches
  int gpu = -1;   // GPU index for GPUs, else -1
  // Whether routes may pass through this device. Switches, NICs and host bridges
  // forward; GPUs are endpoints, except in topologies made of GPUs only (ring, torus),
  // where seal() marks every GPU as forwarding. set_forwards() overrides either way.
  bool forwards = true;
  // In-network reduction (NVLink SHARP, "NVLS", on an NVSwitch; SHARP on an IB switch):
  // the fraction of its links' achievable rate that reduce and multicast traffic reaches
  // (NCCL's tuning table has 0.85 for Hopper's NVSwitch). 0: the switch cannot reduce.
  double reduce_efficiency = 0;
};

// One direction of a physical link.
struct DirLink {
  int from = 0, to = 0;  // device ids
  LinkSpec spec;
  int reverse = -1;   // id of the opposite direction
  bool down = false;  // failed (Topology::fail_link): no route uses it, it carries nothing
};

class Topology {
 public:
  Topology() = default;
  explicit Topology(std::string name) : name_(std::move(name)) {}

  // --- building (before seal) ---
  int add_device(DeviceKind kind, std::string name, int node = -1);
  // Full-duplex link with the same spec both ways, or distinct specs a->b and b->a.
  // Returns the id of the a->b direction (b->a is that id + 1).
  int add_link(int a, int b, const LinkSpec& spec);
  int add_link(int a, int b, const LinkSpec& a_to_b, const LinkSpec& b_to_a);
  // Checks: at least one GPU, positive bandwidths, 0 < efficiency <= 1, every GPU
  // reachable from every other; throws meshsim::Error naming the device or link.
  void seal();
  // Room for this many devices and directed links in all (a preset of 100k GPUs adds over a
  // million links; growing by doubling copies and page-faults them several times over).
  void reserve(std::size_t devices, std::size_t directed_links) {
    devices_.reserve(devices);
    out_.reserve(devices);
    links_.reserve(directed_links);
  }
  // Lets routes transit through `device` (or forbids it); see Device::forwards.
  void set_forwards(int device, bool forwards);
  // Marks a switch as able to reduce in-network (Device::reduce_efficiency, in (0, 1]).
  void set_reduce_efficiency(int device, double efficiency);

  // --- queries (after seal) ---
  const std::string& name() const { return name_; }
  bool sealed() const { return sealed_; }
  int num_devices() const { return static_cast<int>(devices_.size()); }
  int num_gpus() const { return static_cast<int>(gpus_.size()); }
  int num_nodes() const { return num_nodes_; }
  const Device& device(int id) const { return devices_[id]; }
  const std::vector<Device>& devices() const { return devices_; }
  const std::vector<DirLink>& links() const { return links_; }
  // A perturbation (a NIC trained down, a degraded cable): this direction's line rate times
  // `factor` (> 0). For a copy of a sealed topology, before any Router is built on it.
  // A failed cable: both directions of link `id` out of service, so routes take another path.
  // For a copy of a sealed topology, before any Router is built on it. Throws Error naming
  // two GPUs that can no longer reach each other, when the fabric has no other path.
  void fail_link(int id);
  void scale_link(int id, double factor) {
    links_[static_cast<std::size_t>(id)].spec.raw = links_[static_cast<std::size_t>(id)].spec.raw * factor;
  }
  const DirLink& link(int id) const { return links_[id]; }
  int gpu_device(int gpu) const { return gpus_[gpu]; }
  int node_of_gpu(int gpu) const { return devices_[gpus_[gpu]].node; }
  // The devices labelled with node `node` (GPUs, NICs, switches inside it), by id; after seal().
  const std::vector<int>& node_devices(int node) const { return node_devices_[static_cast<std::size_t>(node)]; }
  int gpus_per_node() const;  // when all nodes hold the same number of GPUs, else 0
  // Whether some switch outside the nodes reduces in-network (SHARP on the fabric).
  bool fabric_reduces() const { return fabric_reduces_; }
  // Outgoing directed link ids of a device.
  const std::vector<int>& out_links(int device) const { return out_[device]; }
  // Free-form description (preset name + parameters) shown by `topology show`.
  std::string description;
  // Whether collectives run under a GPU runtime's protocols (NCCL's LL, LL128, Simple:
  // schedule/protocol.h), which add a launch and per-step latencies and cut the payload
  // rate; false: the bare alpha-beta model (synthetic references, CPU machine profiles).
  bool protocols = false;
  // The GPUs' compute capability x 10 (90: Hopper), for the runtime's tables that go by
  // architecture (NCCL's LL rate cap, schedule/protocol.h). Presets set their GPU's; a YAML
  // topology says `gpu_arch: sm80` (default sm90, meshsim's default GPU, the H100).
  int gpu_sm = 90;

 private:
  // Two GPUs that cannot reach each other over the links that are up, if any.
  std::optional<std::pair<int, int>> unreachable_pair() const;

  std::string name_;
  std::vector<Device> devices_;
  std::vector<int> gpus_;
  std::vector<DirLink> links_;
  std::vector<std::vector<int>> out_;
  std::vector<std::vector<int>> node_devices_;
  int num_nodes_ = 0;
  bool sealed_ = false;
  bool fabric_reduces_ = false;
  bool forwards_overridden_ = false;  // set_forwards() was called on a GPU
};

// A route: directed link ids from the source GPU to the destination GPU, with the
// sum of per-hop latencies and the slowest effective bandwidth along it.
struct Path {
  std::vector<int> links;
  Time latency;
  Bandwidth bottleneck;
};

// What the cost model reads of a route, without its links (Router::summary).
struct RouteSummary {
  Time latency;
  Bandwidth bottleneck;
  int hops = 0;
  int first_link = -1;      // -1 for a GPU to itself
  bool nvlink_only = true;  // every link of the route is NVLink
};

// Deterministic routing: shortest path in hops (among paths of equal hop count, the
// least total latency: this keeps host-bridge detours off inter-node routes); where
// several equal-cost next hops remain (ECMP across spines), one is chosen by a hash of
// (src, dst), so a pair always uses the same path and different pairs spread over the
// spines. Routes never pass through a device whose `forwards` is false. Paths are
// computed on first use and cached; a Router belongs to one simulation (not thread-safe).
//
// How a route is found (the route is the same either way; `Search` exists so that tests can hold
// the two to each other): a breadth-first search from the source that later queries from the same
// source resume (cheap when one source asks for many destinations: an all-to-all), or a search
// from both ends that meet in the middle and then walks only the shortest-path DAG between them
// (cheap for a lone far pair: a few hundred devices of a 100k-GPU fat-tree instead of all of
// them). `Auto` takes the second unless the source has just asked for several routes in a row.
class Router {
 public:
  enum class Search { Auto, FromSource, BothEnds };
  explicit Router(const Topology& topo, Search search = Search::Auto);
  const Path& path(int src_gpu, int dst_gpu);
  // The same route's latency, bottleneck, hops, first link and kinds, cached apart from the
  // paths: a group's parameters over 100k ranks read 500k routes and keep no link lists.
  const RouteSummary& summary(int src_gpu, int dst_gpu);
  // The same summary, computed and not kept: for a scan that reads each pair once (a group's
  // neighbour pairs over 100k ranks), where storing 500k answers costs more than finding them.
  RouteSummary summary_once(int src_gpu, int dst_gpu);
  const Topology& topology() const { return topo_; }

 private:
  // The summary of a pair not in summaries_: from its cached path, else from a search.
  RouteSummary new_summary(int src_gpu, int dst_gpu, std::uint64_t key);
  // The route's links, found as the comment above says (src_gpu != dst_gpu).
  void find_route(int src_gpu, int dst_gpu, std::uint64_t key, std::vector<int>& links);
  void search_from_source(int src, int dst);
  void search_both_ends(int src, int dst);
  void collect_candidates(int v, int level, int src);
  int degree(int device) const {
    return adj_begin_[static_cast<std::size_t>(device) + 1] - adj_begin_[static_cast<std::size_t>(device)];
  }
  // Marks a new epoch for the forward (and backward) scratch; clears on wrap-around.
  void new_epoch();

  const Topology& topo_;
  Search search_;
  std::unordered_map<std::uint64_t, Path> cache_;
  std::unordered_map<std::uint64_t, RouteSummary> summaries_;
  std::vector<int> scratch_links_;
  // scratch for the BFS, sized once; an entry is valid only when its stamp equals
  // epoch_, so a lookup touches just the region it explores.
  std::vector<int> dist_;
  std::vector<int> queue_;
  std::vector<std::int64_t> lat_;  // least latency (ps) over shortest-hop paths
  std::vector<std::uint32_t> stamp_;
  std::uint32_t epoch_ = 0;
  struct Edge {
    int to;
    std::int64_t latency_ps;
  };
  std::vector<int> adj_begin_;  // CSR: device d's edges are adj_[adj_begin_[d] .. adj_begin_[d+1])
  std::vector<Edge> adj_;
  std::vector<int> adj_link_;  // the link id of each edge of adj_
  // Device d's links that are up, in the order of Topology::out_links.
  std::span<const int> live_links(int d) const {
    return {adj_link_.data() + adj_begin_[static_cast<std::size_t>(d)],
            adj_link_.data() + adj_begin_[static_cast<std::size_t>(d) + 1]};
  }
  std::vector<char> forwards_;
  int bfs_src_ = -1;          // the source of the resumable BFS held in the scratch (-1: none)
  std::size_t bfs_head_ = 0;  // next queue entry to expand
  int last_src_ = -1;         // the source of the last cache miss, and how many misses in a row it had
  int streak_ = 0;
  // The search from the destination (over links reversed): hop counts to it, valid where
  // bstamp_ equals epoch_, and the devices it reached level by level (level k is
  // bq_[bstart_[k] .. bstart_[k+1])). queue_ holds the forward search's the same way, level k
  // starting at fstart_[k] (either search).
  std::vector<int> bdist_;
  std::vector<std::uint32_t> bstamp_;
  std::vector<int> bq_;
  std::vector<std::size_t> fstart_, bstart_;
  std::vector<int> candidates_;
};

// "n0.gpu0 -> n0.nvsw": a directed link by its two devices.
std::string link_name(const Topology& topo, int link);
// Which tier of the cluster a link belongs to, for reports of link load: "nvlink", "pcie",
// "nic" (a NIC and its leaf switch), "leaf-spine", "spine-core", "switch" (other switch to
// switch links) or the link kind's name.
std::string link_tier(const Topology& topo, int link);

// Injection bandwidth of one GPU: the sum of effective bandwidths of its outgoing links
// (what it can push into the fabric at once), and the bandwidth that leaves its node.
Bandwidth gpu_injection_bandwidth(const Topology& topo, int gpu);
// The bandwidth one GPU alone can push out of its node: a max-flow from the GPU to
// every device outside its node (fabric switches and other nodes' devices).
Bandwidth gpu_offnode_bandwidth(const Topology& topo, int gpu);
// Bisection bandwidth: the minimum, over balanced cuts of the nodes into two halves
// along node index order (first half / second half), of the effective bandwidth
// crossing the cut in one direction, computed as a max-flow over the directed links.
Bandwidth bisection_bandwidth(const Topology& topo);

}  // namespace meshsim
