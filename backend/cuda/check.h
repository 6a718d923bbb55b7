// Where CUDA, NCCL and cuBLAS statuses become meshsim::Error: the only place in the cuda
// backend that reads a library status code, so no code leaks out of backend/cuda.
//
//   Checker check(api, /*rank=*/3);
//   check.add_comm(world);                               // aborted when anything fails
//   check.nccl(api.send(buf, n, 1, world, s), "ncclSend", "op 'tp.allreduce' (#17 of role 0)");
//   // on failure: Error("backend cuda: rank 3: op 'tp.allreduce' (#17 of role 0): ncclSend failed:
//   //   NCCL error 2 (unhandled system error); NCCL communicators aborted"), every added
//   //   communicator aborted first
//
// Watchdog: the host never blocks in a CUDA call that may wait on a peer. It polls an
// event (cudaEventQuery) and, between polls, every communicator's asynchronous error
// (ncclCommGetAsyncError). An asynchronous error, or no finished op for `timeout`, aborts
// the communicators (ncclCommAbort, which also releases the kernels waiting on peers) and
// throws an Error naming the rank and the op that did not finish.
//
//   Watchdog dog(check, {.timeout = 120s});
//   dog.wait(end_event_of_op, "op 'dp.allreduce' (#40 of role 0)");   // returns when it is done
//
// The host can also block inside a CUDA or NCCL call, where wait() never runs: on an H200,
// 4 ranks with thousands of ops issued ahead spun in the launch call once the launch queue
// was full behind an NCCL kernel waiting on a stopped peer (docs/validation/gpu-h200.md,
// peer failure); ncclCommInitRank waits for every rank. A monitor thread (start_monitor,
// with `on_stuck` set) covers that: once the host has not come back from a call for
// `stuck_after`, the store's verdict, or `timeout` with no return at all, hands the one-line
// error to on_stuck, which ends the rank (the communicators cannot be aborted safely from
// another thread while the host is inside them).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "backend/cuda/gpu_api.h"

namespace meshsim::cuda {

class Checker {
 public:
  Checker(GpuApi& api, int rank) : api_(api), rank_(rank) {}
  // Communicators to abort when a call fails (so peers blocked on this rank are released).
  void add_comm(CommH comm) { comms_.push_back(comm); }
  const std::vector<CommH>& comms() const { return comms_; }

  // Throw Error (after aborting the communicators) unless status is success.
  // `call` is the library function, `op` where it happened: "op 'name' (#i of role r)", "setup", ...
  void check(Lib lib, int status, std::string_view call, std::string_view op);
  void cuda(int status, std::string_view call, std::string_view op) { check(Lib::Cuda, status, call, op); }
  void nccl(int status, std::string_view call, std::string_view op) { check(Lib::Nccl, status, call, op); }
  void cublas(int status, std::string_view call, std::string_view op) { check(Lib::Cublas, status, call, op); }

  // Aborts every added communicator once (later calls do nothing); statuses ignored.
  void abort_comms();
  bool aborted() const { return aborted_; }
  // Throws Error naming the rank and op, after aborting; `what` is the cause in words.
  [[noreturn]] void fail(std::string_view op, const std::string& what);

  int rank() const { return rank_; }
  GpuApi& api() { return api_; }

 private:
  GpuApi& api_;
  int rank_;
  std::vector<CommH> comms_;
  bool aborted_ = false;
};

using SteadyTime = std::chrono::steady_clock::time_point;

struct WatchdogOptions {
  std::chrono::milliseconds timeout{120'000};  // no op finished for this long: abort
  std::chrono::microseconds poll{50};          // sleep between polls
  // The store's verdict on the run (RendezvousClient::failure_probe(): empty while it goes
  // on), asked every `job_poll` while waiting: a peer the store saw die or stop aborts the
  // communicators at once instead of after `timeout`. Unset: not asked.
  std::function<std::string()> job_failed{};
  std::chrono::milliseconds job_poll{100};
  // The monitor (start_monitor): the message of a rank whose host is stuck inside a call;
  // it must end the process (make_executor's prints meshsim's one-line error and exits 2).
  // Unset: no monitor.
  std::function<void(const std::string&)> on_stuck{};
  std::chrono::milliseconds stuck_after{1000};  // no return from a call for this long: stuck
};

// The watchdog's view of time: real by default, a fake clock in tests.
struct WatchClock {
  std::function<SteadyTime()> now = [] { return std::chrono::steady_clock::now(); };
  std::function<void(std::chrono::microseconds)> sleep;  // empty: std::this_thread::sleep_for
};

class Watchdog {
 public:
  Watchdog(Checker& check, WatchdogOptions options, WatchClock clock = {});
  ~Watchdog();  // stops the monitor
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  // Blocks until `event` has completed. Throws Error (communicators aborted) on an
  // asynchronous NCCL error, a failed query, or when `timeout` passes without progress
  // (progress = a wait that returned; the first wait counts from construction).
  void wait(EventH event, std::string_view op);
  // Restart the no-progress deadline (after host work that is not the GPU's fault).
  void progress();

  // Starts the monitor thread when options.on_stuck is set (real time, not WatchClock's);
  // it runs until the Watchdog is destroyed. `op` names where the host is until host_at.
  void start_monitor(std::string_view op);
  // The host is back from the libraries and about to call into them for `op` (the name the
  // monitor's message gives). wait() counts as being back on each of its polls.
  void host_at(std::string_view op);

 private:
  void poll_comms(std::string_view op);
  void tick();
  void monitor_loop();
  Checker& check_;
  WatchdogOptions opt_;
  WatchClock clock_;
  SteadyTime last_progress_;
  SteadyTime last_job_poll_;
  // The monitor: the host's last return (steady_clock ticks), where it is, and the thread.
  std::atomic<std::int64_t> host_tick_{0};
  std::mutex m_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::string host_op_;
  std::thread monitor_;
};

}  // namespace meshsim::cuda
