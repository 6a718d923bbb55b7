// The schedule IR: one training iteration as ordered ops per rank role, with streams and
// dependencies. Executors (the sim backend, later the cpu and cuda backends) turn a
// Schedule into a Trace; reporters read Traces.
//
// Symmetry: ranks that run the same program share one op list (a Role). In a training
// layout the role is the pipeline stage: every rank of stage s (all its dp, cp and tp
// coordinates) runs the same ops on its own group, so a 16k-GPU layout with 8 stages
// holds 8 op lists, not 16k. A collective op names the mesh axis of its group
// ("tp", "dp", "row", ...); each rank resolves it to its own group through the placement.
//
//   Schedule s = plan_iteration(model, parallel);          // schedule/plan.h
//   for (const Role& r : s.roles) for (const Op& op : r.ops) ...
//   op.deps: indices of ops of the same role that must finish first
//   Send/Recv: matched across roles by (tag); a Recv finishes when its Send has delivered
//
// Streams: each op runs on one stream of its role; a stream runs its ops one at a time in
// list order; ops on different streams overlap (compute vs DP gradient reduction, say).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/int_vector.h"
#include "core/units.h"
#include "schedule/collective.h"
#include "schedule/kernel.h"
#include "topology/mesh_axis.h"

namespace meshsim {

enum class OpKind { Compute, Collective, Send, Recv };
enum class Phase { Forward, Backward, Recompute, Optimizer };
const char* to_string(OpKind k);
const char* to_string(Phase p);

// Streams of a role. Comm streams are per parallel dimension, as frameworks keep them.
enum class Stream { Compute, Tp, Cp, Ep, Pp, Dp };
inline constexpr int kStreams = 6;
const char* to_string(Stream s);

struct Op {
  OpKind kind = OpKind::Compute;
  Phase phase = Phase::Forward;
  Stream stream = Stream::Compute;
  std::string name;  // "attn.qkv", "mlp.fc1.wgrad", "tp.allreduce", ...
  int layer = -1;    // global layer index, -1 outside layers
  int microbatch = -1;
  // Compute
  Kernel kernel;
  // Collective: kind, bytes (n of docs/math.md section 1), the mesh axis of the group
  // (MeshAxis::tp(), kDp, ..., or several joined: edp+ep) and its size.
  CollKind coll = CollKind::AllReduce;
  Bytes bytes = 0;
  MeshAxis axis;
  int group_size = 1;
  int root = 0;
  double imbalance = 1.0;  // all-to-all: busiest destination receives imbalance x mean
  std::string algorithm;   // collective algorithm by name; empty: the executor's choice (auto)
  // Communication whose kernels take no SMs from the compute beside it, or whose cost in SMs
  // is already charged to that compute (Kernel::sms_reserved): TE userbuffers' ring exchange
  // runs on the copy engines, its pipelined reduce-scatter's SMs are the GEMM's sms_reserved.
  bool holds_no_sms = false;
  // Send/Recv: the peer role (pipeline stage) and a tag unique per message in the schedule.
  int peer = -1;
  std::int64_t tag = -1;
  // Memory: bytes allocated when the op starts, freed when it ends (activation stash).
  Bytes alloc = 0;
  Bytes free = 0;
  std::vector<int> deps;  // ops of the same role
};

// The collective op `op` runs over a group of `ranks` members, as every executor runs it
// (the simulator times it, the cpu and cuda backends execute it): the op's kind and root,
// its bytes cut down to whole elements of `element_bytes` (4 for the float32 data of the
// real backends, 1 for timing), and for an all-to-all with op.imbalance != 1 the skewed
// per-pair sizes (skewed_alltoall). Send/Recv ops are not collectives: use op.bytes.
CollectiveSpec collective_spec(const Op& op, int ranks, Bytes element_bytes);

struct Role {
  std::string name;  // "stage 0"
  int stage = 0;
  IntVector<Op> ops;  // indexed by op id (int); Op::deps name ops of this list
};

struct Schedule {
  IntVector<Role> roles;  // indexed by role (int)
  // Mesh axes, outermost first ("dp", "pp", "cp", "tp"): the mesh the placement maps.
  std::vector<std::pair<std::string, int>> axes;
  MeshAxis pp_axis = MeshAxis::pp();  // the axis roles are cut along (empty when one role)
};

// One executed op, as timed by an executor. rank = -1: the role's representative rank.
struct TraceEvent {
  int role = 0;
  int op = 0;
  int rank = -1;
  Time start, end;
};
struct Trace {
  std::string source;  // "sim:formula", "sim:flow", "cpu", "cuda"
  std::vector<TraceEvent> events;
};

}  // namespace meshsim
