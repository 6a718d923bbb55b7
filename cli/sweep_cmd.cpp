// meshsim sweep SCENARIO.yaml --vary path=v1,v2 ... [--set ...] [--where EXPR] [--jobs N] [--csv FILE]
//   [--jsonl FILE] [--report FILE.html] [--json] [--rank-by METRIC] [--shard K/N]
// meshsim sweep-merge SHARD.jsonl... [--csv FILE] [--jsonl FILE] [--report FILE.html] [--json]
//
// The flags of the sweep engine (sim/sweep.h: variants, rows, ranking, shards and their
// merge), run and printed by report/sweep_run.h: in this process, or under mpirun or srun over
// the ranks of the MPI job (backend/mpi/ranks.h), with the same bytes out.
#include <fmt/format.h>

#include <memory>
#include <optional>

#include "backend/mpi/ranks.h"
#include "cli/commands.h"
#include "cli/scenario_flags.h"
#include "report/sweep_run.h"
#include "sim/sweep_where.h"

namespace meshsim::cli {
namespace {

struct SweepFlags : ScenarioFlags, SweepRequest {};

struct MergeFlags : SweepOutput {
  std::vector<std::string> shards;
};

// Under a launcher, the sweep spread over its ranks; else in this process.
int sweep_command(const SweepFlags& f) {
  start_budget(f.max_seconds, f.max_memory);
  const std::optional<mpi::Ranks> ranks = mpi::join_ranks();
  const SweepBase base{[&f] { return f.node(); }, f.file, f.sets, f.fidelity, f.profile};
  return ranks ? run_sweep(f, base, *ranks) : 2;
}

// --csv, --jsonl, --report and --json, as sweep and sweep-merge both take them; `when` ends
// the files' help ("while the sweep runs").
void add_output_flags(CLI::App* c, SweepOutput& f, const std::string& when) {
  c->add_option("--csv", f.csv, "write every variant as CSV, in variant order" + when);
  c->add_option("--jsonl", f.jsonl, "write every variant as a JSON line, in variant order" + when);
  c->add_option("--report", f.report, "write a self-contained HTML report with the scaling plot");
  c->add_flag("--json", f.json, "print the ranked variants as JSON (full precision; invalid ones with their error)");
  c->add_option("--rank-by", f.rank_by,
                "rank the layouts that fit by tokens_per_s (the default, most first), iteration_s (least first), "
                "mfu (most first) or memory (peak per GPU, least first)");
}

}  // namespace

Run add_sweep_command(CLI::App& app) {
  auto f = std::make_shared<SweepFlags>();
  CLI::App* c = app.add_subcommand("sweep", "simulate every combination of --vary values, ranked");
  c->footer(
      "Examples:\n"
      "  meshsim sweep examples/scenarios/recompute-modes.yaml --vary parallel.recompute=none,selective,full --csv "
      "m.csv\n"
      "  meshsim sweep examples/scenarios/summa-vs-megatron.yaml --vary placement=natural,bunched:2x2 \\\n"
      "      --vary parallel.micro_batch_size=8,16,24 --report sweep.html\n"
      "  meshsim sweep s.yaml --vary parallel.tp=1,2,4,8 --vary parallel.pp=1,2,4 --jsonl rows.jsonl --json\n"
      "  meshsim sweep examples/scenarios/gpt3-175b-1024xh100.yaml --set parallel.dp=auto --vary parallel.tp=2,4,8 \\\n"
      "      --vary parallel.pp=4,8 --global-batch 1024 --rank-by mfu   # every layout at one batch, best MFU first\n"
      "  meshsim sweep s.yaml --vary parallel.tp=1,2,4,8 --shard 0/2 --jsonl part0.jsonl   # then sweep-merge\n"
      "  mpirun -np 4 meshsim sweep s.yaml --vary parallel.tp=1,2,4,8 --csv all.csv   # ranks share the variants");
  f->add(c, true);
  c->add_option("--vary", f->vary, "path=v1,v2,... (use | between values that contain commas), repeatable")->required();
  c->add_option("--fidelity", f->fidelity, "formula, flow or nccl for every variant");
  c->add_option("--jobs", f->jobs, "parallel workers (default: all cores)");
  add_output_flags(c, *f, ", while the sweep runs");
  c->add_option("--global-batch", f->global_batch,
                "sequences per iteration for every layout: sets parallel.global_batch and drops the scenario's "
                "microbatches, so that with dp=auto each layout runs global_batch / (dp x micro_batch_size) "
                "micro-batches");
  c->add_option("--where", f->where,
                fmt::format("keep only the variants for which this holds, e.g. 'tp*pp <= 64 && microbatches >= 2*pp' "
                            "(muParser: + - * / ^, < <= > >= == !=, && ||; variables: {}); the others are "
                            "excluded before they run and counted",
                            WhereFilter::variables()));
  c->add_option("--shard", f->shard,
                "K/N: run only the variants i with i % N == K (K from 0 to N-1; needs --jsonl), then sweep-merge "
                "the N files");
  add_budget(c, f->max_seconds, f->max_memory);
  return [f] { return sweep_command(*f); };
}

Run add_sweep_merge_command(CLI::App& app) {
  auto f = std::make_shared<MergeFlags>();
  CLI::App* c = app.add_subcommand("sweep-merge", "merge the --jsonl files of sweep --shard K/N runs, ranked");
  c->footer(
      "Examples:\n"
      "  meshsim sweep s.yaml --vary parallel.tp=1,2,4,8 --shard 0/2 --jsonl part0.jsonl\n"
      "  meshsim sweep s.yaml --vary parallel.tp=1,2,4,8 --shard 1/2 --jsonl part1.jsonl\n"
      "  meshsim sweep-merge part0.jsonl part1.jsonl --csv all.csv   # prints what the whole sweep prints");
  c->add_option("shards", f->shards, "the shards' --jsonl files, every K of one K/N split once")->required();
  add_output_flags(c, *f, " (as sweep's)");
  return [f] { return run_sweep_merge(f->shards, *f); };
}

}  // namespace meshsim::cli
