// Who am I in this run? The rank, world size and rendezvous address of a process started
// by a launcher, read from the environment variables that launcher sets.
//
//   const LaunchEnv env = launch_env();           // this process's environment
//   if (env.rank == 0) server.emplace(RendezvousServerOptions{.port = env.master_port, .token = env.token});
//
// Launchers recognized, first match wins (`source` says which):
//
//   source     rank / world size                           master address / port
//   meshsim    MESHSIM_RANK, MESHSIM_WORLD_SIZE           MESHSIM_MASTER_ADDR, MESHSIM_MASTER_PORT
//   torchrun   RANK, WORLD_SIZE                           MASTER_ADDR, MASTER_PORT
//   slurm      SLURM_PROCID, SLURM_NTASKS                 MESHSIM_MASTER_ADDR or MASTER_ADDR,
//   openmpi    OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE MESHSIM_MASTER_PORT or MASTER_PORT
//                                                         (port default 29500)
//
// `meshsim launch` sets the MESHSIM_* variables. Slurm and Open MPI do not say where
// rank 0 listens, so the master address must be set by hand (e.g. the first host of
// `scontrol show hostnames $SLURM_NODELIST`). A missing or inconsistent variable is an
// Error naming it and the fix.
//
// MESHSIM_TOKEN is required, whatever the launcher: the same secret on every rank (e.g.
// `export MESHSIM_TOKEN=$(openssl rand -hex 16)` once, before torchrun/srun/mpirun, which
// pass the environment on). Without it anyone who can reach rank 0's port could join the
// store, register as a rank and receive another rank's data (docs/security.md); so an
// unset or empty MESHSIM_TOKEN is an Error saying how to set one. MESHSIM_TOKEN=insecure
// waives the requirement for a local experiment: `insecure` is then set and the ranks use
// that public word as their token (callers print a warning). `meshsim launch` sets a
// random token per run.
//
// Liveness (any launcher; rendezvous.h): every rank sends the store a heartbeat every
// MESHSIM_HEARTBEAT_INTERVAL seconds (default 1) from a thread of its own, and the store
// fails the run, naming the rank, when one has sent none for MESHSIM_HEARTBEAT_TIMEOUT
// seconds (default 5; 0 turns the check off): a rank stopped by SIGSTOP or hung is named
// to every rank within timeout + interval + 0.35 s (6.4 s by default). A rank that only
// computes keeps beating. Both accept decimals (0.5); the timeout must be at least twice
// the interval. A bad value is an Error naming the variable.
//
// MESHSIM_BIND_ADDR (any launcher) is the address this rank's transport listens on and
// publishes to its peers (default 127.0.0.1, ranks on one machine). Ranks on different
// hosts (or network namespaces, tests/netns/) set it to their own host's address, e.g.
// MESHSIM_BIND_ADDR=10.77.0.3; rank 0's rendezvous server listens on the master address.
#pragma once

#include <chrono>
#include <functional>
#include <string>

namespace meshsim::launch {

inline constexpr int kDefaultMasterPort = 29500;

// The variables `meshsim launch` sets for each rank (the "meshsim" flavour).
inline constexpr const char* kRankVar = "MESHSIM_RANK";
inline constexpr const char* kWorldSizeVar = "MESHSIM_WORLD_SIZE";
inline constexpr const char* kMasterAddrVar = "MESHSIM_MASTER_ADDR";
inline constexpr const char* kMasterPortVar = "MESHSIM_MASTER_PORT";
inline constexpr const char* kTokenVar = "MESHSIM_TOKEN";
inline constexpr const char* kBindAddrVar = "MESHSIM_BIND_ADDR";
inline constexpr const char* kDefaultBindAddr = "127.0.0.1";
inline constexpr const char* kInsecureToken = "insecure";  // MESHSIM_TOKEN=insecure: no secret, on purpose
inline constexpr const char* kHeartbeatIntervalVar = "MESHSIM_HEARTBEAT_INTERVAL";  // seconds, default 1
inline constexpr const char* kHeartbeatTimeoutVar = "MESHSIM_HEARTBEAT_TIMEOUT";    // seconds, default 5; 0: off
inline constexpr std::chrono::milliseconds kDefaultHeartbeatInterval{1000};
inline constexpr std::chrono::milliseconds kDefaultHeartbeatTimeout{5000};

// The most ranks a real run (meshsim run / validate / launch) takes.
inline constexpr int kMaxLaunchRanks = 1 << 16;

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  std::string master_addr;
  int master_port = 0;
  std::string token;                         // MESHSIM_TOKEN: never empty
  bool insecure = false;                     // MESHSIM_TOKEN=insecure: authentication waived (warn the user)
  std::string bind_addr = kDefaultBindAddr;  // MESHSIM_BIND_ADDR: where this rank's transport listens
  std::string source;                        // "meshsim", "torchrun", "slurm" or "openmpi"
  std::chrono::milliseconds heartbeat_interval = kDefaultHeartbeatInterval;  // MESHSIM_HEARTBEAT_INTERVAL
  std::chrono::milliseconds heartbeat_timeout = kDefaultHeartbeatTimeout;    // MESHSIM_HEARTBEAT_TIMEOUT; 0: off
};

// getenv returns the variable's value or nullptr when it is not set.
LaunchEnv launch_env_from(const std::function<const char*(const char*)>& getenv);
LaunchEnv launch_env();  // from this process's environment

// The heartbeat variables alone (launch_env reads them too): for launchers, to refuse a bad
// value once, before starting any rank.
struct HeartbeatEnv {
  std::chrono::milliseconds heartbeat_interval = kDefaultHeartbeatInterval;
  std::chrono::milliseconds heartbeat_timeout = kDefaultHeartbeatTimeout;
};
HeartbeatEnv heartbeat_env_from(const std::function<const char*(const char*)>& getenv);
HeartbeatEnv heartbeat_env();

}  // namespace meshsim::launch
