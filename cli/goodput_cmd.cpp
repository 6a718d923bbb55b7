// meshsim goodput [SCENARIO.yaml] [--set ...] (--failure-rate KIND=PER_DAY ... | --interruptions N --over-days D)
//   [--checkpoint-bw RATE] [--read-bw RATE] [--relaunch TIME] [--interval TIME] [--days D] [--runs N] [--json]
//
// The expected goodput of a long run of the scenario (sim/goodput.h): the job's MTBF from
// failure rates per component kind (counts from the layout and the topology) or from an
// observed interruption count, the checkpoint size from the memory model (weights and
// optimizer state of every parameter), its write and read times, Young's, Daly's and the
// optimal interval, the goodput there (closed form and a Monte Carlo of the same model), and
// the iterations a failure costs on average.
#include <fmt/format.h>

#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/scenario_flags.h"
#include "core/error.h"
#include "core/units.h"
#include "schedule/memory.h"
#include "sim/goodput.h"
#include "sim/training_sim.h"
#include "topology/presets.h"

namespace meshsim::cli {

namespace {

struct GoodputFlags : ScenarioFlags {
  std::vector<std::string> rates;  // KIND=PER_DAY
  int interruptions = -1;
  double over_days = 0;
  std::string checkpoint_bw = "1TB/s", read_bw, relaunch = "300s", interval;
  double days = 30;
  int runs = 2000;
  bool json = false;
};

// --failure-rate gpu=4.7e-4 ...: failures per component per day, counted on this cluster.
std::vector<ComponentRate> component_rates(const GoodputFlags& f, const Topology& topo, long long gpus) {
  long long nics = 0, switches = 0;
  for (const Device& d : topo.devices()) {
    if (d.kind == DeviceKind::Nic) ++nics;
    if (d.kind != DeviceKind::Gpu && d.kind != DeviceKind::Nic && d.kind != DeviceKind::HostBridge) ++switches;
  }
  const long long nodes = std::max(1LL, gpus / std::max(1, topo.gpus_per_node()));
  std::vector<ComponentRate> out;
  for (const std::string& r : f.rates) {
    const auto eq = r.find('=');
    const std::string kind = r.substr(0, eq);
    double per_day = -1;
    try {
      std::size_t used = 0;
      per_day = eq == std::string::npos ? -1 : std::stod(r.substr(eq + 1), &used);
      if (used != r.size() - eq - 1) per_day = -1;
    } catch (const std::exception&) {
    }
    if (!(per_day >= 0) || !std::isfinite(per_day))
      throw Error(
          fmt::format("--failure-rate {}: write KIND=FAILURES_PER_COMPONENT_PER_DAY with a number >= 0, e.g. "
                      "gpu=4.7e-4",
                      r));
    const long long count = kind == "gpu"      ? gpus
                            : kind == "node"   ? nodes
                            : kind == "nic"    ? nics
                            : kind == "switch" ? switches
                                               : -1;
    if (count < 0)
      throw Error(fmt::format("--failure-rate {}: unknown component '{}'; use gpu, node, nic or switch", r, kind));
    out.push_back({kind, per_day, count});
  }
  return out;
}

int run_goodput(const GoodputFlags& f) {
  const Scenario s = require_training(f.node().resolve(), "goodput");
  const TrainingResult r = simulate_training(s, AlgorithmRegistry::builtin(), false);
  const long long gpus = s.parallel.world_size();
  const std::shared_ptr<const Topology> topo = shared_topology(s.topology);
  double mtbf_s = 0;
  std::string mtbf_from;
  if (f.interruptions >= 0) {
    if (!f.rates.empty())
      throw Error("--interruptions: give either --interruptions with --over-days or --failure-rate");
    if (!(f.over_days > 0))
      throw Error("--over-days: the days the --interruptions were counted over; e.g. --over-days 54");
    if (f.interruptions == 0) throw Error("--interruptions: 0 failures gives no MTBF; give the count observed (>= 1)");
    mtbf_s = f.over_days * 86400 / f.interruptions;
    mtbf_from = fmt::format("{} interruptions in {} days", f.interruptions, f.over_days);
  } else {
    if (f.rates.empty())
      throw Error(
          "goodput: give failure rates (--failure-rate gpu=4.7e-4 ...) or an observed count "
          "(--interruptions N --over-days D)");
    const std::vector<ComponentRate> rates = component_rates(f, *topo, gpus);
    mtbf_s = job_mtbf_s(rates);
    for (const ComponentRate& c : rates)
      mtbf_from += fmt::format("{}{} {} x {:.3g}/day", mtbf_from.empty() ? "" : ", ", c.count, c.kind, c.per_day);
    if (!std::isfinite(mtbf_s)) throw Error("--failure-rate: every rate or count is 0: nothing fails");
  }
  if (!(f.days > 0) || f.days > 3650) throw Error(fmt::format("--days: {} is not in (0, 3650]", f.days));
  if (f.runs < 10 || f.runs > 100000) throw Error(fmt::format("--runs: {} is not in 10..100000", f.runs));
  const Bytes ckpt = checkpoint_bytes(s.model);
  const double write_bps = parse_bandwidth(f.checkpoint_bw, "--checkpoint-bw").bytes_per_ps() * 1e12;
  const double read_bps = (f.read_bw.empty() ? parse_bandwidth(f.checkpoint_bw, "--checkpoint-bw")
                                             : parse_bandwidth(f.read_bw, "--read-bw"))
                              .bytes_per_ps() *
                          1e12;
  GoodputInputs in;
  in.mtbf_s = mtbf_s;
  in.checkpoint_s = static_cast<double>(ckpt) / write_bps;
  in.restart_s = parse_time(f.relaunch, "--relaunch").seconds() + static_cast<double>(ckpt) / read_bps;
  const double best = optimal_interval(in);
  const double tau = f.interval.empty() ? best : parse_time(f.interval, "--interval").seconds();
  const double g = goodput(in, tau);
  const MonteCarloGoodput mc = monte_carlo(in, tau, f.days * 86400 * g, f.runs, 1);
  const double iteration_s = r.sim.iteration.seconds();
  nlohmann::ordered_json j{{"scenario", s.name},
                           {"gpus", gpus},
                           {"iteration_s", iteration_s},
                           {"mtbf_s", mtbf_s},
                           {"mtbf_from", mtbf_from},
                           {"checkpoint_bytes", ckpt},
                           {"checkpoint_s", in.checkpoint_s},
                           {"restart_s", in.restart_s},
                           {"young_interval_s", young_interval(in)},
                           {"daly_interval_s", daly_interval(in)},
                           {"optimal_interval_s", best},
                           {"interval_s", tau},
                           {"goodput", g},
                           {"goodput_at_optimum", goodput(in, best)},
                           {"monte_carlo", {{"goodput", mc.mean}, {"stderr", mc.stderr_}, {"runs", mc.runs}}},
                           {"days", f.days},
                           {"failures_expected", f.days * 86400 / mtbf_s}};
  if (f.json) {
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::cout << fmt::format(
      "meshsim goodput: {} on {} GPUs, iteration {}\n"
      "  MTBF of the job   {:.2f} h ({})\n"
      "  checkpoint        {} (weights and optimizer state): write {:.1f} s at {}, restart {:.1f} s "
      "(relaunch {} + read)\n"
      "  interval          Young {:.0f} s, Daly {:.0f} s, optimal {:.0f} s{}\n"
      "  goodput           {:.2f}% at {:.0f} s ({:.2f}% at the optimum); Monte Carlo {:.2f}% +- {:.2f} "
      "({} runs of {} days)\n"
      "  over {} days      {:.0f} failures expected, each losing {:.0f} iterations on average (half an interval "
      "of work)\n",
      s.name, gpus, format_time(r.sim.iteration), mtbf_s / 3600, mtbf_from, format_bytes(ckpt), in.checkpoint_s,
      f.checkpoint_bw, in.restart_s, f.relaunch, young_interval(in), daly_interval(in), best,
      f.interval.empty() ? "" : fmt::format(" (used: --interval {})", f.interval), 100 * g, tau,
      100 * goodput(in, best), 100 * mc.mean, 100 * mc.stderr_, mc.runs, f.days, f.days, f.days * 86400 / mtbf_s,
      tau / 2 / iteration_s);
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
