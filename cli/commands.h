// The `meshsim` command: subcommands registered on one CLI11 app.
//
//   meshsim collective allreduce --ranks 8 --bytes 1GiB --topology dgx-h100
//   meshsim topology show frontera-rtx:nodes=4 --dot cluster.dot
//   meshsim algorithms
//   meshsim simulate examples/gpt3-175b-1024.yaml --fidelity flow
//   meshsim memory examples/llama3-70b-128k.yaml
//   meshsim sweep s.yaml --vary parallel.tp=1,2,4,8 --vary placement=natural,bunched:2x2
//   meshsim launch -n 4 -- ./my_rank_program --steps 10
//
// Each add_* function declares a subcommand's flags and returns the callback that runs
// it after parsing; user errors surface as meshsim::Error and main() prints them.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

#include "core/output_file.h"

namespace meshsim::cli {

using Run = std::function<int()>;

Run add_collective_command(CLI::App& app);
Run add_topology_command(CLI::App& app);
Run add_algorithms_command(CLI::App& app);
Run add_simulate_command(CLI::App& app);
Run add_memory_command(CLI::App& app);
Run add_fields_command(CLI::App& app);   // `meshsim fields`: the scenario field reference
Run add_goodput_command(CLI::App& app);  // `meshsim goodput`: a long run's goodput under failures
Run add_sweep_command(CLI::App& app);
Run add_sweep_merge_command(CLI::App& app);          // `meshsim sweep-merge SHARD.jsonl...`
Run add_run_commands(CLI::App& app, Run* validate);  // `run` (returned) and `validate`
Run add_launch_command(CLI::App& app);
Run add_calibrate_command(CLI::App& app);
Run add_check_published_command(CLI::App& app);  // `meshsim check-published [PATH] [--json]`
Run add_moe_dispatch_command(CLI::App& app);     // `meshsim moe-dispatch`

}  // namespace meshsim::cli
