// Fuzz targets: meshsim's readers of untrusted text, each a function of one input.
//
// A target returns normally when the input was accepted ("ok") or refused with meshsim::Error
// (the one clear message every bad input must get; it returns the message's shape, digits
// dropped, which the mutation driver uses to keep inputs that reach a new refusal). Anything else is a finding: another
// exception escapes (std::logic_error from an assertion, std::bad_alloc, ...), the process
// crashes, or the input runs past the driver's watchdog. The same functions serve the
// mutation driver of this directory (driver.cpp, run by CTest in every build) and, built
// with clang, libFuzzer (libfuzzer_main.cpp, -DMESHSIM_LIBFUZZER=ON).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshsim::fuzz {

struct Target {
  std::string name;
  std::string summary;
  std::string (*run)(std::string_view input);
  std::vector<std::string> seed_globs;  // files of the source tree that seed its corpus
  std::vector<std::string> seeds;       // inline seeds (for targets without files)
  std::vector<std::string> dictionary;  // tokens the mutator splices in
};

// scenario: ScenarioNode::parse, resolve, then (when small enough to be quick) the
//   formula-fidelity simulation of the iteration and the memory table.
// topology: parse_topology_yaml, then routes between a few GPU pairs.
// profile: parse_machine_profile.
// topology-spec: resolve_topology on a preset spec ("dgx-h100:nodes=2,inter=fat-tree").
// units: one line "KIND TEXT" (bytes, sweep, bandwidth, time, flops, int) to the parsers.
// launch-env: lines NAME=VALUE as the launcher's environment, to launch_env_from and
//   heartbeat_env_from (every launcher's variables, the token, the heartbeat settings).
const std::vector<Target>& targets();
const Target* find_target(std::string_view name);

}  // namespace meshsim::fuzz
