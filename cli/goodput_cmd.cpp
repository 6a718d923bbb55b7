// meshsim goodput [SCENARIO.yaml] [--set ...] (--failure-rate KIND=PER_DAY ... | --interruptions N --over-days D)
//   [--checkpoint-bw RATE] [--read-bw RATE] [--relaunch TIME] [--interval TIME] [--days D] [--runs N] [--json]
//
// The expected goodput of a long run of the scenario (sim/goodput.h's estimate_goodput: the
// MTBF, the checkpoint, Young's, Daly's and the optimal interval, the goodput there in closed
// form and by Monte Carlo), printed by report/goodput_report.h.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "cli/scenario_flags.h"
#include "report/goodput_report.h"
#include "sim/goodput.h"
#include "sim/training_sim.h"

namespace meshsim::cli {

namespace {

struct GoodputFlags : ScenarioFlags, GoodputRequest {
  bool json = false;
};

int run_goodput(const GoodputFlags& f) {
  const GoodputEstimate e = estimate_goodput(require_training(f.node().resolve(), "goodput"), f);
  if (f.json)
    std::cout << goodput_json(e).dump(2) << "\n";
  else
    std::cout << goodput_text(e);
  return 0;
}

}  // namespace

Run add_goodput_command(CLI::App& app) {
  auto f = std::make_shared<GoodputFlags>();
  CLI::App* c = app.add_subcommand(
      "goodput", "expected goodput of a long run under failures: MTBF, checkpoint interval (Young/Daly), Monte Carlo");
  c->footer(
      "Examples:\n"
      "  meshsim goodput --failure-rate gpu=4.7e-4 --checkpoint-bw 2TB/s --relaunch 600s\n"
      "  meshsim goodput examples/scenarios/gpt3-175b-1024xh100.yaml --interruptions 419 --over-days 54 --json");
  f->add(c, false);
  c->add_option("--failure-rate", f->rates,
                "KIND=FAILURES_PER_DAY per component (gpu, node, nic, switch; counted on the scenario's cluster), "
                "repeatable");
  c->add_option("--interruptions", f->interruptions, "failures observed in a run of this size (with --over-days)");
  c->add_option("--over-days", f->over_days, "the days --interruptions were counted over");
  c->add_option("--checkpoint-bw", f->checkpoint_bw, "aggregate checkpoint write rate to storage")
      ->capture_default_str();
  c->add_option("--read-bw", f->read_bw, "aggregate checkpoint read rate on restart (default: the write rate)");
  c->add_option("--relaunch", f->relaunch,
                "time from a failure to the job running again, before reading the checkpoint")
      ->capture_default_str();
  c->add_option("--interval", f->interval, "checkpoint interval to evaluate (default: the optimal one)");
  c->add_option("--days", f->days, "length of the run")->capture_default_str();
  c->add_option("--runs", f->runs, "Monte Carlo runs (seeded: the same output every time)")->capture_default_str();
  c->add_flag("--json", f->json, "print JSON");
  return [f] { return run_goodput(*f); };
}

}  // namespace meshsim::cli
