// meshsim run SCENARIO.yaml --backend cpu|cuda [--collectives ours|nccl] [--kernels bf16|fp32]
//                           [--attention auto|cudnn|meshsim] [-n N] [--set path=value ...]
//                           [--trace FILE] [--json]
// meshsim validate SCENARIO.yaml --backend cpu|cuda [...same flags]
//
// Executes the scenario's schedule for real, one process per rank (cpu: over TCP; cuda: one
// GPU per rank with NCCL, collectives as our step programs or, with --collectives nccl,
// NCCL's own), and reports the measured time of every op; `validate` also simulates it on a
// model of this machine and prints predicted vs measured (report/run_report.h). Without a
// launcher environment (MESHSIM_RANK, RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK) the command
// starts its own ranks, as `meshsim launch -n N -- meshsim run ...` would. The cuda backend
// needs a GPU: without one (or in a build without CUDA) it is one clear error.
#include <fmt/format.h>

#include <cstdlib>
#include <memory>

#include "backend/launch/launch_env.h"
#include "backend/launch/launcher.h"
#include "cli/commands.h"
#include "cli/run_flags.h"
#include "core/error.h"
#include "report/run_report.h"
#include "sim/scenario.h"

namespace meshsim::cli {

void check_backend(RunOptions& f, const BackendFlagText& typed) {
  if (!(f.timeout_s > 0) || f.timeout_s > 86400)
    throw Error(fmt::format("--timeout: {} is not a number of seconds in (0, 86400]; e.g. --timeout 120", f.timeout_s));
  f.backend = parse_backend(typed.backend);
  f.collectives = parse_collectives_mode(typed.collectives);
  check_collectives_mode(f.backend, f.collectives);
  if (typed.kernels != "bf16" && typed.kernels != "fp32")
    throw Error(fmt::format("--kernels: unknown precision '{}'; use bf16 or fp32", typed.kernels));
  f.fp32_kernels = typed.kernels == "fp32";
  if (!typed.attention.empty()) {
    if (typed.attention != "auto" && typed.attention != "cudnn" && typed.attention != "meshsim")
      throw Error(fmt::format("--attention: unknown choice '{}'; use auto, cudnn or meshsim", typed.attention));
    setenv("MESHSIM_ATTENTION", typed.attention.c_str(), 1);  // the plugin reads it; the ranks inherit it
  }
  if (f.format != "meshsim" && f.format != "nccl-tests")
    throw Error(fmt::format("--format: unknown table format '{}'; use meshsim or nccl-tests", f.format));
  if (f.format == "nccl-tests" && f.json) throw Error("--format nccl-tests: a text table; drop --json");
  if (f.backend == Backend::Cuda) require_cuda_devices();
}

namespace {

Scenario load_scenario(const RunFlags& f) {
  ScenarioNode node = ScenarioNode::load(f.file);
  for (const auto& s : f.sets) node.set(s);
  return node.resolve();
}

int run_command(const RunFlags& f, const std::vector<std::string>& argv) {
  if (launch::under_launcher()) return run_rank(f, load_scenario(f));
  launch::heartbeat_env();  // a bad MESHSIM_HEARTBEAT_* is one error here, not one per rank
  // Check the scenario once here, so a bad file is one error, not one per rank.
  const int n = ranks_to_start(f, load_scenario(f), f.nprocs);
  std::vector<std::string> cmd{launch::this_binary()};
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  return launch::launch_ranks(n, cmd, f.timeout_s * 2);
}

}  // namespace

Run add_run_commands(CLI::App& app, Run* validate) {
  auto make = [&](bool is_validate) {
    auto f = std::make_shared<RunFlags>();
    auto typed = std::make_shared<BackendFlagText>();
    f->validate = is_validate;
    CLI::App* c =
        app.add_subcommand(is_validate ? "validate" : "run",
                           is_validate ? "run a scenario for real and compare with the simulator"
                                       : "run a scenario for real (cpu: processes over TCP; cuda: GPUs with NCCL)");
    c->footer(
        is_validate
            ? "Examples:\n  meshsim validate examples/scenarios/allreduce-cpu.yaml -n 4 --trace both.json\n"
              "  meshsim validate examples/scenarios/tiny-gpt-cpu.yaml\n"
              "  meshsim validate examples/scenarios/gpt3-layer-gpu.yaml --backend cuda --set run.profile=gpu.yaml"
            : "Examples:\n  meshsim run examples/scenarios/allreduce-cpu.yaml -n 4\n"
              "  meshsim run examples/scenarios/tiny-gpt-cpu.yaml --json\n"
              "  meshsim launch -n 8 -- meshsim run examples/scenarios/tiny-gpt-cpu.yaml --backend cuda");
    c->add_option("scenario", f->file, "scenario YAML with a workload: section")->required();
    c->add_option("--set", f->sets, "override a field: path=value, repeatable");
    c->add_option("--backend", typed->backend, "cpu (processes over TCP) or cuda (one GPU per rank, NCCL)");
    c->add_option("--collectives", typed->collectives,
                  "cuda: ours (our step programs over ncclSend/ncclRecv, as simulated) or nccl (NCCL's own)");
    c->add_option("--kernels", typed->kernels, kKernelsHelp);
    c->add_option("--attention", typed->attention, kAttentionHelp);
    c->add_option("-n,--nprocs", f->nprocs, "ranks to start when not under a launcher")->check(CLI::Range(1, 4096));
    c->add_option("--trace", f->trace, "write the measured trace (and the predicted one for validate), Perfetto JSON");
    c->add_flag("--json", f->json, "print the result as JSON");
    c->add_option("--timeout", f->timeout_s, "seconds any rank may wait on another before failing (default 120)");
    c->add_option("--format", f->format,
                  "collective workloads: meshsim (the table against the prediction) or nccl-tests (nccl-tests' "
                  "columns from the measured run, #wrong from the numerics check)");
    c->add_option("--warmup", f->warmup,
                  "cuda: untimed passes of the step before the timed one (default 1: first calls of cuBLAS, "
                  "the kernels and NCCL connections stay out of the times)")
        ->check(CLI::Range(0, 100));
    // The arguments to pass on to the ranks: the same command without -n.
    auto argv = std::make_shared<std::vector<std::string>>();
    return Run([f, typed, argv, is_validate] {
      check_backend(*f, *typed);  // first, in every process: a bad flag is one error before any rank starts
      std::vector<std::string> a{is_validate ? "validate" : "run",
                                 f->file,
                                 "--backend",
                                 to_string(f->backend),
                                 "--collectives",
                                 to_string(f->collectives),
                                 "--kernels",
                                 f->fp32_kernels ? "fp32" : "bf16",
                                 "--timeout",
                                 fmt::format("{}", f->timeout_s),
                                 "--warmup",
                                 fmt::format("{}", f->warmup),
                                 "--format",
                                 f->format};
      for (const auto& s : f->sets) a.insert(a.end(), {"--set", s});
      if (!typed->attention.empty()) a.insert(a.end(), {"--attention", typed->attention});
      if (!f->trace.empty()) a.insert(a.end(), {"--trace", f->trace});
      if (f->json) a.push_back("--json");
      return run_command(*f, a);
    });
  };
  Run run = make(false);
  *validate = make(true);
  return run;
}

}  // namespace meshsim::cli
