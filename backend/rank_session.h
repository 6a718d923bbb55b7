// One rank of a job that runs for real (meshsim run, validate, calibrate), whatever started
// it: its launcher environment, the rendezvous store (served by rank 0) and, on the cpu
// backend, a transport between all ranks; the machine measured over that transport; and the
// texts in which ranks hand their measured events to rank 0 through the store.
//
//   RankSession s(Backend::Cpu, 120);                 // every rank, at the same point
//   const std::string topo = machine_topology(s, sc.topology, sc.topology_given);
//   ExecutorOptions o = s.executor_options(Backend::Cpu, CollectivesMode::Ours);
//   const Trace mine = make_executor(registry, placement, o)->execute(schedule);
//   const auto all = s.store->gather("trace", s.env.rank, s.env.world_size, encode_trace(mine), s.timeout);
//   s.finish();                                       // rank 0 waits until every other rank has left
//
// It sits at backend/'s top, beside make_executor.h, as it holds a cpu::Transport.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_executor.h"
#include "backend/cpu/transport.h"
#include "backend/launch/launch_env.h"
#include "backend/launch/rendezvous.h"
#include "backend/make_executor.h"
#include "schedule/ir.h"

namespace meshsim {

struct RankSession {
  // `timeout_s`: any wait on another rank (the store, the transport); the transport only on
  // the cpu backend (the cuda backend talks NCCL).
  RankSession(Backend backend, double timeout_s);
  launch::LaunchEnv env;
  std::chrono::milliseconds timeout;
  std::unique_ptr<launch::RendezvousServer> server;
  std::unique_ptr<launch::RendezvousClient> store;
  std::unique_ptr<cpu::StoreDirectory> dir;
  std::unique_ptr<cpu::Transport> transport;  // cpu backend only
  // What make_executor needs of this rank: the backend, its collectives, rank, world, timeout
  // and this session's connections; callers add what their schedule needs.
  ExecutorOptions executor_options(Backend backend, CollectivesMode collectives) const;
  // Rank 0 waits until every other rank has left (so the store outlives them).
  void finish();
};

// Latency (one way, ping-pong between ranks 0 and 1) and per-rank bandwidth under load, in
// seconds and bytes per second, measured over the transport. Rank 0's figures are the ones used.
std::pair<double, double> measure_link(cpu::Transport& t);

// Reduction time per byte on this host (float32 sums over 16 MiB), in picoseconds.
double measure_gamma_ps();

// The topology predictions use: `topology` when the scenario gave one (`given`) or there is no
// transport to measure (cuda), else a switch whose latency and loaded bandwidth are measured
// here (every rank takes part; rank 0's figures, handed to every rank).
std::string machine_topology(RankSession& s, const std::string& topology, bool given);

// A rank's measured events as text for the rendezvous store's gather, and back (role, op,
// start, end per line; decode_trace sets the rank).
std::string encode_trace(const Trace& t);
std::vector<TraceEvent> decode_trace(const std::string& text, int rank);

// A collective workload's run gathered on rank 0: per op of role 0, its earliest start and
// latest end over the ranks, every rank's events, and every rank's numerics check.
struct MeasuredOps {
  std::vector<Time> start, end;  // per op: earliest start, latest end over ranks
  std::vector<std::vector<TraceEvent>> per_rank;
  bool all_checked = true;
  double max_error = 0;
};
// One rank's events of role 0 with each op's check against the serial reference (start, end,
// checked, max abs error per line), and every rank's texts (in rank order) back.
std::string encode_checked_trace(const Trace& t, const std::vector<cpu::NumericsCheck>& checks);
MeasuredOps decode_checked_traces(const std::vector<std::string>& all, std::size_t ops);

}  // namespace meshsim
