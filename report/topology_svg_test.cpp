#include "report/topology_svg.h"

#include <gtest/gtest.h>

#include <string>

#include "topology/presets.h"

namespace meshsim {
namespace {

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Two DGX nodes on a two-level fat-tree with one node per leaf: 16 GPUs in 2 boxes, the 2
// leaves and the spines as switches above, and every physical link a line.
TEST(TopologySvg, DrawsEveryNodeGpuSwitchAndLink) {
  const Topology t = resolve_topology("dgx-h100:nodes=2,inter=fat-tree,hosts_per_leaf=1");
  const std::string svg = topology_svg(t, {});
  int switches = 0;
  for (const Device& d : t.devices()) switches += d.node < 0 ? 1 : 0;
  EXPECT_EQ(count(svg, "class=\"gpu\""), 16);
  EXPECT_EQ(count(svg, "class=\"node\""), 2);
  EXPECT_EQ(count(svg, "class=\"switch\""), switches);
  EXPECT_EQ(count(svg, "<line "), static_cast<int>(t.links().size() / 2));
  EXPECT_EQ(count(svg, "stroke=\"#b8bec6\""), static_cast<int>(t.links().size() / 2));  // no loads: grey
  EXPECT_EQ(svg.find("link load:"), std::string::npos);
  EXPECT_EQ(svg.rfind("<svg", 0), 0U);
}

// Loads colour each line by its busier direction; the legend appears.
TEST(TopologySvg, ColoursLinksByTheirLoad) {
  const Topology t = resolve_topology("dgx-h100:nodes=2,inter=fat-tree,hosts_per_leaf=1");
  std::vector<double> u(t.links().size(), 0.0);
  u[static_cast<std::size_t>(t.link(0).reverse)] = 1.0;  // one direction of link 0 full
  const std::string svg = topology_svg(t, {.utilization = u, .title = "load"});
  EXPECT_EQ(count(svg, "stroke=\"" + load_colour(1.0) + "\""), 1);
  EXPECT_EQ(count(svg, "stroke=\"" + load_colour(0.0) + "\""), static_cast<int>(t.links().size() / 2) - 1);
  EXPECT_NE(svg.find("link load:"), std::string::npos);
  EXPECT_EQ(load_colour(0.0), "#9eb9d6");
  EXPECT_EQ(load_colour(0.5), "#f28e2b");
  EXPECT_EQ(load_colour(1.0), "#d62728");
  EXPECT_EQ(load_colour(7.0), load_colour(1.0));
}

// A failed cable is drawn red and dashed, the others as before.
TEST(TopologySvg, DrawsAFailedLinkDashed) {
  Topology t = resolve_topology("dgx-h100:nodes=2,inter=fat-tree,hosts_per_leaf=1");
  EXPECT_EQ(count(topology_svg(t, {}), "stroke-dasharray"), 0);
  t.fail_link(0);  // GPU 0's NVLink: PCIe still joins it to the rest
  const std::string svg = topology_svg(t, {});
  EXPECT_EQ(count(svg, "stroke=\"#d62728\" stroke-width=\"1.00\" stroke-dasharray=\"4 3\""), 1);
  EXPECT_EQ(count(svg, "<line "), static_cast<int>(t.links().size() / 2));
}

// A large cluster: its first kMaxDrawnNodes nodes, the switches above them (not the leaves of
// nodes left out), and a line saying so.
TEST(TopologySvg, DrawsTheFirstNodesOfALargeCluster) {
  const Topology t = resolve_topology("dgx-h100:nodes=128");  // rail: 4 scalable units of 32 nodes
  const std::string svg = topology_svg(t, {});
  EXPECT_EQ(count(svg, "class=\"node\""), kMaxDrawnNodes);
  EXPECT_EQ(count(svg, "class=\"gpu\""), 8 * kMaxDrawnNodes);
  EXPECT_NE(svg.find("the first 32 of 128 nodes"), std::string::npos);
  EXPECT_EQ(svg.find("su1.rail0 ("), std::string::npos);  // another unit's leaf is not drawn
  EXPECT_NE(svg.find("su0.rail0 ("), std::string::npos);
}

}  // namespace
}  // namespace meshsim
