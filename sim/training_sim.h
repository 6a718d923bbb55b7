// One training iteration of a Scenario, end to end: topology, placement, plan, the sim
// backend, and the figures a researcher plans with (MFU/HFU, tokens/s, memory per stage).
//
//   Scenario s = ScenarioNode::builtin_default().resolve();
//   TrainingResult r = simulate_training(s, AlgorithmRegistry::builtin());
//   r.sim.iteration, r.mfu, r.tokens_per_s, r.stages[0].peak, r.fits
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "schedule/memory.h"
#include "schedule/plan.h"
#include "sim/compute_model.h"
#include "sim/scenario.h"
#include "sim/schedule_sim.h"

namespace meshsim {

struct StageMemory {
  RankMemory model;       // the itemized closed-form table (schedule/memory.h)
  Bytes activation_peak;  // read off the simulated timeline (layer activations)
  Bytes peak;             // model's non-layer-activation items + activation_peak
  // The model's items other than the layer activations (which the timeline peak replaces),
  // summed by category.
  std::map<std::string, Bytes> other_by_category() const;
};

// One link's load over the iteration (flow fidelity), for --links, JSON and the report.
struct LinkReport {
  int id = -1;
  std::string name;         // "n0.gpu0 -> n0.nvsw"
  std::string tier;         // link_tier(): nvlink, pcie, nic, leaf-spine, ...
  double capacity_Bps = 0;  // achievable bytes per second
  double bytes = 0;         // carried over the iteration
  double utilization = 0;   // bytes / (capacity x iteration time)
  double peak = 0;          // highest load at an instant / capacity (0 when ops did not share links)
};

struct TrainingResult {
  Scenario scenario;
  std::string topology_name;
  std::shared_ptr<const Topology> topology;  // the cluster simulated (perturbed links scaled or down)
  std::string placement;                     // placement kind actually used
  Schedule schedule;                         // empty on the fast path
  bool fast = false;                         // figures from simulate_iteration_fast
  ScheduleSimResult sim;
  GpuSpec gpu;
  double tensor_factor = 1;  // tensor-core rate in this job / burst (ComputeModel::tensor_factor)
  int gpus = 0;
  double model_flops = 0;     // per iteration, all GPUs (docs/math.md section 4)
  double hardware_flops = 0;  // model FLOPs plus the recomputed share (HFU's numerator)
  double mfu = 0, hfu = 0;
  double tokens_per_s = 0;
  std::vector<StageMemory> stages;
  Bytes capacity = 0;
  bool fits = true;
  std::vector<std::string> link_names;  // names of sim.top_links
  std::vector<LinkReport> links;        // flow fidelity: every link that carried bytes, by id
  // With perturbations: each stage's compute speed (its slowest GPU's factor) and the same
  // iteration with every part at its nominal rate, which they are compared against.
  std::vector<double> stage_compute_factor;
  Time nominal_iteration;
  // MFU's denominator: the dense peaks of the job's GPUs in the model's dtype, summed.
  double peak_flops = 0;
  // A heterogeneous cluster (Scenario::node_gpus): each stage's GPU kinds ("h100", "a100+h100").
  std::vector<std::string> stage_gpus;
};

// Clusters already built, by topology spec, with their routers (whose route caches then
// serve every layout on that cluster). Not thread-safe: one per thread (sweeps keep one
// per worker). Results do not depend on what the cache held before.
class ClusterCache {
 public:
  struct Entry {
    std::shared_ptr<const Topology> topology;
    std::unique_ptr<Router> router;
  };
  Entry& get(const std::string& topology_spec);
  // The same cluster with some links below their nominal rate (Scenario::perturb.links).
  Entry& get(const std::string& topology_spec, const Perturbations& perturb);

 private:
  std::map<std::string, Entry> entries_;
};

// keep_ops: plan and simulate every op (the Schedule and a per-op Trace are kept, for
// --trace and --report). Otherwise formula fidelity takes the fast path of
// sim/fast_formula.h where it applies (same figures, no per-op trace). share: at flow
// fidelity, the processes that share out the distinct collective timings (an MPI job).
TrainingResult simulate_training(const Scenario& s, const AlgorithmRegistry& registry, bool keep_ops = true,
                                 ClusterCache* clusters = nullptr, const TimingShare* share = nullptr);

// Several training jobs on one fabric (Scenario::jobs): each alone on the topology, as
// simulate_training times it (every op kept), and all of them together from the same start at
// flow fidelity, the ops in flight of every job sharing the links (simulate_jobs in
// schedule_sim.h). Throws Error unless the scenario runs at flow fidelity with link sharing.
struct JobsResult {
  std::vector<TrainingResult> alone, together;  // per job, in the file's order
};
JobsResult simulate_jobs(const Scenario& s, const AlgorithmRegistry& registry);

// The scenario's device mesh (mesh_axes of its layout, in `order:` when given) placed on
// `topo` as `placement:` says; what simulate_training and the real backends both use.
Placement training_placement(const Scenario& s, const Topology& topo);

// `s` itself, or the Error that `command` (simulate, memory, sweep, or the Python module's
// function) times training layouts and a collective workload is run's or validate's, or that it
// times one job (simulate_jobs times a scenario with jobs:).
Scenario require_training(Scenario s, const std::string& command);

// `meshsim memory`'s table: the model and layout validated, then rank_memory() of every
// pipeline stage, and the scenario GPU's capacity.
struct StageMemories {
  std::vector<RankMemory> stages;
  Bytes capacity = 0;
};
StageMemories stage_memories(const Scenario& s);

// The layers' activation items of rank_memory() (category "activations"): the part the
// simulated timeline replaces with its measured peak.
bool is_layer_activation(const MemoryItem& item);

}  // namespace meshsim
