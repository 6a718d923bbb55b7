// End-to-end tests of `meshsim launch`: ranks see their environment, a failing rank stops
// the others (and their children) quickly, and the rendezvous works across real processes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "cli_util.h"

extern char** environ;

namespace {

using namespace cli_testing;
using Clock = std::chrono::steady_clock;

// Running: it exists and is not a zombie (a dead process its parent has not reaped yet).
bool running(int pid) {
  const std::string stat = slurp(fs::path("/proc") / std::to_string(pid) / "stat");
  if (stat.empty()) return ::kill(pid, 0) == 0 || errno != ESRCH;
  const std::size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

std::vector<int> read_pids(const fs::path& dir) {
  std::vector<int> pids;
  for (const auto& entry : fs::directory_iterator(dir))
    for (const std::string& line : split_lines(slurp(entry.path())))
      if (!line.empty()) pids.push_back(std::stoi(line));
  return pids;
}

TEST(Launch, EveryRankSeesItsRankAndTheWorldSize) {
  const Result r = meshsim("launch -n 3 -- sh -c 'echo rank $MESHSIM_RANK of $MESHSIM_WORLD_SIZE'");
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> got = split_lines(r.out);
  std::sort(got.begin(), got.end());
  EXPECT_EQ(got, (std::vector<std::string>{"rank 0 of 3", "rank 1 of 3", "rank 2 of 3"}));
  EXPECT_EQ(r.err, "");
}

TEST(Launch, RanksShareAPortAndAToken) {
  const Result r =
      meshsim("launch -n 2 --port 29999 -- sh -c 'echo $MESHSIM_MASTER_ADDR:$MESHSIM_MASTER_PORT ${#MESHSIM_TOKEN}'");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "127.0.0.1:29999 32\n127.0.0.1:29999 32\n");
}

TEST(Launch, AFailingRankStopsTheOthersAndLeavesNothingBehind) {
  const fs::path dir = temp_dir() / "launch_pids";
  fs::remove_all(dir);
  fs::create_directories(dir);
  // Every rank records its shell's pid and its background sleep's pid; rank 1 then fails
  // (a moment later, so that the others have started their sleeps).
  const std::string script = "echo $$ >> " + dir.string() + "/$MESHSIM_RANK; " +
                             "if [ $MESHSIM_RANK = 1 ]; then sleep 0.5; exit 3; fi; sleep 60 & echo $! >> " +
                             dir.string() + "/$MESHSIM_RANK; wait";
  const auto start = Clock::now();
  const Result r = meshsim("launch -n 3 -- sh -c '" + script + "'");
  const auto elapsed = Clock::now() - start;
  EXPECT_LT(elapsed, std::chrono::seconds(15));
  expect_user_error(r, "rank 1 exited with code 3", "stopped the other ranks");
  const std::vector<int> pids = read_pids(dir);
  EXPECT_EQ(pids.size(), 5u);  // 3 shells, 2 sleeps
  for (int pid : pids) EXPECT_FALSE(running(pid)) << "pid " << pid << " outlived the launch";
}

TEST(Launch, TheBriefsSleepingSiblingIsStoppedWithinSeconds) {
  const auto start = Clock::now();
  const Result r = meshsim("launch -n 3 -- sh -c 'if [ $MESHSIM_RANK = 1 ]; then exit 3; fi; sleep 60'");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(15));
  expect_user_error(r, "rank 1 exited with code 3");
}

TEST(Launch, ARankKilledByASignalIsNamed) {
  const Result r = meshsim("launch -n 2 -- sh -c 'if [ $MESHSIM_RANK = 0 ]; then kill -9 $$; fi; sleep 60'");
  expect_user_error(r, "rank 0 exited with signal 9");
}

TEST(Launch, TimeoutStopsAllRanks) {
  const auto start = Clock::now();
  const Result r = meshsim("launch -n 2 --timeout 0.5 -- sleep 30");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(15));
  expect_user_error(r, "--timeout", "ranks 0, 1 still running");
}

// A rank stopped by SIGSTOP would hold the others at their next barrier until their
// timeout: the launcher notices at once, names it and stops every rank (the stopped one too).
TEST(Launch, AStoppedRankIsNamedAndStopsEveryRankWithinSeconds) {
  const auto start = Clock::now();
  const Result r = meshsim("launch -n 3 -- sh -c 'if [ $MESHSIM_RANK = 1 ]; then kill -STOP $$; fi; sleep 60'");
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(15));
  expect_user_error(r, "rank 1 was stopped by signal 19", "stopped the other ranks");
}

TEST(Launch, HasADefaultTimeout) {
  const Result r = meshsim("launch --help");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("default 600; 0: no limit"), std::string::npos) << r.out;
}

// After `kill -9` of the launcher its ranks do not run on unsupervised: each asked the kernel
// (PR_SET_PDEATHSIG) to kill it with the launcher (issue 40).
TEST(Launch, RanksDieWithTheirLauncher) {
  const fs::path dir = temp_dir() / "launch_orphans";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string launch = std::string("exec ") + MESHSIM_BINARY + " launch -n 2 --timeout 0 -- sh -c 'echo $$ > " +
                             dir.string() + "/$MESHSIM_RANK; exec sleep 60'";
  const char* argv[] = {"/bin/sh", "-c", launch.c_str(), nullptr};
  pid_t launcher = 0;
  ASSERT_EQ(posix_spawn(&launcher, "/bin/sh", nullptr, nullptr, const_cast<char**>(argv), environ), 0);
  const auto start = Clock::now();
  std::vector<int> ranks;
  while (Clock::now() - start < std::chrono::seconds(10)) {
    ranks = read_pids(dir);
    if (ranks.size() == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(ranks.size(), 2u);
  ASSERT_EQ(::kill(launcher, SIGKILL), 0);
  int status = 0;
  ::waitpid(launcher, &status, 0);
  const auto killed = Clock::now();
  bool gone = false;
  while (!gone && Clock::now() - killed < std::chrono::seconds(5)) {
    gone = std::none_of(ranks.begin(), ranks.end(), running);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(gone) << "a rank outlived its launcher by 5 s";
  for (int pid : ranks) ::kill(pid, SIGKILL);  // never leave one behind, whatever the outcome
}

TEST(Launch, AMissingCommandIsAUserError) {
  expect_user_error(meshsim("launch -n 2 -- meshsim-no-such-program"), "meshsim-no-such-program",
                    "check the command after --");
}

// The rendezvous across real processes: backend_test's launched test (it skips itself
// unless MESHSIM_RANK is set) hosts the server on rank 0, gathers and meets at a barrier.
TEST(Launch, RendezvousAcrossLaunchedProcesses) {
  const Result r = meshsim(std::string("launch -n 3 --timeout 60 -- ") + BACKEND_TEST_BINARY +
                           " --gtest_filter=RendezvousLaunched.* --gtest_brief=1");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("gathered: r0,r1,r2"), std::string::npos) << r.out;
}

// Ranks started by hand (as torchrun or srun would: no launcher watching them), so that
// only the store's liveness heartbeat can tell that one was stopped. The guard resumes and
// kills whatever is left, so a failed check never leaves a stopped process behind.
class HandStartedRanks {
 public:
  HandStartedRanks(int world, const std::string& args, const std::vector<std::string>& extra_env) {
    const int port = free_port();
    for (int r = 0; r < world; ++r) {
      std::vector<std::string> env;
      for (char** e = environ; *e; ++e) env.emplace_back(*e);
      for (const std::string& v :
           {"MESHSIM_RANK=" + std::to_string(r), "MESHSIM_WORLD_SIZE=" + std::to_string(world),
            std::string("MESHSIM_MASTER_ADDR=127.0.0.1"), "MESHSIM_MASTER_PORT=" + std::to_string(port),
            std::string("MESHSIM_TOKEN=hand-started-test")})
        env.push_back(v);
      env.insert(env.end(), extra_env.begin(), extra_env.end());
      errs_.push_back(temp_dir() / ("hand_rank" + std::to_string(r) + ".err"));
      const std::string cmd = std::string(MESHSIM_BINARY) + " " + args;
      pids_.push_back(spawn({"/bin/sh", "-c", "exec " + cmd}, env, errs_.back()));
    }
  }
  ~HandStartedRanks() {
    for (int pid : pids_)
      if (pid > 0) {
        ::kill(pid, SIGCONT);
        ::kill(pid, SIGKILL);
        ::waitpid(pid, nullptr, 0);
      }
  }
  int pid(int rank) const { return pids_[static_cast<std::size_t>(rank)]; }
  std::string err(int rank) const { return slurp(errs_[static_cast<std::size_t>(rank)]); }
  // Waits until `rank` exits (true, with its status in `code`) or `limit` passes.
  bool wait_exit(int rank, Clock::duration limit, int& code) {
    const auto until = Clock::now() + limit;
    int& pid = pids_[static_cast<std::size_t>(rank)];
    for (;;) {
      int status = 0;
      if (pid > 0 && ::waitpid(pid, &status, WNOHANG) == pid) {
        pid = -1;
        code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        return true;
      }
      if (Clock::now() >= until) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }

 private:
  static int spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env, const fs::path& err) {
    std::vector<char*> a, e;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    for (const auto& s : env) e.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    e.push_back(nullptr);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&files, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&files, STDERR_FILENO, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int pid = -1;
    const int rc = posix_spawn(&pid, a[0], &files, nullptr, a.data(), e.data());
    posix_spawn_file_actions_destroy(&files);
    EXPECT_EQ(rc, 0) << "cannot start " << argv.back();
    return rc == 0 ? pid : -1;
  }
  std::vector<int> pids_;
  std::vector<fs::path> errs_;
};

// Issue 16: a rank stopped by SIGSTOP in the middle of a collective keeps its sockets open,
// so neither its transport peers nor the store see it close. Its heartbeats stop, and the
// store names it to every rank within MESHSIM_HEARTBEAT_TIMEOUT (5 s) plus about two
// heartbeats (1 s each), far before their 120 s transport timeout.
TEST(Liveness, ARankStoppedDuringACollectiveIsNamedToTheOthersWithinSeconds) {
  const fs::path wl = write_file("stop_wl.yaml",
                                 "name: stop\nworkload: {collective: allreduce, bytes: 1MiB, algorithm: ring, "
                                 "iterations: 1000000}\n");
  HandStartedRanks ranks(3, "run " + wl.string() + " --timeout 120", {});
  std::this_thread::sleep_for(std::chrono::seconds(3));  // set up, and deep in the allreduces
  for (int r = 0; r < 3; ++r) {
    int code = 0;
    ASSERT_FALSE(ranks.wait_exit(r, std::chrono::milliseconds(0), code)) << "rank " << r << ": " << ranks.err(r);
  }
  ASSERT_EQ(::kill(ranks.pid(1), SIGSTOP), 0);
  const auto stopped = Clock::now();
  for (int r : {0, 2}) {
    int code = 0;
    ASSERT_TRUE(ranks.wait_exit(r, std::chrono::seconds(30), code)) << "rank " << r << " still runs";
    const double seconds = std::chrono::duration<double>(Clock::now() - stopped).count();
    std::cout << "rank " << r << " named the stopped rank after " << seconds << " s: " << ranks.err(r);
    EXPECT_LT(seconds, 12.0) << ranks.err(r);
    EXPECT_NE(code, 0);
    EXPECT_NE(ranks.err(r).find("rank 1 stopped answering for 5 s (stopped or hung?)"), std::string::npos)
        << ranks.err(r);
    EXPECT_NE(ranks.err(r).find("MESHSIM_HEARTBEAT_TIMEOUT"), std::string::npos) << ranks.err(r);
  }
}

// A bad heartbeat variable is one error before any rank starts.
Result meshsim_with(const char* name, const char* value, const std::string& args) {
  ::setenv(name, value, 1);
  const Result r = meshsim(args);
  ::unsetenv(name);
  return r;
}

TEST(Liveness, BadHeartbeatVariablesAreOneError) {
  expect_user_error(meshsim_with("MESHSIM_HEARTBEAT_TIMEOUT", "soon", "launch -n 2 -- true"),
                    "MESHSIM_HEARTBEAT_TIMEOUT='soon' is not a number of seconds", "MESHSIM_HEARTBEAT_TIMEOUT=5");
  expect_user_error(meshsim_with("MESHSIM_HEARTBEAT_INTERVAL", "3", "launch -n 2 -- true"),
                    "MESHSIM_HEARTBEAT_TIMEOUT=5 s is less than twice MESHSIM_HEARTBEAT_INTERVAL=3 s");
  const fs::path wl = write_file("hb_wl.yaml", "name: hb\nworkload: {collective: allreduce, bytes: 1KiB}\n");
  expect_user_error(meshsim_with("MESHSIM_HEARTBEAT_INTERVAL", "-1", "run " + wl.string() + " -n 2"),
                    "MESHSIM_HEARTBEAT_INTERVAL=-1 is out of range", "MESHSIM_HEARTBEAT_INTERVAL=1");
}

}  // namespace
