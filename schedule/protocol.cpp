#include "schedule/protocol.h"

#include <algorithm>
#include <cmath>

#include "core/enum_names.h"

namespace meshsim {

namespace {
constexpr EnumName<Protocol> kProtocolNames[] = {{Protocol::None, "none"},
                                                 {Protocol::LL, "LL"},
                                                 {Protocol::LL128, "LL128"},
                                                 {Protocol::Simple, "Simple"},
                                                 {Protocol::NvlsSimple, "NVLS-Simple"},
                                                 {Protocol::NvlsTreeSimple, "NVLSTree-Simple"}};
constexpr EnumName<HopKind> kHopKindNames[] = {
    {HopKind::NvLink, "NVLink"}, {HopKind::Pci, "PCI"}, {HopKind::Net, "NET"}};
constexpr int kTree = 0, kRing = 1;
constexpr int kSimple = 2;
constexpr double kLl128Fraction = 0.92;  // NCCL's ring refinement for LL128 (120 of 128 bytes)
// NCCL 2.28's LL refinements: a ring's bus bandwidth x 1/2 (half the bytes are flags), a
// tree's x 1/3.8; both at most llMaxBw.
constexpr double kLlRingFraction = 0.5, kLlTreeFraction = 1.0 / 3.8;
// tuning.cc llMaxBws (NCCL 2.28), GB/s: rows Volta, Ampere, Hopper, Blackwell on one node;
// across nodes NCCL reads row 0 (x86 Intel hosts) at columns 2 nodes, more.
constexpr double kLlMaxBwOneNode[4] = {39.0, 87.7, 141.0, 282.0};
constexpr double kLlMaxBwAcross[2] = {39.0, 20.4};
constexpr double kLlThreads = 512;        // NCCL_LL_MAX_NTHREADS
constexpr double kLlThreadThreshold = 8;  // NCCL_LL_THREAD_THRESHOLD, bytes per thread
}  // namespace

double nccl_ll_max_bw_GBps(int sm, int nodes) {
  if (nodes > 1) return kLlMaxBwAcross[nodes == 2 ? 0 : 1];
  return kLlMaxBwOneNode[sm >= 100 ? 3 : sm >= 90 ? 2 : sm >= 80 ? 1 : 0];
}

int nccl_ll_channels_open(double bytes, int ranks, int channels) {
  if (channels < 1) return 1;
  const double per_channel = kLlThreads * kLlThreadThreshold * std::max(ranks, 1);
  const double open = std::floor(bytes / per_channel);
  return static_cast<int>(std::clamp(open, 1.0, static_cast<double>(channels)));
}

const char* to_string(Protocol p) { return enum_name(kProtocolNames, p); }
std::optional<Protocol> parse_protocol(const std::string& s) { return enum_parse(kProtocolNames, s); }
const char* to_string(HopKind h) { return enum_name(kHopKindNames, h); }

ProtocolCosts protocol_costs(Protocol p, HopRows rows, const ProtocolScope& scope) {
  int proto = 0;
  switch (p) {
    case Protocol::None:
      return {};
    case Protocol::NvlsSimple:
      return {kNcclNvlsLatUs * 1e6, {}, 1.0};
    case Protocol::NvlsTreeSimple:
      return {kNcclNvlsTreeNvlinkLatUs * 1e6, {0.0, 0.0, kNcclNvlsTreeNetLatUs * 1e6}, 1.0};
    case Protocol::LL:
      proto = 0;
      break;
    case Protocol::LL128:
      proto = 1;
      break;
    case Protocol::Simple:
      proto = kSimple;
      break;
  }
  auto row = [&](HopRow r) { return r == HopRow::Tree && proto != kSimple ? kTree : kRing; };
  ProtocolCosts c;
  c.launch_ps = kNcclBaseLatUs[kRing][proto] * 1e6;
  const double ll_intra = scope.multi_node && p == Protocol::LL ? kNcclLlMultiNodeIntraFactor : 1.0;
  for (HopKind h : {HopKind::NvLink, HopKind::Pci}) {
    const auto i = static_cast<std::size_t>(h);
    c.hop_ps[i] = kNcclHwLatUs[i][row(rows.intra)][proto] * ll_intra * 1e6;
  }
  c.hop_ps[static_cast<std::size_t>(HopKind::Net)] = kNcclHwLatUs[2][row(rows.net)][proto] * 1e6;
  if (p == Protocol::LL) {
    // A ring's or a tree's refinement, as the program's hops inside a node are charged.
    const bool tree = rows.intra == HopRow::Tree;
    const int open = nccl_ll_channels_open(scope.bytes, scope.ranks, scope.channels);
    c.payload_fraction = std::min(tree ? kLlTreeFraction : kLlRingFraction, scope.ll_cap_fraction) *
                         (scope.channels > 0 ? static_cast<double>(open) / scope.channels : 1.0);
  } else {
    c.payload_fraction = p == Protocol::LL128 ? kLl128Fraction : 1.0;
  }
  return c;
}

}  // namespace meshsim
