#include <fmt/format.h>

#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"

void meshsim::cli::say_wrote(const std::string& path, const std::string& what) {
  std::fprintf(stderr, "meshsim: wrote %s (%s)\n", path.c_str(), what.c_str());
}

int main(int argc, char** argv) {
  CLI::App app{"meshsim: simulate, explain and compare collectives and training schedules on modeled GPU clusters"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "meshsim 0.1.0");
  meshsim::cli::Run collective = meshsim::cli::add_collective_command(app);
  meshsim::cli::Run topology = meshsim::cli::add_topology_command(app);
  meshsim::cli::Run algorithms = meshsim::cli::add_algorithms_command(app);
  meshsim::cli::Run simulate = meshsim::cli::add_simulate_command(app);
  meshsim::cli::Run memory = meshsim::cli::add_memory_command(app);
  meshsim::cli::Run sweep = meshsim::cli::add_sweep_command(app);
  meshsim::cli::Run sweep_merge = meshsim::cli::add_sweep_merge_command(app);
  meshsim::cli::Run launch = meshsim::cli::add_launch_command(app);
  meshsim::cli::Run calibrate = meshsim::cli::add_calibrate_command(app);
  meshsim::cli::Run check_published = meshsim::cli::add_check_published_command(app);
  meshsim::cli::Run moe_dispatch = meshsim::cli::add_moe_dispatch_command(app);
  meshsim::cli::Run validate;
  meshsim::cli::Run run = meshsim::cli::add_run_commands(app, &validate);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (app.got_subcommand("collective")) return collective();
    if (app.got_subcommand("topology")) return topology();
    if (app.got_subcommand("algorithms")) return algorithms();
    if (app.got_subcommand("simulate")) return simulate();
    if (app.got_subcommand("memory")) return memory();
    if (app.got_subcommand("sweep")) return sweep();
    if (app.got_subcommand("sweep-merge")) return sweep_merge();
    if (app.got_subcommand("launch")) return launch();
    if (app.got_subcommand("calibrate")) return calibrate();
    if (app.got_subcommand("check-published")) return check_published();
    if (app.got_subcommand("moe-dispatch")) return moe_dispatch();
    if (app.got_subcommand("run")) return run();
    if (app.got_subcommand("validate")) return validate();
  } catch (const meshsim::Error& e) {
    std::fprintf(stderr, "meshsim: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshsim: internal error: %s (please report this)\n", e.what());
    return 3;
  }
  return 1;
}
