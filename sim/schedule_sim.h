// The sim backend: executes a Schedule (schedule/ir.h) on a modeled cluster and returns
// its Trace, the iteration time, a breakdown of where the time went, and the activation
// memory timeline.
//
//   Schedule s = plan_iteration(model, parallel);
//   Placement pl = Placement::natural(Mesh{s.axes}, topo);
//   ScheduleSimResult r = simulate_schedule(s, topo, router, pl, ComputeModel(gpu_preset("h100")),
//                                           AlgorithmRegistry::builtin(), {});
//   r.iteration, r.breakdown, r.peak_activation[stage]
//
// Execution rules: every role (pipeline stage) is simulated once, standing for all its
// ranks. Each stream runs its ops one at a time in list order; an op starts when its
// stream is free and its dependencies have finished. A Recv occupies no stream: it
// finishes as soon as its local dependencies and its matching Send (same tag) have.
// Op durations:
//   compute     ComputeModel::time(kernel) (roofline with efficiency curves, or a profile)
//   collective  `formula`: the chosen algorithm's closed form for the role's first group
//               (alpha/beta read off its routes); `flow`: all groups of the role along the
//               op's axis run the step program at once as flows on the routed topology,
//               so groups that share links (a node's uplink, an oversubscribed spine) slow
//               each other down; `nccl`: NCCL's tuning model for every group of the role
//               (the slowest counts), with send/recv and all-to-all at `formula`.
//               A measured entry (options.measured) overrides all three.
//               A SendRecv on an axis is a ring shift (each rank sends to
//               the next along the axis), as ring attention does.
//   send        point-to-point between corresponding ranks of two stages, all pairs at once.
// Durations are computed once per distinct (role, kind, axis, bytes, root) and reused.
// At `flow`, the ops in flight then share the links (sim/link_sharing.h): a DP bucket that
// overlaps a pipeline send on the same NICs slows both, max-min fairly, and an op that
// overlaps nothing takes its time alone (share_links = false: every op takes that).
// `formula` and `nccl` time each op alone.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "schedule/collective.h"
#include "schedule/executor.h"
#include "schedule/ir.h"
#include "sim/collective_sim.h"
#include "sim/compute_model.h"
#include "sim/link_sharing.h"
#include "sim/machine_profile.h"
#include "topology/placement.h"

namespace meshsim {

// Processes that share out a flow simulation's distinct collective timings (an MPI job: meshsim
// simulate under mpirun). Every process runs the same simulation; process `rank` of `size` runs
// the timings whose index (in op order) is rank modulo size, and `all_gather`, collective, hands
// every process's bytes to every process in rank order. The result is the same bytes one process
// gives.
struct TimingShare {
  int rank = 0, size = 1;
  std::function<std::vector<std::string>(const std::string&)> all_gather;
};

struct ScheduleSimOptions {
  Fidelity fidelity = Fidelity::Formula;
  AlgorithmChoice algorithm;  // collective algorithm for every collective op
  double gamma_ps = 0;        // reduction time per byte
  NcclConfig nccl;            // fidelity nccl: GPU arch (set from the scenario's GPU) and channels
  // Measured collectives (a machine profile's `collectives:`): an op whose kind and group
  // size match an entry takes alpha + bytes / bandwidth, at every fidelity, instead of
  // the topology model (calibration measures every group of a size at once, so the
  // entry already holds the contention between groups). All-to-alls with imbalance
  // keep the topology model.
  std::vector<CollectiveProfile> measured;
  // Flow: the ops in flight share the routed links (sim/link_sharing.h); false: each op
  // takes its time alone, as if nothing else ran.
  bool share_links = true;
  // Flow: the distinct collective timings run side by side on oneTBB's workers (each worker
  // with its own router and flow scratch); false: one by one on the caller's router. The
  // results are the same bytes either way.
  bool parallel_timings = true;
  // Flow, with parallel_timings: the timings shared out over processes as well; nullptr: none.
  const TimingShare* share = nullptr;
  // Per role (pipeline stage), the speed of its compute relative to the model's (a straggler
  // at 0.8: its kernels take 1/0.8 as long); empty: all 1.
  std::vector<double> role_compute_factor;
  // Per role, the compute models of the GPU kinds its ranks run on (a heterogeneous cluster,
  // Scenario::node_gpus): each kernel takes the longest of their times, as the ranks of a stage
  // meet at every collective; empty (or an empty entry): the simulation's compute model.
  std::vector<std::vector<const ComputeModel*>> role_compute;
};

// Where the critical role's time went; the parts add up to the iteration time exactly.
struct Breakdown {
  Time compute;    // forward and backward kernels
  Time recompute;  // recomputed forward kernels
  Time optimizer;
  Time bubble;                          // waiting for another stage's compute (pipeline bubble)
  std::map<std::string, Time> exposed;  // communication the compute stream waited for, by
                                        // dimension: tp, cp, ep, pp, dp, 2d
  Time total() const;
};

// A link's load over the iteration: (time, fraction of its achievable rate) at every change.
struct LinkLoadSeries {
  int link = -1;
  std::vector<std::pair<Time, double>> load;
};

struct ScheduleSimResult {
  Time iteration;
  Trace trace;  // one event per op of every role
  std::vector<Time> role_end;
  std::vector<Bytes> peak_activation;  // per role: peak of the activation stash over the timeline
  int critical_role = 0;
  Breakdown breakdown;                    // of the critical role
  double executed_flops_per_rank = 0;     // summed over the critical role's compute ops
  double flops_executed = 0;              // summed over every role's ops (one rank per role)
  double flops_recomputed = 0;            // the recomputed part of flops_executed
  std::vector<BusiestLink> top_links;     // flow fidelity: up to 5, by utilization over the iteration
  std::vector<LinkUsage> link_usage;      // flow fidelity: every link, by id (peak only with links_shared)
  std::vector<LinkLoadSeries> link_load;  // links_shared: the 8 busiest links' load over time, and each tier's busiest
  bool links_shared = false;              // flow fidelity with ScheduleSimOptions::share_links
  // links_shared: by comm category (tp, dp, pp, ...), the ops that took longer than alone
  // and the time they lost, summed over every stage.
  std::map<std::string, std::pair<int, Time>> sharing_delay;
  int distinct_collectives = 0;  // collective timings computed (the rest reused)
};

ScheduleSimResult simulate_schedule(const Schedule& schedule, const Topology& topo, Router& router,
                                    const Placement& placement, const ComputeModel& compute,
                                    const AlgorithmRegistry& registry, const ScheduleSimOptions& options);

// One of several jobs on one fabric (simulate_jobs): its schedule, where its ranks sit (GPUs of
// the shared topology, disjoint from the other jobs'), its GPUs' compute model and its options.
struct ScheduleJob {
  const Schedule* schedule = nullptr;
  const Placement* placement = nullptr;
  const ComputeModel* compute = nullptr;
  ScheduleSimOptions options;
};

// Several jobs on one topology at once, each from the same start. Every op is timed as in
// simulate_schedule, within its own job (a DP all-reduce: every group of its stage at once);
// at flow fidelity with link sharing the ops in flight of every job then share the links, so
// one job's collectives slow another's where their routes meet (a leaf's uplinks, a spine).
// At formula and nccl fidelity, or without link sharing, each job runs as if alone. One result
// per job, as simulate_schedule gives it for that job alone (trace roles are its own stages;
// link_usage is the whole fabric's, every job's bytes). One job: exactly simulate_schedule.
std::vector<ScheduleSimResult> simulate_jobs(const std::vector<ScheduleJob>& jobs, const Topology& topo, Router& router,
                                             const AlgorithmRegistry& registry);

// Names the algorithm of every collective op that names none: the one the simulator picks
// for the op's group on this topology (`algorithm`, auto = the lowest closed form, see choose_algorithm), so
// that a real backend runs exactly what the prediction assumed. Ring shifts (send/recv
// collectives) and pipeline Send/Recv ops have no algorithm and are left alone.
void resolve_algorithms(Schedule& schedule, const Topology& topo, Router& router, const Placement& placement,
                        const AlgorithmRegistry& registry, const AlgorithmChoice& algorithm = {});

// The sim backend behind the Executor interface (for code that treats backends alike).
class SimExecutor : public Executor {
 public:
  SimExecutor(const Topology& topo, const Placement& placement, const ComputeModel& compute,
              const AlgorithmRegistry& registry, ScheduleSimOptions options)
      : topo_(topo), router_(topo), placement_(placement), compute_(compute), registry_(registry), options_(options) {}
  std::string name() const override { return std::string("sim:") + to_string(options_.fidelity); }
  Trace execute(const Schedule& schedule) override {
    last_ = simulate_schedule(schedule, topo_, router_, placement_, compute_, registry_, options_);
    return last_.trace;
  }
  const ScheduleSimResult& last() const { return last_; }

 private:
  const Topology& topo_;
  Router router_;
  const Placement& placement_;
  const ComputeModel& compute_;
  const AlgorithmRegistry& registry_;
  ScheduleSimOptions options_;
  ScheduleSimResult last_;
};

// The breakdown category of an op's communication: "tp", "cp", "ep", "pp", "dp", "2d".
std::string comm_category(const Op& op);

}  // namespace meshsim
