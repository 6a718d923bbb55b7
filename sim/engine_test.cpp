#include "sim/engine.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace meshsim
