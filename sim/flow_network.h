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
#pragma once

#include <cstdint>
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

// Busy interval of a link (recorded only when tracing).
struct LinkInterval {
  int link;
  Time begin, end;
  int flows;  // concurrent flows during the interval
};

class FlowNetwork : public EventHandler {
 public:
  FlowNetwork(Engine& engine, const Topology& topo, FlowListener& listener);
  // Starts a flow now. `links` must stay valid until the flow drains (Router paths do).
  void start(std::span<const int> links, Bytes bytes, std::uint64_t tag);
  void handle(const Event& e) override;
  void end_of_instant(Time now) override;

  const std::vector<LinkStats>& link_stats() const { return stats_; }
  // Fast-forward: every active flow's clock moves `delta` later (its pending drain event
  // is shifted by Engine::shift_pending), and skipped periods' bytes are added.
  void shift(Time delta);
  void add_bytes(std::span<const int> links, double bytes);
  void record_intervals(bool on) { record_ = on; }
  const std::vector<LinkInterval>& intervals() const { return intervals_; }
  std::size_t active_flows() const { return active_; }
  std::uint64_t solves() const { return solves_; }

 private:
  struct Flow {
    std::span<const int> links;
    double remaining = 0;  // bytes left at time `last`
    double rate = 0;       // bytes per ps
    Time last;
    std::uint64_t tag = 0;
    std::uint32_t version = 0;
    bool active = false;
    bool fresh = false;      // started this instant, rate not yet set
    std::uint64_t mark = 0;  // the component (solve_component call) that last reached it
  };
  void mark_dirty(std::span<const int> links);
  void remove_from_links(std::uint32_t id);
  void set_link_count(int link, int count, Time now);
  void solve_component(std::uint32_t seed_link, Time now);

  Engine& engine_;
  FlowListener& listener_;
  MaxMinSolver solver_;
  std::vector<Flow> flows_;
  std::vector<std::uint32_t> free_;
  std::vector<std::vector<std::uint32_t>> on_link_;  // flow ids per link
  std::vector<std::uint32_t> link_mark_;
  std::vector<int> dirty_;
  std::vector<char> is_dirty_;
  std::uint32_t epoch_ = 0;
  std::uint64_t component_ = 0;  // solve_component calls so far
  std::size_t active_ = 0;
  std::uint64_t solves_ = 0;
  // statistics
  std::vector<LinkStats> stats_;
  std::vector<Time> segment_since_;
  bool record_ = false;
  std::vector<LinkInterval> intervals_;
  // scratch
  std::vector<std::uint32_t> comp_flows_;
  std::vector<int> comp_links_;
  std::vector<std::span<const int>> comp_paths_;  // into comp_path_links_
  std::vector<int> comp_path_links_;
  std::vector<double> rates_;
};

}  // namespace meshsim
