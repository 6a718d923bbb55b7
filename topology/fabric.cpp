// InfiniBand leaf/spine/core builders (see fabric.h for the picture).
#include "topology/fabric.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace meshsim {

namespace {

// Links every leaf to every spine so that each leaf has downlinks/ratio of uplink
// capacity; returns the spines (none when there is a single leaf).
// `up` receives the spec of one leaf<->spine link.
std::vector<int> add_spines(Topology& t, const std::vector<int>& leaves, int downlinks, double ratio,
                            const FabricLinks& f, const std::string& prefix, bool even_for_one_leaf, LinkSpec& up) {
  std::vector<int> spines;
  const double up_ports = static_cast<double>(downlinks) / ratio;
  const int count = std::max(1, static_cast<int>(std::lround(up_ports)));
  up = f.uplink;
  up.raw = f.uplink.raw * (f.adaptive ? up_ports : up_ports / count);
  if (leaves.size() <= 1 && !even_for_one_leaf) return spines;
  if (f.adaptive)
    spines.push_back(t.add_device(DeviceKind::SpineSwitch, fmt::format("{}spines", prefix)));
  else
    for (int k = 0; k < count; ++k)
      spines.push_back(t.add_device(DeviceKind::SpineSwitch, fmt::format("{}spine{}", prefix, k)));
  for (int leaf : leaves)
    for (int s : spines) t.add_link(leaf, s, up);
  return spines;
}

int max_nics(const std::vector<std::vector<int>>& nics_by_node) {
  std::size_t m = 0;
  for (const auto& v : nics_by_node) m = std::max(m, v.size());
  return static_cast<int>(m);
}

}  // namespace

void add_fat_tree_fabric(Topology& t, const std::vector<std::vector<int>>& nics_by_node, int hosts_per_leaf,
                         double oversubscription, int levels, int leaves_per_pod, const FabricLinks& f) {
  MESHSIM_ASSERT(hosts_per_leaf >= 1 && (levels == 2 || levels == 3));
  const int nodes = static_cast<int>(nics_by_node.size());
  const int num_leaves = (nodes + hosts_per_leaf - 1) / hosts_per_leaf;
  const int downlinks = std::min(hosts_per_leaf, nodes) * max_nics(nics_by_node);
  std::vector<int> leaves;
  for (int l = 0; l < num_leaves; ++l) leaves.push_back(t.add_device(DeviceKind::LeafSwitch, fmt::format("leaf{}", l)));
  for (int n = 0; n < nodes; ++n)
    for (int nic : nics_by_node[n]) t.add_link(nic, leaves[n / hosts_per_leaf], f.nic);
  LinkSpec up;
  if (levels == 2) {
    add_spines(t, leaves, downlinks, oversubscription, f, "", false, up);
    return;
  }
  MESHSIM_ASSERT(leaves_per_pod >= 1);
  const int pods = (num_leaves + leaves_per_pod - 1) / leaves_per_pod;
  if (pods == 1) {
    add_spines(t, leaves, downlinks, oversubscription, f, "pod0.", false, up);
    return;
  }
  std::vector<std::vector<int>> pod_spines;
  for (int p = 0; p < pods; ++p) {
    const auto first = leaves.begin() + static_cast<std::ptrdiff_t>(p) * leaves_per_pod;
    const std::vector<int> pod(first, leaves.end() - first > leaves_per_pod ? first + leaves_per_pod : leaves.end());
    // A pod with a single leaf still gets spines: they lead to the cores.
    pod_spines.push_back(add_spines(t, pod, downlinks, oversubscription, f, fmt::format("pod{}.", p), true, up));
  }
  // Core group k joins pod spine k of every pod; leaves_per_pod cores per group give a
  // pod spine as many links up as it has leaves below, so it is non-blocking. Pooled: one
  // core switch, joined to each pod's pooled spine by all of its uplink capacity.
  if (f.adaptive) {
    const int core = t.add_device(DeviceKind::CoreSwitch, "cores");
    LinkSpec pooled = up;
    pooled.raw = up.raw * leaves_per_pod;
    for (const auto& spines : pod_spines) t.add_link(spines[0], core, pooled);
    return;
  }
  const int groups = static_cast<int>(pod_spines[0].size());
  for (int k = 0; k < groups; ++k) {
    for (int j = 0; j < leaves_per_pod; ++j) {
      const int core = t.add_device(DeviceKind::CoreSwitch, fmt::format("core{}.{}", k, j));
      for (const auto& spines : pod_spines) t.add_link(spines[k], core, up);
    }
  }
}

void add_rail_fabric(Topology& t, const std::vector<std::vector<int>>& nics_by_node, int hosts_per_leaf,
                     double oversubscription, const FabricLinks& f) {
  MESHSIM_ASSERT(hosts_per_leaf >= 1);
  const int nodes = static_cast<int>(nics_by_node.size());
  const int units = (nodes + hosts_per_leaf - 1) / hosts_per_leaf;
  const int rails = max_nics(nics_by_node);
  std::vector<int> leaves;
  for (int s = 0; s < units; ++s)
    for (int r = 0; r < rails; ++r)
      leaves.push_back(t.add_device(DeviceKind::LeafSwitch, fmt::format("su{}.rail{}", s, r)));
  for (int n = 0; n < nodes; ++n)
    for (std::size_t r = 0; r < nics_by_node[n].size(); ++r)
      t.add_link(nics_by_node[n][r], leaves[(n / hosts_per_leaf) * rails + static_cast<int>(r)], f.nic);
  LinkSpec up;
  add_spines(t, leaves, std::min(hosts_per_leaf, nodes), oversubscription, f, "", false, up);
}

}  // namespace meshsim
