// Topology YAML files, topology specs ("PRESET:k=v,..."), and the Graphviz picture.
#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <list>
#include <map>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "core/yaml_reader.h"
#include "topology/presets.h"

namespace meshsim {

namespace {

// Reads one file's nodes, prefixing every error with "SOURCE:LINE: FIELD".
class Reader : public YamlReader {
 public:
  using YamlReader::YamlReader;
  // Every mapping in a topology file is shown with the same example.
  void only_keys(const YAML::Node& map, const std::string& field, std::initializer_list<const char*> keys) const {
    YamlReader::only_keys(map, field, keys, "{name: gpu0, kind: gpu}");
  }
  std::string scalar(const YAML::Node& map, const char* key, const std::string& field) const {
    return text(required(map, key, field), field + "." + key);
  }
  // The `kind:` of a device or link: `parse` is the kind's parser, `names` its valid names.
  template <class Parse>
  auto kind(const YAML::Node& map, const std::string& field, Parse parse, const std::string& names) const {
    const std::string k = scalar(map, "kind", field);
    const auto v = parse(k);
    if (!v) fail(map["kind"], field + ".kind", fmt::format("unknown kind '{}'; use one of {}", k, names));
    return *v;
  }
};

LinkSpec read_direction(const Reader& r, const YAML::Node& link, const std::string& field, LinkKind kind,
                        const char* bw_key, const char* eff_key, const char* lat_key, const LinkSpec* fallback) {
  LinkSpec s;
  s.kind = kind;
  if (link[bw_key]) {
    const std::string text = r.scalar(link, bw_key, field);
    s.raw = r.located(link[bw_key], [&] { return parse_bandwidth(text, field + "." + bw_key); });
  } else if (fallback) {
    s.raw = fallback->raw;
  } else {
    r.fail(link, field, fmt::format("missing field '{}'; write e.g. {}: 25GB/s", bw_key, bw_key));
  }
  s.efficiency = fallback ? fallback->efficiency : 1.0;
  if (link[eff_key]) {
    s.efficiency = r.number(link[eff_key], field + "." + eff_key);
    if (!(s.efficiency > 0 && s.efficiency <= 1))
      r.fail(link[eff_key], field + "." + eff_key,
             fmt::format("{} must be in (0, 1]; e.g. 0.8 for 80% of the line rate", s.efficiency));
  }
  s.latency = fallback ? fallback->latency : Time();
  if (link[lat_key]) {
    const std::string text = r.scalar(link, lat_key, field);
    s.latency = r.located(link[lat_key], [&] { return parse_time(text, field + "." + lat_key); });
  }
  return s;
}

Topology build_from_yaml(const YAML::Node& root, const Reader& r) {
  if (!root.IsMap()) r.fail(root, "topology", "expected a mapping with devices and links, or preset and params");
  r.only_keys(root, "topology",
              {"name", "description", "devices", "links", "preset", "params", "protocols", "gpu_arch"});
  if (root["preset"]) {
    if (root["protocols"])
      r.fail(root["protocols"], "protocols", "with a preset, give it as a parameter: params: {protocols: nccl}");
    if (root["gpu_arch"])
      r.fail(root["gpu_arch"], "gpu_arch", "a preset's GPUs are its own; gpu_arch is for a file of devices and links");
    if (root["devices"] || root["links"])
      r.fail(root["preset"], "preset", "a file gives either preset (+ params) or devices and links, not both");
    PresetParams params;
    if (const YAML::Node p = root["params"]) {
      if (!p.IsMap()) r.fail(p, "params", "expected a mapping such as {nodes: 2, inter: fat-tree}");
      for (const auto& kv : p) {
        if (!kv.second.IsScalar()) r.fail(kv.second, "params." + kv.first.as<std::string>(), "expected a single value");
        params[kv.first.as<std::string>()] = kv.second.as<std::string>();
      }
    }
    const std::string preset = r.scalar(root, "preset", "preset");
    return r.located(root["preset"], [&] { return make_preset(preset, params); });
  }
  if (root["params"]) r.fail(root["params"], "params", "params need a preset: key");

  Topology t(root["name"] ? r.scalar(root, "name", "name") : r.source());
  t.description = root["description"] ? r.scalar(root, "description", "description") : "from " + r.source();
  if (root["protocols"]) {
    const std::string proto = r.scalar(root, "protocols", "protocols");
    if (proto != "nccl" && proto != "none")
      r.fail(root["protocols"], "protocols",
             fmt::format("unknown value '{}'; use nccl (NCCL's LL/LL128/Simple costs) or none", proto));
    t.protocols = proto == "nccl";
  }
  if (root["gpu_arch"]) {
    const std::string arch = r.scalar(root, "gpu_arch", "gpu_arch");
    const std::string digits = arch.rfind("sm", 0) == 0 ? arch.substr(2) : arch;
    if (digits.size() < 2 || digits.size() > 3 || !std::all_of(digits.begin(), digits.end(), ::isdigit) ||
        std::stoi(digits) < 60)
      r.fail(
          root["gpu_arch"], "gpu_arch",
          fmt::format("'{}' is not a GPU architecture; use sm70, sm80, sm90 or sm100 (compute capability x 10)", arch));
    t.gpu_sm = std::stoi(digits);
  }
  const YAML::Node devices = root["devices"];
  if (!devices || !devices.IsSequence() || devices.size() == 0)
    r.fail(devices ? devices : root, "devices", "expected a non-empty list such as - {name: gpu0, kind: gpu, node: 0}");
  std::map<std::string, int> ids;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const YAML::Node d = devices[i];
    const std::string field = fmt::format("devices[{}]", i);
    r.only_keys(d, field, {"name", "kind", "node", "forwards", "reduce_efficiency"});
    const std::string name = r.scalar(d, "name", field);
    const DeviceKind kind = r.kind(d, field, parse_device_kind, device_kind_names());
    const int node = d["node"] ? r.integer(d["node"], field + ".node") : -1;
    if (d["node"] && node < 0) r.fail(d["node"], field + ".node", "node must be >= 0");
    // Nodes are numbered 0, 1, 2, ...: every node holds a device, so a number past the device
    // count is a typo (and would size the per-node tables by it).
    if (d["node"] && static_cast<std::size_t>(node) >= devices.size())
      r.fail(
          d["node"], field + ".node",
          fmt::format("{} is past the {} devices of this file; number the nodes 0, 1, 2, ...", node, devices.size()));
    if (ids.count(name)) r.fail(d["name"], field + ".name", fmt::format("device '{}' is defined twice", name));
    const int id = t.add_device(kind, name, node);
    ids[name] = id;
    if (const YAML::Node f = d["forwards"]) {
      bool value = false;
      if (!f.IsScalar() || !YAML::convert<bool>::decode(f, value))
        r.fail(f, field + ".forwards", "expected true or false");
      t.set_forwards(id, value);
    }
    if (const YAML::Node e = d["reduce_efficiency"]) {
      const double eff = r.number(e, field + ".reduce_efficiency");
      r.located(e, [&] {
        t.set_reduce_efficiency(id, eff);
        return 0;
      });
    }
  }
  const YAML::Node links = root["links"];
  if (links && !links.IsSequence()) r.fail(links, "links", "expected a list such as - {a: gpu0, b: sw, ...}");
  for (std::size_t i = 0; links && i < links.size(); ++i) {
    const YAML::Node l = links[i];
    const std::string field = fmt::format("links[{}]", i);
    r.only_keys(
        l, field,
        {"a", "b", "kind", "bandwidth", "efficiency", "latency", "bandwidth_ba", "efficiency_ba", "latency_ba"});
    int ends[2];
    const char* keys[2] = {"a", "b"};
    for (int e = 0; e < 2; ++e) {
      const std::string name = r.scalar(l, keys[e], field);
      const auto it = ids.find(name);
      if (it == ids.end())
        r.fail(l[keys[e]], field + "." + keys[e], fmt::format("unknown device '{}'; declare it under devices", name));
      ends[e] = it->second;
    }
    if (ends[0] == ends[1]) r.fail(l, field, "a and b are the same device; a link joins two devices");
    // A link's kind is optional (generic); it labels reports and efficiency tables.
    const LinkKind kind = l["kind"] ? r.kind(l, field, parse_link_kind, link_kind_names()) : LinkKind::Generic;
    const LinkSpec ab = read_direction(r, l, field, kind, "bandwidth", "efficiency", "latency", nullptr);
    const LinkSpec ba = read_direction(r, l, field, kind, "bandwidth_ba", "efficiency_ba", "latency_ba", &ab);
    t.add_link(ends[0], ends[1], ab, ba);
  }
  r.located(root, [&] {
    t.seal();
    return 0;
  });
  return t;
}

}  // namespace

Topology parse_topology_yaml(const std::string& text, const std::string& source_name) {
  const YAML::Node root = parse_yaml_text(text, source_name);
  const Reader r(source_name);
  return with_yaml_errors(source_name, [&] { return build_from_yaml(root, r); });
}

Topology load_topology_yaml(const std::string& path) {
  const auto text = read_text_file(path);
  if (!text) throw Error(fmt::format("topology file '{}' cannot be opened; check the path", path));
  return parse_topology_yaml(*text, path);
}

namespace {
std::atomic<std::int64_t> g_topology_builds{0};
}  // namespace

std::int64_t topology_builds() { return g_topology_builds.load(); }

std::shared_ptr<const Topology> shared_topology(const std::string& spec) {
  static std::mutex mu;
  static std::list<std::pair<std::string, std::shared_ptr<const Topology>>> recent;  // most recent first
  // A file is known by its path, size and time of change too, so that a long-lived process (a
  // Python session) sees the file as it is now.
  std::string key = spec;
  std::error_code ec;
  if (const auto size = std::filesystem::file_size(spec, ec); !ec) {
    const auto changed = std::filesystem::last_write_time(spec, ec);
    if (!ec) key += fmt::format("\n{}\n{}", size, changed.time_since_epoch().count());
  }
  {
    std::lock_guard lock(mu);
    for (auto it = recent.begin(); it != recent.end(); ++it)
      if (it->first == key) {
        recent.splice(recent.begin(), recent, it);
        return it->second;
      }
  }
  auto built = std::make_shared<const Topology>(resolve_topology(spec));  // outside the lock: may take seconds
  std::lock_guard lock(mu);
  recent.emplace_front(key, built);
  if (recent.size() > 8) recent.pop_back();
  return built;
}

Topology resolve_topology(const std::string& spec) {
  ++g_topology_builds;
  auto ends_with = [&](const char* suffix) {
    const std::string s(suffix);
    return spec.size() >= s.size() && spec.compare(spec.size() - s.size(), s.size(), s) == 0;
  };
  if (ends_with(".yaml") || ends_with(".yml")) return load_topology_yaml(spec);
  const auto colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  PresetParams params;
  if (colon != std::string::npos) {
    std::stringstream ss(spec.substr(colon + 1));
    std::string item;
    while (std::getline(ss, item, ',')) {
      const auto eq = item.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == item.size())
        throw Error(
            fmt::format("topology '{}': parameter '{}' is not key=value; write e.g. {}:nodes=2", spec, item, name));
      const std::string key = item.substr(0, eq);
      if (params.count(key)) throw Error(fmt::format("topology '{}': parameter '{}' given twice", spec, key));
      params[key] = item.substr(eq + 1);
    }
  }
  return make_preset(name, params);
}

std::string to_graphviz(const Topology& topo) {
  auto id = [](int d) { return fmt::format("d{}", d); };
  std::string out = fmt::format("graph \"{}\" {{\n  node [shape=box, fontsize=10];\n", topo.name());
  std::map<int, std::vector<int>> by_node;
  for (int d = 0; d < topo.num_devices(); ++d) by_node[topo.device(d).node].push_back(d);
  for (const auto& [node, devs] : by_node) {
    const std::string indent = node >= 0 ? "    " : "  ";
    if (node >= 0) out += fmt::format("  subgraph cluster_node{} {{\n    label=\"node {}\";\n", node, node);
    for (int d : devs) {
      const Device& dev = topo.device(d);
      out += fmt::format("{}{} [label=\"{}\\n{}\"{}];\n", indent, id(d), dev.name, to_string(dev.kind),
                         dev.kind == DeviceKind::Gpu ? ", style=filled, fillcolor=palegreen" : "");
    }
    if (node >= 0) out += "  }\n";
  }
  for (std::size_t l = 0; l < topo.links().size(); ++l) {
    const DirLink& ab = topo.links()[l];
    if (ab.reverse < static_cast<int>(l)) continue;
    const DirLink& ba = topo.link(ab.reverse);
    std::string label = fmt::format("{} {}", to_string(ab.spec.kind), format_bandwidth(ab.spec.raw));
    if (ba.spec.raw != ab.spec.raw) label += " / " + format_bandwidth(ba.spec.raw);
    out += fmt::format("  {} -- {} [label=\"{}\"];\n", id(ab.from), id(ab.to), label);
  }
  out += "}\n";
  return out;
}

}  // namespace meshsim
