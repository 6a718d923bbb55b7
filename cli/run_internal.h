// Shared by `meshsim run|validate` (run_cmd.cpp: collective workloads, launching) and its
// training path (run_training.cpp): the flags, one rank's connections, the machine model.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "backend/cpu/cpu_calibrate.h"
#include "backend/cpu/cpu_executor.h"
#include "backend/cpu/transport.h"
#include "backend/launch/launch_env.h"
#include "backend/launch/launcher.h"
#include "backend/launch/rendezvous.h"
#include "backend/make_executor.h"
#include "sim/machine_profile.h"
#include "sim/scenario.h"

namespace meshsim::cli {

struct RunFlags {
  bool validate = false;
  std::string file;
  std::vector<std::string> sets;
  Backend backend = Backend::Cpu;
  CollectivesMode collectives = CollectivesMode::Ours;  // cuda: our step programs, or NCCL's own collectives
  int nprocs = 0;
  std::string trace;
  bool json = false;
  double timeout_s = 120;
  int warmup = 1;                  // cuda: untimed passes of the step before the timed one
  std::string format = "meshsim";  // collective workloads: meshsim's table, or nccl-tests' layout
};

// The backend as run and validate name it in their first line: "cpu", or "cuda (collectives: ours)".
std::string backend_label(const RunFlags& f);

// --backend and --collectives as typed: CLI11 binds them here, and check_backend alone reads
// them, so each flag is parsed once and everything after it reads RunFlags' enums.
struct BackendFlagText {
  std::string backend = to_string(Backend::Cpu);
  std::string collectives = to_string(CollectivesMode::Ours);
};

// The checks the flags allow before any rank starts, in this order (the first that fails is
// the one clear error): --timeout in (0, 86400] seconds; --backend and --collectives known
// (parsed here into f.backend and f.collectives); NCCL's collectives only on cuda; --format known (and
// not with --json); a GPU for cuda.
void check_backend(RunFlags& f, const BackendFlagText& typed);

// One rank of a run: its launcher environment, the rendezvous store (served by rank 0)
// and a transport between all ranks (for measuring the machine and collective workloads).
struct RankSession {
  explicit RankSession(const RunFlags& f);
  launch::LaunchEnv env;
  std::chrono::milliseconds timeout;
  std::unique_ptr<launch::RendezvousServer> server;
  std::unique_ptr<launch::RendezvousClient> store;
  std::unique_ptr<cpu::StoreDirectory> dir;
  std::unique_ptr<cpu::Transport> transport;  // cpu backend only
  // What make_executor needs of this rank: the backend, its collectives, rank, world, timeout
  // and this session's connections; callers add what their schedule needs.
  ExecutorOptions executor_options(Backend backend, CollectivesMode collectives) const;
  // Rank 0 waits until every other rank has left (so the store outlives them).
  void finish();
};

// The topology predictions use: the scenario's, or, when it names none, a switch whose
// latency and loaded bandwidth are measured here (every rank takes part; rank 0's figures).
std::string machine_topology(RankSession& s, const Scenario& sc);

// This host's compute as a machine profile: the measured GEMM grid (as points for 2- and
// 4-byte GEMMs: the cpu backend computes in fp32 whatever the model's dtype), memory
// bandwidth, per-op overhead, and the reference kernels' rates (apply_kernel_rates).
MachineProfile cpu_machine_profile(const cpu::CpuMeasurements& m);

// Our timed kernels (calibration_calls) into a profile: per kernel kind the memory
// efficiency (bytes per second over p.gpu.memory_bandwidth) and the attention efficiency
// (FLOP/s over `attention_peak`), each kept within [0.001, 1].
void apply_kernel_rates(MachineProfile& p, const std::vector<MeasuredKernel>& kernels, double attention_peak);
// The row kernels timed at several row lengths (calibrate's sweep, row_kernel_calls) into the
// profile's row points: per function, pass and width, bytes per second over
// p.gpu.memory_bandwidth, kept within [0.001, 1].
void apply_row_sweep(MachineProfile& p, const std::vector<MeasuredKernel>& sweep);

// Writes the measured events (a track per rank) and, for validate, the predicted ones (a
// track per pipeline stage) into one Perfetto trace; op names come from the schedule.
void write_side_by_side_trace(const std::string& path, const Schedule& schedule, Backend backend,
                              const std::vector<TraceEvent>& measured, const Trace* predicted);

// A rank's measured events as text for the rendezvous store's gather, and back (role, op,
// start, end per line; decode_trace sets the rank).
std::string encode_trace(const Trace& t);
std::vector<TraceEvent> decode_trace(const std::string& text, int rank);

// The training path of run/validate (the scenario has no workload: section).
int run_training_rank(const RunFlags& f, const Scenario& sc, RankSession& s);

}  // namespace meshsim::cli
