// simulate_training: scenario -> topology, placement, schedule, sim backend, figures.
#include "sim/training_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/error.h"
#include "core/suggest.h"
#include "sim/fast_formula.h"
#include "topology/placement.h"
#include "topology/presets.h"

namespace meshsim {

bool is_layer_activation(const MemoryItem& item) { return item.category == "activations"; }

std::map<std::string, Bytes> StageMemory::other_by_category() const {
  std::map<std::string, Bytes> by;
  for (const MemoryItem& it : model.items)
    if (!is_layer_activation(it)) by[it.category] += it.bytes;
  return by;
}

ClusterCache::Entry& ClusterCache::get(const std::string& topology_spec) {
  auto it = entries_.find(topology_spec);
  if (it == entries_.end()) {
    Entry e;
    e.topology = shared_topology(topology_spec);
    e.router = std::make_unique<Router>(*e.topology);
    it = entries_.emplace(topology_spec, std::move(e)).first;
  }
  return it->second;
}

ClusterCache::Entry& ClusterCache::get(const std::string& topology_spec, const Perturbations& perturb) {
  if (perturb.links.empty()) return get(topology_spec);
  const std::string key = topology_spec + "\nperturbed: " + perturb.links_text;
  auto it = entries_.find(key);
  if (it != entries_.end()) return it->second;
  auto topo = std::make_shared<Topology>(*shared_topology(topology_spec));
  std::map<std::string, std::vector<int>> by_name;
  for (int l = 0; l < static_cast<int>(topo->links().size()); ++l) by_name[link_name(*topo, l)].push_back(l);
  for (const auto& [name, factor] : perturb.links) {
    const auto found = by_name.find(name);
    if (found == by_name.end()) {
      std::vector<std::string> names;
      for (const auto& [n, ids] : by_name) names.push_back(n);
      const std::string hint = did_you_mean(name, names);
      throw Error(
          fmt::format("perturb.link_factors: topology {} has no link '{}'{}; name a link as "
                      "`meshsim topology show {} --links` lists it (one direction, 'A -> B')",
                      topology_spec, name, hint.empty() ? "" : " (" + hint + ")", topology_spec));
    }
    for (int l : found->second) {
      if (factor > 0) {
        topo->scale_link(l, factor);
        continue;
      }
      try {
        topo->fail_link(l);
      } catch (const Error& e) {
        throw Error(
            fmt::format("perturb.link_factors: '{}=down': {} in topology {}; fail fewer links or give it a "
                        "factor > 0",
                        name, e.what(), topology_spec));
      }
    }
  }
  Entry e;
  e.topology = topo;
  e.router = std::make_unique<Router>(*e.topology);
  return entries_.emplace(key, std::move(e)).first->second;
}

// Each stage's compute speed under perturb.gpus and perturb.gpu_draw: the slowest of the GPUs its
// ranks run on (a synchronous step waits for it), 1 where none is slowed.
std::vector<double> stage_compute_factors(const Scenario& s, const Placement& placement, const Topology& topo) {
  std::vector<double> out(static_cast<std::size_t>(s.parallel.pp), 1.0);
  const std::vector<int>& gpus = placement.gpus();
  const Mesh& mesh = placement.mesh();
  int pp_dim = -1;
  for (std::size_t d = 0; d < mesh.dims.size(); ++d)
    if (mesh.dims[d].first == "pp") pp_dim = static_cast<int>(d);
  auto stage_of = [&](int rank) { return pp_dim < 0 ? 0 : mesh.coords(rank)[static_cast<std::size_t>(pp_dim)]; };
  std::map<int, double> given;  // perturb.gpu_factors by GPU (the least where one is named twice)
  for (const auto& [gpu, factor] : s.perturb.gpus) {
    if (gpu >= topo.num_gpus())
      throw Error(fmt::format("perturb.gpu_factors: GPU {} is not in topology {} (GPUs 0..{})", gpu, s.topology,
                              topo.num_gpus() - 1));
    const auto [it, fresh] = given.emplace(gpu, factor);
    if (!fresh) it->second = std::min(it->second, factor);
  }
  // Every GPU of the layout: its drawn factor (1 without a draw) times its given one.
  for (int rank = 0; rank < static_cast<int>(gpus.size()); ++rank) {
    const int gpu = gpus[static_cast<std::size_t>(rank)];
    const auto it = given.find(gpu);
    const double factor = s.perturb.draw.factor(gpu) * (it == given.end() ? 1.0 : it->second);
    const auto stage = static_cast<std::size_t>(stage_of(rank));
    out[stage] = std::min(out[stage], factor);
  }
  return out;
}

Placement training_placement(const Scenario& s, const Topology& topo) {
  Mesh mesh;
  mesh.dims = mesh_axes(s.parallel);
  if (!s.order.empty()) {
    Mesh ordered;
    for (const std::string& name : s.order)
      ordered.dims.push_back(mesh.dims[static_cast<std::size_t>(mesh.dim_index(name))]);
    mesh = ordered;
  }
  if (s.gpus.empty()) return Placement::parse(s.placement, mesh, topo, "placement");
  // A job of several: listed by the topology's GPU indices, all its own, or laid out over its
  // GPUs as over a cluster of its own (whole nodes, for a layout by node).
  if (s.placement.rfind("list:", 0) == 0) {
    Placement listed = Placement::parse(s.placement, mesh, topo, "placement");
    const std::set<int> mine(s.gpus.begin(), s.gpus.end());
    for (int g : listed.gpus())
      if (!mine.count(g))
        throw Error(
            fmt::format("placement: GPU {} is not job '{}''s ({}); list the job's own GPUs", g, s.name, s.gpus_from));
    return listed;
  }
  if (s.placement != "natural" && s.gpus_from.find(".gpus") != std::string::npos)
    throw Error(
        fmt::format("placement: {} lays ranks out by node, but job '{}' is given by GPUs ({}); give it "
                    "nodes (nodes: 0-7) or use natural",
                    s.placement, s.name, s.gpus_from));
  return Placement::parse(s.placement, mesh, topo, "placement").on_gpus(s.gpus);
}

Scenario require_training(Scenario s, const std::string& command) {
  if (!s.jobs.empty())
    throw Error(
        fmt::format("jobs: meshsim {} times one job; time several sharing a fabric with meshsim simulate, "
                    "or give one job's sections without jobs:",
                    command));
  if (s.workload)
    throw Error(
        fmt::format("workload: this scenario is a collective workload, which meshsim {} does not time; run it "
                    "with meshsim validate (or run), or time the collective with meshsim collective {} -b {}",
                    command, to_string(s.workload->kind), s.workload->bytes));
  return s;
}

StageMemories stage_memories(const Scenario& s) {
  validate_parallel(s.parallel, s.model, s.parallel.world_size());  // the model: checked by the resolver
  StageMemories m;
  for (int st = 0; st < s.parallel.pp; ++st) m.stages.push_back(rank_memory(s.model, s.parallel, st));
  m.capacity = gpu_preset(s.gpu).memory;
  return m;
}

namespace {

// What one job's simulation runs on: its checked layout, placement, compute model and options.
struct JobSetup {
  CheckedLayout layout;
  Placement placement;
  ComputeModel compute;
  ScheduleSimOptions opt;
};

JobSetup setup_job(const Scenario& s, const Topology& topo, TrainingResult& r) {
  r.scenario = s;
  r.topology_name = topo.name();
  r.gpus = s.gpus.empty() ? topo.num_gpus() : static_cast<int>(s.gpus.size());
  JobSetup j{check_layout(s.model, s.parallel, r.gpus, s.gpus.empty() ? "topology " + topo.name() : s.gpus_from),
             training_placement(s, topo),
             ComputeModel(gpu_preset(s.gpu)),
             {}};
  r.placement = j.placement.kind();
  const GpuSpec preset = j.compute.gpu();  // the scenario's GPU, read once
  if (!s.profile.empty()) {
    MachineProfile profile = load_machine_profile(s.profile);
    j.compute = ComputeModel(std::move(profile.gpu), std::move(profile.compute));
    j.opt.measured = std::move(profile.collectives);
  }
  r.gpu = j.compute.gpu();
  if (s.parallel.stack.fp8 == Fp8Recipe::Mxfp8 && r.gpu.arch > 0 && r.gpu.arch < 100)
    throw Error(
        fmt::format("stack.fp8: mxfp8 is Blackwell's block format (sm_100); gpu '{}' is sm_{}: use delayed, "
                    "tensorwise or blockwise",
                    r.gpu.name, r.gpu.arch));
  j.compute.set_attention_library(s.parallel.stack.attention);
  j.compute.set_job_gpus(s.parallel.world_size());
  r.tensor_factor = j.compute.tensor_factor();

  j.opt.fidelity = s.fidelity;
  j.opt.algorithm = s.algorithm;
  j.opt.share_links = s.link_sharing;
  if (s.fidelity == Fidelity::Nccl) j.opt.nccl.sm = preset.arch;  // NCCL's tables by the preset's GPU, profile or not
  if (!s.perturb.gpus.empty() || s.perturb.draw.kind != GpuDraw::Kind::None) {
    r.stage_compute_factor = stage_compute_factors(s, j.placement, topo);
    j.opt.role_compute_factor = r.stage_compute_factor;
  }
  return j;
}

// The figures a researcher plans with, from r.sim: MFU/HFU, tokens/s, memory per stage, links.
void training_figures(const Scenario& s, const Topology& topo, const ComputeModel& compute, TrainingResult& r) {
  const ParallelSpec& p = s.parallel;
  const double ranks_per_role = static_cast<double>(p.world_size()) / p.pp;
  // HFU counts the recomputed FLOPs on top of the model FLOPs, on the model FLOPs' basis
  // (docs/math.md section 4): model FLOPs x (executed with recomputation / executed without).
  const double executed = r.sim.flops_executed * ranks_per_role, recomputed = r.sim.flops_recomputed * ranks_per_role;
  r.model_flops = model_flops_per_iteration(s.model, p.global_batch(), false);
  r.hardware_flops = executed > recomputed ? r.model_flops * executed / (executed - recomputed) : r.model_flops;
  const double secs = r.sim.iteration.seconds();
  const double peak = compute.peak_flops(s.model.dtype_bytes()) * p.world_size();
  if (secs > 0) {
    r.mfu = r.model_flops / (secs * peak);
    r.hfu = r.hardware_flops / (secs * peak);
    r.tokens_per_s = static_cast<double>(p.global_batch()) * s.model.seq / secs;
  }

  r.capacity = r.gpu.memory;
  r.fits = true;
  r.stages.clear();
  for (int stage = 0; stage < p.pp; ++stage) {
    StageMemory m;
    m.model = rank_memory(s.model, p, stage);
    m.activation_peak = r.sim.peak_activation[static_cast<std::size_t>(stage)];
    m.peak = m.activation_peak;
    for (const auto& [category, bytes] : m.other_by_category()) m.peak += bytes;
    r.fits = r.fits && m.peak <= r.capacity;
    r.stages.push_back(std::move(m));
  }
  r.link_names.clear();
  r.links.clear();
  for (const BusiestLink& l : r.sim.top_links) r.link_names.push_back(link_name(topo, l.link));
  for (std::size_t l = 0; l < r.sim.link_usage.size(); ++l)
    if (r.sim.link_usage[l].bytes > 0) {
      const int id = static_cast<int>(l);
      const double cap = topo.link(id).spec.effective().bytes_per_ps() * 1e12;
      r.links.push_back({id, link_name(topo, id), link_tier(topo, id), cap, r.sim.link_usage[l].bytes,
                         r.sim.link_usage[l].bytes / (cap * secs), r.sim.link_usage[l].peak});
    }
}

}  // namespace

TrainingResult simulate_training(const Scenario& s, const AlgorithmRegistry& registry, bool keep_ops,
                                 ClusterCache* clusters) {
  if (!s.jobs.empty())  // what the sweep, memory, goodput and Python's simulate reach
    throw Error(
        "jobs: this times one job; time several sharing a fabric with meshsim simulate, or give one job's sections "
        "without jobs:");
  TrainingResult r;
  ClusterCache local;
  ClusterCache::Entry& cluster = (clusters ? *clusters : local).get(s.topology, s.perturb);
  const Topology& topo = *cluster.topology;
  Router& router = *cluster.router;
  r.topology = cluster.topology;
  JobSetup job = setup_job(s, topo, r);
  const CheckedLayout& layout = job.layout;
  const Placement& placement = job.placement;
  const ComputeModel& compute = job.compute;
  const ScheduleSimOptions& opt = job.opt;
  if (!s.perturb.empty()) {  // the same at nominal rates, to say what the perturbation costs
    Scenario nominal = s;
    nominal.perturb = {};
    // by the same engine as the perturbed run (a slowed stage takes the op level)
    const bool op_level = keep_ops || !opt.role_compute_factor.empty();
    r.nominal_iteration = simulate_training(nominal, registry, op_level, clusters).sim.iteration;
  }
  try {
    std::optional<ScheduleSimResult> fast;
    // The fast path times one compute model for every stage: a slowed stage takes the op level.
    if (!keep_ops && opt.role_compute_factor.empty())
      fast = simulate_iteration_fast(layout, topo, router, placement, compute, registry, opt);
    if (fast) {
      r.fast = true;
      r.sim = std::move(*fast);
    } else {
      r.schedule = plan_iteration(layout);
      r.sim = simulate_schedule(r.schedule, topo, router, placement, compute, registry, opt);
    }
  } catch (const TimeRangeError& e) {  // name the sizes that made it, not only the symptom
    throw Error(
        fmt::format("model.seq = {}, model.layers = {}, parallel.micro_batch_size = {}, "
                    "parallel.microbatches = {}: one iteration passes meshsim's range (53 days of simulated "
                    "time; attention grows with model.seq squared); reduce them ({})",
                    s.model.seq, s.model.layers, s.parallel.micro_batch_size, s.parallel.microbatches, e.what()));
  }

  training_figures(s, topo, compute, r);
  return r;
}

JobsResult simulate_jobs(const Scenario& s, const AlgorithmRegistry& registry) {
  MESHSIM_ASSERT(!s.jobs.empty());
  if (s.fidelity != Fidelity::Flow || !s.link_sharing)
    throw Error(
        "jobs: jobs slow each other only where their ops share links, which flow fidelity with link sharing "
        "simulates; set run.fidelity: flow (and leave run.link_sharing on)");
  JobsResult out;
  ClusterCache clusters;
  ClusterCache::Entry& cluster = clusters.get(s.topology, s.perturb);
  std::vector<JobSetup> setups;
  std::vector<ScheduleJob> together;
  for (const Scenario& job : s.jobs) {
    out.alone.push_back(simulate_training(job, registry, true, &clusters));
    TrainingResult r;
    r.topology = cluster.topology;
    setups.push_back(setup_job(job, *cluster.topology, r));
    r.schedule = out.alone.back().schedule;
    out.together.push_back(std::move(r));
  }
  for (std::size_t j = 0; j < setups.size(); ++j)
    together.push_back({&out.together[j].schedule, &setups[j].placement, &setups[j].compute, setups[j].opt});
  std::vector<ScheduleSimResult> sims = simulate_jobs(together, *cluster.topology, *cluster.router, registry);
  for (std::size_t j = 0; j < sims.size(); ++j) {
    TrainingResult& r = out.together[j];
    r.sim = std::move(sims[j]);
    r.nominal_iteration = out.alone[j].nominal_iteration;
    training_figures(s.jobs[j], *cluster.topology, setups[j].compute, r);
  }
  return out;
}

}  // namespace meshsim
