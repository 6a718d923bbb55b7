// meshsim simulate [SCENARIO.yaml] [--set path=value ...] [--fidelity formula|flow|nccl] [--profile FILE]
//   [--trace FILE] [--json] [--report FILE.html] [--links FILE.csv] [--no-link-sharing] [--jobs N]
//   (under mpirun/srun the ranks share out the flow fidelity's collective timings)
//   (a scenario with jobs: times them alone and together, examples/whatif/two-jobs.yaml)
// meshsim memory SCENARIO.yaml [--set path=value ...] [--json]
#include <fmt/format.h>
#include <tbb/global_control.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "backend/mpi/ranks.h"
#include "cli/commands.h"
#include "cli/scenario_flags.h"
#include "core/budget.h"
#include "core/error.h"
#include "core/units.h"
#include "report/html_report.h"
#include "report/training_report.h"
#include "sim/scenario.h"
#include "sim/scenario_fields.h"
#include "sim/training_sim.h"

namespace meshsim::cli {

void ScenarioFlags::add(CLI::App* c, bool required) {
  auto* f = c->add_option("scenario", file, "scenario YAML (see docs/scenarios.md)");
  if (required) f->required();
  c->add_option("--set", sets, "override a field: path=value (e.g. parallel.tp=4), repeatable");
}

void add_budget(CLI::App* c, double& seconds, std::string& memory) {
  c->add_option("--max-seconds", seconds,
                "stop the run with an error after this many seconds of wall-clock time (0: no limit; a long run "
                "says how far it is on a terminal's stderr every 10 s)");
  c->add_option("--max-memory", memory,
                "stop the run with an error when this process's resident memory passes this size, e.g. 4GiB "
                "(checked every 0.1 s while it simulates; default: no limit)");
}

void start_budget(double seconds, const std::string& memory) {
  budget::start(seconds, memory.empty() ? 0 : static_cast<std::uint64_t>(parse_bytes(memory, "--max-memory")));
}

ScenarioNode ScenarioFlags::node() const {
  ScenarioNode n = file.empty() ? ScenarioNode::builtin_default() : ScenarioNode::load(file);
  for (const auto& s : sets) n.set(s);
  if (!fidelity.empty()) {
    parse_fidelity(fidelity, "--fidelity");  // a typo is the flag's error, not run.fidelity's
    n.set("run.fidelity=" + fidelity);
  }
  if (!profile.empty()) n.set("run.profile=" + profile);
  return n;
}

namespace {

struct SimulateFlags : ScenarioFlags {
  std::string trace, report, links, collectives;
  bool json = false, no_link_sharing = false;
  int jobs = 0;  // workers for the flow timings (0: all cores; under mpirun, the node's shared out)
};

// A scenario with jobs: each alone and all together (flow fidelity); the per-op outputs
// (trace, report, link and collective tables) describe one job and are refused.
// `speak`: print and write the outputs (false on the other ranks of an MPI job).
int run_jobs(const SimulateFlags& f, const Scenario& s, bool speak) {
  for (const auto& [name, value] : {std::pair{"--trace", &f.trace}, std::pair{"--report", &f.report},
                                    std::pair{"--links", &f.links}, std::pair{"--collectives", &f.collectives}})
    if (!value->empty())
      throw Error(
          fmt::format("{}: describes one job; this scenario has {} (jobs:), whose figures --json gives; "
                      "simulate one job's sections without jobs: for {}",
                      name, s.jobs.size() == 1 ? "one job" : fmt::format("{} jobs", s.jobs.size()), name));
  const JobsResult r = simulate_jobs(s, AlgorithmRegistry::builtin());
  if (!speak) return 0;
  if (f.json)
    std::cout << jobs_json(r).dump(2) << "\n";
  else
    std::cout << jobs_summary_text(r);
  return 0;
}

// The simulation and its outputs. share: the MPI job's processes sharing out the flow timings
// (nullptr: this process alone); speak: print and write the outputs.
int simulate_and_write(const SimulateFlags& f, const TimingShare* share, bool speak) {
  ScenarioNode node = f.node();
  if (f.no_link_sharing) node.set("run.link_sharing=false");
  const Scenario resolved = node.resolve();
  if (!resolved.jobs.empty()) return run_jobs(f, resolved, speak);
  const Scenario s = require_training(resolved, "simulate");
  if (!f.links.empty() && s.fidelity != Fidelity::Flow)
    throw Error("--links: link loads come from the flow fidelity; add --fidelity flow (or set run.fidelity: flow)");
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  // The per-op schedule is kept when a trace or report needs it; otherwise formula runs take
  // the fast path (same figures).
  const TrainingResult r =
      simulate_training(s, registry, !f.trace.empty() || !f.report.empty() || !f.collectives.empty(), nullptr, share);
  if (!speak) return 0;
  if (f.json)
    std::cout << training_json(r).dump(2) << "\n";
  else
    std::cout << training_summary_text(r);
  if (!f.trace.empty()) {
    write_file(f.trace, training_trace(r).dump(), "--trace");
    say_wrote(f.trace, "Perfetto trace: open in https://ui.perfetto.dev");
  }
  if (!f.report.empty()) {
    write_html_report(training_html(r), f.report);
    say_wrote(f.report, "HTML report");
  }
  if (!f.links.empty()) {
    write_file(f.links, links_csv(r), "--links");
    say_wrote(f.links, "per-link load CSV");
  }
  if (!f.collectives.empty()) {
    const std::vector<CollectiveRow> rows = collective_rows(r);
    const bool json = f.collectives.size() > 5 && f.collectives.compare(f.collectives.size() - 5, 5, ".json") == 0;
    write_file(f.collectives, json ? collective_rows_json(rows).dump(2) + "\n" : collective_rows_csv(rows),
               "--collectives");
    say_wrote(f.collectives, json ? "per-collective table, JSON" : "per-collective table, CSV");
  }
  return 0;
}

// Under mpirun or srun (backend/mpi/ranks.h) every rank runs the same simulation and the flow
// fidelity's distinct collective timings are shared out over the ranks (TimingShare); rank 0
// prints and writes what one process would, byte for byte. An error every rank meets alike (the
// scenario's, a timing's: shared with the timings) is said once, by rank 0. A budget running out
// (--max-seconds, --max-memory) is one rank's own: it says so, naming itself, and ends the job,
// as a rank that fails otherwise does, rather than leave the others waiting in a collective.
int simulate_on_ranks(const SimulateFlags& f, const mpi::Ranks& ranks) {
  launch::HeartbeatEnv beat;
  std::string error;
  try {
    beat = launch::heartbeat_env();
  } catch (const Error& e) {
    error = e.what();
  }
  if (mpi::any_rank_failed(ranks, error)) return 2;
  const TimingShare share{ranks.rank, ranks.size,
                          [&ranks](const std::string& bytes) { return ranks.mpi->all_gather(bytes); }};
  int status = 0;
  const std::vector<std::string> errors = mpi::run_on_ranks(ranks, beat, [&]() -> std::string {
    try {
      status = simulate_and_write(f, &share, ranks.rank == 0);
      return {};
    } catch (const BudgetError&) {
      throw;  // this rank's own: run_on_ranks names it and ends the job
    } catch (const Error& e) {
      return std::string("!") + e.what();
    }
  });
  if (ranks.rank != 0) return 0;
  for (const std::string& e : errors)
    if (!e.empty()) throw Error(e.substr(1));
  return status;
}

int run_simulate(const SimulateFlags& f) {
  start_budget(f.max_seconds, f.max_memory);
  std::optional<mpi::Ranks> ranks = mpi::Ranks{};
  if (mpi::launcher_env().active) {
    // A simulation needs no MPI to be right: under a launcher without the plugin (a build
    // without Open MPI) every rank runs it alone, as before ranks shared the timings, and says so.
    bool loaded = true;
    try {
      (void)mpi::mpi_plugin();
    } catch (const Error& e) {
      loaded = false;
      std::fprintf(stderr, "meshsim: warning: simulate: %s\n", e.what());
    }
    if (loaded) ranks = mpi::join_ranks("simulate");
  }
  if (!ranks) return 2;
  std::optional<tbb::global_control> limit;
  if (const int jobs = mpi::jobs_per_rank(f.jobs, *ranks); jobs > 0)
    limit.emplace(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(jobs));
  if (ranks->mpi == nullptr) return simulate_and_write(f, nullptr, true);
  return simulate_on_ranks(f, *ranks);
}

struct MemoryFlags : ScenarioFlags {
  bool json = false;
};

int run_memory(const MemoryFlags& f) {
  const Scenario s = require_training(f.node().resolve(), "memory");
  const StageMemories m = stage_memories(s);
  if (f.json)
    std::cout << memory_json(s, m.stages, m.capacity).dump(2) << "\n";
  else
    std::cout << memory_table_text(s.model, s.parallel, m.stages, m.capacity);
  return 0;
}

}  // namespace

Run add_simulate_command(CLI::App& app) {
  auto f = std::make_shared<SimulateFlags>();
  CLI::App* c =
      app.add_subcommand("simulate", "time one training iteration of a scenario (built-in default without one)");
  c->footer(
      "Examples:\n"
      "  meshsim simulate                                   # GPT-3 175B on 16 DGX H100 nodes\n"
      "  meshsim simulate examples/scenarios/gpt3-175b-1024xh100.yaml --fidelity flow --links links.csv\n"
      "  meshsim simulate --set parallel.tp=4 --set parallel.dp=4 --json\n"
      "  meshsim simulate examples/scenarios/llama3-70b-128k.yaml --report llama.html --trace llama.json\n"
      "  mpirun -np 4 meshsim simulate examples/scenarios/gpt3-175b-1024xh100.yaml --fidelity flow   # ranks share "
      "the flow timings");
  f->add(c, false);
  c->add_option(
      "--fidelity", f->fidelity,
      "formula (closed forms), flow (contention on routed links) or nccl (NCCL's tuning model for its collectives)");
  c->add_option("--profile", f->profile, "machine profile YAML (from meshsim calibrate)");
  c->add_option("--trace", f->trace, "write a Perfetto/Chrome trace (one process per stage, a track per stream)");
  c->add_flag("--json", f->json, "print the result as JSON");
  c->add_option("--jobs", f->jobs,
                "workers that time the flow fidelity's collectives side by side (default: all cores; under mpirun, "
                "the node's cores shared by its ranks); the result is the same for any count")
      ->check(CLI::Range(0, 65536));
  c->add_option("--report", f->report, "write a self-contained HTML report");
  c->add_option("--links", f->links,
                "flow: write every link's load over the iteration as CSV (link,name,tier,capacity_GBps,bytes,"
                "utilization,peak)");
  c->add_option("--collectives", f->collectives,
                "write the collectives and sends of each stage as a table: stage,axis,kind,bytes,group,count,time_s,"
                "mean_us,exposed_s (CSV; JSON when FILE ends in .json)");
  c->add_flag("--no-link-sharing", f->no_link_sharing,
              "flow: time every collective and send alone, as if no other op ran (run.link_sharing: false)");
  add_budget(c, f->max_seconds, f->max_memory);
  return [f] { return run_simulate(*f); };
}

Run add_memory_command(CLI::App& app) {
  auto f = std::make_shared<MemoryFlags>();
  CLI::App* c = app.add_subcommand("memory", "itemized memory per rank for each pipeline stage");
  c->footer(
      "Examples:\n  meshsim memory examples/scenarios/llama3-70b-128k.yaml --set parallel.cp=1 --set parallel.dp=8\n"
      "  meshsim memory examples/scenarios/gpt3-175b-1024xh100.yaml --set parallel.zero=3 --json");
  f->add(c, true);
  c->add_flag("--json", f->json, "print the table as JSON (stages, items with their formulas, totals, fits)");
  return [f] { return run_memory(*f); };
}

Run add_fields_command(CLI::App& app) {
  CLI::App* c =
      app.add_subcommand("fields", "every field a scenario file may hold: what it takes, its default, its meaning");
  c->footer("Examples:\n  meshsim fields\n  meshsim fields | grep parallel.");
  return [] {
    std::cout << scenario_fields_markdown();
    return 0;
  };
}

}  // namespace meshsim::cli
