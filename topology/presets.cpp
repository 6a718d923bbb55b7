// The preset table: each entry carries its catalog record (name, summary, parameters
// with defaults) and its builder, so the CLI help, the validation of parameters and the
// builders come from one list. Figures and pictures: docs/topology.md.
#include "topology/presets.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string_view>

#include "core/error.h"
#include "topology/fabric.h"

namespace meshsim {

namespace {

// One preset's parameters, looked up with defaults from its catalog record.
class Params {
 public:
  Params(const PresetInfo& info, const PresetParams& given) : info_(info), given_(given) {
    for (const auto& [key, value] : given) {
      bool known = false;
      for (const auto& p : info.params) known = known || p.name == key;
      if (!known) {
        std::string valid;
        for (const auto& p : info.params) valid += (valid.empty() ? "" : ", ") + p.name;
        throw Error(fmt::format("preset {}: unknown parameter '{}'; valid parameters: {}", info.name, key, valid));
      }
    }
  }

  std::string text(const std::string& key) const {
    if (auto it = given_.find(key); it != given_.end()) return it->second;
    for (const auto& p : info_.params)
      if (p.name == key) return p.default_value;
    MESHSIM_ASSERT(false && "parameter missing from the catalog");
    return {};
  }
  bool given(const std::string& key) const { return given_.count(key) != 0; }
  std::string field(const std::string& key) const { return fmt::format("preset {}: {}", info_.name, key); }

  int integer(const std::string& key, int min_value) const {
    const std::string s = text(key);
    const std::optional<int> v = parse_int(s);
    if (!v)
      throw Error(
          fmt::format("{}: '{}' is not an integer; write e.g. {}={}", field(key), s, key, std::max(min_value, 1)));
    if (*v < min_value)
      throw Error(fmt::format("{}: {} is too small; it must be at least {}", field(key), *v, min_value));
    return *v;
  }
  double real(const std::string& key, double lo, double hi, bool lo_open) const {
    const std::string s = text(key);
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != s.size() || !std::isfinite(v))
      throw Error(fmt::format("{}: '{}' is not a number", field(key), s));
    if ((lo_open ? v <= lo : v < lo) || v > hi)
      throw Error(
          fmt::format("{}: {} is out of range; it must be in {}{}, {}]", field(key), s, lo_open ? "(" : "[", lo, hi));
    return v;
  }
  double efficiency(const std::string& key) const { return real(key, 0.0, 1.0, true); }
  Bandwidth bandwidth(const std::string& key) const { return parse_bandwidth(text(key), field(key)); }
  Time time(const std::string& key) const { return parse_time(text(key), field(key)); }
  LinkSpec link(LinkKind kind, const std::string& prefix) const {
    return LinkSpec{kind, bandwidth(prefix + "_bandwidth"), efficiency(prefix + "_efficiency"),
                    time(prefix + "_latency")};
  }
  std::string choice(const std::string& key, std::initializer_list<std::string_view> options) const {
    const std::string s = text(key);
    std::string list;
    for (auto o : options) {
      if (s == o) return s;
      list += (list.empty() ? "" : ", ") + std::string(o);
    }
    throw Error(fmt::format("{}: '{}' is not one of {}", field(key), s, list));
  }
  // Effective values of all parameters, for Topology::description.
  std::string describe() const {
    std::string out = info_.name;
    for (const auto& p : info_.params) out += fmt::format(" {}={}", p.name, text(p.name));
    return out;
  }
  std::string topology_name() const {
    std::string out = info_.name;
    char sep = ':';
    for (const auto& [k, v] : given_) {
      out += fmt::format("{}{}={}", sep, k, v);
      sep = ',';
    }
    return out;
  }

 private:
  const PresetInfo& info_;
  const PresetParams& given_;
};

// ---- parameter groups shared by several presets ----------------------------------
std::vector<PresetParamInfo> link_params(const std::string& prefix, const std::string& bw, const std::string& eff,
                                         const std::string& lat, const std::string& what) {
  return {{prefix + "_bandwidth", bw, "line rate per direction of each " + what + " link"},
          {prefix + "_efficiency", eff, "achievable fraction of the " + what + " line rate"},
          {prefix + "_latency", lat, "latency per " + what + " hop"}};
}
void append(std::vector<PresetParamInfo>& to, const std::vector<PresetParamInfo>& more) {
  to.insert(to.end(), more.begin(), more.end());
}
std::vector<PresetParamInfo> ib_params(const std::string& nic_bw, const std::string& eff, const std::string& ib_lat,
                                       const std::string& sw_lat) {
  return {{"nic_bandwidth", nic_bw, "line rate of each InfiniBand NIC port"},
          {"nic_efficiency", eff, "achievable fraction of the NIC line rate (ib_write_bw)"},
          {"ib_latency", ib_lat, "latency of a NIC<->leaf hop (includes the HCA)"},
          {"switch_latency", sw_lat, "latency of a switch<->switch hop"},
          {"sharp_efficiency", "0",
           "SHARP on the IB switches: fraction of the link rate in-network reduction reaches (0: off, as NCCL's "
           "default NCCL_COLLNET_ENABLE=0)"},
          {"link_layer", "infiniband",
           "the NICs' link layer: infiniband or ethernet (RoCE; NCCL runs both as IB verbs, so only the link kind "
           "named in reports differs)"},
          {"routing", "ecmp",
           "between leaves: ecmp (each flow hashed onto one spine) or adaptive (adaptive routing, as InfiniBand AR and "
           "Spectrum-X: every flow spread over all uplinks, the uplinks pooled)"}};
}
// SHARP: every leaf, spine and core switch of the fabric reduces at the preset's
// sharp_efficiency (0: none).
void set_sharp(Topology& t, const Params& p) {
  const double e = p.real("sharp_efficiency", 0.0, 1.0, false);
  for (int d = 0; d < t.num_devices(); ++d) {
    const DeviceKind k = t.device(d).kind;
    if (k == DeviceKind::LeafSwitch || k == DeviceKind::SpineSwitch || k == DeviceKind::CoreSwitch)
      t.set_reduce_efficiency(d, e);
  }
}
FabricLinks fabric_links(const Params& p) {
  FabricLinks f;
  const LinkKind kind =
      p.choice("link_layer", {"infiniband", "ethernet"}) == "ethernet" ? LinkKind::Ethernet : LinkKind::InfiniBand;
  f.nic = LinkSpec{kind, p.bandwidth("nic_bandwidth"), p.efficiency("nic_efficiency"), p.time("ib_latency")};
  f.uplink = f.nic;
  f.uplink.latency = p.time("switch_latency");
  f.adaptive = p.choice("routing", {"ecmp", "adaptive"}) == "adaptive";
  return f;
}
double oversubscription(const Params& p) { return p.real("oversubscription", 1.0, 1e6, false); }

// ---- switch: every GPU on one crossbar -------------------------------------------
Topology build_switch(const Params& p) {
  const int nodes = p.integer("nodes", 1);
  const int gpn = p.integer("gpus_per_node", 1);
  const LinkSpec spec{LinkKind::Generic, p.bandwidth("bandwidth"), p.efficiency("efficiency"), p.time("latency")};
  Topology t(p.topology_name());
  const int sw = t.add_device(DeviceKind::Switch, "switch");
  t.set_reduce_efficiency(sw, p.real("nvls_efficiency", 0.0, 1.0, false));
  for (int g = 0; g < nodes * gpn; ++g)
    t.add_link(t.add_device(DeviceKind::Gpu, fmt::format("n{}.gpu{}", g / gpn, g % gpn), g / gpn), sw, spec);
  t.description = p.describe();
  return t;
}

// ---- dgx-h100 / dgx-h200 / dgx-b200 / dgx-a100 / gb200-nvl72 / spectrum-x / mi300x --------
//   node n:  gpu_i ══ nvsw (NVLink)     gpu_i ── pcie_i ── nic_i ══ rail/leaf (IB)
//                                                  └── hb (host bridge, CPU)
// mi300x: no NVSwitch; gpu_i ══ gpu_j for every pair (xGMI, a full mesh).
// hosts_per_leaf=auto: 32 nodes per rail leaf (a scalable unit: one port per node); for a
// fat-tree, the nodes whose NICs fill 32 leaf ports (4 of 8 GPUs), at least one (an NVL72 rack).
// TwoRacks (gb200-nvl36x2): the domain's GPUs in two racks, each half on its rack's NVLink switch
// trays (one NvSwitch device per rack, n.nvsw0 and n.nvsw1), the two joined by the trays'
// front-panel NVLink cables (cross_rack_bandwidth).
enum class ScaleUp { NvSwitch, XgmiMesh, TwoRacks };
Topology build_nodes(const Params& p, ScaleUp scale_up) {
  const int nodes = p.integer("nodes", 1);
  const int gpn = p.integer("gpus_per_node", 1);
  const std::string inter = p.choice("inter", {"rail", "fat-tree"});
  const std::string hpl_text = p.text("hosts_per_leaf");
  const int hosts_per_leaf =
      hpl_text == "auto" ? (inter == "rail" ? 32 : std::max(1, 32 / gpn)) : p.integer("hosts_per_leaf", 1);
  const double ratio = oversubscription(p);
  const bool mesh = scale_up == ScaleUp::XgmiMesh, two_racks = scale_up == ScaleUp::TwoRacks;
  if (two_racks && gpn % 2 != 0)
    throw Error(fmt::format("{}: {} GPUs do not split over two racks; use an even number (36 a rack: 72)",
                            p.field("gpus_per_node"), gpn));
  const LinkSpec gpu_link = mesh ? p.link(LinkKind::Xgmi, "xgmi") : p.link(LinkKind::NvLink, "nvlink");
  const double nvls = mesh ? 0.0 : p.real("nvls_efficiency", 0.0, 1.0, false);
  const LinkSpec pcie = p.link(LinkKind::Pcie, "pcie");
  const FabricLinks fab = fabric_links(p);

  Topology t(p.topology_name());
  // Per node: its switches and host bridge, and per GPU a GPU, PCIe switch and NIC with four
  // links; the fabric adds about two links per NIC (the NIC's and its share of the uplinks).
  const auto n = static_cast<std::size_t>(nodes), g = static_cast<std::size_t>(gpn);
  t.reserve(n * (3 + 3 * g), 2 * n * (g * (mesh ? (g - 1) / 2 + 3 : 4) + 1 + 2 * g));
  std::vector<std::vector<int>> nics(nodes);
  for (int n = 0; n < nodes; ++n) {
    const std::string nvsw_name = fmt::format("n{}.nvsw{}", n, two_racks ? "0" : "");
    const int nvsw = gpn > 1 && !mesh ? t.add_device(DeviceKind::NvSwitch, nvsw_name, n) : -1;
    if (nvsw >= 0) t.set_reduce_efficiency(nvsw, nvls);
    int nvsw1 = -1;  // the second rack's switch trays (TwoRacks)
    if (two_racks) {
      nvsw1 = t.add_device(DeviceKind::NvSwitch, fmt::format("n{}.nvsw1", n), n);
      t.set_reduce_efficiency(nvsw1, nvls);
      LinkSpec cables = gpu_link;
      cables.raw = p.bandwidth("cross_rack_bandwidth");
      t.add_link(nvsw, nvsw1, cables);
    }
    const int hb = t.add_device(DeviceKind::HostBridge, fmt::format("n{}.hb", n), n);
    std::vector<int> node_gpus;
    for (int i = 0; i < gpn; ++i) {
      const int gpu = t.add_device(DeviceKind::Gpu, fmt::format("n{}.gpu{}", n, i), n);
      if (nvsw >= 0) t.add_link(gpu, two_racks && i >= gpn / 2 ? nvsw1 : nvsw, gpu_link);
      if (mesh)
        for (int peer : node_gpus) t.add_link(peer, gpu, gpu_link);
      node_gpus.push_back(gpu);
      const int sw = t.add_device(DeviceKind::PcieSwitch, fmt::format("n{}.pcie{}", n, i), n);
      const int nic = t.add_device(DeviceKind::Nic, fmt::format("n{}.nic{}", n, i), n);
      t.add_link(gpu, sw, pcie);
      t.add_link(nic, sw, pcie);
      t.add_link(sw, hb, pcie);
      nics[n].push_back(nic);
    }
  }
  if (nodes > 1) {
    if (inter == "rail")
      add_rail_fabric(t, nics, hosts_per_leaf, ratio, fab);
    else
      add_fat_tree_fabric(t, nics, hosts_per_leaf, ratio, /*levels=*/2, /*leaves_per_pod=*/0, fab);
  }
  set_sharp(t, p);
  t.description = p.describe();
  return t;
}

Topology build_dgx(const Params& p) { return build_nodes(p, ScaleUp::NvSwitch); }
Topology build_mi300x(const Params& p) { return build_nodes(p, ScaleUp::XgmiMesh); }
Topology build_nvl36x2(const Params& p) { return build_nodes(p, ScaleUp::TwoRacks); }

// GPU -> NVSwitch -> GPU in 0.5 us: NCCL's calibration times a whole LL ring step over
// NVLink, wire and flag polling together, at 0.6 us (schedule/protocol.h), so the wire
// itself cannot take the 1 us that 0.5 us per link would give.
constexpr const char* kNvlinkHopLatency = "0.25us";

// NVLink SHARP (NVLS): NVSwitch gen3 (H100/H200 systems) reduces and multicasts in the
// switch; NCCL's tuning table rates its traffic at 0.85 of the NVLink rate on Hopper, which
// with the ring's 0.80 gives 476 GB/s all-reduce busbw on 8 H100 (measured: ~480).
// NVSwitch gen2 (A100) cannot: 0.
PresetParamInfo nvls_param(const std::string& eff) {
  return {"nvls_efficiency", eff,
          "NVLink SHARP: fraction of the NVLink rate in-switch reduce/multicast traffic reaches (0: none)"};
}

// The nodes and their fabric's layout, for every preset built by build_nodes.
std::vector<PresetParamInfo> node_layout_params() {
  return {{"nodes", "1", "number of DGX nodes"},
          {"gpus_per_node", "8", "GPUs per node (each with its own PCIe switch and NIC)"},
          {"inter", "rail", "between nodes: rail (NIC i of every node on rail leaf i) or fat-tree (leaves by node)"},
          {"hosts_per_leaf", "auto",
           "nodes per leaf switch: auto = 32 for rail (one scalable unit), for fat-tree the nodes filling 32 NIC ports "
           "(4 of 8 GPUs, at least 1)"},
          {"oversubscription", "1", "leaf downlink capacity / uplink capacity"}};
}

// Sets parameter `name`'s default (when `value` is not empty) and its help (when `help` is not
// empty) in a preset's list: a preset that is another's with a few figures changed.
void override_param(std::vector<PresetParamInfo>& v, const std::string& name, const std::string& value,
                    const std::string& help = "") {
  for (PresetParamInfo& q : v) {
    if (q.name != name) continue;
    if (!value.empty()) q.default_value = value;
    if (!help.empty()) q.help = help;
    return;
  }
  MESHSIM_ASSERT(false && "override of a parameter the preset does not have");
}

std::vector<PresetParamInfo> dgx_params(const std::string& nvlink_bw, const std::string& nvlink_eff,
                                        const std::string& nvls_eff, const std::string& pcie_bw,
                                        const std::string& pcie_eff, const std::string& nic_bw) {
  std::vector<PresetParamInfo> v = node_layout_params();
  append(v, link_params("nvlink", nvlink_bw, nvlink_eff, kNvlinkHopLatency, "GPU<->NVSwitch NVLink"));
  v.push_back(nvls_param(nvls_eff));
  append(v, link_params("pcie", pcie_bw, pcie_eff, "0.5us", "PCIe"));
  append(v, ib_params(nic_bw, "0.92", "0.6us", "0.15us"));
  return v;
}

// GB200 NVL72: the rack is one node of 72 GPUs on one NVLink domain (its 18 NVLink switch chips
// as one crossbar, as a DGX's four NVSwitches are one), each GPU with its own NIC.
std::vector<PresetParamInfo> nvl72_params() {
  std::vector<PresetParamInfo> v = dgx_params("900GB/s", "0.80", "0.74", "63GB/s", "0.85", "400Gb/s");
  override_param(v, "nodes", "", "number of NVL72 racks");
  override_param(v, "gpus_per_node", "72",
                 "GPUs per rack, all on one NVLink domain (each with its own PCIe link and NIC)");
  return v;
}

// Spectrum-X: HGX H100 nodes whose GPUs each have a 400 GbE BlueField-3 SuperNIC on a Spectrum-4
// RoCE fabric with adaptive routing (fabric.h: the uplinks pooled). The NICs' achievable fraction
// is the InfiniBand presets' measured 0.92 times RoCEv2's header cost relative to InfiniBand's at a
// 4096-byte MTU: 82 bytes a packet on Ethernet (preamble, MAC header, FCS and gap 38, IPv4 20, UDP
// 8, BTH 12, ICRC 4) against 26 on InfiniBand (LRH 8, BTH 12, ICRC 4, VCRC 2), 4122 / 4178 = 0.987.
// No primary figure for a Spectrum-4 hop's latency was found: the InfiniBand presets' are kept.
std::vector<PresetParamInfo> spectrum_x_params() {
  std::vector<PresetParamInfo> v = dgx_params("450GB/s", "0.80", "0.85", "63GB/s", "0.85", "400Gb/s");
  override_param(v, "nic_efficiency", "0.908");
  override_param(v, "link_layer", "ethernet");
  override_param(v, "routing", "adaptive");
  return v;
}

// MI300X platform: 8 GPUs, each with seven xGMI (Infinity Fabric) links, one to every peer (AMD's
// ROCm documentation of the MI300 node). A link is rated 64 GB/s a direction; CRC and protocol
// leave about 48 of it (AMD's ROCm blog on RCCL and xGMI, March 2025; RCCL's own per-link figure
// for gfx94x is 48 GB/s): 0.75. The GPU-to-GPU latency is NVLink's GPU-switch-GPU trip (two
// 0.25 us hops), an assumption: no per-hop figure was found. PCIe Gen5 x16 to the host and a
// 400 Gb/s NDR ConnectX-7 per GPU (Azure's ND MI300X v5).
std::vector<PresetParamInfo> mi300x_params() {
  std::vector<PresetParamInfo> v = node_layout_params();
  override_param(v, "nodes", "", "number of MI300X nodes");
  override_param(v, "gpus_per_node", "",
                 "GPUs per node, every two joined by an xGMI link (each with its own PCIe switch and NIC)");
  append(v, link_params("xgmi", "64GB/s", "0.75", "0.5us", "GPU<->GPU xGMI"));
  append(v, link_params("pcie", "63GB/s", "0.85", "0.5us", "PCIe"));
  append(v, ib_params("400Gb/s", "0.92", "0.6us", "0.15us"));
  return v;
}

// GB200 NVL36x2: the 72 GPUs of one NVLink domain in two racks of 36 (9 compute trays and 9 NVLink
// switch trays a rack, joined through the switch trays' front-panel ports: NVIDIA's multi-node
// NVLink tuning guide and NVOS manual). The cable count between the racks was not found: the
// default takes them at the GPUs' full rate (36 x 900 GB/s a direction), a parameter to vary.
std::vector<PresetParamInfo> nvl36x2_params() {
  std::vector<PresetParamInfo> v = nvl72_params();
  override_param(v, "nodes", "", "number of NVL36x2 domains (pairs of racks)");
  override_param(v, "gpus_per_node", "", "GPUs per domain, half in each rack (each with its own PCIe link and NIC)");
  v.push_back({"cross_rack_bandwidth", "32.4TB/s",
               "NVLink capacity between the two racks' switch trays, a direction (36 GPUs x 900 GB/s: an "
               "assumption, the cable count was not found)"});
  return v;
}

// ---- pcie-node: GPUs behind PCIe switches under the host bridge ----------------------
//   gpu gpu gpu gpu  nic        gpu gpu gpu gpu  nic
//     └──┴──┬──┴───┘             └──┴──┬──┴───┘
//         pcie0 ──────── hb ──────── pcie1
Topology build_pcie_node(const Params& p) {
  const int nodes = p.integer("nodes", 1);
  const int gpn = p.integer("gpus_per_node", 1);
  const int gps = p.integer("gpus_per_switch", 1);
  const int nics_per_node = p.integer("nics_per_node", 1);
  const int hosts_per_leaf = p.integer("hosts_per_leaf", 1);
  if (gpn % gps != 0)
    throw Error(fmt::format("{}: {} GPUs per switch do not divide gpus_per_node={}; pick a divisor",
                            p.field("gpus_per_switch"), gps, gpn));
  const int switches = gpn / gps;
  if (nics_per_node > switches)
    throw Error(fmt::format("{}: {} NICs but only {} PCIe switches per node; use nics_per_node <= {}",
                            p.field("nics_per_node"), nics_per_node, switches, switches));
  const LinkSpec pcie = p.link(LinkKind::Pcie, "pcie");
  const FabricLinks fab = fabric_links(p);

  Topology t(p.topology_name());
  std::vector<std::vector<int>> nics(nodes);
  for (int n = 0; n < nodes; ++n) {
    const int hb = t.add_device(DeviceKind::HostBridge, fmt::format("n{}.hb", n), n);
    std::vector<int> sws;
    for (int s = 0; s < switches; ++s) {
      sws.push_back(t.add_device(DeviceKind::PcieSwitch, fmt::format("n{}.pcie{}", n, s), n));
      t.add_link(sws.back(), hb, pcie);
    }
    for (int i = 0; i < gpn; ++i)
      t.add_link(t.add_device(DeviceKind::Gpu, fmt::format("n{}.gpu{}", n, i), n), sws[i / gps], pcie);
    for (int k = 0; k < nics_per_node; ++k) {
      const int nic = t.add_device(DeviceKind::Nic, fmt::format("n{}.nic{}", n, k), n);
      t.add_link(nic, sws[k * switches / nics_per_node], pcie);
      nics[n].push_back(nic);
    }
  }
  if (nodes > 1) add_fat_tree_fabric(t, nics, hosts_per_leaf, 1.0, 2, 0, fab);
  set_sharp(t, p);
  t.description = p.describe();
  return t;
}

// ---- frontera-rtx: 4 Quadro RTX 5000 on PCIe 3.0, one FDR NIC per node ---------------
//   gpu0 gpu1 gpu2 gpu3
//     └────┴──┬─┴────┘
//            hb ── nic ══ leaf ══ spine ══ leaf ...
Topology build_frontera(const Params& p) {
  const int nodes = p.integer("nodes", 1);
  const int gpn = p.integer("gpus_per_node", 1);
  const int hosts_per_leaf = p.integer("hosts_per_leaf", 1);
  const LinkSpec pcie = p.link(LinkKind::Pcie, "pcie");
  const LinkSpec nic_pcie = p.link(LinkKind::Pcie, "nic_pcie");
  FabricLinks fab;
  fab.nic = p.link(LinkKind::InfiniBand, "ib");
  fab.uplink = fab.nic;
  fab.uplink.latency = p.time("switch_latency");

  Topology t(p.topology_name());
  std::vector<std::vector<int>> nics(nodes);
  for (int n = 0; n < nodes; ++n) {
    const int hb = t.add_device(DeviceKind::HostBridge, fmt::format("n{}.hb", n), n);
    for (int i = 0; i < gpn; ++i)
      t.add_link(t.add_device(DeviceKind::Gpu, fmt::format("n{}.gpu{}", n, i), n), hb, pcie);
    const int nic = t.add_device(DeviceKind::Nic, fmt::format("n{}.nic", n), n);
    t.add_link(nic, hb, nic_pcie);
    nics[n].push_back(nic);
  }
  if (nodes > 1) add_fat_tree_fabric(t, nics, hosts_per_leaf, 1.0, 2, 0, fab);
  t.description = p.describe();
  return t;
}

// ---- fat-tree: NVSwitch nodes, a NIC per GPU, 2 or 3 switch levels -------------------
Topology build_fat_tree(const Params& p) {
  const int nodes = p.integer("nodes", 1);
  const int gpn = p.integer("gpus_per_node", 1);
  const int levels = p.integer("levels", 2);
  if (levels > 3) throw Error(fmt::format("{}: {} levels; use 2 or 3", p.field("levels"), levels));
  const int hosts_per_leaf = p.integer("hosts_per_leaf", 1);
  const int leaves_per_pod = p.integer("leaves_per_pod", 1);
  const double ratio = oversubscription(p);
  const LinkSpec nvlink = p.link(LinkKind::NvLink, "nvlink");
  const double nvls = p.real("nvls_efficiency", 0.0, 1.0, false);
  const LinkSpec pcie = p.link(LinkKind::Pcie, "pcie");
  const FabricLinks fab = fabric_links(p);

  Topology t(p.topology_name());
  // Per node a switch and per GPU a GPU and a NIC with two links; the fabric about two links
  // per NIC (see build_nodes).
  const auto n = static_cast<std::size_t>(nodes), g = static_cast<std::size_t>(gpn);
  t.reserve(n * (1 + 2 * g) + n * g / 2, 2 * n * g * 4);
  std::vector<std::vector<int>> nics(nodes);
  for (int n = 0; n < nodes; ++n) {
    const int nvsw = gpn > 1 ? t.add_device(DeviceKind::NvSwitch, fmt::format("n{}.nvsw", n), n) : -1;
    if (nvsw >= 0) t.set_reduce_efficiency(nvsw, nvls);
    for (int i = 0; i < gpn; ++i) {
      const int gpu = t.add_device(DeviceKind::Gpu, fmt::format("n{}.gpu{}", n, i), n);
      if (nvsw >= 0) t.add_link(gpu, nvsw, nvlink);
      const int nic = t.add_device(DeviceKind::Nic, fmt::format("n{}.nic{}", n, i), n);
      t.add_link(gpu, nic, pcie);
      nics[n].push_back(nic);
    }
  }
  add_fat_tree_fabric(t, nics, hosts_per_leaf, ratio, levels, leaves_per_pod, fab);
  set_sharp(t, p);
  t.description = p.describe();
  return t;
}

// ---- ring / torus: GPUs linked directly, forwarding for each other ------------------
struct DirectParams {
  LinkSpec spec;
  int gpn;
};
DirectParams direct_params(const Params& p, int gpus) {
  const int gpn = p.integer("gpus_per_node", 1);
  if (gpus % gpn != 0)
    throw Error(fmt::format("{}: {} does not divide the {} GPUs; pick a divisor", p.field("gpus_per_node"), gpn, gpus));
  return {LinkSpec{LinkKind::Generic, p.bandwidth("bandwidth"), p.efficiency("efficiency"), p.time("latency")}, gpn};
}

// Torus over dims (a ring is a 1-D torus); GPU index is row-major, last dim fastest.
Topology build_torus(const Params& p, const std::vector<int>& dims) {
  int total = 1;
  for (int d : dims) total *= d;
  const DirectParams dp = direct_params(p, total);
  Topology t(p.topology_name());
  std::vector<int> dev(total);
  for (int g = 0; g < total; ++g) dev[g] = t.add_device(DeviceKind::Gpu, fmt::format("gpu{}", g), g / dp.gpn);
  int stride = 1;
  for (int k = static_cast<int>(dims.size()) - 1; k >= 0; --k) {
    const int size = dims[k];
    for (int g = 0; g < total; ++g) {
      const int c = (g / stride) % size;
      if (size == 1 || (size == 2 && c == 1)) continue;  // no self links, no double link for size 2
      const int next = g + ((c + 1) % size - c) * stride;
      t.add_link(dev[g], dev[next], dp.spec);
    }
    stride *= size;
  }
  for (int d : dev) t.set_forwards(d, true);
  t.description = p.describe();
  return t;
}

std::vector<PresetParamInfo> direct_link_params() {
  return {{"gpus_per_node", "1", "GPUs per node label"},
          {"bandwidth", "100GB/s", "line rate per direction of each link"},
          {"efficiency", "1.0", "achievable fraction of the line rate"},
          {"latency", "1us", "latency per hop"}};
}

// ---- the table -------------------------------------------------------------------
struct PresetEntry {
  PresetInfo info;
  Topology (*build)(const Params&);
};

std::vector<PresetParamInfo> concat(std::vector<PresetParamInfo> a, const std::vector<PresetParamInfo>& b) {
  append(a, b);
  return a;
}

const std::vector<PresetEntry>& entries() {
  static const std::vector<PresetEntry> table = [] {
    std::vector<PresetEntry> v;
    v.push_back({{"dgx-h100",
                  "8 H100 per node on NVSwitch (NVLink4 450 GB/s), PCIe Gen5, 8 x 400 Gb/s NDR NICs; rail or fat-tree",
                  dgx_params("450GB/s", "0.80", "0.85", "63GB/s", "0.85", "400Gb/s")},
                 build_dgx});
    // HGX/DGX H200: the H100 node's NVLink4 NVSwitch, PCIe Gen5 and NDR NICs around H200 GPUs (141 GB
    // HBM3e at 4.8 TB/s: the h200 compute preset), NVIDIA's H200 datasheet; nccl-tests' 479.98 GB/s
    // all-reduce busbw on 8 H200s (docs/validation/published.md) is the H100 node's NVLS figure.
    v.push_back({{"dgx-h200",
                  "8 H200 per node on NVSwitch (NVLink4 450 GB/s), PCIe Gen5, 8 x 400 Gb/s NDR NICs; rail or fat-tree",
                  dgx_params("450GB/s", "0.80", "0.85", "63GB/s", "0.85", "400Gb/s"), "h200", 90},
                 build_dgx});
    // HGX/DGX B200 (1000 W B200s, the b200 compute preset): NVLink5 at 900 GB/s a direction per GPU
    // (1.8 TB/s bidirectional; 18 links, 14.4 TB/s for 8 GPUs: DGX B200 datasheet) at 0.80 (NCCL
    // 2.28.3 rates a 50 GB/s NVLink5 link at 40.1 GB/s, SM100_NVLINK_BW), NVLS at 0.74 (NCCL 2.28.3's
    // nvlsEfficiency for Blackwell); B200's host interface is PCIe Gen5 x16 (MLCommons system
    // descriptions of B200-SXM-180GB nodes) and its 8 NICs single-port ConnectX-7 at 400 Gb/s (DGX
    // B200 datasheet). Large NVLS all-reduces tend to 2(p-1)/(p+1) x 900 x 0.80 x 0.74 = 828.8 GB/s
    // busbw, where a user of 8 B200s reports "830+" (github.com/NVIDIA/nccl/issues/1807).
    v.push_back({{"dgx-b200",
                  "8 B200 per node on NVSwitch (NVLink5 900 GB/s), PCIe Gen5, 8 x 400 Gb/s NDR NICs; rail or fat-tree",
                  dgx_params("900GB/s", "0.80", "0.74", "63GB/s", "0.85", "400Gb/s"), "b200", 100},
                 build_dgx});
    // HGX B300 (the b300 compute preset): B200's NVLink5 node, with a ConnectX-8 SuperNIC of 800 Gb/s
    // per GPU (HGX B300 specification: 1.6 TB/s of networking for 8 GPUs) behind PCIe Gen6 x16
    // (Blackwell Ultra blog: PCIe Gen6 host interface; 64 GT/s x 16 lanes = 128 GB/s a direction).
    // The NIC's achievable fraction is NDR's 0.92, carried over (no ib_write_bw of an XDR port at hand).
    v.push_back({{"dgx-b300",
                  "8 B300 per node on NVSwitch (NVLink5 900 GB/s), PCIe Gen6, 8 x 800 Gb/s ConnectX-8 NICs; rail or "
                  "fat-tree",
                  dgx_params("900GB/s", "0.80", "0.74", "128GB/s", "0.85", "800Gb/s"), "b300", 100},
                 build_dgx});
    // GB200 NVL72 (the gb200 compute preset): 72 GPUs on one NVLink5 domain, 1.8 TB/s bidirectional
    // per GPU (GB200 NVL72 spec: 130 TB/s for the rack), rated as dgx-b200's; one ConnectX-7 of 400 Gb/s per
    // GPU (DGX GB200 SuperPOD reference architecture: four per four-GPU compute tray) behind a
    // PCIe Gen5 x16 link (the NIC's own); racks on the rail or fat-tree fabric as DGX nodes are.
    v.push_back({{"gb200-nvl72",
                  "72 GB200 GPUs per rack on one NVLink5 domain (900 GB/s), a 400 Gb/s NDR NIC per GPU; racks on "
                  "rail or fat-tree",
                  nvl72_params(), "gb200", 100},
                 build_dgx});
    // Spectrum-X (NVIDIA's Ethernet for AI): the dgx-h100 node with a BlueField-3 SuperNIC of 400 GbE
    // per GPU, on Spectrum-4 switches (SN5600: 64 x 800 GbE or 128 x 400 GbE ports) that pick the
    // least-loaded port per packet while the SuperNIC restores order: routing=adaptive.
    v.push_back({{"spectrum-x",
                  "8 H100 per node (NVLink4 450 GB/s), a 400 GbE BlueField-3 SuperNIC per GPU on a Spectrum-4 RoCE "
                  "fabric with adaptive routing; rail or fat-tree",
                  spectrum_x_params(), "h100", 90},
                 build_dgx});
    v.push_back({{"gb200-nvl36x2",
                  "72 GB200 GPUs per NVLink domain in two racks of 36 (900 GB/s each, racks joined by NVLink "
                  "cables), a 400 Gb/s NDR NIC per GPU; domains on rail or fat-tree",
                  nvl36x2_params(), "gb200", 100},
                 build_nvl36x2});
    v.push_back({{"mi300x",
                  "8 AMD MI300X per node, every pair joined by xGMI (64 GB/s), PCIe Gen5, 8 x 400 Gb/s NDR NICs; rail "
                  "or fat-tree",
                  mi300x_params(), "mi300x", 90},
                 build_mi300x});
    v.push_back({{"dgx-a100",
                  "8 A100 per node on NVSwitch (NVLink3 300 GB/s), PCIe Gen4, 8 x 200 Gb/s HDR NICs; rail or fat-tree",
                  dgx_params("300GB/s", "0.78", "0", "31.5GB/s", "0.80", "200Gb/s"), "a100", 80},
                 build_dgx});
    v.push_back({{"pcie-node", "GPUs behind PCIe Gen4 switches under the host bridge, NICs on the switches",
                  concat({{"nodes", "1", "number of nodes"},
                          {"gpus_per_node", "8", "GPUs per node"},
                          {"gpus_per_switch", "4", "GPUs per PCIe switch"},
                          {"nics_per_node", "2", "NICs per node, spread over the PCIe switches"},
                          {"hosts_per_leaf", "16", "nodes per leaf switch (one leaf: no spines)"}},
                         concat(link_params("pcie", "31.5GB/s", "0.80", "0.5us", "PCIe Gen4 x16"),
                                ib_params("200Gb/s", "0.92", "0.6us", "0.15us"))),
                  "a100", 80},
                 build_pcie_node});
    v.push_back({{"frontera-rtx", "4 Quadro RTX 5000 per node on PCIe 3.0 x16, one 56 Gb/s FDR NIC per node, fat-tree",
                  concat({{"nodes", "4", "number of nodes"},
                          {"gpus_per_node", "4", "GPUs per node"},
                          {"hosts_per_leaf", "16", "nodes per leaf switch (one leaf: no spines)"}},
                         concat(concat(link_params("pcie", "15.75GB/s", "0.78", "0.5us", "GPU PCIe 3.0 x16"),
                                       link_params("nic_pcie", "7.88GB/s", "0.85", "0.5us", "NIC PCIe 3.0 x8")),
                                concat(link_params("ib", "54.54Gb/s", "0.90", "0.7us", "FDR InfiniBand NIC<->leaf"),
                                       {{"switch_latency", "0.2us", "latency of a leaf<->spine hop"}}))),
                  "rtx5000", 75},
                 build_frontera});
    v.push_back(
        {{"fat-tree", "NVSwitch nodes with a 400 Gb/s NIC per GPU on a 2- or 3-level fat-tree",
          concat(
              {{"nodes", "16", "number of nodes"},
               {"gpus_per_node", "8", "GPUs per node (on an NVSwitch)"},
               {"levels", "2", "switch levels: 2 (leaf, spine) or 3 (leaf, pod spine, core)"},
               {"hosts_per_leaf", "4", "nodes per leaf switch"},
               {"leaves_per_pod", "8", "leaves per pod (levels=3)"},
               {"oversubscription", "1", "leaf downlink capacity / uplink capacity"}},
              concat(concat(concat(link_params("nvlink", "450GB/s", "0.80", kNvlinkHopLatency, "GPU<->NVSwitch NVLink"),
                                   {nvls_param("0.85")}),
                            link_params("pcie", "63GB/s", "0.85", "0.5us", "GPU<->NIC PCIe Gen5")),
                     ib_params("400Gb/s", "0.92", "0.6us", "0.15us")))},
         build_fat_tree});
    v.push_back({{"switch",
                  "every GPU linked to one crossbar switch: the uncontended reference",
                  {{"nodes", "1", "number of node labels"},
                   {"gpus_per_node", "8", "GPUs per node label"},
                   {"bandwidth", "100GB/s", "line rate per direction of each GPU<->switch link"},
                   {"efficiency", "1.0", "achievable fraction of the line rate"},
                   {"latency", "1us", "latency per hop (GPU->switch->GPU is 2 hops)"},
                   nvls_param("0")}},
                 build_switch});
    v.push_back({{"ring", "GPU i linked to GPU i+1 mod n; GPUs forward",
                  concat({{"gpus", "8", "number of GPUs"}}, direct_link_params())},
                 [](const Params& p) { return build_torus(p, {p.integer("gpus", 1)}); }});
    v.push_back({{"torus2d", "x by y GPUs with wraparound links; GPUs forward",
                  concat({{"x", "4", "size of dimension x"}, {"y", "4", "size of dimension y"}}, direct_link_params())},
                 [](const Params& p) {
                   return build_torus(p, {p.integer("x", 1), p.integer("y", 1)});
                 }});
    v.push_back(
        {{"torus3d", "x by y by z GPUs with wraparound links; GPUs forward",
          concat(
              {{"x", "4", "size of dimension x"}, {"y", "4", "size of dimension y"}, {"z", "4", "size of dimension z"}},
              direct_link_params())},
         [](const Params& p) {
           return build_torus(p, {p.integer("x", 1), p.integer("y", 1), p.integer("z", 1)});
         }});
    // Every preset: whether its collectives pay NCCL's protocol costs. The machines do;
    // the synthetic references (switch, ring, tori) keep the bare alpha-beta model.
    for (PresetEntry& e : v) {
      const bool machine = e.info.name != "switch" && e.info.name != "ring" && e.info.name.rfind("torus", 0) != 0;
      e.info.params.push_back({"protocols", machine ? "nccl" : "none",
                               "collectives under NCCL's LL/LL128/Simple protocols (launch and per-step latency, "
                               "payload rate): nccl or none"});
    }
    return v;
  }();
  return table;
}

}  // namespace

namespace {
// The GPUs a preset would build, from its size parameters, before anything is built: a
// typo of a few digits must not cost minutes and gigabytes first.
void check_size(const PresetInfo& info, const Params& p) {
  double gpus = 1;
  std::string how;
  for (const char* key : {"nodes", "gpus_per_node", "gpus", "x", "y", "z"}) {
    const bool has =
        std::any_of(info.params.begin(), info.params.end(), [&](const PresetParamInfo& q) { return q.name == key; });
    if (!has) continue;
    gpus *= p.integer(key, 1);
    how += fmt::format("{}{}={}", how.empty() ? "" : " x ", key, p.text(key));
  }
  if (gpus > kMaxTopologyGpus)
    throw Error(fmt::format("{}: {} = {:.0f} GPUs exceeds meshsim's limit of {} per topology; use fewer nodes",
                            p.topology_name(), how, gpus, kMaxTopologyGpus));
}
}  // namespace

const std::vector<PresetInfo>& preset_catalog() {
  static const std::vector<PresetInfo> catalog = [] {
    std::vector<PresetInfo> v;
    for (const auto& e : entries()) v.push_back(e.info);
    return v;
  }();
  return catalog;
}

Topology make_preset(const std::string& name, const PresetParams& params) {
  for (const auto& e : entries()) {
    if (e.info.name != name) continue;
    const Params p(e.info, params);
    check_size(e.info, p);
    Topology t = e.build(p);
    t.protocols = p.choice("protocols", {"nccl", "none"}) == "nccl";
    t.gpu_sm = e.info.gpu_sm;
    t.seal();
    return t;
  }
  std::string names;
  for (const auto& e : entries()) names += (names.empty() ? "" : ", ") + e.info.name;
  throw Error(fmt::format("unknown topology preset '{}'; presets: {}", name, names));
}

}  // namespace meshsim
