// How a GPU communication runtime moves a step's bytes: NCCL's three protocols.
//
// A step program says what moves where; on GPUs, a runtime (NCCL, or our cuda backend in
// NCCL's manner) moves it with one of three protocols, and that sets what a small message
// costs:
//   LL      8-byte stores carrying 4 bytes of data and a 4-byte flag; the receiver polls
//           the flag, so a hop is fast (no fence), but at most half the link rate carries
//           payload (the flags), capped per GPU architecture and narrowed to the channels
//           NCCL opens for a small message (ProtocolScope below; NCCL 2.28's rules).
//   LL128   128-byte lines with 8 bytes of flag (120/128 payload; NCCL rates it 0.92),
//           needs NVLink between the GPUs (NCCL enables it only there).
//   Simple  plain copies into the peer's buffer, then a memory fence and a flag: full rate,
//           the slowest hop.
// Each costs a launch (once per collective: the kernel launch and the first chunk's
// setup) and a latency per step by the kind of hop (NVLink, PCI, network) and the kind of
// program (a ring's hop or a tree's, HopRow below). The numbers are NCCL 2.20's own
// calibration (src/graph/tuning.cc baseLat and hwLat), measured by NVIDIA on real systems;
// sim/nccl_model reads the same tables. A step's latency is the
// larger of the protocol's and the route's own (the wire cannot be beaten; NCCL's hop
// already includes the wire). docs/math.md section 1.6 has the formulas.
//
// A topology says whether its collectives run under these protocols (Topology::protocols:
// the GPU presets do; the synthetic switch/ring/torus references and a YAML topology
// without `protocols: nccl` do not, and keep the bare alpha-beta model).
#pragma once

#include <array>
#include <optional>
#include <string>

namespace meshsim {

// NvlsSimple: Simple as NCCL's NVLS algorithm runs it (reduce in the NVSwitch, multicast
// back), with NVLS's own latency: one switch round trip of 25 us, no per-step cost.
// NvlsTreeSimple: Simple as NCCL's NVLS-Tree runs it: NVLS's 25 us once for the switch part
// and NVLS-Tree's own latency per network hop of its trees (20.9 us), no other per-step cost.
enum class Protocol { None, LL, LL128, Simple, NvlsSimple, NvlsTreeSimple };
// "none", "LL", "LL128", "Simple", "NVLS-Simple", "NVLSTree-Simple"
const char* to_string(Protocol p);
std::optional<Protocol> parse_protocol(const std::string& s);  // the same names

// The kind of a hop between two GPUs, as NCCL's latency table has it.
enum class HopKind { NvLink, Pci, Net };
const char* to_string(HopKind h);  // "NVLink", "PCI", "NET"

// NCCL 2.20.3's latencies in microseconds (tuning.cc), for its Tree and Ring algorithms and
// the LL, LL128, Simple protocols: the base per collective and the latency per hop kind.
inline constexpr double kNcclBaseLatUs[2][3] = {{6.8, 14.0, 0.0}, {6.6, 14.0, 8.4}};
inline constexpr double kNcclHwLatUs[3][2][3] = {{{0.6, 1.25, 28.0}, {0.6, 1.9, 3.4}},   // NVLink
                                                 {{1.0, 1.9, 28.0}, {1.0, 2.5, 5.7}},    // PCI
                                                 {{5.0, 8.5, 28.0}, {2.7, 4.0, 14.0}}};  // network

// NVLS over NVLink, Simple (NCCL 2.2x tuning.cc hwLat; NVLS has no base latency): the
// whole collective's latency on one node.
inline constexpr double kNcclNvlsLatUs = 25.0;
// NVLS-Tree (NCCL 2.28 tuning.cc): 25 us for its NVLink part, 20.9 us per network hop, no base.
inline constexpr double kNcclNvlsTreeNvlinkLatUs = 25.0;
inline constexpr double kNcclNvlsTreeNetLatUs = 20.9;

// Which of NCCL's per-hop latency rows a step program's hops are charged from. A ring's step
// is a point-to-point hop (Ring rows). A tree's hop receives from its children, reduces and
// forwards (Tree rows): over the network NCCL charges it 5.0 us under LL and 8.5 under LL128
// where a ring's costs 2.7 and 4.0. Under Simple every program keeps the Ring row: NCCL's
// Tree/Simple entries (28 us) are the time of a whole 256 KiB chunk (tuning.cc says so), and
// our programs time their chunks' bytes themselves.
enum class HopRow { Ring, Tree };
struct HopRows {
  HopRow intra = HopRow::Ring;  // hops inside a node (NVLink or PCI)
  HopRow net = HopRow::Ring;    // hops between nodes
};

// What a protocol's rate depends on beyond the protocol: the group's links and the message.
// LL (NCCL 2.28, tuning.cc and enqueue.cc): with every channel running, a ring's LL carries
// payload at half its links' rate (half the bytes are flags; a tree's at 1/3.8), at most
// NCCL's llMaxBw (nccl_ll_max_bw_GBps), here a fraction of the group's slowest link
// (`ll_cap_fraction`, set by derive_cost_params); a small message runs on fewer channels
// (nccl_ll_channels_open), each at 1/channels of that rate.
struct ProtocolScope {
  bool multi_node = false;       // the group spans nodes (NCCL's 1.8x on LL hops inside a node)
  double ll_cap_fraction = 1.0;  // llMaxBw / the group's slowest link rate (1: no cap binds)
  int channels = 0;              // NCCL's ring channels for the group; 0: never narrowed
  double bytes = 0;              // the collective's size
  int ranks = 0;                 // the group's ranks
};

// One protocol's costs as a step program pays them: the launch (NCCL's Ring base latency; its
// Tree base differs by 0.2 us under LL and is folded into the Tree/Simple hop) and a latency per
// step by hop kind, from the program's rows. On a communicator that spans nodes NCCL charges an
// LL hop inside a node 1.8x (tuning.cc, every algorithm): `scope.multi_node` applies it. LL's
// payload fraction: min(1/2 ring or 1/3.8 tree, scope.ll_cap_fraction) x the share of channels
// open for the message.
struct ProtocolCosts {
  double launch_ps = 0;            // once per collective
  std::array<double, 3> hop_ps{};  // per step, by HopKind
  double payload_fraction = 1;     // of a link's rate that carries data
  double hop(HopKind h) const { return hop_ps[static_cast<int>(h)]; }
};
// Protocol::None: all zero, payload fraction 1 (the bare alpha-beta model).
ProtocolCosts protocol_costs(Protocol p, HopRows rows = {}, const ProtocolScope& scope = {});

// NCCL's cap on LL's bus bandwidth in GB/s (tuning.cc llMaxBws, NCCL 2.28): on one node by the
// GPU's architecture (sm: compute capability x 10; Volta 39, Ampere 87.7, Hopper 141, Blackwell
// 282); across nodes by the host CPU, taken as x86 Intel: 39 on two nodes, 20.4 on more.
double nccl_ll_max_bw_GBps(int sm, int nodes);

// The channels NCCL opens for an LL message on a ring (enqueue.cc, its ring/tree channel
// tuning): it drops channels while bytes < open x 512 threads x 8 bytes per thread x ranks. At
// least one, at most `channels`. Tree programs are narrowed the same way: NCCL's tree threshold
// leaves out the ranks, but NCCL also rates its trees down at these sizes (tuning.cc's
// treeCorrectionFactor), which our tree programs do not model; the ring's rule keeps the two
// as they compared before. (LL128 and Simple narrow too, below sizes where LL is the faster
// protocol: not modelled.)
int nccl_ll_channels_open(double bytes, int ranks, int channels);

// NCCL's factor on an LL hop inside a node when the communicator spans nodes.
inline constexpr double kNcclLlMultiNodeIntraFactor = 1.8;

// The protocols in NCCL's order (its ties go to the earlier one).
inline constexpr std::array<Protocol, 3> kProtocols = {Protocol::LL, Protocol::LL128, Protocol::Simple};

}  // namespace meshsim
