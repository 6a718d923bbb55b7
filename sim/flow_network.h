// The `flow` fidelity network model: every message is a flow on its routed path.
//
// Concurrent flows share each directed link max-min fairly (MaxMinSolver). A message of
// n bytes drains at its current rate; rates are recomputed at the end of each instant in
// which flows started or finished, and only for the connected component of flows that
// share links with them (flows on disjoint links keep their rates and their events).
// When a flow has drained, the owner is told; the owner adds the path's latency to get
// the delivery time (alpha + n*beta for a lone message, docs/math.md section 2).
//
//   FlowNetwork net(engine, topo, listener);
//   net.start(path.links, bytes, /*tag=*/msg_id);   // listener->flow_drained(tag, t) later
//
// Link statistics (bytes carried, peak concurrent flows) feed the "busiest link" report.
//
// The per-link state (every link's flow list, counters, statistics, solve history and the
// max-min solver) lives in a FlowNetwork::Scratch sized to the fabric. A simulation that runs
// many flow runs on one large fabric (a training iteration times each of its distinct
// collectives alone: dozens of runs on 1.2 million links at 100k GPUs) builds one Scratch and
// hands it to every network; a network returns the links it touched to their empty state when
// it ends, so a run costs what it touches, not the size of the fabric. Without one, a network
// builds its own.
//
// A component of at least kRecordFlows flows keeps a record of its solve (its rounds, each
// flow's round, each link's remaining capacity after each round). In an instant where
// flows only left (none started), a record that lost flows is resumed from the earliest
// round of a leaver instead of solved again (sim/maxmin.h, Resuming): an all-to-all's
// drains, where the flows that finish first are the fastest, fixed in the last rounds,
// re-solve a few rounds instead of the whole component. The rates are the same bits a
// full solve gives (FlowNetwork.ResumedSolvesEqualFullSolves).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "sim/engine.h"
#include "sim/maxmin.h"
#include "topology/topology.h"

namespace meshsim {

class FlowListener {
 public:
  virtual ~FlowListener() = default;
  // The flow has left the network; the listener may start new flows from here (rates are
  // solved at the end of the instant).
  virtual void flow_drained(std::uint64_t tag, Time now) = 0;
};

struct LinkStats {
  double bytes = 0;    // bytes carried
  int peak_flows = 0;  // most concurrent flows seen
};

// A link a flow run put flows on, with what it carried. A run's list is ascending by link;
// every other link of the fabric carried nothing.
struct LinkUse {
  int link = 0;
  LinkStats stats;
};
// The statistics of `link` in an ascending list (zero where the list lacks it).
LinkStats stats_of(const std::vector<LinkUse>& used, int link);

// Busy interval of a link (recorded only when tracing).
struct LinkInterval {
  int link;
  Time begin, end;
  int flows;  // concurrent flows during the interval
};

class FlowNetwork : public EventHandler {
 public:
  // Components of at least `record_flows` flows keep a record (see above); tests compare
  // runs that keep none.
  static constexpr std::size_t kRecordFlows = 64;
  class Scratch;
  FlowNetwork(Engine& engine, const Topology& topo, FlowListener& listener, std::size_t record_flows = kRecordFlows,
              Scratch* scratch = nullptr);
  ~FlowNetwork() override;
  FlowNetwork(const FlowNetwork&) = delete;
  FlowNetwork& operator=(const FlowNetwork&) = delete;
  // Starts a flow now. `links` must stay valid until the flow drains (Router paths do).
  void start(std::span<const int> links, Bytes bytes, std::uint64_t tag);
  void handle(const Event& e) override;
  void end_of_instant(Time now) override;

  // Every link's statistics, indexed by link (valid while the network lives).
  const std::vector<LinkStats>& link_stats() const;
  // The links the run put flows or bytes on, ascending, with their statistics.
  std::vector<LinkUse> used_links() const;
  // Fast-forward: every active flow's clock moves `delta` later (its pending drain event
  // is shifted by Engine::shift_pending), and skipped periods' bytes are added.
  void shift(Time delta);
  void add_bytes(std::span<const int> links, double bytes);
  void record_intervals(bool on) { record_ = on; }
  const std::vector<LinkInterval>& intervals() const { return intervals_; }
  std::size_t active_flows() const { return active_; }
  std::uint64_t solves() const { return solves_; }  // full solves and resumes
  std::uint64_t resumes() const { return resumes_; }

 private:
  struct Flow {
    std::span<const int> links;
    double remaining = 0;  // bytes left at time `last`
    double rate = 0;       // bytes per ps
    Time last;
    std::uint64_t tag = 0;
    std::uint32_t version = 0;
    std::uint32_t gen = 0;  // starts in this slot so far (tells a link's stale entries apart)
    bool active = false;
    bool fresh = false;        // started this instant, rate not yet set
    std::uint64_t mark = 0;    // the component (solve_component call) that last reached it
    std::int32_t record = -1;  // the record its rate comes from; -1: solved without one
    std::int32_t round = 0;    // its round in that record
  };
  // A kept solve (its links' remaining capacities are in history_). Flows of round j:
  // fixed[round_begin[j] .. round_begin[j + 1]); entries whose flow has since drained or
  // moved to another record are skipped (the flow's record is no longer this one).
  struct Record {
    std::vector<std::uint32_t> round_begin;
    std::vector<std::uint32_t> fixed;
    std::size_t live = 0;                       // flows whose rate it holds
    int resume_from = -1;                       // earliest round of a flow drained this instant; -1: none
    std::vector<std::span<const int>> drained;  // the links of those flows
  };
  void mark_dirty(std::span<const int> links);
  void remove_from_links(std::uint32_t id);
  void set_link_count(int link, int count, Time now);
  void solve_component(std::uint32_t seed_link, Time now);
  void resume(int record, Time now);
  void set_rate(std::uint32_t id, double rate, Time now);
  // Records `log` (a fill over comp_flows_ from round `first_round`) into record `r`.
  void keep(int r, const FillLog& log, int first_round);
  int new_record();
  void release_if_empty(int record);
  void leave_record(std::uint32_t id);
  void gather_paths();  // comp_flows_' paths into comp_paths_

  // Marks a new epoch for link_mark (clears the marks when the counter wraps).
  void next_epoch();

  Engine& engine_;
  FlowListener& listener_;
  std::unique_ptr<Scratch> own_;  // when no scratch was handed in
  Scratch& s_;                    // per-link state: solver, on_link, live, link_mark, ... (below)
  std::vector<Flow> flows_;
  std::vector<std::uint32_t> free_;
  // Flows per link: (id, gen) entries, left in place when a flow drains and dropped when a
  // link's list is more than half stale; live_[l] counts the flows really on it.
  struct OnLink {
    std::uint32_t id, gen;
  };
  bool current(OnLink e) const { return flows_[e.id].active && flows_[e.id].gen == e.gen; }
  std::vector<int> dirty_;
  std::uint64_t component_ = 0;  // solve_component calls so far
  std::size_t active_ = 0;
  std::uint64_t solves_ = 0;
  bool record_ = false;
  std::vector<LinkInterval> intervals_;
  // scratch
  std::vector<std::uint32_t> comp_flows_;
  std::vector<int> comp_links_;
  std::vector<std::span<const int>> comp_paths_;  // into comp_path_links_
  std::vector<int> comp_path_links_;
  std::vector<double> rates_;
  // records
  std::size_t record_flows_;
  std::uint64_t resumes_ = 0;
  std::vector<Record> records_;
  std::vector<int> free_records_;
  std::vector<int> drained_records_;  // records that lost flows this instant
  bool started_ = false;              // a flow started this instant
  FillLog log_;
  std::vector<LinkRem> start_;
  std::vector<std::uint32_t> fill_at_;
};

class FlowNetwork::Scratch {
 public:
  explicit Scratch(const Topology& topo);

 private:
  friend class FlowNetwork;
  const Topology& topo;
  bool in_use = false;  // by one network at a time
  MaxMinSolver solver;
  std::vector<std::vector<OnLink>> on_link;  // flows per link (see OnLink)
  std::vector<int> live;                     // flows really on each link
  std::vector<std::uint32_t> link_mark;      // == epoch: reached in this search
  std::uint32_t epoch = 0;
  std::vector<char> is_dirty;
  std::vector<LinkStats> stats;
  std::vector<Time> segment_since;
  std::vector<std::vector<LinkRem>> history;  // per link: remaining capacity after each round of its record
  std::vector<char> is_touched;
  std::vector<int> touched;  // links this run put flows or bytes on, in first-use order
  void touch(int l) {
    if (!is_touched[l]) {
      is_touched[l] = 1;
      touched.push_back(l);
    }
  }
};

}  // namespace meshsim
