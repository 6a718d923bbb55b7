// The Python module's native part, `meshsim._meshsim` (python/meshsim/__init__.py is the API
// users call; docs/python.md). Each function takes what the CLI command of the same name
// takes, runs the same library code, and returns the command's --json output as a string,
// which the Python side turns into dicts and lists. A meshsim::Error becomes the Python
// exception meshsim.MeshsimError carrying the same one-line message.
#include <fmt/format.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cctype>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/flag.h"
#include "core/units.h"
#include "report/collective_report.h"
#include "report/moe_report.h"
#include "report/training_report.h"
#include "sim/collective_job.h"
#include "sim/collective_sim.h"
#include "sim/scenario.h"
#include "sim/sweep.h"
#include "sim/training_sim.h"
#include "topology/placement.h"
#include "topology/presets.h"

namespace py = pybind11;

namespace meshsim::python {
namespace {

// A scenario from a file, from YAML text (a dict arrives as JSON, which is YAML), or the
// built-in default, with the overrides applied in order (each "path=value", as --set).
ScenarioNode load_node(const std::string& path, const std::string& text, const std::vector<std::string>& sets,
                       const std::string& fidelity) {
  ScenarioNode n = !text.empty()   ? ScenarioNode::parse(text, "<dict>")
                   : !path.empty() ? ScenarioNode::load(path)
                                   : ScenarioNode::builtin_default();
  for (const std::string& s : sets) n.set(s);
  if (!fidelity.empty()) {
    parse_fidelity(fidelity, "fidelity");  // a typo is the argument's error, not run.fidelity's
    n.set("run.fidelity=" + fidelity);
  }
  return n;
}

Scenario load_scenario(const std::string& path, const std::string& text, const std::vector<std::string>& sets,
                       const std::string& fidelity, const std::string& command) {
  return require_training(load_node(path, text, sets, fidelity).resolve(), command);
}

// links: add "links", every link's load over the iteration (flow fidelity; simulate --links);
// collectives: add "collectives", the per-collective table (simulate --collectives FILE.json).
std::string simulate(const std::string& path, const std::string& text, const std::vector<std::string>& sets,
                     const std::string& fidelity, bool links, bool collectives) {
  const Scenario resolved = load_node(path, text, sets, fidelity).resolve();
  if (!resolved.jobs.empty()) {  // several jobs on one fabric: simulate --json's jobs object
    if (links || collectives)
      throw Error(fmt::format("{}: describes one job; a scenario with jobs: returns each job's figures",
                              links ? "links" : "collectives"));
    return jobs_json(simulate_jobs(resolved, AlgorithmRegistry::builtin())).dump();
  }
  const Scenario s = require_training(resolved, "simulate");
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  const TrainingResult r = simulate_training(s, registry, collectives);
  nlohmann::ordered_json j = training_json(r);
  if (links) j["links"] = links_json(r);
  if (collectives) j["collectives"] = collective_rows_json(collective_rows(r));
  return j.dump();
}

// A sweep's row for Python: which value of each vary path the variant took (indices into its
// values), whether it ran, and simulate's JSON or the error.
using SweepRow = std::tuple<std::vector<std::size_t>, bool, std::string>;

// Every combination of `vary` (each path's values as "path=value" takes them) on the scenario,
// through the sweep engine (sim/sweep.h) on `jobs` workers (0: all cores): `meshsim sweep
// --rank-by RANK_BY`'s rows in its order, each valid one with simulate's JSON.
std::vector<SweepRow> run_sweep(const std::string& path, const std::string& text, const std::vector<std::string>& sets,
                                const std::string& fidelity,
                                const std::vector<std::pair<std::string, std::vector<std::string>>>& vary,
                                const std::string& rank_by, int jobs) {
  const sweep::RankMetric& metric = sweep::rank_metric(rank_by);
  const ScenarioNode base = load_node(path, text, sets, fidelity);
  if (base.is_workload()) require_training(base.resolve(), "sweep");
  std::vector<sweep::Vary> vs;
  for (const auto& [p, values] : vary) vs.push_back({p, values});
  const sweep::Sweep variants(std::move(vs));
  sweep::RunOptions o;
  o.jobs = jobs;
  o.detail = [](const TrainingResult& r) { return training_json(r).dump(); };
  const std::vector<sweep::Row> rows = sweep::run(base, variants, sweep::Shard{}, o);
  std::vector<SweepRow> out;
  for (const sweep::Row* r : sweep::ranked(rows, metric))
    out.emplace_back(variants.choices(r->index), r->valid, r->valid ? r->detail : r->error);
  return out;
}

std::string memory(const std::string& path, const std::string& text, const std::vector<std::string>& sets) {
  const Scenario s = load_scenario(path, text, sets, "", "memory");
  const StageMemories m = stage_memories(s);
  return memory_json(s, m.stages, m.capacity).dump();
}

// One collective as `meshsim collective KIND --json` runs it, from the same job
// (sim/collective_job.h): `ranks` 0 is every GPU of the topology (or the mesh's size), a negative
// count an Error, as the command refuses it. `bytes` is one size or a sweep (MIN:MAX[:FACTOR]);
// the result is a list, one per size, with the step explanation under "explain" when asked.
std::string collective(CollectiveJob job, bool explain) {
  if (job.ranks < 0) throw Error(fmt::format("ranks: {} is negative; give 0 (every GPU) or a rank count", job.ranks));
  if (job.ranks == 0) job.ranks = -1;
  job.explain = explain;
  ResolvedCollective c = resolve_collective_job(job);
  const CollectiveContext ctx = collective_context(job, c);
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  Router router(*c.topology);
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (Bytes b : c.sizes) {
    c.request.bytes = b;
    const CollectiveOutcome o = run_collective(*c.topology, router, registry, c.request);
    nlohmann::ordered_json j = outcome_json(*c.topology, ctx, o);
    if (explain) j["explain"] = explanation(*c.topology, router, registry, c.request, o);
    out.push_back(std::move(j));
  }
  return out.dump();
}

// One MoE dispatch as DeepEP runs it on the first `ranks` GPUs of `topology` (all of them
// when ranks < 1): `meshsim moe-dispatch -t TOPOLOGY ... --json`.
std::string moe_dispatch(const std::string& topology, int ranks, int tokens, int hidden, int experts, int topk,
                         int groups, const std::string& dtype, const std::string& fidelity, std::uint64_t seed,
                         int samples) {
  const Topology topo = resolve_topology(topology);
  MoeDispatchContext ctx{topology, dtype, parse_fidelity(fidelity, "fidelity"), MoeRouting{}};
  ctx.routing = {tokens, hidden, moe_element_bytes(dtype, "dtype"), experts, topk, groups, seed, samples};
  const MoeDispatchOutcome out =
      run_moe_dispatch(topo, ranks == 0 ? topo.num_gpus() : ranks, "ranks", ctx.routing, ctx.fidelity);
  return moe_dispatch_json(ctx, out).dump();
}

}  // namespace
}  // namespace meshsim::python

PYBIND11_MODULE(_meshsim, m) {
  namespace mp = meshsim::python;
  m.doc() = "meshsim's native functions; use the meshsim package, not this module";
  m.attr("__version__") = MESHSIM_VERSION;
  // Messages from below name Python's keyword arguments (algo=nccl), not the CLI's flags.
  meshsim::set_spelling(meshsim::Spelling::Python);
  static py::exception<meshsim::Error> error(m, "MeshsimError", PyExc_ValueError);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const meshsim::Error& e) {
      error(e.what());
    }
  });
  m.def("simulate", &mp::simulate, py::arg("path"), py::arg("text"), py::arg("sets"), py::arg("fidelity"),
        py::arg("links") = false, py::arg("collectives") = false, py::call_guard<py::gil_scoped_release>());
  m.def("sweep", &mp::run_sweep, py::arg("path"), py::arg("text"), py::arg("sets"), py::arg("fidelity"),
        py::arg("vary"), py::arg("rank_by"), py::arg("jobs"), py::call_guard<py::gil_scoped_release>());
  m.def("memory", &mp::memory, py::arg("path"), py::arg("text"), py::arg("sets"),
        py::call_guard<py::gil_scoped_release>());
  m.def("moe_dispatch", &mp::moe_dispatch, py::arg("topology"), py::arg("ranks"), py::arg("tokens"), py::arg("hidden"),
        py::arg("experts"), py::arg("topk"), py::arg("groups"), py::arg("dtype"), py::arg("fidelity"), py::arg("seed"),
        py::arg("samples"), py::call_guard<py::gil_scoped_release>());
  m.def(
      "collective",
      [](const std::string& kind, const std::string& bytes, const std::string& topology, const std::string& algo,
         const std::string& fidelity, int ranks, const std::string& mesh, const std::string& placement,
         const std::string& group, int root, int chunks, bool explain) {
        meshsim::CollectiveJob job;
        job.kind = kind, job.bytes = bytes, job.topology = topology, job.algo = algo, job.fidelity = fidelity;
        job.ranks = ranks, job.mesh = mesh, job.placement = placement, job.group = group, job.root = root;
        job.chunks = chunks;
        return mp::collective(std::move(job), explain);
      },
      py::arg("kind"), py::arg("bytes"), py::arg("topology"), py::arg("algo"), py::arg("fidelity"), py::arg("ranks"),
      py::arg("mesh"), py::arg("placement"), py::arg("group"), py::arg("root"), py::arg("chunks"), py::arg("explain"),
      py::call_guard<py::gil_scoped_release>());
}
