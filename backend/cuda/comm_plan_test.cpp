#include "backend/cuda/comm_plan.h"

#include <gtest/gtest.h>

#include "core/test_util.h"
#include "schedule/plan.h"
#include "topology/presets.h"

namespace meshsim::cuda {
namespace {

using testing_util::contains;
using testing_util::error_of;
using Ranks = std::vector<int>;

Op coll(const std::string& axis, int size) {
  Op op;
  op.kind = OpKind::Collective;
  op.name = axis + ".allreduce";
  op.axis = MeshAxis::parse(axis, "axis");
  op.group_size = size;
  op.bytes = 1024;
  return op;
}
Op p2p(OpKind kind, int peer) {
  Op op;
  op.kind = kind;
  op.name = kind == OpKind::Send ? "pp.send" : "pp.recv";
  op.peer = peer;
  op.bytes = 1024;
  return op;
}

// dp=2, pp=2, tp=2: stage 0 runs tp, sends to stage 1, then dp; stage 1 receives, then tp.
Schedule three_d() {
  Schedule s;
  s.axes = {{"dp", 2}, {"pp", 2}, {"tp", 2}};
  s.pp_axis = MeshAxis::pp();
  Role r0{"stage 0", 0, {coll("tp", 2), p2p(OpKind::Send, 1), coll("dp", 2)}};
  Role r1{"stage 1", 1, {p2p(OpKind::Recv, 0), coll("tp", 2)}};
  s.roles = {r0, r1};
  return s;
}

TEST(CommPlan, NaturalDpPpTp) {
  const Topology topo = make_preset("switch", {{"nodes", "1"}, {"gpus_per_node", "8"}});
  const Schedule s = three_d();
  const Placement pl = Placement::natural(Mesh{s.axes}, topo);
  // Rank 5 = (dp 1, pp 0, tp 1). Worked by hand in comm_plan.h.
  const CommPlan p5 = plan_comms(s, pl, 5);
  EXPECT_EQ(p5.mesh_rank, 5);
  EXPECT_EQ(p5.role, 0);
  ASSERT_EQ(p5.axes.size(), 2u);  // sorted: dp, tp (pp has no collectives)
  EXPECT_EQ(p5.axes[0].axis.str(), "dp");
  EXPECT_EQ(p5.axes[0].color, 1);
  EXPECT_EQ(p5.axes[0].key, 1);
  EXPECT_EQ(p5.axes[0].members, (Ranks{1, 5}));
  EXPECT_EQ(p5.axes[1].axis.str(), "tp");
  EXPECT_EQ(p5.axes[1].color, 2);
  EXPECT_EQ(p5.axes[1].key, 1);
  EXPECT_EQ(p5.axes[1].members, (Ranks{4, 5}));
  EXPECT_FALSE(p5.axes[1].whole_world);
  EXPECT_EQ(p5.stage_peers, (std::map<int, int>{{1, 7}}));
  // Rank 2 = (dp 0, pp 1, tp 0): dp groups are ordered by (pp, tp): (1, 0) is the third.
  const CommPlan p2 = plan_comms(s, pl, 2);
  EXPECT_EQ(p2.role, 1);
  EXPECT_EQ(p2.axis(MeshAxis::dp()).color, 2);
  EXPECT_EQ(p2.axis(MeshAxis::dp()).key, 0);
  EXPECT_EQ(p2.axis(MeshAxis::dp()).members, (Ranks{2, 6}));
  EXPECT_EQ(p2.axis(MeshAxis::tp()).color, 1);
  EXPECT_EQ(p2.axis(MeshAxis::tp()).members, (Ranks{2, 3}));
  EXPECT_EQ(p2.stage_peers, (std::map<int, int>{{0, 0}}));
  // Every rank: the same axes in the same order (the split calls match), and ranks with
  // one color agree on the members, each at its key.
  std::map<std::pair<MeshAxis, int>, Ranks> by_color;
  for (int w = 0; w < 8; ++w) {
    const CommPlan p = plan_comms(s, pl, w);
    ASSERT_EQ(p.axes.size(), 2u);
    for (const AxisComm& a : p.axes) {
      EXPECT_EQ(a.members[static_cast<std::size_t>(a.key)], w);
      auto [it, fresh] = by_color.emplace(std::make_pair(a.axis, a.color), a.members);
      if (!fresh) {
        EXPECT_EQ(it->second, a.members);
      }
    }
  }
  EXPECT_EQ(by_color.size(), 8u);  // 4 tp groups + 4 dp groups
}

TEST(CommPlan, BunchedMesh2d) {
  // 4 nodes of 4 GPUs, row=4 x col=4, a 2x2 block per node (topology/placement.h picture):
  //   mesh (r, c) -> GPU:   0  1  4  5
  //                         2  3  6  7
  //                         8  9 12 13
  //                        10 11 14 15
  const Topology topo = make_preset("frontera-rtx", {{"nodes", "4"}});
  Schedule s;
  s.axes = {{"row", 4}, {"col", 4}};
  s.pp_axis = {};
  s.roles = {Role{"all", 0, {coll("row", 4), coll("col", 4)}}};
  const Placement pl = Placement::bunched(Mesh{s.axes}, topo, {2, 2});
  const CommPlan p = plan_comms(s, pl, 3);  // GPU 3 holds mesh (1, 1)
  EXPECT_EQ(p.mesh_rank, 5);
  EXPECT_EQ(p.role, 0);
  EXPECT_EQ(p.axis(MeshAxis::col()).members, (Ranks{2, 3, 6, 7}));  // mesh row 1
  EXPECT_EQ(p.axis(MeshAxis::col()).color, 1);
  EXPECT_EQ(p.axis(MeshAxis::col()).key, 1);
  EXPECT_EQ(p.axis(MeshAxis::row()).members, (Ranks{1, 3, 9, 11}));  // mesh column 1
  EXPECT_EQ(p.axis(MeshAxis::row()).color, 1);
  EXPECT_EQ(p.axis(MeshAxis::row()).key, 1);
  const CommPlan q = plan_comms(s, pl, 12);  // mesh (2, 2)
  EXPECT_EQ(q.axis(MeshAxis::col()).members, (Ranks{8, 9, 12, 13}));
  EXPECT_EQ(q.axis(MeshAxis::col()).key, 2);
  EXPECT_EQ(q.axis(MeshAxis::row()).members, (Ranks{4, 6, 12, 14}));
  EXPECT_EQ(q.axis(MeshAxis::row()).color, 2);
  EXPECT_EQ(q.axis(MeshAxis::row()).key, 2);
}

TEST(CommPlan, CollectiveWorkloadUsesTheWorldCommunicator) {
  CollectiveWorkload w;
  w.ranks = 4;
  w.bytes = 1024;
  const Schedule s = plan_collectives(w);
  const Topology topo = make_preset("switch", {{"nodes", "1"}, {"gpus_per_node", "4"}});
  const Placement pl = Placement::natural(Mesh{s.axes}, topo);
  for (int r = 0; r < 4; ++r) {
    const CommPlan p = plan_comms(s, pl, r);
    ASSERT_EQ(p.axes.size(), 1u);
    EXPECT_TRUE(p.axes[0].whole_world);
    EXPECT_EQ(p.axes[0].key, r);
    EXPECT_EQ(p.axes[0].color, 0);
  }
}

TEST(CommPlan, Errors) {
  const Topology topo = make_preset("switch", {{"nodes", "1"}, {"gpus_per_node", "8"}});
  const Schedule s = three_d();
  const Mesh mesh{s.axes};
  EXPECT_TRUE(contains(error_of([&] { plan_comms(s, Placement::natural(mesh, topo), 8); }),
                       "rank 8 is outside the mesh of 8 ranks"));
  Schedule two;
  two.axes = {{"dp", 2}};
  two.pp_axis = {};
  two.roles = {Role{"all", 0, {coll("dp", 2)}}};
  const Placement gap = Placement::explicit_list(Mesh{two.axes}, topo, {0, 5});
  EXPECT_TRUE(contains(error_of([&] { plan_comms(two, gap, 0); }),
                       "puts mesh rank 1 on GPU 5; the cuda backend runs one process per GPU"));
  two.roles[0].ops[0].group_size = 4;
  EXPECT_TRUE(contains(error_of([&] { plan_comms(two, Placement::natural(Mesh{two.axes}, topo), 1); }),
                       "op 0 ('dp.allreduce') is planned for a group of 4 on axis 'dp'"));
}

}  // namespace
}  // namespace meshsim::cuda
