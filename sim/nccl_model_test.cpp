// The `nccl` cost mode against numbers worked out by hand from NCCL 2.20.3's published
// tuning model (src/graph/tuning.cc; restated in docs/nccl-model.md), its choice
// switching as NCCL's does, monotonicity, the shape read off presets, and bad input.
#include "sim/nccl_model.h"

#include <gtest/gtest.h>

#include <map>

#include <numeric>

#include "core/test_util.h"
#include "sim/collective_sim.h"
#include "topology/presets.h"

namespace meshsim {
namespace {

using testing_util::contains;
using testing_util::error_of;

// One DGX H100 as NCCL sees it: 18 NVLink4 lanes x 20.6 GB/s = 370.8 GB/s per GPU.
NcclShape h100_node() {
  NcclShape s;
  s.ranks = 8;
  s.nodes = 1;
  s.intra = NcclHw::NvLink;
  s.intra_path_GBps = 370.8;
  s.intra_total_GBps = 370.8;
  return s;
}

// 16 DGX H100: plus 8 NICs of 400 Gb/s = 50 GB/s, GPU->NIC over PCIe Gen5 (63 x 0.75).
NcclShape h100_16_nodes() {
  NcclShape s = h100_node();
  s.ranks = 128;
  s.nodes = 16;
  s.nic_GBps = 50;
  s.nics_per_node = 8;
  s.nic_path_GBps = 47.25;
  return s;
}

const NcclCandidate& find(const NcclPrediction& p, NcclAlgo a, NcclProto pr) {
  for (const auto& c : p.candidates)
    if (c.algo == a && c.proto == pr) return c;
  throw std::logic_error("no such candidate");
}

TEST(NcclModel, ShapeAndChannelsOfDgxH100) {
  const Topology one = make_preset("dgx-h100", {});
  Router r1(one);
  std::vector<int> g(8);
  std::iota(g.begin(), g.end(), 0);
  const NcclShape s1 = nccl_shape(one, r1, g, 90);
  EXPECT_EQ(s1.nodes, 1);
  EXPECT_EQ(s1.intra, NcclHw::NvLink);
  EXPECT_NEAR(s1.intra_total_GBps, 370.8, 1e-9);  // 450 / 25 lanes x 20.6
  // Intra speeds (sm90): 60 -> floor(370.8/60) = 6 channels = 360 GB/s, the largest
  // product (40 x 9 and 30 x 12 tie at 360 but come later); 60 >= 50 so NCCL duplicates
  // the channels: 12 x 30.
  const NcclGraph g1 = nccl_graph(s1, {.sm = 90});
  EXPECT_EQ(g1.channels, 12);
  EXPECT_DOUBLE_EQ(g1.bw_GBps, 30.0);

  const Topology many = make_preset("dgx-h100", {{"nodes", "16"}});
  Router r16(many);
  std::vector<int> g16(128);
  std::iota(g16.begin(), g16.end(), 0);
  const NcclShape s16 = nccl_shape(many, r16, g16, 90);
  EXPECT_EQ(s16.nodes, 16);
  EXPECT_EQ(s16.nics_per_node, 8);
  EXPECT_NEAR(s16.nic_GBps, 50.0, 1e-9);
  EXPECT_NEAR(s16.nic_path_GBps, 47.25, 1e-9);  // PCIe Gen5 63 GB/s x 0.75
  // Inter speeds (sm90) under 47.25: 45 -> min(floor(370.8/45) = 8, 8 NICs x 1) = 8
  // channels = 360 GB/s (42 x 8 = 336, 40 x 8 = 320 are less); 45 < 50 with 8 > 4
  // channels on sm90: no duplication.
  const NcclGraph g16g = nccl_graph(s16, {.sm = 90});
  EXPECT_EQ(g16g.channels, 8);
  EXPECT_DOUBLE_EQ(g16g.bw_GBps, 45.0);
  // An override keeps the per-channel speed.
  EXPECT_EQ(nccl_graph(s16, {.sm = 90, .channels = 4}).channels, 4);
}

TEST(NcclModel, HandWorkedSingleNodeAllReduce) {
  // 64 MiB = 67108864 B on 8 H100s, 12 channels x 30 GB/s (busbw 360).
  // Ring/Simple: algbw = 360 x 8/14 = 205.714 GB/s; latency = 8.4 + 14 x 3.4 = 56.0 us;
  //   time = 56.0 + 67108864 / (1000 x 205.714) = 56.0 + 326.224 = 382.2236 us.
  // Ring/LL128: busbw = min(360 x 0.92, 12 x 36.7) = 331.2; algbw = 189.257;
  //   latency = 14 + 14 x 1.9 = 40.6; time = 40.6 + 354.591 = 395.191 us.
  const NcclPrediction p = nccl_predict(CollKind::AllReduce, 67108864, h100_node(), {.sm = 90});
  const auto& simple = find(p, NcclAlgo::Ring, NcclProto::Simple);
  EXPECT_NEAR(simple.latency_us, 56.0, 1e-9);
  EXPECT_NEAR(simple.algbw_GBps, 360.0 * 8 / 14, 1e-9);
  EXPECT_NEAR(simple.time_us, 382.2236, 1e-4);
  EXPECT_NEAR(find(p, NcclAlgo::Ring, NcclProto::LL128).time_us, 395.191, 1e-3);
  EXPECT_EQ(p.choice_name(), "Ring/Simple");
  EXPECT_EQ(p.time.ps(), 382223644);  // 382.2236444 us, rounded to ps

  // 4 KiB: Ring/LL (NCCL 2.28's rate): busbw = min(llMaxBw 141, 360/2) = 141, algbw = 80.571;
  //   latency = 6.6 + 14 x 0.6 = 15.0; time = 15.0 + 4096 / 80571.4 = 15.0508 us.
  // Tree/LL: busbw = min(360 x .92, 12 x 38.7) = 331.2 -> /3.8 = 87.158 (< 87.7);
  //   algbw = 43.579 x tree correction (log2(4096/64) = 6: LL 0.7) = 30.505;
  //   latency = 6.8 + 2 x 7 x 0.6 = 15.2; time = 15.2 + 0.1343 = 15.334 us.
  const NcclPrediction s = nccl_predict(CollKind::AllReduce, 4096, h100_node(), {.sm = 90});
  EXPECT_NEAR(find(s, NcclAlgo::Ring, NcclProto::LL).time_us, 15.0508, 1e-4);
  EXPECT_NEAR(find(s, NcclAlgo::Tree, NcclProto::LL).time_us, 15.3343, 1e-4);
  EXPECT_EQ(s.choice_name(), "Ring/LL");
}

// NVLS on one DGX H100 (NCCL 2.28's search and tuning): the NVLS graph has one channel
// per GPU, 8; its speed is the fastest sm90 speed s with (8 + 1) x s <= 370.8 GB/s: 40
// (50 would need 450); the second pass raises bwInter to the fastest speed below 80: 60.
// All-reduce busbw = 8 x min(40 x 0.85 x 7/8 x 2, 60) = 8 x 59.5 = 476 GB/s, algbw =
// 476 x 8/14 = 272 GB/s, latency 25 us: 8 GiB takes 25 + 8589934592 / 272000 =
// 31605.6419 us, NCCL's choice over Ring/Simple (busbw 360). At 64 KiB NVLS's 25 us lose to
// Ring/LL. Without a reducing switch, across nodes or before sm90, NVLS is off, with why.
TEST(NcclModel, HandWorkedNvlsOnOneNode) {
  NcclShape s = h100_node();
  s.nvls_switch = true;
  const NcclGraph g = nccl_nvls_graph(s, {.sm = 90});
  EXPECT_EQ(g.channels, 8);
  EXPECT_DOUBLE_EQ(g.bw_GBps, 40.0);
  EXPECT_DOUBLE_EQ(g.bw_inter_GBps, 60.0);
  const NcclPrediction big = nccl_predict(CollKind::AllReduce, GiB(8), s, {.sm = 90});
  EXPECT_EQ(big.choice_name(), "NVLS/Simple");
  EXPECT_NEAR(big.chosen().busbw_GBps, 476.0, 1e-9);
  EXPECT_NEAR(big.chosen().algbw_GBps, 272.0, 1e-9);
  EXPECT_NEAR(big.chosen().time_us, 31605.6419, 1e-4);
  EXPECT_EQ(nccl_predict(CollKind::AllReduce, KiB(64), s, {.sm = 90}).choice_name(), "Ring/LL");
  const NcclPrediction ag = nccl_predict(CollKind::AllGather, GiB(1), s, {.sm = 90});
  EXPECT_FALSE(find(ag, NcclAlgo::Nvls, NcclProto::Simple).enabled);
  EXPECT_FALSE(
      find(nccl_predict(CollKind::AllReduce, GiB(8), s, {.sm = 80}), NcclAlgo::Nvls, NcclProto::Simple).enabled);
  EXPECT_FALSE(find(big, NcclAlgo::Nvls, NcclProto::LL).enabled);

  // Read off the topology: dgx-h100's NVSwitch reduces, dgx-a100's does not; two dgx-h100
  // nodes each have theirs (NVLS-Tree's case, below).
  auto shape_of = [](const std::string& preset, int gpus, int sm, std::map<std::string, std::string> params = {}) {
    const Topology t = make_preset(preset, params);
    Router r(t);
    std::vector<int> g(static_cast<std::size_t>(gpus));
    std::iota(g.begin(), g.end(), 0);
    return nccl_shape(t, r, g, sm);
  };
  EXPECT_TRUE(shape_of("dgx-h100", 8, 90).nvls_switch);
  EXPECT_FALSE(shape_of("dgx-a100", 8, 80).nvls_switch);
  EXPECT_TRUE(shape_of("dgx-h100", 16, 90, {{"nodes", "2"}}).nvls_switch);
  EXPECT_FALSE(shape_of("dgx-a100", 16, 80, {{"nodes", "2"}}).nvls_switch);
}

// NVLS-Tree across DGX H100 nodes (NCCL 2.28's search and tuning). The NVLS graph has one
// channel per NIC head, 8; pass 1 takes the fastest sm90 inter-node speed s with
// (8 + 1) x s <= 370.8 and s <= the 47.25 GB/s GPU-NIC path: 40 (42 would need 378); pass 2
// raises bwInter while below 2 x 40 and within the path: 42, 45 (48 > 47.25).
// Per channel: min(40 x 0.85 x 7/8 x 2 = 59.5, bwInter 45 x 2 on two nodes = 90, cap 57.7)
// = 57.7 -> busbw 461.6, algbw 461.6 x 16/30 = 246.187; latency 25 + 2 x log2(2) x 20.9 =
// 66.8 us; 1 GiB: 66.8 + 1073741824 / 246186.67 = 4428.2946 us, ahead of Ring/Simple (busbw
// 360). Four nodes: min(59.5, 45, 45.5) = 45 -> busbw 360, as Ring's: NVLS stops paying off
// past two nodes. (A user's nccl-tests on 8 x H100 nodes with 8 x 400 Gb/s RoCE, NCCL 2.19:
// NVLS on/off 430/330 GB/s on two nodes, 320/320 on four; github.com/NVIDIA/nccl/issues/1221.)
TEST(NcclModel, HandWorkedNvlsTreeAcrossNodes) {
  NcclShape two = h100_16_nodes();
  two.ranks = 16;
  two.nodes = 2;
  two.nvls_switch = true;
  const NcclGraph g = nccl_nvls_graph(two, {.sm = 90});
  EXPECT_EQ(g.channels, 8);
  EXPECT_DOUBLE_EQ(g.bw_GBps, 40.0);
  EXPECT_DOUBLE_EQ(g.bw_inter_GBps, 45.0);
  const NcclPrediction p = nccl_predict(CollKind::AllReduce, GiB(1), two, {.sm = 90});
  const NcclCandidate& t = find(p, NcclAlgo::NvlsTree, NcclProto::Simple);
  EXPECT_NEAR(t.busbw_GBps, 461.6, 1e-9);
  EXPECT_NEAR(t.latency_us, 66.8, 1e-9);
  EXPECT_NEAR(t.time_us, 4428.2946, 1e-4);
  EXPECT_EQ(p.choice_name(), "NVLSTree/Simple");
  EXPECT_NEAR(t.busbw_GBps / find(p, NcclAlgo::Ring, NcclProto::Simple).busbw_GBps, 461.6 / 360, 1e-12);
  EXPECT_FALSE(find(p, NcclAlgo::Nvls, NcclProto::Simple).enabled);  // NVLS across nodes needs CollNet
  EXPECT_FALSE(find(p, NcclAlgo::NvlsTree, NcclProto::LL128).enabled);

  NcclShape four = two;
  four.ranks = 32;
  four.nodes = 4;
  const NcclPrediction q = nccl_predict(CollKind::AllReduce, GiB(1), four, {.sm = 90});
  const NcclCandidate& t4 = find(q, NcclAlgo::NvlsTree, NcclProto::Simple);
  EXPECT_NEAR(t4.busbw_GBps, 360.0, 1e-9);
  EXPECT_NEAR(t4.busbw_GBps, find(q, NcclAlgo::Ring, NcclProto::Simple).busbw_GBps, 1e-9);
  EXPECT_NEAR(t4.latency_us, 25 + 2 * 2 * 20.9, 1e-9);

  // Off: on one node (NVLS is its form there), for other collectives, before sm90, and
  // without a reducing switch.
  NcclShape one = h100_node();
  one.nvls_switch = true;
  EXPECT_FALSE(
      find(nccl_predict(CollKind::AllReduce, GiB(1), one, {.sm = 90}), NcclAlgo::NvlsTree, NcclProto::Simple).enabled);
  EXPECT_FALSE(
      find(nccl_predict(CollKind::AllGather, GiB(1), two, {.sm = 90}), NcclAlgo::NvlsTree, NcclProto::Simple).enabled);
  EXPECT_FALSE(
      find(nccl_predict(CollKind::AllReduce, GiB(1), two, {.sm = 80}), NcclAlgo::NvlsTree, NcclProto::Simple).enabled);
  NcclShape plain = two;
  plain.nvls_switch = false;
  const NcclPrediction without = nccl_predict(CollKind::AllReduce, GiB(1), plain, {.sm = 90});
  const NcclCandidate& off = find(without, NcclAlgo::NvlsTree, NcclProto::Simple);
  EXPECT_FALSE(off.enabled);
  EXPECT_NE(off.disabled_why.find("NVSwitch that reduces"), std::string::npos) << off.disabled_why;
}

TEST(NcclModel, HandWorkedSixteenNodes) {
  // 128 ranks, 16 nodes, 8 channels x 45 GB/s (busbw 360).
  // 4 KiB, Tree/LL: busbw = min(360 x .92, 8 x 36.0) = 288 -> min(288/3.8, llMaxBw 20.4)
  //   = 20.4; algbw 10.2 x 0.7 (correction) = 7.14; latency = 6.8 + 2 x (7 x 0.6 x 1.8 (an
  //   LL hop in the node, multi-node) + log2(16) x 5.0) = 61.92; time = 61.92 + 4096 / 7140
  //   = 62.4937 us.
  // Ring/LL latency = 6.6 + (254 - 32) x max(0.6 x 1.8, net overhead 1.0) + 32 x 2.7 = 332.76.
  const NcclPrediction s = nccl_predict(CollKind::AllReduce, 4096, h100_16_nodes(), {.sm = 90});
  EXPECT_NEAR(find(s, NcclAlgo::Tree, NcclProto::LL).time_us, 62.4937, 1e-4);
  EXPECT_NEAR(find(s, NcclAlgo::Ring, NcclProto::LL).latency_us, 332.76, 1e-9);
  EXPECT_EQ(s.choice_name(), "Tree/LL");
  // 4 GiB, Ring/Simple: latency = 8.4 + 222 x max(3.4, 3 x 1.0) + 32 x 14 = 1211.2, x 1.4
  //   (ring plateau: 2^32 / (8 x 128) >= 64) = 1695.68; algbw = 360 x 128/254 = 181.417;
  //   time = 1695.68 + 4294967296 / 181417.3 = 25370.20 us.
  // Tree/LL128: busbw = 288 x 120/128 = 270 -> min(270, 8 x 29.0) = 232, algbw 116, no
  //   correction above 256 MiB; latency = 14 + 2 x (7 x 1.25 + 4 x 8.5) = 99.5;
  //   time = 99.5 + 37025.58 = 37125.08 us.
  const NcclPrediction l = nccl_predict(CollKind::AllReduce, Bytes{1} << 32, h100_16_nodes(), {.sm = 90});
  EXPECT_NEAR(find(l, NcclAlgo::Ring, NcclProto::Simple).latency_us, 1695.68, 1e-6);
  EXPECT_NEAR(find(l, NcclAlgo::Ring, NcclProto::Simple).time_us, 25370.20, 1e-2);
  EXPECT_NEAR(find(l, NcclAlgo::Tree, NcclProto::LL128).time_us, 37125.08, 1e-2);
  EXPECT_EQ(l.choice_name(), "Ring/Simple");
}

TEST(NcclModel, ChoiceSwitchesAsSizeGrows) {
  // Single node: LL for tiny sizes, then LL128 or Simple.
  EXPECT_EQ(nccl_predict(CollKind::AllReduce, 1024, h100_node(), {}).chosen().proto, NcclProto::LL);
  EXPECT_NE(nccl_predict(CollKind::AllReduce, Bytes{1} << 30, h100_node(), {}).chosen().proto, NcclProto::LL);
  // Multi-node all-reduce: Tree for small and medium sizes, Ring at large ones; once
  // it leaves LL it never goes back, once it leaves Tree it never goes back.
  bool left_ll = false, left_tree = false;
  for (Bytes b = 64; b <= (Bytes{1} << 33); b *= 2) {
    const NcclPrediction p = nccl_predict(CollKind::AllReduce, b, h100_16_nodes(), {});
    if (p.chosen().proto != NcclProto::LL)
      left_ll = true;
    else
      EXPECT_FALSE(left_ll) << b;
    if (p.chosen().algo == NcclAlgo::Ring)
      left_tree = true;
    else
      EXPECT_FALSE(left_tree) << b;
  }
  EXPECT_TRUE(left_ll);
  EXPECT_TRUE(left_tree);
  EXPECT_EQ(nccl_predict(CollKind::AllReduce, MiB(1), h100_16_nodes(), {}).chosen().algo, NcclAlgo::Tree);
  EXPECT_EQ(nccl_predict(CollKind::AllReduce, GiB(4), h100_16_nodes(), {}).chosen().algo, NcclAlgo::Ring);
  // Other collectives run Ring only.
  for (CollKind k : {CollKind::AllGather, CollKind::ReduceScatter, CollKind::Broadcast, CollKind::Reduce})
    EXPECT_EQ(nccl_predict(k, MiB(1), h100_16_nodes(), {}).chosen().algo, NcclAlgo::Ring) << to_string(k);
}

TEST(NcclModel, MoreBytesNeverFaster) {
  // NCCL's tree correction is piecewise in log2(size), so the model is monotone over
  // doublings (the factor never grows 2x between neighbours); ring-only kinds are
  // monotone at every size.
  for (const NcclShape& s : {h100_node(), h100_16_nodes()}) {
    Time last;
    for (Bytes b = 1; b <= (Bytes{1} << 34); b *= 2) {
      const Time t = nccl_predict(CollKind::AllReduce, b, s, {}).time;
      EXPECT_GE(t, last) << b;
      last = t;
    }
    for (CollKind k : {CollKind::AllGather, CollKind::ReduceScatter, CollKind::Broadcast, CollKind::Reduce}) {
      Time prev;
      for (Bytes b = 1; b <= GiB(8); b = b * 3 + 7) {
        const Time t = nccl_predict(k, b, s, {}).time;
        EXPECT_GE(t, prev) << to_string(k) << " " << b;
        prev = t;
      }
    }
  }
}

// One HGX B200 as NCCL 2.28.3 sees it: 18 NVLink5 links of 50 GB/s rated 40.1 each (topo.h
// SM100_NVLINK_BW), 721.8 GB/s per GPU. NVLS graph: 8 channels at the fastest sm100 intra speed
// with (8 + 1) x s <= 721.8: 80 (720; sm90's list would stop at 60); bwInter rises to the list's
// top, 90. busbw = 8 x min(80 x nvlsEfficiency 0.74 x 7/8 x 2 = 103.6, 90) = 720 GB/s: NCCL's
// model stops below what a user of 8 B200s measures ("830+", github.com/NVIDIA/nccl/issues/1807).
// 72 GPUs of a GB200 NVL72: 32 channels (NVLS arity), 33 x s <= 721.8 gives 20 (24 would need
// 792): 32 x min(20 x 0.74 x 31/32 x 2 = 28.675, bwInter 30) = 917.6 GB/s.
TEST(NcclModel, HandWorkedNvlsOnBlackwell) {
  LinkSpec nvlink5{LinkKind::NvLink, GBps(900), 0.8, us(0.25)};
  EXPECT_NEAR(nccl_link_bw(nvlink5, 100), 18 * 40.1, 1e-9);
  NcclShape s = h100_node();
  s.intra_path_GBps = s.intra_total_GBps = 18 * 40.1;
  s.nvls_switch = true;
  const NcclGraph g = nccl_nvls_graph(s, {.sm = 100});
  EXPECT_EQ(g.channels, 8);
  EXPECT_DOUBLE_EQ(g.bw_GBps, 80.0);
  const NcclPrediction big = nccl_predict(CollKind::AllReduce, GiB(8), s, {.sm = 100});
  EXPECT_EQ(big.choice_name(), "NVLS/Simple");
  EXPECT_DOUBLE_EQ(g.bw_inter_GBps, 90.0);
  EXPECT_NEAR(big.chosen().busbw_GBps, 8 * 90.0, 1e-9);
  s.ranks = 72;
  const NcclPrediction rack = nccl_predict(CollKind::AllReduce, GiB(8), s, {.sm = 100});
  EXPECT_EQ(rack.nvls_graph.channels, 32);
  EXPECT_DOUBLE_EQ(rack.nvls_graph.bw_GBps, 20.0);
  EXPECT_NEAR(rack.chosen().busbw_GBps, 32 * 20 * 0.74 * 31 / 32 * 2, 1e-9);
  EXPECT_TRUE(find(rack, NcclAlgo::Ring, NcclProto::LL128).enabled);  // 2.28 enables LL128 on Blackwell
  EXPECT_EQ(nccl_sm("b200", "--nccl-arch"), 100);
}

TEST(NcclModel, Ll128OffWithoutNvlinkOrOnOtherArchs) {
  NcclShape pcie = h100_node();
  pcie.intra = NcclHw::Pci;
  const NcclPrediction p = nccl_predict(CollKind::AllReduce, MiB(8), pcie, {.sm = 80});
  EXPECT_FALSE(find(p, NcclAlgo::Ring, NcclProto::LL128).enabled);
  const NcclPrediction t = nccl_predict(CollKind::AllReduce, MiB(8), h100_node(), {.sm = 75});
  EXPECT_FALSE(find(t, NcclAlgo::Ring, NcclProto::LL128).enabled);
  EXPECT_NE(t.chosen().proto, NcclProto::LL128);
}

TEST(NcclModel, BadInputGetsOneClearError) {
  EXPECT_TRUE(contains(error_of([] { nccl_predict(CollKind::AllToAll, MiB(1), h100_node(), {}); }), "point-to-point"));
  EXPECT_TRUE(contains(error_of([] { nccl_predict(CollKind::SendRecv, MiB(1), h100_node(), {}); }), "--algo auto"));
  EXPECT_TRUE(contains(error_of([] { nccl_predict(CollKind::AllReduce, 0, h100_node(), {}); }), "--bytes"));
  EXPECT_TRUE(contains(error_of([] { nccl_sm("sm9x", "--nccl-arch"); }), "--nccl-arch"));
  EXPECT_EQ(nccl_sm("sm90", "f"), 90);
  EXPECT_EQ(nccl_sm("a100", "f"), 80);

  const Topology topo = make_preset("dgx-h100", {});
  Router router(topo);
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  CollectiveRequest req;
  req.bytes = MiB(1);
  req.groups = {{0, 1, 2, 3}};
  req.algorithm = "nccl";
  req.fidelity = Fidelity::Flow;
  EXPECT_TRUE(contains(error_of([&] { run_collective(topo, router, reg, req); }), "--fidelity nccl"));
  req.fidelity = Fidelity::Nccl;
  req.algorithm = "ring";
  EXPECT_TRUE(contains(error_of([&] { run_collective(topo, router, reg, req); }), "NCCL chooses"));
  req.algorithm = "auto";
  const CollectiveOutcome out = run_collective(topo, router, reg, req);
  ASSERT_TRUE(out.nccl.has_value());
  EXPECT_EQ(out.algorithm, nullptr);
  EXPECT_EQ(out.time, out.nccl->time);
}

}  // namespace
}  // namespace meshsim
