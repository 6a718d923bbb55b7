// Comm: a process group over the cpu backend's Transport, for the numerics tests.
//
// A Comm names a sub-group of the transport's ranks (members[i] = transport rank of group
// rank i). Its collectives build the registered step program for the group
// (AlgorithmRegistry::builtin(): ring all-reduce / all-gather / reduce-scatter, binomial
// broadcast / reduce, pairwise all-to-all with uneven sizes) and run it for real with
// run_collective_cpu on that sub-group, so the numerics exercise the same step programs the
// simulator times. Point-to-point send/recv/sendrecv (pipelines, ring attention) go straight
// to the transport, addressed by group rank.
//
// Every member must call the same collectives in the same order (as with MPI/NCCL);
// messages between a pair of ranks match in FIFO order across all groups sharing them.
// A group of one rank does no communication. Sizes that the layout needs to divide evenly
// (all-gather, reduce-scatter) are checked and reported as Error.
//
//   Comm tp(transport, {0, 1}, registry);          // group of transport ranks 0 and 1
//   tp.allreduce(partial);                         // sum over the group, in place
//   std::vector<float> full = tp.allgather(shard); // group-rank order
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/transport.h"
#include "schedule/collective.h"

namespace meshsim::numerics {

class Comm {
 public:
  // members: transport ranks in group-rank order; must contain transport.rank().
  Comm(cpu::Transport& transport, std::vector<int> members, const AlgorithmRegistry& registry);

  // A group of some of this group's ranks (group ranks, in the new group's order) on the
  // same transport; the calling rank must be one of them.
  Comm subgroup(const std::vector<int>& group_ranks) const;

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(members_.size()); }
  const std::vector<int>& members() const { return members_; }

  // Sum, in place. ReduceIn::Bf16: bf16 data summed as NCCL sums it (collective.h).
  void allreduce(std::vector<float>& data, ReduceIn in = ReduceIn::Float32);
  void allreduce(float* data, std::int64_t n, ReduceIn in = ReduceIn::Float32);
  // The group's sum of one value (a loss, a count).
  float allreduce(float value) {
    allreduce(&value, 1);
    return value;
  }
  // Elementwise max over the group (an all-gather, then a local max: step programs sum only).
  void allreduce_max(float* data, std::int64_t n);
  std::vector<float> allgather(const std::vector<float>& mine);  // equal sizes; group order
  // full: size() equal slices; returns this rank's slice of the sum.
  std::vector<float> reducescatter(const std::vector<float>& full, ReduceIn in = ReduceIn::Float32);
  void broadcast(std::vector<float>& data, int root);
  // Sum lands on root; others' data undefined. ReduceIn::Bf16 as allreduce.
  void reduce(std::vector<float>& data, int root, ReduceIn in = ReduceIn::Float32);
  // Uneven all-to-all: send holds blocks for group ranks 0..p-1 of send_counts[d] floats;
  // returns the received blocks in source order (recv_counts filled). The count matrix is
  // exchanged first with an all-gather.
  std::vector<float> alltoall(const std::vector<float>& send, const std::vector<std::int64_t>& send_counts,
                              std::vector<std::int64_t>& recv_counts);

  void send(int peer, const float* data, std::int64_t n);
  void recv(int peer, float* data, std::int64_t n);
  // Send to one peer and receive from another (or the same) at once (a ring step).
  void sendrecv(int to, const float* send, std::int64_t send_n, int from, float* recv, std::int64_t recv_n);

 private:
  void run(const CollectiveSpec& spec, const char* algo, std::vector<float>& buffer, ReduceIn in = ReduceIn::Float32);

  cpu::Transport& transport_;
  std::vector<int> members_;
  const AlgorithmRegistry& registry_;
  int rank_ = -1;
};

}  // namespace meshsim::numerics
