// Simulator speed: ring all-reduce of 1 GiB at flow fidelity on a two-level fat-tree, and
// issue 39's collectives at scale (the default algorithm, 1 GiB). Figures are recorded in
// docs/performance.md. Run: build/bench/collective_bench
//   --benchmark_filter=Ring/1024    (the 16384-rank cases take tens of seconds)
//   --benchmark_filter=Scale        (issue 39's: all-reduce at flow on 16,384 DGX H100 GPUs,
//                                    at formula on 131,072; all-to-all at flow on 256 and
//                                    1024 ranks of a fat-tree, 1024 DGX H100 GPUs (PXN))
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <numeric>

#include "sim/collective_sim.h"
#include "topology/presets.h"

namespace {

using namespace meshsim;

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is KiB on Linux
}

void RingAllReduceFatTree(benchmark::State& state) {
  const int ranks = static_cast<int>(state.range(0));
  const Topology topo =
      make_preset("fat-tree", {{"nodes", std::to_string(ranks / 8)}, {"gpus_per_node", "8"}, {"levels", "2"}});
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  std::vector<int> gpus(ranks);
  std::iota(gpus.begin(), gpus.end(), 0);
  CollectiveRequest req;
  req.kind = CollKind::AllReduce;
  req.bytes = GiB(1);
  req.algorithm = "ring";
  req.groups = {gpus};
  std::uint64_t messages = 0, events = 0;
  double sim_ms = 0;
  for (auto _ : state) {
    Router router(topo);
    const CollectiveOutcome out = run_collective(topo, router, registry, req);
    messages = out.flow->messages;
    events = out.flow->events;
    sim_ms = out.time.seconds() * 1e3;
  }
  state.counters["messages"] = static_cast<double>(messages);
  state.counters["events"] = static_cast<double>(events);
  state.counters["simulated_ms"] = sim_ms;
  state.counters["peak_rss_MB"] = peak_rss_mb();
  state.counters["msgs_per_s"] =
      benchmark::Counter(static_cast<double>(messages), benchmark::Counter::kIsIterationInvariantRate);
}

// One collective of 1 GiB over every GPU of `topology` with `auto`, at `fidelity`.
void Scale(benchmark::State& state, const char* topology, CollKind kind, Fidelity fidelity) {
  const Topology topo = resolve_topology(topology);
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  std::vector<int> gpus(static_cast<std::size_t>(topo.num_gpus()));
  std::iota(gpus.begin(), gpus.end(), 0);
  CollectiveRequest req;
  req.kind = kind;
  req.bytes = GiB(1);
  req.fidelity = fidelity;
  req.groups = {gpus};
  double sim_ms = 0;
  std::uint64_t events = 0, skipped = 0;
  for (auto _ : state) {
    Router router(topo);
    const CollectiveOutcome out = run_collective(topo, router, registry, req);
    sim_ms = out.time.seconds() * 1e3;
    events = out.flow ? out.flow->events : 0;
    skipped = out.flow ? out.flow->skipped_steps : 0;
  }
  state.counters["simulated_ms"] = sim_ms;
  state.counters["events"] = static_cast<double>(events);
  state.counters["skipped_steps"] = static_cast<double>(skipped);
  state.counters["peak_rss_MB"] = peak_rss_mb();
}
BENCHMARK_CAPTURE(Scale, AllReduceFlow / dgx - h100 / 16384, "dgx-h100:nodes=2048", CollKind::AllReduce, Fidelity::Flow)
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(Scale, AllReduceFormula / fat - tree / 131072, "fat-tree:nodes=16384", CollKind::AllReduce,
                  Fidelity::Formula)
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(Scale, AllToAllFlow / fat - tree / 256, "fat-tree:nodes=32", CollKind::AllToAll, Fidelity::Flow)
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(Scale, AllToAllFlow / fat - tree / 1024, "fat-tree:nodes=128", CollKind::AllToAll, Fidelity::Flow)
    ->Unit(benchmark::kSecond)
    ->Iterations(1);
BENCHMARK_CAPTURE(Scale, AllToAllFlow / dgx - h100 / 1024, "dgx-h100:nodes=128", CollKind::AllToAll, Fidelity::Flow)
    ->Unit(benchmark::kSecond)
    ->Iterations(1);

BENCHMARK(RingAllReduceFatTree)->Name("Ring/1024")->Arg(1024)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(RingAllReduceFatTree)->Name("Ring/16384")->Arg(16384)->Unit(benchmark::kSecond)->Iterations(1);

}  // namespace

BENCHMARK_MAIN();
