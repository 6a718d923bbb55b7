// Checker and Watchdog (see check.h).
#include "backend/cuda/check.h"

#include <fmt/format.h>

#include <thread>

#include "core/error.h"

namespace meshsim::cuda {

void Checker::check(Lib lib, int status, std::string_view call, std::string_view op) {
  if (status == 0) return;
  fail(op, fmt::format("{} failed: {} error {} ({})", call, to_string(lib), status, api_.error_string(lib, status)));
}

void Checker::abort_comms() {
  if (aborted_) return;
  aborted_ = true;
  for (CommH c : comms_)
    if (c != nullptr) (void)api_.comm_abort(c);  // best effort: we are already failing
}

void Checker::fail(std::string_view op, const std::string& what) {
  const bool had_comms = !comms_.empty() && !aborted_;
  abort_comms();
  throw Error(
      fmt::format("backend cuda: rank {}: {}: {}{}", rank_, op, what, had_comms ? "; NCCL communicators aborted" : ""));
}

Watchdog::Watchdog(Checker& check, WatchdogOptions options, WatchClock clock)
    : check_(check),
      opt_(std::move(options)),
      clock_(std::move(clock)),
      last_progress_(clock_.now()),
      last_job_poll_(last_progress_) {}

Watchdog::~Watchdog() {
  if (!monitor_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  monitor_.join();
}

void Watchdog::progress() { last_progress_ = clock_.now(); }

void Watchdog::tick() {
  host_tick_.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_relaxed);
}

void Watchdog::host_at(std::string_view op) {
  tick();
  if (!monitor_.joinable()) return;
  std::lock_guard<std::mutex> lock(m_);
  host_op_.assign(op);
}

void Watchdog::start_monitor(std::string_view op) {
  if (!opt_.on_stuck || monitor_.joinable()) return;
  host_op_.assign(op);
  tick();
  monitor_ = std::thread([this] { monitor_loop(); });
}

// Every job_poll: if the host has not come back from a call for stuck_after, the store's
// verdict (or, with none, no return for `timeout`) ends the rank through on_stuck. While the
// host returns, wait() and the failing calls report with the communicators aborted instead.
void Watchdog::monitor_loop() {
  using std::chrono::steady_clock;
  const std::string rank = std::to_string(check_.rank());
  std::unique_lock<std::mutex> lock(m_);
  while (!cv_.wait_for(lock, opt_.job_poll, [this] { return stop_; })) {
    const auto away = steady_clock::now() -
                      steady_clock::time_point(steady_clock::duration(host_tick_.load(std::memory_order_relaxed)));
    if (away < opt_.stuck_after) continue;
    std::string why = opt_.job_failed ? opt_.job_failed() : std::string();
    if (why.empty() && away >= opt_.timeout)
      why = fmt::format(
          "timed out: no return from it for {} ms (a peer may have failed or be stuck; raise --timeout "
          "if a call really takes this long)",
          std::chrono::duration_cast<std::chrono::milliseconds>(away).count());
    else if (!why.empty())
      why = "stopped: the run failed: " + why;
    if (why.empty()) continue;
    const std::string msg = fmt::format(
        "backend cuda: rank {}: {}: {}; this rank's host was inside a CUDA/NCCL call for {} ms, so it ends "
        "without aborting NCCL",
        rank, host_op_, why, std::chrono::duration_cast<std::chrono::milliseconds>(away).count());
    lock.unlock();
    opt_.on_stuck(msg);
    return;
  }
}

void Watchdog::poll_comms(std::string_view op) {
  for (CommH c : check_.comms()) {
    int async = 0;
    check_.nccl(check_.api().comm_get_async_error(c, &async), "ncclCommGetAsyncError", op);
    // ncclInProgress (7) is not an error: a non-blocking call is still being set up.
    if (async != 0 && async != 7)
      check_.fail(op, fmt::format("asynchronous NCCL error {} ({}) while waiting for the op", async,
                                  check_.api().error_string(Lib::Nccl, async)));
  }
}

void Watchdog::wait(EventH event, std::string_view op) {
  for (;;) {
    tick();
    bool done = false;
    check_.cuda(check_.api().event_query(event, &done), "cudaEventQuery", op);
    if (done) {
      progress();
      return;
    }
    poll_comms(op);
    if (opt_.job_failed && clock_.now() - last_job_poll_ >= opt_.job_poll) {
      last_job_poll_ = clock_.now();
      const std::string why = opt_.job_failed();
      if (!why.empty()) check_.fail(op, "stopped: the run failed: " + why);
    }
    const auto waited = clock_.now() - last_progress_;
    if (waited >= opt_.timeout)
      check_.fail(op, fmt::format("timed out: no progress for {} ms (a peer may have failed or be stuck; "
                                  "raise --timeout if ops really take this long)",
                                  std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()));
    if (clock_.sleep)
      clock_.sleep(opt_.poll);
    else
      std::this_thread::sleep_for(opt_.poll);
  }
}

}  // namespace meshsim::cuda
