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
  void add(CLI::App* c, bool required);
  // The scenario file (or the built-in default) with the overrides applied, in order.
  ScenarioNode node() const;
};

}  // namespace meshsim::cli
