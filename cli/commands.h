// The `meshsim` command: subcommands registered on one CLI11 app.
//
//   meshsim collective allreduce --ranks 8 --bytes 1GiB --topology dgx-h100
//   meshsim topology show frontera-rtx:nodes=4 --dot cluster.dot
//   meshsim algorithms
//
// Each add_* function declares a subcommand's flags and returns the callback that runs
// it after parsing; user errors surface as meshsim::Error and main() prints them.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace meshsim::cli {

using Run = std::function<int()>;

Run add_collective_command(CLI::App& app);
Run add_topology_command(CLI::App& app);
Run add_algorithms_command(CLI::App& app);

}  // namespace meshsim::cli
