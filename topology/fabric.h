// Internal: the InfiniBand fabric builders shared by the presets.
//
// Given each node's NICs, these add leaf switches and the switch levels above them.
//
//   fat-tree (levels=2)              rail-optimized (per scalable unit of nodes)
//        spine0 .. spineS-1             spine0 .. spineS-1
//         |  every leaf to               |  every leaf to
//         |  every spine                 |  every spine
//     leaf0  ..  leafL-1             rail0 rail1 .. rail7   (leaf i: NIC i of every node)
//     |||| nodes' NICs               n0.nic0 n1.nic0 ...
//
// Leaves with D downlinks get D / oversubscription of uplink capacity, spread evenly
// over S = round(D / oversubscription) spines (one link from each leaf to each spine).
// levels=3 groups leaves into pods with their own spines; pod spine k of every pod
// links to core group k (leaves_per_pod cores), so everything above the leaves is
// non-blocking. A fabric with a single leaf gets no spines.
//
// Adaptive routing (FabricLinks::adaptive; InfiniBand AR, Spectrum-X) spreads every flow's
// packets over all the uplinks of its leaf, so in the fluid limit a leaf's uplinks act as one
// link of their summed capacity: the spines of a leaf group (and the cores of a 3-level tree)
// are built as one pooled switch, "spines" ("pod0.spines", "cores"), joined to each leaf by one
// link of the leaf's whole uplink capacity. ECMP (the default) hashes each flow onto one spine.
#pragma once

#include <vector>

#include "topology/topology.h"

namespace meshsim {

struct FabricLinks {
  LinkSpec nic;           // NIC <-> leaf
  LinkSpec uplink;        // switch <-> switch (raw rate of one NIC port; scaled per link)
  bool adaptive = false;  // pooled uplinks (adaptive routing) instead of one spine per flow (ECMP)
};

void add_fat_tree_fabric(Topology& t, const std::vector<std::vector<int>>& nics_by_node, int hosts_per_leaf,
                         double oversubscription, int levels, int leaves_per_pod, const FabricLinks& links);

void add_rail_fabric(Topology& t, const std::vector<std::vector<int>>& nics_by_node, int hosts_per_leaf,
                     double oversubscription, const FabricLinks& links);

}  // namespace meshsim
