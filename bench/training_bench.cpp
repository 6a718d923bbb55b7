// Simulator speed on training iterations (figures in docs/performance.md):
//   Plan/...        plan_iteration alone (the schedule IR)
//   Formula/...     formula fidelity, fast path (what a sweep runs per layout)
//   FormulaInSweep/ the same with the cluster and its routes reused across runs, as a sweep does
//   FormulaOps/...  formula fidelity, every op planned and simulated
//   Flow/...        the same at flow fidelity (contention on the routed topology)
// Layout: GPT-3 175B, TP 8 (SP), PP 8 interleaved v=2, 64 micro-batches, DP = GPUs / 64,
// on DGX H100 nodes. Run: build/bench/training_bench --benchmark_filter=Formula
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include "sim/scenario.h"
#include "sim/training_sim.h"

namespace {

using namespace meshsim;

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;
}

Scenario gpt3(int gpus, const char* fidelity, int microbatches, int vchunks) {
  ScenarioNode n = ScenarioNode::builtin_default();
  n.set("parallel.tp=8");
  n.set("parallel.pp=8");
  n.set("parallel.vchunks=" + std::to_string(vchunks));
  n.set("parallel.dp=" + std::to_string(gpus / 64));
  n.set("parallel.microbatches=" + std::to_string(microbatches));
  n.set("topology=dgx-h100:nodes=" + std::to_string(gpus / 8));
  n.set(std::string("run.fidelity=") + fidelity);
  return n.resolve();
}

void Plan(benchmark::State& state) {
  const Scenario s = gpt3(1024, "formula", static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  std::size_t ops = 0;
  for (auto _ : state) {
    const Schedule sch = plan_iteration(s.model, s.parallel);
    ops = 0;
    for (const Role& r : sch.roles) ops += r.ops.size();
    benchmark::DoNotOptimize(ops);
  }
  state.counters["ops"] = static_cast<double>(ops);
}
BENCHMARK(Plan)->Args({64, 2})->Args({16, 1})->Unit(benchmark::kMillisecond);

void Simulate(benchmark::State& state, const char* fidelity, bool keep_ops, bool warm = false) {
  const Scenario s = gpt3(static_cast<int>(state.range(0)), fidelity, static_cast<int>(state.range(1)),
                          static_cast<int>(state.range(2)));
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  double iteration = 0;
  ClusterCache clusters;  // warm: the cluster and its routes are reused, as in a sweep
  for (auto _ : state) {
    const TrainingResult r = simulate_training(s, registry, keep_ops, warm ? &clusters : nullptr);
    iteration = r.sim.iteration.seconds();
  }
  state.counters["iteration_s"] = iteration;
  state.counters["peak_rss_MB"] = peak_rss_mb();
}
// Formula: the fast path (what sweeps and `simulate` without --trace/--report run);
// FormulaOps: every op planned and simulated (what --trace and --report need).
void Formula(benchmark::State& state) { Simulate(state, "formula", false); }
void FormulaInSweep(benchmark::State& state) { Simulate(state, "formula", false, true); }
void FormulaOps(benchmark::State& state) { Simulate(state, "formula", true); }
void Flow(benchmark::State& state) { Simulate(state, "flow", true); }
BENCHMARK(Formula)->Args({1024, 64, 2})->Args({1024, 16, 1})->Unit(benchmark::kMillisecond);
// Issue 39's cluster: 102,400 GPUs (12,800 DGX H100 nodes), at formula and at flow.
BENCHMARK(Formula)->Args({102400, 64, 2})->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(FormulaInSweep)->Args({1024, 64, 2})->Args({1024, 16, 1})->Unit(benchmark::kMillisecond);
BENCHMARK(FormulaOps)->Args({1024, 64, 2})->Args({1024, 16, 1})->Unit(benchmark::kMillisecond);
BENCHMARK(Flow)
    ->Args({1024, 64, 2})
    ->Args({16384, 64, 2})
    ->Args({102400, 64, 2})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
