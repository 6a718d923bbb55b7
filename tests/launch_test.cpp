// End-to-end tests of `meshsim launch`: ranks see their environment, a failing rank stops
// the others (and their children) quickly, and the rendezvous works across real processes.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "cli_util.h"

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

}  // namespace
