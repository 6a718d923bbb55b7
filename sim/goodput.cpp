#include "sim/goodput.h"

#include <algorithm>
#include <cmath>
#include <random>

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

}  // namespace meshsim
