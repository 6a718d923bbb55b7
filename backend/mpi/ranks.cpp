// A sweep spread over MPI ranks: see ranks.h.
#include "backend/mpi/ranks.h"

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <sstream>
#include <thread>

#include "backend/launch/rendezvous.h"
#include "core/error.h"

namespace meshsim::mpi {
namespace {

// Under mpirun a rank that is stopped or hung leaves the others blocked in an MPI collective
// for ever. The ranks watch each other beside MPI: rank 0 serves a rendezvous store (its
// address and a fresh token handed out over MPI), every rank sends it a heartbeat from a thread
// of its own (MESHSIM_HEARTBEAT_INTERVAL, default 1 s), and when one falls silent for
// MESHSIM_HEARTBEAT_TIMEOUT (default 5 s; 0: no watch) the store fails the job naming it, every
// rank's heartbeat hears so, and each exits with status 2 (rank 0 says why, as does a rank that
// finds rank 0 itself silent); mpirun then ends the rest. Heartbeats run beside the
// simulations, so a long variant is not a silence.
class RankWatch {
 public:
  // Collective: every rank constructs it at the same point. Without a watch (timeout 0, or the
  // store could not start: said once, the sweep goes on unwatched) it does nothing.
  RankWatch(const Ranks& ranks, const launch::HeartbeatEnv& beat) {
    if (beat.heartbeat_timeout.count() == 0) return;
    std::string address;  // rank 0: "host port token", or "!" and why not
    if (ranks.rank == 0) {
      try {
        const bool one_node = ranks.local == ranks.size;
        const std::string token = launch::random_token();
        server_ = std::make_unique<launch::RendezvousServer>(
            launch::RendezvousServerOptions{.host = one_node ? "127.0.0.1" : "0.0.0.0",
                                            .token = token,
                                            .max_connections = 4 * ranks.size + 64,
                                            .world_size = ranks.size,
                                            .heartbeat_timeout = beat.heartbeat_timeout});
        address = fmt::format("{} {} {}", one_node ? std::string("127.0.0.1") : host_name(), server_->port(), token);
      } catch (const std::exception& e) {
        address = std::string("!") + e.what();
      }
    }
    const std::string got = ranks.mpi->all_gather(address)[0];
    if (got.starts_with("!")) {
      if (ranks.rank == 0)
        std::fprintf(stderr, "meshsim: warning: %s: no watch on stopped ranks (%s)\n", ranks.command.c_str(),
                     got.c_str() + 1);
      return;
    }
    std::istringstream in(got);
    launch::RendezvousClientOptions o;
    in >> o.host >> o.port >> o.token;
    o.rank = ranks.rank;
    o.world_size = ranks.size;
    o.heartbeat_interval = beat.heartbeat_interval;
    o.heartbeat_timeout = beat.heartbeat_timeout;
    // The store's verdict reaches every rank, each at its next heartbeat; rank 0 says it once
    // for all. A launcher ends the job as soon as one rank exits, so the others first give
    // rank 0 (which may hear it up to an interval later) a second more than that to say it.
    const auto grace = beat.heartbeat_interval + std::chrono::seconds(1);
    o.on_failure = [rank = ranks.rank, grace, command = ranks.command](const std::string& why, bool verdict) {
      if (rank == 0 || !verdict)
        std::fprintf(stderr, "meshsim: error: %s: %s\n", command.c_str(), why.c_str());
      else
        std::this_thread::sleep_for(grace);
      std::fflush(stderr);
      std::_Exit(2);
    };
    client_ = std::make_unique<launch::RendezvousClient>(std::move(o));
  }
  // Every rank, after its last collective of the sweep and before MPI_Finalize: no longer
  // watched (the store expects its silence).
  void leave() {
    if (client_) client_->leave();
    client_.reset();
  }
  // Rank 0's store outlives MPI_Finalize, whose fence means every rank has left.

 private:
  static std::string host_name() {
    std::array<char, 256> name{};
    if (::gethostname(name.data(), name.size() - 1) != 0) return "127.0.0.1";
    return name.data();
  }
  std::unique_ptr<launch::RendezvousServer> server_;
  std::unique_ptr<launch::RendezvousClient> client_;
};

}  // namespace

std::optional<Ranks> join_ranks(const std::string& command) {
  const Launcher launcher = launcher_env();
  if (!launcher.active) return Ranks{};
  Ranks ranks;
  ranks.command = command;
  try {
    ranks.mpi = &mpi_plugin();
  } catch (const Error& e) {
    if (launcher.rank == 0) throw Error(command + ": " + e.what());
    // Every rank fails alike; rank 0 says it. The others wait a moment, so the launcher does
    // not kill rank 0 (on their exit code) before it has.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    return std::nullopt;
  }
  if (const std::string e = ranks.mpi->init(&ranks.rank, &ranks.size, &ranks.local); !e.empty()) {
    if (launcher.rank != 0) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      return std::nullopt;
    }
    throw Error(fmt::format("{}: MPI ({}): {}; check that mpirun and libmeshsim_mpi.so come from the same MPI", command,
                            ranks.mpi->library(), e));
  }
  return ranks;
}

bool any_rank_failed(const Ranks& ranks, const std::string& error) {
  const std::vector<std::string> errors = ranks.mpi->all_gather(error);
  for (std::size_t r = 0; r < errors.size(); ++r) {
    if (errors[r].empty()) continue;
    // Rank 0 says it before MPI_Finalize, whose fence keeps the others from exiting first
    // (the launcher would kill rank 0 before it printed).
    if (ranks.rank == 0)
      std::fprintf(stderr, "meshsim: error: %s\n",
                   (r == 0 ? errors[r] : fmt::format("rank {}: {}", r, errors[r])).c_str());
    ranks.mpi->finalize();
    return true;
  }
  return false;
}

std::vector<std::string> run_on_ranks(const Ranks& ranks, const launch::HeartbeatEnv& beat,
                                      const std::function<std::string()>& work) {
  std::vector<std::string> texts;
  std::optional<RankWatch> watch;
  try {
    watch.emplace(ranks, beat);
    texts = ranks.mpi->gather(work());
    watch->leave();
  } catch (const std::exception& e) {
    // One rank cannot go on: end them all rather than leave the others waiting.
    std::fprintf(stderr, "meshsim: error: rank %d: %s\n", ranks.rank, e.what());
    ranks.mpi->abort(3);
  }
  ranks.mpi->finalize();
  return texts;  // rank 0's store (the watch) outlives MPI_Finalize, whose fence means every rank has left
}

int jobs_per_rank(int jobs, const Ranks& ranks) {
  if (jobs > 0 || ranks.local <= 1) return jobs;
  cpu_set_t set;
  CPU_ZERO(&set);
  const int mine = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  const int all = static_cast<int>(std::thread::hardware_concurrency());
  return mine >= all ? std::max(1, all / ranks.local) : 0;
}

}  // namespace meshsim::mpi
