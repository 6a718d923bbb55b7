#include "schedule/protocol.h"

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
constexpr double kPayloadFraction[3] = {0.25, 0.92, 1.0};  // NCCL's ring refinements: LL x 1/4, LL128 x 0.92
}  // namespace

const char* to_string(Protocol p) { return enum_name(kProtocolNames, p); }
std::optional<Protocol> parse_protocol(const std::string& s) { return enum_parse(kProtocolNames, s); }
const char* to_string(HopKind h) { return enum_name(kHopKindNames, h); }

ProtocolCosts protocol_costs(Protocol p, HopRows rows, bool multi_node) {
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
  const double ll_intra = multi_node && p == Protocol::LL ? kNcclLlMultiNodeIntraFactor : 1.0;
  for (HopKind h : {HopKind::NvLink, HopKind::Pci}) {
    const auto i = static_cast<std::size_t>(h);
    c.hop_ps[i] = kNcclHwLatUs[i][row(rows.intra)][proto] * ll_intra * 1e6;
  }
  c.hop_ps[static_cast<std::size_t>(HopKind::Net)] = kNcclHwLatUs[2][row(rows.net)][proto] * 1e6;
  c.payload_fraction = kPayloadFraction[proto];
  return c;
}

}  // namespace meshsim
