// Machine profiles: what `meshsim calibrate` measures on real hardware, in one YAML file
// that `meshsim simulate --profile FILE` reads (format: docs/profile.md).
//
//   version: 1
//   gpu: {preset: h100, memory_bandwidth: 3.1TB/s, launch_overhead: 3us}
//   memory_efficiency: {norm: 0.8, optimizer: 0.75}
//   gemm:
//     - {m: 8192, n: 8192, k: 8192, dtype: bf16, achieved: 760TFLOP/s}
//   collectives:
//     - {kind: allreduce, ranks: 8, alpha: 12us, bandwidth: 180GB/s}
//
//   MachineProfile p = load_machine_profile("examples/profiles/h100-example.yaml");
//   ComputeModel model(p.gpu, p.compute);
//
// Every problem (missing file, malformed YAML, unknown key, unit typo, negative or
// out-of-range value) throws one meshsim::Error naming the file, line and field.
#pragma once

#include <string>
#include <vector>

#include "core/units.h"
#include "schedule/collective.h"
#include "sim/compute_model.h"

namespace meshsim {

// A measured collective: time(bytes) = alpha + bytes / bandwidth for groups of `ranks`
// ranks (bytes = the collective's buffer size, as `meshsim collective --bytes`). The
// simulator times every collective op of that kind and group size with it
// (ScheduleSimOptions::measured); `algorithm` says which one was measured (optional).
struct CollectiveProfile {
  CollKind kind = CollKind::AllReduce;
  int ranks = 0;
  Time alpha;
  Bandwidth bandwidth;
  std::string algorithm;
  Time time(Bytes bytes) const { return alpha + transfer_time(bytes, bandwidth); }
};

// Least-squares fit of seconds = alpha + bytes / bandwidth to measured (bytes, seconds)
// points. alpha is kept >= 0: a negative intercept (noise on a mostly bandwidth-bound
// sweep) is refitted through the origin. Needs two distinct sizes and a positive slope;
// `what` names the measurement in the error otherwise.
struct AlphaBandwidth {
  double alpha_s = 0;
  double bytes_per_s = 0;
};
AlphaBandwidth fit_alpha_bandwidth(const std::vector<std::pair<double, double>>& points, const std::string& what);

struct MachineProfile {
  std::string source;       // file name (or the name given to parse_machine_profile)
  std::string description;  // free text, optional
  GpuSpec gpu;
  ComputeOverrides compute;
  std::vector<CollectiveProfile> collectives;
};

MachineProfile parse_machine_profile(const std::string& text, const std::string& source_name);
MachineProfile load_machine_profile(const std::string& path);

// The profile as YAML in the format above (every figure written out, no preset), so that
// parse_machine_profile(format_machine_profile(p)) gives p back (rates to 6 significant
// digits). `meshsim calibrate` writes its measurements with it.
std::string format_machine_profile(const MachineProfile& profile);

}  // namespace meshsim
