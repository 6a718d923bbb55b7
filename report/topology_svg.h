// A cluster drawn as people draw one: each node a box holding its GPUs (and, below them, its
// NVSwitches, PCIe switches and NICs), the fabric's switches in rows above by tier (leaves,
// then spines, then cores: hops from the nodes), and the links between them, coloured by load
// when loads are given (grey without). Self-contained SVG, for `meshsim topology show --svg`
// and the HTML report's link-load section.
//
//   write_file("t.svg", topology_svg(topo, {}), "--svg");                 // the cluster alone
//   topology_svg(topo, {.utilization = per_link, .title = "link load"});  // coloured by load
//
// A large cluster is drawn in part: its first kMaxDrawnNodes nodes and the switches they
// reach, with a line saying how many nodes were left out.
#pragma once

#include <string>
#include <vector>

#include "topology/topology.h"

namespace meshsim {

inline constexpr int kMaxDrawnNodes = 32;

struct TopologySvgOptions {
  std::vector<double> utilization;  // per directed link, 0..1 of its rate; empty: no load
  std::string title;                // drawn above the picture when not empty
};

std::string topology_svg(const Topology& topo, const TopologySvgOptions& options);

// The colour of a load in [0, 1]: light grey at 0 through blue and orange to red at 1.
std::string load_colour(double utilization);

}  // namespace meshsim
