#include "report/topology_report.h"

#include <fmt/format.h>

#include <map>
#include <sstream>
#include <tuple>

#include "topology/presets.h"

namespace meshsim {

namespace {

// Directed links grouped by (kind, raw, efficiency, latency), with the count and an example.
std::string link_groups_text(const Topology& topo) {
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
  std::string s = fmt::format("  {} directed links:\n", topo.links().size());
  s += fmt::format("    {:>6}  {:<11} {:>12} {:>6} {:>12} {:>10}  {}\n", "count", "kind", "raw", "eff", "achievable",
                   "latency", "e.g.");
  for (const auto& [key, row] : groups) {
    const auto& [kind, raw, eff, lat] = key;
    s += fmt::format("    {:>6}  {:<11} {:>12} {:>6.2f} {:>12} {:>10}  {}\n", row.count, kind,
                     format_bandwidth(Bps(raw)), eff, format_bandwidth(Bps(raw * eff)), format_time(Time::from_ps(lat)),
                     row.example);
  }
  return s;
}

}  // namespace

std::string topology_text(const Topology& topo, const std::string& spec, bool all_links) {
  std::ostringstream out;
  out << fmt::format("topology {} ({})\n", topo.name(), spec);
  if (!topo.description.empty()) out << "  " << topo.description << "\n";
  std::map<std::string, int> kinds;
  for (const Device& d : topo.devices()) ++kinds[to_string(d.kind)];
  out << fmt::format("  {} GPUs in {} nodes; devices:", topo.num_gpus(), topo.num_nodes());
  for (const auto& [k, n] : kinds) out << fmt::format(" {} {}", n, k);
  out << "\n" << link_groups_text(topo);
  if (all_links) {
    for (std::size_t l = 0; l < topo.links().size(); ++l) {
      const DirLink& d = topo.link(static_cast<int>(l));
      out << fmt::format("    [{}] {} -> {}  {} {} {}\n", l, topo.device(d.from).name, topo.device(d.to).name,
                         to_string(d.spec.kind), format_bandwidth(d.spec.effective()), format_time(d.spec.latency));
    }
  }
  out << fmt::format("  per-GPU injection bandwidth (gpu 0): {}\n", format_bandwidth(gpu_injection_bandwidth(topo, 0)));
  out << fmt::format("  bisection bandwidth (one direction): {}\n", format_bandwidth(bisection_bandwidth(topo)));
  return out.str();
}

std::string presets_text() {
  std::string s;
  for (const PresetInfo& p : preset_catalog()) {
    s += fmt::format("{:<14} {}\n", p.name, p.summary);
    for (const auto& param : p.params)
      s += fmt::format("    {:<18} = {:<10} {}\n", param.name, param.default_value, param.help);
  }
  return s;
}

}  // namespace meshsim
