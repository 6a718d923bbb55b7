// Reporting an MoE dispatch (sim/moe_dispatch.h) as text and as JSON, with bandwidths on
// the wire and as DeepEP's tests count them. Shared by `meshsim moe-dispatch` and the Python
// package (meshsim.moe_dispatch).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "sim/moe_dispatch.h"

namespace meshsim {

// What the user asked for, echoed in reports.
struct MoeDispatchContext {
  std::string topology;  // preset spec or file
  std::string dtype;     // "fp8" or "bf16"
  Fidelity fidelity = Fidelity::Flow;
  MoeRouting routing;
};

// Several lines: the setting, routing expectations, bytes per GPU, time and bandwidths.
std::string moe_dispatch_text(const MoeDispatchContext& ctx, const MoeDispatchOutcome& out);
nlohmann::ordered_json moe_dispatch_json(const MoeDispatchContext& ctx, const MoeDispatchOutcome& out);

}  // namespace meshsim
