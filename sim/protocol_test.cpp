// Runtime protocols (schedule/protocol.h, docs/math.md section 1.6) against hand-worked
// closed forms, the flow model on an uncontended switch, and NCCL's own tuning model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "sim/collective_sim.h"
#include "sim/nccl_model.h"
#include "sim/sim_test_util.h"
#include "topology/presets.h"

namespace meshsim {
namespace {

using sim_testing::iota;
using sim_testing::registry;

CollectiveOutcome ring_allreduce(const Topology& topo, Bytes bytes, Fidelity f, const std::string& algo = "ring") {
  Router router(topo);
  CollectiveRequest req;
  req.kind = CollKind::AllReduce;
  req.bytes = bytes;
  req.algorithm = algo;
  req.fidelity = f;
  req.groups = {iota(8)};
  return run_collective(topo, router, registry(), req);
}

// 8 H100 on the NVSwitch: a link carries 450 GB/s x 0.80 = 0.36 B/ps; GPU -> GPU is
// 2 x 0.25 us. Ring all-reduce, 14 steps of n/8 bytes (docs/math.md section 1.3), each
// step max(0.5 us, hop) + (n/8) / (0.36 f), plus the launch; NCCL's table: LL 6.6 us +
// 0.6 us/step, LL128 14 us + 1.9 us at f = 0.92, Simple 8.4 us + 3.4 us at 1. LL's f (NCCL
// 2.28): min(1/2, llMaxBw 141 GB/s / 360 GB/s) on the channels NCCL opens, one per 512 x 8 x
// 8 = 32 KiB, of the 12 its search gives the node: f = (141/360) x open / 12.
TEST(Protocol, RingAllReduceClosedFormByHandOnDgxH100) {
  const Topology topo = make_preset("dgx-h100");
  auto by_hand = [](double bytes, double launch_us, double hop_us, double f) {
    return launch_us * 1e6 + 14 * (std::max(0.5, hop_us) * 1e6 + bytes / 8 / (0.36 * f));
  };
  auto ll_fraction = [](double bytes) { return 141.0 / 360.0 * std::clamp(std::floor(bytes / 32768), 1.0, 12.0) / 12; };
  struct Row {
    Bytes bytes;
    Protocol expect;
  };
  for (const Row& row : {Row{KiB(1), Protocol::LL}, Row{KiB(96), Protocol::LL}, Row{MiB(1), Protocol::LL},
                         Row{MiB(4), Protocol::LL128}, Row{MiB(64), Protocol::Simple}}) {
    const CollectiveOutcome out = ring_allreduce(topo, row.bytes, Fidelity::Formula);
    const double n = static_cast<double>(row.bytes);
    const double ll = by_hand(n, 6.6, 0.6, ll_fraction(n)), ll128 = by_hand(n, 14.0, 1.9, 0.92);
    const double simple = by_hand(n, 8.4, 3.4, 1);
    EXPECT_EQ(out.protocol, row.expect) << row.bytes;
    EXPECT_NEAR(static_cast<double>(out.time.ps()), std::min({ll, ll128, simple}), 1.0) << row.bytes;
  }
  // 1 KiB on one channel: 6.6 + 14 x (0.6 + 128 B / (0.36 x 141/360 / 12) B/ps) = 15.15 us.
  EXPECT_NEAR(ring_allreduce(topo, KiB(1), Fidelity::Formula).time.us(), 15.152, 0.001);
}

// NCCL's LL rate cap and the channels it opens for an LL message, by hand from its tables
// (tuning.cc llMaxBws, enqueue.cc; NCCL 2.28).
TEST(Protocol, LlRateCapAndOpenChannelsAreNcclsRules) {
  EXPECT_DOUBLE_EQ(nccl_ll_max_bw_GBps(70, 1), 39.0);
  EXPECT_DOUBLE_EQ(nccl_ll_max_bw_GBps(80, 1), 87.7);
  EXPECT_DOUBLE_EQ(nccl_ll_max_bw_GBps(90, 1), 141.0);
  EXPECT_DOUBLE_EQ(nccl_ll_max_bw_GBps(100, 1), 282.0);
  EXPECT_DOUBLE_EQ(nccl_ll_max_bw_GBps(90, 2), 39.0);  // across nodes: the host's row (x86 Intel)
  EXPECT_DOUBLE_EQ(nccl_ll_max_bw_GBps(90, 16), 20.4);
  // 8 ranks: 512 threads x 8 B x 8 = 32 KiB per channel, 12 channels at most.
  EXPECT_EQ(nccl_ll_channels_open(8, 8, 12), 1);
  EXPECT_EQ(nccl_ll_channels_open(65535, 8, 12), 1);
  EXPECT_EQ(nccl_ll_channels_open(65536, 8, 12), 2);
  EXPECT_EQ(nccl_ll_channels_open(256 * 1024, 8, 12), 8);
  EXPECT_EQ(nccl_ll_channels_open(384 * 1024, 8, 12), 12);
  EXPECT_EQ(nccl_ll_channels_open(1e12, 8, 12), 12);
  EXPECT_EQ(nccl_ll_channels_open(65536, 16, 12), 1);  // 64 KiB per channel on 16 ranks
  // The payload fraction: the ring's 1/2 or the tree's 1/3.8 under the cap, times open/channels.
  const ProtocolScope scope{.ll_cap_fraction = 0.4, .channels = 12, .bytes = 65536, .ranks = 8};
  EXPECT_DOUBLE_EQ(protocol_costs(Protocol::LL, {}, scope).payload_fraction, 0.4 * 2 / 12);
  EXPECT_DOUBLE_EQ(protocol_costs(Protocol::LL, {HopRow::Tree, HopRow::Tree}, scope).payload_fraction,
                   1 / 3.8 * 2 / 12);
  EXPECT_DOUBLE_EQ(protocol_costs(Protocol::LL128, {}, scope).payload_fraction, 0.92);
}

// On one crossbar with generic links (PCI hops: no LL128) the flow run pays exactly what
// the closed form charges, and its links take the protocol's link time: LL at 1 KiB runs on 1
// of the 4 channels NCCL's search gives 100 GB/s links (2 x 50 GB/s, duplicated to 4 x 25)
// at half their rate (the flags), so a byte of payload takes 8 bytes of link time.
TEST(Protocol, FlowEqualsClosedFormAndCarriesTheFlags) {
  const Topology topo = make_preset("switch", {{"bandwidth", "100GB/s"}, {"latency", "0.25us"}, {"protocols", "nccl"}});
  for (Bytes bytes : {KiB(1), MiB(1), MiB(64)}) {
    const CollectiveOutcome flow = ring_allreduce(topo, bytes, Fidelity::Flow);
    const CollectiveOutcome formula = ring_allreduce(topo, bytes, Fidelity::Formula);
    EXPECT_EQ(flow.protocol, formula.protocol) << bytes;
    EXPECT_NE(flow.protocol, Protocol::LL128) << "generic links are not NVLink";
    EXPECT_NEAR(static_cast<double>(flow.time.ps()) / static_cast<double>(formula.time.ps()), 1.0, 1e-6) << bytes;
  }
  const CollectiveOutcome ll = ring_allreduce(topo, KiB(1), Fidelity::Flow);
  ASSERT_EQ(ll.protocol, Protocol::LL);
  ASSERT_EQ(ll.params.channels, 4);
  // Every GPU -> switch link: 14 steps x 128 B of payload x 8.
  for (int l = 0; l < static_cast<int>(topo.links().size()); ++l) {
    if (topo.device(topo.link(l).from).kind == DeviceKind::Gpu) {
      EXPECT_DOUBLE_EQ(stats_of(ll.flow->used_links, l).bytes, 14.0 * 128 * 8) << l;
    }
  }
  // Without protocols the same switch is the bare alpha-beta model.
  const Topology bare = make_preset("switch", {{"bandwidth", "100GB/s"}, {"latency", "0.25us"}});
  const CollectiveOutcome b = ring_allreduce(bare, KiB(1), Fidelity::Flow);
  EXPECT_EQ(b.protocol, Protocol::None);
  EXPECT_NEAR(b.time.us(), 14 * (0.5 + 128 / 100e3), 1e-6);
}

// The fastest enabled candidate of NCCL's model with algorithm `a` (as NCCL_ALGO=a would run).
const NcclCandidate& fastest(const NcclPrediction& p, NcclAlgo a) {
  const NcclCandidate* best = nullptr;
  for (const NcclCandidate& c : p.candidates)
    if (c.enabled && c.algo == a && (best == nullptr || c.time_us < best->time_us)) best = &c;
  if (best == nullptr) throw Error(std::string("no enabled ") + to_string(a) + " candidate");
  return *best;
}

// The busbw-vs-size curves of all-reduce on 8 H100, 1 KiB to 8 GiB, at flow and formula,
// against the nccl mode (NCCL's tuning model, sim/nccl_model): our ring against NCCL's Ring
// (its channel search gives 12 x 30 GB/s where our links give 450 x 0.80; both cap LL at
// 141 GB/s), same protocol; our nvls against NCCL's NVLS (8 channels x 40 GB/s x 0.85)
// from 1 GiB, where NCCL runs its largest chunks; each within 15% (issue 15's bound). NCCL's own pick is the faster of
// the two at each size (NVLS from 1 MiB).
TEST(PhysicalConsistency, DgxH100RingAndNvlsCurvesFollowNcclModelFrom1KiBTo8GiB) {
  const Topology topo = make_preset("dgx-h100");
  for (Bytes bytes = KiB(1); bytes <= GiB(8); bytes *= 2) {
    const CollectiveOutcome nccl = ring_allreduce(topo, bytes, Fidelity::Nccl, "nccl");
    ASSERT_TRUE(nccl.nccl.has_value());
    const NcclCandidate& ring = fastest(*nccl.nccl, NcclAlgo::Ring);
    const NcclCandidate& nvls = fastest(*nccl.nccl, NcclAlgo::Nvls);
    EXPECT_DOUBLE_EQ(nccl.nccl->chosen().time_us, std::min(ring.time_us, nvls.time_us)) << bytes;
    for (Fidelity f : {Fidelity::Formula, Fidelity::Flow}) {
      const CollectiveOutcome out = ring_allreduce(topo, bytes, f);
      // NCCL's model times every size on all its channels; NCCL itself opens one per 32 KiB
      // under LL (enqueue.cc), as ours does: from 32 KiB until all 12 are open we are slower.
      if (out.protocol == Protocol::LL && bytes >= KiB(32) && bytes < KiB(384))
        EXPECT_GT(out.time.us(), ring.time_us) << bytes << " " << to_string(f);
      else
        EXPECT_NEAR(out.time.us() / ring.time_us, 1.0, 0.15) << bytes << " " << to_string(f);
      EXPECT_STREQ(to_string(out.protocol), to_string(ring.proto)) << bytes << " " << to_string(f);
      // NCCL's tuning model times NVLS at its largest chunks' rate at every size; ours follows
      // the chunks NCCL really uses (docs/collectives.md, nvls), which the measured sweep of
      // PUBLISHED.md section 6 shows 10-47% slower below 1 GiB: compare where the chunks agree.
      if (bytes < GiB(1)) continue;
      const CollectiveOutcome ours = ring_allreduce(topo, bytes, f, "nvls");
      EXPECT_NEAR(ours.time.us() / nvls.time_us, 1.0, 0.15) << bytes << " nvls " << to_string(f);
    }
  }
}

// NVLS runs Simple with NVLS's own latency (25 us, no per-step cost): a small all-reduce
// is not worth the switch round trip, a large one is.
TEST(Protocol, NvlsPaysItsSwitchRoundTrip) {
  const Topology topo = make_preset("dgx-h100");
  const CollectiveOutcome small = ring_allreduce(topo, KiB(64), Fidelity::Formula, "nvls");
  EXPECT_EQ(small.protocol, Protocol::NvlsSimple);
  EXPECT_GT(small.time.us(), 25.0);
  EXPECT_NE(ring_allreduce(topo, KiB(64), Fidelity::Formula, "auto").algorithm->name, "nvls");
  EXPECT_EQ(ring_allreduce(topo, MiB(256), Fidelity::Formula, "auto").algorithm->name, "nvls");
}

// NCCL's latency rows by program kind (tuning.cc): a tree's hop over the network costs 5.0 us
// under LL and 8.5 under LL128, a ring's 2.7 and 4.0; a tree's NVLink hop under LL128 1.25, a
// ring's 1.9; under Simple both keep the Ring row (the Tree/Simple entry is a whole chunk's
// time). An LL hop inside a node costs 1.8x on a communicator spanning nodes, for every row.
TEST(Protocol, HopRowsAndTheMultiNodeLlFactorAreNcclsTable) {
  const HopRows ring{}, tree{HopRow::Tree, HopRow::Tree};
  EXPECT_DOUBLE_EQ(protocol_costs(Protocol::LL, ring).hop(HopKind::Net), 2.7e6);
  EXPECT_DOUBLE_EQ(protocol_costs(Protocol::LL, tree).hop(HopKind::Net), 5.0e6);
  EXPECT_DOUBLE_EQ(protocol_costs(Protocol::LL128, ring).hop(HopKind::Net), 4.0e6);
  EXPECT_DOUBLE_EQ(protocol_costs(Protocol::LL128, tree).hop(HopKind::Net), 8.5e6);
  EXPECT_DOUBLE_EQ(protocol_costs(Protocol::LL128, tree).hop(HopKind::NvLink), 1.25e6);
  EXPECT_DOUBLE_EQ(protocol_costs(Protocol::Simple, tree).hop(HopKind::Net), 14.0e6);
  EXPECT_DOUBLE_EQ(protocol_costs(Protocol::LL, ring).hop(HopKind::NvLink), 0.6e6);
  EXPECT_DOUBLE_EQ(protocol_costs(Protocol::LL, ring, {.multi_node = true}).hop(HopKind::NvLink), 0.6e6 * 1.8);
  EXPECT_DOUBLE_EQ(protocol_costs(Protocol::LL, tree, {.multi_node = true}).hop(HopKind::Pci), 1.0e6 * 1.8);
  EXPECT_DOUBLE_EQ(protocol_costs(Protocol::LL, tree, {.multi_node = true}).hop(HopKind::Net),
                   5.0e6);  // NET: no factor
  EXPECT_DOUBLE_EQ(protocol_costs(Protocol::LL128, ring, {.multi_node = true}).hop(HopKind::NvLink), 1.9e6);
  // The launch is the Ring base for every program.
  EXPECT_DOUBLE_EQ(protocol_costs(Protocol::LL, tree).launch_ps, 6.6e6);
}

// Two GPUs on two DGX H100 nodes (one per node, 1 KiB, LL): ring and dbt both take two
// whole-latency steps of n/2 bytes (ring: two steps of n/2; dbt for p = 2: one tree slot of
// 2 alpha + 2 (n/2) beta). Each step pays the larger of the route's latency and the
// protocol's NET hop: 5.0 us for dbt (a tree's hop), max(route, 2.7 us) for ring. LL's rate
// across two nodes: NCCL's cap 39 GB/s over the route's rate, at most the ring's 1/2 or the
// tree's 1/3.8, on 1 of the 16 channels NCCL's search gives the pair (two per NIC of the node
// at 24 GB/s: 16 x 24 = 384 beats 8 x 45 = 360, 45 the fastest of its speeds under the 47.25
// GB/s GPU -> NIC PCIe path). At flow and formula alike.
TEST(Protocol, TreeProgramsPayNcclsTreeHopAcrossNodes) {
  const Topology topo = make_preset("dgx-h100", {{"nodes", "2"}});
  Router router(topo);
  for (Fidelity f : {Fidelity::Formula, Fidelity::Flow}) {
    auto run = [&](const std::string& algo) {
      CollectiveRequest req;
      req.kind = CollKind::AllReduce;
      req.bytes = KiB(1);
      req.algorithm = algo;
      req.fidelity = f;
      req.groups = {{0, 8}};
      return run_collective(topo, router, registry(), req);
    };
    const CollectiveOutcome ring = run("ring"), dbt = run("dbt");
    ASSERT_EQ(ring.protocol, Protocol::LL);
    ASSERT_EQ(dbt.protocol, Protocol::LL);
    ASSERT_EQ(ring.params.channels, 16);
    const double route_us = ring.params.alpha_ps * 1e-6;
    const double rate_GBps = 1e3 / ring.params.beta_ps;
    auto bytes_us = [&](double share) { return 1024.0 / (rate_GBps * std::min(share, 39.0 / rate_GBps) / 16) * 1e-3; };
    EXPECT_GT(5.0, route_us) << "the tree hop must bind for this check";
    EXPECT_NEAR(ring.time.us(), 6.6 + 2 * std::max(route_us, 2.7) + bytes_us(0.5), 0.01) << to_string(f);
    EXPECT_NEAR(dbt.time.us(), 6.6 + 2 * 5.0 + bytes_us(1 / 3.8), 0.01) << to_string(f);
  }
}

// NCCL's own model on two DGX H100 nodes (16 ranks): Tree/LL latency = base 6.8 + 2 x (7
// NVLink hops x 0.6 x 1.8 + log2(2) NET hops x 5.0) = 31.92 us; Ring/LL pays 30 steps, 4 of
// them NET at 2.7 us and 26 in the node at max(0.6 x 1.8, 1 us network overhead).
TEST(Protocol, NcclModelChargesLlHopsInsideTheNode18xAcrossNodes) {
  const Topology topo = make_preset("dgx-h100", {{"nodes", "2"}});
  Router router(topo);
  CollectiveRequest req;
  req.kind = CollKind::AllReduce;
  req.bytes = KiB(1);
  req.algorithm = "nccl";
  req.fidelity = Fidelity::Nccl;
  req.groups = {iota(16)};
  const CollectiveOutcome out = run_collective(topo, router, registry(), req);
  ASSERT_TRUE(out.nccl.has_value());
  auto candidate = [&](NcclAlgo a) -> const NcclCandidate& {
    for (const NcclCandidate& c : out.nccl->candidates)
      if (c.algo == a && c.proto == NcclProto::LL) return c;
    throw Error("no LL candidate");
  };
  EXPECT_NEAR(candidate(NcclAlgo::Tree).latency_us, 6.8 + 2 * (7 * 0.6 * 1.8 + 5.0), 1e-9);
  EXPECT_NEAR(candidate(NcclAlgo::Ring).latency_us, 6.6 + 26 * 0.6 * 1.8 + 4 * 2.7, 1e-9);
}

}  // namespace
}  // namespace meshsim
