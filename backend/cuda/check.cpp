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

void Watchdog::progress() { last_progress_ = clock_.now(); }

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
