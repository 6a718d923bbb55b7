// Trace assembly from CUDA-event times (see event_trace.h).
#include "backend/cuda/event_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace meshsim::cuda {

Time ms_to_time(float ms) {
  const double ps = static_cast<double>(ms) * 1e9;
  if (!(ps > 0)) return Time::from_ps(0);  // negative, zero or NaN
  return Time::from_ps(std::llround(ps));
}

Trace assemble_trace(int role, int rank, const std::vector<OpTiming>& timings) {
  std::vector<OpTiming> sorted = timings;
  std::sort(sorted.begin(), sorted.end(), [](const OpTiming& a, const OpTiming& b) { return a.op < b.op; });
  Trace t;
  t.source = "cuda";
  t.events.reserve(sorted.size());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (i > 0 && sorted[i].op == sorted[i - 1].op)
      throw Error(fmt::format("backend cuda: rank {}: op {} was timed twice", rank, sorted[i].op));
    const Time start = ms_to_time(sorted[i].start_ms);
    const Time end = std::max(start, ms_to_time(sorted[i].end_ms));
    t.events.push_back({role, sorted[i].op, rank, start, end});
  }
  return t;
}

}  // namespace meshsim::cuda
