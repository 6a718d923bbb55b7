// The cpu backend behind the Executor interface: this process is one rank; the schedule's
// collectives run their step programs for real over the Transport, on float32 data from a
// seeded generator, and the result is checked against the serial reference executor.
//
// So far the cpu backend runs collective workloads (schedule/plan.h plan_collectives:
// every op a collective over the "rank" axis, or over one axis of a workload mesh with the
// groups given in the options); training schedules (compute kernels, pipeline sends) are
// refused with an Error saying so.
//
//   RendezvousClient store(...);  StoreDirectory dir(store);
//   Transport t(env.rank, env.world_size, dir, {.token = env.token});
//   CpuExecutor ex(t, AlgorithmRegistry::builtin(), {});
//   Trace mine = ex.execute(plan_collectives(w));      // this rank's events (rank set)
//   ex.checks()                                          // numerics per op
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/transport.h"
#include "backend/launch/rendezvous.h"
#include "schedule/collective.h"
#include "schedule/executor.h"

namespace meshsim::cpu {

// Address exchange through the rendezvous store: keys "<prefix><rank>". Several transports
// of one job (one per comm stream, say) use different prefixes.
class StoreDirectory : public PeerDirectory {
 public:
  explicit StoreDirectory(launch::RendezvousClient& store, std::string prefix = "addr/")
      : store_(store), prefix_(std::move(prefix)) {}
  void publish(int rank, const std::string& host_port) override;
  std::string lookup(int rank, std::chrono::milliseconds timeout) override;

 private:
  launch::RendezvousClient& store_;
  std::string prefix_;
};

struct CpuExecutorOptions {
  std::uint64_t seed = 1;
  // Check every op's result against run_reference when bytes x ranks is at most this
  // (the reference holds every rank's buffer); larger ops are not checked.
  std::int64_t check_limit_bytes = 256LL << 20;
  // Process groups per mesh axis, as transport ranks (Placement::groups_along with one
  // rank per GPU): a collective on axis A runs in every group of groups[A] at once, this
  // rank in the one it belongs to. Axis "rank" needs no entry (every rank, in order).
  std::map<MeshAxis, std::vector<std::vector<int>>> groups;
};

struct NumericsCheck {
  int op = 0;
  bool checked = false;
  double max_abs_error = 0;  // against the reference executor (bit-identical expected: 0)
};

class CpuExecutor : public Executor {
 public:
  CpuExecutor(Transport& transport, const AlgorithmRegistry& registry, CpuExecutorOptions options);
  std::string name() const override { return "cpu"; }
  // Runs role 0's ops in order; times are from a common start, and every op begins after
  // a barrier of all ranks (so one rank's numerics check of the previous op does not
  // count in the next op's time). Throws Error for ops the cpu backend cannot run yet.
  Trace execute(const Schedule& schedule) override;
  const std::vector<NumericsCheck>& checks() const { return checks_; }

 private:
  Transport& t_;
  const AlgorithmRegistry& registry_;
  CpuExecutorOptions opt_;
  std::vector<NumericsCheck> checks_;
};

// Rank `rank`'s input for a collective of `spec` (float32, deterministic in seed, rank, op).
std::vector<float> seeded_input(const CollectiveSpec& spec, int rank, std::uint64_t seed, int op);

}  // namespace meshsim::cpu
