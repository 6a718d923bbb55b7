// NCCL's tuning model (see nccl_model.h). Constants: NCCL 2.20.3, src/graph/tuning.cc and
// src/graph/search.cc (the NVLS and NVLS-Tree rows, LL's rate and every Blackwell (sm100) figure: NCCL
// 2.28.3); the formulas are restated in docs/nccl-model.md.
#include "sim/nccl_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "core/enum_names.h"
#include "core/error.h"
#include "core/flag.h"
#include "sim/compute_model.h"

namespace meshsim {

namespace {

constexpr int kAlgos = 4;   // Tree, Ring, NVLS, NVLS-Tree (NCCL's order, without CollNet and PAT)
constexpr int kProtos = 3;  // LL, LL128, Simple

// Base and per-hop latencies (us): one table for this model and the protocols of our step
// programs (schedule/protocol.h).
constexpr const auto& kBaseLat = kNcclBaseLatUs;
constexpr const auto& kHwLat = kNcclHwLatUs;
// Rows: Volta, Ampere, Hopper, Blackwell (by sm); columns: 1 node, 2 nodes, more (tuning.cc; the
// Blackwell row is 2.28.3's, whose Hopper rows are 2.20.3's).
// LL's cap (llMaxBws) and its Ring refinement (busbw x 1/2) are NCCL 2.28's, which the step
// programs share (schedule/protocol.h nccl_ll_max_bw_GBps): 2.20 rated Hopper's LL as Ampere's
// (87.7 GB/s on one node, busbw x 1/4), 2.28 at 141 GB/s, which the DGX H100 sweep of
// PUBLISHED.md section 6 bears out (1 MiB: 27.4 us measured, 28.0 predicted).
constexpr double kPerChMaxRingLL128Bw[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 36.7}, {2 * 36.7, 2 * 36.7, 2 * 36.7}};
constexpr double kPerChMaxTreeLL128Bw[4][3] = {
    {20.0, 20.0, 20.0}, {20.0, 20.0, 20.0}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
constexpr double kPerChMaxTreeBw[4][3] = {
    {26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
// NVLS-Tree (NCCL 2.28): the per-channel bandwidth cap on Hopper and Blackwell (columns as above;
// NCCL disables it on one node); its latencies are schedule/protocol.h's.
constexpr double kPerChMaxNvlsTreeBw[2][3] = {{0.0, 57.7, 45.5}, {0.0, 96.0, 43.1}};
constexpr double kNvlsTreeNvlinkLatUs = kNcclNvlsTreeNvlinkLatUs;
constexpr double kNvlsTreeNetLatUs = kNcclNvlsTreeNetLatUs;
// Tree bandwidth correction by log2(bytes / 64), 64 B .. 256 MiB (tuning.cc treeCorrectionFactor).
constexpr double kTreeCorrection[kProtos][23] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};
// Network post overhead (us) on an Intel x86 host (tuning.cc getNetOverhead); x3 for Simple.
constexpr double kNetOverhead = 1.0;
// Per-channel speeds the topology search tries, fastest first (search.cc).
constexpr std::array kSpeedIntra = {40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0, 7.0, 6.0, 5.0, 4.0, 3.0};
constexpr std::array kSpeedInter = {48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0, 12.0, 10.0, 9.0,
                                    7.0,  6.0,  5.0,  4.0,  3.0,  2.4,  1.2,  0.24, 0.12};
constexpr std::array kSpeedIntraSm90 = {60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 15.0, 12.0, 6.0, 3.0};
constexpr std::array kSpeedInterSm90 = {48.0, 45.0, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0, 17.5,
                                        15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};
constexpr std::array kSpeedIntraSm100 = {90.0, 80.0, 70.0, 60.0, 50.0, 40.0, 30.0, 24.0, 20.0, 19.0, 18.0};
constexpr std::array kSpeedInterSm100 = {96.0, 48.0, 45.1, 42.0, 40.0, 30.0, 24.0, 22.0, 20.0,
                                         17.5, 15.0, 12.0, 6.0,  3.0,  2.4,  1.2,  0.24, 0.12};
constexpr int kMaxRingChannels = 16;  // MAXCHANNELS / 2
constexpr int kMaxNvlsArity = 32;     // NCCL_MAX_NVLS_ARITY
// NVLS's achievable fraction of the NVLS graph's speed, by arch (tuning.cc nvlsEfficiency,
// NCCL 2.28): Hopper 0.85, Blackwell 0.74, none before.
double nvls_efficiency(int sm) { return sm >= 100 ? 0.74 : sm >= 90 ? 0.85 : 0.0; }

int log2i(std::int64_t n) {
  int l = 0;
  while (n >>= 1) ++l;
  return l;
}

int arch_row(int sm) { return sm >= 100 ? 3 : sm >= 90 ? 2 : sm >= 80 ? 1 : 0; }

// The speeds NCCL's search tries for the arch, fastest first (search.cc: sm100, sm90, older).
std::vector<double> search_speeds(int sm, bool inter) {
  if (sm >= 100)
    return inter ? std::vector<double>(kSpeedInterSm100.begin(), kSpeedInterSm100.end())
                 : std::vector<double>(kSpeedIntraSm100.begin(), kSpeedIntraSm100.end());
  if (sm >= 90)
    return inter ? std::vector<double>(kSpeedInterSm90.begin(), kSpeedInterSm90.end())
                 : std::vector<double>(kSpeedIntraSm90.begin(), kSpeedIntraSm90.end());
  return inter ? std::vector<double>(kSpeedInter.begin(), kSpeedInter.end())
               : std::vector<double>(kSpeedIntra.begin(), kSpeedIntra.end());
}

}  // namespace

constexpr EnumName<NcclAlgo> kNcclAlgoNames[] = {
    {NcclAlgo::Tree, "Tree"}, {NcclAlgo::Ring, "Ring"}, {NcclAlgo::Nvls, "NVLS"}, {NcclAlgo::NvlsTree, "NVLSTree"}};
const char* to_string(NcclAlgo a) { return enum_name(kNcclAlgoNames, a); }
constexpr EnumName<NcclProto> kNcclProtoNames[] = {
    {NcclProto::LL, "LL"}, {NcclProto::LL128, "LL128"}, {NcclProto::Simple, "Simple"}};
const char* to_string(NcclProto p) { return enum_name(kNcclProtoNames, p); }

std::string NcclPrediction::choice_name() const {
  return fmt::format("{}/{}", to_string(chosen().algo), to_string(chosen().proto));
}

int nccl_sm(const std::string& text, const std::string& field) {
  std::string presets;
  for (const std::string& name : gpu_presets()) {
    if (text == name) return gpu_preset(name).arch;
    presets += (presets.empty() ? "" : ", ") + name;
  }
  std::string digits = text.rfind("sm", 0) == 0 ? text.substr(2) : text;
  if (!digits.empty() && digits.size() <= 3 && std::all_of(digits.begin(), digits.end(), ::isdigit)) {
    const int sm = std::stoi(digits);
    if (sm >= 60) return sm;
  }
  throw Error(fmt::format("{}: unknown GPU architecture '{}'; use sm70, sm80, sm90, sm100 (or a GPU preset: {})", field,
                          text, presets));
}

double nccl_link_bw(const LinkSpec& link, int sm) {
  const double raw = link.raw.bytes_per_ps() * 1e3;  // GB/s
  switch (link.kind) {
    case LinkKind::NvLink: {
      // topo.h: NVLink5 links carry 50 GB/s a direction, rated 40.1 (SM100_NVLINK_BW, 2.28.3);
      // older ones 25 GB/s, rated 20.6 (sm90), 20 (sm70/sm80), 12 (sm86), 18 (sm60).
      if (sm >= 100) return raw / 50.0 * 40.1;
      const double lane = sm >= 90 ? 20.6 : sm == 86 ? 12.0 : sm >= 70 ? 20.0 : 18.0;
      return raw / 25.0 * lane;
    }
    case LinkKind::Pcie:
      return raw * 0.75;
    default:
      return raw;
  }
}

NcclShape nccl_shape(const Topology& topo, Router& router, const std::vector<int>& gpus, int sm) {
  if (gpus.size() < 2)
    throw Error(fmt::format("{}: NCCL's tuning model needs at least 2 ranks (got {}); use {} with N >= 2",
                            flag("algo", "nccl"), gpus.size(), flag("ranks", "N")));
  NcclShape s;
  s.ranks = static_cast<int>(gpus.size());
  std::set<int> nodes;
  for (int g : gpus) nodes.insert(topo.node_of_gpu(g));
  s.nodes = static_cast<int>(nodes.size());
  const int g0 = gpus.front();
  const int node0 = topo.node_of_gpu(g0);
  auto path_bw = [&](int a, int b, bool* all_nvlink) {
    double bw = std::numeric_limits<double>::infinity();
    if (all_nvlink) *all_nvlink = true;
    for (int l : router.path(a, b).links) {
      const LinkSpec& spec = topo.link(l).spec;
      bw = std::min(bw, nccl_link_bw(spec, sm));
      if (all_nvlink && spec.kind != LinkKind::NvLink) *all_nvlink = false;
    }
    return bw;
  };
  // Intra-node: the first pair of group GPUs sharing a node (least i, then least j > i): the first
  // two group GPUs of the node whose first group GPU comes first.
  std::map<int, std::pair<std::size_t, std::size_t>> first_two;  // node -> (first, second) index
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    const auto [it, fresh] = first_two.emplace(topo.node_of_gpu(gpus[i]), std::pair{i, gpus.size()});
    if (!fresh && it->second.second == gpus.size()) it->second.second = i;
  }
  std::pair<std::size_t, std::size_t> pair{gpus.size(), gpus.size()};
  for (const auto& [node, ij] : first_two)
    if (ij.second < gpus.size() && ij.first < pair.first) pair = ij;
  const bool found = pair.first < gpus.size();
  if (found) {
    bool nv = false;
    s.intra_path_GBps = path_bw(gpus[pair.first], gpus[pair.second], &nv);
    s.intra = nv ? NcclHw::NvLink : NcclHw::Pci;
  }
  double nvlink_total = 0;
  for (int l : topo.out_links(topo.gpu_device(g0)))
    if (topo.link(l).spec.kind == LinkKind::NvLink) nvlink_total += nccl_link_bw(topo.link(l).spec, sm);
  if (!found) s.intra = nvlink_total > 0 ? NcclHw::NvLink : NcclHw::Pci;
  // NVLS: one node, every GPU linked to the same NVSwitch, which reduces.
  auto reducing_switch = [&](int gpu) {
    for (int l : topo.out_links(topo.gpu_device(gpu))) {
      const DirLink& dl = topo.link(l);
      if (dl.spec.kind == LinkKind::NvLink && topo.device(dl.to).reduce_efficiency > 0) return dl.to;
    }
    return -1;
  };
  // One reducing switch per node, shared by the node's group GPUs.
  std::map<int, int> switch_of_node;
  s.nvls_switch = std::all_of(gpus.begin(), gpus.end(), [&](int g) {
    const int sw = reducing_switch(g);
    const auto [it, fresh] = switch_of_node.emplace(topo.node_of_gpu(g), sw);
    return sw >= 0 && it->second == sw;
  });
  s.intra_total_GBps = nvlink_total > 0 ? nvlink_total : s.intra_path_GBps;
  if (s.nodes > 1) {
    for (int g : gpus)
      if (topo.node_of_gpu(g) != node0) {
        s.nic_path_GBps = path_bw(g0, g, nullptr);
        break;
      }
    for (int id : topo.node_devices(node0)) {
      if (topo.device(id).kind != DeviceKind::Nic) continue;
      double bw = 0;
      for (int l : topo.out_links(id))
        if (!topo.link(l).down &&
            (topo.link(l).spec.kind == LinkKind::InfiniBand || topo.link(l).spec.kind == LinkKind::Ethernet))
          bw += nccl_link_bw(topo.link(l).spec, sm);
      if (bw <= 0) continue;
      s.nic_GBps = s.nics_per_node == 0 ? bw : std::min(s.nic_GBps, bw);
      ++s.nics_per_node;
    }
    if (s.nics_per_node == 0) {  // no NIC devices: the route's bottleneck stands for one NIC
      s.nic_GBps = s.nic_path_GBps;
      s.nics_per_node = 1;
    }
  }
  return s;
}

NcclGraph nccl_graph(const NcclShape& shape, const NcclConfig& config) {
  const bool multi = shape.nodes > 1;
  const std::vector<double> speeds = search_speeds(config.sm, multi);
  const double inf = std::numeric_limits<double>::infinity();
  const bool one_per_node = shape.intra_path_GBps <= 0;
  double max_bw = one_per_node ? inf : shape.intra_path_GBps;
  if (multi) max_bw = std::min(max_bw, std::min(shape.nic_path_GBps, shape.nic_GBps));
  const double total = one_per_node ? inf : shape.intra_total_GBps;
  auto channels_at = [&](double s) {
    double c = kMaxRingChannels;
    if (std::isfinite(total)) c = std::min(c, std::floor(total / s + 1e-9));
    if (multi) c = std::min(c, shape.nics_per_node * std::floor(shape.nic_GBps / s + 1e-9));
    return static_cast<int>(c);
  };
  NcclGraph g;
  for (double s : speeds) {
    if (s > max_bw + 1e-9) continue;
    const int c = channels_at(s);
    if (c >= 1 && c * s > g.channels * g.bw_GBps + 1e-9) {
      g.channels = c;
      g.bw_GBps = s;
    }
  }
  if (g.channels == 0) {
    g.channels = 1;
    g.bw_GBps = speeds.back();
  }
  g.how = fmt::format("search: {} x {} GB/s (speed from NCCL's {} list maximizing channels x speed under {}{})",
                      g.channels, g.bw_GBps, multi ? "inter-node" : "intra-node",
                      std::isfinite(total) ? fmt::format("GPU {:.1f} GB/s", total) : std::string("no intra limit"),
                      multi ? fmt::format(", {} NIC(s) x {:.1f} GB/s, path {:.1f} GB/s", shape.nics_per_node,
                                          shape.nic_GBps, shape.nic_path_GBps)
                            : std::string());
  // Channel duplication (search.cc ncclTopoDupChannels).
  if (g.bw_GBps >= 25.0 && !(config.sm > 80 && g.bw_GBps < 50.0 && g.channels > 4)) {
    const int dup = std::min(2 * g.channels, kMaxRingChannels);
    const int div = (dup + g.channels - 1) / g.channels;
    g.bw_GBps /= div;
    g.channels = dup;
    g.how += fmt::format("; duplicated to {} x {} GB/s", g.channels, g.bw_GBps);
  }
  if (config.channels > 0) {
    g.channels = config.channels;
    g.how +=
        fmt::format("; {} (bandwidth scales with channels)", flag("nccl-channels", std::to_string(config.channels)));
  }
  return g;
}

namespace {

// The NVLS graph across nodes (search.cc, pattern NVLS with a network): one channel per head,
// a GPU of a node with its own NIC (at most one per GPU, NCCL_MAX_NVLS_ARITY). Pass 1 tries
// NCCL's inter-node speeds from the fastest, bwIntra = bwInter = s, until every GPU's NVLink
// carries its (heads + 1) x s (its share of every channel, twice as head) and the head's NIC
// and GPU-NIC path carry s; pass 2 raises bwInter to faster speeds while it is below 2 x
// bwIntra and the NIC and path still carry it. DGX H100: 8 heads, (8 + 1) x 40 <= 370.8, so
// bwIntra 40; bwInter 40 -> 42 -> 45 (48 is over the 47.2 GB/s path).
NcclGraph nccl_nvls_tree_graph(const NcclShape& shape, int sm) {
  NcclGraph g;
  const int per_node = shape.ranks / shape.nodes;
  const int heads = std::min({per_node, shape.nics_per_node, kMaxNvlsArity});
  if (heads < 2) return g;  // NVLS-Tree needs 2 channels
  const double net = std::min(shape.nic_GBps, shape.nic_path_GBps);
  const std::vector<double> speeds = search_speeds(sm, /*inter=*/true);
  std::size_t i = 0;
  auto fits = [&](double s) { return (heads + 1) * s <= shape.intra_total_GBps + 1e-9 && s <= net + 1e-9; };
  while (i < speeds.size() && !fits(speeds[i])) ++i;
  if (i == speeds.size()) return g;
  g.channels = heads;
  g.bw_GBps = speeds[i];
  std::size_t j = i;
  while (j > 0 && speeds[j] < 2 * g.bw_GBps && speeds[j - 1] <= net + 1e-9) --j;
  g.bw_inter_GBps = speeds[j];
  g.how = fmt::format(
      "NVLS-Tree search: {} channels (one per NIC head) x bwIntra {} GB/s, the fastest {} inter-node speed s with "
      "({} + 1) x s <= GPU {:.1f} GB/s and s <= NIC/path {:.1f} GB/s; bwInter {} GB/s (raised while below 2 x "
      "bwIntra and within NIC/path)",
      g.channels, g.bw_GBps, sm >= 100 ? "sm100" : "sm90", heads, shape.intra_total_GBps, net, g.bw_inter_GBps);
  return g;
}

}  // namespace

NcclGraph nccl_nvls_graph(const NcclShape& shape, const NcclConfig& config) {
  NcclGraph g;
  if (!shape.nvls_switch || nvls_efficiency(config.sm) <= 0 || shape.ranks < 2) return g;
  if (shape.nodes > 1) return nccl_nvls_tree_graph(shape, config.sm);
  const int gpus = std::min(shape.ranks, kMaxNvlsArity);
  const std::vector<double> speeds = search_speeds(config.sm, /*inter=*/false);
  std::size_t i = 0;
  while (i + 1 < speeds.size() && (gpus + 1) * speeds[i] > shape.intra_total_GBps + 1e-9) ++i;
  if ((gpus + 1) * speeds[i] > shape.intra_total_GBps + 1e-9) return g;  // not even the slowest speed fits
  g.channels = gpus;
  g.bw_GBps = speeds[i];
  std::size_t j = i;
  while (j > 0 && speeds[j - 1] < 2 * g.bw_GBps) --j;
  g.bw_inter_GBps = speeds[j];
  g.how = fmt::format(
      "NVLS search: {} channels (one per GPU) x {} GB/s, the fastest {} speed s with ({} + 1) x s <= GPU {:.1f} "
      "GB/s; bwInter {} GB/s (fastest speed below 2s)",
      g.channels, g.bw_GBps, config.sm >= 100 ? "sm100" : "sm90", gpus, shape.intra_total_GBps, g.bw_inter_GBps);
  return g;
}

namespace {

// The requests NCCL's tuning model has no answer for, first failing check reported.
void check_nccl_request(CollKind kind, Bytes bytes, const NcclShape& shape) {
  if (kind == CollKind::AllToAll || kind == CollKind::SendRecv)
    throw Error(
        fmt::format("{}: NCCL's tuning model covers allreduce, allgather, reducescatter, broadcast and "
                    "reduce; {} is point-to-point in NCCL (no algorithm or protocol to choose); use {}",
                    flag("algo", "nccl"), to_string(kind), flag("algo", "auto")));
  if (shape.ranks < 2)
    throw Error(
        fmt::format("{}: NCCL's tuning model needs at least 2 ranks (got {})", flag("algo", "nccl"), shape.ranks));
  if (bytes <= 0)
    throw Error(fmt::format("{}: NCCL launches nothing for 0 bytes; use {} > 0 with {}", flag("bytes"), flag("bytes"),
                            flag("algo", "nccl")));
  if (shape.nodes < 1 || shape.ranks < shape.nodes)
    throw Error(fmt::format("nccl model: {} ranks on {} nodes is not a group shape", shape.ranks, shape.nodes));
}

// What every (algorithm, protocol) candidate is computed from.
struct Tuning {
  Tuning(CollKind kind, Bytes bytes, const NcclShape& shape, const NcclConfig& config, const NcclGraph& graph,
         const NcclGraph& nvls)
      : kind(kind),
        bytes(bytes),
        shape(shape),
        n(shape.ranks),
        nodes(shape.nodes),
        sm(config.sm),
        ar(kind == CollKind::AllReduce),
        ag_rs(kind == CollKind::AllGather || kind == CollKind::ReduceScatter),
        nsteps(ar      ? 2 * (n - 1)
               : ag_rs ? n - 1
                       : n),
        inter_steps(ar      ? (nodes > 1 ? 2 * nodes : 0)
                    : ag_rs ? nodes - 1
                            : nodes),
        row(arch_row(sm)),
        col(nodes <= 2 ? nodes - 1 : 2),
        ll_max(nccl_ll_max_bw_GBps(sm, nodes)),
        ppn(static_cast<double>(n) / nodes),
        ch(graph.channels),
        bw(graph.bw_GBps),
        intra_hw(shape.intra == NcclHw::NvLink ? 0 : 1),
        ll128_ok((sm == 70 || sm == 80 || sm == 90 || sm >= 100) && (shape.intra == NcclHw::NvLink || ppn < 2)),
        d(static_cast<double>(bytes)),
        nvls(nvls) {}

  const CollKind kind;
  const Bytes bytes;
  const NcclShape& shape;
  const int n, nodes, sm;
  const bool ar;
  const bool ag_rs;
  const int nsteps;
  const int inter_steps;
  const int row;
  const int col;
  const double ll_max;
  const double ppn;
  const int ch;
  const double bw;
  const int intra_hw;
  const bool ll128_ok;
  const double d;
  const NcclGraph& nvls;
};

// Bus bandwidth, then algorithm bandwidth, of an enabled candidate.
void candidate_bandwidth(const Tuning& t, int pr, NcclCandidate& c) {
  const int ch = t.ch, row = t.row, col = t.col, nodes = t.nodes;
  auto& st = c.steps;
  if (c.algo == NcclAlgo::Nvls || c.algo == NcclAlgo::NvlsTree) {
    // all-reduce: the switch's reduce and multicast halves pipelined (x2); NVLS-Tree's trees
    // across two nodes use both directions of each NIC (bwInter x 2) and its channels are capped
    const int nc = t.nvls.channels;
    const double eff = nvls_efficiency(t.sm);
    const double intra = t.nvls.bw_GBps * eff * (nc - 1) / nc * 2;
    const bool tree = c.algo == NcclAlgo::NvlsTree;
    const double inter = t.nvls.bw_inter_GBps * (tree && nodes <= 2 ? 2 : 1);
    const double cap = tree ? kPerChMaxNvlsTreeBw[t.sm >= 100 ? 1 : 0][col] : std::numeric_limits<double>::infinity();
    const double per_ch = std::min({intra, inter, cap});
    c.busbw_GBps = nc * per_ch;
    st.push_back(fmt::format(
        "busbw = channels x min(bw x nvlsEfficiency x (ch-1)/ch x 2, bwInter{}{}) = {} x min({} x {} x {}/{} x 2, "
        "{}{}) = {:.2f} GB/s",
        tree && nodes <= 2 ? " x 2" : "", tree ? ", perChMaxNVLSTreeBw" : "", nc, t.nvls.bw_GBps, eff, nc - 1, nc,
        inter, tree ? fmt::format(", {}", cap) : std::string(), c.busbw_GBps));
    c.algbw_GBps = c.busbw_GBps * t.n / t.nsteps;
    st.push_back(fmt::format("algbw = busbw x ranks/nsteps {}/{} = {:.2f} GB/s", t.n, t.nsteps, c.algbw_GBps));
    return;
  }
  double bus = ch * t.bw;
  st.push_back(fmt::format("busbw = channels x bw = {} x {} = {:.2f} GB/s", ch, t.bw, bus));
  if (c.algo == NcclAlgo::Ring && c.proto == NcclProto::LL) {
    bus = std::min(t.ll_max, bus * 0.5);
    st.push_back(fmt::format("  Ring/LL: min(llMaxBw {}, busbw x 1/2) = {:.2f}", t.ll_max, bus));
  }
  if (c.algo == NcclAlgo::Ring && c.proto == NcclProto::LL128) {
    const double f = t.ppn < 2 ? 0.7 : 0.92;
    const double cap = ch * kPerChMaxRingLL128Bw[row][col];
    bus = std::min(bus * f, cap);
    st.push_back(
        fmt::format("  Ring/LL128: min(busbw x {}, {} ch x {}) = {:.2f}", f, ch, kPerChMaxRingLL128Bw[row][col], bus));
  }
  if (c.algo == NcclAlgo::Tree) {
    bus = std::min(bus * 0.92, ch * kPerChMaxTreeBw[row][col]);
    st.push_back(fmt::format("  Tree: min(busbw x 0.92, {} ch x {}) = {:.2f}", ch, kPerChMaxTreeBw[row][col], bus));
    if (c.proto == NcclProto::LL) {
      bus = std::min(bus / 3.8, t.ll_max);
      st.push_back(fmt::format("  Tree/LL: min(busbw / 3.8, llMaxBw {}) = {:.2f}", t.ll_max, bus));
    } else if (c.proto == NcclProto::LL128) {
      const double f = nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0;
      bus = std::min(bus * f, ch * kPerChMaxTreeLL128Bw[row][col]);
      st.push_back(fmt::format("  Tree/LL128: min(busbw x {}, {} ch x {}) = {:.2f}", nodes == 1 ? "7/9" : "120/128", ch,
                               kPerChMaxTreeLL128Bw[row][col], bus));
    }
  }
  c.busbw_GBps = bus;
  const double ratio = c.algo == NcclAlgo::Ring ? static_cast<double>(t.n) / t.nsteps : 0.5;
  double alg = bus * ratio;
  st.push_back(fmt::format(
      "algbw = busbw x {} = {:.2f} GB/s",
      c.algo == NcclAlgo::Ring ? fmt::format("ranks/nsteps {}/{}", t.n, t.nsteps) : std::string("1/2"), alg));
  const int log_size = log2i(t.bytes >> 6);
  if (c.algo == NcclAlgo::Tree && log_size < 23) {
    alg *= kTreeCorrection[pr][log_size];
    st.push_back(fmt::format("  tree correction for 2^{} x 64 B: x{} = {:.2f} GB/s", log_size,
                             kTreeCorrection[pr][log_size], alg));
  }
  c.algbw_GBps = alg;
}

// Latency of an enabled candidate.
void candidate_latency(const Tuning& t, int a, int pr, NcclCandidate& c) {
  const int n = t.n, nodes = t.nodes, nsteps = t.nsteps, inter_steps = t.inter_steps;
  auto& st = c.steps;
  if (c.algo == NcclAlgo::Nvls) {
    c.latency_us = kNcclNvlsLatUs;
    st.push_back(fmt::format("latency = NVLS over NVLink {} us (no base latency)", kNcclNvlsLatUs));
    return;
  }
  if (c.algo == NcclAlgo::NvlsTree) {
    // NCCL adds the graph's NIC latency (latencyInter) to each NET hop, twice under Simple
    // (the flush); the IB plugin reports 0, as our NICs are modelled, so it is left out.
    c.latency_us = kNvlsTreeNvlinkLatUs + 2 * log2i(nodes) * kNvlsTreeNetLatUs;
    st.push_back(fmt::format("latency = NVLink {} + 2 x log2i({}) {} x NET {} = {:.2f} us (no base latency)",
                             kNvlsTreeNvlinkLatUs, nodes, log2i(nodes), kNvlsTreeNetLatUs, c.latency_us));
    return;
  }
  double lat = kBaseLat[a][pr];
  double intra = kHwLat[t.intra_hw][a][pr];
  const double inter = kHwLat[2][a][pr];
  if (nodes > 1 && c.proto == NcclProto::LL) {  // tuning.cc: an LL hop in the node, on a multi-node communicator
    intra *= kNcclLlMultiNodeIntraFactor;
    st.push_back(
        fmt::format("  LL on {} nodes: intra-node hop x {} = {:.2f} us", nodes, kNcclLlMultiNodeIntraFactor, intra));
  }
  if (c.algo == NcclAlgo::Ring) {
    if (t.kind == CollKind::Broadcast || t.kind == CollKind::Reduce) {
      const double hop = kHwLat[nodes == 1 ? t.intra_hw : 2][a][pr];
      lat += hop;
      st.push_back(fmt::format("latency = base {} + one {} hop {} = {:.2f} us (pipelined chain, same channels)",
                               kBaseLat[a][pr], nodes == 1 ? to_string(t.shape.intra) : "NET", hop, lat));
    } else {
      const double ovh = nodes > 1 ? kNetOverhead * (c.proto == NcclProto::Simple ? 3 : 1) : 0.0;
      intra = std::max(intra, ovh);
      lat += (nsteps - inter_steps) * intra + inter_steps * inter;
      st.push_back(fmt::format("latency = base {} + {} intra steps x {} + {} inter steps x {} = {:.2f} us",
                               kBaseLat[a][pr], nsteps - inter_steps, intra, inter_steps, inter, lat));
    }
    if (c.proto == NcclProto::Simple && nodes > 1 && t.ar && t.bytes / (static_cast<Bytes>(t.ch) * n) >= 64) {
      const double f = t.sm < 80 ? 1.9 : 1.4;
      lat *= f;
      st.push_back(fmt::format("  ring plateau (multi-node allreduce): latency x {} = {:.2f} us", f, lat));
    }
  } else {
    const int per_node = n / nodes;
    lat += 2 * ((per_node - 1) * intra + log2i(nodes) * inter);
    st.push_back(fmt::format("latency = base {} + 2 x (({} - 1) x {} + log2i({}) {} x {}) = {:.2f} us", kBaseLat[a][pr],
                             per_node, intra, nodes, log2i(nodes), inter, lat));
  }
  c.latency_us = lat;
}

// Why NCCL would not run candidate `c`, or "" when it would.
std::string disabled_reason(const Tuning& t, const NcclCandidate& c) {
  if (c.algo == NcclAlgo::Nvls) {
    if (c.proto != NcclProto::Simple) return "NVLS runs Simple only";
    if (!t.ar)
      return "NVLS is modelled for allreduce (NCCL's NVLS reduce-scatter/all-gather model is slower than Ring on one "
             "node)";
    if (t.nodes > 1) return "NVLS across nodes needs CollNet (SHARP on the network), not modelled; see NVLSTree";
    if (t.nvls.channels < 2)
      return t.sm < 90 ? "NVLS needs sm90 or newer" : "no NVSwitch that reduces (NVLink SHARP) joins the group";
    return "";
  }
  if (c.algo == NcclAlgo::NvlsTree) {
    if (c.proto != NcclProto::Simple) return "NVLSTree runs Simple only";
    if (!t.ar) return "NCCL runs NVLSTree for allreduce only";
    if (t.nodes == 1) return "NCCL disables NVLSTree on one node (NVLS is its one-node form)";
    if (t.nvls.channels < 2)
      return t.sm < 90 ? "NVLSTree needs sm90 or newer"
                       : "needs an NVSwitch that reduces (NVLink SHARP) in every node and 2 GPUs with NICs per node";
    return "";
  }
  if (c.algo == NcclAlgo::Tree && !t.ar) return "NCCL runs Tree for allreduce only";
  if (c.proto == NcclProto::LL128 && !t.ll128_ok)
    return "LL128 is on by default only for sm70/sm80/sm90/sm100 GPUs joined by NVLink";
  return "";
}

// Algorithm a (NCCL's order) with protocol pr: disabled with the reason, or timed.
NcclCandidate nccl_candidate(const Tuning& t, int a, int pr) {
  NcclCandidate c;
  c.algo = static_cast<NcclAlgo>(a);
  c.proto = static_cast<NcclProto>(pr);
  c.disabled_why = disabled_reason(t, c);
  if (!c.disabled_why.empty()) return c;
  c.enabled = true;
  candidate_bandwidth(t, pr, c);
  candidate_latency(t, a, pr, c);
  const double lat = c.latency_us, alg = c.algbw_GBps;
  c.time_us = lat + t.d / (1000.0 * alg);
  c.steps.push_back(
      fmt::format("time = {:.2f} us + {} B / (1000 x {:.2f} GB/s) = {:.2f} us", lat, t.bytes, alg, c.time_us));
  return c;
}

}  // namespace

NcclPrediction nccl_predict(CollKind kind, Bytes bytes, const NcclShape& shape, const NcclConfig& config) {
  check_nccl_request(kind, bytes, shape);
  NcclPrediction p;
  p.kind = kind;
  p.bytes = bytes;
  p.shape = shape;
  p.config = config;
  p.graph = nccl_graph(shape, config);
  p.nvls_graph = nccl_nvls_graph(shape, config);

  const Tuning tuning(kind, bytes, shape, config, p.graph, p.nvls_graph);
  for (int a = 0; a < kAlgos; ++a)
    for (int pr = 0; pr < kProtos; ++pr) p.candidates.push_back(nccl_candidate(tuning, a, pr));
  double best = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < p.candidates.size(); ++i)
    if (p.candidates[i].enabled && p.candidates[i].time_us < best) {
      best = p.candidates[i].time_us;
      p.chosen_index = static_cast<int>(i);
    }
  p.time = duration_ps(best * 1e6, "the collective");
  return p;
}

std::string nccl_table_text(const NcclPrediction& p) {
  const NcclShape& s = p.shape;
  std::string out = fmt::format(
      "NCCL 2.20 tuning model (NVLS, NVLSTree, LL rate{}: 2.28): {} ranks on {} node{} ({} per node), sm{}, intra "
      "{}{}\n",
      p.config.sm >= 100 ? ", Blackwell rows" : "", s.ranks, s.nodes, s.nodes == 1 ? "" : "s", s.ranks / s.nodes,
      p.config.sm, to_string(s.intra), s.nodes > 1 ? ", inter NET" : "");
  out += fmt::format("  channels  {} x {} GB/s per channel ({})\n", p.graph.channels, p.graph.bw_GBps, p.graph.how);
  if (p.nvls_graph.channels > 0) out += fmt::format("  nvls      {}\n", p.nvls_graph.how);
  out += fmt::format("  {:<8} {:<7} {:>12} {:>12} {:>12} {:>12}\n", "algo", "proto", "latency(us)", "busbw(GB/s)",
                     "algbw(GB/s)", "time(us)");
  for (std::size_t i = 0; i < p.candidates.size(); ++i) {
    const NcclCandidate& c = p.candidates[i];
    if (!c.enabled) {
      out +=
          fmt::format("  {:<8} {:<7} {:>12}   off: {}\n", to_string(c.algo), to_string(c.proto), "-", c.disabled_why);
      continue;
    }
    out += fmt::format("  {:<8} {:<7} {:>12.2f} {:>12.2f} {:>12.2f} {:>12.2f}{}\n", to_string(c.algo),
                       to_string(c.proto), c.latency_us, c.busbw_GBps, c.algbw_GBps, c.time_us,
                       static_cast<int>(i) == p.chosen_index ? "  <- chosen" : "");
  }
  // Why: the runner-up and by how much.
  int second = -1;
  for (std::size_t i = 0; i < p.candidates.size(); ++i) {
    const auto& c = p.candidates[i];
    if (!c.enabled || static_cast<int>(i) == p.chosen_index) continue;
    if (second < 0 || c.time_us < p.candidates[static_cast<std::size_t>(second)].time_us) second = static_cast<int>(i);
  }
  const NcclCandidate& ch = p.chosen();
  const double lat_share = ch.time_us > 0 ? ch.latency_us / ch.time_us : 0;
  out += fmt::format("  NCCL picks {}: lowest predicted time ({} bound: latency is {:.0f}% of it)", p.choice_name(),
                     lat_share >= 0.5 ? "latency" : "bandwidth", 100 * lat_share);
  if (second >= 0) {
    const auto& r = p.candidates[static_cast<std::size_t>(second)];
    out += fmt::format("; next {}/{} at {:.2f} us (+{:.1f}%)", to_string(r.algo), to_string(r.proto), r.time_us,
                       100.0 * (r.time_us / ch.time_us - 1.0));
  }
  out += "\n";
  return out;
}

std::string nccl_explain_text(const NcclPrediction& p) {
  std::string out =
      "\nNCCL model formulas (NCCL 2.20.3 src/graph/tuning.cc, NVLS and NVLSTree 2.28; docs/nccl-model.md), bytes in "
      "B, bw in GB/s:\n";
  for (const NcclCandidate& c : p.candidates) {
    if (!c.enabled) continue;
    out += fmt::format(" {}/{}:\n", to_string(c.algo), to_string(c.proto));
    for (const auto& line : c.steps) out += "    " + line + "\n";
  }
  return out;
}

}  // namespace meshsim
