#include "report/goodput_report.h"

#include <fmt/format.h>

#include "core/units.h"

namespace meshsim {

nlohmann::ordered_json goodput_json(const GoodputEstimate& e) {
  const GoodputInputs& in = e.in;
  return nlohmann::ordered_json{
      {"scenario", e.scenario},
      {"gpus", e.gpus},
      {"iteration_s", e.iteration.seconds()},
      {"mtbf_s", e.mtbf_s},
      {"mtbf_from", e.mtbf_from},
      {"checkpoint_bytes", e.checkpoint_bytes},
      {"checkpoint_s", in.checkpoint_s},
      {"restart_s", in.restart_s},
      {"young_interval_s", young_interval(in)},
      {"daly_interval_s", daly_interval(in)},
      {"optimal_interval_s", e.optimal_s},
      {"interval_s", e.interval_s},
      {"goodput", e.goodput},
      {"goodput_at_optimum", e.goodput_at_optimum},
      {"monte_carlo",
       {{"goodput", e.monte_carlo.mean}, {"stderr", e.monte_carlo.stderr_}, {"runs", e.monte_carlo.runs}}},
      {"days", e.request.days},
      {"failures_expected", e.failures_expected}};
}

std::string goodput_text(const GoodputEstimate& e) {
  const GoodputRequest& f = e.request;
  const GoodputInputs& in = e.in;
  const MonteCarloGoodput& mc = e.monte_carlo;
  return fmt::format(
      "meshsim goodput: {} on {} GPUs, iteration {}\n"
      "  MTBF of the job   {:.2f} h ({})\n"
      "  checkpoint        {} (weights and optimizer state): write {:.1f} s at {}, restart {:.1f} s "
      "(relaunch {} + read)\n"
      "  interval          Young {:.0f} s, Daly {:.0f} s, optimal {:.0f} s{}\n"
      "  goodput           {:.2f}% at {:.0f} s ({:.2f}% at the optimum); Monte Carlo {:.2f}% +- {:.2f} "
      "({} runs of {} days)\n"
      "  over {} days      {:.0f} failures expected, each losing {:.0f} iterations on average (half an interval "
      "of work)\n",
      e.scenario, e.gpus, format_time(e.iteration), e.mtbf_s / 3600, e.mtbf_from, format_bytes(e.checkpoint_bytes),
      in.checkpoint_s, f.checkpoint_bw, in.restart_s, f.relaunch, young_interval(in), daly_interval(in), e.optimal_s,
      f.interval.empty() ? "" : fmt::format(" (used: --interval {})", f.interval), 100 * e.goodput, e.interval_s,
      100 * e.goodput_at_optimum, 100 * mc.mean, 100 * mc.stderr_, mc.runs, f.days, f.days, e.failures_expected,
      e.interval_s / 2 / e.iteration.seconds());
}

}  // namespace meshsim
