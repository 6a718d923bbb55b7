#include "sim/goodput.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <tuple>

#include "core/error.h"
#include "schedule/memory.h"
#include "sim/training_sim.h"
#include "topology/presets.h"

namespace meshsim {

double goodput(const GoodputInputs& in, double tau) {
  const double m = in.mtbf_s;
  if (!(tau > 0) || !(m > 0)) return 0;
  // wall / work = M e^{R/M} (e^{(tau + delta)/M} - 1) / tau, in logs against overflow.
  const double x = (tau + in.checkpoint_s) / m;
  const double log_wall = std::log(m) + in.restart_s / m + std::log(std::expm1(x)) - std::log(tau);
  return std::isfinite(log_wall) ? std::exp(-log_wall) : 0.0;
}

double optimal_interval(const GoodputInputs& in) {
  // goodput is unimodal in tau: search log(tau) over [1e-3 s, 1e3 M] by golden sections.
  double lo = std::log(1e-3), hi = std::log(std::max(1.0, 1e3 * in.mtbf_s));
  const double phi = (std::sqrt(5.0) - 1) / 2;
  double a = hi - phi * (hi - lo), b = lo + phi * (hi - lo);
  double fa = goodput(in, std::exp(a)), fb = goodput(in, std::exp(b));
  for (int i = 0; i < 200; ++i) {
    if (fa < fb) {
      lo = a, a = b, fa = fb;
      b = lo + phi * (hi - lo), fb = goodput(in, std::exp(b));
    } else {
      hi = b, b = a, fb = fa;
      a = hi - phi * (hi - lo), fa = goodput(in, std::exp(a));
    }
  }
  return std::exp((lo + hi) / 2);
}

double young_interval(const GoodputInputs& in) { return std::sqrt(2 * in.checkpoint_s * in.mtbf_s); }

double daly_interval(const GoodputInputs& in) {
  const double d = in.checkpoint_s, m = in.mtbf_s;
  if (d >= 2 * m) return m;
  const double r = std::sqrt(d / (2 * m));
  return std::sqrt(2 * d * m) * (1 + r / 3 + r * r / 9) - d;
}

MonteCarloGoodput monte_carlo(const GoodputInputs& in, double tau, double work_s, int runs, std::uint64_t seed) {
  MonteCarloGoodput out;
  out.runs = runs;
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> next_failure(1.0 / in.mtbf_s);
  double sum = 0, sum2 = 0, failures = 0;
  for (int run = 0; run < runs; ++run) {
    double wall = 0, kept = 0, until_failure = next_failure(rng);
    // Spends `t` seconds of wall time unless a failure comes first: then the time to it is
    // spent, a failure counted, the next one drawn, and false returned.
    auto spend = [&](double t) {
      if (until_failure >= t) {
        wall += t, until_failure -= t;
        return true;
      }
      wall += until_failure, ++failures;
      until_failure = next_failure(rng);
      return false;
    };
    bool restarting = false;
    while (kept < work_s) {
      if (restarting && !spend(in.restart_s)) continue;  // a failure during the restart: restart again
      restarting = false;
      const double segment = std::min(tau, work_s - kept);
      // The segment and its checkpoint (none after the last segment: the run is done).
      const bool last = kept + segment >= work_s;
      if (spend(segment + (last ? 0 : in.checkpoint_s)))
        kept += segment;
      else
        restarting = true;
    }
    const double g = kept / wall;
    sum += g, sum2 += g * g;
  }
  out.mean = sum / runs;
  out.stderr_ = runs > 1 ? std::sqrt(std::max(0.0, sum2 / runs - out.mean * out.mean) / (runs - 1)) : 0;
  out.failures_per_run = failures / runs;
  return out;
}

double job_mtbf_s(const std::vector<ComponentRate>& rates) {
  double per_day = 0;
  for (const ComponentRate& r : rates) per_day += r.per_day * static_cast<double>(r.count);
  return per_day > 0 ? 86400.0 / per_day : INFINITY;
}

std::vector<ComponentRate> component_rates(const std::vector<std::string>& rates, const Topology& topo,
                                           long long gpus) {
  long long nics = 0, switches = 0;
  for (const Device& d : topo.devices()) {
    if (d.kind == DeviceKind::Nic) ++nics;
    if (d.kind != DeviceKind::Gpu && d.kind != DeviceKind::Nic && d.kind != DeviceKind::HostBridge) ++switches;
  }
  const long long nodes = std::max(1LL, gpus / std::max(1, topo.gpus_per_node()));
  std::vector<ComponentRate> out;
  for (const std::string& r : rates) {
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

namespace {

// The job's MTBF in seconds and where it comes from: --interruptions over --over-days, or the
// failure rates counted on the cluster.
std::pair<double, std::string> job_mtbf(const GoodputRequest& f, const Topology& topo, long long gpus) {
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
    const std::vector<ComponentRate> rates = component_rates(f.rates, topo, gpus);
    mtbf_s = job_mtbf_s(rates);
    for (const ComponentRate& c : rates)
      mtbf_from += fmt::format("{}{} {} x {:.3g}/day", mtbf_from.empty() ? "" : ", ", c.count, c.kind, c.per_day);
    if (!std::isfinite(mtbf_s)) throw Error("--failure-rate: every rate or count is 0: nothing fails");
  }
  return {mtbf_s, mtbf_from};
}

}  // namespace

GoodputEstimate estimate_goodput(const Scenario& s, const GoodputRequest& f) {
  const TrainingResult r = simulate_training(s, AlgorithmRegistry::builtin(), false);
  GoodputEstimate e;
  e.request = f;
  e.scenario = s.name;
  e.gpus = s.parallel.world_size();
  e.iteration = r.sim.iteration;
  const std::shared_ptr<const Topology> topo = shared_topology(s.topology);
  std::tie(e.mtbf_s, e.mtbf_from) = job_mtbf(f, *topo, e.gpus);
  if (!(f.days > 0) || f.days > 3650) throw Error(fmt::format("--days: {} is not in (0, 3650]", f.days));
  if (f.runs < 10 || f.runs > 100000) throw Error(fmt::format("--runs: {} is not in 10..100000", f.runs));
  e.checkpoint_bytes = checkpoint_bytes(s.model);
  const double write_bps = parse_bandwidth(f.checkpoint_bw, "--checkpoint-bw").bytes_per_ps() * 1e12;
  const double read_bps = (f.read_bw.empty() ? parse_bandwidth(f.checkpoint_bw, "--checkpoint-bw")
                                             : parse_bandwidth(f.read_bw, "--read-bw"))
                              .bytes_per_ps() *
                          1e12;
  e.in.mtbf_s = e.mtbf_s;
  e.in.checkpoint_s = static_cast<double>(e.checkpoint_bytes) / write_bps;
  e.in.restart_s = parse_time(f.relaunch, "--relaunch").seconds() + static_cast<double>(e.checkpoint_bytes) / read_bps;
  e.optimal_s = optimal_interval(e.in);
  e.interval_s = f.interval.empty() ? e.optimal_s : parse_time(f.interval, "--interval").seconds();
  e.goodput = goodput(e.in, e.interval_s);
  e.goodput_at_optimum = goodput(e.in, e.optimal_s);
  e.monte_carlo = monte_carlo(e.in, e.interval_s, f.days * 86400 * e.goodput, f.runs, 1);
  e.failures_expected = f.days * 86400 / e.mtbf_s;
  return e;
}

}  // namespace meshsim
