// What simulate, memory and sweep share: the scenario argument with its --set overrides
// (plus --fidelity and --profile where the command has them), and writing an output file.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "sim/scenario.h"

namespace meshsim::cli {

struct ScenarioFlags {
  std::string file;
  std::vector<std::string> sets;
  std::string fidelity, profile;
  double max_seconds = 0;  // --max-seconds (simulate, sweep)
  std::string max_memory;  // --max-memory (simulate, sweep)
  void add(CLI::App* c, bool required);
  // The scenario file (or the built-in default) with the overrides applied, in order.
  ScenarioNode node() const;
};

// --max-seconds S and --max-memory SIZE: a run that takes longer or grows larger stops with an
// error (core/budget.h); 0 and empty, the defaults, set no limit. Call start_budget when the
// command starts.
void add_budget(CLI::App* c, double& seconds, std::string& memory);
void start_budget(double seconds, const std::string& memory);

}  // namespace meshsim::cli
