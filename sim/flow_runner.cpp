// The flow runner (sim/collective_sim.h: simulate_flow): step programs of several groups run
// on one FlowNetwork, events on the engine, with the steady-state fast-forward.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <unordered_map>

#include "core/error.h"
#include "sim/collective_sim.h"
#include "sim/engine.h"

namespace meshsim {

namespace {

constexpr std::uint32_t kDeliver = 1;
constexpr std::uint32_t kStepDone = 2;
constexpr std::uint32_t kStart = 3;  // a group's launch is over: its ranks start

// Runs step programs of several groups on one FlowNetwork. See step semantics in
// schedule/collective.h: a send completes when its bytes have drained from the links, its
// receive a hop latency later; a step ends when all of its sends have drained and all of
// its receives have arrived (plus gamma * reduced bytes).
class Runner : public EventHandler, public FlowListener {
 public:
  Runner(const Topology& topo, Router& router, const std::vector<GroupProgram>& groups, const FlowSimOptions& options)
      : topo_(topo),
        router_(router),
        groups_(groups),
        options_(options),
        net_(engine_, topo, *this, FlowNetwork::kRecordFlows, options.scratch) {
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
    for (const auto& g : groups_) shape_period_ = std::max(shape_period_, g.program->shape_period());
    MESHSIM_ASSERT(shape_period_ >= 1 && shape_period_ <= 2);
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
    res.used_links = net_.used_links();
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
    PairState* last_send_pair = nullptr;  // to last_peer (pairs_ never moves its entries)
    int last_recv_peer = -1;
    PairState* last_recv_pair = nullptr;  // from last_recv_peer
    // Fast-forward bookkeeping: start times of the last 8 steps (ring buffer) and the
    // run of same-shape steps the current step belongs to.
    std::array<Time, 8> starts{};
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
        if (st.last_recv_peer != t.peer) {
          st.last_recv_peer = t.peer;
          st.last_recv_pair = &pair(base_[g] + t.peer, slot);
        }
        PairState& p = *st.last_recv_pair;
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

  static Time start_of(const RankState& st, int step) { return st.starts[static_cast<std::size_t>(step % 8)]; }

  void note_step_start(int slot, int r, const GroupProgram& gp) {
    RankState& st = ranks_[slot];
    st.starts[static_cast<std::size_t>(st.step % 8)] = st.start;
    if (st.step >= st.run_end) {
      st.run_begin = st.step;
      st.run_end = gp.program->same_shape_until(r, st.step);
    }
    // Rank 0 of group 0 paces the checks: every 8th period inside a long run.
    const int p = shape_period_;
    if (slot == 0 && st.step - st.run_begin >= 4 * p - 1 && st.run_end - st.step > 8 * p && st.step % (8 * p) == 0)
      check_pending_ = true;
  }

  // Called at the end of an instant (all rates solved). A period is shape_period_ steps (the
  // programs' shapes repeat after that many). If every rank is inside a run of same-shape
  // steps and each of its last 3 periods' steps started exactly `period` after the step one
  // period before, the system repeats itself each period: jump K periods ahead, shifting all
  // pending events and flow clocks by K*period and crediting the skipped messages and bytes.
  void try_fast_forward() {
    const int p = shape_period_;
    const RankState& lead = ranks_[0];
    const Time period = start_of(lead, lead.step) - start_of(lead, lead.step - p);
    if (period <= Time{}) return;
    int k = INT32_MAX;
    for (std::size_t slot = 0; slot < ranks_.size(); ++slot) {
      const RankState& st = ranks_[slot];
      if (st.step - st.run_begin < 4 * p - 1 || st.step >= st.run_end) return;
      for (int i = 0; i < 3 * p; ++i)
        if (start_of(st, st.step - i) - start_of(st, st.step - i - p) != period) return;
      k = std::min(k, (st.run_end - st.step - 2 * p) / p);  // leave the run's last steps to simulate
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
      for (int i = 0; i < p; ++i) {
        scratch_.clear();
        gp.program->step(r, st.step + i, scratch_);  // the shape of every p-th skipped step from here
        for (const Transfer& t : scratch_.sends) {
          const int dst_slot = base_[g] + t.peer;
          pair(static_cast<int>(slot), dst_slot).arrived += k;
          net_.add_bytes(router_.path(gp.gpus[r], gp.gpus[t.peer]).links,
                         static_cast<double>(wire_bytes(g, t.bytes)) * k);
          messages_ += static_cast<std::uint64_t>(k);
        }
        for (const Transfer& t : scratch_.recvs) pair(base_[g] + t.peer, static_cast<int>(slot)).posted += k;
      }
      st.step += k * p;
      st.start += delta;
      for (Time& t : st.starts) t += delta;
    }
    skipped_steps_ += static_cast<std::uint64_t>(k) * static_cast<std::uint64_t>(p);
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
      st.last_send_pair = &pair(slot, dst_slot);
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
    m.pair = st.last_send_pair;
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
  int shape_period_ = 1;  // the largest of the programs' shape_period()
  std::uint64_t skipped_steps_ = 0;
};

}  // namespace

FlowSimResult simulate_flow(const Topology& topo, Router& router, const std::vector<GroupProgram>& groups,
                            const FlowSimOptions& options) {
  Runner runner(topo, router, groups, options);
  return runner.run();
}

}  // namespace meshsim
