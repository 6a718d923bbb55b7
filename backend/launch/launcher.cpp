// Starting N ranks of a command on this machine: see launcher.h.
#include "backend/launch/launcher.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <fmt/format.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>

#include "backend/launch/launch_env.h"
#include "backend/launch/rendezvous.h"
#include "core/error.h"
#include "core/plugin_lookup.h"

extern char** environ;

namespace meshsim::launch {

namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr auto kGrace = 3s;                    // SIGTERM, then SIGKILL after this
constexpr auto kPoll = 10ms;                   // how often the launcher looks at its ranks
volatile std::sig_atomic_t g_stop_signal = 0;  // set by the handler below; read by the wait loop

void on_stop_signal(int sig) { g_stop_signal = sig; }

// Catches SIGINT, SIGTERM and SIGHUP while the ranks run (so the launcher can stop them)
// and restores the previous handlers afterwards.
class StopSignals {
 public:
  StopSignals() {
    g_stop_signal = 0;
    struct sigaction sa {};
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    for (std::size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~StopSignals() {
    for (std::size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &old_[i], nullptr);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> old_{};
};

std::string signal_name(int sig) {
  const char* d = strsignal(sig);
  return fmt::format("signal {} ({})", sig, d ? d : "unknown");
}

std::string describe_exit(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "exited with " + signal_name(WTERMSIG(status));
  if (WIFSTOPPED(status))
    return "was stopped by " + signal_name(WSTOPSIG(status)) + " and would hold the others at their next barrier";
  return fmt::format("stopped with wait status {}", status);
}

// A TCP port that was free a moment ago on 127.0.0.1 (rank 0 binds it with SO_REUSEADDR).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    throw Error(fmt::format("launch: cannot open a socket to pick a port ({}); pass --port", std::strerror(errno)));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  if (!ok) throw Error("launch: cannot find a free port on 127.0.0.1; pass --port");
  return ntohs(addr.sin_port);
}

// The file `name` runs: itself when it has a '/', else the first executable of that name on
// PATH (resolved before fork, as the child may only exec).
std::string resolve_command(const std::string& name, int rank) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  while (true) {
    const std::size_t colon = dirs.find(':');
    const std::string dir(dirs.substr(0, colon));
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    if (colon == std::string_view::npos) break;
    dirs.remove_prefix(colon + 1);
  }
  throw Error(
      fmt::format("launch: cannot start rank {}: '{}': not found on PATH; check the command after --", rank, name));
}

// The ranks: children in one process group (the first rank's pid is the group id).
class Ranks {
 public:
  ~Ranks() { kill_all(); }  // on an exception: SIGKILL and reap, never leave anything behind

  // fork and exec (not posix_spawn) so that the child can ask, before exec, to be killed when
  // the launcher dies (PR_SET_PDEATHSIG): after `kill -9` of launch the ranks ran on
  // unsupervised (issue 40). The launcher is single-threaded, so the child may call these.
  void spawn(const std::vector<std::string>& command, const std::vector<std::string>& env, int rank) {
    std::vector<char*> argv;
    for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (const std::string& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);
    const std::string path = resolve_command(command[0], rank);
    int report[2];  // the child's exec errno, if exec fails; closed by a successful exec
    if (::pipe2(report, O_CLOEXEC) != 0)
      throw Error(fmt::format("launch: cannot start rank {}: pipe: {}", rank, std::strerror(errno)));
    const pid_t launcher = ::getpid();
    const pid_t group = pgid_;
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(report[0]);
      ::close(report[1]);
      throw Error(fmt::format("launch: cannot start rank {}: fork: {}", rank, std::strerror(errno)));
    }
    if (pid == 0) {  // the child: async-signal-safe calls only, then exec
      ::close(report[0]);
      ::setpgid(0, group);  // 0 for the first rank: a new group
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != launcher) ::_exit(127);  // the launcher died before the line above
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(sig, SIG_DFL);
      if (rank > 0) {  // one reader of stdin
        const int null = ::open("/dev/null", O_RDONLY);
        if (null >= 0) ::dup2(null, STDIN_FILENO);
      }
      ::execve(path.c_str(), argv.data(), envp.data());
      const int err = errno;
      [[maybe_unused]] const auto n = ::write(report[1], &err, sizeof err);
      ::_exit(127);
    }
    ::close(report[1]);
    ::setpgid(pid, pgid_ == 0 ? pid : pgid_);  // the same from this side: no race with a signal to the group
    int err = 0;
    const auto got = ::read(report[0], &err, sizeof err);
    ::close(report[0]);
    if (got == sizeof err) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      throw Error(fmt::format("launch: cannot start rank {}: '{}': {}; check the command after --", rank, command[0],
                              std::strerror(err)));
    }
    if (pgid_ == 0) pgid_ = pid;
    live_[pid] = rank;
  }

  bool empty() const { return live_.empty(); }

  // Reaps every child that has exited: ranks, returned as (rank, status) in rank order, and
  // orphaned children of ranks (the launcher is their subreaper), dropped. A rank that was
  // stopped (WIFSTOPPED) is returned too, and stays live (it is still to be killed and reaped).
  std::vector<std::pair<int, int>> reap() {
    std::vector<std::pair<int, int>> done;
    while (true) {
      int status = 0;
      const pid_t r = ::waitpid(-1, &status, WNOHANG | WUNTRACED);
      if (r < 0 && errno == ECHILD) {  // no children at all: nothing is running
        for (const auto& [pid, rank] : live_) done.emplace_back(rank, 0);
        live_.clear();
      }
      if (r <= 0) break;
      if (const auto it = live_.find(r); it != live_.end()) {
        done.emplace_back(it->second, status);
        if (!WIFSTOPPED(status)) live_.erase(it);
      }
    }
    std::sort(done.begin(), done.end());
    return done;
  }

  std::vector<int> running_ranks() const {
    std::vector<int> v;
    for (const auto& [pid, rank] : live_) v.push_back(rank);
    std::sort(v.begin(), v.end());
    return v;
  }

  // SIGTERM to the group (ranks and their children), SIGKILL to what is left after the grace period.
  void stop() {
    signal_all(SIGTERM);
    const auto deadline = Clock::now() + kGrace;
    while (!live_.empty() && Clock::now() < deadline) {
      reap();
      if (!live_.empty()) std::this_thread::sleep_for(kPoll);
    }
    kill_all();
  }

 private:
  void signal_all(int sig) {
    if (pgid_ > 0) ::kill(-pgid_, sig);
    for (const auto& [pid, rank] : live_) ::kill(pid, sig);  // also ranks that left the group
    if (sig == SIGTERM) {  // a stopped process keeps SIGTERM pending: let it run to act on it
      if (pgid_ > 0) ::kill(-pgid_, SIGCONT);
      for (const auto& [pid, rank] : live_) ::kill(pid, SIGCONT);
    }
  }

  void kill_all() {
    signal_all(SIGKILL);
    for (const auto& [pid, rank] : live_) {
      int status = 0;
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    live_.clear();
    if (pgid_ > 0) ::kill(-pgid_, SIGKILL);  // children of ranks that outlived their rank
    pgid_ = 0;
    // As a subreaper we inherit those orphans: reap them, for a bounded time (one that left
    // the group and ignores us must not hang the launcher).
    const auto deadline = Clock::now() + 1s;
    while (Clock::now() < deadline) {
      int status = 0;
      const pid_t r = ::waitpid(-1, &status, WNOHANG);
      if (r < 0 && errno == ECHILD) break;
      if (r <= 0) std::this_thread::sleep_for(kPoll);
    }
  }

  pid_t pgid_ = 0;
  std::map<pid_t, int> live_;  // pid -> rank
};

std::vector<std::string> rank_environment(int rank, int world, int port, const std::string& token) {
  const std::vector<std::pair<const char*, std::string>> ours = {{kRankVar, std::to_string(rank)},
                                                                 {kWorldSizeVar, std::to_string(world)},
                                                                 {kMasterAddrVar, "127.0.0.1"},
                                                                 {kMasterPortVar, std::to_string(port)},
                                                                 {kTokenVar, token}};
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view v(*e);
    bool replaced = false;
    for (const auto& [name, value] : ours) replaced = replaced || v.starts_with(std::string(name) + "=");
    if (!replaced) env.emplace_back(v);
  }
  for (const auto& [name, value] : ours) env.push_back(fmt::format("{}={}", name, value));
  return env;
}

// The cores this process may run on (its affinity mask: taskset, a container's cpuset), else
// what the machine reports; 0 when unknown.
int usable_cores() {
#ifdef __linux__
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
#endif
  return static_cast<int>(std::thread::hardware_concurrency());
}

}  // namespace

int launch(const LaunchOptions& o) {
  if (o.command.empty()) throw Error("launch: no command given; write `meshsim launch -n N -- COMMAND ARGS...`");
  if (o.timeout_s < 0) throw Error(fmt::format("--timeout {}: must be >= 0 seconds (0: no limit)", o.timeout_s));
  heartbeat_env();  // a bad MESHSIM_HEARTBEAT_* is one error here, not one per rank
  const int port = o.port > 0 ? o.port : free_port();
  const std::string token = random_token();
  std::fflush(stdout);
  std::fflush(stderr);

  const StopSignals signals;
#ifdef __linux__
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // orphaned children of ranks come to us, to be reaped
#endif
  Ranks ranks;
  for (int r = 0; r < o.nprocs; ++r) ranks.spawn(o.command, rank_environment(r, o.nprocs, port, token), r);

  const auto start = Clock::now();
  std::optional<std::string> failure;
  while (!ranks.empty() && !failure) {
    for (const auto& [rank, status] : ranks.reap()) {
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
        failure = fmt::format("rank {} {}; stopped the other ranks", rank, describe_exit(status));
        break;
      }
    }
    if (failure || ranks.empty()) break;
    if (g_stop_signal != 0) {
      failure = fmt::format("launch interrupted by {}; stopped all ranks", signal_name(g_stop_signal));
    } else if (o.timeout_s > 0 && Clock::now() - start > std::chrono::duration<double>(o.timeout_s)) {
      const std::vector<int> running = ranks.running_ranks();
      std::string list;
      for (std::size_t i = 0; i < running.size() && i < 16; ++i) list += (i ? ", " : "") + std::to_string(running[i]);
      if (running.size() > 16) list += ", ...";
      failure = fmt::format(
          "--timeout {}s passed with rank{} {} still running; stopped all ranks (raise --timeout, "
          "or 0 for no limit)",
          o.timeout_s, running.size() > 1 ? "s" : "", list);
    } else {
      std::this_thread::sleep_for(kPoll);
    }
  }
  if (!failure) return 0;
  ranks.stop();
  throw Error(*failure);
}

int launch_ranks(int nprocs, const std::vector<std::string>& command, double timeout_s) {
  // run, validate and calibrate start their ranks here, all on this machine: ranks past its
  // cores take turns on them, so a measured time includes the waiting, and a comparison with a
  // prediction says more about this machine than about the schedule. (`meshsim launch` runs
  // any command and leaves its output alone.)
  if (const int cores = usable_cores(); cores > 0 && nprocs > cores)
    std::fprintf(stderr,
                 "meshsim: warning: %d ranks share %d core%s here, so they take turns: measured times include the "
                 "waiting; run at most %d rank%s, or on more cores\n",
                 nprocs, cores, cores == 1 ? "" : "s", cores, cores == 1 ? "" : "s");
  LaunchOptions o;
  o.nprocs = nprocs;
  o.timeout_s = timeout_s;
  o.command = command;
  return launch(o);
}

bool under_launcher() {
  for (const char* v : {kRankVar, "RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"})
    if (std::getenv(v) != nullptr) return true;
  return false;
}

std::string this_binary() {
  const std::string exe = self_exe();
  if (exe.empty())
    throw Error("cannot find the meshsim binary (/proc/self/exe); use meshsim launch -n N -- meshsim run ...");
  return exe;
}

}  // namespace meshsim::launch
