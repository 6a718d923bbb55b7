// meshsim check-published [PATH] [--json] [--only SOURCE[/GROUP]]
//   predicted vs measured for every published case (validation/published, docs/validation/published.md);
//   exit 1 when a group's mean or worst |error| passes the bound recorded for it.
#include <iostream>
#include <memory>

#include "cli/commands.h"
#include "report/published_report.h"
#include "sim/published.h"

namespace meshsim::cli {

namespace {

struct PublishedFlags {
  std::string path;
  std::string only;
  bool json = false;
};

int run_check_published(const PublishedFlags& f) {
  PublishedSuite suite = load_published_suite(f.path);
  if (!f.only.empty()) keep_only(suite, f.only, f.path);
  const PublishedReport report = check_published(suite, AlgorithmRegistry::builtin());
  if (f.json)
    std::cout << published_json(report).dump(2) << "\n";
  else
    std::cout << published_text(report);
  if (!report.within_bounds()) {
    std::cerr << "meshsim: check-published: a group's error passed its recorded bound (see above); "
                 "explain the change in docs/validation/published.md or fix the model\n";
    return 1;
  }
  return 0;
}

}  // namespace

Run add_check_published_command(CLI::App& app) {
  auto f = std::make_shared<PublishedFlags>();
  f->path = "validation/published";
  CLI::App* c = app.add_subcommand("check-published",
                                   "predicted vs published measurements (validation/published/*.yaml): signed error "
                                   "per case, mean and worst per group");
  c->add_option("path", f->path, "suite directory or one source file (default: validation/published)");
  c->add_option("--only", f->only, "one source (file stem) or source/group, e.g. korthikanti2022/table5");
  c->add_flag("--json", f->json, "JSON instead of the table");
  c->footer("Example: meshsim check-published validation/published --only korthikanti2022/table4");
  return [f] { return run_check_published(*f); };
}

}  // namespace meshsim::cli
