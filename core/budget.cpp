#include "core/budget.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>

#include "core/units.h"

namespace meshsim::budget {

namespace {
using Clock = std::chrono::steady_clock;
constexpr std::int64_t kFirstWordNs = 5'000'000'000, kWordEveryNs = 10'000'000'000;
constexpr std::int64_t kMemoryEveryNs = 100'000'000;
std::atomic<std::int64_t> g_start{0}, g_deadline{0}, g_next_word{0};  // Clock ns; deadline 0: none
std::atomic<std::int64_t> g_next_memory{0};                           // Clock ns of the next memory check
std::atomic<std::uint64_t> g_max_memory{0};                           // bytes; 0: none
std::atomic<bool> g_words{false};

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

}  // namespace

std::uint64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::uint64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

void start(double max_seconds, std::uint64_t max_memory) {
  if (!(max_seconds >= 0) || max_seconds > 86400)
    throw Error(fmt::format("--max-seconds: {} is not in 0..86400 (0: no limit)", max_seconds));
  const std::int64_t now = now_ns();
  g_max_memory = max_memory;
  g_next_memory = now;
  g_start = now;
  g_deadline = max_seconds > 0 ? now + static_cast<std::int64_t>(max_seconds * 1e9) : 0;
  g_next_word = now + kFirstWordNs;
  g_words = ::isatty(STDERR_FILENO) == 1;
}

namespace {

// The checks of check_clock and check_work; `where` says how far the run got ("at 0.5 s of
// simulated time (163 events)"), formatted only when it is said; formula_hint ends the advice
// where a lower fidelity would help.
template <class Where>
void check(const Where& where, const char* formula_hint) {
  if (g_start.load(std::memory_order_relaxed) == 0) return;
  const std::int64_t now = now_ns();
  const double took = static_cast<double>(now - g_start) * 1e-9;
  const std::int64_t deadline = g_deadline.load(std::memory_order_relaxed);
  if (deadline > 0 && now >= deadline)
    throw BudgetError(fmt::format(
        "--max-seconds: stopped after {:.1f} s, the budget, {}; raise --max-seconds{} shrink the run (ranks, "
        "sizes){}",
        took, where(), *formula_hint ? "," : " or", formula_hint));
  const std::uint64_t max_memory = g_max_memory.load(std::memory_order_relaxed);
  std::int64_t check = g_next_memory.load(std::memory_order_relaxed);
  if (max_memory > 0 && now >= check && g_next_memory.compare_exchange_strong(check, now + kMemoryEveryNs)) {
    const std::uint64_t resident = resident_bytes();
    if (resident > max_memory)
      throw BudgetError(fmt::format(
          "--max-memory: stopped at {} resident, past the budget of {}, after {:.1f} s {}; raise --max-memory{} "
          "shrink the run (ranks, sizes){}",
          format_bytes(static_cast<Bytes>(resident >> 20 << 20)), format_bytes(static_cast<Bytes>(max_memory)), took,
          where(), *formula_hint ? "," : " or", formula_hint));
  }
  std::int64_t next = g_next_word.load(std::memory_order_relaxed);
  if (g_words && now >= next && g_next_word.compare_exchange_strong(next, now + kWordEveryNs))
    std::fprintf(stderr, "meshsim: still running after %.0f s (%s)%s\n", took, where().c_str(),
                 deadline > 0 ? "" : "; --max-seconds N stops a run at N s");
}

}  // namespace

void check_clock(double simulated_s, std::uint64_t events) {
  check([&] { return fmt::format("at {:.6g} s of simulated time ({} events)", simulated_s, events); },
        ", or use --fidelity formula");
}

void check_work(const char* what, std::uint64_t done) {
  check([&] { return fmt::format("while {} ({} done)", what, done); }, "");
}

}  // namespace meshsim::budget
