// Communicator splitting per process group (see comm_plan.h).
#include "backend/cuda/comm_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "core/error.h"

namespace meshsim::cuda {

const AxisComm& CommPlan::axis(const MeshAxis& name) const {
  for (const AxisComm& a : axes)
    if (a.axis == name) return a;
  throw Error(fmt::format("backend cuda: rank {}: no communicator for axis '{}'", world_rank, name.str()));
}

CommPlan plan_comms(const Schedule& schedule, const Placement& placement, int world_rank) {
  const Mesh& mesh = placement.mesh();
  const int world = mesh.size();
  CommPlan plan;
  plan.world_rank = world_rank;
  plan.world_size = world;
  if (world_rank < 0 || world_rank >= world)
    throw Error(fmt::format("backend cuda: rank {} is outside the mesh of {} ranks; launch exactly {} ranks",
                            world_rank, world, world));
  std::vector<int> mesh_rank_of(static_cast<std::size_t>(world), -1);
  for (int r = 0; r < world; ++r) {
    const int g = placement.gpu_of(r);
    if (g < 0 || g >= world || mesh_rank_of[static_cast<std::size_t>(g)] >= 0)
      throw Error(
          fmt::format("placement: {} puts mesh rank {} on GPU {}; the cuda backend runs one process per GPU "
                      "and needs the mesh on GPUs 0..{} (one each)",
                      placement.kind(), r, g, world - 1));
    mesh_rank_of[static_cast<std::size_t>(g)] = r;
  }
  plan.mesh_rank = mesh_rank_of[static_cast<std::size_t>(world_rank)];

  // The pipeline stage of this rank: its coordinate along pp_axis (row-major stride).
  int stage = 0, pp_stride = 1;
  if (!schedule.pp_axis.empty()) {
    const int d = mesh.dim_index(schedule.pp_axis.str());
    for (std::size_t i = static_cast<std::size_t>(d) + 1; i < mesh.dims.size(); ++i) pp_stride *= mesh.dims[i].second;
    stage = mesh.coords(plan.mesh_rank)[static_cast<std::size_t>(d)];
  }
  plan.role = -1;
  for (std::size_t i = 0; i < schedule.roles.size(); ++i)
    if (schedule.roles[i].stage == stage) plan.role = static_cast<int>(i);
  if (plan.role < 0 && schedule.roles.size() == 1 && schedule.pp_axis.empty()) plan.role = 0;
  if (plan.role < 0)
    throw Error(
        fmt::format("backend cuda: rank {} is on stage {}, which no role of the schedule runs", world_rank, stage));

  std::set<MeshAxis> names;  // sorted: every rank splits in the same order
  for (const Role& r : schedule.roles)
    for (const Op& op : r.ops)
      if (op.kind == OpKind::Collective) names.insert(op.axis);
  for (const MeshAxis& name : names) {
    const auto groups = placement.groups_along(name);
    AxisComm a;
    a.axis = name;
    a.color = -1;
    for (std::size_t g = 0; g < groups.size() && a.color < 0; ++g) {
      const auto it = std::find(groups[g].begin(), groups[g].end(), world_rank);
      if (it == groups[g].end()) continue;
      a.color = static_cast<int>(g);
      a.key = static_cast<int>(it - groups[g].begin());
      a.members = groups[g];
    }
    MESHSIM_ASSERT(a.color >= 0);  // groups along an axis cover every mesh rank
    a.whole_world = groups.size() == 1 && static_cast<int>(a.members.size()) == world;
    for (int i = 0; a.whole_world && i < world; ++i) a.whole_world = a.members[static_cast<std::size_t>(i)] == i;
    plan.axes.push_back(std::move(a));
  }

  const Role& mine = schedule.roles[plan.role];
  for (std::size_t i = 0; i < mine.ops.size(); ++i) {
    const Op& op = mine.ops[i];
    if (op.kind == OpKind::Collective) {
      const int size = static_cast<int>(plan.axis(op.axis).members.size());
      if (op.group_size != size)
        throw Error(
            fmt::format("backend cuda: op {} ('{}') is planned for a group of {} on axis '{}', but the "
                        "placement's groups along it have {} ranks",
                        i, op.name, op.group_size, op.axis.str(), size));
    } else if (op.kind == OpKind::Send || op.kind == OpKind::Recv) {
      if (schedule.pp_axis.empty())
        throw Error(
            fmt::format("backend cuda: op {} ('{}') sends between stages but the schedule has no pp axis", i, op.name));
      const int peer_mesh = plan.mesh_rank + (op.peer - stage) * pp_stride;
      if (peer_mesh < 0 || peer_mesh >= world)
        throw Error(fmt::format("backend cuda: op {} ('{}') names stage {}, outside the mesh", i, op.name, op.peer));
      plan.stage_peers[op.peer] = placement.gpu_of(peer_mesh);
    }
  }
  return plan;
}

}  // namespace meshsim::cuda
