#include "topology/placement.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/error.h"
#include "core/test_util.h"
#include "topology/presets.h"

namespace meshsim {
namespace {

using testing_util::contains;
using testing_util::error_of;

// Node of each mesh rank, as rows of the mesh.
std::vector<std::vector<int>> node_grid(const Placement& p, const Topology& t) {
  const int cols = p.mesh().dims.back().second;
  std::vector<std::vector<int>> g(static_cast<std::size_t>(p.mesh().size() / cols));
  for (int r = 0; r < p.mesh().size(); ++r) g[r / cols].push_back(t.node_of_gpu(p.gpu_of(r)));
  return g;
}

using Grid = std::vector<std::vector<int>>;

Grid along(const Placement& p, const std::string& axis) { return p.groups_along(MeshAxis::parse(axis, "axis")); }

TEST(MeshAxis, ParsesOneOrSeveralDimensionsOnce) {
  const MeshAxis a = MeshAxis::parse("edp+ep+cp", "workload.group");
  EXPECT_EQ(a.dims(), (std::vector<std::string>{"edp", "ep", "cp"}));
  EXPECT_EQ(a.str(), "edp+ep+cp");
  EXPECT_EQ(a, MeshAxis::edp().plus(MeshAxis::ep()).plus(MeshAxis::cp()));
  EXPECT_NE(a, MeshAxis::parse("edp+cp+ep", "f"));  // order is the group's rank order
  EXPECT_EQ(MeshAxis::parse("tp", "f"), MeshAxis::tp());
  EXPECT_TRUE(MeshAxis::parse("all", "f").is_all());
  EXPECT_FALSE(MeshAxis::tp().is_all());
  EXPECT_TRUE(MeshAxis().empty());
  EXPECT_EQ(MeshAxis().str(), "");
}

TEST(MeshAxis, BadTextNamesTheFieldAndTheFix) {
  for (const char* bad : {"", "+", "tp+", "+tp", "t p", "tp,dp"})
    EXPECT_TRUE(contains(error_of([&] { MeshAxis::parse(bad, "workload.group"); }),
                         "workload.group: '" + std::string(bad) + "' is not a mesh axis"))
        << bad;
  EXPECT_TRUE(contains(error_of([] { MeshAxis::parse("tp+dp+tp", "g"); }), "names the dimension 'tp' twice"));
  EXPECT_TRUE(contains(error_of([] { MeshAxis::parse("all+tp", "g"); }), "'all' stands alone"));
}

TEST(Mesh, ParsesRowMajorDims) {
  const Mesh m = parse_mesh("dp=2,pp=3,tp=4", "--mesh");
  EXPECT_EQ(m.size(), 24);
  EXPECT_EQ(m.dim_index("tp"), 2);
  EXPECT_EQ(m.coords(23), (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(m.coords(5), (std::vector<int>{0, 1, 1}));
  EXPECT_EQ(m.rank_of({1, 0, 2}), 14);
  EXPECT_TRUE(contains(error_of([&] { m.dim_index("cp"); }), "no dimension 'cp'"));
}

TEST(Mesh, RejectsBadText) {
  EXPECT_TRUE(contains(error_of([] { parse_mesh("row=4,row=2", "--mesh"); }), "--mesh: dimension 'row' appears twice"));
  EXPECT_TRUE(contains(error_of([] { parse_mesh("row=0", "--mesh"); }), "--mesh"));
  EXPECT_TRUE(contains(error_of([] { parse_mesh("row4", "--mesh"); }), "not name=size"));
  EXPECT_TRUE(contains(error_of([] { parse_mesh("row=x", "--mesh"); }), "not an integer"));
  EXPECT_TRUE(contains(error_of([] { parse_mesh("", "--mesh"); }), "empty mesh"));
}

TEST(Placement, NaturalFillsRowsOntoNodes) {
  const Topology t = make_preset("frontera-rtx", {{"nodes", "4"}});
  const Placement p = Placement::natural(parse_mesh("row=4,col=4", "m"), t);
  EXPECT_EQ(p.kind(), "natural");
  EXPECT_EQ(node_grid(p, t), (Grid{{0, 0, 0, 0}, {1, 1, 1, 1}, {2, 2, 2, 2}, {3, 3, 3, 3}}));
  // Groups along "row" are the mesh columns; along "col" the mesh rows.
  EXPECT_EQ(along(p, "row"), (Grid{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}));
  EXPECT_EQ(along(p, "col"), (Grid{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}));
  EXPECT_EQ(along(p, "all").size(), 1u);
  EXPECT_EQ(along(p, "all")[0].size(), 16u);
}

TEST(Placement, GroupsAlongSeveralDimensions) {
  const Topology t = make_preset("frontera-rtx", {{"nodes", "4"}});
  // a=2, b=2, c=4: ranks differing only in a and c; with b fixed, (a, c) row-major.
  const Placement p = Placement::natural(parse_mesh("a=2,b=2,c=4", "m"), t);
  EXPECT_EQ(along(p, "a+c"), (Grid{{0, 1, 2, 3, 8, 9, 10, 11}, {4, 5, 6, 7, 12, 13, 14, 15}}));
  EXPECT_EQ(along(p, "c+a"), along(p, "a+c"));
  EXPECT_EQ(along(p, "a+b+c"), along(p, "all"));
  EXPECT_NE(error_of([&] { along(p, "a+x"); }), "");
}

TEST(Placement, NaturalWithFewerRanksUsesTheFirstGpus) {
  const Topology t = make_preset("frontera-rtx", {{"nodes", "4"}});
  const Placement p = Placement::natural(parse_mesh("dp=6", "m"), t);
  EXPECT_EQ(p.gpus(), (std::vector<int>{0, 1, 2, 3, 4, 5}));
}

TEST(Placement, BunchedPutsA2x2BlockOnEachNode) {
  const Topology t = make_preset("frontera-rtx", {{"nodes", "4"}});
  const Placement p = Placement::bunched(parse_mesh("row=4,col=4", "m"), t, {2, 2});
  EXPECT_EQ(p.kind(), "bunched:2x2");
  EXPECT_EQ(node_grid(p, t), (Grid{{0, 0, 1, 1}, {0, 0, 1, 1}, {2, 2, 3, 3}, {2, 2, 3, 3}}));
  // Block-internal order is row-major: rank (1,1) is the 4th GPU of node 0.
  EXPECT_EQ(p.gpu_of(5), 3);
  EXPECT_EQ(along(p, "col")[0], (std::vector<int>{0, 1, 4, 5}));
  EXPECT_EQ(along(p, "row")[0], (std::vector<int>{0, 2, 8, 10}));
  // Parsed form gives the same answer.
  EXPECT_EQ(Placement::parse("bunched:2x2", p.mesh(), t, "placement").gpus(), p.gpus());
}

TEST(Placement, BunchedOverTrailingDimsOfA3dMesh) {
  const Topology t = make_preset("switch", {{"nodes", "4"}, {"gpus_per_node", "4"}});
  const Mesh m = parse_mesh("dp=2,row=2,col=4", "m");
  const Placement p = Placement::bunched(m, t, {2, 2});  // blocks over (row, col)
  // dp=0 holds blocks 0,1 (nodes 0,1); dp=1 holds nodes 2,3.
  EXPECT_EQ(t.node_of_gpu(p.gpu_of(m.rank_of({0, 1, 3}))), 1);
  EXPECT_EQ(t.node_of_gpu(p.gpu_of(m.rank_of({1, 0, 0}))), 2);
}

TEST(Placement, BunchedBlockMustFillANodeAndTileTheMesh) {
  const Topology t = make_preset("frontera-rtx", {{"nodes", "4"}});
  const Mesh m = parse_mesh("row=4,col=4", "m");
  std::string msg = error_of([&] { Placement::bunched(m, t, {2, 3}); });
  EXPECT_TRUE(contains(msg,
                       "placement bunched:2x3: a block of 6 ranks does not fill a 4-GPU node; use a block whose "
                       "product is 4 that divides row=4,col=4"))
      << msg;
  const Mesh m6 = parse_mesh("row=2,col=6", "m");
  msg = error_of([&] { Placement::bunched(m6, t, {1, 4}); });
  EXPECT_TRUE(contains(msg, "block size 4 does not divide dimension col=6")) << msg;
  msg = error_of([&] { Placement::parse("bunched:2xa", m, t, "--placement"); });
  EXPECT_TRUE(contains(msg, "--placement")) << msg;
}

TEST(Placement, MoreRanksThanGpusIsAnError) {
  const Topology t = make_preset("frontera-rtx", {{"nodes", "4"}});
  const std::string msg = error_of([&] { Placement::natural(parse_mesh("row=8,col=8", "m"), t); });
  EXPECT_TRUE(contains(msg,
                       "placement: mesh row=8,col=8 has 64 ranks but topology 'frontera-rtx:nodes=4' has 16 "
                       "GPUs; use a larger topology (e.g. nodes=16) or a smaller mesh"))
      << msg;
}

TEST(Placement, ExplicitListIsChecked) {
  const Topology t = make_preset("switch", {{"gpus_per_node", "4"}});
  const Mesh m = parse_mesh("row=2,col=2", "m");
  EXPECT_EQ(Placement::parse("list:3,2,1,0", m, t, "p").gpus(), (std::vector<int>{3, 2, 1, 0}));
  EXPECT_EQ(Placement::explicit_list(m, t, {0, 1, 2, 3}).kind(), "list");
  EXPECT_TRUE(contains(error_of([&] { Placement::explicit_list(m, t, {0, 1, 2}); }), "has 3 GPUs but mesh"));
  EXPECT_TRUE(contains(error_of([&] { Placement::explicit_list(m, t, {0, 1, 1, 2}); }), "gpu 1 is given twice"));
  EXPECT_TRUE(contains(error_of([&] { Placement::explicit_list(m, t, {0, 1, 2, 9}); }), "entry 3 is gpu 9"));
  EXPECT_TRUE(contains(error_of([&] { Placement::parse("round-robin", m, t, "--placement"); }),
                       "--placement: unknown placement 'round-robin'"));
}

}  // namespace
}  // namespace meshsim
