#include "report/collective_report.h"
#include "schedule/buffer_view.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>

namespace meshsim {

Bandwidths bandwidths(CollKind kind, int ranks, Bytes bytes, Time t) {
  Bandwidths b;
  b.factor = busbw_factor(kind, ranks);
  const double s = t.seconds();
  if (s > 0) {
    b.algbw_GBps = static_cast<double>(bytes) / s * 1e-9;
    b.busbw_GBps = b.algbw_GBps * b.factor;
  }
  return b;
}

namespace {

std::string factor_text(CollKind kind, int p) {
  switch (kind) {
    case CollKind::AllReduce:
      return fmt::format("2(p-1)/p = {:.3f}", busbw_factor(kind, p));
    case CollKind::AllGather:
    case CollKind::ReduceScatter:
    case CollKind::AllToAll:
      return fmt::format("(p-1)/p = {:.3f}", busbw_factor(kind, p));
    default:
      return "1";
  }
}

std::string busiest_text(const Topology& topo, const CollectiveOutcome& out) {
  if (!out.flow) return "n/a at formula fidelity (use --fidelity flow)";
  if (out.busiest.link < 0) return "none (no bytes moved)";
  const DirLink& l = topo.link(out.busiest.link);
  return fmt::format("{} ({}, {}): {} carried, {:.1f}% of its capacity over the run", link_name(topo, out.busiest.link),
                     to_string(l.spec.kind), format_bandwidth(l.spec.effective()),
                     format_bytes(static_cast<Bytes>(out.busiest.bytes)), 100.0 * out.busiest.utilization);
}

// The registry algorithm's name, or NCCL's choice at fidelity nccl ("nccl:Ring/LL128").
std::string algorithm_label(const CollectiveOutcome& out) {
  if (out.nccl) return "nccl:" + out.nccl->choice_name();
  return out.algorithm->name;
}

// The sweep's algorithm column: with the protocol its steps ran under ("ring/LL128").
std::string algorithm_protocol_label(const CollectiveOutcome& out) {
  if (out.protocol == Protocol::None) return algorithm_label(out);
  return fmt::format("{}/{}", algorithm_label(out), to_string(out.protocol));
}

// What the protocol adds, in one line: launch, per-step latency floor, payload rate.
std::string protocol_text(const Algorithm& a, const CostParams& cp, const CollectiveSpec& spec, Protocol p) {
  const ProtocolCosts c = a.protocol_costs(p, cp, spec);
  std::string steps;
  auto floor = [&](HopKind h) {
    if (c.hop(h) > 0)
      steps +=
          fmt::format("{} {:.2f} us {}", steps.empty() ? ", each step at least" : ",", c.hop(h) * 1e-6, to_string(h));
  };
  floor(cp.intra_hop);
  if (cp.multi_node) floor(HopKind::Net);
  return fmt::format("{} (launch {:.2f} us{}, payload {:.2f} of the link rate)", to_string(p), c.launch_ps * 1e-6,
                     steps, c.payload_fraction);
}

}  // namespace

std::string summary_text(const Topology& topo, const CollectiveContext& ctx, const CollectiveOutcome& out) {
  const Bandwidths bw = bandwidths(out.spec.kind, out.spec.ranks, out.spec.bytes, out.time);
  std::string s;
  s += fmt::format(
      "meshsim collective {}: {} ranks x {} group{}, {}, algorithm {}{}, fidelity {}\n", to_string(out.spec.kind),
      out.spec.ranks, ctx.groups, ctx.groups == 1 ? "" : "s", format_bytes(out.spec.bytes), algorithm_label(out),
      ctx.requested_algorithm.kind == AlgorithmChoice::Kind::Auto ? " (auto)" : "", to_string(ctx.fidelity));
  s += fmt::format("topology {} ({} GPUs, {} nodes), mesh {}, placement {}, group {}\n", ctx.topology, topo.num_gpus(),
                   topo.num_nodes(), ctx.mesh, ctx.placement, ctx.group);
  s += fmt::format("  time      {}\n", format_time(out.time));
  if (out.protocol != Protocol::None)
    s += fmt::format("  protocol  {}\n", protocol_text(*out.algorithm, out.params, out.spec, out.protocol));
  s += fmt::format("  algbw     {:.2f} GB/s\n", bw.algbw_GBps);
  s += fmt::format("  busbw     {:.2f} GB/s   (busbw factor {})\n", bw.busbw_GBps,
                   factor_text(out.spec.kind, out.spec.ranks));
  if (out.flow) {
    const double ratio = out.formula_time.ps() > 0
                             ? static_cast<double>(out.time.ps()) / static_cast<double>(out.formula_time.ps())
                             : 1.0;
    s += fmt::format("  formula   {} (closed form, one group, no contention; simulated/formula = {:.4f})\n",
                     format_time(out.formula_time), ratio);
  }
  if (out.nccl) {
    s += nccl_table_text(*out.nccl);
    return s;
  }
  s += fmt::format("  busiest   {}\n", busiest_text(topo, out));
  return s;
}

std::string sweep_header(const CollectiveContext& ctx, CollKind kind) {
  std::string s = fmt::format(
      "# meshsim collective {}: {} ranks x {} group(s), topology {}, placement {}, group {}, fidelity {}\n",
      to_string(kind), ctx.ranks, ctx.groups, ctx.topology, ctx.placement, ctx.group, to_string(ctx.fidelity));
  s += fmt::format("#{:>12} {:>12} {:>20} {:>12} {:>10} {:>10} {:>12}\n", "size(B)", "count(fp32)", "algorithm",
                   "time(us)", "algbw", "busbw", "formula(us)");
  s += fmt::format("#{:>12} {:>12} {:>20} {:>12} {:>10} {:>10} {:>12}\n", "", "", "", "", "(GB/s)", "(GB/s)", "");
  return s;
}

std::string sweep_row(const CollectiveOutcome& out) {
  const Bandwidths bw = bandwidths(out.spec.kind, out.spec.ranks, out.spec.bytes, out.time);
  return fmt::format(" {:>12} {:>12} {:>20} {:>12.2f} {:>10.2f} {:>10.2f} {:>12.2f}\n", out.spec.bytes,
                     out.spec.bytes / 4, algorithm_protocol_label(out), out.time.us(), bw.algbw_GBps, bw.busbw_GBps,
                     out.formula_time.us());
}

std::string nccl_tests_columns() {
  std::string s;
  s += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}\n",
                   "", "", "", "", "", "out-of-place", "", "", "", "in-place", "", "", "");
  s += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}\n",
                   "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
                   "busbw", "#wrong");
  s += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>6}\n",
                   "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  return s;
}

std::string nccl_tests_header(const CollectiveContext& ctx, CollKind kind) {
  return fmt::format("# meshsim collective {} (nccl-tests layout): {} ranks x {} group(s), topology {}, fidelity {}\n",
                     to_string(kind), ctx.ranks, ctx.groups, ctx.topology, to_string(ctx.fidelity)) +
         "#\n" + nccl_tests_columns();
}

std::string nccl_tests_row(const NcclTestsRow& row) {
  const Bandwidths bw = bandwidths(row.kind, row.ranks, row.bytes, row.time);
  const CollKind k = row.kind;
  const bool sums = reduces(k);
  const bool rooted = k == CollKind::Broadcast || k == CollKind::Reduce;
  // nccl-tests' count: elements per rank's send buffer for reduce-scatter and all-gather.
  const Bytes count = row.bytes / 4;
  const std::string cols =
      fmt::format("{:>7.2f}  {:>6.2f}  {:>6.2f}  {:>6}", row.time.us(), bw.algbw_GBps, bw.busbw_GBps, row.wrong);
  return fmt::format("  {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {}  {}\n", row.bytes, count, "float",
                     sums ? "sum" : "none", rooted ? row.root : -1, cols, cols);
}

std::string nccl_tests_row(const CollectiveOutcome& out) {
  return nccl_tests_row(NcclTestsRow{out.spec.kind, out.spec.ranks, out.spec.bytes, out.spec.root, out.time, "N/A"});
}

std::string nccl_tests_footer(const std::vector<double>& busbw_GBps, const std::string& out_of_bounds) {
  double sum = 0;
  for (double b : busbw_GBps) sum += b;
  const double avg = busbw_GBps.empty() ? 0 : sum / static_cast<double>(busbw_GBps.size());
  return fmt::format("# Out of bounds values : {}\n# Avg bus bandwidth    : {:.4f} \n#\n", out_of_bounds, avg);
}

std::string nccl_tests_footer(const std::vector<double>& busbw_GBps) {
  return nccl_tests_footer(busbw_GBps, "0 OK (simulated: no data checked)");
}

std::string explain_text(const Topology& topo, const CollectiveOutcome& out, std::size_t max_rows) {
  if (out.nccl) return nccl_explain_text(*out.nccl);
  std::string s = "\nFormula (docs/math.md section 1):\n";
  const CostParams params = with_protocol(out.params, out.protocol, out.spec, out.algorithm->hop_rows);
  s += out.algorithm->explain(out.spec, params);
  if (s.back() != '\n') s += '\n';
  if (out.protocol != Protocol::None) {
    const double launch = out.algorithm->protocol_costs(out.protocol, out.params, out.spec).launch_ps;
    s += fmt::format("  + launch of protocol {} {:.3f}us = {:.3f}us\n", to_string(out.protocol), launch * 1e-6,
                     (launch + out.algorithm->cost_ps(out.spec, params)) * 1e-6);
    s += fmt::format("  alpha and beta above: the routes' under protocol {} (docs/math.md section 1.6)\n",
                     to_string(out.protocol));
  }
  s += fmt::format("  link parameters read off the routes: alpha = {:.3f} us, 1/beta = {:.2f} GB/s",
                   out.params.alpha_ps * 1e-6, 1.0 / out.params.beta_ps * 1e3);
  if (out.params.gamma_ps > 0) s += fmt::format(", 1/gamma = {:.2f} GB/s", 1.0 / out.params.gamma_ps * 1e3);
  s += "\n";
  if (out.params.gamma_ps == 0 && reduces(out.spec.kind))
    s += "  gamma = 0: reductions are fused with the transfers (terms over 'inf' are zero); --reduce-bw charges them\n";
  if (out.params.intra_beta_ps != out.params.inter_beta_ps || out.params.intra_alpha_ps != out.params.inter_alpha_ps)
    s += fmt::format(
        "  intra-node: alpha = {:.3f} us, 1/beta = {:.2f} GB/s; inter-node: alpha = {:.3f} us, 1/beta = {:.2f} GB/s\n",
        out.params.intra_alpha_ps * 1e-6, 1e3 / out.params.intra_beta_ps, out.params.inter_alpha_ps * 1e-6,
        1e3 / out.params.inter_beta_ps);
  if (!out.flow || out.flow->transfers.empty()) {
    s += "  (step table: shown for groups of at most 16 ranks)\n";
    return s;
  }
  const auto& tr = out.flow->transfers;
  s += fmt::format("\nSteps of group 0 (flow model; times from the start of the collective):\n");
  s += fmt::format("  {:>4}  {:>15}  {:>6}  {:>10}  {:>7}  {:>12}  {:>12}\n", "step", "sender->receiver", "chunk",
                   "bytes", "op", "start", "end");
  std::vector<const TransferRecord*> rows;
  for (const auto& t : tr)
    if (t.group == 0) rows.push_back(&t);
  std::stable_sort(rows.begin(), rows.end(), [](const TransferRecord* a, const TransferRecord* b) {
    if (a->start != b->start) return a->start < b->start;
    return a->src != b->src ? a->src < b->src : a->dst < b->dst;
  });
  std::size_t shown = 0;
  for (const TransferRecord* t : rows) {
    if (shown++ == max_rows) {
      s += fmt::format("  ... {} more transfers (see --trace for all)\n", rows.size() - max_rows);
      break;
    }
    s += fmt::format("  {:>4}  {:>15}  {:>6}  {:>10}  {:>7}  {:>12}  {:>12}\n", t->step,
                     fmt::format("{} -> {}", t->src, t->dst), t->chunk, format_bytes(t->bytes),
                     t->reduce ? "reduce" : "copy", format_time(t->start), format_time(t->delivered));
  }
  (void)topo;
  return s;
}

nlohmann::ordered_json outcome_json(const Topology& topo, const CollectiveContext& ctx, const CollectiveOutcome& out) {
  const Bandwidths bw = bandwidths(out.spec.kind, out.spec.ranks, out.spec.bytes, out.time);
  nlohmann::ordered_json j;
  j["collective"] = to_string(out.spec.kind);
  j["ranks"] = out.spec.ranks;
  j["groups"] = ctx.groups;
  j["bytes"] = out.spec.bytes;
  j["algorithm"] = algorithm_label(out);
  j["algorithm_requested"] = ctx.requested_algorithm.text();
  if (out.protocol != Protocol::None) j["protocol"] = to_string(out.protocol);
  j["fidelity"] = to_string(ctx.fidelity);
  j["topology"] = ctx.topology;
  j["mesh"] = ctx.mesh;
  j["placement"] = ctx.placement;
  j["group"] = ctx.group;
  j["time_ps"] = out.time.ps();
  j["time_us"] = out.time.us();
  j["formula_time_ps"] = out.formula_time.ps();
  j["algbw_GBps"] = bw.algbw_GBps;
  j["busbw_GBps"] = bw.busbw_GBps;
  j["busbw_factor"] = bw.factor;
  j["alpha_us"] = out.params.alpha_ps * 1e-6;
  j["bandwidth_GBps"] = 1e3 / out.params.beta_ps;
  if (out.flow) {
    j["messages"] = out.flow->messages;
    j["events"] = out.flow->events;
    j["solves"] = out.flow->solves;
    j["skipped_steps"] = out.flow->skipped_steps;
    nlohmann::ordered_json links = nlohmann::ordered_json::array();
    for (const auto& b : out.top_links) {
      nlohmann::ordered_json l;
      l["link"] = link_name(topo, b.link);
      l["kind"] = to_string(topo.link(b.link).spec.kind);
      l["bandwidth_GBps"] = topo.link(b.link).spec.effective().gbytes_per_s();
      l["bytes"] = b.bytes;
      l["utilization"] = b.utilization;
      links.push_back(l);
    }
    j["busiest_links"] = links;
    nlohmann::ordered_json groups = nlohmann::ordered_json::array();
    for (Time t : out.flow->group_time) groups.push_back(t.ps());
    j["group_time_ps"] = groups;
  }
  if (out.nccl) {
    const NcclPrediction& np = *out.nccl;
    nlohmann::ordered_json n;
    n["model"] = "NCCL 2.20.3 src/graph/tuning.cc (NVLS row: NCCL 2.28)";
    n["algorithm"] = to_string(np.chosen().algo);
    n["protocol"] = to_string(np.chosen().proto);
    n["sm"] = np.config.sm;
    n["nodes"] = np.shape.nodes;
    n["ranks_per_node"] = np.shape.ranks / np.shape.nodes;
    n["intra"] = to_string(np.shape.intra);
    n["channels"] = np.graph.channels;
    n["channel_bw_GBps"] = np.graph.bw_GBps;
    if (np.nvls_graph.channels > 0)
      n["nvls_graph"] = {{"channels", np.nvls_graph.channels},
                         {"channel_bw_GBps", np.nvls_graph.bw_GBps},
                         {"bw_inter_GBps", np.nvls_graph.bw_inter_GBps}};
    nlohmann::ordered_json cands = nlohmann::ordered_json::array();
    for (const NcclCandidate& c : np.candidates) {
      nlohmann::ordered_json e;
      e["algorithm"] = to_string(c.algo);
      e["protocol"] = to_string(c.proto);
      e["enabled"] = c.enabled;
      if (c.enabled) {
        e["latency_us"] = c.latency_us;
        e["busbw_GBps"] = c.busbw_GBps;
        e["algbw_GBps"] = c.algbw_GBps;
        e["time_us"] = c.time_us;
      } else {
        e["disabled"] = c.disabled_why;
      }
      cands.push_back(e);
    }
    n["candidates"] = cands;
    j["nccl"] = n;
  }
  return j;
}

nlohmann::ordered_json perfetto_trace(const Topology& topo, const CollectiveContext& ctx,
                                      const std::vector<CollectiveOutcome>& outs) {
  using J = nlohmann::ordered_json;
  J events = J::array();
  auto meta = [&](int pid, int tid, const std::string& what, const std::string& name) {
    J e;
    e["ph"] = "M";
    e["pid"] = pid;
    e["tid"] = tid;
    e["name"] = what;
    e["args"] = J{{"name", name}};
    events.push_back(e);
  };
  meta(1, 0, "process_name", fmt::format("ranks ({} {})", ctx.group, ctx.placement));
  meta(2, 0, "process_name", "links");
  double offset_us = 0;
  std::map<int, bool> rank_named, link_named;
  for (const auto& out : outs) {
    if (!out.flow) continue;
    const int p = out.spec.ranks;
    for (const auto& st : out.flow->steps) {
      const int tid = st.group * p + st.rank;
      if (!rank_named[tid]) {
        rank_named[tid] = true;
        meta(1, tid, "thread_name", fmt::format("group {} rank {}", st.group, st.rank));
      }
      J e;
      e["ph"] = "X";
      e["pid"] = 1;
      e["tid"] = tid;
      e["name"] = fmt::format("{} step {}", algorithm_label(out), st.step);
      e["ts"] = offset_us + st.start.us();
      e["dur"] = (st.end - st.start).us();
      e["args"] = J{{"bytes", out.spec.bytes}};
      events.push_back(e);
    }
    for (const auto& t : out.flow->transfers) {
      J e;
      e["ph"] = "X";
      e["pid"] = 1;
      e["tid"] = t.group * p + t.src;
      e["name"] = fmt::format("send {}B -> {}", t.bytes, t.dst);
      e["cat"] = "transfer";
      e["ts"] = offset_us + t.start.us();
      e["dur"] = (t.delivered - t.start).us();
      e["args"] = J{{"chunk", t.chunk}, {"bytes", t.bytes}, {"peer", t.dst}, {"step", t.step}};
      events.push_back(e);
    }
    for (const auto& li : out.flow->link_intervals) {
      if (!link_named[li.link]) {
        link_named[li.link] = true;
        meta(2, li.link, "thread_name", link_name(topo, li.link));
      }
      J e;
      e["ph"] = "X";
      e["pid"] = 2;
      e["tid"] = li.link;
      e["name"] = fmt::format("{} flow{}", li.flows, li.flows == 1 ? "" : "s");
      e["ts"] = offset_us + li.begin.us();
      e["dur"] = (li.end - li.begin).us();
      e["args"] = J{{"flows", li.flows}, {"share_GBps", topo.link(li.link).spec.effective().gbytes_per_s() / li.flows}};
      events.push_back(e);
    }
    offset_us += out.time.us();  // sweeps: sizes laid out one after another
  }
  J root;
  root["traceEvents"] = events;
  root["displayTimeUnit"] = "ms";  // as every meshsim trace
  root["otherData"] = J{{"generator", "meshsim collective"}, {"topology", ctx.topology}};
  return root;
}

std::string explanation(const Topology& topo, Router& router, const AlgorithmRegistry& registry,
                        const CollectiveRequest& req, const CollectiveOutcome& out) {
  const bool small = req.groups.front().size() <= 16;
  std::string text;
  if (out.flow || out.nccl || !small) {
    text = explain_text(topo, out, 200);
  } else {
    CollectiveRequest flow = req;
    flow.fidelity = Fidelity::Flow;
    flow.algorithm = out.algorithm->name;
    flow.record = true;
    text = explain_text(topo, run_collective(topo, router, registry, flow), 200);
  }
  if (out.algorithm == nullptr || !small) return text;  // NCCL's model has no steps to show
  const auto program = out.algorithm->build(out.spec);
  text += "\n" + buffer_view_text(buffer_view(*program, out.spec), out.spec);
  if (out.algorithm->make_timing)  // nvls, pxn: what the links carry differs from the program's messages
    text += fmt::format(
        "  (these are the messages {} runs rank to rank; on the links hardware or relays do part of the work, "
        "e.g. NVLS's switch sums each slice and multicasts the sum, so the flow model times fewer bytes)\n",
        out.algorithm->name);
  return text;
}

CollectiveContext collective_context(const CollectiveJob& job, const ResolvedCollective& c) {
  CollectiveContext ctx;
  ctx.topology = job.topology;
  ctx.placement = c.placement.kind();
  ctx.mesh = c.mesh_text();
  ctx.group = job.group;
  ctx.requested_algorithm = job.algo;
  ctx.fidelity = c.request.fidelity;
  ctx.groups = static_cast<int>(c.request.groups.size());
  ctx.ranks = static_cast<int>(c.request.groups.front().size());
  return ctx;
}

}  // namespace meshsim
