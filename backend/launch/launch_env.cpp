// Reading the launcher's environment variables (see launch_env.h).
#include "backend/launch/launch_env.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "core/error.h"

namespace meshsim::launch {

namespace {

struct Flavour {
  const char* source;
  const char* rank;
  const char* world;
  const char* addr;  // nullptr: MESHSIM_MASTER_ADDR, else MASTER_ADDR
  const char* port;  // nullptr: MESHSIM_MASTER_PORT, else MASTER_PORT, else the default
};

constexpr Flavour kFlavours[] = {
    {"meshsim", kRankVar, kWorldSizeVar, kMasterAddrVar, kMasterPortVar},
    {"torchrun", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", nullptr, nullptr},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", nullptr, nullptr},
};

class Vars {
 public:
  Vars(const std::function<const char*(const char*)>& getenv, const char* source) : getenv_(getenv), source_(source) {}

  const char* find(const char* name) const {
    const char* v = getenv_(name);
    return v && *v ? v : nullptr;
  }

  std::string require(const char* name, std::string_view fix) const {
    const char* v = find(name);
    if (!v) throw Error(fmt::format("{} is not set ({} launch); {}", name, source_, fix));
    return v;
  }

  int integer(const char* name, std::string_view text, int lo, int hi, std::string_view fix) const {
    int v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size())
      throw Error(fmt::format("{}='{}' is not an integer ({} launch); {}", name, text, source_, fix));
    if (v < lo || v > hi)
      throw Error(fmt::format("{}={} is out of range {}..{} ({} launch); {}", name, v, lo, hi, source_, fix));
    return v;
  }

 private:
  const std::function<const char*(const char*)>& getenv_;
  const char* source_;
};

// A duration in seconds (decimals allowed) from `name`, or `fallback` when it is unset.
std::chrono::milliseconds seconds_var(const Vars& vars, const char* name, std::chrono::milliseconds fallback, double lo,
                                      double hi, std::string_view fix) {
  const char* v = vars.find(name);
  if (!v) return fallback;
  const std::string_view text(v);
  double s = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), s);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(s))
    throw Error(fmt::format("{}='{}' is not a number of seconds; {}", name, text, fix));
  if (s < lo || s > hi) throw Error(fmt::format("{}={} is out of range {}..{} seconds; {}", name, text, lo, hi, fix));
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(s * 1000)));
}

}  // namespace

// MESHSIM_HEARTBEAT_INTERVAL and MESHSIM_HEARTBEAT_TIMEOUT (launch_env.h).
HeartbeatEnv heartbeat_env_from(const std::function<const char*(const char*)>& getenv) {
  const Vars vars(getenv, "any");
  HeartbeatEnv env;
  env.heartbeat_interval =
      seconds_var(vars, kHeartbeatIntervalVar, kDefaultHeartbeatInterval, 0.01, 3600,
                  fmt::format("set it to how often each rank tells the store it is alive, e.g. {}=1 (the default)",
                              kHeartbeatIntervalVar));
  env.heartbeat_timeout = seconds_var(
      vars, kHeartbeatTimeoutVar, kDefaultHeartbeatTimeout, 0, 86400,
      fmt::format("set it to how long a silent rank may take before the run fails naming it, e.g. {}=5 (the "
                  "default), or {}=0 to turn the check off",
                  kHeartbeatTimeoutVar, kHeartbeatTimeoutVar));
  if (env.heartbeat_timeout > std::chrono::milliseconds(0) && env.heartbeat_timeout < 2 * env.heartbeat_interval)
    throw Error(fmt::format(
        "{}={:g} s is less than twice {}={:g} s: a live rank would be declared dead between two heartbeats; raise {} "
        "or lower {}",
        kHeartbeatTimeoutVar, env.heartbeat_timeout.count() / 1000.0, kHeartbeatIntervalVar,
        env.heartbeat_interval.count() / 1000.0, kHeartbeatTimeoutVar, kHeartbeatIntervalVar));
  return env;
}

HeartbeatEnv heartbeat_env() {
  return heartbeat_env_from([](const char* name) -> const char* { return std::getenv(name); });
}

LaunchEnv launch_env_from(const std::function<const char*(const char*)>& getenv) {
  for (const Flavour& f : kFlavours) {
    const Vars vars(getenv, f.source);
    if (!vars.find(f.rank)) continue;
    LaunchEnv env;
    env.source = f.source;
    const std::string fix_world = fmt::format("set {} to the number of ranks (e.g. {}=4)", f.world, f.world);
    // Rank 0's store keeps a slot per rank: up to kMaxLaunchRanks (a 16M-rank world took 6.3 GB
    // and half a minute to refuse).
    env.world_size = vars.integer(f.world, vars.require(f.world, fix_world), 1, kMaxLaunchRanks, fix_world);
    const std::string rank_text = vars.require(f.rank, "");
    const std::string fix_rank = fmt::format("set {} to this process's rank, 0..{}", f.rank, env.world_size - 1);
    env.rank = vars.integer(f.rank, rank_text, 0, 1 << 24, fix_rank);
    if (env.rank >= env.world_size)
      throw Error(fmt::format("{}={} is not below {}={} ({} launch); {}", f.rank, env.rank, f.world, env.world_size,
                              f.source, fix_rank));

    const char* addr_var = f.addr;
    if (!addr_var) addr_var = vars.find(kMasterAddrVar) ? kMasterAddrVar : "MASTER_ADDR";
    env.master_addr = vars.require(
        addr_var, f.addr ? "set it to the host of rank 0 (e.g. 127.0.0.1 on one machine)"
                         : "this launcher does not say where rank 0 runs: set MESHSIM_MASTER_ADDR (or MASTER_ADDR) "
                           "to rank 0's host");

    const char* port_var = f.port;
    if (!port_var) port_var = vars.find(kMasterPortVar) ? kMasterPortVar : "MASTER_PORT";
    const std::string fix_port = fmt::format("set {} to a free TCP port on rank 0's host, 1..65535", port_var);
    if (f.port || vars.find(port_var))
      env.master_port = vars.integer(port_var, vars.require(port_var, fix_port), 1, 65535, fix_port);
    else
      env.master_port = kDefaultMasterPort;

    const char* token = vars.find(kTokenVar);
    if (!token)
      throw Error(
          fmt::format("{} is not set ({} launch, rank {} of {}): set {} to the same secret on every rank, e.g. `export "
                      "{}=$(openssl "
                      "rand -hex 16)` before starting them, or {}={} to run unauthenticated for a local experiment",
                      kTokenVar, f.source, env.rank, env.world_size, kTokenVar, kTokenVar, kTokenVar, kInsecureToken));
    env.token = token;
    env.insecure = env.token == kInsecureToken;
    if (const char* bind = vars.find(kBindAddrVar)) env.bind_addr = bind;
    const HeartbeatEnv beat = heartbeat_env_from(getenv);
    env.heartbeat_interval = beat.heartbeat_interval;
    env.heartbeat_timeout = beat.heartbeat_timeout;
    return env;
  }
  throw Error(
      "no launcher environment: MESHSIM_RANK, RANK, SLURM_PROCID and OMPI_COMM_WORLD_RANK are all unset; start the "
      "ranks with `meshsim launch -n N -- COMMAND`, torchrun, srun or mpirun");
}

LaunchEnv launch_env() {
  return launch_env_from([](const char* name) -> const char* { return std::getenv(name); });
}

}  // namespace meshsim::launch
