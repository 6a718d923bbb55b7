#include "schedule/protocol.h"

#include "core/enum_names.h"

namespace meshsim {

namespace {
constexpr EnumName<Protocol> kProtocolNames[] = {{Protocol::None, "none"},
                                                 {Protocol::LL, "LL"},
                                                 {Protocol::LL128, "LL128"},
                                                 {Protocol::Simple, "Simple"},
                                                 {Protocol::NvlsSimple, "NVLS-Simple"}};
constexpr EnumName<HopKind> kHopKindNames[] = {
    {HopKind::NvLink, "NVLink"}, {HopKind::Pci, "PCI"}, {HopKind::Net, "NET"}};
constexpr int kRing = 1;

ProtocolCosts ring_row(int p, double payload_fraction) {
  ProtocolCosts c;
  c.launch_ps = kNcclBaseLatUs[kRing][p] * 1e6;
  for (int h = 0; h < 3; ++h) c.hop_ps[static_cast<std::size_t>(h)] = kNcclHwLatUs[h][kRing][p] * 1e6;
  c.payload_fraction = payload_fraction;
  return c;
}
}  // namespace

const char* to_string(Protocol p) { return enum_name(kProtocolNames, p); }
std::optional<Protocol> parse_protocol(const std::string& s) { return enum_parse(kProtocolNames, s); }
const char* to_string(HopKind h) { return enum_name(kHopKindNames, h); }

const ProtocolCosts& protocol_costs(Protocol p) {
  // Payload fractions: NCCL's ring refinements (tuning.cc): LL x 1/4, LL128 x 0.92.
  static const ProtocolCosts none{};
  static const ProtocolCosts ll = ring_row(0, 0.25);
  static const ProtocolCosts ll128 = ring_row(1, 0.92);
  static const ProtocolCosts simple = ring_row(2, 1.0);
  static const ProtocolCosts nvls{kNcclNvlsLatUs * 1e6, {}, 1.0};
  switch (p) {
    case Protocol::LL:
      return ll;
    case Protocol::LL128:
      return ll128;
    case Protocol::Simple:
      return simple;
    case Protocol::NvlsSimple:
      return nvls;
    case Protocol::None:
      break;
  }
  return none;
}

}  // namespace meshsim
