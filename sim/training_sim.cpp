// simulate_training: scenario -> topology, placement, schedule, sim backend, figures.
#include "sim/training_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
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

// The GPUs of each of the `pp` pipeline stages: the ranks whose pp coordinate is the stage.
std::vector<std::vector<int>> gpus_by_stage(const Placement& placement, int pp) {
  std::vector<std::vector<int>> out(static_cast<std::size_t>(pp));
  const Mesh& mesh = placement.mesh();
  int pp_dim = -1;
  for (std::size_t d = 0; d < mesh.dims.size(); ++d)
    if (mesh.dims[d].first == "pp") pp_dim = static_cast<int>(d);
  for (int rank = 0; rank < mesh.size(); ++rank) {
    const int stage = pp_dim < 0 ? 0 : mesh.coords(rank)[static_cast<std::size_t>(pp_dim)];
    out[static_cast<std::size_t>(stage)].push_back(placement.gpu_of(rank));
  }
  return out;
}

// Each stage's compute speed under perturb.gpus and perturb.gpu_draw: the slowest of the GPUs its
// ranks run on (a synchronous step waits for it), 1 where none is slowed.
std::vector<double> stage_compute_factors(const Scenario& s, const Placement& placement, const Topology& topo) {
  std::vector<double> out(static_cast<std::size_t>(s.parallel.pp), 1.0);
  std::map<int, double> given;  // perturb.gpu_factors by GPU (the least where one is named twice)
  for (const auto& [gpu, factor] : s.perturb.gpus) {
    if (gpu >= topo.num_gpus())
      throw Error(fmt::format("perturb.gpu_factors: GPU {} is not in topology {} (GPUs 0..{})", gpu, s.topology,
                              topo.num_gpus() - 1));
    const auto [it, fresh] = given.emplace(gpu, factor);
    if (!fresh) it->second = std::min(it->second, factor);
  }
  // Every GPU of the layout: its drawn factor (1 without a draw) times its given one.
  const std::vector<std::vector<int>> stages = gpus_by_stage(placement, s.parallel.pp);
  for (std::size_t stage = 0; stage < stages.size(); ++stage)
    for (int gpu : stages[stage]) {
      const auto it = given.find(gpu);
      out[stage] = std::min(out[stage], s.perturb.draw.factor(gpu) * (it == given.end() ? 1.0 : it->second));
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

namespace {

// What one job's simulation runs on: its checked layout, placement, compute model and options.
struct JobSetup {
  CheckedLayout layout;
  Placement placement;
  ComputeModel compute;
  ScheduleSimOptions opt;
  // A heterogeneous cluster (Scenario::node_gpus): a compute model per GPU kind, which
  // opt.role_compute points into (a map's nodes keep their addresses when it moves).
  std::map<std::string, ComputeModel> kinds;
};

// The compute model each kind of GPU of a heterogeneous cluster runs (its preset, the stack's
// attention library, the job's size for the slowest-GPU factor).
ComputeModel kind_model(const std::string& preset, const Scenario& s) {
  ComputeModel m(gpu_preset(preset));
  m.set_attention_library(s.parallel.stack.attention);
  m.set_job_gpus(s.parallel.world_size());
  return m;
}

// The preset of GPU `gpu`: its node's under node_gpus, else the scenario's.
const std::string& preset_of(const Scenario& s, const Topology& topo, int gpu) {
  const int node = topo.node_of_gpu(gpu);
  for (const NodeGpus& g : s.node_gpus)
    if (node >= g.first && node <= g.last) return g.gpu;
  return s.gpu;
}

// `stage_layers: balance`: layers per stage so that the slowest stage is as fast as it can be.
// A probe plan with the layers spread evenly gives one layer's kernels (every micro-batch and
// pass) and each stage's other kernels (embedding, head, loss, optimizer); each stage's time is
// n x (a layer on its GPUs) + (its other kernels on its GPUs), and layers go one at a time to
// the stage whose time grows least, which minimises the largest (docs/whatif.md). A stage's
// chunks then share its layers evenly, the first chunks taking the remainder.
ParallelSpec even_probe(const ModelSpec& m, ParallelSpec p) {
  const int slots = p.pp * p.vchunks;
  p.balance_stages = false;
  p.stage_layers.assign(static_cast<std::size_t>(std::max(slots, 1)), m.layers / std::max(slots, 1));
  for (int i = 0; i < m.layers % std::max(slots, 1); ++i) ++p.stage_layers[static_cast<std::size_t>(i)];
  return p;
}

std::vector<int> balanced_stage_layers(const CheckedLayout& probe_layout,
                                       const std::vector<std::vector<const ComputeModel*>>& kinds,
                                       const ComputeModel& base) {
  const ParallelSpec& p = probe_layout.parallel();
  const int slots = p.pp * p.vchunks, layers = probe_layout.model().layers;
  const Schedule plan = plan_iteration(probe_layout);
  auto time_on = [&](int stage, const Op& op) {
    double t = 0;
    const auto& on = static_cast<std::size_t>(stage) < kinds.size() && !kinds[static_cast<std::size_t>(stage)].empty()
                         ? kinds[static_cast<std::size_t>(stage)]
                         : std::vector<const ComputeModel*>{&base};
    for (const ComputeModel* m : on)
      t = std::max(t, static_cast<double>(m->time(op.kernel, op.phase == Phase::Backward).ps()));
    return t;
  };
  const Role* holder = nullptr;  // the first stage holding a layer, and that layer
  int layer = -1;
  for (const Role& role : plan.roles)
    for (const Op& op : role.ops)
      if (!holder && op.kind == OpKind::Compute && op.layer >= 0) {
        holder = &role;
        layer = op.layer;
      }
  MESHSIM_ASSERT(holder != nullptr);
  std::vector<double> per_layer(static_cast<std::size_t>(p.pp), 0), other(static_cast<std::size_t>(p.pp), 0);
  for (int st = 0; st < p.pp; ++st) {
    for (const Op& op : holder->ops)
      if (op.kind == OpKind::Compute && op.layer == layer) per_layer[static_cast<std::size_t>(st)] += time_on(st, op);
    for (const Op& op : plan.roles[static_cast<std::size_t>(st)].ops)
      if (op.kind == OpKind::Compute && op.layer < 0) other[static_cast<std::size_t>(st)] += time_on(st, op);
  }
  std::vector<int> count(static_cast<std::size_t>(p.pp), 0);
  for (int l = 0; l < layers; ++l) {
    std::size_t best = 0;
    for (std::size_t st = 1; st < count.size(); ++st)
      if ((count[st] + 1) * per_layer[st] + other[st] < (count[best] + 1) * per_layer[best] + other[best]) best = st;
    ++count[best];
  }
  std::vector<int> out(static_cast<std::size_t>(slots), 0);
  for (int st = 0; st < p.pp; ++st)
    for (int c = 0; c < p.vchunks; ++c)
      out[static_cast<std::size_t>(c * p.pp + st)] = count[static_cast<std::size_t>(st)] / p.vchunks +
                                                     (c < count[static_cast<std::size_t>(st)] % p.vchunks ? 1 : 0);
  return out;
}

JobSetup setup_job(const Scenario& given, const Topology& topo, TrainingResult& r) {
  r.topology_name = topo.name();
  r.gpus = given.gpus.empty() ? topo.num_gpus() : static_cast<int>(given.gpus.size());
  const std::string gpus_from = given.gpus.empty() ? "topology " + topo.name() : given.gpus_from;
  // The layout is checked before anything reads it; with stage_layers: balance, a probe of it with
  // the layers spread evenly, which balanced_stage_layers plans.
  std::optional<CheckedLayout> layout;
  if (given.parallel.balance_stages && given.parallel.pp > 1)
    layout = check_layout(given.model, even_probe(given.model, given.parallel), r.gpus, gpus_from);
  else
    layout = check_layout(given.model, given.parallel, r.gpus, gpus_from);
  Placement placement = training_placement(given, topo);
  ComputeModel compute(gpu_preset(given.gpu));
  ScheduleSimOptions opt;
  r.placement = placement.kind();
  const GpuSpec preset = compute.gpu();  // the scenario's GPU, read once
  if (!given.profile.empty()) {
    if (!given.node_gpus.empty())
      throw Error("node_gpus: run.profile measures one kind of GPU; drop the profile to time a cluster of several");
    MachineProfile profile = load_machine_profile(given.profile);
    compute = ComputeModel(std::move(profile.gpu), std::move(profile.compute));
    opt.measured = std::move(profile.collectives);
  }
  r.gpu = compute.gpu();
  if (given.parallel.stack.fp8 == Fp8Recipe::Mxfp8 && r.gpu.arch > 0 && r.gpu.arch < 100)
    throw Error(
        fmt::format("stack.fp8: mxfp8 is Blackwell's block format (sm_100); gpu '{}' is sm_{}: use delayed, "
                    "tensorwise or blockwise",
                    r.gpu.name, r.gpu.arch));
  compute.set_attention_library(given.parallel.stack.attention);
  compute.set_job_gpus(given.parallel.world_size());
  r.tensor_factor = compute.tensor_factor();
  r.peak_flops = compute.peak_flops(given.model.dtype_bytes()) * given.parallel.world_size();
  r.capacity = r.gpu.memory;

  // A heterogeneous cluster: each stage's kinds of GPU, each kind's compute model.
  std::map<std::string, ComputeModel> kinds;
  r.stage_gpus.clear();
  if (!given.node_gpus.empty()) {
    const std::vector<std::vector<int>> stages = gpus_by_stage(placement, given.parallel.pp);
    r.peak_flops = 0;
    for (const auto& gpus : stages) {
      std::set<std::string> names;
      for (int g : gpus) {
        const std::string& name = preset_of(given, topo, g);
        auto it = kinds.find(name);
        if (it == kinds.end()) it = kinds.emplace(name, kind_model(name, given)).first;
        names.insert(name);
        r.peak_flops += it->second.peak_flops(given.model.dtype_bytes());
        r.capacity = std::min(r.capacity, it->second.gpu().memory);
      }
      std::vector<const ComputeModel*> on;
      for (const std::string& n : names) on.push_back(&kinds.at(n));
      opt.role_compute.push_back(std::move(on));
      r.stage_gpus.push_back(fmt::format("{}", fmt::join(names, "+")));
    }
  }
  Scenario s = given;
  if (s.parallel.balance_stages && s.parallel.pp > 1) {
    s.parallel.stage_layers = balanced_stage_layers(*layout, opt.role_compute, compute);
    s.parallel.balance_stages = false;
    layout = check_layout(s.model, s.parallel, r.gpus, gpus_from);
  }
  s.parallel.balance_stages = false;
  r.scenario = s;

  opt.fidelity = s.fidelity;
  opt.algorithm = s.algorithm;
  opt.share_links = s.link_sharing;
  if (s.fidelity == Fidelity::Nccl) opt.nccl.sm = preset.arch;  // NCCL's tables by the preset's GPU, profile or not
  if (!s.perturb.gpus.empty() || s.perturb.draw.kind != GpuDraw::Kind::None) {
    r.stage_compute_factor = stage_compute_factors(s, placement, topo);
    opt.role_compute_factor = r.stage_compute_factor;
  }
  return JobSetup{std::move(*layout), std::move(placement), std::move(compute), std::move(opt), std::move(kinds)};
}

// The figures a researcher plans with, from r.sim: MFU/HFU, tokens/s, memory per stage, links.
void training_figures(const Topology& topo, TrainingResult& r) {
  const Scenario& s = r.scenario;
  const ParallelSpec& p = s.parallel;
  const double ranks_per_role = static_cast<double>(p.world_size()) / p.pp;
  // HFU counts the recomputed FLOPs on top of the model FLOPs, on the model FLOPs' basis
  // (docs/math.md section 4): model FLOPs x (executed with recomputation / executed without).
  const double executed = r.sim.flops_executed * ranks_per_role, recomputed = r.sim.flops_recomputed * ranks_per_role;
  r.model_flops = model_flops_per_iteration(s.model, p.global_batch(), false);
  r.hardware_flops = executed > recomputed ? r.model_flops * executed / (executed - recomputed) : r.model_flops;
  const double secs = r.sim.iteration.seconds();
  const double peak = r.peak_flops;
  if (secs > 0) {
    r.mfu = r.model_flops / (secs * peak);
    r.hfu = r.hardware_flops / (secs * peak);
    r.tokens_per_s = static_cast<double>(p.global_batch()) * s.model.seq / secs;
  }

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

StageMemories stage_memories(const Scenario& given) {
  StageMemories m;
  Scenario s = given;
  if (!given.node_gpus.empty() || given.parallel.balance_stages) {  // the GPU kinds and stages as simulate sees them
    TrainingResult r;
    setup_job(given, *shared_topology(given.topology), r);  // checks the layout, balances its stages
    s = r.scenario;
    m.capacity = r.capacity;
  } else {
    validate_parallel(given.parallel, given.model, given.parallel.world_size());  // the model: checked by the resolver
    m.capacity = gpu_preset(given.gpu).memory;
  }
  for (int st = 0; st < s.parallel.pp; ++st) m.stages.push_back(rank_memory(s.model, s.parallel, st));
  return m;
}

TrainingResult simulate_training(const Scenario& s, const AlgorithmRegistry& registry, bool keep_ops,
                                 ClusterCache* clusters, const TimingShare* share) {
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
  job.opt.share = share;
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
    if (!keep_ops && opt.role_compute_factor.empty() && opt.role_compute.empty())
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

  training_figures(topo, r);
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
    training_figures(*cluster.topology, r);
  }
  return out;
}

}  // namespace meshsim
