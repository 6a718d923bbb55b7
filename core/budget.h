// A wall-clock and memory budget for one command, and a word on stderr while it runs long
// (issue 40 item 5).
//
//   budget::start(60, 4ull << 30);           // meshsim ... --max-seconds 60 --max-memory 4GiB (0: no limit)
//   for (...) budget::tick(now_s, events);   // in the long loops: the event engine, a sweep
//   budget::tick_work("routing GPU pairs", n);  // in work before the clock runs
//
// tick() is cheap (it reads the clock once in 256 calls, the resident memory at most every
// 100 ms). Past either budget it throws BudgetError, one line naming the budget, how far the
// run got and what to change; the command
// then exits 2 having written nothing (outputs are written after the run). While stderr is a
// terminal it also prints, every 10 s after the first 5, how long the run has taken and how far
// it is (scripts and CI logs, whose stderr is no terminal, get nothing). Process-wide; safe from
// the threads of a sweep.
#pragma once

#include <cstdint>

#include "core/error.h"

namespace meshsim {

class BudgetError : public Error {
 public:
  using Error::Error;
};

namespace budget {

// From now, for max_seconds of wall-clock time (0: no limit; at most a day) and max_memory bytes
// of resident memory of this process (0: no limit; the checks see what the long loops reach, so
// a run may pass it by what it allocates between two checks).
void start(double max_seconds, std::uint64_t max_memory = 0);
// This process's resident memory (/proc/self/statm), bytes; 0 where it cannot be read.
std::uint64_t resident_bytes();
// Where the run is: simulated seconds reached and events processed (by this loop). Inline:
// the event engine calls it per event, and 255 calls in 256 only count.
void check_clock(double simulated_s, std::uint64_t events);
inline void tick(double simulated_s, std::uint64_t events) {
  thread_local unsigned calls = 0;
  if ((++calls & 0xff) == 0) check_clock(simulated_s, events);
}
// The same for work before the simulated clock runs (routing a group's GPU pairs, summing an
// all-to-all's loads): `what` names it in the message, `done` counts its steps.
void check_work(const char* what, std::uint64_t done);
inline void tick_work(const char* what, std::uint64_t done) {
  thread_local unsigned calls = 0;
  if ((++calls & 0xff) == 0) check_work(what, done);
}

}  // namespace budget
}  // namespace meshsim
