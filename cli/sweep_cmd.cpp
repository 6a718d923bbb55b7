// meshsim sweep SCENARIO.yaml --vary path=v1,v2 ... [--set ...] [--where EXPR] [--jobs N] [--csv FILE]
//   [--jsonl FILE] [--report FILE.html] [--json] [--shard K/N]
// meshsim sweep-merge SHARD.jsonl... [--csv FILE] [--jsonl FILE] [--report FILE.html] [--json]
//
// Every combination of the --vary values is one variant: the scenario with those --set
// assignments, simulated on oneTBB workers. A variant is made from its index when a worker
// takes it (the last --vary changes fastest) and shrinks to one Row as soon as it is
// simulated, so memory grows by a row per variant, whatever the scenario. --csv and --jsonl
// stream the rows in variant order while the sweep runs (a row waits only for the variants
// before it), so a long sweep leaves its results on disk as it goes and the files have the
// same bytes for any --jobs. The ranked table (layouts that fit, by tokens/s; then those
// that do not fit; then invalid ones) and a summary line close the run.
//
// Beyond one machine: --shard K/N (K from 0 to N-1) runs the variants whose index i has
// i % N == K; its --jsonl starts with a header line naming the shard and a hash of the sweep
// definition (scenario file bytes, --set, --fidelity, --profile, --vary), and each row carries
// its index. sweep-merge checks the shards belong together (one definition, every K once, every
// row there) and prints exactly what the whole sweep prints. Under a launcher (mpirun, srun:
// cli/mpi/plugin.h) the variants are dealt to the ranks in rounds, each round's rows gathered
// on rank 0, which writes the files and the ranked output: the same bytes as one process.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sched.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <thread>

#include "backend/launch/launch_env.h"
#include "backend/launch/rendezvous.h"
#include "cli/commands.h"
#include "cli/mpi/plugin.h"
#include "cli/scenario_flags.h"
#include "cli/sweep_where.h"
#include "core/budget.h"
#include "core/error.h"
#include "core/suggest.h"
#include "report/html_report.h"
#include "report/training_report.h"
#include "sim/training_sim.h"

namespace meshsim::cli {
namespace {

struct Vary {
  std::string path;
  std::vector<std::string> values;
};

Vary parse_vary(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size())
    throw Error(fmt::format("--vary: '{}' is not path=v1,v2,...; write e.g. --vary parallel.tp=1,2,4,8", text));
  Vary v{text.substr(0, eq), {}};
  const std::string rest = text.substr(eq + 1);
  // Values containing commas (topology specs, explicit lists) can be separated by '|'.
  const char sep = rest.find('|') != std::string::npos ? '|' : ',';
  for (std::size_t pos = 0;;) {
    const auto cut = rest.find(sep, pos);
    v.values.push_back(rest.substr(pos, cut == std::string::npos ? std::string::npos : cut - pos));
    if (v.values.back().empty()) throw Error(fmt::format("--vary {}: empty value in '{}'", v.path, rest));
    if (cut == std::string::npos) break;
    pos = cut + 1;
  }
  return v;
}

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

// --shard K/N: K counts from 0 to N-1 (like Slurm's --array=0-(N-1) task ids).
struct Shard {
  long k = 0, n = 1;
  bool active = false;
  std::string text() const { return fmt::format("{}/{}", k, n); }
  // How many of `size` variants this shard has (i % n == k).
  long count(long size) const { return k < size ? (size - k + n - 1) / n : 0; }
};

Shard parse_shard(const std::string& text) {
  Shard s;
  if (text.empty()) return s;
  const auto slash = text.find('/');
  long k = -1, n = -1;
  auto num = [](const std::string& t, long& out) {
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
    return ec == std::errc() && end == t.data() + t.size() && !t.empty();
  };
  if (slash == std::string::npos || !num(text.substr(0, slash), k) || !num(text.substr(slash + 1), n) || k < 0)
    throw Error(
        fmt::format("--shard: '{}' is not K/N; write e.g. --shard 0/4 (K counts from 0 to N-1; in a Slurm job array "
                    "--array=0-3 with --shard $SLURM_ARRAY_TASK_ID/4)",
                    text));
  if (n < 1) throw Error(fmt::format("--shard {}: N must be at least 1; write e.g. --shard 0/4", text));
  if (k >= n)
    throw Error(
        fmt::format("--shard {}: K counts from 0, so it must be 0..{}; use --shard 0/{} .. {}/{} (Slurm: "
                    "--array=0-{})",
                    text, n - 1, n, n - 1, n, n - 1));
  s.k = k;
  s.n = n;
  s.active = true;
  return s;
}

// The most variants one sweep runs (a row of each is kept for the ranked table).
constexpr long kMaxSweepVariants = 1 << 20;

// What a variant leaves behind once simulated: its figures, or why it is invalid.
// The layout columns of a row, in Row::layout's order.
constexpr std::array<const char*, 5> kLayoutNames = {"dp", "tp", "pp", "cp", "ep"};

struct Row {
  long index = 0;
  std::vector<std::string> sets;  // the --vary assignments, path=value
  std::string label;              // the sets joined by spaces
  bool valid = false;
  std::string error;
  int gpus = 0;
  // The resolved layout, so that rows compare like with like (dp=auto gives each variant its
  // own dp and hence global batch): dp, tp, pp, cp, ep, and the sequences of one iteration.
  std::array<int, 5> layout{};
  std::int64_t global_batch = 0;
  Time iteration;
  double tokens_per_s = 0, mfu = 0, hfu = 0;
  Bytes peak = 0;
  bool fits = false;
  // Left out by --where (its error says so; the prefix survives every row format).
  bool excluded() const { return !valid && error.rfind(kExcludedPrefix, 0) == 0; }
  static constexpr const char* kExcludedPrefix = "excluded by --where ";
};

class Sweep {
 public:
  explicit Sweep(std::vector<Vary> vs) : vs_(std::move(vs)) {
    double count = 1;
    std::string shape;
    for (const Vary& v : vs_) {
      count *= static_cast<double>(v.values.size());
      shape += fmt::format("{}{}", shape.empty() ? "" : " x ", v.values.size());
    }
    if (count > static_cast<double>(kMaxSweepVariants))
      throw Error(
          fmt::format("--vary: {} = {:.0f} variants exceed meshsim's limit of {} per sweep; vary fewer values "
                      "or split the sweep into several runs",
                      shape, count, kMaxSweepVariants));
    size_ = static_cast<long>(count);
  }
  long size() const { return size_; }
  const std::vector<Vary>& varies() const { return vs_; }

  // Variant i's assignments: i in mixed radix, the last --vary the fastest digit.
  std::vector<std::string> sets(long i) const {
    std::vector<std::string> out(vs_.size());
    for (std::size_t k = vs_.size(); k-- > 0;) {
      const auto n = static_cast<long>(vs_[k].values.size());
      out[k] = vs_[k].path + "=" + vs_[k].values[static_cast<std::size_t>(i % n)];
      i /= n;
    }
    return out;
  }

 private:
  std::vector<Vary> vs_;
  long size_ = 0;
};

Row simulate_variant(const ScenarioNode& base, const Sweep& sweep, long i, const AlgorithmRegistry& registry,
                     ClusterCache& clusters, const WhereFilter* where) {
  Row row;
  row.index = i;
  row.sets = sweep.sets(i);
  for (const auto& s : row.sets) row.label += (row.label.empty() ? "" : " ") + s;
  try {
    ScenarioNode node = base;
    for (const auto& s : row.sets) node.set(s);
    const Scenario scenario = node.resolve();
    if (where != nullptr && !where->accepts(scenario)) {
      row.error = std::string(Row::kExcludedPrefix) + "'" + where->text() + "'";
      return row;
    }
    const TrainingResult r = simulate_training(scenario, registry, /*keep_ops=*/false, &clusters);
    row.valid = true;
    const ParallelSpec& p = r.scenario.parallel;
    row.gpus = p.world_size();
    row.layout = {p.dp, p.tp, p.pp, p.cp, p.ep};
    row.global_batch = p.global_batch();
    row.iteration = r.sim.iteration;
    row.tokens_per_s = r.tokens_per_s;
    row.mfu = r.mfu;
    row.hfu = r.hfu;
    for (const auto& st : r.stages) row.peak = std::max(row.peak, st.peak);
    row.fits = r.fits;
  } catch (const BudgetError&) {
    throw;  // the whole sweep stops, not this variant
  } catch (const Error& e) {
    row.error = e.what();
  }
  return row;
}

std::optional<double> number(const std::string& s) {
  double x = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return x;
}

// A --vary value as JSON: a whole number, a number, true/false, or the text.
nlohmann::ordered_json typed_value(const std::string& text) {
  std::int64_t i = 0;
  const char* end = text.data() + text.size();
  if (auto [p, ec] = std::from_chars(text.data(), end, i); ec == std::errc() && p == end) return i;
  if (const std::optional<double> d = number(text); d && std::isfinite(*d)) return *d;
  if (text == "true" || text == "false") return text == "true";
  return text;
}

// A variant as JSON (the objects of --json and the lines of --jsonl; --json adds "rank").
// `vary`: each varied path and its value, typed, for tools that want a column per parameter.
nlohmann::ordered_json row_json(const Row& v) {
  nlohmann::ordered_json j;
  j["variant"] = v.label;
  j["set"] = v.sets;
  nlohmann::ordered_json vary = nlohmann::ordered_json::object();
  for (const std::string& s : v.sets) {
    const std::size_t eq = s.find('=');
    vary[s.substr(0, eq)] = typed_value(s.substr(eq + 1));
  }
  j["vary"] = std::move(vary);
  if (!v.valid) {
    j["error"] = v.error;
    return j;
  }
  j["gpus"] = v.gpus;
  for (std::size_t k = 0; k < kLayoutNames.size(); ++k) j["layout"][kLayoutNames[k]] = v.layout[k];
  j["global_batch"] = v.global_batch;
  j["iteration_s"] = v.iteration.seconds();
  j["tokens_per_s"] = v.tokens_per_s;
  j["mfu"] = v.mfu;
  j["hfu"] = v.hfu;
  j["peak_bytes"] = v.peak;
  j["fits"] = v.fits;
  return j;
}

// A CSV row: the fixed columns (kCsvColumns), then one per --vary path, its value.
std::string row_csv(const Row& v) {
  std::string label = v.label, err = v.error;
  std::replace(label.begin(), label.end(), ',', ';');
  std::replace(err.begin(), err.end(), ',', ';');
  std::string values;
  for (const std::string& s : v.sets) {
    std::string value = s.substr(s.find('=') + 1);
    std::replace(value.begin(), value.end(), ',', ';');
    values += "," + value;
  }
  if (!v.valid) return fmt::format("{},,,,,,,,{},,,,,,{}\n", label, err, values);
  return fmt::format("{},{},{:.9g},{:.6g},{:.6g},{:.6g},{},{},,{},{}{}\n", label, v.gpus, v.iteration.seconds(),
                     v.tokens_per_s, v.mfu, v.hfu, v.peak, v.fits ? "yes" : "no", fmt::join(v.layout, ","),
                     v.global_batch, values);
}
constexpr const char* kCsvColumns =
    "variant,gpus,iteration_s,tokens_per_s,mfu,hfu,peak_bytes,fits,error,dp,tp,pp,cp,ep,global_batch";

// A shard's definition: a hash of what decides the variant list and each variant's result
// (the scenario file's bytes, --set, --fidelity, --profile and the --vary lists), so
// sweep-merge refuses shards of different sweeps.
std::string definition_hash(const SweepFlags& f, const Sweep& sweep) {
  std::uint64_t h = 14695981039346656037ull;  // FNV-1a, 64 bits
  auto add = [&h](const std::string& text) {
    for (const char c : text) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    h = (h ^ 0xffu) * 1099511628211ull;  // a separator no text ends with
  };
  add("meshsim sweep 1");
  if (f.file.empty()) {
    add("<built-in default>");
  } else {
    std::ifstream in(f.file, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    add(bytes.str());
  }
  for (const auto& s : f.sets) add("--set " + s);
  add("--fidelity " + f.fidelity);
  add("--profile " + f.profile);
  if (!f.where.empty()) add("--where " + f.where);
  if (!f.global_batch.empty()) add("--global-batch " + f.global_batch);
  for (const Vary& v : sweep.varies()) {
    add("--vary " + v.path);
    for (const auto& x : v.values) add(x);
  }
  return fmt::format("{:016x}", h);
}

// The first line of a shard's --jsonl: all sweep-merge needs besides the rows.
nlohmann::ordered_json shard_header(const Shard& shard, const std::string& definition, const std::string& source,
                                    const Sweep& sweep) {
  nlohmann::ordered_json vary = nlohmann::ordered_json::array();
  for (const Vary& v : sweep.varies()) vary.push_back({{"path", v.path}, {"values", v.values}});
  nlohmann::ordered_json h;
  h["shard"] = shard.text();
  h["definition"] = definition;
  h["variants"] = sweep.size();
  h["rows"] = shard.count(sweep.size());
  h["scenario"] = source;
  h["vary"] = std::move(vary);
  return {{"meshsim_sweep_shard", std::move(h)}};
}

// The streamed files: rows arrive in any order from the workers and leave in order of their
// position in this run (the variant order; a shard's variants in theirs). A shard's files
// also carry each row's variant index (and the JSON lines the exact iteration time).
class OrderedFiles {
 public:
  // The CSV gains a column per --vary path of `sweep` (none without one).
  OrderedFiles(const std::string& csv, const std::string& jsonl, const Sweep* sweep = nullptr,
               const nlohmann::ordered_json* shard_header = nullptr)
      : shard_(shard_header != nullptr), csv_path_(csv), jsonl_path_(jsonl) {
    open(csv_, csv, "--csv");
    open(jsonl_, jsonl, "--jsonl");
    if (csv_) {
      csv_ << (shard_ ? "index," : "") << kCsvColumns;
      if (sweep != nullptr)
        for (const Vary& v : sweep->varies()) csv_ << "," << v.path;
      csv_ << "\n";
    }
    if (jsonl_ && shard_) jsonl_ << shard_header->dump() << "\n" << std::flush;
  }
  // `pos`: the row's position in this run, 0, 1, 2, ...
  void add(long pos, const Row& row) {
    if (!csv_.is_open() && !jsonl_.is_open()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.emplace(pos, &row);
    for (auto it = pending_.begin(); it != pending_.end() && it->first == next_; it = pending_.erase(it), ++next_) {
      const Row& r = *it->second;
      if (csv_.is_open()) csv_ << (shard_ ? std::to_string(r.index) + "," : "") << row_csv(r);
      if (jsonl_.is_open()) {
        if (shard_) {
          nlohmann::ordered_json j{{"index", r.index}};
          j.update(row_json(r));
          if (r.valid) j["iteration_ps"] = r.iteration.ps();
          jsonl_ << j.dump() << "\n";
        } else {
          jsonl_ << row_json(r).dump() << "\n";
        }
      }
    }
    if (pending_.empty()) {  // everything so far is on disk
      csv_.flush();
      jsonl_.flush();
    }
  }

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
  bool shard_;
  std::string csv_path_, jsonl_path_;
  std::ofstream csv_, jsonl_;
  std::mutex mutex_;
  std::map<long, const Row*> pending_;  // finished, waiting for an earlier variant
  long next_ = 0;
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

// This process's part of the MPI world (size 1, no plugin: not under a launcher).
struct Ranks {
  const MeshsimMpiPlugin* mpi = nullptr;
  int rank = 0, size = 1, local = 1;
};

// Under mpirun a rank that is stopped or hung leaves the others blocked in an MPI collective
// for ever. The ranks watch each other beside MPI: rank 0 serves a rendezvous store (its
// address and a fresh token handed out over MPI), every rank sends it a heartbeat from a thread
// of its own (MESHSIM_HEARTBEAT_INTERVAL, default 1 s), and when one falls silent for
// MESHSIM_HEARTBEAT_TIMEOUT (default 5 s; 0: no watch) the store fails the job naming it, every
// rank's heartbeat hears so, and each exits with status 2 (rank 0 says why, as does a rank that
// finds rank 0 itself silent); mpirun then ends the rest. Heartbeats run beside the
// simulations, so a long variant is not a silence.
class RankWatch {
 public:
  // Collective: every rank constructs it at the same point. Without a watch (timeout 0, or the
  // store could not start: said once, the sweep goes on unwatched) it does nothing.
  RankWatch(const Ranks& ranks, const launch::HeartbeatEnv& beat) {
    if (beat.heartbeat_timeout.count() == 0) return;
    std::string address;  // rank 0: "host port token", or "!" and why not
    if (ranks.rank == 0) {
      try {
        const bool one_node = ranks.local == ranks.size;
        const std::string token = launch::random_token();
        server_ = std::make_unique<launch::RendezvousServer>(
            launch::RendezvousServerOptions{.host = one_node ? "127.0.0.1" : "0.0.0.0",
                                            .token = token,
                                            .max_connections = 4 * ranks.size + 64,
                                            .world_size = ranks.size,
                                            .heartbeat_timeout = beat.heartbeat_timeout});
        address = fmt::format("{} {} {}", one_node ? std::string("127.0.0.1") : host_name(), server_->port(), token);
      } catch (const std::exception& e) {
        address = std::string("!") + e.what();
      }
    }
    const std::string got = ranks.mpi->all_gather(address)[0];
    if (got.starts_with("!")) {
      if (ranks.rank == 0)
        std::fprintf(stderr, "meshsim: warning: sweep: no watch on stopped ranks (%s)\n", got.c_str() + 1);
      return;
    }
    std::istringstream in(got);
    launch::RendezvousClientOptions o;
    in >> o.host >> o.port >> o.token;
    o.rank = ranks.rank;
    o.world_size = ranks.size;
    o.heartbeat_interval = beat.heartbeat_interval;
    o.heartbeat_timeout = beat.heartbeat_timeout;
    o.on_failure = [rank = ranks.rank](const std::string& why, bool verdict) {
      // The store's verdict reaches every rank; rank 0 says it once for all.
      if (rank == 0 || !verdict) std::fprintf(stderr, "meshsim: error: sweep: %s\n", why.c_str());
      std::fflush(stderr);
      std::_Exit(2);
    };
    client_ = std::make_unique<launch::RendezvousClient>(std::move(o));
  }
  // Every rank, after its last collective of the sweep and before MPI_Finalize: no longer
  // watched (the store expects its silence).
  void leave() {
    if (client_) client_->leave();
    client_.reset();
  }
  // Rank 0's store outlives MPI_Finalize, whose fence means every rank has left.

 private:
  static std::string host_name() {
    std::array<char, 256> name{};
    if (::gethostname(name.data(), name.size() - 1) != 0) return "127.0.0.1";
    return name.data();
  }
  std::unique_ptr<launch::RendezvousServer> server_;
  std::unique_ptr<launch::RendezvousClient> client_;
};

// The variants of this run: indices first + step * pos for pos in [0, count) (a shard's, or all).
struct Part {
  long first = 0, step = 1, count = 0;
  long index(long pos) const { return first + step * pos; }
};

// A row on the wire between ranks: its index and figures (rank 0 rebuilds the assignments from
// the index). Host byte order: every rank runs the same build.
template <class T>
void put(std::string& out, const T& x) {
  out.append(reinterpret_cast<const char*>(&x), sizeof x);
}
template <class T>
T take(const std::string& in, std::size_t& at) {
  T x{};
  if (at + sizeof x > in.size()) throw Error("sweep: a rank sent a truncated row; rebuild every rank from one tree");
  std::memcpy(&x, in.data() + at, sizeof x);
  at += sizeof x;
  return x;
}
void encode(std::string& out, const Row& r) {
  put<std::int64_t>(out, r.index);
  put<std::uint8_t>(out, r.valid ? 1 : 0);
  put<std::uint8_t>(out, r.fits ? 1 : 0);
  put<std::int32_t>(out, r.gpus);
  for (const int x : r.layout) put<std::int32_t>(out, x);
  put<std::int64_t>(out, r.global_batch);
  put<std::int64_t>(out, r.iteration.ps());
  put<double>(out, r.tokens_per_s);
  put<double>(out, r.mfu);
  put<double>(out, r.hfu);
  put<std::int64_t>(out, r.peak);
  put<std::uint64_t>(out, r.error.size());
  out += r.error;
}
Row decode(const std::string& in, std::size_t& at, const Sweep& sweep) {
  Row r;
  r.index = take<std::int64_t>(in, at);
  r.valid = take<std::uint8_t>(in, at) != 0;
  r.fits = take<std::uint8_t>(in, at) != 0;
  r.gpus = take<std::int32_t>(in, at);
  for (int& x : r.layout) x = take<std::int32_t>(in, at);
  r.global_batch = take<std::int64_t>(in, at);
  r.iteration = Time::from_ps(take<std::int64_t>(in, at));
  r.tokens_per_s = take<double>(in, at);
  r.mfu = take<double>(in, at);
  r.hfu = take<double>(in, at);
  r.peak = take<std::int64_t>(in, at);
  const auto n = take<std::uint64_t>(in, at);
  if (at + n > in.size()) throw Error("sweep: a rank sent a truncated row; rebuild every rank from one tree");
  r.error = in.substr(at, n);
  at += n;
  r.sets = sweep.sets(r.index);
  for (const auto& s : r.sets) r.label += (r.label.empty() ? "" : " ") + s;
  return r;
}

// Each rank takes this many positions per round; a round's rows meet on rank 0 before the next.
constexpr long kRoundPerRank = 4096;

// Simulates `part` (rows in position order). With several ranks, every rank simulates its
// share of each round and rank 0 gets the rows (the other ranks return nothing).
std::vector<Row> run_variants(const SweepFlags& f, const ScenarioNode& base, const Sweep& sweep, const Part& part,
                              const Ranks& ranks, OrderedFiles& files) {
  std::optional<tbb::global_control> limit;
  int jobs = f.jobs;
  if (jobs <= 0 && ranks.local > 1) {
    // Ranks sharing a node share its cores, unless the launcher already bound each to its own.
    cpu_set_t set;
    CPU_ZERO(&set);
    const int mine = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
    const int all = static_cast<int>(std::thread::hardware_concurrency());
    if (mine >= all) jobs = std::max(1, all / ranks.local);
  }
  if (jobs > 0) limit.emplace(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(jobs));
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  std::optional<WhereFilter> where;
  if (!f.where.empty()) where.emplace(f.where);
  tbb::enumerable_thread_specific<ClusterCache> clusters;  // topologies and routes, per worker
  std::vector<Row> rows(ranks.rank == 0 ? static_cast<std::size_t>(part.count) : 0);
  Progress progress(ranks.rank == 0 ? part.count : 0);
  if (ranks.mpi == nullptr) {
    tbb::parallel_for(0L, part.count, [&](long pos) {
      Row& row = rows[static_cast<std::size_t>(pos)];
      row = simulate_variant(base, sweep, part.index(pos), registry, clusters.local(), where ? &*where : nullptr);
      files.add(pos, row);
      progress.tick();
    });
    return rows;
  }
  const long round = kRoundPerRank * ranks.size;
  for (long begin = 0; begin < part.count; begin += round) {
    const long end = std::min(part.count, begin + round);
    // This rank's positions of the round: begin + rank, + size, ...
    const long first = begin + ranks.rank;
    const long mine = first < end ? (end - first + ranks.size - 1) / ranks.size : 0;
    std::vector<Row> local(static_cast<std::size_t>(mine));
    tbb::parallel_for(0L, mine, [&](long k) {
      local[static_cast<std::size_t>(k)] = simulate_variant(base, sweep, part.index(first + k * ranks.size), registry,
                                                            clusters.local(), where ? &*where : nullptr);
    });
    std::string bytes;
    for (const Row& r : local) encode(bytes, r);
    const std::vector<std::string> all = ranks.mpi->gather(bytes);
    for (std::size_t r = 0; r < all.size(); ++r) {
      std::size_t at = 0;
      for (long pos = begin + static_cast<long>(r); at < all[r].size(); pos += ranks.size)
        rows[static_cast<std::size_t>(pos)] = decode(all[r], at, sweep);
    }
    if (ranks.rank == 0) {
      for (long pos = begin; pos < end; ++pos) files.add(pos, rows[static_cast<std::size_t>(pos)]);
      progress.tick(end - begin);
    }
  }
  return rows;
}

// What a sweep ranks by (--rank-by): its name, how the summary shows the best value, and
// whether more is better.
// whether more is better; and how the report's plot shows it (axis title, unit, scale).
struct RankMetric {
  const char* name;
  bool higher_better;
  double (*of)(const Row&);
  std::string (*text)(double);
  const char* axis;
  const char* unit;  // HtmlReport::sweep_y_unit
  double scale;      // plotted = of(row) x scale
};
constexpr RankMetric kRankMetrics[] = {
    {"tokens_per_s", true, [](const Row& r) { return r.tokens_per_s; },
     [](double v) { return fmt::format("{:.0f} tokens/s", v); }, "tokens per second", "tokens/s", 1.0},
    {"iteration_s", false, [](const Row& r) { return r.iteration.seconds(); },
     [](double v) { return fmt::format("{:.6g} s per iteration", v); }, "time per iteration", "s", 1.0},
    {"mfu", true, [](const Row& r) { return r.mfu; }, [](double v) { return fmt::format("{:.1f}% MFU", 100 * v); },
     "MFU", "%", 100.0},
    {"memory", false, [](const Row& r) { return static_cast<double>(r.peak); },
     [](double v) { return fmt::format("{:.2f} GiB peak memory", v / (1 << 30)); }, "peak memory per GPU", "GiB",
     1.0 / (1 << 30)},
};

const RankMetric& rank_metric(const std::string& name) {
  std::vector<std::string> names;
  for (const RankMetric& m : kRankMetrics) {
    if (name == m.name) return m;
    names.emplace_back(m.name);
  }
  const std::string hint = did_you_mean(name, names);
  throw Error(fmt::format("--rank-by: '{}' is not a metric{}; use {}", name, hint.empty() ? "" : " (" + hint + ")",
                          fmt::join(names, ", ")));
}

// Best first: layouts that fit by the metric (by default throughput, tokens/s: variants may
// differ in global batch, so iteration time alone would mislead); then those that do not fit;
// then invalid ones.
std::vector<const Row*> ranked(const std::vector<Row>& rows, const RankMetric& metric) {
  std::vector<const Row*> order;
  for (const Row& r : rows) order.push_back(&r);
  auto key = [&metric](const Row* v) {
    const double value = v->valid ? metric.of(*v) : 0.0;
    return std::make_tuple(v->excluded() ? 3
                           : !v->valid   ? 2
                                         : (v->fits ? 0 : 1),
                           metric.higher_better ? -value : value, v->index);
  };
  std::stable_sort(order.begin(), order.end(), [&](const Row* a, const Row* b) { return key(a) < key(b); });
  return order;
}

std::vector<std::vector<std::string>> ranked_table(const std::vector<const Row*>& order) {
  std::vector<std::vector<std::string>> table{
      {"rank", "variant", "GPUs", "batch", "iteration", "tokens/s", "MFU", "peak mem", "fits"}};
  for (std::size_t k = 0; k < order.size(); ++k) {
    const Row& v = *order[k];
    if (v.excluded()) break;  // last in the order; counted in the summary, their rows in the files
    if (!v.valid) {
      table.push_back({std::to_string(k + 1), v.label, "-", "-", "-", "-", "-", "-", "invalid: " + v.error});
      continue;
    }
    table.push_back(
        {std::to_string(k + 1), v.label, std::to_string(v.gpus), std::to_string(v.global_batch),
         format_time(v.iteration), fmt::format("{:.0f}", v.tokens_per_s), fmt::format("{:.1f}%", 100 * v.mfu),
         fmt::format("{:.1f} GiB", static_cast<double>(v.peak) / (1 << 30)), v.fits ? "yes" : "NO (out of memory)"});
  }
  return table;
}

void print_text(const std::vector<std::vector<std::string>>& table) {
  std::vector<std::size_t> width(table.front().size(), 0);
  for (const auto& row : table)
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  for (const auto& row : table) {
    std::string line;
    for (std::size_t c = 0; c < row.size(); ++c)
      line += (c ? "  " : "") + (c + 1 == row.size() ? row[c] : fmt::format("{:<{}}", row[c], width[c]));
    std::cout << line << "\n";
  }
}

// "16 variants: 9 fit, 3 out of memory, 4 invalid; best: parallel.tp=4 parallel.pp=2 (20167 tokens/s)"
std::string summary(const std::vector<const Row*>& order, const RankMetric& metric) {
  long fit = 0, oom = 0, invalid = 0, excluded = 0;
  for (const Row* r : order) (r->excluded() ? excluded : !r->valid ? invalid : r->fits ? fit : oom)++;
  std::string best = "none fits";
  if (fit > 0) best = fmt::format("best: {} ({})", order.front()->label, metric.text(metric.of(*order.front())));
  return fmt::format("{} variants: {} fit, {} out of memory, {} invalid{}; {}\n", order.size(), fit, oom, invalid,
                     excluded > 0 ? fmt::format(", {} excluded by --where", excluded) : "", best);
}

// The scaling plot of the ranked metric: against the first --vary whose values are all
// numbers (one series per combination of the others); else against the GPU count, or the
// variant index when every variant has the same GPU count.
void add_plot(HtmlReport& h, const Sweep& sweep, const std::vector<Row>& rows, const RankMetric& metric) {
  h.sweep_y_label = metric.axis;
  h.sweep_y_unit = metric.unit;
  const auto& vs = sweep.varies();
  std::size_t axis = vs.size();
  for (std::size_t k = 0; k < vs.size() && axis == vs.size(); ++k)
    if (std::all_of(vs[k].values.begin(), vs[k].values.end(), [](const std::string& v) { return number(v); })) axis = k;
  std::vector<int> gpus;
  for (const Row& r : rows)
    if (r.valid) gpus.push_back(r.gpus);
  const bool same_gpus = std::adjacent_find(gpus.begin(), gpus.end(), std::not_equal_to<>()) == gpus.end();
  h.sweep_x_label = axis < vs.size() ? vs[axis].path : same_gpus ? "variant" : "GPUs";
  for (const Row& r : rows) {
    if (!r.valid) continue;
    std::string series;
    for (std::size_t k = 0; k < r.sets.size(); ++k)
      if (k != axis) series += (series.empty() ? "" : " ") + r.sets[k];
    double x = same_gpus ? static_cast<double>(r.index + 1) : r.gpus;
    if (axis < vs.size()) x = *number(r.sets[axis].substr(vs[axis].path.size() + 1));
    h.sweep.push_back({series.empty() ? metric.name : series, x, metric.of(r) * metric.scale, r.label, r.fits});
  }
}

// What closes a sweep (and a merge): the files named, the ranked table or --json, the report.
// `rows` in variant order; `jsonl_what` says what the --jsonl holds.
void finish(const OutputFlags& f, const std::string& source, const Sweep& sweep, const std::vector<Row>& rows,
            const std::string& jsonl_what) {
  if (!f.csv.empty()) say_wrote(f.csv, fmt::format("CSV, {} variants", rows.size()));
  if (!f.jsonl.empty()) say_wrote(f.jsonl, fmt::format("{}, {} variants", jsonl_what, rows.size()));
  const RankMetric& metric = rank_metric(f.rank_by);
  const std::vector<const Row*> order = ranked(rows, metric);
  const auto table = ranked_table(order);
  if (f.json) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (std::size_t k = 0; k < order.size(); ++k) {
      nlohmann::ordered_json j{{"rank", k + 1}};
      j.update(row_json(*order[k]));
      out.push_back(std::move(j));
    }
    std::cout << out.dump(2) << "\n";
  } else {
    print_text(table);
    std::cout << summary(order, metric);
  }
  std::cout << std::flush;
  if (!f.report.empty()) {
    HtmlReport h;
    h.title = "meshsim sweep: " + source;
    h.summary = {{"scenario", source}, {"variants", std::to_string(rows.size())}};
    h.table = table;
    add_plot(h, sweep, rows, metric);
    write_html_report(h, f.report);
    say_wrote(f.report, "HTML report");
  }
}

// The sweep in this process, one of `ranks`. Errors before the variants run (the same on
// every rank, or one rank's files) are agreed on first, so no rank waits for one that quit.
int run_sweep_ranks(const SweepFlags& f, const Ranks& ranks) {
  std::optional<ScenarioNode> base;
  std::optional<Sweep> sweep;
  Shard shard;
  std::optional<nlohmann::ordered_json> header;
  std::optional<OrderedFiles> files;
  launch::HeartbeatEnv beat;
  std::string error;
  try {
    if (ranks.mpi != nullptr) beat = launch::heartbeat_env();
    std::vector<Vary> vs;
    for (const auto& v : f.vary) {
      vs.push_back(parse_vary(v));
      for (std::size_t i = 0; i + 1 < vs.size(); ++i)
        if (vs[i].path == vs.back().path)
          throw Error(fmt::format("--vary {}: given twice; give all its values in one --vary {}=v1,v2,...",
                                  vs.back().path, vs.back().path));
    }
    if (vs.empty()) throw Error("--vary: a sweep needs at least one --vary path=v1,v2,...");
    shard = parse_shard(f.shard);
    if (shard.active && f.jsonl.empty())
      throw Error(
          fmt::format("--shard {}: a shard writes its rows for sweep-merge to --jsonl; add --jsonl "
                      "shard-{}.jsonl",
                      f.shard, shard.k));
    if (!f.where.empty()) (void)WhereFilter(f.where);  // a typo fails before anything runs
    (void)rank_metric(f.rank_by);
    base.emplace(f.node());
    if (!f.global_batch.empty()) {  // one batch for every layout: replaces the scenario's micro-batches
      base->unset("parallel.microbatches");
      base->set("parallel.global_batch=" + f.global_batch);
    }
    if (base->is_workload()) require_training(base->resolve(), "sweep");
    sweep.emplace(std::move(vs));
    if (shard.active) header = shard_header(shard, definition_hash(f, *sweep), base->source(), *sweep);
    if (ranks.rank == 0)
      files.emplace(f.csv, f.jsonl, &*sweep, header ? &*header : nullptr);
    else
      files.emplace("", "");
  } catch (const Error& e) {
    if (ranks.mpi == nullptr) throw;
    error = e.what();
  } catch (const std::exception& e) {
    if (ranks.mpi == nullptr) throw;
    error = std::string("internal error: ") + e.what() + " (please report this)";
  }
  if (ranks.mpi != nullptr) {
    const std::vector<std::string> errors = ranks.mpi->all_gather(error);
    for (std::size_t r = 0; r < errors.size(); ++r) {
      if (errors[r].empty()) continue;
      // Rank 0 says it before MPI_Finalize, whose fence keeps the others from exiting first
      // (the launcher would kill rank 0 before it printed).
      if (ranks.rank == 0)
        std::fprintf(stderr, "meshsim: error: %s\n",
                     (r == 0 ? errors[r] : fmt::format("rank {}: {}", r, errors[r])).c_str());
      ranks.mpi->finalize();
      return 2;
    }
  } else if (!error.empty()) {
    throw Error(error);
  }
  const Part part{shard.k, shard.n, shard.count(sweep->size())};
  std::vector<Row> rows;
  std::optional<RankWatch> watch;
  try {
    if (ranks.mpi != nullptr) watch.emplace(ranks, beat);
    rows = run_variants(f, *base, *sweep, part, ranks, *files);
    if (watch) watch->leave();
  } catch (const std::exception& e) {
    if (ranks.mpi == nullptr) throw;
    // One rank cannot go on: end them all rather than leave the others waiting.
    std::fprintf(stderr, "meshsim: error: rank %d: %s\n", ranks.rank, e.what());
    ranks.mpi->abort(3);
  }
  if (ranks.mpi != nullptr) ranks.mpi->finalize();
  watch.reset();
  if (ranks.rank != 0) return 0;
  if (files) files->close();  // closed (and checked) before they are named
  files.reset();
  finish(f, base->source(), *sweep, rows, shard.active ? "JSON lines, shard " + shard.text() : "JSON lines");
  return 0;
}

// Under a launcher: load the MPI plugin and join the world; else the single-process sweep.
int run_sweep(const SweepFlags& f) {
  start_budget(f.max_seconds, f.max_memory);
  const mpi::Launcher launcher = mpi::launcher_env();
  if (!launcher.active) return run_sweep_ranks(f, Ranks{});
  Ranks ranks;
  try {
    ranks.mpi = &mpi::mpi_plugin();
  } catch (const Error&) {
    if (launcher.rank == 0) throw;
    // Every rank fails alike; rank 0 says it. The others wait a moment, so the launcher does
    // not kill rank 0 (on their exit code) before it has.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    return 2;
  }
  if (const std::string e = ranks.mpi->init(&ranks.rank, &ranks.size, &ranks.local); !e.empty()) {
    if (launcher.rank != 0) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      return 2;
    }
    throw Error(fmt::format("sweep: MPI ({}): {}; check that mpirun and libmeshsim_mpi.so come from the same MPI",
                            ranks.mpi->library(), e));
  }
  return run_sweep_ranks(f, ranks);
}

// --- sweep-merge ---------------------------------------------------------------------------

struct MergeFlags : OutputFlags {
  std::vector<std::string> shards;
};

// One shard file as read: its header and rows.
struct ShardFile {
  std::string path;
  Shard shard;
  std::string definition;
  long variants = 0, rows = 0;
  std::string source;
  nlohmann::json vary;
};

Row parse_row(const nlohmann::json& j, const Sweep& sweep) {
  Row r;
  r.index = j.at("index").get<long>();
  r.sets = sweep.sets(r.index);
  for (const auto& s : r.sets) r.label += (r.label.empty() ? "" : " ") + s;
  if (j.contains("error")) {
    r.error = j.at("error").get<std::string>();
    return r;
  }
  r.valid = true;
  r.gpus = j.at("gpus").get<int>();
  if (j.contains("layout"))  // shards written before the layout columns have none
    for (std::size_t k = 0; k < kLayoutNames.size(); ++k) r.layout[k] = j.at("layout").value(kLayoutNames[k], 0);
  r.global_batch = j.value("global_batch", std::int64_t{0});
  r.iteration = Time::from_ps(j.at("iteration_ps").get<std::int64_t>());
  r.tokens_per_s = j.at("tokens_per_s").get<double>();
  r.mfu = j.at("mfu").get<double>();
  r.hfu = j.at("hfu").get<double>();
  r.peak = j.at("peak_bytes").get<Bytes>();
  r.fits = j.at("fits").get<bool>();
  return r;
}

int run_merge(const MergeFlags& f) {
  (void)rank_metric(f.rank_by);  // a typo fails before the files are read
  const std::string fix = "write each shard with meshsim sweep ... --shard K/N --jsonl FILE";
  std::vector<ShardFile> files;
  std::vector<std::ifstream> streams;
  for (const std::string& path : f.shards) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(fmt::format("sweep-merge: cannot read '{}'; check the path", path));
    std::string line;
    ShardFile s{path, {}, {}, 0, 0, {}, {}};
    try {
      if (!std::getline(in, line)) throw std::runtime_error("empty file");
      const nlohmann::json h = nlohmann::json::parse(line).at("meshsim_sweep_shard");
      s.shard = parse_shard(h.at("shard").get<std::string>());
      s.definition = h.at("definition").get<std::string>();
      s.variants = h.at("variants").get<long>();
      s.rows = h.at("rows").get<long>();
      s.source = h.at("scenario").get<std::string>();
      s.vary = h.at("vary");
    } catch (const std::exception&) {
      throw Error(
          fmt::format("sweep-merge: '{}' is not a sweep shard (its first line is no meshsim_sweep_shard "
                      "header); {}",
                      path, fix));
    }
    files.push_back(std::move(s));
    streams.push_back(std::move(in));
  }
  const ShardFile& first = files.front();
  std::map<long, const ShardFile*> seen;
  for (const ShardFile& s : files) {
    if (s.definition != first.definition || s.variants != first.variants)
      throw Error(
          fmt::format("sweep-merge: '{}' and '{}' are shards of different sweeps (definitions {} and {}); "
                      "merge shards of one sweep, run with the same scenario, --set, --fidelity and --vary",
                      first.path, s.path, first.definition, s.definition));
    if (s.shard.n != first.shard.n)
      throw Error(
          fmt::format("sweep-merge: '{}' is shard {} but '{}' is shard {}; merge the shards of one --shard "
                      "K/N split",
                      first.path, first.shard.text(), s.path, s.shard.text()));
    if (const auto [it, fresh] = seen.emplace(s.shard.k, &s); !fresh)
      throw Error(fmt::format("sweep-merge: '{}' and '{}' are both shard {}; pass each shard once", it->second->path,
                              s.path, s.shard.text()));
  }
  std::string missing;
  for (long k = 0; k < first.shard.n; ++k)
    if (seen.find(k) == seen.end()) missing += fmt::format("{}{}/{}", missing.empty() ? "" : ", ", k, first.shard.n);
  if (!missing.empty())
    throw Error(
        fmt::format("sweep-merge: shard{} {} {} missing; pass all {} shards (run meshsim sweep ... --shard "
                    "K/{} --jsonl FILE for each missing K)",
                    missing.find(',') == std::string::npos ? "" : "s", missing,
                    missing.find(',') == std::string::npos ? "is" : "are", first.shard.n, first.shard.n));
  std::vector<Vary> vs;
  for (const auto& v : first.vary)
    vs.push_back({v.at("path").get<std::string>(), v.at("values").get<std::vector<std::string>>()});
  const Sweep sweep(std::move(vs));
  if (sweep.size() != first.variants)
    throw Error(fmt::format("sweep-merge: '{}' has a damaged header ({} variants but its --vary lists make {}); {}",
                            first.path, first.variants, sweep.size(), fix));
  std::vector<Row> rows(static_cast<std::size_t>(sweep.size()));
  std::vector<char> have(rows.size(), 0);
  for (std::size_t n = 0; n < files.size(); ++n) {
    const ShardFile& s = files[n];
    std::string line;
    long count = 0, lineno = 1;
    while (std::getline(streams[n], line)) {
      ++lineno;
      if (line.empty()) continue;
      Row r;
      try {
        r = parse_row(nlohmann::json::parse(line), sweep);
      } catch (const std::exception&) {
        throw Error(
            fmt::format("sweep-merge: '{}' line {} is not a shard row (cut short or edited?); rerun "
                        "meshsim sweep ... --shard {}",
                        s.path, lineno, s.shard.text()));
      }
      if (r.index < 0 || r.index >= sweep.size() || r.index % s.shard.n != s.shard.k || have[r.index])
        throw Error(
            fmt::format("sweep-merge: '{}' line {} has variant {}, which is not one of shard {}'s or comes "
                        "twice; rerun meshsim sweep ... --shard {}",
                        s.path, lineno, r.index, s.shard.text(), s.shard.text()));
      have[r.index] = 1;
      rows[static_cast<std::size_t>(r.index)] = std::move(r);
      ++count;
    }
    if (count != s.rows)
      throw Error(
          fmt::format("sweep-merge: '{}' has {} of the {} rows of shard {} (the run was cut short?); rerun "
                      "meshsim sweep ... --shard {}",
                      s.path, count, s.rows, s.shard.text(), s.shard.text()));
  }
  {
    OrderedFiles out(f.csv, f.jsonl, &sweep);
    for (std::size_t i = 0; i < rows.size(); ++i) out.add(static_cast<long>(i), rows[i]);
    out.close();
  }
  finish(f, first.source, sweep, rows, "JSON lines");
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
