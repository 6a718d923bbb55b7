// nvls: all-reduce reduced and multicast inside the switch, as NCCL's NVLS algorithm runs it
// on NVLink SHARP (NVSwitch gen3, H100/H200 systems).
//
// Every GPU of the group hangs off one switch that reduces (CostParams::switch_*; found by
// derive_cost_params from Device::reduce_efficiency). GPU j owns slice j (n/p bytes). It
// issues a reducing load of slice j through the switch's multicast address: the switch reads
// slice j from all p GPUs, sums it and returns one copy (GPU k -> switch: every slice of k,
// n bytes; switch -> GPU j: n/p). Then GPU j stores the sum to the multicast address once
// (GPU j -> switch: n/p) and the switch writes it to every GPU (switch -> GPU k: n). NCCL
// pipelines both halves, so each direction of a GPU's link carries n(1 + 1/p) bytes at once:
//
//   t = a_s + n(1 + 1/p) * b_s          (no gamma: the switch reduces)
//
// with a_s a GPU -> switch -> GPU trip and b_s the per-byte time of reduce/multicast
// traffic (the link rate times the switch's reduce efficiency). A ring moves 2(p-1)/p*n per
// direction instead: for p = 8 that is 1.75n against 1.125n. The bus bandwidth
// 2(p-1)/p*n/t tends to 2(p-1)/(p+1)/b_s: 1.556x the link's reduce rate.
//
// NCCL runs it as a pipeline of chunks (NCCL 2.2x enqueue.cc): nChannels x p concurrent
// operations (kNvlsChannels channels, one head per rank), each moving chunks of c bytes, where
// c is 128 KiB, halved to 64 KiB below n = 64 ops c, to 32 KiB below 8 ops c and to 16 KiB
// below 2 ops c (for 8 ranks: below 1 GiB, 64 MiB and 8 MiB). Each chunk pays a fixed
// synchronization worth kNvlsChunkOverhead bytes at the operation's rate, and the pipeline
// fills for one round of chunks before the reduce and the multicast overlap:
//
//   t = a_s + (1 + 1/p) [ n + min(n, ops c)(1 + c0/c) + max(n, ops c) c0/c ] b_s / (1 + c0/128 KiB)
//
// normalised so that the largest chunks run at b_s (NCCL's tuning table's rate for NVLS is
// the rate of its 128 KiB chunks). c0 = 9.6 kB is fitted to the ratio of the marginal rates
// between 64 KiB and 128 KiB chunks in the one-node all-reduce sweep of PUBLISHED.md section 6
// (64 MiB..16 GiB, 1.068); it predicts the 32 KiB band's ratio (1.21 against 1.24 measured).
//
// Executed (make): a CPU or a GPU without the switch's help does the same data movement
// by hand, in two steps: every rank sends slice q to rank q, which reduces the p-1 copies
// into its own (reduce-scatter); then every rank sends its reduced slice to all others
// (all-gather). Timed (make_timing): the link loads above, as one step in which every rank
// sends n(1 + 1/p) bytes (scaled by 1/reduce efficiency), spread over the other ranks,
// through the switch; at flow fidelity they share the links with whatever else is in flight.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "schedule/collectives/common.h"

namespace meshsim::collectives {
namespace {

class NvlsProgram final : public StepProgram {
 public:
  explicit NvlsProgram(const CollectiveSpec& s) : p_(s.ranks), n_(s.bytes), elem_(s.element_bytes) {}
  int ranks() const override { return p_; }
  int num_steps(int) const override { return p_ < 2 ? 0 : 2; }
  void step(int rank, int s, Step& out) const override {
    const Range mine = slice(n_, p_, rank, elem_);
    for (int q = 0; q < p_; ++q) {
      if (q == rank) continue;
      const Range theirs = slice(n_, p_, q, elem_);
      // Step 0: slice q to its owner, the p-1 copies of my slice in; step 1: my sum out.
      const Range send = s == 0 ? theirs : mine, recv = s == 0 ? mine : theirs;
      out.sends.push_back(Transfer{q, send.begin, send.size(), s == 0 ? q : rank});
      out.recvs.push_back(Transfer{q, recv.begin, recv.size(), s == 0 ? rank : q});
    }
    out.op = s == 0 ? RecvOp::Reduce : RecvOp::Copy;
  }

 private:
  int p_;
  Bytes n_, elem_;
};

// The link loads of the switch-reduced all-reduce: one step in which every rank sends
// `total` bytes, spread over the other ranks. The share of the peer j places after the
// sender is floor((j+1)T/(p-1)) - floor(jT/(p-1)), so every rank's sends and every rank's
// receives add up to exactly T.
class NvlsLoadProgram final : public StepProgram {
 public:
  NvlsLoadProgram(int p, Bytes total) : p_(p), total_(total) {}
  int ranks() const override { return p_; }
  int num_steps(int) const override { return p_ < 2 ? 0 : 1; }
  void step(int rank, int, Step& out) const override {
    for (int q = 0; q < p_; ++q) {
      if (q == rank) continue;
      out.sends.push_back(Transfer{q, 0, share(mod(q - rank - 1, p_)), rank});
      out.recvs.push_back(Transfer{q, 0, share(mod(rank - q - 1, p_)), q});
    }
    out.op = RecvOp::Copy;
  }

 private:
  Bytes share(int j) const { return even_share(total_, p_ - 1, j); }
  int p_;
  Bytes total_;
};

const std::vector<CollKind> kKinds = {CollKind::AllReduce};

std::optional<std::string> unavailable(const CollectiveSpec&, const CostParams& c) {
  if (c.switch_beta_ps > 0 && !c.switch_per_node) return std::nullopt;
  if (c.switch_per_node)
    return std::string(
        "nvls needs one switch that reduces for the whole group; across nodes with one per node, use "
        "nvls_tree");
  return std::string(
      "nvls needs every GPU of the group on one switch that reduces in-network (NVLink SHARP: dgx-h100's "
      "nvls_efficiency, or reduce_efficiency on a topology file's switch)");
}

constexpr double kNvlsChannels = 16;         // NCCL's NVLS channels on H100 (NCCL_NVLS_NCHANNELS)
constexpr double kNvlsMaxChunk = 131072;     // nvlsChunkSize
constexpr double kNvlsChunkOverhead = 9600;  // c0, bytes at one operation's rate

// NCCL's NVLS chunk for n bytes over `ops` concurrent operations.
double nvls_chunk(double n, double ops) {
  double c = kNvlsMaxChunk;
  if (n < 64 * ops * c && c > 65536) c = 65536;
  if (n < 8 * ops * c && c > 32768) c = 32768;
  if (n < 2 * ops * c && c > 16384) c = 16384;
  return c;
}

// Bytes each direction of a GPU's switch link carries, at b_s: n(1 + 1/p) plus the pipeline's
// fill and per-chunk cost (above).
double link_bytes(const CollectiveSpec& s) {
  const double n = static_cast<double>(s.bytes), ops = kNvlsChannels * s.ranks;
  if (n <= 0) return 0;
  const double c = nvls_chunk(n, ops), per_chunk = kNvlsChunkOverhead / c;
  const double work = n + std::min(n, ops * c) * (1 + per_chunk) + std::max(n, ops * c) * per_chunk;
  return (1.0 + 1.0 / s.ranks) * work / (1 + kNvlsChunkOverhead / kNvlsMaxChunk);
}

double cost(const CollectiveSpec& s, const CostParams& c) {
  validate_spec(s);
  if (s.ranks < 2) return 0.0;
  if (auto why = unavailable(s, c)) throw Error(*why);
  return c.switch_alpha_ps + link_bytes(s) * c.switch_beta_ps;
}

std::string explain(const CollectiveSpec& s, const CostParams& c) {
  const std::string head = fmt::format(
      "nvls {} (p={}, n={}B; a flow step table shows the link loads through the switch, not executed steps)",
      to_string(s.kind), s.ranks, s.bytes);
  if (s.ranks >= 2 && unavailable(s, c)) return fmt::format("{}: not available here: {}", head, *unavailable(s, c));
  return explain_text(head,
                      "a_s + (1 + 1/p)[n + fill + chunks' sync]*b_s (reduce and multicast in the switch, NCCL's "
                      "chunked pipeline)",
                      fmt::format("a_s = {}, (1 + 1/p)[...] = {:.0f}B for n*(1 + 1/p) = {:.0f}B, b_s = {}",
                                  fmt_alpha(c.switch_alpha_ps), link_bytes(s),
                                  static_cast<double>(s.bytes) * (1.0 + 1.0 / s.ranks), fmt_rate(c.switch_beta_ps)),
                      cost(s, c));
}

std::unique_ptr<StepProgram> make_timing(const CollectiveSpec& s, const CostParams& c) {
  if (s.ranks < 2) return std::make_unique<NvlsLoadProgram>(s.ranks, 0);
  if (auto why = unavailable(s, c)) throw Error(*why);
  // The loads at the links' rate: scale by the reduce efficiency, switch_beta / link beta.
  const double link_beta = c.intra_beta_ps > 0 ? c.intra_beta_ps : c.beta_ps;
  const double scale = link_beta > 0 ? c.switch_beta_ps / link_beta : 1.0;
  return std::make_unique<NvlsLoadProgram>(s.ranks, static_cast<Bytes>(std::llround(link_bytes(s) * scale)));
}

}  // namespace

Algorithm make_nvls() {
  Algorithm a = basic_algorithm<NvlsProgram>(
      "nvls", "all-reduce reduced and multicast in the switch (NVLink SHARP), where the topology has one", kKinds, cost,
      explain);
  a.unavailable = unavailable;
  a.make_timing = make_timing;
  a.only_protocol = Protocol::NvlsSimple;  // NCCL's NVLS: Simple only, its own latency
  return a;
}

}  // namespace meshsim::collectives
