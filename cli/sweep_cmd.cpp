// meshsim sweep SCENARIO.yaml --vary path=v1,v2 ... [--set ...] [--where EXPR] [--jobs N] [--csv FILE]
//   [--jsonl FILE] [--report FILE.html] [--json] [--rank-by METRIC] [--shard K/N]
// meshsim sweep-merge SHARD.jsonl... [--csv FILE] [--jsonl FILE] [--report FILE.html] [--json]
//
// The command-line side of the sweep engine (sim/sweep.h: variants, rows, ranking, shards and
// their merge; report/sweep_report.h: the table, --json and the HTML report). --csv and --jsonl
// stream the rows in variant order while the sweep runs (a row waits only for the variants
// before it), so a long sweep leaves its results on disk as it goes and the files have the same
// bytes for any --jobs. The ranked table and a summary line close the run.
//
// Beyond one machine: --shard K/N runs the variants whose index i has i % N == K, its --jsonl
// a shard's (a header line, each row with its index); sweep-merge prints exactly what the whole
// sweep prints. Under a launcher (mpirun, srun: backend/mpi/plugin.h) rank r of R runs what
// --shard r/R runs (of a --shard K/N run: shard K + r*N of N*R), into a JSON-lines text in
// memory; rank 0 gathers the texts, merges them as sweep-merge does and writes the files and
// the ranked output: the same bytes as one process. So under mpirun rank 0 writes --csv and
// --jsonl only once every rank is done, not while the sweep runs. The ranks watch each other
// (backend/mpi/ranks.h), so a stopped rank ends the sweep instead of leaving the others waiting.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>

#include "backend/launch/launch_env.h"
#include "backend/mpi/ranks.h"
#include "cli/commands.h"
#include "cli/scenario_flags.h"
#include "core/error.h"
#include "report/html_report.h"
#include "report/sweep_report.h"
#include "sim/sweep.h"
#include "sim/sweep_where.h"

namespace meshsim::cli {
namespace {

// What a sweep and a merge print and write.
struct OutputFlags {
  std::string csv, jsonl, report;
  std::string rank_by = "tokens_per_s";  // --rank-by
  bool json = false;
};

struct SweepFlags : ScenarioFlags, OutputFlags {
  std::vector<std::string> vary;
  std::string global_batch;  // --global-batch
  int jobs = 0;
  std::string shard;
  std::string where;
};

// --csv and --jsonl, opened before anything runs (a bad path fails first).
class OutputFiles {
 public:
  OutputFiles(const std::string& csv, const std::string& jsonl) : csv_path_(csv), jsonl_path_(jsonl) {
    open(csv_, csv, "--csv");
    open(jsonl_, jsonl, "--jsonl");
  }
  std::ostream* csv() { return csv_.is_open() ? &csv_ : nullptr; }
  std::ostream* jsonl() { return jsonl_.is_open() ? &jsonl_ : nullptr; }
  // Closes both: an Error naming the flag and the file when a write failed (a full disk).
  void close() {
    auto done = [](std::ofstream& out, const std::string& path, const char* flag) {
      if (!out.is_open()) return;
      out.close();
      if (!out) throw Error(fmt::format("{}: writing '{}' failed (disk full?); the file is incomplete", flag, path));
    };
    done(csv_, csv_path_, "--csv");
    done(jsonl_, jsonl_path_, "--jsonl");
  }

 private:
  static void open(std::ofstream& out, const std::string& path, const char* flag) {
    if (path.empty()) return;
    out.open(path, std::ios::binary);
    if (!out) throw Error(fmt::format("{}: cannot write '{}'; check the directory exists and is writable", flag, path));
  }
  std::string csv_path_, jsonl_path_;
  std::ofstream csv_, jsonl_;
};

// The progress line on a terminal: done/total, rate and the time left at that rate.
class Progress {
 public:
  explicit Progress(long total) : total_(total), tty_(isatty(STDERR_FILENO) != 0) {}
  void tick(long n = 1) {
    const long d = done_ += n;
    if (!tty_ || total_ == 0) return;
    std::lock_guard<std::mutex> lock(mutex_);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    const double eta = d > 0 ? secs / static_cast<double>(d) * static_cast<double>(total_ - d) : 0;
    const int width = 30, filled = static_cast<int>(d * width / total_);
    std::cerr << "\r[" << std::string(static_cast<std::size_t>(filled), '#')
              << std::string(static_cast<std::size_t>(width - filled), ' ') << "] " << d << "/" << total_
              << fmt::format("  {:.0f}/s  ETA {:.0f} s   ", static_cast<double>(d) / std::max(secs, 1e-9), eta)
              << std::flush;
    if (d == total_) std::cerr << "\n";
  }

 private:
  long total_;
  bool tty_;
  std::atomic<long> done_{0};
  std::mutex mutex_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// What a sweep has settled before its variants run.
struct Setup {
  std::optional<ScenarioNode> base;
  std::optional<sweep::Sweep> sweep;
  sweep::Shard shard;
  std::string definition;  // definition_hash, for a shard's header and the ranks' texts
  std::optional<WhereFilter> where;
  std::optional<OutputFiles> files;  // rank 0's
};

// Checks the flags and the scenario (errors before anything runs, the same on every rank).
void set_up(const SweepFlags& f, const mpi::Ranks& ranks, Setup& s) {
  std::vector<sweep::Vary> vs = sweep::parse_varies(f.vary);
  s.shard = sweep::parse_shard(f.shard);
  if (s.shard.active && f.jsonl.empty())
    throw Error(
        fmt::format("--shard {}: a shard writes its rows for sweep-merge to --jsonl; add --jsonl shard-{}.jsonl",
                    f.shard, s.shard.k));
  if (!f.where.empty()) s.where.emplace(f.where);  // a typo fails before anything runs
  (void)sweep::rank_metric(f.rank_by);
  s.base.emplace(f.node());
  if (!f.global_batch.empty()) {  // one batch for every layout: replaces the scenario's micro-batches
    s.base->unset("parallel.microbatches");
    s.base->set("parallel.global_batch=" + f.global_batch);
  }
  if (s.base->is_workload()) require_training(s.base->resolve(), "sweep");
  s.sweep.emplace(std::move(vs));
  if (s.shard.active || ranks.mpi != nullptr)
    s.definition = sweep::definition_hash({f.file, f.sets, f.fidelity, f.profile, f.where, f.global_batch}, *s.sweep);
  s.files.emplace(ranks.rank == 0 ? f.csv : "", ranks.rank == 0 ? f.jsonl : "");
}

// This rank's share, rank r of R of the sweep's shard K/N: shard K + r*N of N*R (the shard
// itself with one rank), run as --shard runs it, as a shard's JSON lines.
std::string run_rank_part(const SweepFlags& f, const Setup& s, const mpi::Ranks& ranks) {
  const sweep::Shard part{s.shard.k + ranks.rank * s.shard.n, s.shard.n * ranks.size, true};
  const nlohmann::ordered_json header = sweep::shard_header(part, s.definition, s.base->source(), *s.sweep);
  std::ostringstream text;
  sweep::RowWriter writer(nullptr, &text, *s.sweep, &header);
  Progress progress(ranks.rank == 0 ? part.count(s.sweep->size()) : 0);
  sweep::RunOptions o;
  o.jobs = mpi::jobs_per_rank(f.jobs, ranks);
  o.where = s.where ? &*s.where : nullptr;
  o.on_row = [&](long pos, const sweep::Row& row) {
    writer.add(pos, row);
    progress.tick();
  };
  (void)sweep::run(*s.base, *s.sweep, part, o);
  return text.str();
}

// Rank 0: every rank's text merged into the rows of shard K/N (the whole sweep without
// --shard), in variant order, as sweep-merge reads shards.
std::vector<sweep::Row> merge_ranks(const std::vector<std::string>& texts, const sweep::Shard& shard) {
  std::vector<std::istringstream> ins(texts.begin(), texts.end());
  std::vector<sweep::ShardInput> inputs;
  for (std::size_t r = 0; r < ins.size(); ++r) inputs.push_back({fmt::format("rank {}'s rows", r), &ins[r]});
  return sweep::merge(inputs, shard).rows;
}

// What closes a sweep (and a merge): the files named, the ranked table or --json, the report.
// `rows` in variant order; `jsonl_what` says what the --jsonl holds.
void finish(const OutputFlags& f, const std::string& source, const sweep::Sweep& sweep,
            const std::vector<sweep::Row>& rows, const std::string& jsonl_what) {
  if (!f.csv.empty()) say_wrote(f.csv, fmt::format("CSV, {} variants", rows.size()));
  if (!f.jsonl.empty()) say_wrote(f.jsonl, fmt::format("{}, {} variants", jsonl_what, rows.size()));
  const sweep::RankMetric& metric = sweep::rank_metric(f.rank_by);
  const std::vector<const sweep::Row*> order = sweep::ranked(rows, metric);
  if (f.json)
    std::cout << sweep_json(order).dump(2) << "\n";
  else
    std::cout << sweep_text(order, metric);
  std::cout << std::flush;
  if (!f.report.empty()) {
    write_html_report(sweep_html(source, sweep, rows, order, metric), f.report);
    say_wrote(f.report, "HTML report");
  }
}

// Closes the files (checked before they are named), then the ranked output.
int close_and_finish(const SweepFlags& f, Setup& s, const std::vector<sweep::Row>& rows) {
  s.files->close();
  s.files.reset();
  finish(f, s.base->source(), *s.sweep, rows, s.shard.active ? "JSON lines, shard " + s.shard.text() : "JSON lines");
  return 0;
}

// A --shard run's header line for its --jsonl (none without --shard).
std::optional<nlohmann::ordered_json> header_of(const Setup& s) {
  if (!s.shard.active) return std::nullopt;
  return sweep::shard_header(s.shard, s.definition, s.base->source(), *s.sweep);
}

// The sweep in this process: rows streamed to the files as they come.
int run_single(const SweepFlags& f, Setup& s) {
  const std::optional<nlohmann::ordered_json> header = header_of(s);
  std::vector<sweep::Row> rows;
  {
    sweep::RowWriter writer(s.files->csv(), s.files->jsonl(), *s.sweep, header ? &*header : nullptr);
    Progress progress(s.shard.count(s.sweep->size()));
    sweep::RunOptions o;
    o.jobs = f.jobs;
    o.where = s.where ? &*s.where : nullptr;
    o.on_row = [&](long pos, const sweep::Row& row) {
      writer.add(pos, row);
      progress.tick();
    };
    rows = sweep::run(*s.base, *s.sweep, s.shard, o);
  }
  return close_and_finish(f, s, rows);
}

// The sweep in this process, one of `ranks` (with none, the single-process sweep). Errors
// before the variants run (the same on every rank, or one rank's files) are agreed on first,
// so no rank waits for one that quit.
int run_sweep_ranks(const SweepFlags& f, const mpi::Ranks& ranks) {
  Setup s;
  if (ranks.mpi == nullptr) {
    set_up(f, ranks, s);
    return run_single(f, s);
  }
  launch::HeartbeatEnv beat;
  std::string error;
  try {
    beat = launch::heartbeat_env();
    set_up(f, ranks, s);
  } catch (const Error& e) {
    error = e.what();
  } catch (const std::exception& e) {
    error = std::string("internal error: ") + e.what() + " (please report this)";
  }
  if (mpi::any_rank_failed(ranks, error)) return 2;
  const std::vector<std::string> texts = mpi::run_on_ranks(ranks, beat, [&] { return run_rank_part(f, s, ranks); });
  if (ranks.rank != 0) return 0;
  const std::vector<sweep::Row> rows = merge_ranks(texts, s.shard);
  const std::optional<nlohmann::ordered_json> header = header_of(s);
  sweep::RowWriter(s.files->csv(), s.files->jsonl(), *s.sweep, header ? &*header : nullptr).add_all(rows);
  return close_and_finish(f, s, rows);
}

// Under a launcher, the sweep spread over its ranks; else in this process.
int run_sweep(const SweepFlags& f) {
  start_budget(f.max_seconds, f.max_memory);
  const std::optional<mpi::Ranks> ranks = mpi::join_ranks();
  return ranks ? run_sweep_ranks(f, *ranks) : 2;
}

// --- sweep-merge ---------------------------------------------------------------------------

struct MergeFlags : OutputFlags {
  std::vector<std::string> shards;
};

int run_merge(const MergeFlags& f) {
  (void)sweep::rank_metric(f.rank_by);  // a typo fails before the files are read
  std::vector<std::ifstream> streams;
  streams.reserve(f.shards.size());  // the inputs point into it
  std::vector<sweep::ShardInput> inputs;
  for (const std::string& path : f.shards) {
    streams.emplace_back(path, std::ios::binary);
    if (!streams.back()) throw Error(fmt::format("sweep-merge: cannot read '{}'; check the path", path));
    inputs.push_back({path, &streams.back()});
  }
  const sweep::Merged m = sweep::merge(inputs);
  OutputFiles out(f.csv, f.jsonl);
  sweep::RowWriter(out.csv(), out.jsonl(), m.sweep).add_all(m.rows);
  out.close();
  finish(f, m.source, m.sweep, m.rows, "JSON lines");
  return 0;
}

// --csv, --jsonl, --report and --json, as sweep and sweep-merge both take them; `when` ends
// the files' help ("while the sweep runs").
void add_output_flags(CLI::App* c, OutputFlags& f, const std::string& when) {
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
  return [f] { return run_sweep(*f); };
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
  return [f] { return run_merge(*f); };
}

}  // namespace meshsim::cli
