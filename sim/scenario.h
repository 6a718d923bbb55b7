// Scenario files: what to simulate (model, parallel layout, topology, placement, run
// options), as YAML with units written out, plus `--set path=value` overrides.
//
//   model: gpt3-175b                 # a preset, or {preset: llama3-70b, seq: 131072},
//                                    # or explicit fields (layers, hidden, heads, ...)
//   parallel: {dp: 16, tp: 8, sp: true, pp: 8, vchunks: 2, microbatches: 64,
//              micro_batch_size: 1, zero: 1, recompute: selective, dp_bucket: 25MiB}
//   topology: dgx-h100:nodes=128     # preset spec or a topology YAML path
//   placement: natural               # natural | bunched:RxC | list:0,1,...
//   order: [dp, pp, cp, tp]          # mesh axes outermost first (default as shown)
//   gpu: h100                        # compute preset (default: the topology's GPU)
//   run: {fidelity: formula, algorithm: auto, profile: my-h100.yaml}
//
// Instead of a model, a collective workload (what `meshsim run|validate` time for real):
//   workload: {collective: allreduce, bytes: 64MiB, algorithm: ring, iterations: 5}
//
// Several training jobs on one topology, sharing its links (flow fidelity; the top level's
// model, parallel, ... are every job's defaults):
//   jobs: [{name: a, nodes: 0-63}, {name: b, nodes: 64-127, parallel: {dp: 4, tp: 8, pp: 4}}]
//
//   ScenarioNode n = ScenarioNode::load("s.yaml");
//   n.set("parallel.tp=4");  n.set("placement=bunched:2x2");
//   Scenario s = n.resolve();   // validated; unknown fields are errors naming the path
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "schedule/model.h"
#include "schedule/parallel.h"
#include "schedule/plan.h"
#include "sim/collective_sim.h"

namespace YAML {
class Node;
}

namespace meshsim {

// Parts that run below their nominal rate (`perturb:`): GPUs at a fraction of their compute
// speed (a straggler, a throttled clock) and links at a fraction of their bandwidth, or down
// (factor 0: both directions fail and routes take another path), each by index or by name as
// the reports print it ("n0.gpu0 -> n0.nvsw").
// Every GPU's speed drawn from a distribution (`perturb.gpu_draw`), GPU by GPU from
// `perturb.seed` and its index alone, so a draw is the same in any layout and on any machine:
// normal(SD) (1 + SD z, z standard normal), uniform(LO, HI), stragglers(P, F) (each GPU at F
// with probability P, else 1). Factors are kept within [0.05, 1]: a stage waits for its slowest
// GPU and no GPU outruns the preset.
struct GpuDraw {
  enum class Kind { None, Normal, Uniform, Stragglers } kind = Kind::None;
  double a = 0, b = 0;
  std::uint64_t seed = 1;
  std::string text;  // as written, for the report
  // GPU `gpu`'s factor (1 when kind is None).
  double factor(int gpu) const;
};

struct Perturbations {
  std::vector<std::pair<int, double>> gpus;
  std::vector<std::pair<std::string, double>> links;
  std::string links_text;  // as written: the cache key of the perturbed topology
  GpuDraw draw;
  bool empty() const { return gpus.empty() && links.empty() && draw.kind == GpuDraw::Kind::None; }
};

// Nodes whose GPUs are another compute preset than the scenario's `gpu` (`node_gpus: 8-15=a100`):
// a heterogeneous cluster. The fabric stays the topology's; only the compute figures change.
struct NodeGpus {
  int first = 0, last = 0;  // node indices, inclusive
  std::string gpu;          // a compute preset
};

struct Scenario {
  std::string name = "scenario";
  ModelSpec model;
  ParallelSpec parallel;
  std::string topology = "dgx-h100";
  bool topology_given = false;  // the file (or --set) named one
  std::string placement = "natural";
  std::vector<std::string> order;  // empty: mesh_axes() order
  std::string gpu;                 // empty: default_gpu_for(topology)
  Fidelity fidelity = Fidelity::Formula;
  AlgorithmChoice algorithm;
  std::string profile;  // machine profile YAML (calibrate's output)
  // Flow fidelity: the ops in flight share the links (ScheduleSimOptions::share_links).
  bool link_sharing = true;
  Perturbations perturb;
  std::vector<NodeGpus> node_gpus;  // empty: every GPU is `gpu`
  std::string node_gpus_text;       // as written, for the report
  // A collective workload instead of a training iteration; ranks 0 = as many as run.
  std::optional<CollectiveWorkload> workload;
  // One job of several on a shared topology (`jobs:`): the GPUs it runs on, in order (its
  // placement is laid out over them as over a cluster of its own), and how the file gave them
  // ("jobs[1].nodes = 8-15"); empty: every GPU of the topology.
  std::vector<int> gpus;
  std::string gpus_from;
  // Several training jobs sharing the topology's links (`jobs:`), each a scenario of its own
  // (the top level's sections are its defaults; topology, run and perturb are shared). The
  // top level's model and layout are then the first job's, and only simulate_jobs reads it.
  std::vector<Scenario> jobs;
};

// The YAML tree of a scenario before it is resolved: --set and --vary edit it.
class ScenarioNode {
 public:
  static ScenarioNode load(const std::string& path);
  static ScenarioNode parse(const std::string& text, const std::string& source);
  static ScenarioNode builtin_default();
  ScenarioNode(const ScenarioNode& other);
  ScenarioNode& operator=(const ScenarioNode& other);
  ~ScenarioNode();
  // "path.to.key=value"; a model preset name becomes {preset: name} when a field is set.
  void set(const std::string& assignment);
  // Removes the field at a dotted path (e.g. "parallel.microbatches") if the scenario has it.
  void unset(const std::string& path);
  Scenario resolve() const;
  bool is_workload() const;  // has a `workload:` section (a collective workload, not training)
  const std::string& source() const { return source_; }

 private:
  ScenarioNode();
  std::string source_;
  std::unique_ptr<YAML::Node> node_;
};

// The compute preset a topology's GPUs are (h100 for dgx-h100, rtx5000 for frontera-rtx, ...).
std::string default_gpu_for(const std::string& topology_spec);

}  // namespace meshsim
