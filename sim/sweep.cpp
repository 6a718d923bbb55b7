// The sweep engine: see sweep.h.
#include "sim/sweep.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "core/budget.h"
#include "core/error.h"
#include "core/flag.h"
#include "core/suggest.h"

namespace meshsim::sweep {
namespace {

std::string join_sets(const std::vector<std::string>& sets) {
  std::string label;
  for (const auto& s : sets) label += (label.empty() ? "" : " ") + s;
  return label;
}

// The row's peak, the peak stage's memory by kind and the critical stage's breakdown.
void fill_breakdown(Row& row, const TrainingResult& r) {
  const StageMemory* top = nullptr;
  for (const StageMemory& st : r.stages)
    if (top == nullptr || st.peak > top->peak) top = &st;
  if (top != nullptr) {
    row.peak = top->peak;
    const std::map<std::string, Bytes> by = top->other_by_category();
    for (std::size_t k = 0; k + 1 < kMemoryNames.size(); ++k) {
      const auto it = by.find(kMemoryNames[k]);
      row.memory[k] = it == by.end() ? 0 : it->second;
    }
    row.memory.back() = top->activation_peak;
  }
  const Breakdown& b = r.sim.breakdown;
  row.breakdown_s = {b.compute.seconds(), b.recompute.seconds(), b.optimizer.seconds(), b.bubble.seconds()};
  for (std::size_t k = 4; k < kBreakdownNames.size(); ++k) {
    const auto it = b.exposed.find(kBreakdownNames[k]);
    row.breakdown_s[k] = it == b.exposed.end() ? 0.0 : it->second.seconds();
  }
}

Row simulate_variant(const ScenarioNode& base, const Sweep& sweep, long i, const AlgorithmRegistry& registry,
                     ClusterCache& clusters, const RunOptions& o) {
  Row row;
  row.index = i;
  row.sets = sweep.sets(i);
  row.label = join_sets(row.sets);
  try {
    ScenarioNode node = base;
    for (const auto& s : row.sets) node.set(s);
    const Scenario scenario = node.resolve();
    if (o.where != nullptr && !o.where->accepts(scenario)) {
      row.error = std::string(Row::kExcludedPrefix) + "'" + o.where->text() + "'";
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
    row.fits = r.fits;
    fill_breakdown(row, r);
    if (o.detail) row.detail = o.detail(r);
  } catch (const BudgetError&) {
    throw;  // the whole sweep stops, not this variant
  } catch (const Error& e) {
    row.error = e.what();
  }
  return row;
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

constexpr const char* kCsvColumns =
    "variant,gpus,iteration_s,tokens_per_s,mfu,hfu,peak_bytes,fits,error,dp,tp,pp,cp,ep,global_batch";

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

// A shard's row (a line of its JSON lines) as merge reads it back.
Row parse_row(const nlohmann::json& j, const Sweep& sweep) {
  Row r;
  r.index = j.at("index").get<long>();
  if (r.index < 0 || r.index >= sweep.size()) return r;  // not one of the sweep's: the caller says so
  r.sets = sweep.sets(r.index);
  r.label = join_sets(r.sets);
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
  // Shards written before these columns have none: zeros, as the rows of any invalid variant.
  const nlohmann::json none = nlohmann::json::object();
  const nlohmann::json& breakdown = j.contains("breakdown_s") ? j.at("breakdown_s") : none;
  const nlohmann::json& memory = j.contains("memory_bytes") ? j.at("memory_bytes") : none;
  for (std::size_t k = 0; k < kBreakdownNames.size(); ++k) r.breakdown_s[k] = breakdown.value(kBreakdownNames[k], 0.0);
  for (std::size_t k = 0; k < kMemoryNames.size(); ++k) r.memory[k] = memory.value(kMemoryNames[k], Bytes{0});
  return r;
}

// One shard as read: its header (the rows follow in `in`).
struct ShardFile {
  std::string path;
  std::istream* in = nullptr;
  Shard shard;
  std::string definition;
  long variants = 0, rows = 0;
  std::string source;
  nlohmann::json vary;
};

constexpr const char* kMergeFix = "write each shard with meshsim sweep ... --shard K/N --jsonl FILE";

ShardFile read_header(const ShardInput& input) {
  ShardFile s;
  s.path = input.path;
  s.in = input.in;
  try {
    std::string line;
    if (!std::getline(*s.in, line)) throw std::runtime_error("empty file");
    const nlohmann::json h = nlohmann::json::parse(line).at("meshsim_sweep_shard");
    s.shard = parse_shard(h.at("shard").get<std::string>());
    s.definition = h.at("definition").get<std::string>();
    s.variants = h.at("variants").get<long>();
    s.rows = h.at("rows").get<long>();
    s.source = h.at("scenario").get<std::string>();
    s.vary = h.at("vary");
  } catch (const std::exception&) {
    throw Error(
        fmt::format("sweep-merge: '{}' is not a sweep shard (its first line is no meshsim_sweep_shard header); {}",
                    s.path, kMergeFix));
  }
  return s;
}

// The shards belong together: one definition, one N, each a part of `whole`, every K once.
void check_shards(const std::vector<ShardFile>& files, const Shard& whole) {
  const ShardFile& first = files.front();
  std::map<long, const ShardFile*> seen;
  for (const ShardFile& s : files) {
    if (s.definition != first.definition || s.variants != first.variants)
      throw Error(
          fmt::format("sweep-merge: '{}' and '{}' are shards of different sweeps (definitions {} and {}); "
                      "merge shards of one sweep, run with the same scenario, --set, --fidelity and --vary",
                      first.path, s.path, first.definition, s.definition));
    if (s.shard.n != first.shard.n || s.shard.n % whole.n != 0 || s.shard.k % whole.n != whole.k)
      throw Error(
          fmt::format("sweep-merge: '{}' is shard {} but '{}' is shard {}; merge the shards of one --shard "
                      "K/N split",
                      first.path, first.shard.text(), s.path, s.shard.text()));
    if (const auto [it, fresh] = seen.emplace(s.shard.k, &s); !fresh)
      throw Error(fmt::format("sweep-merge: '{}' and '{}' are both shard {}; pass each shard once", it->second->path,
                              s.path, s.shard.text()));
  }
  std::string missing;
  const long n = first.shard.n;
  for (long k = whole.k; k < n; k += whole.n)
    if (seen.find(k) == seen.end()) missing += fmt::format("{}{}/{}", missing.empty() ? "" : ", ", k, n);
  if (missing.empty()) return;
  const bool one = missing.find(',') == std::string::npos;
  throw Error(
      fmt::format("sweep-merge: shard{} {} {} missing; pass all {} shards (run meshsim sweep ... --shard "
                  "K/{} --jsonl FILE for each missing K)",
                  one ? "" : "s", missing, one ? "is" : "are", n, n));
}

// Reads one shard's rows into `rows` (positions of `whole`); `have` marks the variants read.
void read_rows(const ShardFile& s, const Sweep& sweep, const Shard& whole, std::vector<Row>& rows,
               std::vector<char>& have) {
  std::string line;
  long count = 0, lineno = 1;
  while (std::getline(*s.in, line)) {
    ++lineno;
    if (line.empty()) continue;
    Row r;
    try {
      r = parse_row(nlohmann::json::parse(line), sweep);
    } catch (const std::exception&) {
      throw Error(
          fmt::format("sweep-merge: '{}' line {} is not a shard row (cut short or edited?); rerun meshsim sweep ... "
                      "--shard {}",
                      s.path, lineno, s.shard.text()));
    }
    if (r.index < 0 || r.index >= sweep.size() || r.index % s.shard.n != s.shard.k ||
        have[static_cast<std::size_t>(r.index)])
      throw Error(
          fmt::format("sweep-merge: '{}' line {} has variant {}, which is not one of shard {}'s or comes twice; "
                      "rerun meshsim sweep ... --shard {}",
                      s.path, lineno, r.index, s.shard.text(), s.shard.text()));
    have[static_cast<std::size_t>(r.index)] = 1;
    rows[static_cast<std::size_t>((r.index - whole.k) / whole.n)] = std::move(r);
    ++count;
  }
  if (count != s.rows)
    throw Error(
        fmt::format("sweep-merge: '{}' has {} of the {} rows of shard {} (the run was cut short?); rerun meshsim "
                    "sweep ... --shard {}",
                    s.path, count, s.rows, s.shard.text(), s.shard.text()));
}

}  // namespace

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

std::vector<Vary> parse_varies(const std::vector<std::string>& texts) {
  std::vector<Vary> vs;
  for (const auto& text : texts) {
    vs.push_back(parse_vary(text));
    for (std::size_t i = 0; i + 1 < vs.size(); ++i)
      if (vs[i].path == vs.back().path)
        throw Error(fmt::format("--vary {}: given twice; give all its values in one --vary {}=v1,v2,...",
                                vs.back().path, vs.back().path));
  }
  if (vs.empty()) throw Error("--vary: a sweep needs at least one --vary path=v1,v2,...");
  return vs;
}

Sweep::Sweep(std::vector<Vary> vs) : vs_(std::move(vs)) {
  double count = 1;
  std::string shape;
  for (const Vary& v : vs_) {
    count *= static_cast<double>(v.values.size());
    shape += fmt::format("{}{}", shape.empty() ? "" : " x ", v.values.size());
  }
  if (count > static_cast<double>(kMaxVariants))
    throw Error(
        fmt::format("{}: {} = {:.0f} variants exceed meshsim's limit of {} per sweep; vary fewer values "
                    "or split the sweep into several runs",
                    flag("vary"), shape, count, kMaxVariants));
  size_ = static_cast<long>(count);
}

std::vector<std::size_t> Sweep::choices(long i) const {
  std::vector<std::size_t> out(vs_.size());
  for (std::size_t k = vs_.size(); k-- > 0;) {
    const auto n = static_cast<long>(vs_[k].values.size());
    out[k] = static_cast<std::size_t>(i % n);
    i /= n;
  }
  return out;
}

std::vector<std::string> Sweep::sets(long i) const {
  const std::vector<std::size_t> c = choices(i);
  std::vector<std::string> out(vs_.size());
  for (std::size_t k = 0; k < vs_.size(); ++k) out[k] = vs_[k].path + "=" + vs_[k].values[c[k]];
  return out;
}

std::string Shard::text() const { return fmt::format("{}/{}", k, n); }

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

std::vector<Row> run(const ScenarioNode& base, const Sweep& sweep, const Shard& shard, const RunOptions& options) {
  std::optional<tbb::global_control> limit;
  if (options.jobs > 0)
    limit.emplace(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(options.jobs));
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  tbb::enumerable_thread_specific<ClusterCache> clusters;  // topologies and routes, per worker
  const long count = shard.count(sweep.size());
  std::vector<Row> rows(static_cast<std::size_t>(count));
  tbb::parallel_for(0L, count, [&](long pos) {
    Row& row = rows[static_cast<std::size_t>(pos)];
    row = simulate_variant(base, sweep, shard.index(pos), registry, clusters.local(), options);
    if (options.on_row) options.on_row(pos, row);
  });
  return rows;
}

const RankMetric& rank_metric(const std::string& name) {
  std::vector<std::string> names;
  for (const RankMetric& m : kRankMetrics) {
    if (name == m.name) return m;
    names.emplace_back(m.name);
  }
  const std::string hint = did_you_mean(name, names);
  // Python's keyword is rank_by (core/flag.h spells the others alike in both front ends).
  const std::string field = spelling() == Spelling::Python ? "rank_by" : flag("rank-by");
  throw Error(fmt::format("{}: '{}' is not a metric{}; use {}", field, name, hint.empty() ? "" : " (" + hint + ")",
                          fmt::join(names, ", ")));
}

// By default throughput, tokens/s: variants may differ in global batch, so iteration time alone
// would mislead.
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

std::optional<double> number(const std::string& s) {
  double x = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return x;
}

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
  for (std::size_t k = 0; k < kBreakdownNames.size(); ++k) j["breakdown_s"][kBreakdownNames[k]] = v.breakdown_s[k];
  for (std::size_t k = 0; k < kMemoryNames.size(); ++k) j["memory_bytes"][kMemoryNames[k]] = v.memory[k];
  return j;
}

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
  if (!v.valid)
    return fmt::format("{},,,,,,,,{},,,,,,{}{}\n", label, err, values,
                       std::string(kBreakdownNames.size() + kMemoryNames.size(), ','));
  std::string tail;  // the breakdown and memory columns, after the --vary ones
  for (const double x : v.breakdown_s) tail += fmt::format(",{:.9g}", x);
  for (const Bytes b : v.memory) tail += fmt::format(",{}", b);
  return fmt::format("{},{},{:.9g},{:.6g},{:.6g},{:.6g},{},{},,{},{}{}{}\n", label, v.gpus, v.iteration.seconds(),
                     v.tokens_per_s, v.mfu, v.hfu, v.peak, v.fits ? "yes" : "no", fmt::join(v.layout, ","),
                     v.global_batch, values, tail);
}

std::string csv_header(const Sweep& sweep, bool shard) {
  std::string out = std::string(shard ? "index," : "") + kCsvColumns;
  for (const Vary& v : sweep.varies()) out += "," + v.path;
  for (const char* b : kBreakdownNames) out += fmt::format(",{}_s", b);
  for (const char* m : kMemoryNames) out += fmt::format(",{}_bytes", m);
  return out + "\n";
}

// The scenario file's bytes, --set, --fidelity, --profile, --where, --global-batch and the
// --vary lists, FNV-1a over 64 bits.
std::string definition_hash(const Definition& d, const Sweep& sweep) {
  std::uint64_t h = 14695981039346656037ull;
  auto add = [&h](const std::string& text) {
    for (const char c : text) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    h = (h ^ 0xffu) * 1099511628211ull;  // a separator no text ends with
  };
  add("meshsim sweep 1");
  if (d.file.empty()) {
    add("<built-in default>");
  } else {
    std::ifstream in(d.file, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    add(bytes.str());
  }
  for (const auto& s : d.sets) add("--set " + s);
  add("--fidelity " + d.fidelity);
  add("--profile " + d.profile);
  if (!d.where.empty()) add("--where " + d.where);
  if (!d.global_batch.empty()) add("--global-batch " + d.global_batch);
  for (const Vary& v : sweep.varies()) {
    add("--vary " + v.path);
    for (const auto& x : v.values) add(x);
  }
  return fmt::format("{:016x}", h);
}

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

RowWriter::RowWriter(std::ostream* csv, std::ostream* jsonl, const Sweep& sweep,
                     const nlohmann::ordered_json* shard_header)
    : shard_(shard_header != nullptr), csv_(csv), jsonl_(jsonl) {
  if (csv_ != nullptr) *csv_ << csv_header(sweep, shard_);
  if (jsonl_ != nullptr && shard_) *jsonl_ << shard_header->dump() << "\n" << std::flush;
}

void RowWriter::add(long pos, const Row& row) {
  if (csv_ == nullptr && jsonl_ == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.emplace(pos, &row);
  for (auto it = pending_.begin(); it != pending_.end() && it->first == next_; it = pending_.erase(it), ++next_) {
    const Row& r = *it->second;
    if (csv_ != nullptr) *csv_ << (shard_ ? std::to_string(r.index) + "," : "") << row_csv(r);
    if (jsonl_ == nullptr) continue;
    if (shard_) {
      nlohmann::ordered_json j{{"index", r.index}};
      j.update(row_json(r));
      if (r.valid) j["iteration_ps"] = r.iteration.ps();
      *jsonl_ << j.dump() << "\n";
    } else {
      *jsonl_ << row_json(r).dump() << "\n";
    }
  }
  if (pending_.empty()) {  // everything so far is written
    if (csv_ != nullptr) csv_->flush();
    if (jsonl_ != nullptr) jsonl_->flush();
  }
}

void RowWriter::add_all(const std::vector<Row>& rows) {
  for (std::size_t pos = 0; pos < rows.size(); ++pos) add(static_cast<long>(pos), rows[pos]);
}

Merged merge(const std::vector<ShardInput>& shards, const Shard& whole) {
  std::vector<ShardFile> files;
  for (const ShardInput& in : shards) files.push_back(read_header(in));
  if (files.empty()) throw Error(fmt::format("sweep-merge: no shards to merge; {}", kMergeFix));
  check_shards(files, whole);
  const ShardFile& first = files.front();
  std::vector<Vary> vs;
  for (const auto& v : first.vary)
    vs.push_back({v.at("path").get<std::string>(), v.at("values").get<std::vector<std::string>>()});
  Merged out{Sweep(std::move(vs)), first.source, {}};
  if (out.sweep.size() != first.variants)
    throw Error(fmt::format("sweep-merge: '{}' has a damaged header ({} variants but its --vary lists make {}); {}",
                            first.path, first.variants, out.sweep.size(), kMergeFix));
  out.rows.resize(static_cast<std::size_t>(whole.count(out.sweep.size())));
  std::vector<char> have(static_cast<std::size_t>(out.sweep.size()), 0);
  for (const ShardFile& s : files) read_rows(s, out.sweep, whole, out.rows, have);
  return out;
}

}  // namespace meshsim::sweep
