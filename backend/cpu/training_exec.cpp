// TrainingExecutor: a training schedule's op list run for real on one rank (see the header).
#include "backend/cpu/training_exec.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "backend/cpu/collective_exec.h"
#include "backend/cpu/cpu_compute.h"
#include "backend/cpu/cpu_executor.h"
#include "backend/cpu/transport.h"
#include "core/error.h"

namespace meshsim::cpu {
namespace {

using Clock = std::chrono::steady_clock;

// Completion state of this rank's ops, shared by the stream and inbox threads.
class Progress {
 public:
  explicit Progress(std::size_t ops) : done_(ops, false), arrived_(ops, false), start_(ops), end_(ops), arrival_(ops) {}

  // Waits until every op of `deps` is done; false when the run failed meanwhile.
  bool wait_deps(const std::vector<int>& deps) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] {
      return failed_ ||
             std::all_of(deps.begin(), deps.end(), [&](int d) { return done_[static_cast<std::size_t>(d)]; });
    });
    return !failed_;
  }
  // Waits until the message of Recv op `op` has arrived; returns its arrival time.
  std::optional<Clock::time_point> wait_arrival(int op) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return failed_ || arrived_[static_cast<std::size_t>(op)]; });
    if (failed_) return std::nullopt;
    return arrival_[static_cast<std::size_t>(op)];
  }
  void arrive(int op) {
    {
      std::lock_guard lock(mu_);
      arrived_[static_cast<std::size_t>(op)] = true;
      arrival_[static_cast<std::size_t>(op)] = Clock::now();
    }
    cv_.notify_all();
  }
  void finish(int op, Clock::time_point start, Clock::time_point end) {
    {
      std::lock_guard lock(mu_);
      done_[static_cast<std::size_t>(op)] = true;
      start_[static_cast<std::size_t>(op)] = start;
      end_[static_cast<std::size_t>(op)] = end;
    }
    cv_.notify_all();
  }
  // Records the first failure; returns true for the first one.
  bool fail(std::exception_ptr e) {
    bool first = false;
    {
      std::lock_guard lock(mu_);
      if (!failed_) {
        failed_ = true;
        error_ = e;
        first = true;
      }
    }
    cv_.notify_all();
    return first;
  }
  std::exception_ptr error() const { return error_; }
  Clock::time_point start(std::size_t op) const { return start_[op]; }
  Clock::time_point end(std::size_t op) const { return end_[op]; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> done_, arrived_;
  std::vector<Clock::time_point> start_, end_, arrival_;
  bool failed_ = false;
  std::exception_ptr error_;
};

// Where this rank sits: its mesh rank, stage, groups and pipeline peers.
struct Layout {
  int mesh_rank = 0;
  int stage = 0, stages = 1, pp_dim = -1;
  std::map<std::string, std::vector<int>> group;  // axis -> process ranks, group order

  Layout(int rank, int world, const Schedule& s, const Placement& pl) {
    const Mesh& mesh = pl.mesh();
    if (mesh.size() != world)
      throw Error(fmt::format("backend cpu: the layout has {} ranks but {} are running; launch with -n {}", mesh.size(),
                              world, mesh.size()));
    std::vector<int> seen(static_cast<std::size_t>(world), 0);
    mesh_rank = -1;
    for (int r = 0; r < world; ++r) {
      const int g = pl.gpu_of(r);
      if (g < 0 || g >= world || seen[static_cast<std::size_t>(g)]++)
        throw Error(
            fmt::format("backend cpu: the placement puts mesh rank {} on GPU {}; every process must be one "
                        "of GPUs 0..{} exactly once (describe this machine with {} GPUs)",
                        r, g, world - 1, world));
      if (g == rank) mesh_rank = r;
    }
    if (!s.pp_axis.empty()) {
      pp_dim = mesh.dim_index(s.pp_axis);
      stages = mesh.dims[static_cast<std::size_t>(pp_dim)].second;
      stage = mesh.coords(mesh_rank)[static_cast<std::size_t>(pp_dim)];
    }
    if (static_cast<int>(s.roles.size()) != stages)
      throw Error(fmt::format("backend cpu: the schedule has {} roles for {} pipeline stages", s.roles.size(), stages));
    for (const Op& op : s.roles[static_cast<std::size_t>(stage)].ops)
      if (op.kind == OpKind::Collective && !group.count(op.axis))
        for (auto& g : pl.groups_along(op.axis))
          if (std::find(g.begin(), g.end(), rank) != g.end()) group[op.axis] = std::move(g);
  }
  // The process running stage `to`'s part with this rank's other coordinates.
  int peer(const Placement& pl, int to) const {
    std::vector<int> c = pl.mesh().coords(mesh_rank);
    c[static_cast<std::size_t>(pp_dim)] = to;
    return pl.gpu_of(pl.mesh().rank_of(c));
  }
};

std::vector<float>& sized(std::vector<float>& v, Bytes bytes) {
  v.resize(static_cast<std::size_t>(bytes / 4));
  return v;
}

}  // namespace

TrainingExecutor::TrainingExecutor(int rank, int world, RendezvousClient& store, const Placement& placement,
                                   const AlgorithmRegistry& registry, TrainingExecOptions options)
    : rank_(rank), world_(world), store_(store), placement_(placement), registry_(registry), opt_(std::move(options)) {}

Trace TrainingExecutor::execute(const Schedule& schedule) {
  const Layout lay(rank_, world_, schedule, placement_);
  const Role& role = schedule.roles[static_cast<std::size_t>(lay.stage)];
  const std::vector<Op>& ops = role.ops;

  // Transports, created in the same order on every rank: one per comm stream that any
  // role uses, one per sending stage for pipeline messages.
  std::array<bool, kStreams> comm_stream{};
  bool pipeline = false;
  for (const Role& r : schedule.roles)
    for (const Op& op : r.ops) {
      if (op.kind == OpKind::Collective) comm_stream[static_cast<std::size_t>(op.stream)] = true;
      pipeline = pipeline || op.kind == OpKind::Send;
    }
  TransportOptions topt;
  topt.token = opt_.token;
  topt.bind_addr = opt_.bind_addr;
  topt.timeout = opt_.timeout;
  std::array<std::unique_ptr<Transport>, kStreams> stream_t;
  std::vector<std::unique_ptr<Transport>> stage_t;
  for (int s = 0; s < kStreams; ++s)
    if (comm_stream[static_cast<std::size_t>(s)]) {
      StoreDirectory dir(store_, fmt::format("addr/{}/", to_string(static_cast<Stream>(s))));
      stream_t[static_cast<std::size_t>(s)] = std::make_unique<Transport>(rank_, world_, dir, topt);
    }
  if (pipeline)
    for (int q = 0; q < lay.stages; ++q) {
      StoreDirectory dir(store_, fmt::format("addr/pp{}/", q));
      stage_t.push_back(std::make_unique<Transport>(rank_, world_, dir, topt));
    }

  CpuCompute compute(opt_.seed + static_cast<std::uint64_t>(rank_));
  compute.reserve(ops);
  Progress progress(ops.size());
  std::map<std::int64_t, int> recv_by_tag;  // tag -> Recv op index
  std::map<int, int> recvs_from;            // source stage -> number of Recv ops
  for (std::size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == OpKind::Recv) {
      recv_by_tag[ops[i].tag] = static_cast<int>(i);
      ++recvs_from[ops[i].peer];
    }
  std::vector<std::vector<float>> inbox(ops.size());  // received pipeline messages

  auto interrupt_all = [&] {
    for (auto& t : stream_t)
      if (t) t->interrupt();
    for (auto& t : stage_t) t->interrupt();
  };
  auto guarded = [&](auto&& body) {
    return [&, body] {
      try {
        body();
      } catch (...) {
        if (progress.fail(std::current_exception())) interrupt_all();
      }
    };
  };

  // Inbox threads: one per source stage, reading (tag, payload) messages in send order.
  auto inbox_body = [&](int from) {
    Transport& t = *stage_t[static_cast<std::size_t>(from)];
    const int peer = lay.peer(placement_, from);
    for (int n = recvs_from[from]; n > 0; --n) {
      std::int64_t tag = 0;
      t.recv(peer, &tag, sizeof tag);
      const auto it = recv_by_tag.find(tag);
      if (it == recv_by_tag.end())
        throw Error(
            fmt::format("rank {}: stage {} sent a pipeline message with tag {} that stage {} does not expect; "
                        "the ranks run different schedules (same scenario and --set on every rank?)",
                        rank_, from, tag, lay.stage));
      const Op& op = ops[static_cast<std::size_t>(it->second)];
      std::vector<float>& buf = sized(inbox[static_cast<std::size_t>(it->second)], op.bytes / 4 * 4);
      t.recv(peer, buf.data(), buf.size() * 4);
      progress.arrive(it->second);
    }
  };

  // Stream threads: the stream's ops in list order, each after its dependencies.
  auto stream_body = [&](Stream stream) {
    std::vector<float> buffer;  // collective and send payloads, reused
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (op.stream != stream) continue;
      if (!progress.wait_deps(op.deps)) return;
      Clock::time_point start = Clock::now();
      const std::string what = fmt::format("op {} ('{}') of stage {}", i, op.name, lay.stage);
      switch (op.kind) {
        case OpKind::Compute:
          compute.run(op);
          break;
        case OpKind::Collective: {
          const auto& members = lay.group.at(op.axis);
          const int p = static_cast<int>(members.size());
          const Bytes bytes = op.bytes / 4 * 4;
          if (p < 2 || bytes == 0) break;
          Transport& t = *stream_t[static_cast<std::size_t>(op.stream)];
          const int me = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
          if (op.coll == CollKind::SendRecv) {  // ring shift along the axis
            std::vector<float>& out = sized(buffer, 2 * bytes);
            const SendOp send{members[static_cast<std::size_t>((me + 1) % p)], out.data(),
                              static_cast<std::size_t>(bytes)};
            const RecvOpDesc recv{members[static_cast<std::size_t>((me + p - 1) % p)], out.data() + bytes / 4,
                                  static_cast<std::size_t>(bytes), RecvMode::Copy};
            t.exchange(std::span(&send, 1), std::span(&recv, 1), what);
            break;
          }
          const CollectiveSpec spec = collective_spec(op, p, 4);
          const Algorithm* alg = op.algorithm.empty() ? nullptr : registry_.find(op.algorithm, op.coll);
          if (alg == nullptr)
            throw Error(fmt::format("backend cpu: {} names no {} algorithm ('{}'); resolve_algorithms() before running",
                                    what, to_string(op.coll), op.algorithm));
          const auto program = alg->build(spec);
          std::vector<float>& buf = sized(buffer, rank_buffers(spec, me).send);
          run_collective_cpu(t, *program, spec, buf, members);
          break;
        }
        case OpKind::Send: {
          Transport& t = *stage_t[static_cast<std::size_t>(lay.stage)];
          const int peer = lay.peer(placement_, op.peer);
          const std::vector<float>& out = sized(buffer, op.bytes / 4 * 4);
          t.send(peer, &op.tag, sizeof op.tag);
          t.send(peer, out.data(), out.size() * 4);
          break;
        }
        case OpKind::Recv: {
          const auto arrival = progress.wait_arrival(static_cast<int>(i));
          if (!arrival) return;  // the op ends when its message is in (now, or earlier)
          inbox[i].clear();
          inbox[i].shrink_to_fit();
          break;
        }
      }
      progress.finish(static_cast<int>(i), start, std::max(start, Clock::now()));
    }
  };

  // A common start: every rank has connected every transport; meet, then start the clock.
  store_.barrier("train/start", world_, opt_.timeout);
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (const auto& [from, n] : recvs_from) threads.emplace_back(guarded([&, from = from] { inbox_body(from); }));
  std::array<bool, kStreams> used{};
  for (const Op& op : ops) used[static_cast<std::size_t>(op.stream)] = true;
  for (int s = 0; s < kStreams; ++s)
    if (used[static_cast<std::size_t>(s)])
      threads.emplace_back(guarded([&, s] { stream_body(static_cast<Stream>(s)); }));
  for (auto& th : threads) th.join();
  if (progress.error()) std::rethrow_exception(progress.error());

  Trace trace;
  trace.source = "cpu";
  auto ps = [&](Clock::time_point t) {
    return Time::from_ps(std::chrono::duration_cast<std::chrono::nanoseconds>(t - t0).count() * 1000);
  };
  for (std::size_t i = 0; i < ops.size(); ++i)
    trace.events.push_back({lay.stage, static_cast<int>(i), rank_, ps(progress.start(i)), ps(progress.end(i))});
  return trace;
}

}  // namespace meshsim::cpu
