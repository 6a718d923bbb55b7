// The discrete-event engine: a simulated clock and an event queue.
//
// Time is an integer count of picoseconds; events are ordered by (time, sequence
// number), so two runs of the same input process events in the same order. The engine
// is an object: several simulations can run in one process (sweeps run many at once).
//
// Events carry two integer payloads and go to an EventHandler. After all events of
// one instant have run, every handler's end_of_instant() is called (in registration
// order, and once when run() starts, for work queued before it): resource models use it to re-solve state once per
// instant instead of once per event (e.g. the flow model recomputes bandwidth shares once when 1024 flows start
// together). end_of_instant may schedule events at the same instant; they run next.
//
//   Engine eng;
//   eng.add_handler(&net);                      // gets end_of_instant calls
//   eng.schedule(us(1), &net, kind, id);
//   eng.run();                                  // until the queue is empty
//   eng.now();                                  // time of the last event
#pragma once

#include <cstdint>
#include <vector>

#include "core/units.h"

namespace meshsim {

struct Event {
  Time time;
  std::uint64_t seq = 0;
  class EventHandler* handler = nullptr;
  std::uint32_t kind = 0;
  std::uint64_t payload = 0;
};

class EventHandler {
 public:
  virtual ~EventHandler() = default;
  virtual void handle(const Event& e) = 0;
  virtual void end_of_instant(Time /*now*/) {}
};

class Engine {
 public:
  Time now() const { return now_; }
  // Schedules an event; `at` must not be in the past.
  void schedule(Time at, EventHandler* h, std::uint32_t kind, std::uint64_t payload);
  // Handlers whose end_of_instant() runs after each instant.
  void add_handler(EventHandler* h) { instant_handlers_.push_back(h); }
  // Runs until no events remain. Returns the time of the last event.
  Time run();
  std::uint64_t events_processed() const { return processed_; }
  // Moves every pending event `delta` later, keeping their order (fast-forward).
  void shift_pending(Time delta);

 private:
  // A 4-ary min-heap on (time, seq): half the depth of a binary heap, and a node's children
  // side by side, for the millions of pending drains of a large flow run. (time, seq) is a
  // total order, so events pop in the same order whatever the heap's shape.
  class Queue {
   public:
    bool empty() const { return v_.empty(); }
    std::size_t size() const { return v_.size(); }
    const Event& top() const { return v_.front(); }
    void push(const Event& e);
    void pop();
    // Every event `delta` later: the order is unchanged, so the heap stays one.
    void shift(Time delta) {
      for (Event& e : v_) e.time += delta;
    }

   private:
    static bool before(const Event& a, const Event& b) { return a.time != b.time ? a.time < b.time : a.seq < b.seq; }
    std::vector<Event> v_;
  };
  Queue queue_;
  std::vector<EventHandler*> instant_handlers_;
  Time now_;
  std::uint64_t seq_ = 0;
  std::uint64_t processed_ = 0;
};

}  // namespace meshsim
