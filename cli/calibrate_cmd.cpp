// meshsim calibrate --backend cpu|cuda --out profile.yaml [-n N] [--sizes 256KiB:16MiB]
//                   [--kinds allreduce,allgather,...] [--repeats 3] [--collectives ours|nccl]
//
// Measures the machine a backend runs on and writes the machine profile that `meshsim
// simulate --profile` (and a scenario's run.profile) reads (docs/profile.md; what is measured
// and how: report/calibration.h). Ranks start as for `meshsim run`: -n N on this machine, or
// under a launcher.
#include <fmt/format.h>

#include <filesystem>
#include <memory>

#include "backend/launch/launcher.h"
#include "cli/commands.h"
#include "cli/run_flags.h"
#include "core/error.h"
#include "report/calibration.h"

namespace meshsim::cli {

namespace {

struct CalibrateFlags : CalibrateOptions {
  int nprocs = 0;
};

int calibrate_command(const CalibrateFlags& f, const std::vector<std::string>& argv) {
  // Checked once here, so a typo is one error, not one per rank.
  const std::filesystem::path dir = std::filesystem::path(f.out).parent_path();
  if (!dir.empty() && !std::filesystem::is_directory(dir))
    throw Error("--out: folder '" + dir.string() + "' does not exist; create it or write elsewhere");
  const std::vector<Bytes> sizes = parse_bytes_sweep(f.sizes, "--sizes");
  parse_calibration_kinds(f.kinds);
  int n = f.nprocs;
  if (n == 0) n = f.backend == Backend::Cuda ? require_cuda_devices().count : 2;
  if (n >= 2 && sizes.size() < 2)
    throw Error("--sizes: one size cannot separate alpha from bandwidth; give a sweep such as 256KiB:16MiB");
  if (launch::under_launcher()) return calibrate_rank(f);
  std::vector<std::string> cmd{launch::this_binary()};
  cmd.insert(cmd.end(), argv.begin(), argv.end());
  return launch::launch_ranks(n, cmd, f.timeout_s * 2);
}

}  // namespace

Run add_calibrate_command(CLI::App& app) {
  auto f = std::make_shared<CalibrateFlags>();
  auto typed = std::make_shared<BackendFlagText>();
  CLI::App* c = app.add_subcommand("calibrate", "measure this machine and write a machine profile (docs/profile.md)");
  c->footer(
      "Examples:\n  meshsim calibrate --out cpu.yaml                   # this CPU, 2 ranks over TCP\n"
      "  meshsim calibrate --backend cuda -n 1 --out gpu.yaml   # one GPU: GEMM grid, kernels, memory\n"
      "  meshsim simulate SCENARIO.yaml --profile gpu.yaml      # then predict with it");
  c->add_option("--backend", typed->backend,
                "cpu (this host's CPU, processes over TCP) or cuda (one GPU per rank, NCCL)");
  c->add_option("--out", f->out, "the profile to write, e.g. profile.yaml")->required();
  c->add_option("-n,--nprocs", f->nprocs,
                "ranks to start when not under a launcher (default: cpu 2, cuda every GPU); collectives need 2 or more")
      ->check(CLI::Range(1, 4096));
  c->add_option("--sizes", f->sizes, "collective sizes, MIN:MAX doubling (default 256KiB:16MiB)");
  c->add_option("--kinds", f->kinds,
                "collectives, comma-separated (default allreduce,allgather,reducescatter,broadcast,alltoall)");
  c->add_option("--repeats", f->repeats, "runs per collective and size; the median counts (default 3)")
      ->check(CLI::Range(1, 1000));
  c->add_option("--collectives", typed->collectives, "cuda: ours (our step programs over NCCL send/recv) or nccl");
  c->add_option("--kernels", typed->kernels, kKernelsHelp);
  c->add_option("--attention", typed->attention, kAttentionHelp);
  c->add_option("--timeout", f->timeout_s, "seconds any rank may wait on another before failing (default 300)");
  return [f, typed] {
    RunOptions rf;
    rf.timeout_s = f->timeout_s;
    check_backend(rf, *typed);  // first, in every process: parses --backend and --collectives
    f->backend = rf.backend;
    f->collectives = rf.collectives;
    f->fp32_kernels = rf.fp32_kernels;
    std::vector<std::string> a{"calibrate",
                               "--backend",
                               to_string(f->backend),
                               "--out",
                               f->out,
                               "--sizes",
                               f->sizes,
                               "--kinds",
                               f->kinds,
                               "--repeats",
                               std::to_string(f->repeats),
                               "--collectives",
                               to_string(f->collectives),
                               "--kernels",
                               f->fp32_kernels ? "fp32" : "bf16",
                               "--timeout",
                               fmt::format("{}", f->timeout_s)};
    if (!typed->attention.empty()) a.insert(a.end(), {"--attention", typed->attention});
    return calibrate_command(*f, a);
  };
}

}  // namespace meshsim::cli
