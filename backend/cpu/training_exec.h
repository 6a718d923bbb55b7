// The cpu backend for training schedules: this process is one rank of the device mesh and
// runs its pipeline stage's op list for real, op for op, with the ids the simulator uses.
//
//   - compute ops run CPU kernels of the op's shape (cpu_compute.h: GEMMs through BLAS,
//     blocked attention, memory-bound passes of the op's byte count), in float32;
//   - collectives run their step programs (the op's algorithm, resolved before the run
//     with resolve_algorithms) over TCP on the rank's group along the op's axis; a
//     send/recv collective along an axis is the ring shift of context parallelism;
//   - pipeline Send/Recv ops move op.bytes to the peer stage's rank with the same other
//     coordinates; a Recv ends when its message has arrived.
//
// Streams run concurrently as the schedule says: one thread per stream, each running its
// ops in list order after their dependencies, and each comm stream with its own Transport
// (its own connections, so streams never reorder each other's messages). Pipeline
// messages go over one Transport per sending stage, read on the receiving rank by an
// inbox thread per source stage into per-message buffers, so a Send never waits for the
// receiver to reach its Recv (the simulator's semantics: a Recv ends when its Send has
// delivered). The data are seeded values, not a model: training numerics are tested per
// strategy elsewhere; this executor is for timing.
//
// Failures: the first error on any thread closes every transport of this rank (peers then
// fail naming it) and is rethrown by execute(); no thread is left waiting.
//
//   TrainingExecutor ex(env.rank, world, store, placement, {.token = env.token});
//   Trace mine = ex.execute(schedule);   // this rank's events: role = its stage, op ids
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "backend/launch/rendezvous.h"
#include "schedule/collective.h"
#include "schedule/executor.h"
#include "topology/placement.h"

namespace meshsim::cpu {

struct TrainingExecOptions {
  std::string token;
  std::string bind_addr = "127.0.0.1";
  std::chrono::milliseconds timeout{120000};
  std::uint64_t seed = 1;
};

class TrainingExecutor : public Executor {
 public:
  // rank: this process, which is GPU `rank` of the placement's topology (mesh rank r runs on
  // process placement.gpu_of(r)); the placement must use GPUs 0..world-1 exactly.
  TrainingExecutor(int rank, int world, launch::RendezvousClient& store, const Placement& placement,
                   const AlgorithmRegistry& registry, TrainingExecOptions options);
  std::string name() const override { return "cpu"; }
  // Throws Error for a collective op without an algorithm (resolve them first), a layout
  // that does not match the running ranks, or any failure of this rank or a peer.
  Trace execute(const Schedule& schedule) override;

 private:
  int rank_, world_;
  launch::RendezvousClient& store_;
  const Placement& placement_;
  const AlgorithmRegistry& registry_;
  TrainingExecOptions opt_;
};

}  // namespace meshsim::cpu
