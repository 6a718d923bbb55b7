#include "tests/fuzz/targets.h"

#include <algorithm>

#include <map>

#include "backend/launch/launch_env.h"
#include "core/error.h"
#include "core/units.h"
#include "sim/machine_profile.h"
#include "sim/scenario.h"
#include "sim/training_sim.h"
#include "topology/presets.h"

namespace meshsim::fuzz {

namespace {

// The shape of a refusal: its first 40 characters without digits and quoted text (so that
// "unknown key 'x'" and "unknown key 'y'" are one outcome).
std::string outcome(const Error& e) {
  std::string out;
  bool quoted = false;
  for (const char* c = e.what(); *c && out.size() < 40; ++c) {
    if (*c == '\'')
      quoted = !quoted;
    else if (!quoted && !(*c >= '0' && *c <= '9'))
      out += *c;
  }
  return out;
}

// Simulating is part of the target only where it is quick: a mutated scenario may ask for
// a legal but hours-long run (a million micro-batches of a 128-layer model), which is not
// a finding.
bool quick_to_simulate(const Scenario& s) {
  if (s.workload || s.fidelity != Fidelity::Formula || !s.profile.empty()) return false;
  const std::int64_t gpus = s.parallel.world_size();
  const std::int64_t work = std::int64_t{s.model.layers} * s.parallel.microbatches * s.parallel.vchunks;
  return gpus <= 256 && work <= 4096;
}

std::string scenario(std::string_view input) {
  try {
    const ScenarioNode node = ScenarioNode::parse(std::string(input), "fuzz.yaml");
    const Scenario s = node.resolve();
    if (quick_to_simulate(s)) {
      static const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
      (void)simulate_training(s, registry, /*keep_ops=*/false);
    }
  } catch (const Error& e) {
    return outcome(e);
  }
  return "ok";
}

std::string topology(std::string_view input) {
  try {
    const Topology t = parse_topology_yaml(std::string(input), "fuzz.yaml");
    Router router(t);
    const int n = t.num_gpus();
    for (int a : {0, n / 2, n - 1})
      for (int b : {0, n - 1})
        if (a >= 0 && b >= 0 && a != b) (void)router.path(a, b);
  } catch (const Error& e) {
    return outcome(e);
  }
  return "ok";
}

std::string profile(std::string_view input) {
  try {
    (void)parse_machine_profile(std::string(input), "fuzz.yaml");
  } catch (const Error& e) {
    return outcome(e);
  }
  return "ok";
}

std::string topology_spec(std::string_view input) {
  try {
    // One line: a spec longer than that is not a spec anyone types; cut it there. A spec
    // that names a YAML file is the topology target's (and must not open files here).
    const std::string spec(input.substr(0, std::min<std::size_t>(input.find('\n'), 512)));
    if (spec.ends_with(".yaml") || spec.ends_with(".yml")) return "file";
    (void)resolve_topology(spec).num_gpus();
  } catch (const Error& e) {
    return outcome(e);
  }
  return "ok";
}

std::string units(std::string_view input) {
  const std::size_t space = input.find(' ');
  const std::string_view kind = input.substr(0, space);
  const std::string_view text = space == std::string_view::npos ? std::string_view{} : input.substr(space + 1);
  try {
    if (kind == "bytes")
      (void)parse_bytes(text, "--bytes");
    else if (kind == "sweep")
      (void)parse_bytes_sweep(text, "--bytes");
    else if (kind == "bandwidth")
      (void)parse_bandwidth(text, "bandwidth");
    else if (kind == "time")
      (void)parse_time(text, "latency");
    else if (kind == "flops")
      (void)parse_flops(text, "flops");
    else
      (void)parse_int(text);
  } catch (const Error& e) {
    return outcome(e);
  }
  return "ok";
}

// The launcher's environment as lines NAME=VALUE: the variables of every launcher meshsim
// reads (MESHSIM_*, torchrun's, Slurm's, Open MPI's) and their heartbeat settings.
std::string launch_env(std::string_view input) {
  std::map<std::string, std::string> vars;
  std::size_t pos = 0;
  while (pos < input.size()) {
    std::size_t end = input.find('\n', pos);
    if (end == std::string_view::npos) end = input.size();
    const std::string_view line = input.substr(pos, end - pos);
    const std::size_t eq = line.find('=');
    if (eq != std::string_view::npos && eq > 0) vars[std::string(line.substr(0, eq))] = line.substr(eq + 1);
    pos = end + 1;
  }
  auto get = [&](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  try {
    (void)launch::launch_env_from(get);
    (void)launch::heartbeat_env_from(get);
  } catch (const Error& e) {
    return outcome(e);
  }
  return "ok";
}

const std::vector<std::string> kYamlTokens = {"---",        "--- ",       "...",        "&b",
                                              "*b",         "<<: *b",     "!!str ",     "%YAML 1.2\n",
                                              ": ",         "\n",         "\n  ",       "- ",
                                              "{",          "}",          "[",          "]",
                                              ", ",         "#",          "'",          "\"",
                                              "&a",         "*a",         "<<: *a",     "~",
                                              "null",       "0",          "-1",         "1",
                                              "2",          "3",          "8",          "1e9",
                                              "1e300",      "-1e300",     "1e-300",     "nan",
                                              ".nan",       "inf",        ".inf",       "-inf",
                                              "2147483647", "2147483648", "4294967297", "9223372036854775807",
                                              "536870913",  "0x10",       "true",       "yes",
                                              "KiB",        "MiB",        "GiB",        "TB",
                                              "GB/s",       "Gb/s",       "us",         "ms",
                                              "ps",         "TFLOP/s"};

}  // namespace

const std::vector<Target>& targets() {
  static const std::vector<Target> all = [] {
    std::vector<std::string> scenario_tokens = kYamlTokens;
    for (const char* t : {"model",
                          "parallel",
                          "dp",
                          "tp",
                          "pp",
                          "cp",
                          "ep",
                          "zero",
                          "vchunks",
                          "microbatches",
                          "micro_batch_size",
                          "mesh2d",
                          "recompute",
                          "layers",
                          "hidden",
                          "heads",
                          "seq",
                          "vocab",
                          "topology",
                          "placement",
                          "gpu",
                          "fidelity",
                          "workload",
                          "bytes",
                          "collective",
                          "experts"})
      scenario_tokens.push_back(t);
    std::vector<std::string> topo_tokens = kYamlTokens;
    for (const char* t : {"devices",
                          "links",
                          "name",
                          "kind",
                          "node",
                          "gpu",
                          "switch",
                          "nvswitch",
                          "nic",
                          "a",
                          "b",
                          "bandwidth",
                          "efficiency",
                          "latency",
                          "bandwidth_ba",
                          "reduce_efficiency",
                          "forwards",
                          "preset",
                          "params",
                          "protocols",
                          "nvlink",
                          "pcie",
                          "ib"})
      topo_tokens.push_back(t);
    std::vector<std::string> spec_tokens = {":",
                                            ",",
                                            "=",
                                            "nodes",
                                            "gpus_per_node",
                                            "inter",
                                            "rail",
                                            "fat-tree",
                                            "hosts_per_leaf",
                                            "levels",
                                            "oversubscription",
                                            "x",
                                            "y",
                                            "z",
                                            "dgx-h100",
                                            "dgx-a100",
                                            "switch",
                                            "ring",
                                            "torus3d",
                                            "frontera-rtx",
                                            "0",
                                            "-1",
                                            "99999",
                                            "1e9",
                                            "nan",
                                            "auto",
                                            "protocols",
                                            "nccl"};
    std::vector<std::string> unit_tokens = {
        "bytes ", "sweep ",  "bandwidth ", "time ", "flops ", "int ", "B",   "KiB", "MiB",
        "GiB",    "TiB",     "KB",         "TB",    "GB/s",   "Gb/s", "us",  "ns",  "ms",
        "s",      "TFLOP/s", ":",          "x",     "1e308",  "-0",   "nan", "inf", "9223372036854775807",
        "0.5",    "1e-300"};
    return std::vector<Target>{
        {"scenario",
         "scenario YAML: parse, resolve, simulate (formula) where quick",
         scenario,
         {"examples/scenarios/*.yaml"},
         {},
         scenario_tokens},
        {"topology",
         "topology YAML: parse, seal, route",
         topology,
         {"examples/topologies/*.yaml"},
         {"preset: dgx-h100\nparams: {nodes: 2}\n"},
         topo_tokens},
        {"profile", "machine profile YAML", profile, {"examples/profiles/*.yaml"}, {}, kYamlTokens},
        {"launch-env",
         "the launcher's environment variables (NAME=VALUE lines)",
         launch_env,
         {},
         {"MESHSIM_RANK=1\nMESHSIM_WORLD_SIZE=4\nMESHSIM_MASTER_ADDR=127.0.0.1\nMESHSIM_MASTER_PORT=29500\n"
          "MESHSIM_TOKEN=abc\n",
          "RANK=0\nWORLD_SIZE=2\nMASTER_ADDR=h\nMASTER_PORT=1\nMESHSIM_TOKEN=insecure\n",
          "SLURM_PROCID=3\nSLURM_NTASKS=8\nMESHSIM_MASTER_ADDR=10.0.0.1\nMESHSIM_MASTER_PORT=29500\n"
          "MESHSIM_TOKEN=t\nMESHSIM_HEARTBEAT_INTERVAL=1s\n",
          "OMPI_COMM_WORLD_RANK=0\nOMPI_COMM_WORLD_SIZE=1\nMESHSIM_MASTER_ADDR=::1\nMESHSIM_MASTER_PORT=0\n"},
         {"MESHSIM_RANK=",
          "MESHSIM_WORLD_SIZE=",
          "MESHSIM_MASTER_ADDR=",
          "MESHSIM_MASTER_PORT=",
          "MESHSIM_TOKEN=",
          "MESHSIM_BIND_ADDR=",
          "MESHSIM_HEARTBEAT_INTERVAL=",
          "MESHSIM_HEARTBEAT_TIMEOUT=",
          "RANK=",
          "WORLD_SIZE=",
          "MASTER_ADDR=",
          "MASTER_PORT=",
          "SLURM_PROCID=",
          "SLURM_NTASKS=",
          "OMPI_COMM_WORLD_RANK=",
          "OMPI_COMM_WORLD_SIZE=",
          "\n",
          "0",
          "-1",
          "65536",
          "65537",
          "16777216",
          "2147483648",
          "insecure",
          "1e9",
          "nan",
          "x",
          "127.0.0.1",
          "::1",
          "ms",
          "s"}},
        {"topology-spec",
         "preset specs as --topology takes them",
         topology_spec,
         {},
         {"dgx-h100", "dgx-h100:nodes=2,inter=fat-tree", "fat-tree:nodes=16,levels=3", "torus3d:x=4,y=4,z=4",
          "frontera-rtx:nodes=4", "switch:nodes=2,gpus_per_node=4,bandwidth=25GB/s"},
         spec_tokens},
        {"units",
         "the unit parsers (bytes, sweeps, bandwidth, time, FLOP/s, integers)",
         units,
         {},
         {"bytes 64MiB", "sweep 1KiB:8GiB", "sweep 8:8G:2", "bandwidth 400Gb/s", "time 0.5us", "flops 989TFLOP/s",
          "int 42"},
         unit_tokens},
    };
  }();
  return all;
}

const Target* find_target(std::string_view name) {
  for (const Target& t : targets())
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace meshsim::fuzz
