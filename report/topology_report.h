// Reporting a topology as `meshsim topology show` and `meshsim topology list` print it.
//
//   std::cout << topology_text(resolve_topology("dgx-h100:nodes=4"), "dgx-h100:nodes=4", false);
#pragma once

#include <string>

#include "topology/topology.h"

namespace meshsim {

// Its name and description, devices by kind, the directed links grouped by (kind, raw
// bandwidth, efficiency, latency) with an example of each, every link when `all_links`, and
// GPU 0's injection and the bisection bandwidth. `spec` is the topology as the user named it.
std::string topology_text(const Topology& topo, const std::string& spec, bool all_links);

// Every preset with its summary and its parameters (name, default, help).
std::string presets_text();

}  // namespace meshsim
