// Collective kinds, slicing, spec validation, the algorithm registry and `auto` selection.
// The algorithms themselves live one per file in collectives/ (see collective.h).
#include "schedule/collective.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <limits>

#include "core/enum_names.h"
#include "core/error.h"
#include "schedule/collectives/common.h"

namespace meshsim {

constexpr EnumName<CollKind> kKindNames[] = {
    {CollKind::AllReduce, "allreduce"}, {CollKind::AllGather, "allgather"}, {CollKind::ReduceScatter, "reducescatter"},
    {CollKind::Broadcast, "broadcast"}, {CollKind::Reduce, "reduce"},       {CollKind::AllToAll, "alltoall"},
    {CollKind::SendRecv, "sendrecv"}};

const char* to_string(CollKind k) { return enum_name(kKindNames, k); }

std::optional<CollKind> parse_coll_kind(const std::string& s) {
  std::string t;
  for (char c : s)
    if (c != '-' && c != '_' && c != ' ') t += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (t == "bcast") t = "broadcast";
  return enum_parse(kKindNames, t);
}

bool reduces(CollKind k) { return k == CollKind::AllReduce || k == CollKind::ReduceScatter || k == CollKind::Reduce; }

const std::vector<CollKind>& all_coll_kinds() {
  static const std::vector<CollKind> kinds = {CollKind::AllReduce, CollKind::AllGather, CollKind::ReduceScatter,
                                              CollKind::Broadcast, CollKind::Reduce,    CollKind::AllToAll,
                                              CollKind::SendRecv};
  return kinds;
}

Range slice(Bytes bytes, int parts, int i, Bytes element_bytes) {
  MESHSIM_ASSERT(parts >= 1 && i >= 0 && i < parts && element_bytes >= 1 && bytes >= 0);
  const Bytes e = bytes / element_bytes;
  const Bytes q = e / parts, rem = e % parts;
  // floor(i*e/parts) without overflow: i*q + floor(i*rem/parts), and i*rem < parts^2.
  auto boundary = [&](Bytes idx) { return idx * q + (idx * rem) / parts; };
  return Range{boundary(i) * element_bytes, boundary(i + 1) * element_bytes};
}

Range slice(Bytes bytes, int parts, int i) { return slice(bytes, parts, i, 1); }

void validate_spec(const CollectiveSpec& spec) {
  if (spec.ranks < 1)
    throw Error(fmt::format("ranks: got {}; a collective needs a group of at least 1 rank", spec.ranks));
  if (spec.bytes < 0) throw Error(fmt::format("bytes: got {}; the buffer size must be >= 0", spec.bytes));
  if (spec.element_bytes < 1)
    throw Error(fmt::format("element_bytes: got {}; use 1 (bytes) or the element size, e.g. 4 for float32",
                            spec.element_bytes));
  if (spec.bytes % spec.element_bytes != 0)
    throw Error(fmt::format("bytes: {} is not a multiple of element_bytes {}; round the size to whole elements",
                            spec.bytes, spec.element_bytes));
  if (spec.root < 0 || spec.root >= spec.ranks)
    throw Error(fmt::format("root: rank {} is outside the group of {} ranks; use 0..{}", spec.root, spec.ranks,
                            spec.ranks - 1));
  if (spec.ranks_per_node < 1)
    throw Error(fmt::format("ranks_per_node: got {}; use a positive number of ranks per node", spec.ranks_per_node));
  if (spec.chunks < 0 || spec.chunks > kMaxChunks)
    throw Error(
        fmt::format("chunks: got {}; use 0 for the algorithm default or a count in 1..{}", spec.chunks, kMaxChunks));
  if (spec.kind == CollKind::AllToAll && !spec.alltoall_bytes.empty()) {
    const auto p = static_cast<std::size_t>(spec.ranks);
    if (spec.alltoall_bytes.size() != p)
      throw Error(fmt::format("alltoall_bytes: expected {} rows (one per sending rank), got {}; give a {} x {} matrix",
                              p, spec.alltoall_bytes.size(), p, p));
    for (std::size_t s = 0; s < p; ++s) {
      const auto& row = spec.alltoall_bytes[s];
      if (row.size() != p)
        throw Error(
            fmt::format("alltoall_bytes[{}]: expected {} entries (one per receiving rank), got {}", s, p, row.size()));
      for (std::size_t d = 0; d < p; ++d) {
        if (row[d] < 0) throw Error(fmt::format("alltoall_bytes[{}][{}]: got {}; sizes must be >= 0", s, d, row[d]));
        if (row[d] % spec.element_bytes != 0)
          throw Error(fmt::format("alltoall_bytes[{}][{}]: {} is not a multiple of element_bytes {}", s, d, row[d],
                                  spec.element_bytes));
      }
    }
  }
}

Bytes alltoall_block(const CollectiveSpec& spec, int src, int dst) {
  if (!spec.alltoall_bytes.empty()) return spec.alltoall_bytes[src][dst];
  return (spec.bytes / spec.element_bytes / spec.ranks) * spec.element_bytes;
}

std::vector<std::vector<Bytes>> skewed_alltoall(Bytes bytes, int ranks, double imbalance, Bytes element_bytes) {
  const std::size_t e = static_cast<std::size_t>(ranks);
  std::vector<double> w(e, ranks > 1 ? (ranks - imbalance) / (ranks - 1) : 1.0);
  w[0] = imbalance;
  std::vector<std::vector<Bytes>> m(e, std::vector<Bytes>(e, 0));
  for (std::size_t s = 0; s < e; ++s)
    for (std::size_t d = 0; d < e; ++d) {
      const Bytes b = static_cast<Bytes>(static_cast<double>(bytes) / ranks * w[d]);
      m[s][d] = b / element_bytes * element_bytes;
    }
  return m;
}

namespace {
bool overlaps(const Transfer& a, const Transfer& b) {
  return a.bytes > 0 && b.bytes > 0 && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}
Bytes round_up(Bytes bytes, Bytes align) { return (bytes + align - 1) / align * align; }
}  // namespace

StepLayout layout_step(const Step& step, bool shared_buffer, bool stage_reductions, Bytes align) {
  MESHSIM_ASSERT(align >= 1);
  StepLayout l;
  const std::size_t nr = step.recvs.size();
  l.recv_stage.assign(nr, -1);
  l.send_snapshot.assign(step.sends.size(), -1);
  std::vector<bool> staged(nr, stage_reductions && step.op == RecvOp::Reduce);
  for (std::size_t i = 0; i < nr; ++i)
    for (std::size_t j = i + 1; j < nr; ++j)
      if (overlaps(step.recvs[i], step.recvs[j])) staged[i] = staged[j] = true;
  for (std::size_t i = 0; i < nr; ++i)
    if (staged[i]) {
      l.recv_stage[i] = l.stage_bytes;
      l.stage_bytes += round_up(step.recvs[i].bytes, align);
    }
  if (shared_buffer)
    for (std::size_t s = 0; s < step.sends.size(); ++s) {
      bool clobbered = false;
      for (std::size_t i = 0; i < nr && !clobbered; ++i)
        clobbered = !staged[i] && overlaps(step.sends[s], step.recvs[i]);
      if (clobbered) {
        l.send_snapshot[s] = l.snapshot_bytes;
        l.snapshot_bytes += round_up(step.sends[s].bytes, align);
      }
    }
  return l;
}

RankBuffers rank_buffers(const CollectiveSpec& spec, int rank) {
  RankBuffers b;
  if (spec.kind != CollKind::AllToAll) {
    b.send = b.recv = spec.bytes;
    return b;
  }
  for (int q = 0; q < spec.ranks; ++q) {
    if (q == rank) {
      b.self_recv = b.recv;
      b.self_send = b.send;
    }
    b.recv += alltoall_block(spec, q, rank);
    b.send += alltoall_block(spec, rank, q);
  }
  b.own = alltoall_block(spec, rank, rank);
  return b;
}

// The two choices with a fixed name; any other text names a registry algorithm.
constexpr EnumName<AlgorithmChoice::Kind> kChoiceNames[] = {{AlgorithmChoice::Kind::Auto, "auto"},
                                                            {AlgorithmChoice::Kind::Nccl, "nccl"}};

AlgorithmChoice::AlgorithmChoice(const std::string& text) {
  if (text.empty()) return;
  const std::optional<Kind> fixed = enum_parse(kChoiceNames, text);
  kind = fixed.value_or(Kind::Named);
  if (!fixed) name = text;
}

std::string AlgorithmChoice::text() const { return kind == Kind::Named ? name : enum_name(kChoiceNames, kind); }

ProtocolScope protocol_scope(const CostParams& cp, const CollectiveSpec& spec) {
  return {cp.multi_node, cp.ll_cap_fraction, cp.channels, static_cast<double>(spec.bytes), spec.ranks};
}

ProtocolCosts Algorithm::protocol_costs(Protocol p, const CostParams& cp, const CollectiveSpec& spec) const {
  return meshsim::protocol_costs(p, hop_rows, protocol_scope(cp, spec));
}

bool Algorithm::supports(CollKind k) const { return std::find(kinds.begin(), kinds.end(), k) != kinds.end(); }

std::unique_ptr<StepProgram> Algorithm::build(const CollectiveSpec& spec) const {
  validate_spec(spec);
  if (auto why = unsupported(spec)) throw Error(*why);
  return make(spec);
}

namespace {
// Marks an algorithm NCCL itself runs: Ring (ring, and multiring's channels over the rails),
// Tree (nccl_tree), NVLS, NVLS-Tree, NVLS over CollNet (nvls_sharp), the ring chain of
// broadcast and reduce (pipeline), grouped send/recv (concurrent, pxn) and send/recv; RCCL's
// rings over a full xGMI mesh (mesh_rings).
Algorithm in_nccl(Algorithm a) {
  a.nccl = true;
  return a;
}
}  // namespace

AlgorithmRegistry AlgorithmRegistry::builtin() {
  using namespace collectives;
  AlgorithmRegistry reg;
  reg.add(in_nccl(make_ring()));
  reg.add(make_binomial());
  reg.add(in_nccl(make_pipeline()));
  reg.add(make_recursive_doubling());
  reg.add(make_rabenseifner());
  reg.add(make_double_binary_tree());
  reg.add(in_nccl(make_nccl_tree()));
  reg.add(make_pairwise());
  reg.add(in_nccl(make_concurrent()));
  reg.add(in_nccl(make_pxn()));
  reg.add(make_hierarchical());
  reg.add(make_hierarchical_tree());
  reg.add(in_nccl(make_multiring()));
  reg.add(in_nccl(make_nvls()));
  reg.add(in_nccl(make_nvls_tree()));
  reg.add(in_nccl(make_nvls_sharp()));
  reg.add(in_nccl(make_direct()));
  reg.add(in_nccl(make_mesh_rings()));
  return reg;
}

void AlgorithmRegistry::add(Algorithm a) {
  for (const auto& b : algos_)
    if (b.name == a.name)
      throw Error(fmt::format("algorithm '{}' is registered twice; give the new one another name", a.name));
  MESHSIM_ASSERT(a.unsupported && a.make && a.cost_ps && a.explain);
  algos_.push_back(std::move(a));
}

const Algorithm* AlgorithmRegistry::find(const std::string& name, CollKind kind) const {
  for (const auto& a : algos_)
    if (a.name == name && a.supports(kind)) return &a;
  return nullptr;
}

std::vector<const Algorithm*> AlgorithmRegistry::for_kind(CollKind kind) const {
  std::vector<const Algorithm*> out;
  for (const auto& a : algos_)
    if (a.supports(kind)) out.push_back(&a);
  return out;
}

double busbw_factor(CollKind kind, int ranks) {
  const double p = ranks;
  switch (kind) {
    case CollKind::AllReduce:
      return 2.0 * (p - 1) / p;
    case CollKind::AllGather:
    case CollKind::ReduceScatter:
    case CollKind::AllToAll:
      return (p - 1) / p;
    case CollKind::Broadcast:
    case CollKind::Reduce:
    case CollKind::SendRecv:
      return 1.0;
  }
  return 1.0;
}

CostParams with_protocol(const CostParams& cp, Protocol p, const CollectiveSpec& spec, HopRows rows) {
  if (p == Protocol::None) return cp;
  const ProtocolCosts c = protocol_costs(p, rows, protocol_scope(cp, spec));
  CostParams out = cp;
  const double f = c.payload_fraction;
  auto level = [&](double& alpha, double& beta, HopKind h) {
    if (alpha == 0 && beta == 0) return;  // unset level: falls back to alpha/beta
    alpha = std::max(alpha, c.hop(h));
    beta /= f;
  };
  level(out.alpha_ps, out.beta_ps, cp.multi_node ? HopKind::Net : cp.intra_hop);
  level(out.intra_alpha_ps, out.intra_beta_ps, cp.intra_hop);
  level(out.inter_alpha_ps, out.inter_beta_ps, HopKind::Net);
  out.inter_route_beta_ps /= f;
  level(out.switch_alpha_ps, out.switch_beta_ps, cp.intra_hop);
  level(out.net_switch_alpha_ps, out.net_switch_beta_ps, HopKind::Net);
  return out;
}

ProtocolCost best_protocol(const Algorithm& a, const CollectiveSpec& spec, const CostParams& cp) {
  if (!cp.protocols) return {Protocol::None, a.cost_ps(spec, cp)};
  auto cost = [&](Protocol p) {
    return a.protocol_costs(p, cp, spec).launch_ps + a.cost_ps(spec, with_protocol(cp, p, spec, a.hop_rows));
  };
  if (a.only_protocol) return {*a.only_protocol, cost(*a.only_protocol)};
  ProtocolCost best{Protocol::None, 0};
  for (Protocol p : kProtocols) {
    if (p == Protocol::LL128 && !cp.ll128) continue;
    const double ps = cost(p);
    if (best.protocol == Protocol::None || ps < best.ps) best = {p, ps};
  }
  return best;
}

std::vector<RankedAlgorithm> rank_algorithms(const AlgorithmRegistry& registry, const CollectiveSpec& spec,
                                             const CostParams& params) {
  validate_spec(spec);
  std::vector<RankedAlgorithm> ranked;
  std::string reasons;
  for (const Algorithm& a : registry.all()) {
    if (!a.supports(spec.kind)) continue;
    auto why = a.unsupported(spec);
    if (!why && a.unavailable) why = a.unavailable(spec, params);
    if (why) {
      reasons += fmt::format("{}{}: {}", reasons.empty() ? "" : "; ", a.name, *why);
      continue;
    }
    ranked.push_back({&a, best_protocol(a, spec, params).ps});
  }
  if (ranked.empty())
    throw Error(fmt::format("no algorithm can run {} on {} ranks ({}); change the group or register an algorithm",
                            to_string(spec.kind), spec.ranks, reasons.empty() ? "none registered" : reasons));
  // Under NCCL's protocols the runtime is NCCL: `auto` chooses what NCCL would run, where it can.
  if (params.protocols &&
      std::any_of(ranked.begin(), ranked.end(), [](const RankedAlgorithm& r) { return r.algorithm->nccl; }))
    std::erase_if(ranked, [](const RankedAlgorithm& r) { return !r.algorithm->nccl; });
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const RankedAlgorithm& x, const RankedAlgorithm& y) { return x.cost_ps < y.cost_ps; });
  return ranked;
}

const Algorithm& choose_algorithm(const AlgorithmRegistry& registry, const CollectiveSpec& spec,
                                  const CostParams& params) {
  return *rank_algorithms(registry, spec, params).front().algorithm;
}

namespace collectives {

AllToAllOffsets alltoall_offsets(const CollectiveSpec& s) {
  const auto p = static_cast<std::size_t>(s.ranks);
  AllToAllOffsets o{std::vector<std::vector<Bytes>>(p, std::vector<Bytes>(p, 0)),
                    std::vector<std::vector<Bytes>>(p, std::vector<Bytes>(p, 0))};
  for (std::size_t r = 0; r < p; ++r) {
    Bytes so = 0, ro = 0;
    for (std::size_t q = 0; q < p; ++q) {
      o.send[r][q] = so;
      so += alltoall_block(s, static_cast<int>(r), static_cast<int>(q));
      o.recv[r][q] = ro;
      ro += alltoall_block(s, static_cast<int>(q), static_cast<int>(r));
    }
  }
  return o;
}

int default_chunks(Bytes bytes, Bytes elem, Bytes target) {
  const Bytes by_size = (bytes + target - 1) / target;
  const Bytes elems = bytes / elem;
  Bytes k = std::clamp<Bytes>(by_size, 1, 64);
  k = std::min<Bytes>(k, std::max<Bytes>(elems, 1));
  return static_cast<int>(k);
}

std::string fmt_alpha(double alpha_ps) { return fmt::format("{:.3f}us", alpha_ps * 1e-6); }

std::string fmt_rate(double per_byte_ps) {
  if (per_byte_ps <= 0) return "inf";
  return fmt::format("{:.2f}GB/s", 1e3 / per_byte_ps);
}

std::string fmt_result(double ps) { return fmt::format("{:.3f}us", ps * 1e-6); }

std::string explain_text(const std::string& head, const std::string& symbolic, const std::string& numeric, double ps) {
  return fmt::format("{}: {}\n  = {}\n  = {}", head, symbolic, numeric, fmt_result(ps));
}

std::optional<std::string> kind_reason(const std::string& name, const std::vector<CollKind>& kinds, CollKind k) {
  if (std::find(kinds.begin(), kinds.end(), k) != kinds.end()) return std::nullopt;
  std::string list;
  for (CollKind x : kinds) list += fmt::format("{}{}", list.empty() ? "" : ", ", to_string(x));
  return fmt::format("{} does not implement {} (it implements {})", name, to_string(k), list);
}

std::optional<std::string> node_blocks_reason(const std::string& name, const CollectiveSpec& s) {
  if (s.ranks_per_node >= 1 && s.ranks % s.ranks_per_node == 0) return std::nullopt;
  return fmt::format(
      "{} needs ranks ({}) to be a multiple of ranks_per_node ({}); set ranks_per_node to a divisor "
      "of the group size or use ring",
      name, s.ranks, s.ranks_per_node);
}

std::optional<std::string> pow2_reason(const std::string& name, int ranks) {
  if (is_pow2(ranks)) return std::nullopt;
  return fmt::format("{} needs a power-of-two group (got {} ranks); use ring or dbt", name, ranks);
}

}  // namespace collectives
}  // namespace meshsim
