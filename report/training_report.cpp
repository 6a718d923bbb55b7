// Training-iteration reports; see the header.
#include "report/training_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "report/collective_report.h"
#include "report/topology_svg.h"

namespace meshsim {

namespace {

// Memory in GiB, or MiB / KiB below a GiB, so that a small model's items do not all read 0.00.
std::string gib(Bytes b) {
  const double v = static_cast<double>(b);
  if (v >= 0x1p30 || v == 0) return fmt::format("{:.2f} GiB", v / 0x1p30);
  if (v >= 0x1p20) return fmt::format("{:.2f} MiB", v / 0x1p20);
  return fmt::format("{:.2f} KiB", v / 0x1p10);
}
// A count of parameters: 174.6B, 12.3M, 4.1K.
std::string params_text(double n) {
  if (n >= 1e9) return fmt::format("{:.1f}B", n * 1e-9);
  if (n >= 1e6) return fmt::format("{:.1f}M", n * 1e-6);
  if (n >= 1e3) return fmt::format("{:.1f}K", n * 1e-3);
  return fmt::format("{:.0f}", n);
}
// A peak rate: 989 TFLOP/s, or GFLOP/s below a TFLOP/s (a CPU profile).
std::string flops_text(double f) {
  return f >= 1e12 ? fmt::format("{:.0f} TFLOP/s", f * 1e-12) : fmt::format("{:.1f} GFLOP/s", f * 1e-9);
}
std::string pct(double x) { return fmt::format("{:.1f}%", 100 * x); }
// Bytes to two decimals in the largest binary unit up to TiB (sums of link loads are not
// round sizes, which format_bytes would spell out in KiB).
std::string approx_bytes(double b) {
  if (b >= 0x1p40) return fmt::format("{:.2f}TiB", b / 0x1p40);
  if (b >= 0x1p30) return fmt::format("{:.2f}GiB", b / 0x1p30);
  return fmt::format("{:.2f}MiB", b / 0x1p20);
}

// The link with id `id` in r.links (sorted by id), or nullptr.
const LinkReport* link_by_id(const TrainingResult& r, int id) {
  auto it = std::lower_bound(r.links.begin(), r.links.end(), id, [](const LinkReport& l, int v) { return l.id < v; });
  return it != r.links.end() && it->id == id ? &*it : nullptr;
}

// A link's load averaged over kLoadBuckets equal slices of the iteration, as (start of the
// slice / iteration, mean load): what a chart a few hundred pixels wide can show.
constexpr int kLoadBuckets = 300;
std::vector<std::pair<double, double>> averaged_load(const LinkLoadSeries& series, double span_s) {
  std::vector<double> sum(kLoadBuckets, 0.0);
  if (span_s <= 0) return {};
  const double width = span_s / kLoadBuckets;
  for (std::size_t i = 0; i < series.load.size(); ++i) {
    const double from = series.load[i].first.seconds();
    const double to = i + 1 < series.load.size() ? series.load[i + 1].first.seconds() : span_s;
    for (int b = std::max(0, static_cast<int>(from / width)); b < kLoadBuckets && b * width < to; ++b)
      sum[static_cast<std::size_t>(b)] +=
          series.load[i].second * std::max(0.0, std::min(to, (b + 1) * width) - std::max(from, b * width));
  }
  std::vector<std::pair<double, double>> out;
  for (int b = 0; b < kLoadBuckets; ++b)
    out.emplace_back(static_cast<double>(b) / kLoadBuckets, sum[static_cast<std::size_t>(b)] / width);
  return out;
}

}  // namespace

std::string op_category(const Op& op) {
  if (op.kind == OpKind::Compute) {
    if (op.phase == Phase::Recompute) return "recompute";
    if (op.phase == Phase::Optimizer) return "optimizer";
    return "compute";
  }
  return comm_category(op);
}

std::vector<TierLoad> tier_loads(const std::vector<LinkReport>& links) {
  static const std::vector<std::string> kOrder{"nvlink", "pcie", "nic", "leaf-spine", "spine-core", "switch"};
  std::vector<TierLoad> out;
  for (const LinkReport& l : links) {
    auto it = std::find_if(out.begin(), out.end(), [&](const TierLoad& t) { return t.tier == l.tier; });
    if (it == out.end()) {
      out.push_back({l.tier, 0, 0, &l});
      it = out.end() - 1;
    }
    ++it->links;
    it->bytes += l.bytes;
    if (l.utilization > it->busiest->utilization) it->busiest = &l;
  }
  auto rank = [&](const std::string& t) {
    const auto k = std::find(kOrder.begin(), kOrder.end(), t);
    return static_cast<std::size_t>(k - kOrder.begin());
  };
  std::stable_sort(out.begin(), out.end(), [&](const TierLoad& a, const TierLoad& b) {
    return rank(a.tier) != rank(b.tier) ? rank(a.tier) < rank(b.tier) : a.tier < b.tier;
  });
  return out;
}

std::string links_csv(const TrainingResult& r) {
  std::string s = "link,name,tier,capacity_GBps,bytes,utilization,peak\n";
  for (const LinkReport& l : r.links)
    s += fmt::format("{},{},{},{:.3f},{:.0f},{:.6f},{:.6f}\n", l.id, l.name, l.tier, l.capacity_Bps * 1e-9, l.bytes,
                     l.utilization, l.peak);
  return s;
}

nlohmann::ordered_json links_json(const TrainingResult& r) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const LinkReport& l : r.links)
    out.push_back({{"link", l.id},
                   {"name", l.name},
                   {"tier", l.tier},
                   {"capacity_GBps", l.capacity_Bps * 1e-9},
                   {"bytes", l.bytes},
                   {"utilization", l.utilization},
                   {"peak", l.peak}});
  return out;
}

namespace {

// The union of [start, end) intervals, sorted and merged.
std::vector<std::pair<Time, Time>> merged(std::vector<std::pair<Time, Time>> v) {
  std::sort(v.begin(), v.end());
  std::vector<std::pair<Time, Time>> out;
  for (const auto& iv : v) {
    if (!out.empty() && iv.first <= out.back().second)
      out.back().second = std::max(out.back().second, iv.second);
    else
      out.push_back(iv);
  }
  return out;
}

// How much of [a, b) the merged intervals `busy` leave uncovered.
Time uncovered(const std::vector<std::pair<Time, Time>>& busy, Time a, Time b) {
  Time covered;
  auto it = std::upper_bound(busy.begin(), busy.end(), std::make_pair(a, a),
                             [](const auto& x, const auto& y) { return x.second < y.second; });
  for (; it != busy.end() && it->first < b; ++it) covered += std::min(b, it->second) - std::max(a, it->first);
  return (b - a) - covered;
}

}  // namespace

std::vector<CollectiveRow> collective_rows(const TrainingResult& r) {
  const std::size_t roles = r.schedule.roles.size();
  std::vector<std::vector<std::pair<Time, Time>>> compute(roles);
  for (const TraceEvent& e : r.sim.trace.events) {
    const Op& op = r.schedule.roles[e.role].ops[e.op];
    if (op.kind == OpKind::Compute && e.end > e.start)
      compute[static_cast<std::size_t>(e.role)].emplace_back(e.start, e.end);
  }
  for (auto& c : compute) c = merged(std::move(c));
  std::map<std::tuple<int, std::string, std::string, Bytes, int>, CollectiveRow> rows;
  for (const TraceEvent& e : r.sim.trace.events) {
    const Op& op = r.schedule.roles[e.role].ops[e.op];
    if (op.kind != OpKind::Collective && op.kind != OpKind::Send) continue;
    const std::string axis = op.kind == OpKind::Send ? "pp" : op.axis.str();
    const std::string kind = op.kind == OpKind::Send ? "send" : to_string(op.coll);
    CollectiveRow& row = rows[{e.role, axis, kind, op.bytes, op.group_size}];
    row.stage = e.role, row.axis = axis, row.kind = kind, row.bytes = op.bytes, row.group = op.group_size;
    ++row.count;
    row.time_s += (e.end - e.start).seconds();
    row.exposed_s += uncovered(compute[static_cast<std::size_t>(e.role)], e.start, e.end).seconds();
  }
  std::vector<CollectiveRow> out;
  for (auto& [key, row] : rows) out.push_back(std::move(row));
  return out;
}

std::string collective_rows_csv(const std::vector<CollectiveRow>& rows) {
  std::string s = "stage,axis,kind,bytes,group,count,time_s,mean_us,exposed_s\n";
  for (const CollectiveRow& c : rows)
    s += fmt::format("{},{},{},{},{},{},{:.9f},{:.3f},{:.9f}\n", c.stage, c.axis, c.kind, c.bytes, c.group, c.count,
                     c.time_s, c.count ? 1e6 * c.time_s / c.count : 0.0, c.exposed_s);
  return s;
}

nlohmann::ordered_json collective_rows_json(const std::vector<CollectiveRow>& rows) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const CollectiveRow& c : rows)
    out.push_back({{"stage", c.stage},
                   {"axis", c.axis},
                   {"kind", c.kind},
                   {"bytes", c.bytes},
                   {"group", c.group},
                   {"count", c.count},
                   {"time_s", c.time_s},
                   {"mean_us", c.count ? 1e6 * c.time_s / c.count : 0.0},
                   {"exposed_s", c.exposed_s}});
  return out;
}

std::vector<std::pair<std::string, Time>> breakdown_rows(const Breakdown& b) {
  std::vector<std::pair<std::string, Time>> rows{{"compute", b.compute}, {"recompute", b.recompute}};
  for (const char* dim : {"tp", "cp", "ep", "2d", "pp", "dp"}) {
    auto it = b.exposed.find(dim);
    if (it != b.exposed.end()) rows.emplace_back(std::string("exposed ") + dim + " comm", it->second);
  }
  rows.emplace_back("pipeline bubble", b.bubble);
  rows.emplace_back("optimizer", b.optimizer);
  return rows;
}

std::string layout_text(const Scenario& s) {
  const ParallelSpec& p = s.parallel;
  std::string t = fmt::format("dp {} x pp {} x cp {} x ", p.dp, p.pp, p.cp);
  t += p.mesh2d > 0 ? fmt::format("2D {}x{}", p.mesh2d, p.mesh2d) : fmt::format("tp {}{}", p.tp, p.sp ? " (sp)" : "");
  t += fmt::format(" = {} GPUs", p.world_size());
  if (p.ep > 1)
    t += fmt::format(", ep {}{}", p.ep,
                     p.ep_spans_tp() ? " over tp x cp x dp, experts whole (etp 1)"
                                     : (p.tp > 1 ? fmt::format(" over dp, experts split over tp (etp {})", p.tp) : ""));
  if (p.vchunks > 1) t += fmt::format(", interleaved v={}", p.vchunks);
  t += fmt::format(", {} micro-batches of {}, global batch {}, ZeRO-{}, recompute {}", p.microbatches,
                   p.micro_batch_size, p.global_batch(), p.zero, p.recompute.to_string());
  return t;
}

namespace {
std::string stack_text(const TrainingStack& t) {
  std::string o = fmt::format("{} (attention {}", to_string(t.kind), to_string(t.attention));
  if (t.tp_comm_overlap) o += fmt::format(", TP-comm overlap on {} SMs", t.tp_overlap_sms);
  if (t.overlap_param_gather) o += ", parameter all-gather under the forward";
  if (t.reduce_every_microbatch) o += ", reduce every micro-batch";
  if (t.eager) o += ", eager kernels";
  if (!t.reshard_after_forward) o += ", parameters kept from forward to backward";
  if (t.reduce_bytes > 0) o += fmt::format(", gradients reduced in {} bytes", t.reduce_bytes);
  if (t.fsdp > 0) o += fmt::format(", FSDP{} with backward prefetch {}", t.fsdp, to_string(t.backward_prefetch));
  if (t.fp8 != Fp8Recipe::Off) o += fmt::format(", FP8 linear layers ({} scaling)", to_string(t.fp8));
  if (t.optimizer != OptimizerImpl::Megatron) o += fmt::format(", optimizer step {}", to_string(t.optimizer));
  return o + ")";
}
}  // namespace

namespace {

// The perturbed parts, the slowest stage, and what they cost against the nominal iteration.
std::string perturbation_text(const TrainingResult& r) {
  const Perturbations& pt = r.scenario.perturb;
  std::string parts;
  for (const auto& [gpu, f] : pt.gpus) parts += fmt::format("{}gpu {} x{:g}", parts.empty() ? "" : ", ", gpu, f);
  if (pt.draw.kind != GpuDraw::Kind::None)
    parts += fmt::format("{}GPU speeds drawn from {} (seed {})", parts.empty() ? "" : ", ", pt.draw.text, pt.draw.seed);
  for (const auto& [link, f] : pt.links)
    parts += fmt::format("{}link '{}' {}", parts.empty() ? "" : ", ", link, f > 0 ? fmt::format("x{:g}", f) : "down");
  std::string slowest;
  const auto it = std::min_element(r.stage_compute_factor.begin(), r.stage_compute_factor.end());
  if (it != r.stage_compute_factor.end() && *it < 1)
    slowest = fmt::format("; slowest stage {} computes at {:g}", it - r.stage_compute_factor.begin(), *it);
  const double nominal = r.nominal_iteration.seconds(), now = r.sim.iteration.seconds();
  return fmt::format("  perturbed        {}{}: {:+.2f}% over the nominal {}\n", parts, slowest,
                     nominal > 0 ? 100 * (now / nominal - 1) : 0.0, format_time(r.nominal_iteration));
}

}  // namespace

std::string training_summary_text(const TrainingResult& r) {
  const Scenario& s = r.scenario;
  const ModelSpec& m = s.model;
  std::ostringstream o;
  o << fmt::format("meshsim simulate: {}\n", s.name);
  const std::string attention =
      m.mla() ? fmt::format("latent attention: q/kv latents {}/{}, q/k heads {}+{}, v heads {}", m.q_lora_rank,
                            m.kv_lora_rank, m.qk_nope_head_dim, m.qk_rope_head_dim, m.v_head_dim)
              : fmt::format("{} kv", m.kv_heads);
  // The norm and the positions when they are not GPT's (LayerNorm, absolute): each adds its
  // kernels to the layer (docs/math.md section 4.4).
  std::string layer_kind;
  if (m.norm != NormKind::LayerNorm) layer_kind += fmt::format(", {}", to_string(m.norm));
  if (m.position != PositionKind::Absolute) layer_kind += fmt::format(", {}", to_string(m.position));
  o << fmt::format("  model      {}: {} layers, h {}, {} heads ({}), ffn {} {}{}, seq {}, vocab {}{}, {} params\n",
                   m.name, m.layers, m.hidden, m.heads, attention, m.ffn_hidden, to_string(m.ffn), layer_kind, m.seq,
                   m.vocab,
                   m.moe() ? fmt::format(", {} experts top-{}{}", m.experts, m.top_k,
                                         m.shared_experts > 0 ? fmt::format(" + {} shared", m.shared_experts) : "")
                           : "",
                   params_text(m.total_params()));
  o << fmt::format("  layout     {}\n", layout_text(s));
  o << fmt::format("  cluster    {} ({} GPUs), placement {}, GPU {} ({} {}, {}), fidelity {}\n", r.topology_name,
                   r.gpus, r.placement, r.gpu.name,
                   flops_text(m.dtype_bytes() == 4        ? r.gpu.peak_flops_fp32
                              : r.gpu.peak_flops_bf16 > 0 ? r.gpu.peak_flops_bf16
                                                          : r.gpu.peak_flops_fp16),
                   to_string(m.dtype), gib(r.gpu.memory), to_string(s.fidelity));
  if (!s.parallel.stage_layers.empty() || !r.stage_gpus.empty()) {  // uneven stages, or stages on other GPUs
    std::vector<std::string> stages;
    for (int st = 0; st < s.parallel.pp; ++st) {
      std::string part = fmt::format("{}", s.parallel.layers_on_stage(m.layers, st));
      if (static_cast<std::size_t>(st) < r.stage_gpus.size())
        part += " on " + r.stage_gpus[static_cast<std::size_t>(st)];
      stages.push_back(std::move(part));
    }
    o << fmt::format("  stages     layers {}{}\n", fmt::join(stages, ", "),
                     s.node_gpus_text.empty() ? "" : fmt::format(" (node_gpus {})", s.node_gpus_text));
  }
  o << fmt::format("  stack      {}", stack_text(s.parallel.stack));
  if (r.tensor_factor != 1)
    o << fmt::format("; tensor cores at {:.3f} of burst (sustained clocks {:.3f}, slowest of {} GPUs)", r.tensor_factor,
                     r.gpu.sustained_tensor, s.parallel.world_size());
  if (r.gpu.comm_sms > 0)
    o << fmt::format("; GEMMs and attention beside NCCL kernels on {} of {} SMs", r.gpu.sm_count - r.gpu.comm_sms,
                     r.gpu.sm_count);
  o << "\n\n";
  o << fmt::format("  iteration time   {}\n", format_time(r.sim.iteration));
  if (!s.perturb.empty()) o << perturbation_text(r);
  o << fmt::format("  tokens/s         {:.0f}\n", r.tokens_per_s);
  o << fmt::format("  MFU / HFU        {} / {}\n", pct(r.mfu), pct(r.hfu));
  o << fmt::format("  breakdown of stage {} (the last to finish):\n", r.sim.critical_role);
  const double total = static_cast<double>(r.sim.iteration.ps());
  for (const auto& [label, t] : breakdown_rows(r.sim.breakdown)) {
    if (t == Time{} && label != "compute") continue;
    o << fmt::format("    {:<22} {:>12}  {:>6}\n", label, format_time(t),
                     total > 0 ? pct(static_cast<double>(t.ps()) / total) : "-");
  }
  o << fmt::format("  memory per rank (peak on the simulated timeline; capacity {}):\n", gib(r.capacity));
  for (std::size_t st = 0; st < r.stages.size(); ++st) {
    const StageMemory& sm = r.stages[st];
    std::string parts;
    for (const auto& [cat, b] : sm.other_by_category()) parts += fmt::format("{} {}, ", cat, gib(b));
    o << fmt::format("    stage {:<3} {}layer activations {} -> peak {}  {}\n", st, parts, gib(sm.activation_peak),
                     gib(sm.peak), sm.peak <= r.capacity ? "fits" : "DOES NOT FIT");
  }
  if (!r.sim.top_links.empty()) {
    o << "  busiest links over the iteration (flow):\n";
    for (std::size_t i = 0; i < r.sim.top_links.size(); ++i) {
      const LinkReport* l = link_by_id(r, r.sim.top_links[i].link);
      o << fmt::format("    {:<40} {:>10} carried, {} utilized{}\n", r.link_names[i],
                       format_bytes(static_cast<Bytes>(r.sim.top_links[i].bytes)), pct(r.sim.top_links[i].utilization),
                       r.sim.links_shared && l != nullptr ? ", peak " + pct(l->peak) : "");
    }
    o << "  link load by tier (busiest link of each):\n";
    for (const TierLoad& t : tier_loads(r.links))
      o << fmt::format("    {:<11} {:>6} links {:>12} carried   {:<36} {} utilized{}\n", t.tier, t.links,
                       approx_bytes(t.bytes), t.busiest->name, pct(t.busiest->utilization),
                       r.sim.links_shared ? ", peak " + pct(t.busiest->peak) : "");
    if (r.sim.links_shared) {
      std::string lost;
      for (const auto& [cat, d] : r.sim.sharing_delay)
        lost += fmt::format("{}{} {} ops +{}", lost.empty() ? "" : ", ", cat, d.first, format_time(d.second));
      o << fmt::format("  link sharing: ops in flight share the links; slowed by it (all stages): {}\n",
                       lost.empty() ? "none" : lost);
    } else {
      o << "  link sharing: off (--no-link-sharing): every op timed alone\n";
    }
  } else if (s.fidelity != Fidelity::Flow) {
    o << "  busiest links: run with --fidelity flow to see link load and contention\n";
  }
  if (r.fast) {
    o << fmt::format(
        "  (fast formula path: one simulation per distinct pipeline unit; {} distinct collective timings)\n",
        r.sim.distinct_collectives);
  } else {
    std::size_t n = 0;
    for (const Role& role : r.schedule.roles) n += role.ops.size();
    o << fmt::format("  ({} ops in {} stage programs; {} distinct collective timings)\n", n, r.schedule.roles.size(),
                     r.sim.distinct_collectives);
  }
  return o.str();
}

std::string jobs_summary_text(const JobsResult& r) {
  MESHSIM_ASSERT(!r.together.empty() && r.alone.size() == r.together.size());
  const TrainingResult& first = r.together.front();
  std::ostringstream o;
  o << fmt::format("meshsim simulate: {} jobs sharing {} ({} GPUs), fidelity {}, each from the same start\n",
                   r.together.size(), first.topology_name, first.topology->num_gpus(),
                   to_string(first.scenario.fidelity));
  o << fmt::format("  {:<16} {:>6} {:>12} {:>12} {:>9}  {}\n", "job", "GPUs", "alone", "together", "cost", "where");
  for (std::size_t j = 0; j < r.together.size(); ++j) {
    const TrainingResult& a = r.alone[j];
    const TrainingResult& t = r.together[j];
    const std::string& from = t.scenario.gpus_from;
    const double alone = a.sim.iteration.seconds(), both = t.sim.iteration.seconds();
    std::string where = from.substr(from.find('.') + 1);  // "nodes = 0-7" -> "nodes 0-7"
    if (const auto eq = where.find(" = "); eq != std::string::npos) where.replace(eq, 3, " ");
    o << fmt::format("  {:<16} {:>6} {:>12} {:>12} {:>+8.2f}%  {}\n", t.scenario.name, t.gpus,
                     format_time(a.sim.iteration), format_time(t.sim.iteration),
                     alone > 0 ? 100 * (both / alone - 1) : 0.0, where);
  }
  o << "  (alone: the job with the fabric to itself; together: every job's ops in flight share the links)\n";
  for (const TrainingResult& t : r.together) o << "\n" << training_summary_text(t);
  return o.str();
}

nlohmann::ordered_json jobs_json(const JobsResult& r) {
  MESHSIM_ASSERT(!r.together.empty() && r.alone.size() == r.together.size());
  nlohmann::ordered_json out;
  const TrainingResult& first = r.together.front();
  out["topology"] = first.topology_name;
  out["fidelity"] = to_string(first.scenario.fidelity);
  out["jobs"] = nlohmann::ordered_json::array();
  for (std::size_t j = 0; j < r.together.size(); ++j) {
    const TrainingResult& a = r.alone[j];
    const TrainingResult& t = r.together[j];
    const double alone = a.sim.iteration.seconds(), both = t.sim.iteration.seconds();
    out["jobs"].push_back({{"name", t.scenario.name},
                           {"gpus", t.gpus},
                           {"gpus_from", t.scenario.gpus_from},
                           {"alone_s", alone},
                           {"together_s", both},
                           {"slowdown", alone > 0 ? both / alone - 1 : 0.0},
                           {"alone", training_json(a)},
                           {"together", training_json(t)}});
  }
  return out;
}

std::string memory_table_text(const ModelSpec& m, const ParallelSpec& p, const std::vector<RankMemory>& stages,
                              Bytes capacity) {
  std::ostringstream o;
  o << fmt::format("memory per rank: {} on dp {} x pp {} x cp {} x {}; micro-batch {} x seq {}\n", m.name, p.dp, p.pp,
                   p.cp, p.mesh2d > 0 ? fmt::format("2D {}x{}", p.mesh2d, p.mesh2d) : fmt::format("tp {}", p.tp),
                   p.micro_batch_size, m.seq);
  for (const RankMemory& rm : stages) {
    o << fmt::format("\n{}\n", rm.role);
    o << fmt::format("  {:<12} {:<36} {:>12}  {}\n", "category", "item", "bytes", "formula");
    for (const MemoryItem& it : rm.items)
      o << fmt::format("  {:<12} {:<36} {:>12}  {}\n", it.category, it.name, gib(it.bytes), it.formula);
    o << fmt::format("  {:<49} {:>12}  {}\n", "total", gib(rm.total()),
                     capacity > 0 ? (rm.total() <= capacity ? fmt::format("fits in {}", gib(capacity))
                                                            : fmt::format("DOES NOT FIT in {}", gib(capacity)))
                                  : "");
  }
  return o.str();
}

namespace {
nlohmann::ordered_json memory_items_json(const std::vector<MemoryItem>& items) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const MemoryItem& it : items)
    out.push_back({{"category", it.category}, {"name", it.name}, {"formula", it.formula}, {"bytes", it.bytes}});
  return out;
}
}  // namespace

nlohmann::ordered_json memory_json(const Scenario& s, const std::vector<RankMemory>& stages, Bytes capacity) {
  nlohmann::ordered_json j;
  j["layout"] = layout_text(s);
  j["capacity_bytes"] = capacity;
  bool fits = true;
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (std::size_t st = 0; st < stages.size(); ++st) {
    nlohmann::ordered_json one;
    one["stage"] = st;
    one["role"] = stages[st].role;
    one["items"] = memory_items_json(stages[st].items);
    one["total_bytes"] = stages[st].total();
    fits = fits && stages[st].total() <= capacity;
    out.push_back(one);
  }
  j["fits"] = fits;
  j["stages"] = out;
  return j;
}

nlohmann::ordered_json training_json(const TrainingResult& r) {
  using J = nlohmann::ordered_json;
  J j;
  j["scenario"] = r.scenario.name;
  j["model"] = r.scenario.model.name;
  j["layout"] = layout_text(r.scenario);
  const ParallelSpec& p = r.scenario.parallel;  // the layout as numbers, for data frames
  j["parallel"] = {{"dp", p.dp},
                   {"tp", p.tp},
                   {"pp", p.pp},
                   {"cp", p.cp},
                   {"ep", p.ep},
                   {"vchunks", p.vchunks},
                   {"microbatches", p.microbatches},
                   {"micro_batch_size", p.micro_batch_size},
                   {"global_batch", p.global_batch()},
                   {"zero", p.zero},
                   {"recompute", p.recompute.to_string()}};
  j["topology"] = r.topology_name;
  j["placement"] = r.placement;
  j["gpu"] = r.gpu.name;
  j["stack"] = to_string(r.scenario.parallel.stack.kind);
  j["attention"] = to_string(r.scenario.parallel.stack.attention);
  j["fp8"] = to_string(r.scenario.parallel.stack.fp8);
  if (!p.stage_layers.empty()) j["parallel"]["stage_layers"] = p.stage_layers;
  if (!r.stage_gpus.empty()) j["stage_gpus"] = r.stage_gpus;
  j["tensor_factor"] = r.tensor_factor;
  j["comm_sms"] = r.gpu.comm_sms;
  j["fidelity"] = to_string(r.scenario.fidelity);
  j["gpus"] = r.gpus;
  j["iteration_s"] = r.sim.iteration.seconds();
  if (!r.scenario.perturb.empty()) {
    j["nominal_iteration_s"] = r.nominal_iteration.seconds();
    if (!r.stage_compute_factor.empty()) j["stage_compute_factor"] = r.stage_compute_factor;
  }
  j["iteration_ps"] = r.sim.iteration.ps();
  j["tokens_per_s"] = r.tokens_per_s;
  j["model_flops"] = r.model_flops;
  j["hardware_flops"] = r.hardware_flops;
  j["mfu"] = r.mfu;
  j["hfu"] = r.hfu;
  J bd = J::object();
  for (const auto& [label, t] : breakdown_rows(r.sim.breakdown)) bd[label] = t.seconds();
  j["breakdown_s"] = bd;
  j["critical_stage"] = r.sim.critical_role;
  J mem = J::array();
  for (std::size_t st = 0; st < r.stages.size(); ++st) {
    J s;
    s["stage"] = st;
    s["items"] = memory_items_json(r.stages[st].model.items);
    s["activation_peak_bytes"] = r.stages[st].activation_peak;
    s["peak_bytes"] = r.stages[st].peak;
    mem.push_back(s);
  }
  j["memory"] = mem;
  j["capacity_bytes"] = r.capacity;
  j["fits"] = r.fits;
  J links = J::array();
  for (std::size_t i = 0; i < r.sim.top_links.size(); ++i) {
    J one{{"link", r.link_names[i]},
          {"bytes", r.sim.top_links[i].bytes},
          {"utilization", r.sim.top_links[i].utilization}};
    if (const LinkReport* l = link_by_id(r, r.sim.top_links[i].link)) {
      one["tier"] = l->tier;
      if (r.sim.links_shared) one["peak"] = l->peak;
    }
    links.push_back(one);
  }
  j["busiest_links"] = links;
  if (!r.links.empty()) {
    J tiers = J::array();
    for (const TierLoad& t : tier_loads(r.links)) {
      J one{{"tier", t.tier},
            {"links", t.links},
            {"bytes", t.bytes},
            {"busiest", t.busiest->name},
            {"utilization", t.busiest->utilization}};
      if (r.sim.links_shared) one["peak"] = t.busiest->peak;
      tiers.push_back(one);
    }
    j["link_tiers"] = tiers;
    j["link_sharing"] = r.sim.links_shared;
    if (r.sim.links_shared) {
      J delay = J::object();
      for (const auto& [cat, d] : r.sim.sharing_delay) delay[cat] = J{{"ops", d.first}, {"lost_s", d.second.seconds()}};
      j["sharing_delay"] = delay;
    }
  }
  std::size_t ops = 0;
  for (const Role& role : r.schedule.roles) ops += role.ops.size();
  j["engine"] = r.fast ? "fast-formula" : "op-level";
  if (!r.fast) j["ops"] = ops;
  j["distinct_collectives"] = r.sim.distinct_collectives;
  return j;
}

nlohmann::ordered_json training_trace(const TrainingResult& r) {
  using J = nlohmann::ordered_json;
  J events = J::array();
  for (std::size_t role = 0; role < r.schedule.roles.size(); ++role) {
    events.push_back(J{{"ph", "M"},
                       {"pid", role},
                       {"tid", 0},
                       {"name", "process_name"},
                       {"args", J{{"name", r.schedule.roles[role].name}}}});
    for (int st = 0; st < kStreams; ++st)
      events.push_back(J{{"ph", "M"},
                         {"pid", role},
                         {"tid", st},
                         {"name", "thread_name"},
                         {"args", J{{"name", to_string(static_cast<Stream>(st))}}}});
  }
  for (const TraceEvent& e : r.sim.trace.events) {
    const Op& op = r.schedule.roles[e.role].ops[e.op];
    if (op.kind == OpKind::Recv) continue;
    J ev{{"ph", "X"},
         {"pid", e.role},
         {"tid", static_cast<int>(op.stream)},
         {"name", op.name},
         {"cat", op_category(op)},
         {"ts", e.start.us()},
         {"dur", (e.end - e.start).us()}};
    J args{{"op", e.op}, {"phase", to_string(op.phase)}};
    if (op.layer >= 0) args["layer"] = op.layer;
    if (op.microbatch >= 0) args["microbatch"] = op.microbatch;
    if (op.kind == OpKind::Compute) {
      args["flops"] = op.kernel.flops;
      args["bytes"] = op.kernel.bytes;
    } else {
      args["bytes"] = op.bytes;
      args["axis"] = op.axis.str();
      if (op.kind == OpKind::Collective) args["collective"] = to_string(op.coll);
    }
    ev["args"] = args;
    events.push_back(ev);
  }
  // Counter tracks: the busiest links' load over time, in a process of their own.
  if (!r.sim.link_load.empty()) {
    const std::size_t pid = r.schedule.roles.size();
    events.push_back(
        J{{"ph", "M"}, {"pid", pid}, {"tid", 0}, {"name", "process_name"}, {"args", J{{"name", "links"}}}});
    for (const LinkLoadSeries& series : r.sim.link_load) {
      const LinkReport* l = link_by_id(r, series.link);
      const std::string name = "load % " + (l != nullptr ? l->name : std::to_string(series.link));
      for (const auto& [at, load] : series.load)
        events.push_back(
            J{{"ph", "C"}, {"pid", pid}, {"name", name}, {"ts", at.us()}, {"args", J{{"load", 100 * load}}}});
    }
  }
  return J{{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

namespace {

// The report's categories for an op: compute split into forward and backward (the breakdown and
// the trace keep one "compute"), so that a pipeline's phases show apart.
std::string html_category(const Op& op) {
  if (op.kind == OpKind::Compute && op.phase == Phase::Forward) return "forward";
  if (op.kind == OpKind::Compute && op.phase == Phase::Backward) return "backward";
  return op_category(op);
}

// The model chunk (interleaved 1F1B) holding `layer` on its stage: its virtual stage / pp.
int chunk_of_layer(const ParallelSpec& p, int layers, int layer) {
  for (int vs = 0; vs < p.pp * p.vchunks; ++vs)
    if (layer < p.first_layer(layers, vs) + p.chunk_layers(layers, vs)) return vs / p.pp;
  return 0;
}

// One micro-batch's forward or backward (its recomputation included) on one stage's compute
// stream, from its first op to its last.
struct PipelineBlock {
  double start = 1e300, end = -1;
  bool forward = true;
  int mb = 0, chunk = 0;
};

// Every stage's blocks, each stage's in order of start: one pass over the trace.
std::vector<std::vector<PipelineBlock>> pipeline_blocks(const TrainingResult& r) {
  // per stage: (backward?, micro-batch, chunk) -> block
  std::vector<std::map<std::tuple<int, int, int>, PipelineBlock>> blocks(r.schedule.roles.size());
  const ParallelSpec& p = r.scenario.parallel;
  for (const TraceEvent& e : r.sim.trace.events) {
    const auto role = static_cast<std::size_t>(e.role);
    const Op& op = r.schedule.roles[role].ops[e.op];
    if (op.kind != OpKind::Compute || op.microbatch < 0 || op.phase == Phase::Optimizer || e.end <= e.start) continue;
    const bool fwd = op.phase == Phase::Forward;
    const int chunk = op.layer >= 0 && p.vchunks > 1 ? chunk_of_layer(p, r.scenario.model.layers, op.layer) : 0;
    PipelineBlock& b = blocks[role][{fwd ? 0 : 1, op.microbatch, chunk}];
    b.forward = fwd, b.mb = op.microbatch, b.chunk = chunk;
    b.start = std::min(b.start, e.start.seconds());
    b.end = std::max(b.end, e.end.seconds());
  }
  std::vector<std::vector<PipelineBlock>> out;
  for (const auto& stage : blocks) {
    std::vector<PipelineBlock>& order = out.emplace_back();
    for (const auto& [key, b] : stage) order.push_back(b);
    std::stable_sort(order.begin(), order.end(),
                     [](const PipelineBlock& a, const PipelineBlock& b) { return a.start < b.start; });
  }
  return out;
}

// One stage's pipeline at a glance: a span per block ("F3", "B3"; "F3.1" for model chunk 1 when
// interleaved) and the stage's idle time between them (from the iteration's start to its last
// backward): the pipeline bubble, or waiting on communication.
void add_pipeline_lane(const std::vector<PipelineBlock>& blocks, bool chunks, int lane, HtmlReport& h) {
  double busy_until = 0;
  for (const PipelineBlock& b : blocks) {
    if (b.start > busy_until)
      h.spans.push_back({lane, busy_until, b.start, "idle: the pipeline bubble, or waiting on communication", "idle"});
    const std::string id = chunks ? fmt::format("{}.{}", b.mb, b.chunk) : std::to_string(b.mb);
    h.spans.push_back({lane, b.start, b.end, (b.forward ? "F" : "B") + id, b.forward ? "forward" : "backward"});
    busy_until = std::max(busy_until, b.end);
  }
}

// One period of the steady state, for the report's detail panel: on the first stage, from the
// start of the middle micro-batch's forward to the start of the next one's (none with fewer than
// three micro-batches).
std::optional<std::pair<double, double>> steady_period(const std::vector<std::vector<PipelineBlock>>& blocks,
                                                       int microbatches) {
  if (blocks.empty() || microbatches < 3) return std::nullopt;
  std::vector<double> starts;
  for (const PipelineBlock& b : blocks[0])
    if (b.forward && b.chunk == 0) starts.push_back(b.start);
  std::sort(starts.begin(), starts.end());
  const std::size_t mid = starts.size() / 2;
  if (mid + 1 >= starts.size()) return std::nullopt;
  return std::make_pair(starts[mid], starts[mid + 1]);
}

}  // namespace

HtmlReport training_html(const TrainingResult& r) {
  HtmlReport h;
  h.title = "meshsim simulate: " + r.scenario.name;
  h.summary = {
      {"model", r.scenario.model.name},
      {"layout", layout_text(r.scenario)},
      {"cluster", fmt::format("{} ({} GPUs), placement {}, GPU {}", r.topology_name, r.gpus, r.placement, r.gpu.name)},
      {"fidelity", to_string(r.scenario.fidelity)},
      {"iteration time", format_time(r.sim.iteration)},
      {"tokens/s", fmt::format("{:.0f}", r.tokens_per_s)},
      {"MFU / HFU", pct(r.mfu) + " / " + pct(r.hfu)},
      {"fits in memory", r.fits ? "yes" : "NO"}};
  // Per stage: its pipeline lane (micro-batches and bubble), then one lane per stream that runs
  // anything (unused streams, cp without CP, ..., are left out).
  const std::vector<std::vector<PipelineBlock>> blocks = pipeline_blocks(r);
  std::vector<int> lane_of(r.schedule.roles.size() * kStreams, -1);
  for (std::size_t role = 0; role < r.schedule.roles.size(); ++role) {
    h.lanes.push_back(fmt::format("{} · micro-batches", r.schedule.roles[role].name));
    add_pipeline_lane(blocks[role], r.scenario.parallel.vchunks > 1, static_cast<int>(h.lanes.size()) - 1, h);
    std::vector<bool> used(kStreams, false);
    for (const Op& op : r.schedule.roles[role].ops)
      if (op.kind != OpKind::Recv) used[static_cast<std::size_t>(op.stream)] = true;
    for (int st = 0; st < kStreams; ++st) {
      if (!used[static_cast<std::size_t>(st)]) continue;
      lane_of[role * kStreams + static_cast<std::size_t>(st)] = static_cast<int>(h.lanes.size());
      h.lanes.push_back(fmt::format("{} · {}", r.schedule.roles[role].name, to_string(static_cast<Stream>(st))));
    }
  }
  for (const TraceEvent& e : r.sim.trace.events) {
    const Op& op = r.schedule.roles[e.role].ops[e.op];
    if (op.kind == OpKind::Recv || e.end <= e.start) continue;
    h.spans.push_back({lane_of[static_cast<std::size_t>(e.role) * kStreams + static_cast<std::size_t>(op.stream)],
                       e.start.seconds(), e.end.seconds(),
                       op.microbatch >= 0 ? fmt::format("{} (mb {})", op.name, op.microbatch) : op.name,
                       html_category(op)});
  }
  h.detail_window = steady_period(blocks, r.scenario.parallel.microbatches);
  for (const auto& [label, t] : breakdown_rows(r.sim.breakdown))
    if (t > Time{}) h.breakdown.emplace_back(label, t.seconds());
  for (std::size_t st = 0; st < r.stages.size(); ++st) {
    HtmlMemoryBar bar;
    bar.role = "stage " + std::to_string(st);
    for (const auto& [cat, b] : r.stages[st].other_by_category())
      bar.items_bytes.emplace_back(cat, static_cast<double>(b));
    bar.items_bytes.emplace_back("layer activations (timeline peak)",
                                 static_cast<double>(r.stages[st].activation_peak));
    bar.capacity_bytes = static_cast<double>(r.capacity);
    bar.peak_bytes = static_cast<double>(r.stages[st].peak);
    h.memory.push_back(bar);
  }
  // Link load: the busiest links of each tier, the series-tracked ones with their load over time.
  const double span = r.sim.iteration.seconds();
  for (const TierLoad& t : tier_loads(r.links)) {
    std::vector<const LinkReport*> tier;
    for (const LinkReport& l : r.links)
      if (l.tier == t.tier) tier.push_back(&l);
    std::stable_sort(tier.begin(), tier.end(),
                     [](const LinkReport* a, const LinkReport* b) { return a->utilization > b->utilization; });
    if (tier.size() > kHtmlLinksPerTier) tier.resize(kHtmlLinksPerTier);
    for (const LinkReport* l : tier) {
      HtmlLinkLoad row{l->tier, l->name, l->bytes, l->utilization, r.sim.links_shared ? l->peak : -1, {}};
      for (const LinkLoadSeries& series : r.sim.link_load)
        if (series.link == l->id) row.load = averaged_load(series, span);
      h.links.push_back(std::move(row));
    }
  }
  if (!r.links.empty() && r.topology) {
    const Topology* topo = r.topology.get();
    std::vector<double> utilization(topo->links().size(), 0.0);
    for (const LinkReport& l : r.links)
      if (l.id >= 0 && l.id < static_cast<int>(utilization.size()))
        utilization[static_cast<std::size_t>(l.id)] = l.utilization;
    h.cluster_svg = topology_svg(*topo, {.utilization = utilization, .title = ""});
  }
  if (r.sim.links_shared)
    for (const auto& [category, d] : r.sim.sharing_delay) h.sharing_delay.emplace_back(category, d.first, d.second);
  return h;
}

}  // namespace meshsim
