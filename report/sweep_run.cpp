// meshsim sweep and sweep-merge past their flags: see sweep_run.h.
#include "report/sweep_run.h"

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
#include "core/error.h"
#include "core/output_file.h"
#include "report/html_report.h"
#include "report/sweep_report.h"
#include "sim/sweep.h"
#include "sim/sweep_where.h"
#include "sim/training_sim.h"

namespace meshsim {
namespace {

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
void set_up(const SweepRequest& r, const SweepBase& base, const mpi::Ranks& ranks, Setup& s) {
  std::vector<sweep::Vary> vs = sweep::parse_varies(r.vary);
  s.shard = sweep::parse_shard(r.shard);
  if (s.shard.active && r.jsonl.empty())
    throw Error(
        fmt::format("--shard {}: a shard writes its rows for sweep-merge to --jsonl; add --jsonl shard-{}.jsonl",
                    r.shard, s.shard.k));
  if (!r.where.empty()) s.where.emplace(r.where);  // a typo fails before anything runs
  (void)sweep::rank_metric(r.rank_by);
  s.base.emplace(base.load());
  if (!r.global_batch.empty()) {  // one batch for every layout: replaces the scenario's micro-batches
    s.base->unset("parallel.microbatches");
    s.base->set("parallel.global_batch=" + r.global_batch);
  }
  if (s.base->is_workload()) require_training(s.base->resolve(), "sweep");
  s.sweep.emplace(std::move(vs));
  if (s.shard.active || ranks.mpi != nullptr)
    s.definition =
        sweep::definition_hash({base.file, base.sets, base.fidelity, base.profile, r.where, r.global_batch}, *s.sweep);
  s.files.emplace(ranks.rank == 0 ? r.csv : "", ranks.rank == 0 ? r.jsonl : "");
}

// This rank's share, rank r of R of the sweep's shard K/N: shard K + r*N of N*R (the shard
// itself with one rank), run as --shard runs it, as a shard's JSON lines.
std::string run_rank_part(const SweepRequest& r, const Setup& s, const mpi::Ranks& ranks) {
  const sweep::Shard part{s.shard.k + ranks.rank * s.shard.n, s.shard.n * ranks.size, true};
  const nlohmann::ordered_json header = sweep::shard_header(part, s.definition, s.base->source(), *s.sweep);
  std::ostringstream text;
  sweep::RowWriter writer(nullptr, &text, *s.sweep, &header);
  Progress progress(ranks.rank == 0 ? part.count(s.sweep->size()) : 0);
  sweep::RunOptions o;
  o.jobs = mpi::jobs_per_rank(r.jobs, ranks);
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
void finish(const SweepOutput& r, const std::string& source, const sweep::Sweep& sweep,
            const std::vector<sweep::Row>& rows, const std::string& jsonl_what) {
  if (!r.csv.empty()) say_wrote(r.csv, fmt::format("CSV, {} variants", rows.size()));
  if (!r.jsonl.empty()) say_wrote(r.jsonl, fmt::format("{}, {} variants", jsonl_what, rows.size()));
  const sweep::RankMetric& metric = sweep::rank_metric(r.rank_by);
  const std::vector<const sweep::Row*> order = sweep::ranked(rows, metric);
  if (r.json)
    std::cout << sweep_json(order).dump(2) << "\n";
  else
    std::cout << sweep_text(order, metric);
  std::cout << std::flush;
  if (!r.report.empty()) {
    write_html_report(sweep_html(source, sweep, rows, order, metric), r.report);
    say_wrote(r.report, "HTML report");
  }
}

// Closes the files (checked before they are named), then the ranked output.
int close_and_finish(const SweepRequest& r, Setup& s, const std::vector<sweep::Row>& rows) {
  s.files->close();
  s.files.reset();
  finish(r, s.base->source(), *s.sweep, rows, s.shard.active ? "JSON lines, shard " + s.shard.text() : "JSON lines");
  return 0;
}

// A --shard run's header line for its --jsonl (none without --shard).
std::optional<nlohmann::ordered_json> header_of(const Setup& s) {
  if (!s.shard.active) return std::nullopt;
  return sweep::shard_header(s.shard, s.definition, s.base->source(), *s.sweep);
}

// The sweep in this process: rows streamed to the files as they come.
int run_single(const SweepRequest& r, Setup& s) {
  const std::optional<nlohmann::ordered_json> header = header_of(s);
  std::vector<sweep::Row> rows;
  {
    sweep::RowWriter writer(s.files->csv(), s.files->jsonl(), *s.sweep, header ? &*header : nullptr);
    Progress progress(s.shard.count(s.sweep->size()));
    sweep::RunOptions o;
    o.jobs = r.jobs;
    o.where = s.where ? &*s.where : nullptr;
    o.on_row = [&](long pos, const sweep::Row& row) {
      writer.add(pos, row);
      progress.tick();
    };
    rows = sweep::run(*s.base, *s.sweep, s.shard, o);
  }
  return close_and_finish(r, s, rows);
}

}  // namespace

// Errors before the variants run (the same on every rank, or one rank's files) are agreed on
// first, so no rank waits for one that quit.
int run_sweep(const SweepRequest& r, const SweepBase& base, const mpi::Ranks& ranks) {
  Setup s;
  if (ranks.mpi == nullptr) {
    set_up(r, base, ranks, s);
    return run_single(r, s);
  }
  launch::HeartbeatEnv beat;
  std::string error;
  try {
    beat = launch::heartbeat_env();
    set_up(r, base, ranks, s);
  } catch (const Error& e) {
    error = e.what();
  } catch (const std::exception& e) {
    error = std::string("internal error: ") + e.what() + " (please report this)";
  }
  if (mpi::any_rank_failed(ranks, error)) return 2;
  const std::vector<std::string> texts = mpi::run_on_ranks(ranks, beat, [&] { return run_rank_part(r, s, ranks); });
  if (ranks.rank != 0) return 0;
  const std::vector<sweep::Row> rows = merge_ranks(texts, s.shard);
  const std::optional<nlohmann::ordered_json> header = header_of(s);
  sweep::RowWriter(s.files->csv(), s.files->jsonl(), *s.sweep, header ? &*header : nullptr).add_all(rows);
  return close_and_finish(r, s, rows);
}

int run_sweep_merge(const std::vector<std::string>& shards, const SweepOutput& r) {
  (void)sweep::rank_metric(r.rank_by);  // a typo fails before the files are read
  std::vector<std::ifstream> streams;
  streams.reserve(shards.size());  // the inputs point into it
  std::vector<sweep::ShardInput> inputs;
  for (const std::string& path : shards) {
    streams.emplace_back(path, std::ios::binary);
    if (!streams.back()) throw Error(fmt::format("sweep-merge: cannot read '{}'; check the path", path));
    inputs.push_back({path, &streams.back()});
  }
  const sweep::Merged m = sweep::merge(inputs);
  OutputFiles out(r.csv, r.jsonl);
  sweep::RowWriter(out.csv(), out.jsonl(), m.sweep).add_all(m.rows);
  out.close();
  finish(r, m.source, m.sweep, m.rows, "JSON lines");
  return 0;
}

}  // namespace meshsim
