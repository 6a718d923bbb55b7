#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#if __has_include(<malloc.h>)
#include <malloc.h>  // mallopt (glibc)
#endif

#include "cli/commands.h"
#include "core/error.h"
#include "core/suggest.h"

namespace {

// The commands' names, and one command's flags as typed ("--fidelity").
std::vector<std::string> command_names(CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) names.push_back(sub->get_name());
  return names;
}
std::vector<std::string> flag_names(CLI::App& app, const std::string& command) {
  std::vector<std::string> flags;
  for (CLI::App* sub : app.get_subcommands([&](CLI::App* s) { return s->get_name() == command; }))
    for (const CLI::Option* opt : sub->get_options())
      for (const std::string& l : opt->get_lnames()) flags.push_back("--" + l);
  return flags;
}

// A mistyped command: its error, with the closest command, or "" when argv[1] is a command or
// a flag.
std::string unknown_command(CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return "";
  const std::string word = argv[1];
  const std::vector<std::string> commands = command_names(app);
  if (std::find(commands.begin(), commands.end(), word) != commands.end()) return "";
  const std::string hint = meshsim::did_you_mean(word, commands);
  return fmt::format("unknown command '{}'{}; meshsim --help lists the commands", word,
                     hint.empty() ? "" : " (" + hint + ")");
}

// "did you mean --fidelity?" for the first flag of argv that the command does not have and is
// close to one it has, or "".
std::string flag_hint(CLI::App& app, int argc, char** argv) {
  if (argc < 2) return "";
  const std::vector<std::string> flags = flag_names(app, argv[1]);
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) continue;
    const std::string name = arg.substr(0, arg.find('='));
    if (std::find(flags.begin(), flags.end(), name) != flags.end()) continue;
    if (std::string hint = meshsim::did_you_mean(name, flags, ""); !hint.empty()) return hint;
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
#ifdef M_TOP_PAD
  // Keep 256 MiB at the top of the heap when it shrinks: a 100k-GPU cluster builds and frees
  // hundreds of MB of tables, and memory handed back to the kernel page-faults again as the
  // next table grows (a 102,400-GPU formula run on the 2-core VM: 0.98-1.40 s without it,
  // 1.05-1.17 s with it, alternately; docs/performance.md). Pages are reserved, not touched:
  // small runs stay small.
  mallopt(M_TOP_PAD, 256 << 20);
#endif
  CLI::App app{"meshsim: simulate, explain and compare collectives and training schedules on modeled GPU clusters"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("meshsim ") + MESHSIM_VERSION);
  meshsim::cli::Run collective = meshsim::cli::add_collective_command(app);
  meshsim::cli::Run topology = meshsim::cli::add_topology_command(app);
  meshsim::cli::Run algorithms = meshsim::cli::add_algorithms_command(app);
  meshsim::cli::Run simulate = meshsim::cli::add_simulate_command(app);
  meshsim::cli::Run memory = meshsim::cli::add_memory_command(app);
  meshsim::cli::Run fields = meshsim::cli::add_fields_command(app);
  meshsim::cli::Run goodput = meshsim::cli::add_goodput_command(app);
  meshsim::cli::Run sweep = meshsim::cli::add_sweep_command(app);
  meshsim::cli::Run sweep_merge = meshsim::cli::add_sweep_merge_command(app);
  meshsim::cli::Run launch = meshsim::cli::add_launch_command(app);
  meshsim::cli::Run calibrate = meshsim::cli::add_calibrate_command(app);
  meshsim::cli::Run check_published = meshsim::cli::add_check_published_command(app);
  meshsim::cli::Run moe_dispatch = meshsim::cli::add_moe_dispatch_command(app);
  meshsim::cli::Run validate;
  meshsim::cli::Run run = meshsim::cli::add_run_commands(app, &validate);
  if (const std::string why = unknown_command(app, argc, argv); !why.empty()) {
    std::fprintf(stderr, "meshsim: error: %s\n", why.c_str());
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (const std::string hint = flag_hint(app, argc, argv); !hint.empty() && e.get_exit_code() != 0) {
      std::fprintf(stderr, "meshsim: error: %s; %s (meshsim %s --help lists the flags)\n", e.what(), hint.c_str(),
                   argv[1]);
      return 2;
    }
    return app.exit(e);
  }
  // A command's output that did not reach stdout (a full disk, a closed file) is an error, not
  // a success with a short file.
  auto flushed = [](int rc) {
    std::cout.flush();
    if (std::fflush(stdout) != 0 || std::ferror(stdout) || std::cout.fail()) {
      std::fprintf(stderr,
                   "meshsim: error: writing to standard output failed (disk full?); the output is incomplete\n");
      return rc == 0 ? 2 : rc;
    }
    return rc;
  };
  auto dispatch = [&]() -> int {
    const std::pair<const char*, meshsim::cli::Run*> commands[] = {{"collective", &collective},
                                                                   {"topology", &topology},
                                                                   {"algorithms", &algorithms},
                                                                   {"simulate", &simulate},
                                                                   {"memory", &memory},
                                                                   {"fields", &fields},
                                                                   {"goodput", &goodput},
                                                                   {"sweep", &sweep},
                                                                   {"sweep-merge", &sweep_merge},
                                                                   {"launch", &launch},
                                                                   {"calibrate", &calibrate},
                                                                   {"check-published", &check_published},
                                                                   {"moe-dispatch", &moe_dispatch},
                                                                   {"run", &run},
                                                                   {"validate", &validate}};
    for (const auto& [name, command] : commands)
      if (app.got_subcommand(name)) return (*command)();
    return 1;
  };
  try {
    return flushed(dispatch());
  } catch (const meshsim::Error& e) {
    std::fprintf(stderr, "meshsim: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meshsim: internal error: %s (please report this)\n", e.what());
    return 3;
  }
}
