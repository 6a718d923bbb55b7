// The sweep engine: what `meshsim sweep`, `meshsim sweep-merge` and Python's meshsim.sweep()
// share. Every combination of the --vary values is one variant: the base scenario with those
// --set assignments. A variant is made from its index when a oneTBB worker takes it (the last
// --vary changes fastest) and shrinks to one Row as soon as it is simulated, so memory grows by
// a row per variant, whatever the scenario.
//
//   sweep::Sweep s(sweep::parse_varies({"parallel.tp=1,2,4", "parallel.pp=1,2"}));  // 6 variants
//   sweep::RunOptions o;
//   o.jobs = 4;
//   std::vector<sweep::Row> rows = sweep::run(base, s, sweep::Shard{}, o);  // in variant order
//   for (const sweep::Row* r : sweep::ranked(rows, sweep::rank_metric("tokens_per_s"))) ...
//
// Ranking: the layouts that fit by the metric (by default tokens/s), then those that do not fit,
// then invalid variants, then those --where excluded; ties keep the variant order.
//
// Beyond one process: a Shard K/N runs the variants whose index i has i % N == K. Its JSON lines
// start with a header (shard_header: the shard, a hash of the sweep's definition, the --vary
// lists) and each row carries its index; merge() reads shards back, checks they belong together
// (one definition, every K once, every row there) and returns the rows the whole run has. The
// rows' encodings (row_json, row_csv) are the command's output formats, byte for byte.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <istream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "core/units.h"
#include "sim/scenario.h"
#include "sim/sweep_where.h"
#include "sim/training_sim.h"

namespace meshsim::sweep {

// One --vary: a scenario path and the values it takes.
struct Vary {
  std::string path;
  std::vector<std::string> values;
};

// "path=v1,v2,..." (values that contain commas separated by '|'); throws Error naming --vary.
Vary parse_vary(const std::string& text);
// Every --vary of a command, checked: at least one, and no path given twice.
std::vector<Vary> parse_varies(const std::vector<std::string>& texts);

// The most variants one sweep runs (a row of each is kept for the ranked table).
constexpr long kMaxVariants = 1 << 20;

// The variant list: variant i is i in mixed radix, the last --vary the fastest digit.
class Sweep {
 public:
  // Throws Error naming --vary past kMaxVariants. No vary at all is one variant, the base.
  explicit Sweep(std::vector<Vary> vs);
  long size() const { return size_; }
  const std::vector<Vary>& varies() const { return vs_; }
  // Variant i's value of each --vary, as an index into its values.
  std::vector<std::size_t> choices(long i) const;
  // Variant i's assignments, path=value, in --vary order.
  std::vector<std::string> sets(long i) const;

 private:
  std::vector<Vary> vs_;
  long size_ = 0;
};

// The layout columns of a row, in Row::layout's order.
constexpr std::array<const char*, 5> kLayoutNames = {"dp", "tp", "pp", "cp", "ep"};
// Where a row's iteration went (the critical stage's breakdown, seconds): compute, recompute,
// optimizer, pipeline bubble, then the communication the compute stream waited for by
// dimension (Breakdown::exposed's keys). CSV columns and JSON keys "<name>_s".
constexpr std::array<const char*, 10> kBreakdownNames = {"compute", "recompute", "optimizer", "bubble", "tp",
                                                         "cp",      "ep",        "pp",        "dp",     "2d"};
// The memory of the stage with the peak, by kind (bytes): CSV columns and JSON keys "<name>_bytes".
constexpr std::array<const char*, 4> kMemoryNames = {"weights", "gradients", "optimizer", "activations"};

// What a variant leaves behind once simulated: its figures, or why it is invalid.
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
  std::array<double, kBreakdownNames.size()> breakdown_s{};  // kBreakdownNames order
  std::array<Bytes, kMemoryNames.size()> memory{};           // kMemoryNames order, the peak stage
  std::string detail;  // what RunOptions::detail made of the simulation (empty without one)
  // Left out by --where (its error says so; the prefix survives every row format).
  bool excluded() const { return !valid && error.rfind(kExcludedPrefix, 0) == 0; }
  static constexpr const char* kExcludedPrefix = "excluded by --where ";
};

// --shard K/N: K counts from 0 to N-1 (like Slurm's --array=0-(N-1) task ids). The default,
// 0/1, is the whole sweep.
struct Shard {
  long k = 0, n = 1;
  bool active = false;  // given on the command line
  std::string text() const;
  // How many of `size` variants this shard has (i % n == k).
  long count(long size) const { return k < size ? (size - k + n - 1) / n : 0; }
  // The variant index of the shard's pos-th variant.
  long index(long pos) const { return k + n * pos; }
};
// "" is the whole sweep; else K/N, checked (Error naming --shard and the fix).
Shard parse_shard(const std::string& text);

struct RunOptions {
  int jobs = 0;                        // oneTBB workers (0: all cores)
  const WhereFilter* where = nullptr;  // variants it rejects are rows excluded before they run
  // Called from the workers as each row is done, in any order, with its position in the run
  // (0, 1, ... in the shard's variant order); rows stay where they are until run returns.
  std::function<void(long pos, const Row& row)> on_row;
  // When set, each valid row's `detail` is what it makes of the variant's simulation.
  std::function<std::string(const TrainingResult&)> detail;
};

// Simulates the shard's variants of `base` (every one for the default Shard); the rows in
// position order. A BudgetError stops the whole run; any other Error is that variant's row.
std::vector<Row> run(const ScenarioNode& base, const Sweep& sweep, const Shard& shard, const RunOptions& options);

// What a sweep ranks by (--rank-by): its name, whether more is better, how the summary shows
// the best value, and how the report's plot shows it (axis title, unit, scale).
struct RankMetric {
  const char* name;
  bool higher_better;
  double (*of)(const Row&);
  std::string (*text)(double);
  const char* axis;
  const char* unit;  // HtmlReport::sweep_y_unit
  double scale;      // plotted = of(row) x scale
};
// The metric called `name`; throws Error naming --rank-by and the metrics.
const RankMetric& rank_metric(const std::string& name);
// Best first (see the top of this file).
std::vector<const Row*> ranked(const std::vector<Row>& rows, const RankMetric& metric);
// `s` as a number, when all of it reads as one (a --vary value; the plot's axis).
std::optional<double> number(const std::string& s);

// A variant as JSON (the objects of --json and the lines of --jsonl; --json adds "rank").
nlohmann::ordered_json row_json(const Row& row);
// A CSV line: the fixed columns of csv_header, then one per --vary path, its value.
std::string row_csv(const Row& row);
// The CSV's first line: a shard's starts with "index,"; a column per --vary path of `sweep`.
std::string csv_header(const Sweep& sweep, bool shard);

// What decides a sweep's variant list and each variant's result, for definition_hash.
struct Definition {
  std::string file;               // the scenario file, whose bytes count ("": the built-in default)
  std::vector<std::string> sets;  // --set
  std::string fidelity, profile, where, global_batch;
};
// A hash of the definition (16 hex digits), so that merge refuses shards of different sweeps.
std::string definition_hash(const Definition& d, const Sweep& sweep);
// The first line of a shard's JSON lines: all merge needs besides the rows.
nlohmann::ordered_json shard_header(const Shard& shard, const std::string& definition, const std::string& source,
                                    const Sweep& sweep);

// Writes rows that arrive in any order (from the workers) in order of their position, to a
// CSV and/or JSON lines stream (either may be null). With a shard header, the files are a
// shard's: the header line first, each row with its variant index (and the exact iteration
// time in the JSON lines). Thread-safe; flushes whenever every row so far is written.
class RowWriter {
 public:
  RowWriter(std::ostream* csv, std::ostream* jsonl, const Sweep& sweep,
            const nlohmann::ordered_json* shard_header = nullptr);
  void add(long pos, const Row& row);          // `pos`: the row's position in the run, 0, 1, 2, ...
  void add_all(const std::vector<Row>& rows);  // rows[pos] at pos, for each

 private:
  bool shard_;
  std::ostream *csv_, *jsonl_;
  std::mutex mutex_;
  std::map<long, const Row*> pending_;  // finished, waiting for an earlier position
  long next_ = 0;
};

// One shard's JSON lines to merge: a name for messages (its path) and the text.
struct ShardInput {
  std::string path;
  std::istream* in;
};
// What merge returns: the sweep the shards ran, its scenario's name and the rows.
struct Merged {
  Sweep sweep{{}};
  std::string source;
  std::vector<Row> rows;  // in position order of `whole`
};
// Reads the shards and checks they split `whole` (the default: the entire sweep; a shard K/M
// when each input is one of its parts) once each: one definition, one N, every K there, every
// row there. Throws Error naming the file, the line and the fix.
Merged merge(const std::vector<ShardInput>& shards, const Shard& whole = Shard{});

}  // namespace meshsim::sweep
