// meshsim simulate [SCENARIO.yaml] [--set path=value ...] [--fidelity formula|flow|nccl] [--profile FILE]
//   [--trace FILE] [--json] [--report FILE.html]
// meshsim memory SCENARIO.yaml [--set path=value ...] [--json]
// meshsim sweep SCENARIO.yaml --vary path=v1,v2 ... [--set ...] [--jobs N] [--csv FILE] [--report FILE.html] [--json]
#include <fmt/format.h>
#include <tbb/enumerable_thread_specific.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <optional>

#include "cli/commands.h"
#include "core/error.h"
#include "report/html_report.h"
#include "report/training_report.h"
#include "sim/scenario.h"
#include "sim/training_sim.h"

namespace meshsim::cli {

namespace {

void write_file(const std::string& path, const std::string& text, const char* flag) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error(fmt::format("{}: cannot write '{}'; check the directory exists and is writable", flag, path));
  out << text;
}

struct ScenarioFlags {
  std::string file;
  std::vector<std::string> sets;
  std::string fidelity, profile;
  void add(CLI::App* c, bool required) {
    auto* f = c->add_option("scenario", file, "scenario YAML (see docs/scenarios.md)");
    if (required) f->required();
    c->add_option("--set", sets, "override a field: path=value (e.g. parallel.tp=4), repeatable");
  }
  ScenarioNode node() const {
    ScenarioNode n = file.empty() ? ScenarioNode::builtin_default() : ScenarioNode::load(file);
    for (const auto& s : sets) n.set(s);
    if (!fidelity.empty()) {
      parse_fidelity(fidelity, "--fidelity");  // a typo is the flag's error, not run.fidelity's
      n.set("run.fidelity=" + fidelity);
    }
    if (!profile.empty()) n.set("run.profile=" + profile);
    return n;
  }
};

struct SimulateFlags : ScenarioFlags {
  std::string trace, report;
  bool json = false;
};

int run_simulate(const SimulateFlags& f) {
  const Scenario s = require_training(f.node().resolve(), "simulate");
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  // The per-op schedule is kept when a trace or report needs it; otherwise formula runs take
  // the fast path (same figures).
  const TrainingResult r = simulate_training(s, registry, !f.trace.empty() || !f.report.empty());
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
  return 0;
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

// --- sweep ---

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
  std::string csv, report;
  bool json = false;
};

// The most variants one sweep runs (each is held in memory until the ranked table is printed).
constexpr int kMaxSweepVariants = 1 << 20;

struct Variant {
  std::vector<std::string> sets;  // the --vary assignments
  std::string label;
  std::optional<TrainingResult> result;
  std::string error;
};

int run_sweep(const SweepFlags& f) {
  std::vector<Vary> vs;
  for (const auto& v : f.vary) vs.push_back(parse_vary(v));
  if (vs.empty()) throw Error("--vary: a sweep needs at least one --vary path=v1,v2,...");
  const ScenarioNode base = f.node();
  if (base.is_workload()) require_training(base.resolve(), "sweep");
  // The cross product is held in memory: count it before building it.
  double count = 1;
  std::string shape;
  for (const Vary& v : vs) {
    count *= static_cast<double>(v.values.size());
    shape += fmt::format("{}{}", shape.empty() ? "" : " x ", v.values.size());
  }
  if (count > kMaxSweepVariants)
    throw Error(
        fmt::format("--vary: {} = {:.0f} variants exceed meshsim's limit of {} per sweep; vary fewer values "
                    "or split the sweep into several runs",
                    shape, count, kMaxSweepVariants));
  std::vector<Variant> variants(1);
  for (const Vary& v : vs) {
    std::vector<Variant> next;
    for (const Variant& prev : variants)
      for (const auto& value : v.values) {
        Variant x = prev;
        x.sets.push_back(v.path + "=" + value);
        x.label += (x.label.empty() ? "" : " ") + x.sets.back();
        next.push_back(std::move(x));
      }
    variants = std::move(next);
  }
  std::optional<tbb::global_control> limit;
  if (f.jobs > 0) limit.emplace(tbb::global_control::max_allowed_parallelism, static_cast<std::size_t>(f.jobs));
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  const bool tty = isatty(STDERR_FILENO) != 0;
  std::atomic<int> done{0};
  std::mutex progress;
  tbb::enumerable_thread_specific<ClusterCache> clusters;  // topologies and routes, per worker
  const int n = static_cast<int>(variants.size());
  tbb::parallel_for(0, n, [&](int i) {
    Variant& v = variants[static_cast<std::size_t>(i)];
    try {
      ScenarioNode node = base;
      for (const auto& s : v.sets) node.set(s);
      v.result = simulate_training(node.resolve(), registry, /*keep_ops=*/false, &clusters.local());
    } catch (const Error& e) {
      v.error = e.what();
    }
    const int d = ++done;
    if (tty) {
      std::lock_guard<std::mutex> lock(progress);
      const int width = 30, filled = d * width / n;
      std::cerr << "\r[" << std::string(static_cast<std::size_t>(filled), '#')
                << std::string(static_cast<std::size_t>(width - filled), ' ') << "] " << d << "/" << n << std::flush;
      if (d == n) std::cerr << "\n";
    }
  });

  // Ranked: layouts that fit first, by throughput (tokens/s: variants may differ in global
  // batch, so iteration time alone would mislead); then those that do not fit; then invalid ones.
  std::vector<int> order(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  auto key = [&](int i) {
    const Variant& v = variants[static_cast<std::size_t>(i)];
    const int cls = !v.result ? 2 : (v.result->fits ? 0 : 1);
    return std::make_tuple(cls, v.result ? -v.result->tokens_per_s : 0.0, i);
  };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key(a) < key(b); });

  std::vector<std::vector<std::string>> table{
      {"rank", "variant", "GPUs", "iteration", "tokens/s", "MFU", "peak mem", "fits"}};
  for (std::size_t k = 0; k < order.size(); ++k) {
    const Variant& v = variants[static_cast<std::size_t>(order[k])];
    if (!v.result) {
      table.push_back({std::to_string(k + 1), v.label, "-", "-", "-", "-", "-", "invalid: " + v.error});
      continue;
    }
    const TrainingResult& r = *v.result;
    Bytes peak = 0;
    for (const auto& st : r.stages) peak = std::max(peak, st.peak);
    table.push_back(
        {std::to_string(k + 1), v.label, std::to_string(r.scenario.parallel.world_size()), format_time(r.sim.iteration),
         fmt::format("{:.0f}", r.tokens_per_s), fmt::format("{:.1f}%", 100 * r.mfu),
         fmt::format("{:.1f} GiB", static_cast<double>(peak) / (1 << 30)), r.fits ? "yes" : "NO (out of memory)"});
  }
  if (f.json) {
    // The ranked table with full-precision numbers: one object per variant, best first.
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (std::size_t k = 0; k < order.size(); ++k) {
      const Variant& v = variants[static_cast<std::size_t>(order[k])];
      nlohmann::ordered_json j;
      j["rank"] = k + 1;
      j["variant"] = v.label;
      j["set"] = v.sets;
      if (v.result) {
        const TrainingResult& r = *v.result;
        Bytes peak = 0;
        for (const auto& st : r.stages) peak = std::max(peak, st.peak);
        j["gpus"] = r.scenario.parallel.world_size();
        j["iteration_s"] = r.sim.iteration.seconds();
        j["tokens_per_s"] = r.tokens_per_s;
        j["mfu"] = r.mfu;
        j["hfu"] = r.hfu;
        j["peak_bytes"] = peak;
        j["fits"] = r.fits;
      } else {
        j["error"] = v.error;
      }
      out.push_back(std::move(j));
    }
    std::cout << out.dump(2) << "\n";
  } else {
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
  if (!f.csv.empty()) {
    std::string csv = "variant,gpus,iteration_s,tokens_per_s,mfu,hfu,peak_bytes,fits,error\n";
    for (const Variant& v : variants) {
      std::string label = v.label;
      std::replace(label.begin(), label.end(), ',', ';');
      std::string err = v.error;
      std::replace(err.begin(), err.end(), ',', ';');
      if (!v.result) {
        csv += fmt::format("{},,,,,,,,{}\n", label, err);
        continue;
      }
      Bytes peak = 0;
      for (const auto& st : v.result->stages) peak = std::max(peak, st.peak);
      csv += fmt::format("{},{},{:.9g},{:.6g},{:.6g},{:.6g},{},{},\n", label, v.result->scenario.parallel.world_size(),
                         v.result->sim.iteration.seconds(), v.result->tokens_per_s, v.result->mfu, v.result->hfu, peak,
                         v.result->fits ? "yes" : "no");
    }
    write_file(f.csv, csv, "--csv");
    say_wrote(f.csv, fmt::format("CSV, {} variants", n));
  }
  if (!f.report.empty()) {
    HtmlReport h;
    h.title = "meshsim sweep: " + base.source();
    h.summary = {{"scenario", base.source()}, {"variants", std::to_string(n)}};
    h.table = table;
    // Scaling plot: time against GPU count, one series per value of the last --vary
    // (or against the variant index when every variant has the same GPU count).
    std::vector<int> sizes;
    for (const Variant& v : variants)
      if (v.result) sizes.push_back(v.result->scenario.parallel.world_size());
    const bool same_gpus = std::adjacent_find(sizes.begin(), sizes.end(), std::not_equal_to<>()) == sizes.end();
    h.sweep_x_label = same_gpus ? "variant" : "GPUs";
    for (int i = 0; i < n; ++i) {
      const Variant& v = variants[static_cast<std::size_t>(i)];
      if (!v.result) continue;
      const double x = same_gpus ? i + 1 : v.result->scenario.parallel.world_size();
      h.sweep.push_back(
          {vs.size() > 1 ? v.sets.back() : "time", x, v.result->sim.iteration.seconds(), v.label, v.result->fits});
    }
    write_html_report(h, f.report);
    say_wrote(f.report, "HTML report");
  }
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
      "  meshsim simulate examples/scenarios/gpt3-175b-1024xh100.yaml --fidelity flow\n"
      "  meshsim simulate --set parallel.tp=4 --set parallel.dp=4 --json\n"
      "  meshsim simulate examples/scenarios/llama3-70b-128k.yaml --report llama.html --trace llama.json");
  f->add(c, false);
  c->add_option(
      "--fidelity", f->fidelity,
      "formula (closed forms), flow (contention on routed links) or nccl (NCCL's tuning model for its collectives)");
  c->add_option("--profile", f->profile, "machine profile YAML (from meshsim calibrate)");
  c->add_option("--trace", f->trace, "write a Perfetto/Chrome trace (one process per stage, a track per stream)");
  c->add_flag("--json", f->json, "print the result as JSON");
  c->add_option("--report", f->report, "write a self-contained HTML report");
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

Run add_sweep_command(CLI::App& app) {
  auto f = std::make_shared<SweepFlags>();
  CLI::App* c = app.add_subcommand("sweep", "simulate every combination of --vary values, ranked");
  c->footer(
      "Examples:\n"
      "  meshsim sweep examples/scenarios/recompute-modes.yaml --vary parallel.recompute=none,selective,full --csv "
      "m.csv\n"
      "  meshsim sweep examples/scenarios/summa-vs-megatron.yaml --vary placement=natural,bunched:2x2 \\\n"
      "      --vary parallel.micro_batch_size=8,16,24 --report sweep.html\n"
      "  meshsim sweep s.yaml --vary parallel.tp=1,2,4,8 --json");
  f->add(c, true);
  c->add_option("--vary", f->vary, "path=v1,v2,... (use | between values that contain commas), repeatable")->required();
  c->add_option("--fidelity", f->fidelity, "formula, flow or nccl for every variant");
  c->add_option("--jobs", f->jobs, "parallel workers (default: all cores)");
  c->add_option("--csv", f->csv, "write every variant as CSV");
  c->add_option("--report", f->report, "write a self-contained HTML report with the scaling plot");
  c->add_flag("--json", f->json, "print the ranked variants as JSON (full precision; invalid ones with their error)");
  return [f] { return run_sweep(*f); };
}

}  // namespace meshsim::cli
