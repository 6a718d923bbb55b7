// The cluster drawing (see topology_svg.h).
#include "report/topology_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

#include "report/html_report.h"

namespace meshsim {

namespace {

constexpr double kCell = 16;       // one GPU's column inside a node box
constexpr double kPartCell = 9;    // one NVSwitch's, PCIe switch's or NIC's, in the row below
constexpr double kBoxHeight = 58;  // a node box: its label, the GPUs, then the rest
constexpr double kBoxGap = 14;
constexpr int kBoxesPerRow = 8;
constexpr double kTierGap = 70;  // between rows of fabric switches, and above the nodes

struct Point {
  double x = 0, y = 0;
  bool drawn = false;
};

// A fabric switch's level when its kind says it (leaf 1, spine 2, core 3), else 0.
int level(DeviceKind k) {
  return k == DeviceKind::LeafSwitch ? 1 : k == DeviceKind::SpineSwitch ? 2 : k == DeviceKind::CoreSwitch ? 3 : 0;
}

// Fabric devices (no node) by hops from the drawn nodes' devices: 1 for leaves, 2 for spines, ...
// never down a level (a spine's other leaves serve nodes not drawn).
std::map<int, std::vector<int>> fabric_tiers(const Topology& topo, int nodes) {
  std::vector<int> hops(static_cast<std::size_t>(topo.num_devices()), -1);
  std::vector<int> queue;
  for (int n = 0; n < nodes; ++n)
    for (int d : topo.node_devices(n)) {
      hops[static_cast<std::size_t>(d)] = 0;
      queue.push_back(d);
    }
  std::map<int, std::vector<int>> tiers;
  for (std::size_t head = 0; head < queue.size(); ++head) {
    const int u = queue[head];
    for (int l : topo.out_links(u)) {
      const int v = topo.link(l).to;
      if (hops[static_cast<std::size_t>(v)] >= 0 || topo.device(v).node >= 0) continue;
      const int from = level(topo.device(u).kind), to = level(topo.device(v).kind);
      if (topo.device(u).node < 0 && from > 0 && to > 0 && to < from) continue;
      hops[static_cast<std::size_t>(v)] = hops[static_cast<std::size_t>(u)] + 1;
      tiers[hops[static_cast<std::size_t>(v)]].push_back(v);
      queue.push_back(v);
    }
  }
  for (auto& [tier, devices] : tiers) std::sort(devices.begin(), devices.end());
  return tiers;
}

// Each drawn node's box: its GPUs in a row, its other devices in a row below.
double place_nodes(const Topology& topo, int nodes, double top, std::vector<Point>& at, std::string& boxes) {
  double x = 10, y = top, width = 0;
  for (int n = 0; n < nodes; ++n) {
    std::vector<int> gpus, rest;
    for (int d : topo.node_devices(n)) (topo.device(d).kind == DeviceKind::Gpu ? gpus : rest).push_back(d);
    const double w =
        std::max({static_cast<double>(gpus.size()) * kCell, static_cast<double>(rest.size()) * kPartCell, 48.0}) + 12;
    if (n > 0 && n % kBoxesPerRow == 0) {
      x = 10;
      y += kBoxHeight + kBoxGap;
    }
    boxes += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"5\" class=\"node\"/><text x=\"{}\" y=\"{}\" "
        "class=\"label\">node {}</text>\n",
        x, y, w, kBoxHeight, x + 6, y + 13, n);
    auto put = [&](const std::vector<int>& row, double cell, double cy) {
      for (std::size_t i = 0; i < row.size(); ++i)
        at[static_cast<std::size_t>(row[i])] = {x + 6 + cell * (static_cast<double>(i) + 0.5), cy, true};
    };
    put(gpus, kCell, y + 28);
    put(rest, kPartCell, y + 48);
    x += w + kBoxGap;
    width = std::max(width, x);
  }
  return width;
}

std::string device_mark(const Topology& topo, int d, const Point& p) {
  const Device& dev = topo.device(d);
  const std::string title = fmt::format("<title>{} ({})</title>", html_escape(dev.name), to_string(dev.kind));
  if (dev.kind == DeviceKind::Gpu)
    return fmt::format("<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" class=\"gpu\">{}</rect>\n", p.x - 6, p.y - 6,
                       title);
  const char* cls = dev.node >= 0 ? "part" : "switch";
  const double r = dev.node >= 0 ? 4 : 7;
  return fmt::format("<circle cx=\"{}\" cy=\"{}\" r=\"{}\" class=\"{}\">{}</circle>\n", p.x, p.y, r, cls, title);
}

}  // namespace

std::string load_colour(double u) {
  // Stops: 0 grey-blue, 0.5 orange, 1 red (linear in RGB between them).
  constexpr std::array<std::array<double, 3>, 3> kStops = {{{158, 185, 214}, {242, 142, 43}, {214, 39, 40}}};
  u = std::clamp(std::isfinite(u) ? u : 0.0, 0.0, 1.0);
  const std::size_t i = u < 0.5 ? 0 : 1;
  const double t = (u - 0.5 * static_cast<double>(i)) / 0.5;
  std::array<int, 3> c{};
  for (std::size_t k = 0; k < 3; ++k)
    c[k] = static_cast<int>(std::lround(kStops[i][k] + (kStops[i + 1][k] - kStops[i][k]) * t));
  return fmt::format("#{:02x}{:02x}{:02x}", c[0], c[1], c[2]);
}

std::string topology_svg(const Topology& topo, const TopologySvgOptions& options) {
  const int nodes = std::min(topo.num_nodes(), kMaxDrawnNodes);
  const auto tiers = fabric_tiers(topo, nodes);
  const double title_h = options.title.empty() ? 0 : 22;
  const double nodes_top = title_h + 20 + kTierGap * static_cast<double>(tiers.size());
  std::vector<Point> at(static_cast<std::size_t>(topo.num_devices()));
  std::string boxes;
  double width = place_nodes(topo, nodes, nodes_top, at, boxes);
  const double node_rows = std::ceil(static_cast<double>(std::max(nodes, 1)) / kBoxesPerRow);
  double height = nodes_top + node_rows * (kBoxHeight + kBoxGap) + 10;
  width = std::max(width, 320.0);
  for (const auto& [tier, devices] : tiers) {  // tier 1 just above the nodes, the highest on top
    const double y = nodes_top - kTierGap * static_cast<double>(tier) + 24;
    const double step = width / static_cast<double>(devices.size() + 1);
    for (std::size_t i = 0; i < devices.size(); ++i)
      at[static_cast<std::size_t>(devices[i])] = {step * static_cast<double>(i + 1), y, true};
  }
  // Each physical link once, the load of its busier direction.
  std::string lines;
  for (int l = 0; l < static_cast<int>(topo.links().size()); ++l) {
    const DirLink& link = topo.link(l);
    if (link.reverse < l) continue;
    const Point& a = at[static_cast<std::size_t>(link.from)];
    const Point& b = at[static_cast<std::size_t>(link.to)];
    if (!a.drawn || !b.drawn) continue;
    std::string stroke = "#b8bec6";
    double w = 1;
    if (!options.utilization.empty()) {
      const double u = std::max(options.utilization[static_cast<std::size_t>(l)],
                                options.utilization[static_cast<std::size_t>(link.reverse)]);
      stroke = load_colour(u);
      w = 1 + 2.5 * std::clamp(u, 0.0, 1.0);
    }
    if (link.down) stroke = "#d62728";  // failed: red, dashed
    lines += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" "
        "stroke-width=\"{:.2f}\"{}><title>{} &lt;-&gt; {}</title></line>\n",
        a.x, a.y, b.x, b.y, stroke, w, link.down ? " stroke-dasharray=\"4 3\"" : "",
        html_escape(topo.device(link.from).name), html_escape(topo.device(link.to).name));
  }
  std::string marks;
  for (int d = 0; d < topo.num_devices(); ++d)
    if (at[static_cast<std::size_t>(d)].drawn) marks += device_mark(topo, d, at[static_cast<std::size_t>(d)]);
  std::string notes;
  if (nodes < topo.num_nodes()) {
    notes += fmt::format(
        "<text x=\"10\" y=\"{}\" class=\"label\">the first {} of {} nodes, and the switches they "
        "reach</text>\n",
        height + 4, nodes, topo.num_nodes());
    height += 18;
  }
  if (!options.utilization.empty()) {
    notes += fmt::format("<text x=\"10\" y=\"{}\" class=\"label\">link load:</text>\n", height + 4);
    for (int k = 0; k <= 4; ++k)
      notes += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"30\" height=\"8\" fill=\"{}\"/><text x=\"{}\" y=\"{}\" "
          "class=\"label\">{}%</text>\n",
          80 + 62 * k, height - 4, load_colour(k / 4.0), 114 + 62 * k, height + 4, 25 * k);
    height += 18;
  }
  const std::string title = options.title.empty() ? ""
                                                  : fmt::format("<text x=\"10\" y=\"16\" class=\"title\">{}</text>\n",
                                                                html_escape(options.title));
  return fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" viewBox=\"0 0 {0:.0f} "
      "{1:.0f}\" style=\"max-width:100%;height:auto\" font-family=\"system-ui, "
      "sans-serif\">\n<style>.node{{fill:#f6f8fa;stroke:#d0d7de}}"
      ".gpu{{fill:#4e79a7}}.part{{fill:#8c959f}}.switch{{fill:#59a14f}}.label{{font-size:11px;fill:#57606a}}"
      ".title{{font-size:13px;font-weight:600;fill:#1f2328}}</style>\n{2}{3}{4}{5}{6}</svg>\n",
      width + 10, height, title, boxes, lines, marks, notes);
}

}  // namespace meshsim
