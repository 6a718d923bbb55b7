#include "sim/collective_sim.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <map>
#include <set>
#include <unordered_map>

#include "core/budget.h"
#include "core/enum_names.h"
#include "core/error.h"
#include "core/flag.h"
#include "core/suggest.h"
#include "sim/engine.h"

namespace meshsim {

constexpr EnumName<Fidelity> kFidelityNames[] = {
    {Fidelity::Formula, "formula"}, {Fidelity::Flow, "flow"}, {Fidelity::Nccl, "nccl"}};
const char* to_string(Fidelity f) { return enum_name(kFidelityNames, f); }

Fidelity parse_fidelity(const std::string& s, const std::string& field) {
  if (const auto f = enum_parse(kFidelityNames, s)) return *f;
  throw Error(fmt::format("{}: unknown fidelity '{}'; use one of {}", field, s, enum_list(kFidelityNames)));
}

namespace {

constexpr std::uint32_t kDeliver = 1;
constexpr std::uint32_t kStepDone = 2;
constexpr std::uint32_t kStart = 3;  // a group's launch is over: its ranks start

// Whether every link of a route is NVLink (a protocol's NVLink hop; else PCI in a node).
bool all_nvlink(const Topology& topo, const Path& path) {
  for (int l : path.links)
    if (topo.link(l).spec.kind != LinkKind::NvLink) return false;
  return true;
}

// Runs step programs of several groups on one FlowNetwork. See step semantics in
// schedule/collective.h: a send completes when its bytes have drained from the links, its
// receive a hop latency later; a step ends when all of its sends have drained and all of
// its receives have arrived (plus gamma * reduced bytes).
class Runner : public EventHandler, public FlowListener {
 public:
  Runner(const Topology& topo, Router& router, const std::vector<GroupProgram>& groups, const FlowSimOptions& options)
      : topo_(topo), router_(router), groups_(groups), options_(options), net_(engine_, topo, *this) {
    int slots = 0;
    for (const auto& g : groups_) {
      MESHSIM_ASSERT(g.program != nullptr && g.program->ranks() == static_cast<int>(g.gpus.size()));
      base_.push_back(slots);
      costs_.push_back(protocol_costs(g.protocol, g.hop_rows, g.scope));
      slots += static_cast<int>(g.gpus.size());
    }
    for (std::size_t g = 0; g < groups_.size(); ++g)
      for (std::size_t r = 0; r < groups_[g].gpus.size(); ++r) slot_group_.push_back(static_cast<int>(g));
    ranks_.resize(slots);
    group_end_.assign(groups_.size(), Time{});
    net_.record_intervals(options_.record);
    options_.fast_forward = options_.fast_forward && !options_.record;
    engine_.add_handler(this);  // after the network: sees solved rates
  }

  FlowSimResult run() {
    for (std::size_t g = 0; g < groups_.size(); ++g) {
      const double launch = costs_[g].launch_ps;
      if (launch > 0)
        engine_.schedule(duration_ps(launch, "a protocol's launch"), this, kStart, g);
      else
        start_group(static_cast<int>(g));
    }
    FlowSimResult res;
    engine_.run();
    // The end is when the last rank finished its last step, not the engine's last event:
    // a flow that speeds up leaves its superseded (later) drain event in the queue, which
    // the engine still pops, and ignores, after everything has ended.
    res.total = group_end_.empty() ? Time{} : *std::max_element(group_end_.begin(), group_end_.end());
    for (std::size_t s = 0; s < ranks_.size(); ++s) {
      const int g = slot_group_[s];
      const int r = static_cast<int>(s) - base_[g];
      if (ranks_[s].step < groups_[g].program->num_steps(r))
        throw std::logic_error(
            fmt::format("step program deadlocked: group {} rank {} stuck at step {}", g, r, ranks_[s].step));
    }
    for (const auto& [key, p] : pairs_) {
      if (p.posted != p.arrived)
        throw std::logic_error(fmt::format("step program mismatch: pair {}->{} sent {} messages, received {}",
                                           key >> 32, key & 0xffffffffu, p.arrived, p.posted));
    }
    res.group_time = group_end_;
    res.link_stats = net_.link_stats();
    res.steps = std::move(steps_);
    res.transfers = std::move(transfers_);
    res.link_intervals = net_.intervals();
    res.messages = messages_;
    res.events = engine_.events_processed();
    res.solves = net_.solves();
    res.skipped_steps = skipped_steps_;
    return res;
  }

  void handle(const Event& e) override {
    if (e.kind == kDeliver) {
      deliver(static_cast<std::uint32_t>(e.payload));
    } else if (e.kind == kStart) {
      start_group(static_cast<int>(e.payload));
    } else {
      MESHSIM_ASSERT(e.kind == kStepDone);
      const int slot = static_cast<int>(e.payload);
      end_step(slot);
      advance(slot);
    }
  }

  void end_of_instant(Time /*now*/) override {
    if (check_pending_) {
      check_pending_ = false;
      try_fast_forward();
    }
  }

  // The sender's send is done now (its next step may start flows: the network has retired
  // this one and solves rates at the end of the instant); the receiver has the bytes one hop
  // latency later.
  void flow_drained(std::uint64_t tag, Time now) override {
    const auto id = static_cast<std::uint32_t>(tag);
    engine_.schedule(now + msgs_[id].latency, this, kDeliver, id);
    complete_one(msgs_[id].src_slot);
  }

 private:
  struct PairState {
    std::int64_t posted = 0;   // receives posted by the receiver
    std::int64_t arrived = 0;  // messages delivered
  };
  struct RankState {
    int step = 0;
    int outstanding = 0;
    Bytes reduce_bytes = 0;
    Time start;
    bool reduce = false;
    std::int32_t record = -1;
    int last_peer = -1;
    const Path* last_path = nullptr;
    Time last_latency;
    // Fast-forward bookkeeping: start times of the last 4 steps (ring buffer) and the
    // run of same-shape steps the current step belongs to.
    std::array<Time, 4> starts{};
    int run_begin = 0, run_end = 0;
  };
  struct Message {
    int src_slot = 0, dst_slot = 0;
    PairState* pair = nullptr;
    Time latency;
    std::int32_t record = -1;
  };

  PairState& pair(int src_slot, int dst_slot) {
    const std::uint64_t key = (static_cast<std::uint64_t>(src_slot) << 32) | static_cast<std::uint32_t>(dst_slot);
    return pairs_[key];
  }

  void start_group(int g) {
    const int n = static_cast<int>(groups_[static_cast<std::size_t>(g)].gpus.size());
    for (int r = 0; r < n; ++r) advance(base_[g] + r);
  }

  // A message's latency after it drains: its route's, or the protocol's hop latency for the
  // route's kind (NET across nodes, NVLink when every link is NVLink, else PCI) if larger.
  Time message_latency(int g, int r, int peer, const Path& path) const {
    const GroupProgram& gp = groups_[static_cast<std::size_t>(g)];
    if (gp.protocol == Protocol::None) return path.latency;
    const HopKind kind = topo_.node_of_gpu(gp.gpus[r]) != topo_.node_of_gpu(gp.gpus[peer]) ? HopKind::Net
                         : all_nvlink(topo_, path)                                         ? HopKind::NvLink
                                                                                           : HopKind::Pci;
    return std::max(path.latency,
                    duration_ps(costs_[static_cast<std::size_t>(g)].hop(kind), "a protocol's hop latency"));
  }
  // The bytes a transfer takes on the wire: its payload over the protocol's fraction.
  Bytes wire_bytes(int g, Bytes payload) const {
    const double f = costs_[static_cast<std::size_t>(g)].payload_fraction;
    return f == 1.0 ? payload : static_cast<Bytes>(std::ceil(static_cast<double>(payload) / f));
  }

  // Starts steps of `slot` until one has to wait.
  void advance(int slot) {
    const int g = slot_group_[slot];
    const GroupProgram& gp = groups_[g];
    const int r = slot - base_[g];
    RankState& st = ranks_[slot];
    const int nsteps = gp.program->num_steps(r);
    while (st.step < nsteps) {
      scratch_.clear();
      gp.program->step(r, st.step, scratch_);
      st.start = engine_.now();
      if (options_.fast_forward) note_step_start(slot, r, gp);
      st.outstanding = static_cast<int>(scratch_.sends.size() + scratch_.recvs.size());
      st.reduce = scratch_.op == RecvOp::Reduce;
      st.reduce_bytes = 0;
      if (options_.record) {
        st.record = static_cast<std::int32_t>(steps_.size());
        steps_.push_back({g, r, st.step, engine_.now(), engine_.now()});
      }
      for (const Transfer& t : scratch_.sends) send(slot, g, r, t);
      for (const Transfer& t : scratch_.recvs) {
        MESHSIM_ASSERT(t.peer >= 0 && t.peer < gp.program->ranks() && t.peer != r);
        PairState& p = pair(base_[g] + t.peer, slot);
        const std::int64_t index = p.posted++;
        if (st.reduce) st.reduce_bytes += t.bytes;
        if (p.arrived > index) --st.outstanding;
      }
      if (st.outstanding > 0) return;
      if (!finish_inputs(slot)) return;
      end_step(slot);
    }
    group_end_[g] = std::max(group_end_[g], engine_.now());
  }

  void note_step_start(int slot, int r, const GroupProgram& gp) {
    RankState& st = ranks_[slot];
    st.starts[st.step % 4] = st.start;
    if (st.step >= st.run_end) {
      st.run_begin = st.step;
      st.run_end = gp.program->same_shape_until(r, st.step);
    }
    // Rank 0 of group 0 paces the checks: every 8th step inside a long run.
    if (slot == 0 && st.step - st.run_begin >= 3 && st.run_end - st.step > 8 && st.step % 8 == 0) check_pending_ = true;
  }

  // Called at the end of an instant (all rates solved). If every rank is inside a run of
  // same-shape steps and has started its last 4 steps exactly `period` apart, the system
  // repeats itself each period: jump K periods ahead, shifting all pending events and
  // flow clocks by K*period and crediting the skipped messages and bytes.
  void try_fast_forward() {
    const RankState& lead = ranks_[0];
    const Time period = lead.starts[lead.step % 4] - lead.starts[(lead.step + 3) % 4];
    if (period <= Time{}) return;
    int k = INT32_MAX;
    for (std::size_t slot = 0; slot < ranks_.size(); ++slot) {
      const RankState& st = ranks_[slot];
      if (st.step - st.run_begin < 3 || st.step >= st.run_end) return;
      for (int i = 0; i < 3; ++i)
        if (st.starts[(st.step - i) % 4] - st.starts[(st.step - i + 3) % 4] != period) return;
      k = std::min(k, st.run_end - st.step - 2);  // leave the run's last steps to simulate
    }
    if (k < 4) return;
    const Time delta = period * k;
    engine_.shift_pending(delta);
    net_.shift(delta);
    for (std::size_t slot = 0; slot < ranks_.size(); ++slot) {
      RankState& st = ranks_[slot];
      const int g = slot_group_[slot];
      const GroupProgram& gp = groups_[g];
      const int r = static_cast<int>(slot) - base_[g];
      scratch_.clear();
      gp.program->step(r, st.step, scratch_);  // same shape as the K skipped steps
      for (const Transfer& t : scratch_.sends) {
        const int dst_slot = base_[g] + t.peer;
        pair(static_cast<int>(slot), dst_slot).arrived += k;
        net_.add_bytes(router_.path(gp.gpus[r], gp.gpus[t.peer]).links,
                       static_cast<double>(wire_bytes(g, t.bytes)) * k);
        messages_ += static_cast<std::uint64_t>(k);
      }
      for (const Transfer& t : scratch_.recvs) pair(base_[g] + t.peer, static_cast<int>(slot)).posted += k;
      st.step += k;
      st.start += delta;
      for (Time& t : st.starts) t += delta;
    }
    skipped_steps_ += static_cast<std::uint64_t>(k);
  }

  // All inputs of the step are in; returns true when the step is over now, false when a
  // reduction is still running (a kStepDone event will end it).
  bool finish_inputs(int slot) {
    RankState& st = ranks_[slot];
    if (st.reduce && options_.gamma_ps > 0 && st.reduce_bytes > 0) {
      const double dt = std::ceil(options_.gamma_ps * static_cast<double>(st.reduce_bytes) - 1e-9);
      engine_.schedule(engine_.now() + duration_ps(dt, "a step's reduction"), this, kStepDone,
                       static_cast<std::uint64_t>(slot));
      return false;
    }
    return true;
  }

  void end_step(int slot) {
    RankState& st = ranks_[slot];
    if (st.record >= 0) steps_[st.record].end = engine_.now();
    ++st.step;
  }

  void send(int slot, int g, int r, const Transfer& t) {
    const GroupProgram& gp = groups_[g];
    MESHSIM_ASSERT(t.peer >= 0 && t.peer < gp.program->ranks() && t.peer != r);
    const int dst_slot = base_[g] + t.peer;
    // Most algorithms send to the same peer step after step: remember the last route.
    RankState& st = ranks_[slot];
    if (st.last_peer != t.peer) {
      st.last_peer = t.peer;
      st.last_path = &router_.path(gp.gpus[r], gp.gpus[t.peer]);
      st.last_latency = message_latency(g, r, t.peer, *st.last_path);
    }
    const Path& path = *st.last_path;
    std::uint32_t id;
    if (!free_msgs_.empty()) {
      id = free_msgs_.back();
      free_msgs_.pop_back();
    } else {
      id = static_cast<std::uint32_t>(msgs_.size());
      msgs_.emplace_back();
    }
    Message& m = msgs_[id];
    m.src_slot = slot;
    m.dst_slot = dst_slot;
    m.pair = &pair(slot, dst_slot);
    m.latency = st.last_latency;
    m.record = -1;
    if (options_.record) {
      m.record = static_cast<std::int32_t>(transfers_.size());
      transfers_.push_back({g, r, t.peer, st.step, t.chunk, t.bytes, false, engine_.now(), Time{}});
    }
    ++messages_;
    if (t.bytes == 0) {
      --st.outstanding;  // nothing to drain: the send is done as it starts (advance() checks)
      engine_.schedule(engine_.now() + m.latency, this, kDeliver, id);
    } else {
      net_.start(path.links, wire_bytes(g, t.bytes), id);
    }
  }

  void deliver(std::uint32_t id) {
    const Message m = msgs_[id];
    free_msgs_.push_back(id);
    if (m.record >= 0) transfers_[m.record].delivered = engine_.now();
    const std::int64_t index = m.pair->arrived++;
    // The receiver's matching receive, if already posted, is now satisfied.
    if (m.pair->posted > index) {
      if (m.record >= 0) transfers_[m.record].reduce = ranks_[m.dst_slot].reduce;
      complete_one(m.dst_slot);
    }
  }

  void complete_one(int slot) {
    RankState& st = ranks_[slot];
    MESHSIM_ASSERT(st.outstanding > 0);
    if (--st.outstanding > 0) return;
    if (!finish_inputs(slot)) return;
    end_step(slot);
    advance(slot);
  }

  const Topology& topo_;
  Router& router_;
  const std::vector<GroupProgram>& groups_;
  std::vector<ProtocolCosts> costs_;  // per group
  FlowSimOptions options_;
  Engine engine_;
  FlowNetwork net_;
  std::vector<int> base_;
  std::vector<int> slot_group_;
  std::vector<RankState> ranks_;
  std::vector<Time> group_end_;
  std::unordered_map<std::uint64_t, PairState> pairs_;
  std::vector<Message> msgs_;
  std::vector<std::uint32_t> free_msgs_;
  Step scratch_;
  std::vector<StepRecord> steps_;
  std::vector<TransferRecord> transfers_;
  std::uint64_t messages_ = 0;
  bool check_pending_ = false;
  std::uint64_t skipped_steps_ = 0;
};

}  // namespace

FlowSimResult simulate_flow(const Topology& topo, Router& router, const std::vector<GroupProgram>& groups,
                            const FlowSimOptions& options) {
  Runner runner(topo, router, groups, options);
  return runner.run();
}

int detect_ranks_per_node(const Topology& topo, const std::vector<int>& gpus) {
  const int p = static_cast<int>(gpus.size());
  if (p == 0) return 1;
  int g = 1;
  while (g < p && topo.node_of_gpu(gpus[g]) == topo.node_of_gpu(gpus[0])) ++g;
  if (p % g != 0) return 1;
  for (int b = 0; b < p; b += g) {
    const int node = topo.node_of_gpu(gpus[b]);
    for (int i = b; i < b + g; ++i)
      if (topo.node_of_gpu(gpus[i]) != node) return 1;
    // Blocks must be on distinct nodes.
    for (int c = 0; c < b; c += g)
      if (topo.node_of_gpu(gpus[c]) == node) return 1;
  }
  return g;
}

namespace {
// CostParams::switch_*: inside every node, each route from a group rank to the next of its node
// must be GPU -> S -> GPU through a switch S that reduces, one S per node; their reduce and
// multicast traffic runs at the reduce efficiency of the slowest of those links. One S for the
// whole group (one node, or nodes on one shared switch): NVLS's case; one per node:
// switch_per_node, NVLS-Tree's.
void set_switch_params(Router& router, const std::vector<int>& gpus, CostParams& cp) {
  const Topology& topo = router.topology();
  const int p = static_cast<int>(gpus.size());
  if (p < 2) return;
  // Each rank and the next of its node (the first of its node after the last): one switch per
  // node, every hop GPU -> switch -> GPU through it.
  std::map<int, int> switch_of_node;
  double alpha = 0, bw = INFINITY, efficiency = 1;
  for (int i = 0; i < p; ++i) {
    const int node = topo.node_of_gpu(gpus[i]);
    int j = (i + 1) % p;
    if (topo.node_of_gpu(gpus[j]) != node) {  // wrap to the node's first rank
      j = i;
      while (j > 0 && topo.node_of_gpu(gpus[j - 1]) == node) --j;
    }
    if (j == i) continue;  // the node's only rank: nothing to reduce inside it
    const Path& path = router.path(gpus[i], gpus[j]);
    if (path.links.size() != 2) return;
    const int via = topo.link(path.links[0]).to;
    const auto it = switch_of_node.emplace(node, via).first;
    if (it->second != via || topo.device(via).reduce_efficiency <= 0) return;
    alpha = std::max(alpha, static_cast<double>(path.latency.ps()));
    for (int l : path.links) bw = std::min(bw, topo.link(l).spec.effective().bytes_per_ps());
    efficiency = std::min(efficiency, topo.device(via).reduce_efficiency);
  }
  if (switch_of_node.empty() || !std::isfinite(bw)) return;
  cp.switch_alpha_ps = alpha;
  cp.switch_beta_ps = 1.0 / (bw * efficiency);
  // Each node on a switch of its own, not one switch the whole group shares: NVLS-Tree's case.
  const int first = switch_of_node.begin()->second;
  cp.switch_per_node =
      std::any_of(switch_of_node.begin(), switch_of_node.end(), [&](const auto& e) { return e.second != first; });
}

// CostParams::net_switch_*: the group in node blocks of g on at least two nodes, and every route
// from a rank to the rank of the same local index on another node crossing only fabric switches
// (devices of no node) that reduce, at least one. Routes from each rail's first rank to every
// other node's and back are visited (the reduction tree of a rail spans them).
void set_net_switch_params(Router& router, const std::vector<int>& gpus, int g, CostParams& cp) {
  const Topology& topo = router.topology();
  const int p = static_cast<int>(gpus.size());
  if (g < 1 || p % g != 0 || p / g < 2) return;
  double alpha = 0, bw = INFINITY, efficiency = 1;
  auto visit = [&](int a, int b) -> bool {
    const Path& path = router.path(gpus[static_cast<std::size_t>(a)], gpus[static_cast<std::size_t>(b)]);
    bool fabric = false;
    for (std::size_t i = 0; i + 1 < path.links.size(); ++i) {
      const Device& d = topo.device(topo.link(path.links[i]).to);
      if (d.kind == DeviceKind::Gpu || d.node >= 0) continue;  // in a node: not the fabric's
      if (d.reduce_efficiency <= 0) return false;
      fabric = true;
      efficiency = std::min(efficiency, d.reduce_efficiency);
    }
    alpha = std::max(alpha, static_cast<double>(path.latency.ps()));
    bw = std::min(bw, path.bottleneck.bytes_per_ps());
    return fabric;
  };
  if (!topo.fabric_reduces()) return;
  // Each rail from its first rank to every other node's (one BFS per rail), and back from the
  // last node's.
  for (int l = 0; l < g; ++l) {
    for (int b = l + g; b < p; b += g)
      if (!visit(l, b)) return;
    if (!visit(p - g + l, l)) return;
  }
  if (!std::isfinite(bw)) return;
  cp.net_switch_alpha_ps = alpha;
  cp.net_switch_beta_ps = 1.0 / (bw * efficiency);
  cp.net_switch_efficiency = efficiency;
}
}  // namespace

namespace {
// LL's rate on the group (ProtocolScope): NCCL's llMaxBw for its GPUs and nodes as a fraction
// of its slowest route's rate, and the ring channels NCCL's search would give it.
void set_ll_rate(const Topology& topo, Router& router, const std::vector<int>& gpus, double slowest_bytes_per_ps,
                 CostParams& cp) {
  std::set<int> nodes;
  for (int g : gpus) nodes.insert(topo.node_of_gpu(g));
  const double cap_GBps = nccl_ll_max_bw_GBps(topo.gpu_sm, static_cast<int>(nodes.size()));
  cp.ll_cap_fraction = cap_GBps / (slowest_bytes_per_ps * 1e3);
  const NcclConfig config{.sm = topo.gpu_sm};
  cp.channels = nccl_graph(nccl_shape(topo, router, gpus, topo.gpu_sm), config).channels;
}
}  // namespace

CostParams derive_cost_params(Router& router, const std::vector<int>& gpus, double gamma_ps) {
  const Topology& topo = router.topology();
  CostParams cp;
  cp.gamma_ps = gamma_ps;
  const int p = static_cast<int>(gpus.size());
  double a_all = 0, a_in = 0, a_out = 0;
  double bw_all = INFINITY, bw_in = INFINITY, bw_out = INFINITY;
  bool intra_nvlink = true;  // every intra-node route visited is NVLink only
  std::uint64_t routed = 0;
  auto visit = [&](int i, int j) {
    if (i == j) return;
    budget::tick_work("routing the group's GPU pairs", ++routed);  // --max-seconds; a word on a terminal
    const Path& path = router.path(gpus[i], gpus[j]);
    const double a = static_cast<double>(path.latency.ps());
    const double bw = path.bottleneck.bytes_per_ps();
    a_all = std::max(a_all, a);
    bw_all = std::min(bw_all, bw);
    if (topo.node_of_gpu(gpus[i]) == topo.node_of_gpu(gpus[j])) {
      a_in = std::max(a_in, a);
      bw_in = std::min(bw_in, bw);
      intra_nvlink = intra_nvlink && all_nvlink(topo, path);
    } else {
      a_out = std::max(a_out, a);
      bw_out = std::min(bw_out, bw);
    }
  };
  // Neighbour pairs both ways and root pairs both ways, asked source by source so that the
  // router answers each source's queries from one BFS.
  for (int i = 0; i < p; ++i) visit(0, i);
  for (int i = 0; i < p; ++i) {
    visit(i, (i + 1) % p);
    visit(i, (i + p - 1) % p);
    visit(i, 0);
  }
  // Inter-node pairs the neighbour walk may have missed (hierarchical: same local index).
  const int g = detect_ranks_per_node(topo, gpus);
  if (g > 1 && g < p) {
    visit(0, g);
    const Path& in = router.path(gpus[0], gpus[1]);
    const Path& out = router.path(gpus[0], gpus[static_cast<std::size_t>(g)]);
    cp.shared_uplink = !in.links.empty() && !out.links.empty() && in.links.front() == out.links.front();
  }
  set_switch_params(router, gpus, cp);
  if (g >= 1 && g < p) set_net_switch_params(router, gpus, g, cp);
  // The runtime's protocols: LL128 where the GPUs of a node are joined by NVLink (a group
  // with one GPU per node: where the GPU has NVLink at all).
  cp.protocols = topo.protocols;
  cp.multi_node = std::isfinite(bw_out);
  if (!std::isfinite(bw_in) && p > 0) {
    intra_nvlink = false;
    for (int l : topo.out_links(topo.gpu_device(gpus[0])))
      intra_nvlink = intra_nvlink || topo.link(l).spec.kind == LinkKind::NvLink;
  }
  cp.intra_hop = intra_nvlink ? HopKind::NvLink : HopKind::Pci;
  cp.ll128 = intra_nvlink;
  if (cp.protocols && p >= 2) set_ll_rate(topo, router, gpus, bw_all, cp);
  if (!std::isfinite(bw_all)) bw_all = 1;  // p == 1: no communication
  cp.alpha_ps = a_all;
  cp.beta_ps = 1.0 / bw_all;
  cp.intra_alpha_ps = std::isfinite(bw_in) ? a_in : a_all;
  cp.intra_beta_ps = 1.0 / (std::isfinite(bw_in) ? bw_in : bw_all);
  cp.inter_alpha_ps = std::isfinite(bw_out) ? a_out : a_all;
  cp.inter_beta_ps = 1.0 / (std::isfinite(bw_out) ? bw_out : bw_all);
  cp.inter_route_beta_ps = cp.inter_beta_ps;
  // The inter-node phase of a hierarchical collective runs g rings at once, one per local
  // index, and all of them leave the node through its NICs: each gets at most 1/g of the
  // node's egress (one FDR NIC shared by 4 GPUs on frontera-rtx; a NIC per GPU on DGX).
  if (g > 1 && g < p && std::isfinite(bw_out)) {
    std::vector<double> egress(static_cast<std::size_t>(topo.num_nodes()), 0.0);
    for (const DirLink& l : topo.links()) {
      const int from = topo.device(l.from).node, to = topo.device(l.to).node;
      if (from >= 0 && from != to) egress[static_cast<std::size_t>(from)] += l.spec.effective().bytes_per_ps();
    }
    double share = INFINITY;
    for (int i = 0; i < p; i += g)
      share = std::min(share, egress[static_cast<std::size_t>(topo.node_of_gpu(gpus[i]))] / g);
    if (share > 0 && share < bw_out) cp.inter_beta_ps = 1.0 / share;
  }
  return cp;
}

std::vector<BusiestLink> busiest_links(const Topology& topo, const std::vector<double>& bytes, Time over,
                                       std::size_t n) {
  const double t = std::max<double>(1.0, static_cast<double>(over.ps()));
  std::vector<BusiestLink> used;
  for (std::size_t l = 0; l < bytes.size(); ++l) {
    if (bytes[l] <= 0) continue;
    const double cap = topo.link(static_cast<int>(l)).spec.effective().bytes_per_ps();
    used.push_back({static_cast<int>(l), bytes[l], bytes[l] / (cap * t)});
  }
  std::stable_sort(used.begin(), used.end(),
                   [](const BusiestLink& a, const BusiestLink& b) { return a.utilization > b.utilization; });
  if (used.size() > n) used.resize(n);
  return used;
}

namespace {

// A program's steps over all its ranks: a flow run's work, known before any of it is done.
double rank_steps(const StepProgram& p) {
  double steps = 0;
  for (int r = 0; r < p.ranks(); ++r) steps += p.num_steps(r);
  return steps;
}

// Messages a program has in flight at once when every rank runs a step like rank 0's first.
double concurrent_messages(const StepProgram& p) {
  if (p.ranks() < 1 || p.num_steps(0) < 1) return 0;
  Step s;
  p.step(0, 0, s);
  return static_cast<double>(p.ranks()) * static_cast<double>(s.sends.size());
}

// The flow run of `a` over every group at once (programs as the links see them).
FlowSimResult flow_of(const Topology& topo, Router& router, const Algorithm& a,
                      const std::vector<CollectiveSpec>& specs, const std::vector<CostParams>& params,
                      const std::vector<std::vector<int>>& gpus, const FlowSimOptions& opt) {
  std::vector<std::unique_ptr<StepProgram>> programs;
  std::vector<GroupProgram> groups;
  double steps = 0, concurrent = 0;  // the flow run's work and the messages it solves together
  for (std::size_t i = 0; i < specs.size(); ++i) {
    programs.push_back(a.make_timing ? a.make_timing(specs[i], params[i]) : a.build(specs[i]));
    groups.push_back({gpus[i], programs.back().get(), best_protocol(a, specs[i], params[i]).protocol, a.hop_rows,
                      protocol_scope(params[i], specs[i])});
    steps += rank_steps(*programs.back());
    concurrent += concurrent_messages(*programs.back());
  }
  if (concurrent > kMaxFlowConcurrent)
    throw Error(
        fmt::format("{}: {} on {} ranks keeps {:.3g} messages in flight at once, beyond "
                    "meshsim's limit of {:.3g} (minutes of work and GBs of memory); use {} "
                    "or nccl, or fewer ranks",
                    flag("fidelity", "flow"), a.name, specs.front().ranks * static_cast<double>(specs.size()),
                    concurrent, kMaxFlowConcurrent, flag("fidelity", "formula")));
  if (steps > kMaxFlowRankSteps)
    throw Error(
        fmt::format("{}: {} on {} ranks is {:.3g} rank-steps of routed flows, beyond meshsim's "
                    "limit of {:.3g} (minutes of work); use {} or nccl, or fewer ranks",
                    flag("fidelity", "flow"), a.name, specs.front().ranks * static_cast<double>(specs.size()), steps,
                    kMaxFlowRankSteps, flag("fidelity", "formula")));
  return simulate_flow(topo, router, groups, opt);
}

// `auto` at flow fidelity times, under contention, the closed forms' three favourites and
// ring (the contention-robust reference) when each is cheap to simulate (at most
// kAutoFlowCheckRankSteps rank-steps per group): a closed form cannot see two of an
// algorithm's own pairs sharing a link (recursive halving on a PCIe tree or a GPU ring).
template <class Refusal, class Cheap>
std::vector<const Algorithm*> auto_flow_candidates(const std::vector<RankedAlgorithm>& ranked, Refusal&& refusal,
                                                   Cheap&& cheap) {
  std::vector<const Algorithm*> out;
  if (!cheap(*ranked.front().algorithm)) return out;
  auto add = [&](const Algorithm* a) {
    if (std::find(out.begin(), out.end(), a) != out.end() || refusal(*a) || !cheap(*a)) return;
    out.push_back(a);
  };
  for (std::size_t i = 0; i < ranked.size() && i < 3; ++i) add(ranked[i].algorithm);
  for (const RankedAlgorithm& r : ranked)
    if (r.algorithm->name == "ring") add(r.algorithm);
  return out;
}

// The requests no collective run can take, first failing check reported.
void check_collective_request(const CollectiveRequest& req) {
  if (req.groups.empty() || req.groups.front().empty())
    throw Error(fmt::format("{}: a collective needs at least one group with ranks; use {} with N >= 1", flag("ranks"),
                            flag("ranks", "N")));
  for (const auto& g : req.groups)
    if (static_cast<int>(g.size()) > kMaxGroupRanks)
      throw Error(
          fmt::format("{}: a group of {} ranks exceeds meshsim's limit of {} per collective (every "
                      "neighbour pair is routed); use {} with N <= {}",
                      flag("ranks"), g.size(), kMaxGroupRanks, flag("ranks", "N"), kMaxGroupRanks));
  if (req.bytes < 0) throw Error(flag("bytes") + ": size must be >= 0");
}

// One collective spec per group of the request.
std::vector<CollectiveSpec> group_specs(const Topology& topo, const CollectiveRequest& req) {
  std::vector<CollectiveSpec> specs;
  for (const auto& gpus : req.groups) {
    CollectiveSpec spec;
    spec.kind = req.kind;
    spec.ranks = static_cast<int>(gpus.size());
    spec.bytes = req.bytes;
    spec.root = req.root;
    spec.chunks = req.chunks;
    spec.ranks_per_node = detect_ranks_per_node(topo, gpus);
    spec.alltoall_bytes = req.alltoall_bytes;
    if (spec.root < 0 || spec.root >= spec.ranks)
      throw Error(fmt::format("{}: {} is not a rank of a {}-rank group; use 0..{}", flag("root"), spec.root, spec.ranks,
                              spec.ranks - 1));
    specs.push_back(std::move(spec));
  }
  return specs;
}

// NCCL's tuning model for every group; the slowest group's time.
void nccl_outcome(const Topology& topo, Router& router, const CollectiveRequest& req, CollectiveOutcome& out) {
  if (req.fidelity != Fidelity::Nccl)
    throw Error(
        fmt::format("{}: NCCL's tuning model is its own cost mode with no step program to run at "
                    "fidelity {}; use {} (or leave {} out)",
                    flag("algo", "nccl"), to_string(req.fidelity), flag("fidelity", "nccl"), flag("fidelity")));
  if (req.algorithm.kind == AlgorithmChoice::Kind::Named)
    throw Error(fmt::format("{}: at fidelity nccl NCCL chooses the algorithm itself; use {} or auto",
                            flag("algo", req.algorithm.name), flag("algo", "nccl")));
  for (std::size_t i = 0; i < req.groups.size(); ++i) {
    const NcclShape shape = nccl_shape(topo, router, req.groups[i], req.nccl.sm);
    NcclPrediction pred = nccl_predict(req.kind, req.bytes, shape, req.nccl);
    if (i == 0) {
      out.time = pred.time;
      out.nccl = std::move(pred);
    } else {
      out.time = std::max(out.time, pred.time);
    }
  }
  out.formula_time = out.nccl->time;
}

// A step-program collective (fidelity formula or flow) over every group of the request.
class StepCollective {
 public:
  StepCollective(const Topology& topo, Router& router, const AlgorithmRegistry& registry, const CollectiveRequest& req,
                 std::vector<CollectiveSpec> specs, CollectiveOutcome& out)
      : topo_(topo), router_(router), registry_(registry), req_(req), specs_(std::move(specs)), out_(out) {
    params_.push_back(out.params);
    for (std::size_t i = 1; i < specs_.size(); ++i)
      params_.push_back(derive_cost_params(router, req.groups[i], req.gamma_ps));
  }

  void run() {
    choose_algorithm();
    if (auto why = refusal(*out_.algorithm)) throw Error(*why);
    set_formula();
    if (req_.fidelity == Fidelity::Formula) {
      formula_time();
      return;
    }
    flow_time();
  }

 private:
  // Why `a` cannot time every group, or nullopt.
  std::optional<std::string> refusal(const Algorithm& a) const {
    for (std::size_t i = 0; i < specs_.size(); ++i) {
      if (auto why = a.unsupported(specs_[i]))
        return fmt::format("{}: cannot run {} on {} ranks: {}", flag("algo", a.name), to_string(specs_[i].kind),
                           specs_[i].ranks, *why);
      if (auto why = a.unavailable ? a.unavailable(specs_[i], params_[i]) : std::nullopt)
        return fmt::format("{}: cannot run {} on this group of {}: {}; use another algorithm or auto",
                           flag("algo", a.name), to_string(specs_[i].kind), topo_.name(), *why);
    }
    return std::nullopt;
  }

  // The requested algorithm, or `auto`'s favourite and, at flow fidelity, the candidates
  // worth a flow run.
  void choose_algorithm() {
    if (req_.algorithm.kind == AlgorithmChoice::Kind::Auto) {
      const std::vector<RankedAlgorithm> ranked = rank_algorithms(registry_, out_.spec, out_.params);
      out_.algorithm = ranked.front().algorithm;
      // Worth a flow run: cheap to simulate, and a closed form within 10x the favourite's
      // (a flow run rarely comes out below its own closed form) and well inside meshsim's range.
      const double best_ps = ranked.front().cost_ps;
      auto cheap = [&](const Algorithm& a) {
        const double c = best_protocol(a, out_.spec, out_.params).ps;
        if (&a != ranked.front().algorithm && !(c <= 10 * best_ps && c <= 0.25 * static_cast<double>(kMaxTimePs)))
          return false;
        const auto prog = a.make_timing ? a.make_timing(out_.spec, out_.params) : a.build(out_.spec);
        return rank_steps(*prog) <= kAutoFlowCheckRankSteps &&
               concurrent_messages(*prog) * specs_.size() <= kMaxFlowConcurrent;
      };
      auto refused = [&](const Algorithm& a) { return refusal(a); };
      if (req_.fidelity == Fidelity::Flow) flow_candidates_ = auto_flow_candidates(ranked, refused, cheap);
    } else {
      out_.algorithm = registry_.find(req_.algorithm.name, req_.kind);
      if (out_.algorithm == nullptr) {
        std::vector<std::string> names;
        for (const Algorithm* a : registry_.for_kind(req_.kind)) names.push_back(a->name);
        const std::string hint = did_you_mean(req_.algorithm.name, names);
        throw Error(fmt::format("{}: '{}' is not an algorithm for {}{}; choose one of: auto, {}", flag("algo"),
                                req_.algorithm.name, to_string(req_.kind), hint.empty() ? "" : " (" + hint + ")",
                                fmt::join(names, ", ")));
      }
    }
  }

  // Group 0's closed form under its runtime protocol, and that protocol.
  void set_formula() {
    const ProtocolCost pc = best_protocol(*out_.algorithm, out_.spec, out_.params);
    out_.formula_time = duration_ps(pc.ps, "the collective");
    out_.protocol = pc.protocol;
  }

  // Fidelity formula: the slowest group's closed form.
  void formula_time() {
    out_.time = out_.formula_time;
    for (std::size_t i = 1; i < specs_.size(); ++i)
      out_.time =
          std::max(out_.time, duration_ps(best_protocol(*out_.algorithm, specs_[i], params_[i]).ps, "the collective"));
  }

  // Fidelity flow: every group's routed flows at once; the busiest links.
  void flow_time() {
    FlowSimOptions opt;
    opt.gamma_ps = req_.gamma_ps;
    opt.record = req_.record;
    opt.fast_forward = req_.fast_forward;
    const Algorithm* formula_for = out_.algorithm;
    if (flow_candidates_.size() > 1) {
      // `auto` at flow fidelity: the closed forms' favourites timed under contention; the
      // fastest wins (ties: the closed form's order).
      for (const Algorithm* a : flow_candidates_) {
        FlowSimResult r = flow_of(topo_, router_, *a, specs_, params_, req_.groups, opt);
        if (!out_.flow || r.total < out_.flow->total) {
          out_.algorithm = a;
          out_.flow = std::move(r);
        }
      }
    } else {
      out_.flow = flow_of(topo_, router_, *out_.algorithm, specs_, params_, req_.groups, opt);
    }
    if (out_.algorithm != formula_for) set_formula();  // the flow check chose another algorithm
    out_.time = out_.flow->total;
    std::vector<double> bytes;
    for (const LinkStats& s : out_.flow->link_stats) bytes.push_back(s.bytes);
    out_.top_links = busiest_links(topo_, bytes, out_.time);
    if (!out_.top_links.empty()) out_.busiest = out_.top_links.front();
  }

  const Topology& topo_;
  Router& router_;
  const AlgorithmRegistry& registry_;
  const CollectiveRequest& req_;
  const std::vector<CollectiveSpec> specs_;
  std::vector<CostParams> params_;
  std::vector<const Algorithm*> flow_candidates_;
  CollectiveOutcome& out_;
};

}  // namespace

Fidelity collective_fidelity(const std::string& text, const AlgorithmChoice& algorithm, const std::string& field) {
  return parse_fidelity(text.empty() ? (algorithm.kind == AlgorithmChoice::Kind::Nccl ? "nccl" : "flow") : text, field);
}

CollectiveOutcome run_collective(const Topology& topo, Router& router, const AlgorithmRegistry& registry,
                                 const CollectiveRequest& req) {
  check_collective_request(req);
  CollectiveOutcome out;
  std::vector<CollectiveSpec> specs = group_specs(topo, req);
  out.spec = specs.front();
  out.params = derive_cost_params(router, req.groups.front(), req.gamma_ps);
  if (req.fidelity == Fidelity::Nccl || req.algorithm.kind == AlgorithmChoice::Kind::Nccl) {
    nccl_outcome(topo, router, req, out);
    return out;
  }
  StepCollective(topo, router, registry, req, std::move(specs), out).run();
  return out;
}

}  // namespace meshsim
