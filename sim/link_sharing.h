// Contention between the ops of an iteration at flow fidelity (docs/math.md section 2).
//
// The flow fidelity times each distinct collective (and pipeline send) once, alone, with
// every group of its stage running at once on the routed links. That run gives the op's
// time alone, T, and the bytes it put on each link, B_l. In the iteration, ops of different
// streams and stages overlap: a DP bucket's all-reduce, a TP all-reduce, a pipeline send.
// LinkSharing lets them share the links as a fluid model would: each op in flight loads
// link l at u_l = B_l / T while it runs at full speed, and runs at a speed x in (0, 1]
// (the fraction of its alone rate), chosen max-min fairly over the links it shares:
//
//   for every link l:  sum over ops i in flight of x_i * u_il  <=  capacity_l
//
// All ops grow x together (progressive filling); a link that fills fixes the speed of its
// ops; an op is never faster than alone (x <= 1). Links whose total full-speed load fits
// never bind, so ops that share only such links do not slow each other, and an op that
// overlaps nothing finishes after exactly T. Speeds change only when an op starts or ends.
//
//   LinkSharing s(topo);
//   int p = s.add_profile(alone, link_stats);        // once per distinct timing
//   s.start(op, p, now, changed);                    // changed: ops whose end moved, new ends
//   s.finish(op, now, changed);                      // op has drained
//   s.link_usage()                                   // per link: bytes, peak load
//
// What it does not see: the order of an op's steps (a link loaded only in one phase of the
// op is charged its average over the whole op), and latency-bound ops are slowed like
// bandwidth-bound ones when a link they touch is full.
// Links that are alike are kept once: a class of links is links of one capacity that every
// profile loads alike (the same load and bytes on each, or none), so every link of a class
// has the same sharing state at every instant. The TP ops of a stage touch thousands of
// NVLink links that fall into a handful of classes, so an op's start and end walk its
// classes, not its links. Classes are refined as profiles are added (a new profile that
// loads a class's links differently splits it); each class is walked where its first link
// was, so every sum is taken in the same order as link by link and the speeds, ends and
// usage are the same to the bit.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/units.h"
#include "sim/flow_network.h"
#include "topology/topology.h"

namespace meshsim {

// What one link carried over the iteration.
struct LinkUsage {
  double bytes = 0;  // bytes carried
  double peak = 0;   // highest load at any instant, as a fraction of its achievable rate
};

// A change of one op's speed: from `at`, op `op` runs at `speed` (0 once it has drained).
struct SpeedChange {
  Time at;
  int op = 0;
  double speed = 0;
};

class LinkSharing {
 public:
  explicit LinkSharing(const Topology& topo);

  // A distinct timing: its duration alone and the bytes its run put on the links it used
  // (ascending by link). Returns its profile id.
  int add_profile(Time alone, const std::vector<LinkUse>& used);
  // The same from every link's statistics, indexed by link.
  int add_profile(Time alone, const std::vector<LinkStats>& stats);

  // Op `op` (any non-negative id, unique among ops in flight) of profile `profile` starts
  // now. `changed` receives every op in flight whose end time moved (the new op included),
  // with its new end.
  void start(int op, int profile, Time now, std::vector<std::pair<int, Time>>& changed);
  // Op `op` has reached its end; the ops it slowed may speed up (`changed` as for start).
  void finish(int op, Time now, std::vector<std::pair<int, Time>>& changed);

  // Per link (indexed by link id).
  std::vector<LinkUsage> link_usage() const;
  // Every speed change, in the order they happened (for counter tracks of link load).
  const std::vector<SpeedChange>& speed_changes() const { return changes_; }
  // The load (bytes per ps at full speed) that profile p puts on link l, 0 if none.
  double load(int profile, int link) const;
  int profile_of(int op) const;
  // Classes of alike links (the header's note); for tests and benchmarks.
  int link_classes() const { return static_cast<int>(cap_.size()); }
  // Ops that ran slower than alone at some point, and re-solves of the sharing.
  std::int64_t slowed_ops() const { return slowed_ops_; }
  std::int64_t solves() const { return solves_; }

 private:
  // A profile's load on one class of links: on each of its links, u bytes per ps at full
  // speed and b bytes carried over the op.
  struct Entry {
    int cls = 0;
    double u = 0, b = 0;
  };
  struct Profile {
    double alone_ps = 0;
    std::vector<Entry> entries;                 // every class it carries bytes on, by first link
    std::vector<std::pair<int, double>> loads;  // (class, u) of the entries with u > 0, same order
  };
  struct Active {
    int profile = -1;
    double work_ps = 0;  // alone-time still to do
    double speed = 0;
    Time since;  // when work_ps was last brought up to date
    bool slowed = false;
    bool active = false;
  };
  // Its load at full speed is over its capacity (by more than a relative 1e-9).
  bool overloaded(int cls) const {
    return full_load_[static_cast<std::size_t>(cls)] > limit_[static_cast<std::size_t>(cls)];
  }
  // Puts the op's load on its links; whether any of them is then over capacity.
  bool add_load(int op);
  // Takes a finished op off its links (speed 0, load off); the ops it shared a full link with.
  std::vector<int> remove(int op, Time now);
  // Ops coupled to `seeds` through overloaded links, in a deterministic order.
  std::vector<int> component(const std::vector<int>& seeds);
  void resolve(const std::vector<int>& ops, Time now, std::vector<std::pair<int, Time>>& changed, int started);
  std::vector<double> fill(const std::vector<int>& ops);
  void set_speed(int op, double speed, Time now);
  bool overloaded_any(int op) const;
  void record_peaks(const std::vector<int>& ops);
  // A new class with the state of `cls` (its links are moved in by the caller).
  int clone_class(int cls);

  // Per link: its class. Per class (indexed by class id): the state every link of it shares.
  std::vector<int> class_of_;
  std::vector<std::vector<int>> members_;  // the links of each class, ascending
  std::vector<double> cap_;                // achievable bytes per ps of each of its links
  std::vector<double> limit_;              // cap_ x (1 + tolerance): a load above it is over capacity
  std::vector<double> full_load_;          // sum of u_l of the ops in flight on each of its links
  std::vector<double> cur_load_;           // sum of speed * u_l of the ops in flight on each of its links
  std::vector<std::vector<int>> on_link_;
  std::vector<Profile> profiles_;
  std::vector<Active> ops_;
  std::vector<LinkUsage> usage_;  // per class
  std::vector<SpeedChange> changes_;
  std::vector<int> mark_;  // scratch: BFS marks per op
  std::vector<int> slot_;  // scratch: a full class's index in fill(), -1 elsewhere
  int epoch_ = 0;
  std::int64_t slowed_ops_ = 0, solves_ = 0;
};

}  // namespace meshsim
