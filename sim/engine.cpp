#include "sim/engine.h"

#include <fmt/format.h>

#include "core/budget.h"
#include "core/error.h"

namespace meshsim {

void Engine::schedule(Time at, EventHandler* h, std::uint32_t kind, std::uint64_t payload) {
  if (at.ps() > kMaxTimePs)  // durations are checked; only their sum can get here
    throw TimeRangeError(
        fmt::format("the simulated timeline passes meshsim's range (53 days) at {} s; the sizes of the input "
                    "are out of proportion",
                    at.seconds()));
  MESHSIM_ASSERT(at >= now_);
  queue_.push(Event{at, seq_++, h, kind, payload});
}

void Engine::shift_pending(Time delta) {
  std::vector<Event> pending;
  pending.reserve(queue_.size());
  while (!queue_.empty()) {
    pending.push_back(queue_.top());
    queue_.pop();
  }
  for (Event& e : pending) {
    e.time += delta;
    queue_.push(e);
  }
}

Time Engine::run() {
  // Settle work queued before run() (e.g. flows started at time zero).
  for (EventHandler* h : instant_handlers_) h->end_of_instant(now_);
  while (!queue_.empty()) {
    now_ = queue_.top().time;
    // Drain this instant, including events that end_of_instant adds at the same time.
    while (!queue_.empty() && queue_.top().time == now_) {
      while (!queue_.empty() && queue_.top().time == now_) {
        const Event e = queue_.top();
        queue_.pop();
        ++processed_;
        e.handler->handle(e);
        budget::tick(now_.seconds(), processed_);  // --max-seconds; a word on a terminal's stderr
      }
      for (EventHandler* h : instant_handlers_) h->end_of_instant(now_);
    }
  }
  return now_;
}

}  // namespace meshsim
