#include "backend/cuda/event_trace.h"

#include <gtest/gtest.h>

#include "core/test_util.h"

namespace meshsim::cuda {
namespace {

TEST(EventTrace, MillisecondsBecomeRoundedPicoseconds) {
  EXPECT_EQ(ms_to_time(1.25f).ps(), 1'250'000'000);  // exact in binary
  EXPECT_EQ(ms_to_time(0.0f).ps(), 0);
  EXPECT_EQ(ms_to_time(-0.0005f).ps(), 0);  // below the start: event resolution
  // 0.1f is 0.100000001490116... ms: the nearest picosecond of the float's exact value.
  EXPECT_EQ(ms_to_time(0.1f).ps(), 100'000'001);
  // 2e-9f ms is 1.99999994 ps: rounded to nearest, not truncated.
  EXPECT_EQ(ms_to_time(2e-9f).ps(), 2);
}

TEST(EventTrace, EventsInOpOrderWithRoleRankAndSource) {
  const std::vector<OpTiming> t = {{2, 1.0f, 1.5f}, {0, 0.0f, 0.25f}, {1, 0.25f, 0.125f}};
  const Trace tr = assemble_trace(1, 5, t);
  EXPECT_EQ(tr.source, "cuda");
  ASSERT_EQ(tr.events.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(tr.events[static_cast<std::size_t>(i)].op, i);
    EXPECT_EQ(tr.events[static_cast<std::size_t>(i)].role, 1);
    EXPECT_EQ(tr.events[static_cast<std::size_t>(i)].rank, 5);
  }
  EXPECT_EQ(tr.events[0].end.ps(), 250'000'000);
  EXPECT_EQ(tr.events[2].start.ps(), 1'000'000'000);
  EXPECT_EQ(tr.events[2].end.ps(), 1'500'000'000);
  // An end before its start (event resolution) is clamped to the start.
  EXPECT_EQ(tr.events[1].start.ps(), 250'000'000);
  EXPECT_EQ(tr.events[1].end.ps(), 250'000'000);
  // Deterministic: the same floats give the same trace.
  const Trace again = assemble_trace(1, 5, t);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(again.events[i].end, tr.events[i].end);
}

TEST(EventTrace, AnOpTimedTwiceIsAnError) {
  EXPECT_TRUE(testing_util::contains(testing_util::error_of([] {
                                       assemble_trace(0, 2, {{4, 0, 1}, {4, 1, 2}});
                                     }),
                                     "rank 2: op 4 was timed twice"));
}

}  // namespace
}  // namespace meshsim::cuda
