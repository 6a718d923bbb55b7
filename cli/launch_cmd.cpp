// meshsim launch -n N [--port P] [--timeout S] -- COMMAND ARGS...
//
// Starts N ranks of COMMAND on this machine (backend/launch/launcher.h: the environment each
// rank gets, and how one failing, a timeout or a signal stops them all).
#include <fmt/format.h>

#include <memory>

#include "backend/launch/launcher.h"
#include "cli/commands.h"

namespace meshsim::cli {

Run add_launch_command(CLI::App& app) {
  auto o = std::make_shared<launch::LaunchOptions>();
  CLI::App* l =
      app.add_subcommand("launch", "Start N ranks of a command here (MESHSIM_RANK etc. set); one failing stops all");
  l->footer(
      "Examples:\n  meshsim launch -n 4 -- meshsim run examples/scenarios/allreduce-cpu.yaml\n"
      "  meshsim launch -n 8 --timeout 600 -- meshsim validate SCENARIO.yaml --backend cuda");
  l->add_option("-n,--nprocs", o->nprocs, "Number of ranks to start")->required()->check(CLI::Range(1, 65536));
  l->add_option("--port", o->port, "Rendezvous port for rank 0 (default: a free one)")->check(CLI::Range(0, 65535));
  l->add_option("--timeout", o->timeout_s,
                fmt::format("Stop all ranks and fail after this many seconds (default {:g}; 0: no limit)",
                            launch::kDefaultLaunchTimeoutS));
  l->add_option("command", o->command, "COMMAND ARGS... (write -- before the command)")->required();
  return [o] { return launch::launch(*o); };
}

}  // namespace meshsim::cli
