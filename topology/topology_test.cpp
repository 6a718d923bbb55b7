#include "topology/topology.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/hash.h"
#include "core/test_util.h"
#include "topology/presets.h"

namespace meshsim {
namespace {

using testing_util::error_of;

TEST(Topology, BuilderNumbersGpusAndNodes) {
  Topology t("tiny");
  const int g0 = t.add_device(DeviceKind::Gpu, "n0.gpu0", 0);
  const int sw = t.add_device(DeviceKind::Switch, "sw");
  const int g1 = t.add_device(DeviceKind::Gpu, "n1.gpu0", 1);
  const int l = t.add_link(g0, sw, LinkSpec{LinkKind::Generic, GBps(10), 1.0, us(1)});
  t.add_link(g1, sw, LinkSpec{LinkKind::Generic, GBps(10), 1.0, us(1)});
  t.seal();
  EXPECT_EQ(t.num_gpus(), 2);
  EXPECT_EQ(t.num_nodes(), 2);
  EXPECT_EQ(t.gpus_per_node(), 1);
  EXPECT_EQ(t.gpu_device(1), g1);
  EXPECT_EQ(t.link(l).reverse, l + 1);
  EXPECT_EQ(t.link(l + 1).from, sw);
  EXPECT_FALSE(t.device(g0).forwards);
  EXPECT_TRUE(t.device(sw).forwards);
  EXPECT_STREQ(to_string(DeviceKind::PcieSwitch), "pcie-switch");
  EXPECT_STREQ(to_string(LinkKind::InfiniBand), "infiniband");
}

TEST(Topology, SealRejectsNoGpus) {
  Topology t("empty");
  t.add_device(DeviceKind::Switch, "sw");
  EXPECT_NE(error_of([&] { t.seal(); }).find("no GPUs"), std::string::npos);
}

TEST(Topology, SealRejectsNonPositiveBandwidthNamingTheLink) {
  Topology t("bad");
  const int a = t.add_device(DeviceKind::Gpu, "gpuA", 0);
  const int b = t.add_device(DeviceKind::Gpu, "gpuB", 0);
  t.add_link(a, b, LinkSpec{LinkKind::NvLink, GBps(0), 1.0, us(1)});
  const std::string msg = error_of([&] { t.seal(); });
  EXPECT_NE(msg.find("link gpuA<->gpuB: bandwidth must be positive"), std::string::npos) << msg;
}

TEST(Topology, SealRejectsEfficiencyOutsideUnitInterval) {
  Topology t("bad");
  const int a = t.add_device(DeviceKind::Gpu, "gpuA", 0);
  const int b = t.add_device(DeviceKind::Gpu, "gpuB", 0);
  t.add_link(a, b, LinkSpec{LinkKind::NvLink, GBps(10), 1.0, us(1)}, LinkSpec{LinkKind::NvLink, GBps(10), 1.5, us(1)});
  const std::string msg = error_of([&] { t.seal(); });
  EXPECT_NE(msg.find("efficiency"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gpuA<->gpuB"), std::string::npos) << msg;
}

TEST(Topology, SealRejectsDisconnectedGpus) {
  // gpu0 - sw0    gpu1 - sw1   (two islands)
  Topology t("islands");
  const int g0 = t.add_device(DeviceKind::Gpu, "n0.gpu0", 0);
  const int g1 = t.add_device(DeviceKind::Gpu, "n1.gpu0", 1);
  const int s0 = t.add_device(DeviceKind::Switch, "sw0");
  const int s1 = t.add_device(DeviceKind::Switch, "sw1");
  t.add_link(g0, s0, LinkSpec{LinkKind::Generic, GBps(10), 1.0, us(1)});
  t.add_link(g1, s1, LinkSpec{LinkKind::Generic, GBps(10), 1.0, us(1)});
  const std::string msg = error_of([&] { t.seal(); });
  EXPECT_NE(msg.find("topology 'islands' is disconnected: gpu 0 (n0.gpu0) cannot reach gpu 1 (n1.gpu0); add a link"),
            std::string::npos)
      << msg;
}

TEST(Topology, GpusDoNotForwardWhenSwitchesExist) {
  // gpu0 - sw - gpu1 - gpu2 : gpu2 is reachable only through gpu1, which is an endpoint.
  Topology t("chain");
  const LinkSpec s{LinkKind::Generic, GBps(10), 1.0, us(1)};
  const int g0 = t.add_device(DeviceKind::Gpu, "gpu0", 0);
  const int g1 = t.add_device(DeviceKind::Gpu, "gpu1", 0);
  const int g2 = t.add_device(DeviceKind::Gpu, "gpu2", 0);
  const int sw = t.add_device(DeviceKind::Switch, "sw");
  t.add_link(g0, sw, s);
  t.add_link(g1, sw, s);
  t.add_link(g1, g2, s);
  const std::string msg = error_of([&] { t.seal(); });
  EXPECT_NE(msg.find("gpu 0 (gpu0) cannot reach gpu 2 (gpu2)"), std::string::npos) << msg;
}

TEST(Router, SwitchPresetRouteHasTwoHops) {
  const Topology t = make_preset("switch");
  Router r(t);
  const Path& p = r.path(0, 5);
  ASSERT_EQ(p.links.size(), 2u);
  EXPECT_EQ(t.link(p.links[0]).from, t.gpu_device(0));
  EXPECT_EQ(t.link(p.links[1]).to, t.gpu_device(5));
  EXPECT_EQ(p.latency, us(2));
  EXPECT_DOUBLE_EQ(p.bottleneck.gbytes_per_s(), 100.0);
  EXPECT_TRUE(r.path(3, 3).links.empty());
  EXPECT_NE(error_of([&] { r.path(0, 8); }).find("out of range"), std::string::npos);
}

TEST(Router, FronteraInterNodeRouteUsesTheNodeNic) {
  const Topology t = make_preset("frontera-rtx");  // 4 nodes x 4 GPUs, one FDR NIC per node
  Router r(t);
  auto names = [&](const Path& p) {
    std::vector<std::string> v{t.device(t.link(p.links[0]).from).name};
    for (int l : p.links) v.push_back(t.device(t.link(l).to).name);
    return v;
  };
  // Inside a node: GPU -> host bridge -> GPU, two PCIe hops, no NIC.
  const Path& intra = r.path(0, 1);
  EXPECT_EQ(names(intra), (std::vector<std::string>{"n0.gpu0", "n0.hb", "n0.gpu1"}));
  EXPECT_EQ(t.link(intra.links[0]).spec.kind, LinkKind::Pcie);
  // Between nodes: through both nodes' NICs and the (single) leaf switch.
  const Path& inter = r.path(1, 6);
  EXPECT_EQ(names(inter),
            (std::vector<std::string>{"n0.gpu1", "n0.hb", "n0.nic", "leaf0", "n1.nic", "n1.hb", "n1.gpu2"}));
  // The bottleneck is the FDR link: 54.54 Gb/s of data x 0.90.
  EXPECT_NEAR(inter.bottleneck.gbytes_per_s(), 54.54 / 8 * 0.90, 1e-9);
  // Every GPU of node 0 leaves through the same NIC.
  for (int g = 0; g < 4; ++g) {
    const auto n = names(r.path(g, 8 + g));
    EXPECT_EQ(n[2], "n0.nic");
  }
}

TEST(Router, EcmpSpreadsPairsOverSpinesDeterministically) {
  const Topology t = make_preset("fat-tree");  // 16 nodes of 8, 4 nodes per leaf, 32 spines
  auto spine_of = [&](Router& r, int a, int b) {
    for (int l : r.path(a, b).links)
      if (t.device(t.link(l).to).kind == DeviceKind::SpineSwitch) return t.link(l).to;
    return -1;
  };
  Router r1(t), r2(t);
  std::set<int> spines;
  for (int a = 0; a < 32; ++a) {
    for (int b = 32; b < 64; b += 4) {
      const int s = spine_of(r1, a, b);
      ASSERT_GE(s, 0);
      EXPECT_EQ(s, spine_of(r2, a, b));  // same pair, same path, in another router
      spines.insert(s);
      EXPECT_EQ(r1.path(a, b).links.size(), 6u);  // gpu nic leaf spine leaf nic gpu
    }
  }
  EXPECT_GE(spines.size(), 20u);  // 256 pairs over 32 spines
}

TEST(Router, RingRoutesThroughGpus) {
  const Topology t = make_preset("ring", {{"gpus", "8"}});
  Router r(t);
  EXPECT_EQ(r.path(0, 4).links.size(), 4u);
  EXPECT_EQ(r.path(0, 7).links.size(), 1u);
  EXPECT_EQ(r.path(1, 6).latency, us(3));
  const Topology torus = make_preset("torus2d", {{"x", "4"}, {"y", "4"}});
  Router rt(torus);
  EXPECT_EQ(rt.path(0, 10).links.size(), 4u);  // (0,0) -> (2,2)
  EXPECT_EQ(rt.path(0, 15).links.size(), 2u);  // (0,0) -> (3,3) by wraparound
}

TEST(Bisection, SwitchPresetIsHalfTheGpusTimesTheLinkRate) {
  // One node: GPUs 0-3 versus 4-7, each side pushes 4 x 100 GB/s through the crossbar.
  EXPECT_NEAR(bisection_bandwidth(make_preset("switch")).gbytes_per_s(), 400.0, 1e-6);
  // Two nodes of 4: node 0 against node 1, again 4 links of 100 GB/s.
  EXPECT_NEAR(bisection_bandwidth(make_preset("switch", {{"nodes", "2"}, {"gpus_per_node", "4"}})).gbytes_per_s(),
              400.0, 1e-6);
}

TEST(Bisection, TwoFronteraNodesShareOneFdrLink) {
  // node 0 -> node 1: 4 GPUs x 12.3 GB/s into the host bridge, then the NIC's PCIe 3.0 x8
  // (7.88 x 0.85 = 6.70 GB/s), then FDR (54.54 Gb/s / 8 x 0.90 = 6.136 GB/s): the FDR link.
  const Topology t = make_preset("frontera-rtx", {{"nodes", "2"}});
  EXPECT_NEAR(bisection_bandwidth(t).gbytes_per_s(), 54.54 / 8 * 0.90, 1e-6);
  EXPECT_NEAR(gpu_injection_bandwidth(t, 0).gbytes_per_s(), 15.75 * 0.78, 1e-9);
  EXPECT_NEAR(gpu_offnode_bandwidth(t, 0).gbytes_per_s(), 54.54 / 8 * 0.90, 1e-6);
}

TEST(Bisection, RingCutCrossesTwoLinks) {
  EXPECT_NEAR(bisection_bandwidth(make_preset("ring")).gbytes_per_s(), 200.0, 1e-6);
}

// The route as topology.h defines it, the plain way: a full BFS from the source (hop counts, and
// the least latency over shortest-hop routes), then from the destination back, the predecessors
// one hop closer whose latency so far plus the link's is least, in the order of the device's
// links, one picked by splitmix64(hash(src, dst), level).
std::vector<int> reference_route(const Topology& t, int src_gpu, int dst_gpu) {
  const int src = t.gpu_device(src_gpu), dst = t.gpu_device(dst_gpu);
  std::vector<int> dist(static_cast<std::size_t>(t.num_devices()), -1);
  std::vector<std::int64_t> lat(dist.size(), 0);
  std::vector<int> queue{src};
  dist[static_cast<std::size_t>(src)] = 0;
  for (std::size_t head = 0; head < queue.size(); ++head) {
    const int u = queue[head];
    if (u != src && !t.device(u).forwards) continue;
    for (int l : t.out_links(u)) {
      const int v = t.link(l).to;
      const std::int64_t w = lat[static_cast<std::size_t>(u)] + t.link(l).spec.latency.ps();
      if (dist[static_cast<std::size_t>(v)] < 0) {
        dist[static_cast<std::size_t>(v)] = dist[static_cast<std::size_t>(u)] + 1;
        lat[static_cast<std::size_t>(v)] = w;
        queue.push_back(v);
      } else if (dist[static_cast<std::size_t>(v)] == dist[static_cast<std::size_t>(u)] + 1) {
        lat[static_cast<std::size_t>(v)] = std::min(lat[static_cast<std::size_t>(v)], w);
      }
    }
  }
  const std::uint64_t hash =
      splitmix64((static_cast<std::uint64_t>(src_gpu) << 32) | static_cast<std::uint32_t>(dst_gpu));
  std::vector<int> route(static_cast<std::size_t>(dist[static_cast<std::size_t>(dst)]));
  for (int v = dst, level = dist[static_cast<std::size_t>(dst)]; level > 0; --level) {
    std::vector<int> best;
    std::int64_t least = 0;
    for (int l : t.out_links(v)) {
      const int u = t.link(l).to, in = t.link(l).reverse;
      if (dist[static_cast<std::size_t>(u)] != level - 1 || (u != src && !t.device(u).forwards)) continue;
      const std::int64_t c = lat[static_cast<std::size_t>(u)] + t.link(in).spec.latency.ps();
      if (best.empty() || c < least) best.clear(), least = c;
      if (c == least) best.push_back(in);
    }
    const int chosen = best[best.size() == 1 ? 0 : splitmix64(hash ^ static_cast<std::uint64_t>(level)) % best.size()];
    route[static_cast<std::size_t>(level - 1)] = chosen;
    v = t.link(chosen).from;
  }
  return route;
}

// Both searches must find the route the plain way finds (the same links, so the same ECMP pick),
// on every preset and on graphs whose links differ in latency (least-latency ties and non-ties
// among equal hop counts), with ECMP ties into a device of many links, and where some GPUs relay.
void expect_same_routes(const Topology& t, int pairs_wanted) {
  Router from_source(t, Router::Search::FromSource);
  Router both_ends(t, Router::Search::BothEnds);
  Router automatic(t);
  Router summaries(t);  // its summaries come from its own searches, not from cached paths
  Router once(t);       // summary_once: the same answers, none kept
  const int n = t.num_gpus();
  const long long all = static_cast<long long>(n) * n;
  const long long step = std::max<long long>(1, all / pairs_wanted);
  int compared = 0;
  for (long long k = 0; k < all; k += step) {
    const int a = static_cast<int>((k * 7919) % all / n), b = static_cast<int>((k * 7919) % all % n);
    const std::vector<int> want = reference_route(t, a, b);
    const Path& got = both_ends.path(a, b);
    ASSERT_EQ(got.links, want) << t.name() << ": " << a << " -> " << b;
    ASSERT_EQ(from_source.path(a, b).links, want) << t.name() << ": " << a << " -> " << b;
    ASSERT_EQ(automatic.path(a, b).links, want) << t.name() << ": " << a << " -> " << b;
    Time latency;
    Bandwidth narrowest = Bps(std::numeric_limits<double>::infinity());
    for (int l : want) latency += t.link(l).spec.latency, narrowest = std::min(narrowest, t.link(l).spec.effective());
    ASSERT_EQ(got.latency, latency);
    if (a != b) {
      ASSERT_EQ(got.bottleneck.bytes_per_ps(), narrowest.bytes_per_ps());
    }
    const RouteSummary& sum = summaries.summary(a, b);
    ASSERT_EQ(sum.latency, latency);
    ASSERT_EQ(sum.hops, static_cast<int>(want.size()));
    ASSERT_EQ(sum.first_link, want.empty() ? -1 : want.front());
    if (a != b) {
      ASSERT_EQ(sum.bottleneck.bytes_per_ps(), narrowest.bytes_per_ps());
    }
    ASSERT_EQ(sum.nvlink_only,
              std::all_of(want.begin(), want.end(), [&](int l) { return t.link(l).spec.kind == LinkKind::NvLink; }));
    const RouteSummary one = once.summary_once(a, b);
    ASSERT_EQ(one.latency, sum.latency);
    ASSERT_EQ(one.bottleneck.bytes_per_ps(), sum.bottleneck.bytes_per_ps());
    ASSERT_EQ(std::tie(one.hops, one.first_link, one.nvlink_only), std::tie(sum.hops, sum.first_link, sum.nvlink_only));
    ++compared;
  }
  EXPECT_GE(compared, std::min<long long>(all, pairs_wanted / 2)) << t.name();
}

TEST(Router, EverySearchFindsThePlainRoute) {
  for (const char* spec :
       {"dgx-h100:nodes=4", "dgx-h100:nodes=16,inter=fat-tree,hosts_per_leaf=2", "dgx-a100:nodes=3", "pcie-node",
        "frontera-rtx:nodes=4", "fat-tree:nodes=64,levels=3,leaves_per_pod=4", "fat-tree:nodes=16,oversubscription=2",
        "switch", "ring:gpus=9", "torus2d:x=4,y=3", "torus3d:x=3,y=2,z=4"})
    expect_same_routes(resolve_topology(spec), 3000);
  // A fan: GPUs on switch A, 40 GPUs on switch B, A and B joined through three middle switches
  // (one GPU per node): routes between A and B tie three ways (ECMP), and B has
  // more links than the middle level, so the candidates are read from the level's side.
  {
    Topology t("fan");
    const int A = t.add_device(DeviceKind::Switch, "A"), B = t.add_device(DeviceKind::Switch, "B");
    const LinkSpec spec{LinkKind::Generic, GBps(10), 1.0, us(1)};
    for (int m = 0; m < 3; ++m) {
      const int s = t.add_device(DeviceKind::Switch, "m" + std::to_string(m));
      t.add_link(A, s, spec);
      t.add_link(s, B, spec);
    }
    for (int g = 0; g < 46; ++g)
      t.add_link(t.add_device(DeviceKind::Gpu, "g" + std::to_string(g), g), g < 6 ? A : B, spec);
    t.seal();
    expect_same_routes(t, 46 * 46);
  }
  // Random: 10 switches on a ring plus random chords, 24 GPUs each on 1-2 switches, every
  // third GPU relaying, latencies 1-3 us.
  std::uint64_t seed = 42;
  auto next = [&](int m) { return static_cast<int>((seed = splitmix64(seed)) % static_cast<std::uint64_t>(m)); };
  for (int trial = 0; trial < 5; ++trial) {
    Topology t("random" + std::to_string(trial));
    std::vector<int> sw;
    for (int i = 0; i < 10; ++i) sw.push_back(t.add_device(DeviceKind::Switch, "sw" + std::to_string(i)));
    auto spec = [&] { return LinkSpec{LinkKind::Generic, GBps(10 + next(5)), 1.0, us(1 + next(3))}; };
    for (int i = 0; i < 10; ++i) t.add_link(sw[i], sw[(i + 1) % 10], spec());
    for (int i = 0; i < 6; ++i) {
      const int x = next(10), y = next(10);
      if (x != y) t.add_link(sw[x], sw[y], spec());
    }
    std::vector<int> gpus;
    for (int g = 0; g < 24; ++g) {
      gpus.push_back(t.add_device(DeviceKind::Gpu, "gpu" + std::to_string(g), g / 4));
      const int x = next(10), y = next(10);
      t.add_link(gpus.back(), sw[x], spec());
      if (y != x) t.add_link(gpus.back(), sw[y], spec());
    }
    for (int g = 0; g < 24; g += 3) t.set_forwards(gpus[g], true);
    t.seal();
    expect_same_routes(t, 24 * 24);
  }
}

// A failed cable: both directions down, no route uses them, pairs that crossed them take
// another spine; failing every uplink of a leaf cuts its GPUs off, and the error names two.
TEST(Topology, AFailedLinkIsRoutedAroundAndTheLastOneIsNamed) {
  Topology t = make_preset("fat-tree", {{"nodes", "4"}, {"hosts_per_leaf", "2"}});
  std::vector<int> uplinks;  // leaf0 -> spineN
  for (int l = 0; l < static_cast<int>(t.links().size()); ++l)
    if (link_name(t, l).starts_with("leaf0 -> spine")) uplinks.push_back(l);
  ASSERT_GE(uplinks.size(), 2u);
  t.fail_link(uplinks[0]);
  EXPECT_TRUE(t.link(uplinks[0]).down);
  EXPECT_TRUE(t.link(t.link(uplinks[0]).reverse).down);
  Router r(t);
  for (int a = 0; a < t.num_gpus(); ++a)
    for (int b = 0; b < t.num_gpus(); ++b)
      for (int l : r.path(a, b).links) ASSERT_FALSE(t.link(l).down) << a << " -> " << b;
  EXPECT_EQ(r.path(0, 31).links.size(), 6u);  // leaf 0 to leaf 1, over another spine
  for (std::size_t i = 1; i + 1 < uplinks.size(); ++i) t.fail_link(uplinks[i]);
  const std::string e = error_of([&] { t.fail_link(uplinks.back()); });
  EXPECT_TRUE(testing_util::contains(e, "leaf0 <-> spine")) << e;
  EXPECT_TRUE(testing_util::contains(e, "cannot reach gpu")) << e;
}

// Scale (speed is measured in bench/, not here): routes exist and have the hop counts of
// a two-level fat-tree. Same node: GPU -> NVSwitch -> GPU (2 links). Different leaves:
// GPU -> NIC -> leaf -> spine -> leaf -> NIC -> GPU (6 links; each GPU has its own NIC).
TEST(RouterScale, RoutesOnA16kGpuFatTree) {
  const Topology t = make_preset("fat-tree", {{"nodes", "2048"}});
  ASSERT_EQ(t.num_gpus(), 16384);
  Router r(t);
  for (int i = 0; i < 16384; ++i) ASSERT_FALSE(r.path(i, (i + 1) % 16384).links.empty()) << i;
  EXPECT_EQ(r.path(0, 1).links.size(), 2u);
  EXPECT_EQ(r.path(0, 16383).links.size(), 6u);
}

}  // namespace
}  // namespace meshsim
