#include "backend/cuda/check.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <map>
#include <thread>

#include "backend/cuda/device.h"
#include "backend/cuda/fake_gpu_api.h"
#include "core/test_util.h"

namespace meshsim::cuda {
namespace {

using testing_util::contains;
using testing_util::error_of;
using namespace std::chrono_literals;

// The world communicator of `ranks` ranks, this checker's rank among them, added to `check`
// (so a failure aborts it).
void add_world(FakeGpuApi& api, Checker& check, int ranks) {
  CommH world = nullptr;
  ASSERT_EQ(api.comm_init_rank(&world, ranks, "", check.rank()), 0);
  check.add_comm(world);
}

TEST(Checker, SuccessIsSilent) {
  FakeGpuApi api;
  Checker check(api, 2);
  EXPECT_EQ(error_of([&] { check.nccl(0, "ncclSend", "op 'x'"); }), "(no error)");
  EXPECT_FALSE(check.aborted());
}

TEST(Checker, FailureNamesRankOpCallAndLibraryTextAndAbortsEveryCommOnce) {
  FakeGpuApi api;
  Checker check(api, 3);
  CommH world = nullptr, tp = nullptr;
  ASSERT_EQ(api.comm_init_rank(&world, 4, "", 3), 0);
  ASSERT_EQ(api.comm_split(world, 1, 1, &tp), 0);
  check.add_comm(world);
  check.add_comm(tp);
  const std::string msg = error_of([&] { check.nccl(2, "ncclSend", "op 'tp.allreduce' (#17 of role 0)"); });
  EXPECT_EQ(msg,
            "backend cuda: rank 3: op 'tp.allreduce' (#17 of role 0): ncclSend failed: NCCL error 2 (fake NCCL "
            "error 2); NCCL communicators aborted");
  EXPECT_TRUE(check.aborted());
  EXPECT_TRUE(api.has("abort comm#1"));
  EXPECT_TRUE(api.has("abort comm#2"));
  // A second failure does not abort again and no longer claims to.
  const std::string again = error_of([&] { check.cuda(700, "cudaEventQuery", "teardown"); });
  EXPECT_EQ(again, "backend cuda: rank 3: teardown: cudaEventQuery failed: CUDA error 700 (fake CUDA error 700)");
  EXPECT_EQ(api.count("abort"), 2);
}

TEST(Checker, CublasStatusIsNamedAsCublas) {
  FakeGpuApi api;
  Checker check(api, 0);
  EXPECT_TRUE(contains(error_of([&] { check.cublas(13, "cublasGemmEx", "op 'fc1'"); }),
                       "cublasGemmEx failed: cuBLAS error 13 (fake cuBLAS error 13)"));
}

// A fake clock: every sleep advances time by the sleep's length.
struct FakeClock {
  SteadyTime t{};
  WatchClock clock() {
    return {[this] { return t; }, [this](std::chrono::microseconds d) { t += d; }};
  }
};

TEST(Watchdog, ReturnsOnceTheEventIsDone) {
  FakeGpuApi api;
  Checker check(api, 0);
  FakeClock fc;
  Watchdog dog(check, {.timeout = 1s, .poll = 100us}, fc.clock());
  dog.wait(nullptr, "op 'a'");
  EXPECT_EQ(api.count("query"), 1);
  EXPECT_EQ(fc.t, SteadyTime{});  // no sleep when already done
}

TEST(Watchdog, AsyncNcclErrorAbortsAndNamesTheOp) {
  FakeGpuApi api;
  api.events_finish = false;
  api.async_error = 6;  // ncclRemoteError
  api.async_after_polls = 3;
  Checker check(api, 5);
  ASSERT_NO_FATAL_FAILURE(add_world(api, check, 8));
  FakeClock fc;
  Watchdog dog(check, {.timeout = 10s, .poll = 1ms}, fc.clock());
  const std::string msg = error_of([&] { dog.wait(nullptr, "op 'dp.allreduce' (#40 of role 1)"); });
  EXPECT_EQ(msg,
            "backend cuda: rank 5: op 'dp.allreduce' (#40 of role 1): asynchronous NCCL error 6 (fake NCCL error "
            "6) while waiting for the op; NCCL communicators aborted");
  EXPECT_EQ(api.count("async_poll"), 4);  // three clean polls, the fourth reports
  EXPECT_TRUE(api.has("abort comm#1"));
  EXPECT_EQ(fc.t - SteadyTime{}, 3ms);
}

// The store's verdict (a peer died or stopped) aborts a wait at the next job poll, long
// before the timeout, with the store's reason.
TEST(Watchdog, TheStoresVerdictAbortsTheWait) {
  FakeGpuApi api;
  api.events_finish = false;
  Checker check(api, 2);
  ASSERT_NO_FATAL_FAILURE(add_world(api, check, 4));
  FakeClock fc;
  int asked = 0;
  WatchdogOptions opt{.timeout = 60s, .poll = 10ms};
  opt.job_failed = [&] { return ++asked < 3 ? std::string() : std::string("rank 1 stopped answering for 5 s"); };
  Watchdog dog(check, opt, fc.clock());
  const std::string msg = error_of([&] { dog.wait(nullptr, "op 'tp.allreduce'"); });
  EXPECT_EQ(msg,
            "backend cuda: rank 2: op 'tp.allreduce': stopped: the run failed: rank 1 stopped answering for 5 s; "
            "NCCL communicators aborted");
  EXPECT_EQ(asked, 3);  // every 100 ms (job_poll) of fake time
  EXPECT_LT(fc.t - SteadyTime{}, 1s);
  EXPECT_TRUE(api.has("abort comm#1"));
}

// The host stuck inside a call (a launch spinning behind a full launch queue, as on an
// H200 when a peer stopped): the monitor thread hands the store's verdict to on_stuck once
// the host has been away for stuck_after. Real time, short intervals.
TEST(WatchdogMonitor, AHostStuckInACallIsEndedWithTheStoresVerdict) {
  FakeGpuApi api;
  Checker check(api, 2);
  std::promise<std::string> said;
  std::atomic<int> calls{0};
  std::atomic<bool> failed{false};
  WatchdogOptions opt{.timeout = 60s, .poll = 10ms};
  opt.job_poll = 5ms;
  opt.stuck_after = 500ms;  // far above the 10 ms between the host's returns below, even on a loaded machine
  opt.job_failed = [&] { return failed ? std::string("rank 1 stopped answering for 5 s") : std::string(); };
  opt.on_stuck = [&](const std::string& msg) {
    if (calls++ == 0) said.set_value(msg);
  };
  Watchdog dog(check, opt);
  dog.start_monitor("setup");
  // While the host keeps coming back, even a failed run is left to wait() and the calls.
  dog.host_at("op 'x' (#1 of role 0)");
  failed = true;
  for (int i = 0; i < 60; ++i) {
    dog.host_at("op 'x' (#1 of role 0)");
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(calls, 0);
  // Now the host "blocks" in op #2's launch.
  dog.host_at("op 'dp.allreduce' (#2 of role 0)");
  auto f = said.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  const std::string msg = f.get();
  EXPECT_TRUE(msg.starts_with(
      "backend cuda: rank 2: op 'dp.allreduce' (#2 of role 0): stopped: the run failed: rank 1 stopped answering for 5 "
      "s; this rank's host was inside a CUDA/NCCL call for "))
      << msg;
  EXPECT_TRUE(contains(msg, "so it ends without aborting NCCL")) << msg;
  std::this_thread::sleep_for(30ms);
  EXPECT_EQ(calls, 1);  // once: on_stuck ends the process in meshsim
}

// No verdict: the monitor waits for the whole timeout before it calls the host stuck.
TEST(WatchdogMonitor, WithoutAVerdictOnlyTheTimeoutEndsAStuckHost) {
  FakeGpuApi api;
  Checker check(api, 0);
  std::promise<std::string> said;
  WatchdogOptions opt{.timeout = 300ms, .poll = 10ms};
  opt.job_poll = 5ms;
  opt.stuck_after = 20ms;
  opt.job_failed = [] { return std::string(); };
  opt.on_stuck = [&](const std::string& msg) { said.set_value(msg); };
  const auto t0 = std::chrono::steady_clock::now();
  Watchdog dog(check, opt);
  dog.start_monitor("setup: NCCL communicators");
  auto f = said.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 300ms);
  const std::string msg = f.get();
  EXPECT_TRUE(msg.starts_with("backend cuda: rank 0: setup: NCCL communicators: timed out: no return from it for "))
      << msg;
}

// Without on_stuck there is no monitor (the executor's tests, calibrate's own runs).
TEST(WatchdogMonitor, NoOnStuckNoThread) {
  FakeGpuApi api;
  Checker check(api, 0);
  WatchdogOptions opt{.timeout = 1ms};
  opt.job_failed = [] { return std::string("dead"); };
  Watchdog dog(check, opt);
  dog.start_monitor("setup");
  std::this_thread::sleep_for(20ms);  // a monitor would have had to call the missing on_stuck
  SUCCEED();
}

TEST(Watchdog, InProgressIsNotAnError) {
  FakeGpuApi api;
  api.events_finish = false;
  api.async_error = 7;  // ncclInProgress
  Checker check(api, 0);
  ASSERT_NO_FATAL_FAILURE(add_world(api, check, 2));
  FakeClock fc;
  Watchdog dog(check, {.timeout = 50ms, .poll = 10ms}, fc.clock());
  EXPECT_TRUE(contains(error_of([&] { dog.wait(nullptr, "op 'x'"); }), "timed out"));
}

TEST(Watchdog, TimesOutWithoutProgressAndAborts) {
  FakeGpuApi api;
  api.events_finish = false;
  Checker check(api, 1);
  ASSERT_NO_FATAL_FAILURE(add_world(api, check, 2));
  FakeClock fc;
  Watchdog dog(check, {.timeout = 100ms, .poll = 30ms}, fc.clock());
  const std::string msg = error_of([&] { dog.wait(nullptr, "op 'pp.send' (#3 of role 0)"); });
  EXPECT_TRUE(contains(msg, "rank 1: op 'pp.send' (#3 of role 0): timed out: no progress for 120 ms")) << msg;
  EXPECT_TRUE(contains(msg, "NCCL communicators aborted"));
  EXPECT_TRUE(api.has("abort comm#1"));
  EXPECT_EQ(api.count("query"), 5);  // at 0, 30, 60, 90, 120 ms
}

TEST(Watchdog, ProgressRestartsTheDeadline) {
  FakeGpuApi api;
  Checker check(api, 0);
  FakeClock fc;
  Watchdog dog(check, {.timeout = 100ms, .poll = 1ms}, fc.clock());
  for (int i = 0; i < 5; ++i) {  // 5 x 60 ms of host work, each under the timeout
    fc.t += 60ms;
    dog.wait(nullptr, "op");
  }
  fc.t += 60ms;
  dog.progress();
  api.events_finish = false;
  fc.t += 60ms;
  EXPECT_TRUE(contains(error_of([&] { dog.wait(nullptr, "op 'late'"); }), "no progress for 100 ms"));
}

TEST(Watchdog, FailedQueryIsAnErrorNamingTheOp) {
  FakeGpuApi api;
  api.fail("query", 700);
  Checker check(api, 4);
  FakeClock fc;
  Watchdog dog(check, {}, fc.clock());
  EXPECT_EQ(error_of([&] { dog.wait(nullptr, "op 'mlp.fc2' (#9 of role 0)"); }),
            "backend cuda: rank 4: op 'mlp.fc2' (#9 of role 0): cudaEventQuery failed: CUDA error 700 (fake CUDA error "
            "700)");
}

TEST(LocalDevice, LauncherLocalRankElseGlobalRankModuloDevices) {
  std::map<std::string, std::string> env;
  auto get = [&](const char* v) -> const char* {
    auto it = env.find(v);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  EXPECT_EQ(local_device(11, 8, get), 3);  // no launcher variable: rank 11 mod 8
  env["SLURM_LOCALID"] = "2";
  EXPECT_EQ(local_device(11, 8, get), 2);
  env["LOCAL_RANK"] = "5";  // torchrun's wins
  EXPECT_EQ(local_device(11, 8, get), 5);
  env["LOCAL_RANK"] = "x";  // not a number: skipped
  EXPECT_EQ(local_device(11, 8, get), 2);
  EXPECT_EQ(local_device(3, 0, get), 0);
}

}  // namespace
}  // namespace meshsim::cuda
