// One rank of a job run for real: see rank_session.h.
#include "backend/rank_session.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <span>
#include <sstream>

namespace meshsim {

RankSession::RankSession(Backend backend, double timeout_s)
    : env(launch::launch_env()), timeout(static_cast<std::int64_t>(timeout_s * 1000)) {
  // Every rank says so: a rank on another host keeps its own log (issue 40).
  if (env.insecure)
    std::cerr << fmt::format(
        "meshsim: warning: rank {}: MESHSIM_TOKEN=insecure: this run is not authenticated; any process that reaches "
        "{}:{} can join it and read its data; use this on a single host only\n",
        env.rank, env.master_addr, env.master_port);
  if (env.rank == 0) {
    launch::RendezvousServerOptions so{env.master_addr, env.master_port, env.token};
    so.max_connections = 4 * env.world_size + 64;    // one client per rank, with room for retries
    so.world_size = env.world_size;                  // a rank with another MESHSIM_WORLD_SIZE is refused at once
    so.linger_on_failure = std::chrono::seconds(3);  // a late rank of a failed run is told why, not left to retry
    so.heartbeat_timeout = env.heartbeat_timeout;    // a stopped or hung rank is named (MESHSIM_HEARTBEAT_TIMEOUT)
    server = std::make_unique<launch::RendezvousServer>(std::move(so));
  }
  // Registered: the store fails the run at once for every rank when this one dies or is misconfigured.
  store = std::make_unique<launch::RendezvousClient>(launch::RendezvousClientOptions{
      env.master_addr, env.master_port, env.token, env.rank, timeout, timeout, env.world_size,
      env.heartbeat_timeout > std::chrono::milliseconds(0) ? env.heartbeat_interval : std::chrono::milliseconds(0),
      env.heartbeat_timeout});
  dir = std::make_unique<cpu::StoreDirectory>(*store);
  if (backend == Backend::Cpu) {  // the cuda backend talks NCCL
    cpu::TransportOptions topt;
    topt.token = env.token;
    topt.bind_addr = env.bind_addr;
    topt.timeout = timeout;
    topt.job_failed = store->failure_probe();  // a peer the store saw die or stop fails a wait in about a second
    transport = std::make_unique<cpu::Transport>(env.rank, env.world_size, *dir, topt);
  }
}

ExecutorOptions RankSession::executor_options(Backend backend, CollectivesMode collectives) const {
  ExecutorOptions o;
  o.backend = backend;
  o.collectives = collectives;
  o.rank = env.rank;
  o.world = env.world_size;
  o.timeout = timeout;
  o.store = store.get();
  o.transport = transport.get();
  o.token = env.token;
  o.bind_addr = env.bind_addr;
  return o;
}

void RankSession::finish() {
  store->barrier("done", env.world_size, timeout);
  if (env.rank != 0) {
    // BYE before "left/": once every left/ key is set, rank 0 may stop the store at once.
    store->leave();  // closing the connection from now on is no failure
    store->set("left/" + std::to_string(env.rank), "1");
    return;
  }
  for (int r = 1; r < env.world_size; ++r) store->get("left/" + std::to_string(r), timeout, r);
  store->leave();
}

std::string machine_topology(RankSession& s, const std::string& topology, bool given) {
  if (given || !s.transport) return topology;
  const auto [latency, bandwidth] = measure_link(*s.transport);
  const std::string measured =
      s.env.rank == 0 ? fmt::format("switch:gpus_per_node={},bandwidth={:.3f}GB/s,latency={:.3f}us,efficiency=1.0",
                                    s.env.world_size, bandwidth * 1e-9, latency * 1e6 / 2)
                      : std::string();
  return s.store->gather("model", s.env.rank, s.env.world_size, measured, s.timeout).front();
}

std::pair<double, double> measure_link(cpu::Transport& t) {
  if (t.world() < 2) return {1e-6, 10e9};
  const int rank = t.rank();
  char byte = 0;
  const int rounds = 200;
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < rounds; ++i) {
    if (rank == 0) {
      t.send(1, &byte, 1);
      t.recv(1, &byte, 1);
    } else if (rank == 1) {
      t.recv(0, &byte, 1);
      t.send(0, &byte, 1);
    }
  }
  const double latency =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / (2.0 * rounds);
  // Bandwidth under load: every rank sends to the next and receives from the previous at
  // once (a ring shift, the pattern of ring collectives), so ranks sharing cores and memory
  // on one host see the rate they will really get.
  const int world = t.world();
  std::vector<char> out(16 << 20), in(16 << 20);
  const int reps = 4;
  const cpu::SendOp send{(rank + 1) % world, out.data(), out.size()};
  const cpu::RecvOpDesc recv{(rank + world - 1) % world, in.data(), in.size(), cpu::RecvMode::Copy};
  t.exchange(std::span(&send, 1), std::span(&recv, 1), "bandwidth probe");  // warm-up
  start = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) t.exchange(std::span(&send, 1), std::span(&recv, 1), "bandwidth probe");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {latency, static_cast<double>(out.size()) * reps / secs};
}

// Reduction time per byte on this host (float32 sums over 16 MiB), in picoseconds.
double measure_gamma_ps() {
  std::vector<float> a(4 << 20, 1.0f), b(4 << 20, 2.0f);
  const auto start = std::chrono::steady_clock::now();
  for (int rep = 0; rep < 4; ++rep)
    for (std::size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  volatile float sink = a[a.size() / 2];
  (void)sink;
  return secs * 1e12 / (4.0 * static_cast<double>(a.size()) * 4);
}

std::string encode_trace(const Trace& t) {
  std::ostringstream o;
  for (const TraceEvent& e : t.events) o << e.role << ' ' << e.op << ' ' << e.start.ps() << ' ' << e.end.ps() << '\n';
  return o.str();
}

std::vector<TraceEvent> decode_trace(const std::string& text, int rank) {
  std::vector<TraceEvent> events;
  std::istringstream in(text);
  TraceEvent e;
  e.rank = rank;
  std::int64_t a = 0, b = 0;
  while (in >> e.role >> e.op >> a >> b) {
    e.start = Time::from_ps(a);
    e.end = Time::from_ps(b);
    events.push_back(e);
  }
  return events;
}

std::string encode_checked_trace(const Trace& t, const std::vector<cpu::NumericsCheck>& checks) {
  std::ostringstream o;
  for (std::size_t i = 0; i < t.events.size(); ++i)
    o << t.events[i].start.ps() << ' ' << t.events[i].end.ps() << ' ' << (checks[i].checked ? 1 : 0) << ' '
      << checks[i].max_abs_error << '\n';
  return o.str();
}

MeasuredOps decode_checked_traces(const std::vector<std::string>& all, std::size_t ops) {
  MeasuredOps m;
  m.start.assign(ops, Time::max());
  m.end.assign(ops, Time{});
  for (std::size_t r = 0; r < all.size(); ++r) {
    std::istringstream in(all[r]);
    std::vector<TraceEvent> evs;
    for (std::size_t i = 0; i < ops; ++i) {
      std::int64_t s = 0, e = 0;
      int checked = 0;
      double err = 0;
      in >> s >> e >> checked >> err;
      evs.push_back({0, static_cast<int>(i), static_cast<int>(r), Time::from_ps(s), Time::from_ps(e)});
      m.start[i] = std::min(m.start[i], Time::from_ps(s));
      m.end[i] = std::max(m.end[i], Time::from_ps(e));
      m.all_checked = m.all_checked && checked;
      m.max_error = std::max(m.max_error, err);
    }
    m.per_rank.push_back(std::move(evs));
  }
  return m;
}

}  // namespace meshsim
