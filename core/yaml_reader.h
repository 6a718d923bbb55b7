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
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/error.h"
#include "core/suggest.h"
#include "core/units.h"

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

// Limits of a parsed file's tree as the readers walk it: aliases make a graph of it, so a
// self-referencing alias (x: &a [*a]) is a cycle and nested aliases (billion laughs) expand
// exponentially; both are refused before anything walks them.
inline constexpr int kMaxYamlDepth = 64;
inline constexpr std::size_t kMaxYamlValues = 2'000'000;

// A key given twice in one mapping (yaml-cpp keeps both and reads the first): Error
// "SOURCE:LINE: KEY: given twice in one mapping"; so is a key that is not a plain name
// ("? [a, b]: 1", or an empty "? : 1"), which no reader can name in a message; and a tree
// deeper than kMaxYamlDepth or, aliases expanded, larger than kMaxYamlValues.
inline void reject_duplicate_keys(const YAML::Node& n, const std::string& source, int depth, std::size_t& values) {
  if (depth > kMaxYamlDepth || ++values > kMaxYamlValues)
    throw Error(
        fmt::format("{}:{}: nested deeper than {} levels or, aliases expanded, more than {} values (a "
                    "self-referencing or nested alias?); write the values out",
                    source, n.Mark().line + 1, kMaxYamlDepth, kMaxYamlValues));
  if (n.IsSequence()) {
    for (const YAML::Node& e : n) reject_duplicate_keys(e, source, depth + 1, values);
  } else if (n.IsMap()) {
    std::unordered_set<std::string> seen;
    for (const auto& kv : n) {
      if (!kv.first.IsScalar())
        throw Error(
            fmt::format("{}:{}: a mapping key must be a plain name, not empty, a list or a mapping; write "
                        "key: value",
                        source, std::max(kv.first.Mark().line, n.Mark().line) + 1));
      const std::string& key = kv.first.Scalar();
      if (!key.empty() && !seen.insert(key).second)
        throw Error(
            fmt::format("{}:{}: {}: given twice in one mapping; keep one", source, kv.first.Mark().line + 1, key));
      reject_duplicate_keys(kv.second, source, depth + 1, values);
    }
  }
}
inline void reject_duplicate_keys(const YAML::Node& n, const std::string& source) {
  std::size_t values = 0;
  reject_duplicate_keys(n, source, 0, values);
}

// The line (1-based) where a second YAML document starts, or 0: a `---` marker at column 0
// after content, or content after a `...` end marker. Scanned in the text: yaml-cpp's LoadAll
// loops forever on some malformed inputs, and Load reads the first document only.
inline int second_document_line(const std::string& text) {
  bool content = false, ended = false;
  int line = 0;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    ++line;
    if (!l.empty() && l.back() == '\r') l.pop_back();
    const bool marker = l.rfind("---", 0) == 0 && (l.size() == 3 || l[3] == ' ' || l[3] == '\t');
    const bool end = l.rfind("...", 0) == 0 && (l.size() == 3 || l[3] == ' ' || l[3] == '\t');
    const std::size_t first = l.find_first_not_of(" \t");
    const bool blank = first == std::string::npos || l[first] == '#';
    if (marker || (ended && !blank && !end)) {
      if (content || ended) return line;
      const std::size_t after = l.find_first_not_of(" \t", 3);  // the first document's marker: content after it?
      content = after != std::string::npos && l[after] != '#';
      continue;
    }
    if (end) {
      ended = true;
      continue;
    }
    if (!blank) content = true;
  }
  return 0;
}

// Parses YAML text; malformed input is Error "SOURCE:LINE: malformed YAML: ...", and so is a
// key repeated within a mapping, and a second document (a file is one document: what follows
// a `---` would otherwise be ignored).
inline YAML::Node parse_yaml_text(const std::string& text, const std::string& source) {
  if (const int line = second_document_line(text))
    throw Error(
        fmt::format("{}:{}: a second YAML document; meshsim reads one per file: merge it into the first "
                    "or remove the '---' before it",
                    source, line));
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

  // `unmarked`: how errors name a node that was not read from the file (no line: a value
  // set by a command-line override), e.g. "--set"; empty: by the source.
  YamlReader(std::string source, std::string unmarked) : source_(std::move(source)), unmarked_(std::move(unmarked)) {}

  // The same reader naming every field under `prefix` ("jobs[1]." + "parallel.tp"): a section
  // read for one entry of a list.
  YamlReader prefixed(const std::string& prefix) const {
    YamlReader r = *this;
    r.prefix_ += prefix;
    return r;
  }

  [[noreturn]] void fail(const YAML::Node& at, const std::string& field, const std::string& what) const {
    throw Error(fmt::format("{} {}{}: {}", where(at), prefix_, field, what));
  }

  // Runs a unit parser (whose error already names the field) and adds the file position.
  template <typename F>
  auto located(const YAML::Node& at, F&& parse) const {
    try {
      return parse();
    } catch (const Error& e) {
      throw Error(fmt::format("{} {}{}", where(at), prefix_, e.what()));
    }
  }

  // `map` must be a mapping whose keys are all among `keys`; `example` shows a valid one.
  void only_keys(const YAML::Node& map, const std::string& field, std::initializer_list<const char*> keys,
                 const char* example) const {
    only_keys(map, field, std::vector<std::string>(keys.begin(), keys.end()), example);
  }
  void only_keys(const YAML::Node& map, const std::string& field, const std::vector<std::string>& keys,
                 const char* example) const {
    if (!map.IsMap()) fail(map, field, fmt::format("expected a mapping such as {}", example));
    for (const auto& kv : map) {
      const std::string k = kv.first.as<std::string>();
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) {
        const std::string hint = did_you_mean(k, keys);
        fail(kv.first, field,
             hint.empty() ? fmt::format("unknown key '{}'; valid keys: {}", k, fmt::join(keys, ", "))
                          : fmt::format("unknown key '{}' ({}); valid keys: {}", k, hint, fmt::join(keys, ", ")));
      }
    }
  }

  // The value of `key` in `map`; missing: "missing field 'KEY'" (with `example`, "write e.g.
  // KEY: EXAMPLE").
  YAML::Node required(const YAML::Node& map, const char* key, const std::string& field,
                      const char* example = nullptr) const {
    YAML::Node v = map[key];
    if (!v)
      fail(map, field,
           example != nullptr ? fmt::format("missing field '{}'; write e.g. {}: {}", key, key, example)
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

  // An integer within +-10^9 (core/units.h parse_int).
  int integer(const YAML::Node& v, const std::string& field) const {
    if (!v.IsScalar()) fail(v, field, "expected an integer");
    const auto x = parse_int(v.Scalar());
    if (!x) fail(v, field, fmt::format("'{}' is not an integer (at most 10^9 in size)", v.Scalar()));
    return *x;
  }

  // true/yes/on/1 or false/no/off/0.
  bool boolean(const YAML::Node& v, const std::string& field) const {
    if (!v.IsScalar()) fail(v, field, "expected true or false");
    const std::string& t = v.Scalar();
    if (t == "true" || t == "yes" || t == "on" || t == "1") return true;
    if (t == "false" || t == "no" || t == "off" || t == "0") return false;
    fail(v, field, fmt::format("'{}' is not true or false", t));
  }

  const std::string& source() const { return source_; }

 private:
  // "SOURCE:LINE:", or, for a node with no position, "UNMARKED:" (else "SOURCE:").
  std::string where(const YAML::Node& at) const {
    if (at.IsDefined() && at.Mark().line >= 0) return fmt::format("{}:{}:", source_, at.Mark().line + 1);
    return (unmarked_.empty() ? source_ : unmarked_) + ":";
  }

  std::string source_;
  std::string unmarked_;
  std::string prefix_;  // before every field name (prefixed())
};

}  // namespace meshsim
