#include "sim/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace meshsim {
namespace {

struct Recorder : EventHandler {
  Engine* eng = nullptr;
  std::vector<std::pair<std::int64_t, std::uint64_t>> seen;
  std::vector<std::int64_t> instants;
  void handle(const Event& e) override {
    seen.emplace_back(e.time.ps(), e.payload);
    if (e.payload == 100) eng->schedule(eng->now(), this, 0, 101);  // same-instant follow-up
  }
  void end_of_instant(Time now) override { instants.push_back(now.ps()); }
};

TEST(Engine, OrdersByTimeThenSequence) {
  Engine eng;
  Recorder r;
  r.eng = &eng;
  eng.add_handler(&r);
  eng.schedule(ps(30), &r, 0, 3);
  eng.schedule(ps(10), &r, 0, 1);
  eng.schedule(ps(10), &r, 0, 2);  // same time: after payload 1 (scheduled later)
  eng.schedule(ps(20), &r, 0, 100);
  EXPECT_EQ(eng.run().ps(), 30);
  const std::vector<std::pair<std::int64_t, std::uint64_t>> want = {{10, 1}, {10, 2}, {20, 100}, {20, 101}, {30, 3}};
  EXPECT_EQ(r.seen, want);
  // Once at the start (work queued before run), then one per instant: the follow-up at
  // t=20 was scheduled by a handler before that instant ended, so it shares its instant.
  const std::vector<std::int64_t> inst = {0, 10, 20, 30};
  EXPECT_EQ(r.instants, inst);
}

TEST(Engine, TwoEnginesAreIndependent) {
  Engine a, b;
  Recorder ra, rb;
  ra.eng = &a;
  rb.eng = &b;
  a.schedule(ps(5), &ra, 0, 1);
  b.schedule(ps(7), &rb, 0, 2);
  EXPECT_EQ(a.run().ps(), 5);
  EXPECT_EQ(b.run().ps(), 7);
  EXPECT_EQ(ra.seen.size(), 1u);
  EXPECT_EQ(rb.seen.size(), 1u);
}

// Many events, most times shared by several, some scheduled while the run is under way and
// some moved later by shift_pending: they run in the order of a stable sort by time of the
// order they were scheduled in (the reference here), whatever the queue's shape.
struct Spawner : EventHandler {
  Engine* eng = nullptr;
  std::mt19937_64 rng{9};
  std::vector<std::pair<std::int64_t, std::uint64_t>> seen, scheduled;  // (time, payload)
  std::uint64_t next = 0;
  void add(std::int64_t at) {
    scheduled.emplace_back(at, next);
    eng->schedule(ps(at), this, 0, next++);
  }
  void handle(const Event& e) override {
    seen.emplace_back(e.time.ps(), e.payload);
    if (next < 20000 && e.payload % 3 == 0)
      for (int i = 0; i < 2; ++i) add(e.time.ps() + static_cast<std::int64_t>(rng() % 50));
  }
};

TEST(Engine, ManyEventsRunInTimeThenScheduleOrder) {
  Engine eng;
  Spawner s;
  s.eng = &eng;
  for (int i = 0; i < 5000; ++i) s.add(static_cast<std::int64_t>(s.rng() % 400));
  eng.shift_pending(ps(1000));  // every pending event 1000 ps later, order kept
  for (auto& [t, p] : s.scheduled) t += 1000;
  eng.run();
  // Reference: events added during the run are ordered among those pending by the same rule,
  // so a stable sort by time of everything in scheduling order is the run order.
  auto want = s.scheduled;
  std::stable_sort(want.begin(), want.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  ASSERT_GT(s.seen.size(), 10000u);
  EXPECT_EQ(s.seen, want);
}

}  // namespace
}  // namespace meshsim
