// Starting N ranks of a command on this machine: what `meshsim launch` runs, and how run,
// validate and calibrate start their own ranks when no launcher started them.
//
//   launch::LaunchOptions o;  o.nprocs = 4;  o.command = {"meshsim", "run", "s.yaml"};
//   const int rc = launch::launch(o);   // 0 once every rank exited 0; else an Error saying why
//
// Each rank gets MESHSIM_RANK, MESHSIM_WORLD_SIZE, MESHSIM_MASTER_ADDR (127.0.0.1),
// MESHSIM_MASTER_PORT (a free port unless `port`) and MESHSIM_TOKEN (random per run) set, as
// launch_env.h reads them (see its kRankVar etc.). The ranks share the launcher's stdout and
// stderr. The ranks run in a process group of their own: when one fails (non-zero exit, a
// signal, or stopped by SIGSTOP/SIGTSTP: a stopped rank would hold the others at their next
// barrier until their timeout), the run times out (`timeout_s`, default
// kDefaultLaunchTimeoutS; 0: no limit), or the launcher gets SIGINT/SIGTERM/SIGHUP, the whole
// group gets SIGTERM, then SIGKILL after a grace period, so no rank or child of a rank is left
// behind (on Linux the launcher is a subreaper, so it also reaps the orphaned children of
// ranks). Errors name meshsim launch's flags (--port, --timeout).
#pragma once

#include <string>
#include <vector>

namespace meshsim::launch {

// A run that hangs (a rank waiting on a peer that will never answer) ends by itself: ten
// minutes is far beyond the example scenarios (seconds) and five times a rank's own 120 s
// rendezvous timeout, yet bounds what a forgotten job costs on a shared machine.
inline constexpr double kDefaultLaunchTimeoutS = 600;

struct LaunchOptions {
  int nprocs = 0;
  int port = 0;  // rank 0's rendezvous port; 0: a free one
  double timeout_s = kDefaultLaunchTimeoutS;
  std::vector<std::string> command;  // the program and its arguments
};

// Starts the ranks and waits for them: 0 when every rank exited 0; throws Error naming the
// rank that failed (the others stopped), the timeout or the signal that ended the run.
int launch(const LaunchOptions& o);

// launch() for run, validate and calibrate: `nprocs` ranks of `command` on this machine, with a
// warning when they are more than its cores.
int launch_ranks(int nprocs, const std::vector<std::string>& command, double timeout_s);

// Whether this process was started by a launcher (meshsim launch, torchrun, srun, mpirun).
bool under_launcher();

// This binary's path, to start ranks of the same command; an Error where it cannot be read.
std::string this_binary();

}  // namespace meshsim::launch
