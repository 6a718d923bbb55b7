// The error users can cause: bad files, impossible layouts, unit typos.
//
// One exception type carries a one-line message that names the field (YAML key,
// CLI flag, rank) and says how to fix it. Library code throws it; the CLI catches
// it at the top, prints "meshsim: error: <message>" and exits non-zero.
//
//   throw Error("topology.links[3].bandwidth: '-5GB/s' must be positive; write e.g. 25GB/s");
//
// Broken internal invariants are not Errors: they are assertions (MESHSIM_ASSERT).
#pragma once

#include <stdexcept>
#include <string>

namespace meshsim {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A simulated time that leaves meshsim's range (durations and instants past about 53 days, or
// sums that overflow): still the user's error, which a caller that knows the input's sizes may
// restate naming them.
class TimeRangeError : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void assertion_failed(const char* expr, const char* file, int line);

}  // namespace meshsim

#define MESHSIM_ASSERT(cond) ((cond) ? static_cast<void>(0) : ::meshsim::assertion_failed(#cond, __FILE__, __LINE__))
