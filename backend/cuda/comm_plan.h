// Which NCCL communicators a rank builds, and with what arguments to ncclCommSplit.
//
// One process per GPU: world rank w is GPU w of the placement (placement.gpu_of(mesh rank)
// == w), so process groups along a mesh axis (Placement::groups_along) are lists of world
// ranks. Every rank creates the world communicator, then splits it once per axis that any
// role's collectives use, in the same order on every rank (ncclCommSplit is collective
// over the world): color = the index of the rank's group along the axis, key = the rank's
// position in the group, which becomes its rank in the new communicator, the same
// group-local rank the step programs use. An axis whose only group is the whole world in
// world order reuses the world communicator (no split).
//
//   dp=2, pp=2, tp=2, natural (mesh rank = world rank, coordinates (dp, pp, tp)):
//     tp groups {0,1} {2,3} {4,5} {6,7}       rank 5: color 2, key 1
//     dp groups {0,4} {1,5} {2,6} {3,7}       rank 5: color 1, key 1
//     rank 5 is on stage 0; its stage-1 peer (pipeline Send/Recv, world communicator) is 7.
//
//   CommPlan plan = plan_comms(schedule, placement, env.rank);
//   for (const AxisComm& a : plan.axes) ncclCommSplit(world, a.color, a.key, &comm[a.axis], nullptr);
#pragma once

#include <map>
#include <string>
#include <vector>

#include "schedule/ir.h"
#include "topology/placement.h"

namespace meshsim::cuda {

struct AxisComm {
  MeshAxis axis;             // tp, dp, row, a+b, rank, ...
  int color = 0;             // index of this rank's group among groups_along(axis)
  int key = 0;               // position in the group = rank in the split communicator
  std::vector<int> members;  // world ranks of the group, in group-rank order
  bool whole_world = false;  // the group is 0..world-1 in order: use the world communicator
};

struct CommPlan {
  int world_rank = 0;
  int world_size = 1;
  int mesh_rank = 0;
  int role = 0;                                      // index into Schedule::roles this rank runs
  std::vector<AxisComm> axes;                        // every axis any role's collectives use, sorted
  std::map<int, int> stage_peers;                    // Send/Recv of this rank's role: peer stage -> world rank
  const AxisComm& axis(const MeshAxis& name) const;  // throws Error when absent
};

// Throws Error when the placement is not one GPU per world rank (gpus a permutation of
// 0..size-1), when world_rank is out of range, or when an op of this rank's role names a
// group size that differs from its axis's groups.
CommPlan plan_comms(const Schedule& schedule, const Placement& placement, int world_rank);

}  // namespace meshsim::cuda
