// meshsim sweep SCENARIO.yaml --vary path=v1,v2 ... [--set ...] [--jobs N] [--csv FILE] [--jsonl FILE]
//   [--report FILE.html] [--json]
//
// Every combination of the --vary values is one variant: the scenario with those --set
// assignments, simulated on oneTBB workers. A variant is made from its index when a worker
// takes it (the last --vary changes fastest) and shrinks to one Row as soon as it is
// simulated, so memory grows by a row per variant, whatever the scenario. --csv and --jsonl
// stream the rows in variant order while the sweep runs (a row waits only for the variants
// before it), so a long sweep leaves its results on disk as it goes and the files have the
// same bytes for any --jobs. The ranked table (layouts that fit, by tokens/s; then those
// that do not fit; then invalid ones) and a summary line close the run.
#include <fmt/format.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>

#include "cli/commands.h"
#include "cli/scenario_flags.h"
#include "core/error.h"
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

struct SweepFlags : ScenarioFlags {
  std::vector<std::string> vary;
  int jobs = 0;
  std::string csv, jsonl, report;
  bool json = false;
};

// The most variants one sweep runs (a row of each is kept for the ranked table).
constexpr long kMaxSweepVariants = 1 << 20;

// What a variant leaves behind once simulated: its figures, or why it is invalid.
struct Row {
  long index = 0;
  std::vector<std::string> sets;  // the --vary assignments, path=value
  std::string label;              // the sets joined by spaces
  bool valid = false;
  std::string error;
  int gpus = 0;
  Time iteration;
  double tokens_per_s = 0, mfu = 0, hfu = 0;
  Bytes peak = 0;
  bool fits = false;
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
                     ClusterCache& clusters) {
  Row row;
  row.index = i;
  row.sets = sweep.sets(i);
  for (const auto& s : row.sets) row.label += (row.label.empty() ? "" : " ") + s;
  try {
    ScenarioNode node = base;
    for (const auto& s : row.sets) node.set(s);
    const TrainingResult r = simulate_training(node.resolve(), registry, /*keep_ops=*/false, &clusters);
    row.valid = true;
    row.gpus = r.scenario.parallel.world_size();
    row.iteration = r.sim.iteration;
    row.tokens_per_s = r.tokens_per_s;
    row.mfu = r.mfu;
    row.hfu = r.hfu;
    for (const auto& st : r.stages) row.peak = std::max(row.peak, st.peak);
    row.fits = r.fits;
  } catch (const Error& e) {
    row.error = e.what();
  }
  return row;
}

// A variant as JSON (the objects of --json and the lines of --jsonl; --json adds "rank").
nlohmann::ordered_json row_json(const Row& v) {
  nlohmann::ordered_json j;
  j["variant"] = v.label;
  j["set"] = v.sets;
  if (!v.valid) {
    j["error"] = v.error;
    return j;
  }
  j["gpus"] = v.gpus;
  j["iteration_s"] = v.iteration.seconds();
  j["tokens_per_s"] = v.tokens_per_s;
  j["mfu"] = v.mfu;
  j["hfu"] = v.hfu;
  j["peak_bytes"] = v.peak;
  j["fits"] = v.fits;
  return j;
}

std::string row_csv(const Row& v) {
  std::string label = v.label, err = v.error;
  std::replace(label.begin(), label.end(), ',', ';');
  std::replace(err.begin(), err.end(), ',', ';');
  if (!v.valid) return fmt::format("{},,,,,,,,{}\n", label, err);
  return fmt::format("{},{},{:.9g},{:.6g},{:.6g},{:.6g},{},{},\n", label, v.gpus, v.iteration.seconds(), v.tokens_per_s,
                     v.mfu, v.hfu, v.peak, v.fits ? "yes" : "no");
}

// The streamed files: rows arrive in any order from the workers and leave in variant order.
class OrderedFiles {
 public:
  OrderedFiles(const std::string& csv, const std::string& jsonl) {
    open(csv_, csv, "--csv");
    open(jsonl_, jsonl, "--jsonl");
    if (csv_) csv_ << "variant,gpus,iteration_s,tokens_per_s,mfu,hfu,peak_bytes,fits,error\n";
  }
  void add(const Row& row) {
    if (!csv_.is_open() && !jsonl_.is_open()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    pending_.emplace(row.index, &row);
    for (auto it = pending_.begin(); it != pending_.end() && it->first == next_; it = pending_.erase(it), ++next_) {
      if (csv_.is_open()) csv_ << row_csv(*it->second);
      if (jsonl_.is_open()) jsonl_ << row_json(*it->second).dump() << "\n";
    }
    if (pending_.empty()) {  // everything so far is on disk
      csv_.flush();
      jsonl_.flush();
    }
  }

 private:
  static void open(std::ofstream& out, const std::string& path, const char* flag) {
    if (path.empty()) return;
    out.open(path, std::ios::binary);
    if (!out) throw Error(fmt::format("{}: cannot write '{}'; check the directory exists and is writable", flag, path));
  }
  std::ofstream csv_, jsonl_;
  std::mutex mutex_;
  std::map<long, const Row*> pending_;  // finished, waiting for an earlier variant
  long next_ = 0;
};

// The progress line on a terminal: done/total, rate and the time left at that rate.
class Progress {
 public:
  explicit Progress(long total) : total_(total), tty_(isatty(STDERR_FILENO) != 0) {}
  void tick() {
    const long d = ++done_;
    if (!tty_) return;
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

std::vector<Row> run_variants(const SweepFlags& f, const ScenarioNode& base, const Sweep& sweep) {
  std::optional<tbb::global_control> limit;
  if (f.jobs > 0) limit.emplace(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(f.jobs));
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  tbb::enumerable_thread_specific<ClusterCache> clusters;  // topologies and routes, per worker
  std::vector<Row> rows(static_cast<std::size_t>(sweep.size()));
  OrderedFiles files(f.csv, f.jsonl);
  Progress progress(sweep.size());
  tbb::parallel_for(0L, sweep.size(), [&](long i) {
    Row& row = rows[static_cast<std::size_t>(i)];
    row = simulate_variant(base, sweep, i, registry, clusters.local());
    files.add(row);
    progress.tick();
  });
  return rows;
}

// Best first: layouts that fit by throughput (tokens/s: variants may differ in global batch,
// so iteration time alone would mislead); then those that do not fit; then invalid ones.
std::vector<const Row*> ranked(const std::vector<Row>& rows) {
  std::vector<const Row*> order;
  for (const Row& r : rows) order.push_back(&r);
  auto key = [](const Row* v) {
    return std::make_tuple(!v->valid ? 2 : (v->fits ? 0 : 1), v->valid ? -v->tokens_per_s : 0.0, v->index);
  };
  std::stable_sort(order.begin(), order.end(), [&](const Row* a, const Row* b) { return key(a) < key(b); });
  return order;
}

std::vector<std::vector<std::string>> ranked_table(const std::vector<const Row*>& order) {
  std::vector<std::vector<std::string>> table{
      {"rank", "variant", "GPUs", "iteration", "tokens/s", "MFU", "peak mem", "fits"}};
  for (std::size_t k = 0; k < order.size(); ++k) {
    const Row& v = *order[k];
    if (!v.valid) {
      table.push_back({std::to_string(k + 1), v.label, "-", "-", "-", "-", "-", "invalid: " + v.error});
      continue;
    }
    table.push_back({std::to_string(k + 1), v.label, std::to_string(v.gpus), format_time(v.iteration),
                     fmt::format("{:.0f}", v.tokens_per_s), fmt::format("{:.1f}%", 100 * v.mfu),
                     fmt::format("{:.1f} GiB", static_cast<double>(v.peak) / (1 << 30)),
                     v.fits ? "yes" : "NO (out of memory)"});
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
std::string summary(const std::vector<const Row*>& order) {
  long fit = 0, oom = 0, invalid = 0;
  for (const Row* r : order) (!r->valid ? invalid : r->fits ? fit : oom)++;
  std::string best = "none fits";
  if (fit > 0) best = fmt::format("best: {} ({:.0f} tokens/s)", order.front()->label, order.front()->tokens_per_s);
  return fmt::format("{} variants: {} fit, {} out of memory, {} invalid; {}\n", order.size(), fit, oom, invalid, best);
}

std::optional<double> number(const std::string& s) {
  double x = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return x;
}

// The scaling plot: against the first --vary whose values are all numbers (one series per
// combination of the others); else against the GPU count, or the variant index when every
// variant has the same GPU count.
void add_plot(HtmlReport& h, const Sweep& sweep, const std::vector<Row>& rows) {
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
    h.sweep.push_back({series.empty() ? "time" : series, x, r.iteration.seconds(), r.label, r.fits});
  }
}

int run_sweep(const SweepFlags& f) {
  std::vector<Vary> vs;
  for (const auto& v : f.vary) vs.push_back(parse_vary(v));
  if (vs.empty()) throw Error("--vary: a sweep needs at least one --vary path=v1,v2,...");
  const ScenarioNode base = f.node();
  if (base.is_workload()) require_training(base.resolve(), "sweep");
  const Sweep sweep(std::move(vs));
  const std::vector<Row> rows = run_variants(f, base, sweep);
  if (!f.csv.empty()) say_wrote(f.csv, fmt::format("CSV, {} variants", sweep.size()));
  if (!f.jsonl.empty()) say_wrote(f.jsonl, fmt::format("JSON lines, {} variants", sweep.size()));
  const std::vector<const Row*> order = ranked(rows);
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
    std::cout << summary(order);
  }
  if (!f.report.empty()) {
    HtmlReport h;
    h.title = "meshsim sweep: " + base.source();
    h.summary = {{"scenario", base.source()}, {"variants", std::to_string(sweep.size())}};
    h.table = table;
    add_plot(h, sweep, rows);
    write_html_report(h, f.report);
    say_wrote(f.report, "HTML report");
  }
  return 0;
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
      "  meshsim sweep s.yaml --vary parallel.tp=1,2,4,8 --vary parallel.pp=1,2,4 --jsonl rows.jsonl --json");
  f->add(c, true);
  c->add_option("--vary", f->vary, "path=v1,v2,... (use | between values that contain commas), repeatable")->required();
  c->add_option("--fidelity", f->fidelity, "formula, flow or nccl for every variant");
  c->add_option("--jobs", f->jobs, "parallel workers (default: all cores)");
  c->add_option("--csv", f->csv, "write every variant as CSV, in variant order, while the sweep runs");
  c->add_option("--jsonl", f->jsonl, "write every variant as a JSON line, in variant order, while the sweep runs");
  c->add_option("--report", f->report, "write a self-contained HTML report with the scaling plot");
  c->add_flag("--json", f->json, "print the ranked variants as JSON (full precision; invalid ones with their error)");
  return [f] { return run_sweep(*f); };
}

}  // namespace meshsim::cli
