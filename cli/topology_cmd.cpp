// meshsim topology show PRESET|FILE [--dot FILE] [--svg FILE] [--links]   and   meshsim topology list
// (the text: report/topology_report.h; the drawing: report/topology_svg.h)
#include <fmt/format.h>

#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "report/topology_report.h"
#include "report/topology_svg.h"
#include "topology/presets.h"

namespace meshsim::cli {

namespace {

struct TopoOptions {
  std::string spec;
  std::string dot;
  std::string svg;
  bool all_links = false;
};

int show(const TopoOptions& o) {
  const Topology topo = resolve_topology(o.spec);
  std::cout << topology_text(topo, o.spec, o.all_links);
  if (!o.dot.empty()) {
    write_file(o.dot, to_graphviz(topo), "--dot");
    std::cout << fmt::format("  graphviz written to {} (render: dot -Tsvg {} -o topo.svg)\n", o.dot, o.dot);
  }
  if (!o.svg.empty()) {
    write_file(o.svg, topology_svg(topo, {.utilization = {}, .title = o.spec}), "--svg");
    say_wrote(o.svg, "the cluster drawn");
  }
  return 0;
}

int list() {
  std::cout << presets_text();
  return 0;
}

}  // namespace

Run add_topology_command(CLI::App& app) {
  auto o = std::make_shared<TopoOptions>();
  CLI::App* t = app.add_subcommand("topology", "Inspect cluster topologies (presets and YAML files)");
  t->require_subcommand(1);
  t->footer(
      "Examples:\n  meshsim topology list\n  meshsim topology show dgx-h100:nodes=4,inter=rail --dot cluster.dot");
  CLI::App* s = t->add_subcommand("show", "Print devices, links, injection and bisection bandwidth");
  s->footer(
      "Examples:\n  meshsim topology show frontera-rtx:nodes=4 --links\n"
      "  meshsim topology show dgx-h100:nodes=4,inter=fat-tree,hosts_per_leaf=2 --svg cluster.svg\n"
      "  meshsim topology show examples/topologies/two-pcie-nodes.yaml --dot t.dot && dot -Tsvg t.dot -o t.svg");
  s->add_option("spec", o->spec, "PRESET, PRESET:key=value,... or FILE.yaml")->required();
  s->add_option("--dot", o->dot, "Write a Graphviz picture to this file");
  s->add_option("--svg", o->svg,
                "Draw the cluster into this SVG file: nodes as boxes of GPUs, switches above by tier (the first " +
                    std::to_string(kMaxDrawnNodes) + " nodes of a larger one)");
  s->add_flag("--links", o->all_links, "List every directed link");
  t->add_subcommand("list", "List presets and their parameters");
  return [o, s]() { return s->parsed() ? show(*o) : list(); };
}

}  // namespace meshsim::cli
