// A sweep spread over the ranks of an MPI job (mpirun, srun: backend/mpi/plugin.h): rank r of R
// runs its share of the variants into a text (report/sweep_run.h: what --shard r/R runs, as JSON
// lines), and rank 0 gets every rank's text. `meshsim simulate` shares out a flow simulation's
// collective timings the same way (cli/training_cmd.cpp, TimingShare). The ranks watch each other beside MPI, so a rank
// that is stopped or hung ends the sweep (every rank exits with status 2, the rank named)
// instead of leaving the others blocked in a collective for ever.
//
//   const std::optional<Ranks> ranks = join_ranks();   // Ranks{} outside a launcher
//   if (any_rank_failed(*ranks, error)) return 2;      // a setup error on any rank
//   std::vector<std::string> texts = run_on_ranks(*ranks, launch::heartbeat_env(), [&] { return mine(); });
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backend/launch/launch_env.h"
#include "backend/mpi/plugin.h"

namespace meshsim::mpi {

// This process's part of the MPI world (size 1, no plugin: not under a launcher).
struct Ranks {
  const MeshsimMpiPlugin* mpi = nullptr;
  int rank = 0, size = 1, local = 1;  // local: the ranks on this node
  std::string command = "sweep";      // the command the ranks run, as their messages name it
};

// Under a launcher, the MPI plugin loaded and MPI initialized; else Ranks{}. Rank 0 throws
// the Error that stops it (a missing plugin, MPI failing to start); any other rank then
// returns nullopt a moment later (exit with status 2), so the launcher does not end rank 0
// before it has said why. `command` names the command in the messages ("sweep", "simulate").
std::optional<Ranks> join_ranks(const std::string& command = "sweep");

// Collective: `error` is this rank's setup error ("" for none). True when some rank had one:
// rank 0 has printed it (naming the rank) and MPI is finalized; every rank exits with 2.
bool any_rank_failed(const Ranks& ranks, const std::string& error);

// Collective: every rank runs `work` under the watch (`beat`: MESHSIM_HEARTBEAT_INTERVAL and
// _TIMEOUT), then MPI is finalized. Rank 0 gets every rank's text in rank order, the others
// nothing. A rank whose work throws prints the error and ends them all (MPI_Abort, status 3).
std::vector<std::string> run_on_ranks(const Ranks& ranks, const launch::HeartbeatEnv& beat,
                                      const std::function<std::string()>& work);

// Workers for each rank: `jobs` when set; else, when several ranks share a node and the
// launcher did not bind each to cores of its own, the node's cores shared out; else 0 (all).
int jobs_per_rank(int jobs, const Ranks& ranks);

}  // namespace meshsim::mpi
