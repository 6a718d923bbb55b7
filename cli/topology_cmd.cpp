// meshsim topology show PRESET|FILE [--dot FILE] [--links]   and   meshsim topology list
#include <fmt/format.h>

#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include "cli/commands.h"
#include "core/error.h"
#include "topology/presets.h"

namespace meshsim::cli {

namespace {

struct TopoOptions {
  std::string spec;
  std::string dot;
  bool all_links = false;
};

int show(const TopoOptions& o) {
  const Topology topo = resolve_topology(o.spec);
  std::cout << fmt::format("topology {} ({})\n", topo.name(), o.spec);
  if (!topo.description.empty()) std::cout << "  " << topo.description << "\n";
  std::map<std::string, int> kinds;
  for (const Device& d : topo.devices()) ++kinds[to_string(d.kind)];
  std::cout << fmt::format("  {} GPUs in {} nodes; devices:", topo.num_gpus(), topo.num_nodes());
  for (const auto& [k, n] : kinds) std::cout << fmt::format(" {} {}", n, k);
  std::cout << "\n";
  // Directed links grouped by (kind, raw, efficiency, latency).
  struct Row {
    int count = 0;
    std::string example;
  };
  std::map<std::tuple<std::string, double, double, std::int64_t>, Row> groups;
  for (std::size_t l = 0; l < topo.links().size(); ++l) {
    const DirLink& d = topo.link(static_cast<int>(l));
    auto& row = groups[{to_string(d.spec.kind), d.spec.raw.bytes_per_s(), d.spec.efficiency, d.spec.latency.ps()}];
    if (row.count++ == 0) row.example = fmt::format("{} -> {}", topo.device(d.from).name, topo.device(d.to).name);
  }
  std::cout << fmt::format("  {} directed links:\n", topo.links().size());
  std::cout << fmt::format("    {:>6}  {:<11} {:>12} {:>6} {:>12} {:>10}  {}\n", "count", "kind", "raw", "eff",
                           "achievable", "latency", "e.g.");
  for (const auto& [key, row] : groups) {
    const auto& [kind, raw, eff, lat] = key;
    std::cout << fmt::format("    {:>6}  {:<11} {:>12} {:>6.2f} {:>12} {:>10}  {}\n", row.count, kind,
                             format_bandwidth(Bps(raw)), eff, format_bandwidth(Bps(raw * eff)),
                             format_time(Time::from_ps(lat)), row.example);
  }
  if (o.all_links) {
    for (std::size_t l = 0; l < topo.links().size(); ++l) {
      const DirLink& d = topo.link(static_cast<int>(l));
      std::cout << fmt::format("    [{}] {} -> {}  {} {} {}\n", l, topo.device(d.from).name, topo.device(d.to).name,
                               to_string(d.spec.kind), format_bandwidth(d.spec.effective()),
                               format_time(d.spec.latency));
    }
  }
  std::cout << fmt::format("  per-GPU injection bandwidth (gpu 0): {}\n",
                           format_bandwidth(gpu_injection_bandwidth(topo, 0)));
  std::cout << fmt::format("  bisection bandwidth (one direction): {}\n", format_bandwidth(bisection_bandwidth(topo)));
  if (!o.dot.empty()) {
    write_file(o.dot, to_graphviz(topo), "--dot");
    std::cout << fmt::format("  graphviz written to {} (render: dot -Tsvg {} -o topo.svg)\n", o.dot, o.dot);
  }
  return 0;
}

int list() {
  for (const PresetInfo& p : preset_catalog()) {
    std::cout << fmt::format("{:<14} {}\n", p.name, p.summary);
    for (const auto& param : p.params)
      std::cout << fmt::format("    {:<18} = {:<10} {}\n", param.name, param.default_value, param.help);
  }
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
      "  meshsim topology show examples/topologies/two-pcie-nodes.yaml --dot t.dot && dot -Tsvg t.dot -o t.svg");
  s->add_option("spec", o->spec, "PRESET, PRESET:key=value,... or FILE.yaml")->required();
  s->add_option("--dot", o->dot, "Write a Graphviz picture to this file");
  s->add_flag("--links", o->all_links, "List every directed link");
  t->add_subcommand("list", "List presets and their parameters");
  return [o, s]() { return s->parsed() ? show(*o) : list(); };
}

}  // namespace meshsim::cli
