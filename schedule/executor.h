// The Executor contract: every backend turns a Schedule into a Trace with the same op ids.
// The sim backend times the schedule on a modeled cluster; the cpu backend runs it over
// real sockets (backend/cpu); the cuda backend on GPUs. Reporters compare Traces and never
// see which executor made them.
//
//   std::unique_ptr<Executor> ex = ...;            // SimExecutor, CpuExecutor, ...
//   Trace t = ex->execute(schedule);                // t.events[i] = {role, op, rank, start, end}
#pragma once

#include <string>

#include "schedule/ir.h"

namespace meshsim {

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string name() const = 0;  // "sim:formula", "sim:flow", "cpu", "cuda"
  virtual Trace execute(const Schedule& schedule) = 0;
};

}  // namespace meshsim
