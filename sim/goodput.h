// Goodput over a long run (issue 38 item 3): how much of the wall-clock time a job spends
// making progress when its parts fail, it checkpoints every tau seconds and restarts from the
// last checkpoint after each failure.
//
// The model (docs/math.md section 15): failures of the whole job arrive as a Poisson process
// of rate 1/M, M = 1 / sum over component kinds of (count x failures per component-day) (a
// failure of any part stops the synchronous job); between failures the job repeats a segment
// of tau seconds of work followed by a checkpoint write of delta; a failure, wherever it falls,
// loses the work since the last completed checkpoint and costs a restart of R (relaunch plus
// reading the checkpoint), which a failure can interrupt too. Daly's expected wall time per
// unit of work is then exact for this model:
//
//   wall / work = M e^{R/M} (e^{(tau + delta)/M} - 1) / tau
//
// goodput = work / wall; the optimal tau minimises it (found numerically; Young's sqrt(2 delta M)
// and Daly's higher-order estimate are printed beside it). monte_carlo() draws the same
// process with a seed, as an independent check of the closed form.
//
//   GoodputInputs in;  in.mtbf_s = 3 * 3600;  in.checkpoint_s = 30;  in.restart_s = 600;
//   const double best = optimal_interval(in);  goodput(in, best);  // ~0.87
//
// estimate_goodput() fills the model from a scenario as `meshsim goodput` does: the MTBF from
// failure rates counted on its cluster (or an observed count), the checkpoint from its model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/units.h"
#include "sim/scenario.h"
#include "topology/topology.h"

namespace meshsim {

struct GoodputInputs {
  double mtbf_s = 0;        // the job's mean time between failures M
  double checkpoint_s = 0;  // delta: writing one checkpoint (the job waits for it)
  double restart_s = 0;     // R: from a failure to work resuming (relaunch, read the checkpoint)
};

// Expected fraction of wall-clock time spent on work kept, checkpointing every `interval_s`
// seconds of work (0 when a restart cannot complete: R far beyond M).
double goodput(const GoodputInputs& in, double interval_s);
// The interval that maximises goodput (golden-section search on a log scale).
double optimal_interval(const GoodputInputs& in);
// Young's first-order interval sqrt(2 delta M), and Daly's higher-order one.
double young_interval(const GoodputInputs& in);
double daly_interval(const GoodputInputs& in);

struct MonteCarloGoodput {
  double mean = 0, stderr_ = 0;  // goodput over the runs and its standard error
  double failures_per_run = 0;
  int runs = 0;
};
// `runs` runs, each until `work_s` seconds of work are kept, failures drawn from an exponential
// distribution of mean M with `seed` (deterministic).
MonteCarloGoodput monte_carlo(const GoodputInputs& in, double interval_s, double work_s, int runs, std::uint64_t seed);

// Failure rates per component kind, failures per component per day, with the counts the
// cluster holds: the job's MTBF. Kinds with a zero count or rate add nothing.
struct ComponentRate {
  std::string kind;  // gpu, node, nic, switch
  double per_day = 0;
  long long count = 0;
};
double job_mtbf_s(const std::vector<ComponentRate>& rates);

// What `meshsim goodput` asks of a scenario, as typed (errors name the flags).
struct GoodputRequest {
  std::vector<std::string> rates;  // --failure-rate KIND=PER_DAY ...
  int interruptions = -1;          // --interruptions N (with --over-days); -1: from the rates
  double over_days = 0;
  std::string checkpoint_bw = "1TB/s", read_bw, relaunch = "300s", interval;
  double days = 30;  // the run's length
  int runs = 2000;   // Monte Carlo runs
};

// --failure-rate gpu=4.7e-4 ...: failures per component per day, each kind counted on the
// cluster: `gpus` GPUs, their nodes, and the topology's NICs and switches.
std::vector<ComponentRate> component_rates(const std::vector<std::string>& rates, const Topology& topo, long long gpus);

// The expected goodput of a long run of the scenario: the job's MTBF from failure rates per
// component kind (counts from the layout and the topology) or from an observed interruption
// count, the checkpoint size from the memory model (weights and optimizer state of every
// parameter), its write and read times, Young's, Daly's and the optimal interval, the goodput
// there (closed form and a Monte Carlo of the same model), and the iterations a failure costs.
struct GoodputEstimate {
  GoodputRequest request;
  std::string scenario;
  long long gpus = 0;
  Time iteration;
  double mtbf_s = 0;
  std::string mtbf_from;  // "419 interruptions in 54 days", or the rates and counts
  Bytes checkpoint_bytes = 0;
  GoodputInputs in;
  double optimal_s = 0, interval_s = 0;  // the optimal interval, and the one evaluated
  double goodput = 0, goodput_at_optimum = 0;
  MonteCarloGoodput monte_carlo;
  double failures_expected = 0;  // over request.days
};
GoodputEstimate estimate_goodput(const Scenario& s, const GoodputRequest& r);

}  // namespace meshsim
