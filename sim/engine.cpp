#include "sim/engine.h"

#include <fmt/format.h>

#include <algorithm>

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

void Engine::shift_pending(Time delta) { queue_.shift(delta); }

void Engine::Queue::push(const Event& e) {
  std::size_t i = v_.size();
  v_.push_back(e);
  while (i > 0) {
    const std::size_t parent = (i - 1) / 4;
    if (!before(e, v_[parent])) break;
    v_[i] = v_[parent];
    i = parent;
  }
  v_[i] = e;
}

void Engine::Queue::pop() {
  const Event last = v_.back();
  v_.pop_back();
  const std::size_t n = v_.size();
  if (n == 0) return;
  std::size_t i = 0;
  for (;;) {
    const std::size_t first = 4 * i + 1;
    if (first >= n) break;
    std::size_t best = first;
    const std::size_t end = std::min(first + 4, n);
    for (std::size_t c = first + 1; c < end; ++c)
      if (before(v_[c], v_[best])) best = c;
    if (!before(v_[best], last)) break;
    v_[i] = v_[best];
    i = best;
  }
  v_[i] = last;
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
