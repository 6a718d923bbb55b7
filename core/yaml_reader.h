// Reading YAML files with errors that say where: every message starts with
// "SOURCE:LINE: FIELD:". Shared by the topology, machine-profile and scenario loaders;
// YamlReader is the base of the first two, which add the field parsers of their formats.
// Header-only: users link yaml-cpp themselves.
//
//   YamlReader r("cluster.yaml");
//   r.only_keys(node, "links[3]", {"a", "b", "bandwidth"}, "{a: gpu0, b: sw, bandwidth: 25GB/s}");
//   Bandwidth bw = r.located(node, [&] { return parse_bandwidth(text, "links[3].bandwidth"); });
#pragma once

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"

namespace meshsim {

// The whole of a text file, or nullopt when it cannot be opened (the caller says which
// file it was and what to do).
inline std::optional<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A key given twice in one mapping (yaml-cpp keeps both and reads the first): Error
// "SOURCE:LINE: KEY: given twice in one mapping".
inline void reject_duplicate_keys(const YAML::Node& n, const std::string& source) {
  if (n.IsSequence()) {
    for (const YAML::Node& e : n) reject_duplicate_keys(e, source);
  } else if (n.IsMap()) {
    std::vector<std::string> seen;
    for (const auto& kv : n) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : std::string();
      if (!key.empty() && std::find(seen.begin(), seen.end(), key) != seen.end())
        throw Error(fmt::format("{}:{}: {}: given twice in one mapping; keep one", source, kv.first.Mark().line + 1,
                                key));
      seen.push_back(key);
      reject_duplicate_keys(kv.second, source);
    }
  }
}

// Parses YAML text; malformed input is Error "SOURCE:LINE: malformed YAML: ...", and so is a
// key repeated within a mapping.
inline YAML::Node parse_yaml_text(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw Error(fmt::format("{}:{}: malformed YAML: {}", source, e.mark.line + 1, e.msg));
  }
  reject_duplicate_keys(root, source);
  return root;
}

// Runs `build` (which reads a parsed file), turning yaml-cpp conversion errors nobody
// anticipated into Error "SOURCE:LINE: ...".
template <typename F>
auto with_yaml_errors(const std::string& source, F&& build) {
  try {
    return build();
  } catch (const YAML::Exception& e) {
    throw Error(fmt::format("{}:{}: {}", source, e.mark.line + 1, e.msg));
  }
}

class YamlReader {
 public:
  explicit YamlReader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(const YAML::Node& at, const std::string& field, const std::string& what) const {
    const int line = at.Mark().line >= 0 ? at.Mark().line + 1 : 0;
    throw Error(line > 0 ? fmt::format("{}:{}: {}: {}", source_, line, field, what)
                         : fmt::format("{}: {}: {}", source_, field, what));
  }

  // Runs a unit parser (whose error already names the field) and adds the file position.
  template <typename F>
  auto located(const YAML::Node& at, F&& parse) const {
    try {
      return parse();
    } catch (const Error& e) {
      const int line = at.Mark().line >= 0 ? at.Mark().line + 1 : 0;
      throw Error(line > 0 ? fmt::format("{}:{}: {}", source_, line, e.what())
                           : fmt::format("{}: {}", source_, e.what()));
    }
  }

  // `map` must be a mapping whose keys are all among `keys`; `example` shows a valid one.
  void only_keys(const YAML::Node& map, const std::string& field, std::initializer_list<const char*> keys,
                 const char* example) const {
    if (!map.IsMap()) fail(map, field, fmt::format("expected a mapping such as {}", example));
    for (const auto& kv : map) {
      const std::string k = kv.first.as<std::string>();
      bool ok = false;
      std::string list;
      for (const char* key : keys) {
        ok = ok || k == key;
        list += (list.empty() ? "" : ", ") + std::string(key);
      }
      if (!ok) fail(kv.first, field, fmt::format("unknown key '{}'; valid keys: {}", k, list));
    }
  }

  // The value of `key` in `map`; missing: "missing field 'KEY'" (with `example`, "write e.g.
  // KEY: EXAMPLE").
  YAML::Node required(const YAML::Node& map, const char* key, const std::string& field,
                      const char* example = nullptr) const {
    YAML::Node v = map[key];
    if (!v)
      fail(map, field, example != nullptr ? fmt::format("missing field '{}'; write e.g. {}: {}", key, key, example)
                                          : fmt::format("missing field '{}'", key));
    return v;
  }

  // A scalar's text.
  std::string text(const YAML::Node& v, const std::string& field) const {
    if (!v.IsScalar()) fail(v, field, "expected a single value");
    return v.as<std::string>();
  }

  // A list of scalars; `example` shows one.
  std::vector<std::string> texts(const YAML::Node& v, const std::string& field, const char* example) const {
    if (!v.IsSequence()) fail(v, field, fmt::format("expected a list such as {}", example));
    std::vector<std::string> out;
    for (std::size_t i = 0; i < v.size(); ++i) out.push_back(text(v[i], fmt::format("{}[{}]", field, i)));
    return out;
  }

  double number(const YAML::Node& v, const std::string& field) const {
    if (!v.IsScalar()) fail(v, field, "expected a number");
    try {
      return v.as<double>();
    } catch (const YAML::Exception&) {
      fail(v, field, fmt::format("'{}' is not a number", v.as<std::string>()));
    }
  }

  // A finite number > 0.
  double positive_number(const YAML::Node& v, const std::string& field) const {
    const double x = number(v, field);
    if (!std::isfinite(x) || x <= 0) fail(v, field, fmt::format("{} must be a positive number", v.as<std::string>()));
    return x;
  }

  int integer(const YAML::Node& v, const std::string& field) const {
    if (!v.IsScalar()) fail(v, field, "expected an integer");
    try {
      return v.as<int>();
    } catch (const YAML::Exception&) {
      fail(v, field, fmt::format("'{}' is not an integer", v.as<std::string>()));
    }
  }

  const std::string& source() const { return source_; }

 private:
  std::string source_;
};

}  // namespace meshsim
