// Reporting a long run's goodput under failures (sim/goodput.h's estimate_goodput) as
// `meshsim goodput` prints it: a few lines of text, or JSON.
//
//   const GoodputEstimate e = estimate_goodput(scenario, request);
//   std::cout << (json ? goodput_json(e).dump(2) + "\n" : goodput_text(e));
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "sim/goodput.h"

namespace meshsim {

// The MTBF and where it comes from, the checkpoint, the intervals, the goodput (closed form
// and Monte Carlo) and what a failure costs.
std::string goodput_text(const GoodputEstimate& e);
// The same figures at full precision (seconds, bytes, fractions).
nlohmann::ordered_json goodput_json(const GoodputEstimate& e);

}  // namespace meshsim
