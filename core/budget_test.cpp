// The wall-clock budget (core/budget.h): a run past --max-seconds stops with BudgetError
// naming the budget and how far it got; no budget, no stop; a bad budget is refused.
#include "core/budget.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace meshsim {
namespace {

using Clock = std::chrono::steady_clock;

// Ticks as a simulation loop does until the budget stops it or `limit` passes; the seconds taken.
double seconds_until_stopped(std::chrono::milliseconds limit, std::string& message) {
  const auto start = Clock::now();
  try {
    for (std::uint64_t events = 1; Clock::now() - start < limit; ++events) {
      budget::tick(1e-6 * static_cast<double>(events), events);
      if (events % 1000 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  } catch (const BudgetError& e) {
    message = e.what();
  }
  return std::chrono::duration<double>(Clock::now() - start).count();
}

TEST(Budget, ARunPastItsSecondsStopsNamingTheBudget) {
  budget::start(0.2);
  std::string message;
  const double took = seconds_until_stopped(std::chrono::seconds(5), message);
  EXPECT_GE(took, 0.19);
  EXPECT_LT(took, 2.0);
  EXPECT_NE(message.find("--max-seconds: stopped after 0.2 s, the budget"), std::string::npos) << message;
  EXPECT_NE(message.find("events"), std::string::npos) << message;
  budget::start(0);  // no limit: the same loop runs to its end
  message.clear();
  EXPECT_GE(seconds_until_stopped(std::chrono::milliseconds(400), message), 0.39);
  EXPECT_TRUE(message.empty()) << message;
}

// Work before the simulated clock runs (routing a group's pairs) ticks too: the message says
// what it was doing and how far it got, and does not advise the formula fidelity it may be in.
TEST(Budget, WorkBeforeTheClockStopsNamingWhatItDid) {
  budget::start(0.2);
  std::string message;
  const auto start = Clock::now();
  try {
    for (std::uint64_t done = 1; Clock::now() - start < std::chrono::seconds(5); ++done) {
      budget::tick_work("routing pairs", done);
      if (done % 1000 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  } catch (const BudgetError& e) {
    message = e.what();
  }
  budget::start(0);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 2.0);
  EXPECT_NE(message.find("the budget, while routing pairs ("), std::string::npos) << message;
  EXPECT_NE(message.find("done); raise --max-seconds or shrink the run"), std::string::npos) << message;
  EXPECT_EQ(message.find("--fidelity"), std::string::npos) << message;
}

// The memory budget: a loop whose process holds more than --max-memory stops within a check
// (every 0.1 s), naming the budget; the same loop under a budget above what it holds runs on.
TEST(Budget, ARunPastItsMemoryStopsNamingTheBudget) {
  const std::uint64_t resident = budget::resident_bytes();
  ASSERT_GT(resident, 0u);              // Linux: /proc/self/statm
  std::vector<char> held(64 << 20, 1);  // 64 MiB touched: resident
  budget::start(0, budget::resident_bytes() - (32 << 20));
  std::string message;
  const double took = seconds_until_stopped(std::chrono::seconds(5), message);
  EXPECT_LT(took, 1.0);
  EXPECT_NE(message.find("--max-memory: stopped at"), std::string::npos) << message;
  EXPECT_NE(message.find("resident, past the budget of"), std::string::npos) << message;
  budget::start(0, budget::resident_bytes() + (512ull << 20));
  message.clear();
  EXPECT_GE(seconds_until_stopped(std::chrono::milliseconds(300), message), 0.29);
  EXPECT_TRUE(message.empty()) << message;
  EXPECT_EQ(held[12345], 1);
  budget::start(0);
}

TEST(Budget, ABadBudgetIsRefused) {
  for (const double bad : {-1.0, 1e9}) {
    try {
      budget::start(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--max-seconds"), std::string::npos) << e.what();
    }
  }
  budget::start(0);
}

}  // namespace
}  // namespace meshsim
