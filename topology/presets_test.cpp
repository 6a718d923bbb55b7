#include "topology/presets.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "core/error.h"
#include "core/test_util.h"

namespace meshsim {
namespace {

using testing_util::contains;
using testing_util::error_of;

std::vector<std::string> hop_names(const Topology& t, const Path& p) {
  std::vector<std::string> v{t.device(t.link(p.links[0]).from).name};
  for (int l : p.links) v.push_back(t.device(t.link(l).to).name);
  return v;
}

// ---- every catalog entry builds with its defaults ------------------------------
class EveryPreset : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryPreset, BuildsWithDefaultsAndRoutesEveryGpuToGpuZero) {
  const Topology t = make_preset(GetParam());
  EXPECT_TRUE(t.sealed());
  EXPECT_GT(t.num_gpus(), 0);
  EXPECT_GT(t.gpus_per_node(), 0);
  EXPECT_FALSE(t.description.empty());
  Router r(t);
  for (int g = 1; g < t.num_gpus(); ++g) {
    const Path& p = r.path(g, 0);
    ASSERT_FALSE(p.links.empty());
    EXPECT_GT(p.bottleneck.bytes_per_s(), 0);
  }
  EXPECT_GT(bisection_bandwidth(t).bytes_per_s(), 0);
}

std::vector<std::string> preset_names() {
  std::vector<std::string> v;
  for (const auto& p : preset_catalog()) v.push_back(p.name);
  return v;
}

INSTANTIATE_TEST_SUITE_P(Catalog, EveryPreset, ::testing::ValuesIn(preset_names()), [](const auto& info) {
  std::string s = info.param;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
});

TEST(Presets, CatalogListsEveryPresetWithDefaults) {
  const auto names = preset_names();
  for (const char* n :
       {"dgx-h100", "dgx-h200", "dgx-b200", "dgx-b300", "gb200-nvl72", "gb200-nvl36x2", "spectrum-x", "mi300x",
        "dgx-a100", "pcie-node", "frontera-rtx", "fat-tree", "switch", "ring", "torus2d", "torus3d"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  for (const auto& p : preset_catalog())
    for (const auto& param : p.params) EXPECT_FALSE(param.default_value.empty()) << p.name << "." << param.name;
}

TEST(Presets, UnknownParameterListsTheValidOnes) {
  const std::string msg = error_of([] { make_preset("switch", {{"gpus", "4"}}); });
  EXPECT_TRUE(contains(msg, "unknown parameter 'gpus'")) << msg;
  EXPECT_TRUE(contains(msg, "gpus_per_node")) << msg;
}

TEST(Presets, NonIntegerParameterIsAnError) {
  const std::string msg = error_of([] { make_preset("frontera-rtx", {{"nodes", "4.5"}}); });
  EXPECT_TRUE(contains(msg, "nodes")) << msg;
  EXPECT_TRUE(contains(msg, "not an integer")) << msg;
  EXPECT_TRUE(contains(error_of([] { make_preset("fat-tree", {{"levels", "4"}}); }), "levels"));
  EXPECT_TRUE(contains(error_of([] { make_preset("dgx-h100", {{"inter", "mesh"}}); }), "inter"));
  EXPECT_TRUE(contains(error_of([] { make_preset("switch", {{"efficiency", "1.2"}}); }), "efficiency"));
  EXPECT_TRUE(contains(error_of([] { make_preset("switch", {{"bandwidth", "100GBs"}}); }), "bandwidth"));
}

TEST(Presets, UnknownPresetListsThePresets) {
  const std::string msg = error_of([] { make_preset("dgx-x100"); });
  EXPECT_TRUE(contains(msg, "unknown topology preset 'dgx-x100'")) << msg;
  EXPECT_TRUE(contains(msg, "frontera-rtx")) << msg;
}

TEST(Presets, DgxH100RoutesOverNvlinkInsideAndRailsBetweenNodes) {
  const Topology t = make_preset("dgx-h100", {{"nodes", "2"}});
  EXPECT_EQ(t.num_gpus(), 16);
  EXPECT_EQ(t.num_nodes(), 2);
  Router r(t);
  const Path& intra = r.path(0, 3);
  EXPECT_EQ(hop_names(t, intra), (std::vector<std::string>{"n0.gpu0", "n0.nvsw", "n0.gpu3"}));
  EXPECT_NEAR(intra.bottleneck.gbytes_per_s(), 450 * 0.80, 1e-9);  // 360 GB/s
  // Same rail: GPU 2 of node 0 to GPU 2 of node 1 stays on rail leaf 2.
  EXPECT_EQ(hop_names(t, r.path(2, 10)), (std::vector<std::string>{"n0.gpu2", "n0.pcie2", "n0.nic2", "su0.rail2",
                                                                   "n1.nic2", "n1.pcie2", "n1.gpu2"}));
  EXPECT_NEAR(r.path(2, 10).bottleneck.gbytes_per_s(), 50 * 0.92, 1e-9);  // 400 Gb/s x 0.92 = 46 GB/s
  // Across rails the route climbs to a spine, never through the host bridge.
  const auto cross = hop_names(t, r.path(1, 10));
  EXPECT_EQ(cross.size(), 9u);
  for (const auto& n : cross) EXPECT_FALSE(contains(n, ".hb")) << n;
  EXPECT_TRUE(contains(cross[4], "spine")) << cross[4];
}

// DGX B200 against its cited figures: NVLink5 1.8 TB/s bidirectional per GPU (900 GB/s a
// direction) at 0.80 (NCCL rates each of the 18 links of 50 GB/s at 40.1: 0.802); 8 ConnectX-7 of 400 Gb/s at 0.92; the
// NVSwitch reduces at NCCL's Blackwell nvlsEfficiency 0.74; sm_100 and the b200 GPU.
TEST(Presets, DgxB200IsTheCitedNode) {
  const Topology t = make_preset("dgx-b200", {{"nodes", "2"}});
  EXPECT_EQ(t.num_gpus(), 16);
  EXPECT_EQ(t.gpus_per_node(), 8);
  EXPECT_EQ(t.gpu_sm, 100);
  Router r(t);
  EXPECT_EQ(hop_names(t, r.path(0, 5)), (std::vector<std::string>{"n0.gpu0", "n0.nvsw", "n0.gpu5"}));
  EXPECT_NEAR(r.path(0, 5).bottleneck.gbytes_per_s(), 1800.0 / 2 * 0.80, 1e-9);
  EXPECT_NEAR(r.path(0, 5).bottleneck.gbytes_per_s() / (18 * 40.1), 1.0, 0.005);  // NCCL's 18 links x 40.1
  EXPECT_NEAR(r.path(3, 11).bottleneck.gbytes_per_s(), 400.0 / 8 * 0.92, 1e-9);   // same rail, other node
  for (const Device& d : t.devices()) {
    if (d.kind == DeviceKind::NvSwitch) {
      EXPECT_DOUBLE_EQ(d.reduce_efficiency, 0.74);
    }
  }
  const auto it = std::find_if(preset_catalog().begin(), preset_catalog().end(),
                               [](const PresetInfo& p) { return p.name == "dgx-b200"; });
  ASSERT_NE(it, preset_catalog().end());
  EXPECT_EQ(it->gpu, "b200");
}

// HGX B300: B200's NVLink5 node with 800 Gb/s NICs (HGX B300 spec: 1.6 TB/s for 8 GPUs) behind PCIe
// Gen6: a pair on one rail of two nodes gets 800 / 8 x 0.92 = 92 GB/s, twice dgx-b200's.
TEST(Presets, DgxB300IsTheCitedNode) {
  const Topology t = make_preset("dgx-b300", {{"nodes", "2"}});
  EXPECT_EQ(t.num_gpus(), 16);
  Router r(t);
  EXPECT_NEAR(r.path(0, 5).bottleneck.gbytes_per_s(), 1800.0 / 2 * 0.80, 1e-9);
  EXPECT_NEAR(r.path(3, 11).bottleneck.gbytes_per_s(), 800.0 / 8 * 0.92, 1e-9);
  const auto it = std::find_if(preset_catalog().begin(), preset_catalog().end(),
                               [](const PresetInfo& p) { return p.name == "dgx-b300"; });
  ASSERT_NE(it, preset_catalog().end());
  EXPECT_EQ(it->gpu, "b300");
}

// GB200 NVL72: the rack is one node of 72 GPUs on one NVLink domain (1.8 TB/s bidirectional per
// GPU; the spec's 130 TB/s for the rack is 72 x 1.8 rounded), every pair two NVLink hops apart;
// one 400 Gb/s NIC per GPU. Two racks on the rail fabric: GPU i of each rack shares rail leaf i;
// on a fat-tree, auto puts one rack per leaf (its 72 NICs fill more than the 32 ports four DGX
// nodes would).
TEST(Presets, Nvl72RackIsOneNvlinkDomain) {
  const Topology rack = make_preset("gb200-nvl72");
  EXPECT_EQ(rack.num_gpus(), 72);
  EXPECT_EQ(rack.num_nodes(), 1);
  EXPECT_EQ(rack.gpu_sm, 100);
  Router r(rack);
  for (int g = 1; g < 72; ++g) {
    const Path& p = r.path(0, g);
    ASSERT_EQ(p.links.size(), 2u) << g;
    for (int l : p.links) EXPECT_EQ(rack.link(l).spec.kind, LinkKind::NvLink) << g;
    EXPECT_NEAR(p.bottleneck.gbytes_per_s(), 1800.0 / 2 * 0.80, 1e-9) << g;
  }
  const Topology two = make_preset("gb200-nvl72", {{"nodes", "2"}});
  EXPECT_EQ(two.num_gpus(), 144);
  EXPECT_EQ(two.gpus_per_node(), 72);
  Router r2(two);
  EXPECT_EQ(hop_names(two, r2.path(40, 72 + 40)),
            (std::vector<std::string>{"n0.gpu40", "n0.pcie40", "n0.nic40", "su0.rail40", "n1.nic40", "n1.pcie40",
                                      "n1.gpu40"}));
  EXPECT_NEAR(r2.path(40, 112).bottleneck.gbytes_per_s(), 400.0 / 8 * 0.92, 1e-9);
  const Topology tree = make_preset("gb200-nvl72", {{"nodes", "2"}, {"inter", "fat-tree"}});
  Router r3(tree);
  EXPECT_EQ(hop_names(tree, r3.path(0, 72))[3], "leaf0");
  EXPECT_EQ(hop_names(tree, r3.path(0, 72))[5], "leaf1");
}

TEST(Presets, DgxA100FatTreeInterconnect) {
  const Topology t = make_preset("dgx-a100", {{"nodes", "8"}, {"inter", "fat-tree"}});
  Router r(t);
  EXPECT_NEAR(r.path(0, 1).bottleneck.gbytes_per_s(), 300 * 0.78, 1e-9);
  // Nodes 0-3 share leaf0, 4-7 leaf1: node 0 to node 5 crosses a spine.
  const auto names = hop_names(t, r.path(0, 40));
  EXPECT_EQ(names[3], "leaf0");
  EXPECT_TRUE(contains(names[4], "spine"));
  EXPECT_NEAR(r.path(0, 40).bottleneck.gbytes_per_s(), 25 * 0.92, 1e-9);
}

TEST(Presets, PcieNodeGpusShareSwitchesAndNics) {
  const Topology t = make_preset("pcie-node", {{"nodes", "2"}});
  Router r(t);
  EXPECT_EQ(hop_names(t, r.path(0, 3)), (std::vector<std::string>{"n0.gpu0", "n0.pcie0", "n0.gpu3"}));
  EXPECT_EQ(hop_names(t, r.path(0, 4)),
            (std::vector<std::string>{"n0.gpu0", "n0.pcie0", "n0.hb", "n0.pcie1", "n0.gpu4"}));
  const auto inter = hop_names(t, r.path(5, 13));  // switch 1 of node 0 -> switch 1 of node 1
  EXPECT_EQ(inter[2], "n0.nic1");
}

TEST(Presets, FatTreeOversubscriptionHalvesTheBisection) {
  // 8 nodes x 8 GPUs, 4 nodes per leaf: leaf0 has 32 NIC ports of 46 GB/s effective.
  const double full = bisection_bandwidth(make_preset("fat-tree", {{"nodes", "8"}})).gbytes_per_s();
  EXPECT_NEAR(full, 32 * 50 * 0.92, 1e-6);
  const double half =
      bisection_bandwidth(make_preset("fat-tree", {{"nodes", "8"}, {"oversubscription", "2"}})).gbytes_per_s();
  EXPECT_NEAR(half, 16 * 50 * 0.92, 1e-6);
}

TEST(Presets, ThreeLevelFatTreeClimbsToTheCore) {
  const Topology t =
      make_preset("fat-tree", {{"nodes", "16"}, {"levels", "3"}, {"hosts_per_leaf", "2"}, {"leaves_per_pod", "2"}});
  Router r(t);
  // node 0 (pod 0) to node 15 (pod 3): gpu nic leaf podspine core podspine leaf nic gpu
  const auto names = hop_names(t, r.path(0, 127));
  ASSERT_EQ(names.size(), 9u);
  EXPECT_TRUE(contains(names[4], "core")) << names[4];
  // Inside a pod no core is needed.
  EXPECT_EQ(hop_names(t, r.path(0, 16)).size(), 7u);
}

TEST(Presets, BigFatTreesBuild) {
  EXPECT_EQ(make_preset("fat-tree", {{"nodes", "128"}}).num_gpus(), 1024);
  EXPECT_EQ(make_preset("fat-tree", {{"nodes", "2048"}, {"levels", "3"}}).num_gpus(), 16384);
}

TEST(Presets, TorusShapes) {
  EXPECT_EQ(make_preset("torus3d", {{"x", "2"}, {"y", "3"}, {"z", "4"}}).num_gpus(), 24);
  // A ring of two GPUs has one link, not two.
  EXPECT_EQ(make_preset("ring", {{"gpus", "2"}}).links().size(), 2u);
  const Topology r = make_preset("ring", {{"gpus", "8"}, {"gpus_per_node", "4"}});
  EXPECT_EQ(r.num_nodes(), 2);
  EXPECT_TRUE(contains(error_of([] {
                         make_preset("ring", {{"gpus", "6"}, {"gpus_per_node", "4"}});
                       }),
                       "gpus_per_node"));
}

// ---- YAML -------------------------------------------------------------------------
class TopologyYaml : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("meshsim_topo_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    const auto path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }
  std::filesystem::path dir_;
};

constexpr const char* kTwoGpus = R"(name: pair
devices:
  - {name: gpu0, kind: gpu, node: 0}
  - {name: gpu1, kind: gpu, node: 1}
  - {name: sw, kind: switch}
links:
  - {a: gpu0, b: sw, kind: nvlink, bandwidth: 450GB/s, efficiency: 0.8, latency: 0.5us}
  - {a: gpu1, b: sw, kind: ib, bandwidth: 200Gb/s, latency: 1us, bandwidth_ba: 100Gb/s}
)";

TEST_F(TopologyYaml, LoadsExplicitDevicesAndLinks) {
  const Topology t = load_topology_yaml(write("pair.yaml", kTwoGpus));
  EXPECT_EQ(t.name(), "pair");
  EXPECT_EQ(t.num_gpus(), 2);
  EXPECT_EQ(t.num_nodes(), 2);
  Router r(t);
  const Path& p = r.path(0, 1);
  ASSERT_EQ(p.links.size(), 2u);
  EXPECT_EQ(p.latency, us(1.5));
  EXPECT_DOUBLE_EQ(p.bottleneck.gbytes_per_s(), 12.5);  // sw -> gpu1 is the _ba direction, 100 Gb/s
  EXPECT_DOUBLE_EQ(r.path(1, 0).bottleneck.gbytes_per_s(), 25.0);
  EXPECT_EQ(t.link(p.links[0]).spec.kind, LinkKind::NvLink);
  EXPECT_EQ(t.link(p.links[1]).spec.kind, LinkKind::InfiniBand);
  const std::string dot = to_graphviz(t);
  EXPECT_TRUE(contains(dot, "subgraph cluster_node0")) << dot;
  EXPECT_TRUE(contains(dot, "450.00GB/s")) << dot;
}

TEST_F(TopologyYaml, PresetWithParams) {
  const Topology t = load_topology_yaml(write("p.yml", "preset: frontera-rtx\nparams: {nodes: 2}\n"));
  EXPECT_EQ(t.num_gpus(), 8);
  EXPECT_EQ(resolve_topology(write("q.yaml", "preset: switch\n")).num_gpus(), 8);
  const std::string msg = error_of([&] { load_topology_yaml(write("r.yaml", "preset: dgx\n")); });
  EXPECT_TRUE(contains(msg, "unknown topology preset 'dgx'")) << msg;
  EXPECT_TRUE(contains(msg, "dgx-h100")) << msg;
}

TEST_F(TopologyYaml, MalformedYamlNamesFileAndLine) {
  const std::string path = write("bad.yaml", "name: x\ndevices:\n  - {name: gpu0, kind: gpu\n");
  const std::string msg = error_of([&] { load_topology_yaml(path); });
  EXPECT_TRUE(contains(msg, path + ":")) << msg;
  EXPECT_TRUE(contains(msg, "malformed YAML")) << msg;
}

TEST(TopologyYamlErrors, EachNamesTheField) {
  const std::string head = "devices:\n  - {name: gpu0, kind: gpu}\n  - {name: sw, kind: switch}\nlinks:\n";
  auto err = [&](const std::string& link) { return error_of([&] { parse_topology_yaml(head + link, "t.yaml"); }); };
  std::string m =
      err("  - {a: gpu0, b: sw, kind: nvlink, bandwidth: 1GB/s}\n  - {a: gpu0, b: gpuX, kind: pcie, "
          "bandwidth: 1GB/s}\n");
  EXPECT_TRUE(contains(m, "t.yaml:6: links[1].b: unknown device 'gpuX'")) << m;
  m = err("  - {a: gpu0, b: sw, kind: nvlnk, bandwidth: 1GB/s}\n");
  EXPECT_TRUE(contains(m, "links[0].kind: unknown kind 'nvlnk'")) << m;
  m = err("  - {a: gpu0, b: sw, kind: nvlink}\n");
  EXPECT_TRUE(contains(m, "links[0]: missing field 'bandwidth'")) << m;
  m = err("  - {a: gpu0, b: sw, kind: nvlink, bandwidth: 0GB/s}\n");
  EXPECT_TRUE(contains(m, "links[0].bandwidth")) << m;
  EXPECT_TRUE(contains(m, "must be positive")) << m;
  m = err("  - {a: gpu0, b: sw, kind: nvlink, bandwidth: 25GBs}\n");  // unit typo
  EXPECT_TRUE(contains(m, "links[0].bandwidth")) << m;
  EXPECT_TRUE(contains(m, "unknown bandwidth unit 'GBs'")) << m;
  m = err("  - {a: gpu0, b: sw, kind: nvlink, bandwidth: 25GB/s, latency: 2 sec}\n");
  EXPECT_TRUE(contains(m, "links[0].latency")) << m;
  m = err("  - {a: gpu0, b: sw, kind: nvlink, bandwidth: 25GB/s, efficiency: 1.5}\n");
  EXPECT_TRUE(contains(m, "links[0].efficiency")) << m;
  m = err("  - {a: gpu0, b: sw, kind: nvlink, bandwith: 25GB/s}\n");
  EXPECT_TRUE(contains(m, "links[0]: unknown key 'bandwith'")) << m;
  m = error_of([] { parse_topology_yaml("devices:\n  - {name: gpu0, kind: tpu}\n", "t.yaml"); });
  EXPECT_TRUE(contains(m, "devices[0].kind: unknown kind 'tpu'")) << m;
  m = error_of([] { parse_topology_yaml("devices:\n  - {kind: gpu}\n", "t.yaml"); });
  EXPECT_TRUE(contains(m, "devices[0]: missing field 'name'")) << m;
  m = error_of([] { parse_topology_yaml("devices:\n  - {name: a, kind: gpu}\n  - {name: b, kind: gpu}\n", "t.yaml"); });
  EXPECT_TRUE(contains(m, "disconnected")) << m;
}

// In-switch reduction: a switch's reduce_efficiency is read (and its range checked, with the
// file and line); a GPU cannot carry one. dgx-h100's NVSwitch reduces, dgx-a100's does not.
TEST(TopologyYamlErrors, ReduceEfficiencyOnSwitchesOnly) {
  const std::string head = "devices:\n  - {name: gpu0, kind: gpu}\n  - {name: gpu1, kind: gpu}\n";
  const std::string links =
      "links:\n  - {a: gpu0, b: sw, kind: nvlink, bandwidth: 1GB/s}\n  - {a: gpu1, b: sw, kind: nvlink, "
      "bandwidth: 1GB/s}\n";
  const Topology t =
      parse_topology_yaml(head + "  - {name: sw, kind: nvswitch, reduce_efficiency: 0.85}\n" + links, "t.yaml");
  EXPECT_DOUBLE_EQ(t.device(2).reduce_efficiency, 0.85);
  std::string m = error_of([&] {
    parse_topology_yaml(head + "  - {name: sw, kind: nvswitch, reduce_efficiency: 1.5}\n" + links, "t.yaml");
  });
  EXPECT_TRUE(contains(m, "t.yaml:4")) << m;
  EXPECT_TRUE(contains(m, "must be in [0, 1]")) << m;
  m = error_of([&] {
    parse_topology_yaml(
        "devices:\n  - {name: gpu0, kind: gpu, reduce_efficiency: 0.5}\n  - {name: gpu1, kind: gpu}\n"
        "  - {name: sw, kind: nvswitch}\n" +
            links,
        "t.yaml");
  });
  EXPECT_TRUE(contains(m, "reduce_efficiency is for switches")) << m;
  auto switch_reduces = [](const Topology& topo) {
    for (const Device& d : topo.devices())
      if (d.kind == DeviceKind::NvSwitch) return d.reduce_efficiency;
    return -1.0;
  };
  EXPECT_DOUBLE_EQ(switch_reduces(make_preset("dgx-h100", {})), 0.85);
  EXPECT_DOUBLE_EQ(switch_reduces(make_preset("dgx-a100", {})), 0.0);
  EXPECT_DOUBLE_EQ(switch_reduces(make_preset("gb200-nvl72", {})), 0.74);
}

// GB200 NVL36x2: one NVLink domain of 72 GPUs in two racks. Inside a rack a pair is two NVLink
// hops apart (GPU, the rack's switch trays, GPU); across racks three, through the cables between
// the racks' switch trays, at the GPUs' own rate when the cables carry 36 x 900 GB/s. An odd
// domain is refused.
TEST(Presets, Nvl36x2IsOneDomainInTwoRacks) {
  const Topology t = make_preset("gb200-nvl36x2");
  EXPECT_EQ(t.num_gpus(), 72);
  EXPECT_EQ(t.num_nodes(), 1);
  Router r(t);
  EXPECT_EQ(hop_names(t, r.path(0, 35)), (std::vector<std::string>{"n0.gpu0", "n0.nvsw0", "n0.gpu35"}));
  EXPECT_EQ(hop_names(t, r.path(0, 36)), (std::vector<std::string>{"n0.gpu0", "n0.nvsw0", "n0.nvsw1", "n0.gpu36"}));
  for (int g : {1, 35, 36, 71}) {
    for (int l : r.path(0, g).links) EXPECT_EQ(t.link(l).spec.kind, LinkKind::NvLink) << g;
    EXPECT_NEAR(r.path(0, g).bottleneck.gbytes_per_s(), 1800.0 / 2 * 0.80, 1e-9) << g;
  }
  const Topology thin = make_preset("gb200-nvl36x2", {{"cross_rack_bandwidth", "500GB/s"}});
  Router r2(thin);
  EXPECT_NEAR(r2.path(0, 36).bottleneck.gbytes_per_s(), 500.0 * 0.80, 1e-9);
  const std::string m = error_of([] { make_preset("gb200-nvl36x2", {{"gpus_per_node", "71"}}); });
  EXPECT_TRUE(contains(m, "gpus_per_node")) << m;
}

// MI300X: eight GPUs, every pair joined by an xGMI link of its own (one hop, 64 GB/s x 0.75 = 48
// GB/s, kind xgmi), no switch between them; each GPU's NIC on rail i as on a DGX.
TEST(Presets, Mi300xNodeIsAFullXgmiMesh) {
  const Topology t = make_preset("mi300x", {{"nodes", "2"}});
  EXPECT_EQ(t.num_gpus(), 16);
  Router r(t);
  for (int a = 0; a < 8; ++a)
    for (int b = 0; b < 8; ++b) {
      if (a == b) continue;
      const Path& p = r.path(a, b);
      ASSERT_EQ(p.links.size(), 1u) << a << "->" << b;
      EXPECT_EQ(t.link(p.links[0]).spec.kind, LinkKind::Xgmi);
      EXPECT_NEAR(p.bottleneck.gbytes_per_s(), 48.0, 1e-9);
    }
  for (const Device& d : t.devices()) EXPECT_NE(d.kind, DeviceKind::NvSwitch);
  EXPECT_EQ(hop_names(t, r.path(3, 11))[3], "su0.rail3");
  EXPECT_NEAR(r.path(3, 11).bottleneck.gbytes_per_s(), 400.0 / 8 * 0.92, 1e-9);
}

// Spectrum-X: RoCE NICs (kind ethernet) at 400 / 8 x 0.908 GB/s, and adaptive routing: a 2-level
// fat-tree of 4 leaves has one pooled spine switch, each leaf joined to it by one link of all its
// uplinks (32 NIC ports' worth at oversubscription 1), so bisection is ECMP's.
TEST(Presets, SpectrumXIsAnAdaptiveRoceFabric) {
  const PresetParams tree{{"nodes", "16"}, {"inter", "fat-tree"}, {"hosts_per_leaf", "4"}};
  const Topology t = make_preset("spectrum-x", tree);
  Router r(t);
  const Path& p = r.path(0, 127);
  EXPECT_EQ(hop_names(t, p)[4], "spines");
  EXPECT_NEAR(p.bottleneck.gbytes_per_s(), 400.0 / 8 * 0.908, 1e-9);
  int nic_links = 0, spines = 0;
  for (int l = 0; l < static_cast<int>(t.links().size()); ++l) {
    if (link_tier(t, l) == "nic") {
      EXPECT_EQ(t.link(l).spec.kind, LinkKind::Ethernet);
      ++nic_links;
    }
    if (link_tier(t, l) == "leaf-spine") EXPECT_NEAR(t.link(l).spec.raw.gbytes_per_s(), 32 * 50.0, 1e-6);
  }
  for (const Device& d : t.devices()) spines += d.kind == DeviceKind::SpineSwitch;
  EXPECT_EQ(spines, 1);
  EXPECT_EQ(nic_links, 2 * 128);
  PresetParams ecmp = tree;
  ecmp["routing"] = "ecmp";
  EXPECT_NEAR(bisection_bandwidth(t).gbytes_per_s(),
              bisection_bandwidth(make_preset("spectrum-x", ecmp)).gbytes_per_s(), 1e-6);
}

TEST(ResolveTopology, PresetSpecsWithParameters) {
  const Topology t = resolve_topology("frontera-rtx:nodes=2,hosts_per_leaf=1");
  EXPECT_EQ(t.num_gpus(), 8);
  EXPECT_EQ(t.name(), "frontera-rtx:hosts_per_leaf=1,nodes=2");
  Router r(t);
  EXPECT_EQ(r.path(0, 4).links.size(), 8u);  // leaf0 -> spine -> leaf1
  EXPECT_TRUE(contains(error_of([] { resolve_topology("switch:nodes"); }), "key=value"));
  EXPECT_TRUE(contains(error_of([] { resolve_topology("torus4d"); }), "presets:"));
  EXPECT_TRUE(contains(error_of([] { resolve_topology("/nonexistent/dir/t.yaml"); }), "cannot be opened"));
}

}  // namespace
TEST(TopologyProtocols, MachinesRunNcclProtocolsReferencesDoNot) {
  EXPECT_TRUE(make_preset("dgx-h100").protocols);
  EXPECT_TRUE(make_preset("frontera-rtx").protocols);
  EXPECT_FALSE(make_preset("switch").protocols);
  EXPECT_FALSE(make_preset("torus2d").protocols);
  EXPECT_FALSE(make_preset("dgx-h100", {{"protocols", "none"}}).protocols);
  EXPECT_TRUE(make_preset("switch", {{"protocols", "nccl"}}).protocols);
  std::string m = error_of([] { make_preset("dgx-h100", {{"protocols", "LL"}}); });
  EXPECT_TRUE(contains(m, "protocols")) << m;
  EXPECT_TRUE(contains(m, "nccl, none")) << m;

  const std::string body =
      "devices:\n  - {name: gpu0, kind: gpu}\n  - {name: gpu1, kind: gpu}\n"
      "links:\n  - {a: gpu0, b: gpu1, kind: nvlink, bandwidth: 1GB/s}\n";
  EXPECT_FALSE(parse_topology_yaml(body, "t.yaml").protocols);
  EXPECT_TRUE(parse_topology_yaml("protocols: nccl\n" + body, "t.yaml").protocols);
  m = error_of([&] { parse_topology_yaml("protocols: yes\n" + body, "t.yaml"); });
  EXPECT_TRUE(contains(m, "t.yaml:1")) << m;
  EXPECT_TRUE(contains(m, "use nccl")) << m;
  m = error_of([] { parse_topology_yaml("preset: dgx-h100\nprotocols: none\n", "t.yaml"); });
  EXPECT_TRUE(contains(m, "params: {protocols: nccl}")) << m;
  EXPECT_FALSE(parse_topology_yaml("preset: dgx-h100\nparams: {protocols: none}\n", "t.yaml").protocols);
}

}  // namespace meshsim

namespace meshsim {
namespace {

// shared_topology builds a spec once and hands the same topology out again; a file changed
// since is built anew (a Python session editing its topology file sees the edit).
TEST(SharedTopology, BuildsOnceAndSeesAChangedFile) {
  const std::int64_t before = topology_builds();
  const auto a = shared_topology("dgx-h100:nodes=5,nic_bandwidth=399Gb/s");
  const auto b = shared_topology("dgx-h100:nodes=5,nic_bandwidth=399Gb/s");
  EXPECT_EQ(a.get(), b.get());
  EXPECT_EQ(a->num_gpus(), 40);
  EXPECT_EQ(topology_builds() - before, 1);
  const std::string path = testing::TempDir() + "shared_topology.yaml";
  std::ofstream(path) << "preset: frontera-rtx\nparams: {nodes: 2}\n";
  EXPECT_EQ(shared_topology(path)->num_gpus(), 8);
  std::ofstream(path) << "preset: frontera-rtx\nparams: {nodes: 16}\n";
  EXPECT_EQ(shared_topology(path)->num_gpus(), 64);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace meshsim
