#include "backend/cpu/numerics/comm.h"

#include <fmt/format.h>

#include <algorithm>

#include "backend/cpu/collective_exec.h"
#include "core/error.h"

namespace meshsim::numerics {

Comm::Comm(cpu::Transport& transport, std::vector<int> members, const AlgorithmRegistry& registry)
    : transport_(transport), members_(std::move(members)), registry_(registry) {
  for (std::size_t i = 0; i < members_.size(); ++i) {
    if (members_[i] < 0 || members_[i] >= transport.world())
      throw Error(fmt::format("Comm: member {} is not a transport rank (world {})", members_[i], transport.world()));
    if (members_[i] == transport.rank()) rank_ = static_cast<int>(i);
  }
  if (rank_ < 0)
    throw Error(fmt::format("Comm: transport rank {} is not a member of the group; build groups it belongs to",
                            transport.rank()));
}

Comm Comm::subgroup(const std::vector<int>& group_ranks) const {
  std::vector<int> m;
  for (int g : group_ranks) m.push_back(members_.at(g));
  return Comm(transport_, std::move(m), registry_);
}

void Comm::run(const CollectiveSpec& spec, const char* algo, std::vector<float>& buffer, ReduceIn in) {
  const Algorithm* a = registry_.find(algo, spec.kind);
  if (!a) throw Error(fmt::format("Comm: no algorithm '{}' for {} in the registry", algo, to_string(spec.kind)));
  auto prog = a->build(spec);
  cpu::run_collective_cpu(transport_, *prog, spec, buffer, members_, in);
}

namespace {
CollectiveSpec spec_for(CollKind kind, int ranks, std::int64_t floats, int root = 0) {
  CollectiveSpec s;
  s.kind = kind;
  s.ranks = ranks;
  s.bytes = floats * 4;
  s.root = root;
  s.element_bytes = 4;
  return s;
}
}  // namespace

void Comm::allreduce(std::vector<float>& data, ReduceIn in) {
  if (size() == 1 || data.empty()) return;
  run(spec_for(CollKind::AllReduce, size(), std::int64_t(data.size())), "ring", data, in);
}

void Comm::allreduce(float* data, std::int64_t n, ReduceIn in) {
  if (size() == 1 || n == 0) return;
  std::vector<float> buf(data, data + n);
  allreduce(buf, in);
  std::copy(buf.begin(), buf.end(), data);
}

void Comm::allreduce_max(float* data, std::int64_t n) {
  if (size() == 1 || n == 0) return;
  const std::vector<float> all = allgather(std::vector<float>(data, data + n));
  for (int r = 0; r < size(); ++r)
    for (std::int64_t i = 0; i < n; ++i) data[i] = std::max(data[i], all[r * n + i]);
}

std::vector<float> Comm::allgather(const std::vector<float>& mine) {
  if (size() == 1) return mine;
  const std::int64_t n = std::int64_t(mine.size());
  std::vector<float> buf(static_cast<std::size_t>(n * size()), 0.f);
  std::copy(mine.begin(), mine.end(), buf.begin() + n * rank_);
  if (n > 0) run(spec_for(CollKind::AllGather, size(), n * size()), "ring", buf);
  return buf;
}

std::vector<float> Comm::reducescatter(const std::vector<float>& full, ReduceIn in) {
  if (size() == 1) return full;
  if (full.size() % size() != 0)
    throw Error(fmt::format("reduce-scatter: {} floats do not split evenly over {} ranks; pad to a multiple",
                            full.size(), size()));
  const std::int64_t n = std::int64_t(full.size()) / size();
  std::vector<float> buf = full;
  if (n > 0) run(spec_for(CollKind::ReduceScatter, size(), n * size()), "ring", buf, in);
  return std::vector<float>(buf.begin() + n * rank_, buf.begin() + n * (rank_ + 1));
}

void Comm::broadcast(std::vector<float>& data, int root) {
  if (size() == 1 || data.empty()) return;
  run(spec_for(CollKind::Broadcast, size(), std::int64_t(data.size()), root), "binomial", data);
}

void Comm::reduce(std::vector<float>& data, int root, ReduceIn in) {
  if (size() == 1 || data.empty()) return;
  run(spec_for(CollKind::Reduce, size(), std::int64_t(data.size()), root), "binomial", data, in);
}

std::vector<float> Comm::alltoall(const std::vector<float>& send, const std::vector<std::int64_t>& send_counts,
                                  std::vector<std::int64_t>& recv_counts) {
  const int p = size();
  if (std::int64_t(send_counts.size()) != p)
    throw Error(fmt::format("all-to-all: {} send counts for a group of {}; give one per rank", send_counts.size(), p));
  std::int64_t total = 0;
  for (auto c : send_counts) total += c;
  if (total != std::int64_t(send.size()))
    throw Error(fmt::format("all-to-all: send counts add up to {} but the buffer holds {}", total, send.size()));
  if (p == 1) {
    recv_counts = send_counts;
    return send;
  }
  // Count matrix: every rank learns every rank's send counts (exact as floats at test sizes).
  std::vector<float> mine(send_counts.begin(), send_counts.end());
  const std::vector<float> all = allgather(mine);
  CollectiveSpec spec = spec_for(CollKind::AllToAll, p, 0);
  spec.alltoall_bytes.assign(p, std::vector<Bytes>(p, 0));
  std::int64_t total_all = 0;
  for (int s = 0; s < p; ++s)
    for (int d = 0; d < p; ++d) {
      spec.alltoall_bytes[s][d] = static_cast<Bytes>(all[s * p + d]) * 4;
      total_all += static_cast<std::int64_t>(all[s * p + d]);
    }
  spec.bytes = total_all * 4;
  recv_counts.assign(p, 0);
  for (int s = 0; s < p; ++s) recv_counts[s] = static_cast<std::int64_t>(all[s * p + rank_]);
  std::vector<float> buf = send;
  if (total_all > 0) {
    run(spec, "pairwise", buf);
  }
  return buf;
}

void Comm::send(int peer, const float* data, std::int64_t n) { transport_.send(members_.at(peer), data, n * 4); }
void Comm::recv(int peer, float* data, std::int64_t n) { transport_.recv(members_.at(peer), data, n * 4); }

void Comm::sendrecv(int to, const float* send, std::int64_t send_n, int from, float* recv, std::int64_t recv_n) {
  const cpu::SendOp s{members_.at(to), send, static_cast<std::size_t>(send_n * 4)};
  const cpu::RecvOpDesc r{members_.at(from), recv, static_cast<std::size_t>(recv_n * 4), cpu::RecvMode::Copy};
  transport_.exchange(std::span<const cpu::SendOp>(&s, 1), std::span<const cpu::RecvOpDesc>(&r, 1), "sendrecv");
}

}  // namespace meshsim::numerics
