// Scenario YAML: parsing, --set overrides, and resolution into a validated Scenario.
#include "sim/scenario.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <set>
#include <sstream>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "core/flag.h"
#include "core/hash.h"
#include "core/units.h"
#include "core/yaml_reader.h"
#include "schedule/plan.h"
#include "sim/compute_model.h"
#include "sim/scenario_fields.h"
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

// The scalar fields of a section, one row each: its key and the member it sets. A section's
// valid keys are its rows of scenario_fields() (sim/scenario_fields.h), which documents them;
// these tables and the fields read by hand below them read those keys.
template <typename Spec>
struct IntField {
  const char* key;
  int Spec::*member;
};
template <typename Spec>
struct BoolField {
  const char* key;
  bool Spec::*member;
};

constexpr IntField<ModelSpec> kModelInts[] = {{"layers", &ModelSpec::layers},
                                              {"hidden", &ModelSpec::hidden},
                                              {"heads", &ModelSpec::heads},
                                              {"kv_heads", &ModelSpec::kv_heads},
                                              {"ffn_hidden", &ModelSpec::ffn_hidden},
                                              {"vocab", &ModelSpec::vocab},
                                              {"seq", &ModelSpec::seq},
                                              {"experts", &ModelSpec::experts},
                                              {"top_k", &ModelSpec::top_k},
                                              {"shared_experts", &ModelSpec::shared_experts},
                                              {"q_lora_rank", &ModelSpec::q_lora_rank},
                                              {"kv_lora_rank", &ModelSpec::kv_lora_rank},
                                              {"qk_nope_head_dim", &ModelSpec::qk_nope_head_dim},
                                              {"qk_rope_head_dim", &ModelSpec::qk_rope_head_dim},
                                              {"v_head_dim", &ModelSpec::v_head_dim}};
constexpr BoolField<ModelSpec> kModelBools[] = {{"bias", &ModelSpec::bias},
                                                {"tied_embeddings", &ModelSpec::tied_embeddings}};

constexpr IntField<ParallelSpec> kParallelInts[] = {{"dp", &ParallelSpec::dp},
                                                    {"zero", &ParallelSpec::zero},
                                                    {"tp", &ParallelSpec::tp},
                                                    {"cp", &ParallelSpec::cp},
                                                    {"pp", &ParallelSpec::pp},
                                                    {"vchunks", &ParallelSpec::vchunks},
                                                    {"microbatches", &ParallelSpec::microbatches},
                                                    {"micro_batch_size", &ParallelSpec::micro_batch_size},
                                                    {"ep", &ParallelSpec::ep},
                                                    {"etp", &ParallelSpec::etp},
                                                    {"mesh2d", &ParallelSpec::mesh2d}};
constexpr BoolField<ParallelSpec> kParallelBools[] = {{"sp", &ParallelSpec::sp},
                                                      {"cp_balance", &ParallelSpec::cp_balance},
                                                      {"kv_replicate", &ParallelSpec::kv_replicate},
                                                      {"pp_scatter_gather", &ParallelSpec::pp_scatter_gather},
                                                      {"distribute_checkpoints", &ParallelSpec::distribute_checkpoints},
                                                      {"tp_overlap", &ParallelSpec::tp_overlap}};

// Reads a section's table fields into `spec`, after checking every key of `n` is one of the
// section's documented fields.
template <typename Spec, std::size_t NI, std::size_t NB>
void read_fields(const YamlReader& r, const YAML::Node& n, const std::string& section, const IntField<Spec> (&ints)[NI],
                 const BoolField<Spec> (&bools)[NB], const char* example, Spec& spec) {
  const std::vector<std::string> keys = section_keys(section);
  auto documented = [&](const char* key) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end())
      throw std::logic_error(section + "." + key + " is read but not in scenario_fields()");
  };
  for (const auto& f : ints) documented(f.key);
  for (const auto& f : bools) documented(f.key);
  r.only_keys(n, section, keys, example);
  for (const auto& f : ints)
    if (n[f.key]) spec.*f.member = r.integer(n[f.key], section + "." + f.key);
  for (const auto& f : bools)
    if (n[f.key]) spec.*f.member = r.boolean(n[f.key], section + "." + f.key);
}

ModelSpec resolve_model(const YamlReader& r, const YAML::Node& n) {
  if (!n) throw Error(r.source() + ": model: missing; give a preset name (e.g. model: gpt3-175b) or fields");
  if (n.IsScalar()) return r.located(n, [&] { return model_preset(n.Scalar()); });
  ModelSpec m = n["preset"] ? r.located(n["preset"], [&] { return model_preset(r.text(n["preset"], "model.preset")); })
                            : ModelSpec{};
  read_fields(r, n, "model", kModelInts, kModelBools, "{preset: gpt3-175b, layers: 8}", m);
  if (n["name"])
    m.name = r.text(n["name"], "model.name");
  else if (!n["preset"])
    m.name = "custom";
  if (n["heads"] && !n["kv_heads"] && !n["preset"]) m.kv_heads = m.heads;
  // The model's kinds: each a name out of its two, or one error naming them.
  auto kind = [&](const char* key, auto parse, const char* choices, auto& out) {
    const YAML::Node& v = n[key];
    if (!v) return;
    const std::string field = std::string("model.") + key, t = r.text(v, field);
    const auto k = parse(t);
    if (!k) r.fail(v, field, "'" + t + "' is not " + choices);
    out = *k;
  };
  kind("ffn", parse_ffn_kind, "gelu or swiglu", m.ffn);
  kind("norm", parse_norm_kind, "layernorm or rmsnorm", m.norm);
  kind("position", parse_position_kind, "absolute or rope", m.position);
  kind("attention", parse_attention_kind, "plain or flash", m.attention);
  if (const YAML::Node& d = n["dtype"]) {
    const std::string t = r.text(d, "model.dtype");
    const std::optional<DType> dtype = parse_dtype(t);
    if (!dtype) r.fail(d, "model.dtype", "'" + t + "' is not a known type; write bf16, fp16 or fp32");
    m.dtype = *dtype;
  }
  r.located(n, [&] { validate_model(m, "model"); });
  return m;
}

// dp for `dp: auto`: the topology's GPUs over pp x cp x tp, which must divide them.
// `parallel.global_batch: B` (sequences per iteration): the micro-batches that make it with the
// layout's dp (given or auto) and micro_batch_size, so layouts of one cluster compare at one
// batch. B must be a whole multiple of dp x micro_batch_size; microbatches may not be given too.
void fix_global_batch(const YamlReader& r, const YAML::Node& parallel, Scenario& s) {
  if (!parallel || !parallel.IsMap() || !parallel["global_batch"]) return;
  const YAML::Node at = parallel["global_batch"];
  const std::int64_t batch = r.integer(at, "parallel.global_batch");
  if (parallel["microbatches"])
    r.fail(at, "parallel.global_batch",
           "sets the micro-batches (global_batch / (dp x micro_batch_size)); give it or parallel.microbatches, "
           "not both");
  const std::int64_t per = std::int64_t{s.parallel.dp} * s.parallel.micro_batch_size;
  if (batch < 1 || per < 1 || batch % per != 0)
    r.fail(at, "parallel.global_batch",
           fmt::format("{} sequences are not a whole number of micro-batches of dp x micro_batch_size = {} x {} = {}; "
                       "use a multiple of {}",
                       batch, s.parallel.dp, s.parallel.micro_batch_size, per, per));
  s.parallel.microbatches = static_cast<int>(batch / per);
}

int auto_dp(const YamlReader& r, const YAML::Node& at, const Scenario& s) {
  ParallelSpec one = s.parallel;
  one.dp = 1;
  const std::int64_t rest = one.world_size();
  const std::int64_t gpus = s.gpus.empty() ? r.located(at, [&] { return shared_topology(s.topology)->num_gpus(); })
                                           : static_cast<std::int64_t>(s.gpus.size());
  if (rest < 1 || gpus % rest != 0)
    r.fail(at, "parallel.dp",
           fmt::format("auto: the {} GPUs of {} are not a multiple of pp x cp x tp = {}; give dp a number or "
                       "change the layout",
                       gpus, s.gpus.empty() ? "topology " + s.topology : s.gpus_from, rest));
  return static_cast<int>(gpus / rest);
}

// parallel.stage_layers: [1, 2, 2, 1] in a file, or "1,2,2,1" (--set parallel.stage_layers=1,2,2,1).
std::vector<int> stage_layers(const YamlReader& r, const YAML::Node& v) {
  const char* field = "parallel.stage_layers";
  std::vector<int> out;
  auto one = [&](const YAML::Node& at, const std::string& text) {
    const std::optional<int> value = parse_int(text);
    if (!value || *value < 0 || *value > kMaxLayers)
      r.fail(at, field,
             fmt::format("'{}' is not a layer count; write the layers of each virtual stage, e.g. "
                         "[1, 2, 2, 1] or 1,2,2,1",
                         text));
    out.push_back(*value);
  };
  if (v.IsSequence()) {
    for (const YAML::Node& e : v) one(e, e.IsScalar() ? e.Scalar() : std::string("a list"));
  } else {
    std::stringstream ss(r.text(v, field));
    for (std::string part; std::getline(ss, part, ',');) {
      part.erase(0, part.find_first_not_of(' '));
      part.erase(part.find_last_not_of(' ') + 1);
      one(v, part);
    }
  }
  if (out.empty() || out.size() > static_cast<std::size_t>(kMaxGpus))
    r.fail(v, field, "expected one layer count per virtual stage, e.g. [1, 2, 2, 1]");
  return out;
}

ParallelSpec resolve_parallel(const YamlReader& r, const YAML::Node& n) {
  ParallelSpec p;
  if (!n) return p;
  read_fields(r, n, "parallel", kParallelInts, kParallelBools, "{dp: 2, tp: 8, pp: 4}", p);
  if (n["ep_imbalance"]) p.ep_imbalance = r.number(n["ep_imbalance"], "parallel.ep_imbalance");
  if (const YAML::Node& v = n["recompute"])
    p.recompute = r.located(v, [&] { return Recompute::parse(r.text(v, "parallel.recompute"), "parallel.recompute"); });
  if (const YAML::Node& v = n["stage_layers"]) {
    if (v.IsScalar() && v.Scalar() == "balance")
      p.balance_stages = true;
    else
      p.stage_layers = stage_layers(r, v);
  }
  if (const YAML::Node& v = n["dp_bucket"])
    p.dp_bucket_mib = static_cast<double>(r.located(
                          v, [&] { return parse_bytes(r.text(v, "parallel.dp_bucket"), "parallel.dp_bucket"); })) /
                      (1024.0 * 1024.0);
  return p;
}

CollectiveWorkload resolve_workload(const YamlReader& r, const YAML::Node& w) {
  r.only_keys(w, "workload", section_keys("workload"), "{collective: allreduce, bytes: 64MiB}");
  CollectiveWorkload cw;
  cw.ranks = 0;
  const YAML::Node kind_node = r.required(w, "collective", "workload", "allreduce");
  const std::string kind = r.text(kind_node, "workload.collective");
  const auto k = parse_coll_kind(kind);
  if (!k || *k == CollKind::SendRecv)
    r.fail(kind_node, "workload.collective",
           "'" + kind + "' is not one of allreduce, allgather, reducescatter, broadcast, reduce, alltoall");
  cw.kind = *k;
  const YAML::Node bytes = r.required(w, "bytes", "workload", "64MiB");
  cw.bytes = r.located(bytes, [&] { return parse_bytes(r.text(bytes, "workload.bytes"), "workload.bytes"); });
  if (w["algorithm"]) cw.algorithm = r.text(w["algorithm"], "workload.algorithm");
  if (w["iterations"]) cw.iterations = r.integer(w["iterations"], "workload.iterations");
  if (w["root"]) cw.root = r.integer(w["root"], "workload.root");
  if (w["ranks"]) cw.ranks = r.integer(w["ranks"], "workload.ranks");
  if (const YAML::Node& mesh = w["mesh"]) {
    cw.mesh = r.located(mesh, [&] { return parse_mesh(r.text(mesh, "workload.mesh"), "workload.mesh").dims; });
    const int size = Mesh{cw.mesh}.size();
    if (cw.ranks != 0 && cw.ranks != size)
      r.fail(w["ranks"], "workload.ranks",
             std::to_string(cw.ranks) + " but workload.mesh has " + std::to_string(size) +
                 " ranks; drop ranks or make them agree");
    cw.ranks = size;
    if (w["group"]) cw.group = r.text(w["group"], "workload.group");
    if (cw.group != "all")
      r.located(w["group"], [&] {
        try {
          Mesh{cw.mesh}.dim_index(cw.group);
        } catch (const Error& e) {
          throw Error(std::string("workload.group: ") + e.what());
        }
      });
  } else if (w["group"]) {
    r.fail(w["group"], "workload.group", "needs workload.mesh (e.g. mesh: row=2,col=4, group: row)");
  }
  if (cw.iterations < 1) r.fail(w["iterations"], "workload.iterations", "must be >= 1");
  return cw;
}

// `stack: megatron-te`, or a map: {name: megatron-te, attention: fa2, tp_comm_overlap: false,
// tp_overlap_sms: 16, reduce_every_microbatch: true, eager: true, reshard_after_forward: false,
// reduce_dtype: fp32, fsdp: 1, backward_prefetch: post, optimizer: torch-loop}; the name gives the defaults.
TrainingStack resolve_stack(const YamlReader& r, const YAML::Node& st) {
  const char* example = "{name: megatron-te, attention: cudnn}";
  if (st.IsScalar()) return r.located(st, [&] { return training_stack(r.text(st, "stack")); });
  r.only_keys(st, "stack", section_keys("stack"), example);
  const YAML::Node name = r.required(st, "name", "stack", "megatron-te");
  TrainingStack t = r.located(name, [&] { return training_stack(r.text(name, "stack.name")); });
  if (const YAML::Node& a = st["attention"])
    t.attention =
        r.located(a, [&] { return parse_attention_library(r.text(a, "stack.attention"), "stack.attention"); });
  if (st["tp_comm_overlap"]) t.tp_comm_overlap = r.boolean(st["tp_comm_overlap"], "stack.tp_comm_overlap");
  if (const YAML::Node& v = st["tp_overlap_sms"]) {
    t.tp_overlap_sms = r.integer(v, "stack.tp_overlap_sms");
    if (t.tp_overlap_sms < 0 || t.tp_overlap_sms > 64)
      r.fail(v, "stack.tp_overlap_sms", "must be 0..64 SMs (TE's userbuffers use at most 32)");
  }
  if (st["reduce_every_microbatch"])
    t.reduce_every_microbatch = r.boolean(st["reduce_every_microbatch"], "stack.reduce_every_microbatch");
  if (st["eager"]) t.eager = r.boolean(st["eager"], "stack.eager");
  if (st["overlap_param_gather"])
    t.overlap_param_gather = r.boolean(st["overlap_param_gather"], "stack.overlap_param_gather");
  if (st["reshard_after_forward"])
    t.reshard_after_forward = r.boolean(st["reshard_after_forward"], "stack.reshard_after_forward");
  if (const YAML::Node& v = st["fsdp"]) {
    t.fsdp = r.integer(v, "stack.fsdp");
    if (t.fsdp < 0 || t.fsdp > 2)
      r.fail(v, "stack.fsdp", "must be 1 (FSDP1, flat parameters), 2 (FSDP2, fully_shard) or 0 (neither)");
  }
  if (const YAML::Node& b = st["backward_prefetch"])
    t.backward_prefetch = r.located(
        b, [&] { return parse_backward_prefetch(r.text(b, "stack.backward_prefetch"), "stack.backward_prefetch"); });
  if (const YAML::Node& f = st["fp8"])
    t.fp8 = r.located(f, [&] { return parse_fp8_recipe(r.text(f, "stack.fp8"), "stack.fp8"); });
  if (const YAML::Node& o = st["optimizer"])
    t.optimizer = r.located(o, [&] { return parse_optimizer_impl(r.text(o, "stack.optimizer"), "stack.optimizer"); });
  if (const YAML::Node& d = st["reduce_dtype"]) {
    const std::string v = r.text(d, "stack.reduce_dtype");
    if (v == "fp32")
      t.reduce_bytes = 4;
    else if (v == "bf16" || v == "fp16")
      t.reduce_bytes = 2;
    else if (v == "model")
      t.reduce_bytes = 0;
    else
      r.fail(d, "stack.reduce_dtype", "'" + v + "' is not fp32, bf16, fp16 or model (the model's dtype)");
  }
  return t;
}

}  // namespace

ScenarioNode::ScenarioNode() : node_(std::make_unique<YAML::Node>()) {}
ScenarioNode::~ScenarioNode() = default;
ScenarioNode::ScenarioNode(const ScenarioNode& o)
    : source_(o.source_), node_(std::make_unique<YAML::Node>(YAML::Clone(*o.node_))) {}
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

void ScenarioNode::unset(const std::string& path) {
  YAML::Node cur = *node_;
  std::size_t pos = 0;
  for (std::size_t dot; (dot = path.find('.', pos)) != std::string::npos; pos = dot + 1) {
    YAML::Node next = cur[path.substr(pos, dot - pos)];
    if (!next || !next.IsMap()) return;
    cur.reset(next);  // rebinds (assignment would overwrite the node cur refers to)
  }
  if (cur.IsMap()) cur.remove(path.substr(pos));
}

void ScenarioNode::set(const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw Error(flag("set") + ": '" + assignment + "' is not path=value; write e.g. " + flag("set", "parallel.tp=4"));
  const std::string path = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  std::vector<std::string> keys;
  for (std::size_t pos = 0;;) {
    const auto dot = path.find('.', pos);
    keys.push_back(path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos));
    if (keys.back().empty()) throw Error(flag("set") + ": '" + path + "' has an empty key");
    if (dot == std::string::npos) break;
    pos = dot + 1;
  }
  YAML::Node cur = *node_;
  // A list's entry by its index: jobs.1.parallel.tp=4.
  auto entry = [&](const std::string& key) {
    const std::optional<int> at = parse_int(key);
    if (!at || *at < 0 || *at >= static_cast<int>(cur.size()))
      throw Error(fmt::format("{}: '{}' is not an entry of the list (0..{})", flag("set", path), key,
                              static_cast<int>(cur.size()) - 1));
    return cur[static_cast<std::size_t>(*at)];
  };
  for (std::size_t i = 0; i + 1 < keys.size(); ++i) {
    YAML::Node next = cur.IsSequence() ? entry(keys[i]) : cur[keys[i]];
    if (next && next.IsScalar()) {
      if (keys[i] != "model" && keys[i] != "stack")
        throw Error(flag("set", path) + ": '" + keys[i] + "' is a value, not a map of fields");
      YAML::Node m;
      m[keys[i] == "model" ? "preset" : "name"] = next.as<std::string>();
      cur[keys[i]] = m;
      next = cur[keys[i]];
    }
    if (!next) {
      cur[keys[i]] = YAML::Node(YAML::NodeType::Map);
      next = cur[keys[i]];
    }
    cur.reset(next);
  }
  if (cur.IsSequence()) {  // a list's entry replaced whole: jobs.1={name: b, nodes: 8-15} is not a value
    entry(keys.back());
    throw Error(fmt::format("{}: '{}' is a list entry, not a value; set one of its fields ({}.FIELD=VALUE)",
                            flag("set", path), keys.back(), path));
  }
  cur[keys.back()] = YAML::Node(value);  // a fresh node: no file position, so errors name --set
}

bool ScenarioNode::is_workload() const { return static_cast<bool>((*node_)["workload"]); }

// `perturb: {gpu_factors: "17=0.8", link_factors: "n0.nic0 -> su0.rail0=0.5"}`: NAME=FACTOR items
// separated by commas, each factor in (0, 1000]; a link's may be `down` (read as 0: the cable
// failed). The names are checked against the topology when it is built: sim/training_sim.cpp.
template <typename Name>
std::vector<std::pair<Name, double>> factor_items(const YamlReader& r, const YAML::Node& n, const std::string& field,
                                                  const char* example, bool down_allowed = false) {
  std::vector<std::pair<Name, double>> out;
  const std::string text = r.text(n, field);
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    const auto eq = item.rfind('=');
    auto trim = [](std::string t) {
      t.erase(0, t.find_first_not_of(' '));
      t.erase(t.find_last_not_of(' ') + 1);
      return t;
    };
    const std::string name = eq == std::string::npos ? "" : trim(item.substr(0, eq));
    const std::string value = eq == std::string::npos ? "" : trim(item.substr(eq + 1));
    char* end = nullptr;
    const bool down = down_allowed && value == "down";
    const double f = down ? 0 : value.empty() ? -1 : std::strtod(value.c_str(), &end);
    if (!down && (name.empty() || end == nullptr || *end != '\0' || !(f > 0) || f > 1000))
      r.fail(n, field,
             fmt::format("'{}' is not NAME=FACTOR with a factor in (0, 1000]{}; write e.g. {}", trim(item),
                         down_allowed ? " or down" : "", example));
    if constexpr (std::is_same_v<Name, int>) {
      const std::optional<int> gpu = parse_int(name);
      if (!gpu || *gpu < 0) r.fail(n, field, fmt::format("'{}' is not a GPU index (0, 1, ...)", name));
      out.emplace_back(*gpu, f);
    } else {
      out.emplace_back(name, f);
    }
  }
  return out;
}

double GpuDraw::factor(int gpu) const {
  if (kind == Kind::None) return 1;
  // Two uniform numbers in [0, 1) for this GPU, from the seed and the GPU's index alone.
  auto uniform = [&](std::uint64_t k) {
    const std::uint64_t h = splitmix64(splitmix64(seed) ^ (static_cast<std::uint64_t>(gpu) * 2 + k));
    return static_cast<double>(h >> 11) * 0x1.0p-53;
  };
  double f = 1;
  if (kind == Kind::Normal)  // Box-Muller
    f = 1 + a * std::sqrt(-2 * std::log(1 - uniform(0))) * std::cos(2 * std::numbers::pi * uniform(1));
  else if (kind == Kind::Uniform)
    f = a + (b - a) * uniform(0);
  else if (uniform(0) < a)
    f = b;
  return std::clamp(f, 0.05, 1.0);
}

// `perturb.gpu_draw`: NAME(A) or NAME(A, B), checked against each distribution's range.
GpuDraw resolve_gpu_draw(const YamlReader& r, const YAML::Node& n, const YAML::Node& seed) {
  GpuDraw d;
  d.text = r.text(n, "perturb.gpu_draw");
  const auto open = d.text.find('('), close = d.text.rfind(')');
  const std::string name = open == std::string::npos ? d.text : d.text.substr(0, open);
  std::vector<double> args;
  bool parsed = open != std::string::npos && close == d.text.size() - 1 && close > open;
  if (parsed) {
    std::stringstream ss(d.text.substr(open + 1, close - open - 1));
    for (std::string item; std::getline(ss, item, ',');) {
      char* end = nullptr;
      args.push_back(std::strtod(item.c_str(), &end));
      parsed = parsed && end != item.c_str() && std::string(end).find_first_not_of(' ') == std::string::npos;
    }
  }
  const char* forms =
      "normal(SD) with SD in (0, 1], uniform(LO, HI) with 0 < LO <= HI <= 1, or stragglers(P, F) "
      "with P in [0, 1] and F in (0, 1]; e.g. normal(0.02)";
  auto in = [](double x, double lo, double hi) { return x >= lo && x <= hi; };
  if (parsed && name == "normal" && args.size() == 1 && args[0] > 0 && args[0] <= 1)
    d.kind = GpuDraw::Kind::Normal;
  else if (parsed && name == "uniform" && args.size() == 2 && args[0] > 0 && args[0] <= args[1] && args[1] <= 1)
    d.kind = GpuDraw::Kind::Uniform;
  else if (parsed && name == "stragglers" && args.size() == 2 && in(args[0], 0, 1) && args[1] > 0 && args[1] <= 1)
    d.kind = GpuDraw::Kind::Stragglers;
  else
    r.fail(n, "perturb.gpu_draw",
           fmt::format("'{}' is not a distribution meshsim draws from; write {}", d.text, forms));
  d.a = args[0];
  d.b = args.size() > 1 ? args[1] : 0;
  if (seed) {
    const int v = r.integer(seed, "perturb.seed");
    if (v < 0) r.fail(seed, "perturb.seed", "must be a whole number >= 0; e.g. 7");
    d.seed = static_cast<std::uint64_t>(v);
  }
  return d;
}

Perturbations resolve_perturb(const YamlReader& r, const YAML::Node& n) {
  Perturbations p;
  r.only_keys(n, "perturb", section_keys("perturb"),
              "{gpu_factors: '17=0.8', link_factors: 'n0.nic0 -> su0.rail0=0.5', gpu_draw: 'normal(0.02)', seed: 7}");
  if (const YAML::Node& g = n["gpu_factors"]) p.gpus = factor_items<int>(r, g, "perturb.gpu_factors", "17=0.8,40=0.5");
  if (const YAML::Node& d = n["gpu_draw"]) p.draw = resolve_gpu_draw(r, d, n["seed"]);
  if (n["seed"] && !n["gpu_draw"])
    r.fail(n["seed"], "perturb.seed", "seeds perturb.gpu_draw, which is not given; add it");
  if (const YAML::Node& l = n["link_factors"]) {
    p.links = factor_items<std::string>(r, l, "perturb.link_factors", "'n0.nic0 -> su0.rail0=0.5'", true);
    p.links_text = r.text(l, "perturb.link_factors");
  }
  return p;
}

namespace {

// "5" or "3-7": an index or an inclusive range of them, first <= last, none negative; nullopt
// otherwise (the caller names its field).
std::optional<std::pair<int, int>> index_range(const std::string& text) {
  const auto dash = text.find('-', 1);
  const std::optional<int> lo = parse_int(text.substr(0, dash));
  const std::optional<int> hi = dash == std::string::npos ? lo : parse_int(text.substr(dash + 1));
  if (!lo || !hi || *lo < 0 || *hi < *lo) return std::nullopt;
  return std::make_pair(*lo, *hi);
}

// `node_gpus: 8-15=a100,16=h200`: node ranges of the topology, each once, and the compute preset
// of their GPUs.
std::vector<NodeGpus> resolve_node_gpus(const YamlReader& r, const YAML::Node& v, const std::string& topology) {
  const char* field = "node_gpus";
  const int nodes = r.located(v, [&] { return shared_topology(topology)->num_nodes(); });
  std::vector<NodeGpus> out;
  std::vector<char> named(static_cast<std::size_t>(nodes), 0);
  std::stringstream ss(r.text(v, field));
  for (std::string item; std::getline(ss, item, ',');) {
    const auto eq = item.find('=');
    const auto range = eq == std::string::npos ? std::nullopt : index_range(item.substr(0, eq));
    if (!range)
      r.fail(v, field, fmt::format("'{}' is not NODES=GPU; write e.g. 8-15=a100 (nodes 8 to 15 hold A100s)", item));
    if (range->second >= nodes)
      r.fail(v, field, fmt::format("node {} is not in topology {} (nodes 0..{})", range->second, topology, nodes - 1));
    NodeGpus g{range->first, range->second, item.substr(eq + 1)};
    r.located(v, [&] { return gpu_preset(g.gpu); });  // an unknown preset names the presets
    for (int n = g.first; n <= g.last; ++n)
      if (std::exchange(named[static_cast<std::size_t>(n)], 1))
        r.fail(v, field, fmt::format("node {} is given twice", n));
    out.push_back(std::move(g));
  }
  if (out.empty()) r.fail(v, field, "names no nodes; write e.g. 8-15=a100");
  return out;
}

// One scenario's sections; `gpus` (a job of several: its GPUs of the shared topology) sets
// what `dp: auto` divides.
Scenario resolve_scenario(const YamlReader& r, const YAML::Node& n, std::vector<int> gpus = {},
                          std::string gpus_from = {}) {
  r.only_keys(n, "scenario", section_keys(""), "{model: gpt3-175b, parallel: {tp: 8}, topology: dgx-h100:nodes=2}");
  Scenario s;
  s.gpus = std::move(gpus);
  s.gpus_from = std::move(gpus_from);
  if (n["name"]) s.name = r.text(n["name"], "name");
  if (const YAML::Node& w = n["workload"]) {
    s.workload = resolve_workload(r, w);
    if (n["model"]) s.model = resolve_model(r, n["model"]);
  } else {
    s.model = resolve_model(r, n["model"]);
  }
  // `dp: auto`: as many data-parallel replicas as the topology's GPUs hold (read after it).
  const YAML::Node dp_node = n["parallel"] && n["parallel"].IsMap() ? n["parallel"]["dp"] : YAML::Node();
  const bool dp_auto = dp_node && dp_node.IsScalar() && dp_node.Scalar() == "auto";
  if (dp_auto) {
    YAML::Node rest = YAML::Clone(n["parallel"]);
    rest.remove("dp");
    s.parallel = resolve_parallel(r, rest);
  } else {
    s.parallel = resolve_parallel(r, n["parallel"]);
  }
  if (const YAML::Node& st = n["stack"]) s.parallel.stack = resolve_stack(r, st);
  if (n["topology"]) {
    s.topology = r.text(n["topology"], "topology");
    s.topology_given = true;
  }
  if (dp_auto) s.parallel.dp = auto_dp(r, dp_node, s);
  fix_global_batch(r, n["parallel"], s);
  if (n["placement"]) s.placement = r.text(n["placement"], "placement");
  if (n["gpu"]) s.gpu = r.text(n["gpu"], "gpu");
  if (const YAML::Node& pt = n["perturb"]) s.perturb = resolve_perturb(r, pt);
  if (const YAML::Node& g = n["node_gpus"]) {
    s.node_gpus_text = r.text(g, "node_gpus");
    s.node_gpus = resolve_node_gpus(r, g, s.topology);
  }
  if (const YAML::Node& o = n["order"]) {
    if (o.IsSequence()) {
      s.order = r.texts(o, "order", "[pp, dp, tp]");
    } else {
      std::stringstream ss(r.text(o, "order"));
      for (std::string part; std::getline(ss, part, ',');) s.order.push_back(part);
    }
  }
  if (const YAML::Node& run = n["run"]) {
    r.only_keys(run, "run", section_keys("run"), "{fidelity: flow}");
    if (const YAML::Node& f = run["fidelity"])
      s.fidelity = r.located(f, [&] { return parse_fidelity(r.text(f, "run.fidelity"), "run.fidelity"); });
    if (run["algorithm"]) s.algorithm = r.text(run["algorithm"], "run.algorithm");
    if (run["profile"]) s.profile = r.text(run["profile"], "run.profile");
    if (run["link_sharing"]) s.link_sharing = r.boolean(run["link_sharing"], "run.link_sharing");
  }
  if (s.gpu.empty()) s.gpu = default_gpu_for(s.topology);
  // Mesh order: a permutation of the layout's axes.
  if (!s.order.empty()) {
    std::set<std::string> want, got(s.order.begin(), s.order.end());
    for (const auto& [name, size] : mesh_axes(s.parallel)) want.insert(name);
    if (want != got || got.size() != s.order.size())
      r.fail(n["order"], "order",
             "must list each mesh axis once, outermost first; this layout's axes are " + keys_of(want));
  }
  return s;
}

// A job's `nodes: 0-7,16-23` or `gpus: 0-63`: indices and inclusive ranges, each once, within
// `limit`.
std::vector<int> index_ranges(const YamlReader& r, const YAML::Node& v, const std::string& field, const char* what,
                              int limit) {
  const std::string text = r.text(v, field);
  std::vector<int> out;
  std::set<int> seen;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    const auto range = index_range(item);
    if (!range)
      r.fail(v, field, fmt::format("'{}' is not a {} index or range; write e.g. 0-7 or 0-3,8-11", item, what));
    if (range->second >= limit)
      r.fail(v, field, fmt::format("{} {} is not in the topology ({}s 0..{})", what, range->second, what, limit - 1));
    for (int i = range->first; i <= range->second; ++i) {
      if (!seen.insert(i).second) r.fail(v, field, fmt::format("{} {} is given twice", what, i));
      out.push_back(i);
    }
  }
  if (out.empty()) r.fail(v, field, fmt::format("names no {}; write e.g. 0-7", what));
  return out;
}

// `jobs:`: each job a scenario of the top level's sections with its own laid over them, on
// its own GPUs of the shared topology; the top level keeps what they share.
Scenario resolve_jobs(const YamlReader& r, const YAML::Node& n) {
  r.only_keys(n, "scenario", section_keys(""), "{topology: dgx-h100:nodes=16, jobs: [{nodes: 0-7}, {nodes: 8-15}]}");
  const YAML::Node& list = n["jobs"];
  const char* example = "[{name: a, nodes: 0-7}, {name: b, nodes: 8-15}]";
  if (!list.IsSequence() || list.size() == 0) r.fail(list, "jobs", fmt::format("expected a list such as {}", example));
  if (n["workload"]) r.fail(n["workload"], "workload", "a collective workload runs alone; drop jobs: or workload:");
  const std::string topology = n["topology"] ? r.text(n["topology"], "topology") : Scenario{}.topology;
  const auto topo = r.located(n["topology"] ? n["topology"] : list, [&] { return shared_topology(topology); });
  std::vector<std::vector<int>> node_gpus(static_cast<std::size_t>(topo->num_nodes()));
  for (int g = 0; g < topo->num_gpus(); ++g) node_gpus[static_cast<std::size_t>(topo->node_of_gpu(g))].push_back(g);
  std::vector<int> owner(static_cast<std::size_t>(topo->num_gpus()), -1);
  std::vector<Scenario> jobs;
  for (std::size_t j = 0; j < list.size(); ++j) {
    const YAML::Node& job = list[j];
    const std::string at = fmt::format("jobs[{}]", j);
    r.only_keys(job, at, section_keys("jobs"), "{name: b, nodes: 8-15, parallel: {dp: 8}}");
    if (static_cast<bool>(job["nodes"]) == static_cast<bool>(job["gpus"]))
      r.fail(job, at, "give the job's nodes (nodes: 0-7) or its GPUs (gpus: 0-63), one of the two");
    std::vector<int> gpus;
    std::string from;
    if (const YAML::Node& v = job["nodes"]) {
      from = fmt::format("{}.nodes = {}", at, r.text(v, at + ".nodes"));
      for (int node : index_ranges(r, v, at + ".nodes", "node", topo->num_nodes()))
        gpus.insert(gpus.end(), node_gpus[static_cast<std::size_t>(node)].begin(),
                    node_gpus[static_cast<std::size_t>(node)].end());
    } else {
      from = fmt::format("{}.gpus = {}", at, r.text(job["gpus"], at + ".gpus"));
      gpus = index_ranges(r, job["gpus"], at + ".gpus", "GPU", topo->num_gpus());
    }
    const YAML::Node& where = job["nodes"] ? job["nodes"] : job["gpus"];
    for (int g : gpus) {
      int& o = owner[static_cast<std::size_t>(g)];
      if (o >= 0)
        r.fail(where, at,
               fmt::format("GPU {} is also job {}'s ('{}'); jobs share the fabric, not GPUs", g, o,
                           jobs[static_cast<std::size_t>(o)].name));
      o = static_cast<int>(j);
    }
    YAML::Node merged(YAML::NodeType::Map);
    for (const auto& kv : n)
      if (kv.first.Scalar() != "jobs" && kv.first.Scalar() != "name") merged[kv.first.Scalar()] = kv.second;
    for (const auto& kv : job)
      if (kv.first.Scalar() != "nodes" && kv.first.Scalar() != "gpus") merged[kv.first.Scalar()] = kv.second;
    Scenario s = resolve_scenario(r.prefixed(at + "."), merged, std::move(gpus), from);
    if (!job["name"]) s.name = fmt::format("job{}", j);
    jobs.push_back(std::move(s));
  }
  Scenario s = jobs.front();
  s.name = n["name"] ? r.text(n["name"], "name") : "jobs";
  s.gpus.clear();
  s.gpus_from.clear();
  s.jobs = std::move(jobs);
  return s;
}

}  // namespace

Scenario ScenarioNode::resolve() const {
  const YamlReader r(source_, flag("set"));
  return (*node_)["jobs"] ? resolve_jobs(r, *node_) : resolve_scenario(r, *node_);
}

std::string default_gpu_for(const std::string& topology_spec) {
  const std::string preset = topology_spec.substr(0, topology_spec.find(':'));
  for (const PresetInfo& p : preset_catalog())
    if (p.name == preset) return p.gpu;
  return "h100";  // a topology file: its devices name no GPU model
}

}  // namespace meshsim
