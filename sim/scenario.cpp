// Scenario YAML: parsing, --set overrides, and resolution into a validated Scenario.
#include "sim/scenario.h"

#include <yaml-cpp/yaml.h>

#include <set>
#include <sstream>

#include "core/error.h"
#include "core/yaml_reader.h"
#include "core/units.h"
#include "schedule/plan.h"
#include "topology/placement.h"
#include "topology/presets.h"

namespace meshsim {
namespace {

const char* kDefault = R"(# meshsim's built-in scenario: GPT-3 175B on 16 DGX H100 nodes (128 GPUs).
name: gpt3-175b-128xh100
model: gpt3-175b
parallel: {dp: 2, tp: 8, sp: true, pp: 8, microbatches: 16, micro_batch_size: 1, zero: 1, recompute: selective}
topology: dgx-h100:nodes=16
placement: natural
run: {fidelity: formula}
)";

std::string keys_of(const std::set<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "" : ", ") + k;
  return s;
}

void check_keys(const YAML::Node& n, const std::string& where, const std::set<std::string>& known) {
  if (!n.IsMap()) throw Error(where + ": expected a map of fields (" + keys_of(known) + ")");
  for (const auto& kv : n) {
    const std::string k = kv.first.as<std::string>();
    if (!known.count(k))
      throw Error((where.empty() ? "" : where + ".") + k + ": unknown field; known fields: " + keys_of(known));
  }
}

std::string scalar(const YAML::Node& n, const std::string& path) {
  if (!n.IsScalar()) throw Error(path + ": expected a single value");
  return n.as<std::string>();
}

int as_int(const YAML::Node& n, const std::string& path) {
  const std::string s = scalar(n, path);
  const auto v = parse_int(s);
  if (!v) throw Error(path + ": '" + s + "' is not an integer");
  return *v;
}

double as_double(const YAML::Node& n, const std::string& path) {
  const std::string s = scalar(n, path);
  try {
    std::size_t used = 0;
    const double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  throw Error(path + ": '" + s + "' is not a number");
}

bool as_bool(const YAML::Node& n, const std::string& path) {
  const std::string s = scalar(n, path);
  if (s == "true" || s == "yes" || s == "on" || s == "1") return true;
  if (s == "false" || s == "no" || s == "off" || s == "0") return false;
  throw Error(path + ": '" + s + "' is not true or false");
}

ModelSpec resolve_model(const YAML::Node& n) {
  if (!n) throw Error("model: missing; give a preset name (e.g. model: gpt3-175b) or fields");
  if (n.IsScalar()) return model_preset(n.as<std::string>());
  check_keys(n, "model",
             {"preset", "name", "layers", "hidden", "heads", "kv_heads", "ffn_hidden", "ffn", "vocab", "seq", "experts",
              "top_k", "dtype", "attention"});
  ModelSpec m = n["preset"] ? model_preset(scalar(n["preset"], "model.preset")) : ModelSpec{};
  if (n["name"]) m.name = scalar(n["name"], "model.name");
  else if (!n["preset"]) m.name = "custom";
  auto i = [&](const char* key, int& out) {
    if (n[key]) out = as_int(n[key], std::string("model.") + key);
  };
  i("layers", m.layers);
  i("hidden", m.hidden);
  i("heads", m.heads);
  i("kv_heads", m.kv_heads);
  i("ffn_hidden", m.ffn_hidden);
  i("vocab", m.vocab);
  i("seq", m.seq);
  i("experts", m.experts);
  i("top_k", m.top_k);
  if (n["heads"] && !n["kv_heads"] && !n["preset"]) m.kv_heads = m.heads;
  if (n["ffn"]) {
    const std::string f = scalar(n["ffn"], "model.ffn");
    if (f == "gelu") m.ffn = FfnKind::Gelu;
    else if (f == "swiglu") m.ffn = FfnKind::SwiGLU;
    else throw Error("model.ffn: '" + f + "' is not gelu or swiglu");
  }
  if (n["attention"]) {
    const std::string a = scalar(n["attention"], "model.attention");
    if (a == "plain") m.attention = AttentionKind::Plain;
    else if (a == "flash") m.attention = AttentionKind::Flash;
    else throw Error("model.attention: '" + a + "' is not plain or flash");
  }
  if (n["dtype"]) m.dtype = scalar(n["dtype"], "model.dtype");
  validate_model(m, "model");
  return m;
}

ParallelSpec resolve_parallel(const YAML::Node& n) {
  ParallelSpec p;
  if (!n) return p;
  check_keys(n, "parallel",
             {"dp", "zero", "tp", "sp", "cp", "cp_balance", "pp", "vchunks", "microbatches", "micro_batch_size", "ep",
              "ep_imbalance", "mesh2d", "recompute", "dp_bucket", "kv_replicate", "pp_scatter_gather",
              "distribute_checkpoints", "tp_overlap"});
  auto i = [&](const char* key, int& out) {
    if (n[key]) out = as_int(n[key], std::string("parallel.") + key);
  };
  i("dp", p.dp);
  i("zero", p.zero);
  i("tp", p.tp);
  i("cp", p.cp);
  i("pp", p.pp);
  i("vchunks", p.vchunks);
  i("microbatches", p.microbatches);
  i("micro_batch_size", p.micro_batch_size);
  i("ep", p.ep);
  i("mesh2d", p.mesh2d);
  if (n["sp"]) p.sp = as_bool(n["sp"], "parallel.sp");
  if (n["cp_balance"]) p.cp_balance = as_bool(n["cp_balance"], "parallel.cp_balance");
  if (n["kv_replicate"]) p.kv_replicate = as_bool(n["kv_replicate"], "parallel.kv_replicate");
  if (n["pp_scatter_gather"]) p.pp_scatter_gather = as_bool(n["pp_scatter_gather"], "parallel.pp_scatter_gather");
  if (n["tp_overlap"]) p.tp_overlap = as_bool(n["tp_overlap"], "parallel.tp_overlap");
  if (n["distribute_checkpoints"])
    p.distribute_checkpoints = as_bool(n["distribute_checkpoints"], "parallel.distribute_checkpoints");
  if (n["ep_imbalance"]) p.ep_imbalance = as_double(n["ep_imbalance"], "parallel.ep_imbalance");
  if (n["recompute"]) p.recompute = Recompute::parse(scalar(n["recompute"], "parallel.recompute"), "parallel.recompute");
  if (n["dp_bucket"])
    p.dp_bucket_mib = static_cast<double>(parse_bytes(scalar(n["dp_bucket"], "parallel.dp_bucket"), "parallel.dp_bucket")) /
                      (1024.0 * 1024.0);
  return p;
}

}  // namespace

ScenarioNode::ScenarioNode() : node_(std::make_unique<YAML::Node>()) {}
ScenarioNode::~ScenarioNode() = default;
ScenarioNode::ScenarioNode(const ScenarioNode& o) : source_(o.source_), node_(std::make_unique<YAML::Node>(YAML::Clone(*o.node_))) {}
ScenarioNode& ScenarioNode::operator=(const ScenarioNode& o) {
  if (this != &o) {
    source_ = o.source_;
    node_ = std::make_unique<YAML::Node>(YAML::Clone(*o.node_));
  }
  return *this;
}

ScenarioNode ScenarioNode::parse(const std::string& text, const std::string& source) {
  ScenarioNode s;
  s.source_ = source;
  *s.node_ = parse_yaml_text(text, source);
  if (!s.node_->IsMap()) throw Error(source + ": a scenario is a map with model:, parallel:, topology:, ...");
  return s;
}

ScenarioNode ScenarioNode::load(const std::string& path) {
  const auto text = read_text_file(path);
  if (!text) throw Error(path + ": cannot open the scenario file; check the path");
  return parse(*text, path);
}

ScenarioNode ScenarioNode::builtin_default() { return parse(kDefault, "built-in scenario"); }

void ScenarioNode::set(const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error("--set: '" + assignment + "' is not path=value; write e.g. --set parallel.tp=4");
  const std::string path = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  std::vector<std::string> keys;
  for (std::size_t pos = 0;;) {
    const auto dot = path.find('.', pos);
    keys.push_back(path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos));
    if (keys.back().empty()) throw Error("--set: '" + path + "' has an empty key");
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  YAML::Node cur = *node_;
  for (std::size_t i = 0; i + 1 < keys.size(); ++i) {
    YAML::Node next = cur[keys[i]];
    if (next && next.IsScalar()) {
      if (keys[i] != "model")
        throw Error("--set " + path + ": '" + keys[i] + "' is a value, not a map of fields");
      YAML::Node m;
      m["preset"] = next.as<std::string>();
      cur[keys[i]] = m;
      next = cur[keys[i]];
    }
    if (!next) {
      cur[keys[i]] = YAML::Node(YAML::NodeType::Map);
      next = cur[keys[i]];
    }
    cur.reset(next);
  }
  cur[keys.back()] = value;
}

bool ScenarioNode::is_workload() const { return static_cast<bool>((*node_)["workload"]); }

Scenario ScenarioNode::resolve() const {
  const YAML::Node& n = *node_;
  check_keys(n, "", {"name", "model", "parallel", "topology", "placement", "order", "gpu", "run", "workload"});
  Scenario s;
  if (n["name"]) s.name = scalar(n["name"], "name");
  if (const YAML::Node& w = n["workload"]) {
    check_keys(w, "workload", {"collective", "bytes", "algorithm", "iterations", "root", "ranks", "mesh", "group"});
    CollectiveWorkload cw;
    cw.ranks = 0;
    if (!w["collective"]) throw Error("workload.collective: missing; e.g. collective: allreduce");
    const std::string kind = scalar(w["collective"], "workload.collective");
    const auto k = parse_coll_kind(kind);
    if (!k || *k == CollKind::SendRecv)
      throw Error("workload.collective: '" + kind +
                  "' is not one of allreduce, allgather, reducescatter, broadcast, reduce, alltoall");
    cw.kind = *k;
    if (!w["bytes"]) throw Error("workload.bytes: missing; e.g. bytes: 64MiB");
    cw.bytes = parse_bytes(scalar(w["bytes"], "workload.bytes"), "workload.bytes");
    if (w["algorithm"]) cw.algorithm = scalar(w["algorithm"], "workload.algorithm");
    if (cw.algorithm == "auto") cw.algorithm.clear();
    if (w["iterations"]) cw.iterations = as_int(w["iterations"], "workload.iterations");
    if (w["root"]) cw.root = as_int(w["root"], "workload.root");
    if (w["ranks"]) cw.ranks = as_int(w["ranks"], "workload.ranks");
    if (w["mesh"]) {
      cw.mesh = parse_mesh(scalar(w["mesh"], "workload.mesh"), "workload.mesh").dims;
      const int size = Mesh{cw.mesh}.size();
      if (cw.ranks != 0 && cw.ranks != size)
        throw Error("workload.ranks: " + std::to_string(cw.ranks) + " but workload.mesh has " + std::to_string(size) +
                    " ranks; drop ranks or make them agree");
      cw.ranks = size;
      if (w["group"]) cw.group = scalar(w["group"], "workload.group");
      if (cw.group != "all") try {
          Mesh{cw.mesh}.dim_index(cw.group);
        } catch (const Error& e) {
          throw Error(std::string("workload.group: ") + e.what());
        }
    } else if (w["group"]) {
      throw Error("workload.group: needs workload.mesh (e.g. mesh: row=2,col=4, group: row)");
    }
    if (cw.iterations < 1) throw Error("workload.iterations: must be >= 1");
    s.workload = cw;
    if (n["model"]) s.model = resolve_model(n["model"]);
  } else {
    s.model = resolve_model(n["model"]);
  }
  s.parallel = resolve_parallel(n["parallel"]);
  if (n["topology"]) {
    s.topology = scalar(n["topology"], "topology");
    s.topology_given = true;
  }
  if (n["placement"]) s.placement = scalar(n["placement"], "placement");
  if (n["gpu"]) s.gpu = scalar(n["gpu"], "gpu");
  if (n["order"]) {
    const YAML::Node& o = n["order"];
    if (o.IsSequence()) {
      for (const auto& x : o) s.order.push_back(scalar(x, "order"));
    } else {
      std::stringstream ss(scalar(o, "order"));
      for (std::string part; std::getline(ss, part, ',');) s.order.push_back(part);
    }
  }
  if (const YAML::Node& r = n["run"]) {
    check_keys(r, "run", {"fidelity", "algorithm", "profile"});
    if (r["fidelity"]) s.fidelity = parse_fidelity(scalar(r["fidelity"], "run.fidelity"), "run.fidelity");
    if (r["algorithm"]) s.algorithm = scalar(r["algorithm"], "run.algorithm");
    if (r["profile"]) s.profile = scalar(r["profile"], "run.profile");
  }
  if (s.gpu.empty()) s.gpu = default_gpu_for(s.topology);
  // Mesh order: a permutation of the layout's axes.
  if (!s.order.empty()) {
    std::set<std::string> want, got(s.order.begin(), s.order.end());
    for (const auto& [name, size] : mesh_axes(s.parallel)) want.insert(name);
    if (want != got || got.size() != s.order.size())
      throw Error("order: must list each mesh axis once, outermost first; this layout's axes are " + keys_of(want));
  }
  return s;
}

std::string default_gpu_for(const std::string& topology_spec) {
  const std::string preset = topology_spec.substr(0, topology_spec.find(':'));
  for (const PresetInfo& p : preset_catalog())
    if (p.name == preset) return p.gpu;
  return "h100";  // a topology file: its devices name no GPU model
}

}  // namespace meshsim
