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
  std::map<MeshAxis, std::vector<int>> group;  // axis -> process ranks, group order

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
      pp_dim = mesh.dim_index(s.pp_axis.str());
      stages = mesh.dims[static_cast<std::size_t>(pp_dim)].second;
      stage = mesh.coords(mesh_rank)[static_cast<std::size_t>(pp_dim)];
    }
    if (static_cast<int>(s.roles.size()) != stages)
      throw Error(fmt::format("backend cpu: the schedule has {} roles for {} pipeline stages", s.roles.size(), stages));
    for (const Op& op : s.roles[stage].ops)
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

// One execute() on this rank: its layout, transports, compute, the completion state of its
// ops and the threads that run them. go() connects, meets the other ranks, runs a thread
// per stream and per inbox, and assembles the trace.
class Run {
 public:
  Run(int rank, int world, launch::RendezvousClient& store, const Placement& placement,
      const AlgorithmRegistry& registry, const TrainingExecOptions& opt, const Schedule& schedule)
      : rank_(rank),
        world_(world),
        store_(store),
        placement_(placement),
        registry_(registry),
        opt_(opt),
        schedule_(schedule),
        lay_(rank, world, schedule, placement),
        ops_(schedule.roles[lay_.stage].ops),
        compute_(opt.seed + static_cast<std::uint64_t>(rank)),
        progress_(ops_.size()),
        inbox_(ops_.size()) {}

  Trace go() {
    connect();
    compute_.reserve(ops_);
    index_recvs();
    // A common start: every rank has connected every transport; meet, then start the clock.
    store_.barrier("train/start", world_, opt_.timeout);
    t0_ = Clock::now();
    run_threads();
    if (progress_.error()) std::rethrow_exception(progress_.error());
    return assemble_trace();
  }

 private:
  void connect();
  void index_recvs();
  void run_threads();
  void interrupt_all();
  // `body` as a thread's body: its error fails the run, and the first one interrupts every
  // transport so that no thread is left waiting.
  template <class Body>
  auto guarded(Body body) {
    return [this, body] {
      try {
        body();
      } catch (...) {
        if (progress_.fail(std::current_exception())) interrupt_all();
      }
    };
  }
  void inbox_thread(int from);
  void stream_thread(Stream stream);
  bool issue(std::size_t i, std::vector<float>& buffer);
  void issue_collective(const Op& op, std::vector<float>& buffer, const std::string& what);
  void issue_send(const Op& op, std::vector<float>& buffer);
  bool issue_recv(std::size_t i);
  Trace assemble_trace() const;

  const int rank_, world_;
  launch::RendezvousClient& store_;
  const Placement& placement_;
  const AlgorithmRegistry& registry_;
  const TrainingExecOptions& opt_;
  const Schedule& schedule_;
  const Layout lay_;
  const std::vector<Op>& ops_;                                 // this rank's role's
  std::array<std::unique_ptr<Transport>, kStreams> stream_t_;  // by comm stream
  std::vector<std::unique_ptr<Transport>> stage_t_;            // by sending stage
  CpuCompute compute_;
  Progress progress_;
  std::map<std::int64_t, int> recv_by_tag_;  // tag -> Recv op index
  std::map<int, int> recvs_from_;            // source stage -> number of Recv ops
  std::vector<std::vector<float>> inbox_;    // received pipeline messages
  Clock::time_point t0_;
};

// Transports, created in the same order on every rank: one per comm stream that any
// role uses, one per sending stage for pipeline messages.
void Run::connect() {
  std::array<bool, kStreams> comm_stream{};
  bool pipeline = false;
  for (const Role& r : schedule_.roles)
    for (const Op& op : r.ops) {
      if (op.kind == OpKind::Collective) comm_stream[static_cast<std::size_t>(op.stream)] = true;
      pipeline = pipeline || op.kind == OpKind::Send;
    }
  TransportOptions topt;
  topt.token = opt_.token;
  topt.bind_addr = opt_.bind_addr;
  topt.timeout = opt_.timeout;
  topt.job_failed = store_.failure_probe();  // a peer the store saw die or stop fails a wait in about a second
  for (int s = 0; s < kStreams; ++s)
    if (comm_stream[static_cast<std::size_t>(s)]) {
      StoreDirectory dir(store_, fmt::format("addr/{}/", to_string(static_cast<Stream>(s))));
      stream_t_[static_cast<std::size_t>(s)] = std::make_unique<Transport>(rank_, world_, dir, topt);
    }
  if (pipeline)
    for (int q = 0; q < lay_.stages; ++q) {
      StoreDirectory dir(store_, fmt::format("addr/pp{}/", q));
      stage_t_.push_back(std::make_unique<Transport>(rank_, world_, dir, topt));
    }
}

void Run::index_recvs() {
  for (std::size_t i = 0; i < ops_.size(); ++i)
    if (ops_[i].kind == OpKind::Recv) {
      recv_by_tag_[ops_[i].tag] = static_cast<int>(i);
      ++recvs_from_[ops_[i].peer];
    }
}

// An inbox thread per source stage, a thread per stream that has ops; returns when all end.
void Run::run_threads() {
  std::vector<std::thread> threads;
  for (const auto& [from, n] : recvs_from_) threads.emplace_back(guarded([this, from = from] { inbox_thread(from); }));
  std::array<bool, kStreams> used{};
  for (const Op& op : ops_) used[static_cast<std::size_t>(op.stream)] = true;
  for (int s = 0; s < kStreams; ++s)
    if (used[static_cast<std::size_t>(s)])
      threads.emplace_back(guarded([this, s] { stream_thread(static_cast<Stream>(s)); }));
  for (auto& th : threads) th.join();
}

void Run::interrupt_all() {
  for (auto& t : stream_t_)
    if (t) t->interrupt();
  for (auto& t : stage_t_) t->interrupt();
}

// Inbox thread: reads (tag, payload) messages from stage `from` in send order.
void Run::inbox_thread(int from) {
  Transport& t = *stage_t_[static_cast<std::size_t>(from)];
  const int peer = lay_.peer(placement_, from);
  for (int n = recvs_from_.at(from); n > 0; --n) {
    std::int64_t tag = 0;
    t.recv(peer, &tag, sizeof tag);
    const auto it = recv_by_tag_.find(tag);
    if (it == recv_by_tag_.end())
      throw Error(
          fmt::format("rank {}: stage {} sent a pipeline message with tag {} that stage {} does not expect; "
                      "the ranks run different schedules (same scenario and --set on every rank?)",
                      rank_, from, tag, lay_.stage));
    const Op& op = ops_[static_cast<std::size_t>(it->second)];
    std::vector<float>& buf = sized(inbox_[static_cast<std::size_t>(it->second)], op.bytes / 4 * 4);
    t.recv(peer, buf.data(), buf.size() * 4);
    progress_.arrive(it->second);
  }
}

// Stream thread: the stream's ops in list order, each after its dependencies.
void Run::stream_thread(Stream stream) {
  std::vector<float> buffer;  // collective and send payloads, reused
  for (std::size_t i = 0; i < ops_.size(); ++i) {
    const Op& op = ops_[i];
    if (op.stream != stream) continue;
    if (!progress_.wait_deps(op.deps)) return;
    Clock::time_point start = Clock::now();
    if (!issue(i, buffer)) return;
    progress_.finish(static_cast<int>(i), start, std::max(start, Clock::now()));
  }
}

// Runs op `i`; false when the run failed meanwhile.
bool Run::issue(std::size_t i, std::vector<float>& buffer) {
  const Op& op = ops_[i];
  const std::string what = fmt::format("op {} ('{}') of stage {}", i, op.name, lay_.stage);
  switch (op.kind) {
    case OpKind::Compute:
      compute_.run(op);
      break;
    case OpKind::Collective:
      issue_collective(op, buffer, what);
      break;
    case OpKind::Send:
      issue_send(op, buffer);
      break;
    case OpKind::Recv:
      return issue_recv(i);
  }
  return true;
}

// The op's step program on the rank's group along its axis; a send/recv collective is the
// ring shift along the axis.
void Run::issue_collective(const Op& op, std::vector<float>& buffer, const std::string& what) {
  const auto& members = lay_.group.at(op.axis);
  const int p = static_cast<int>(members.size());
  const Bytes bytes = op.bytes / 4 * 4;
  if (p < 2 || bytes == 0) return;
  Transport& t = *stream_t_[static_cast<std::size_t>(op.stream)];
  const int me = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  if (op.coll == CollKind::SendRecv) {
    std::vector<float>& out = sized(buffer, 2 * bytes);
    const SendOp send{members[static_cast<std::size_t>((me + 1) % p)], out.data(), static_cast<std::size_t>(bytes)};
    const RecvOpDesc recv{members[static_cast<std::size_t>((me + p - 1) % p)], out.data() + bytes / 4,
                          static_cast<std::size_t>(bytes), RecvMode::Copy};
    t.exchange(std::span(&send, 1), std::span(&recv, 1), what);
    return;
  }
  const CollectiveSpec spec = collective_spec(op, p, 4);
  const Algorithm* alg = op.algorithm.empty() ? nullptr : registry_.find(op.algorithm, op.coll);
  if (alg == nullptr)
    throw Error(fmt::format("backend cpu: {} names no {} algorithm ('{}'); resolve_algorithms() before running", what,
                            to_string(op.coll), op.algorithm));
  const auto program = alg->build(spec);
  std::vector<float>& buf = sized(buffer, rank_buffers(spec, me).send);
  run_collective_cpu(t, *program, spec, buf, members);
}

// A pipeline Send: its tag, then op.bytes, to the peer stage's rank.
void Run::issue_send(const Op& op, std::vector<float>& buffer) {
  Transport& t = *stage_t_[static_cast<std::size_t>(lay_.stage)];
  const int peer = lay_.peer(placement_, op.peer);
  const std::vector<float>& out = sized(buffer, op.bytes / 4 * 4);
  t.send(peer, &op.tag, sizeof op.tag);
  t.send(peer, out.data(), out.size() * 4);
}

// A pipeline Recv ends when its message is in (now, or earlier); false when the run failed.
bool Run::issue_recv(std::size_t i) {
  const auto arrival = progress_.wait_arrival(static_cast<int>(i));
  if (!arrival) return false;
  inbox_[i].clear();
  inbox_[i].shrink_to_fit();
  return true;
}

// This rank's events: role = its stage, op ids, times from the common start.
Trace Run::assemble_trace() const {
  Trace trace;
  trace.source = "cpu";
  auto ps = [&](Clock::time_point t) {
    return Time::from_ps(std::chrono::duration_cast<std::chrono::nanoseconds>(t - t0_).count() * 1000);
  };
  for (std::size_t i = 0; i < ops_.size(); ++i)
    trace.events.push_back({lay_.stage, static_cast<int>(i), rank_, ps(progress_.start(i)), ps(progress_.end(i))});
  return trace;
}

}  // namespace

TrainingExecutor::TrainingExecutor(int rank, int world, launch::RendezvousClient& store, const Placement& placement,
                                   const AlgorithmRegistry& registry, TrainingExecOptions options)
    : rank_(rank), world_(world), store_(store), placement_(placement), registry_(registry), opt_(std::move(options)) {}

Trace TrainingExecutor::execute(const Schedule& schedule) {
  return Run(rank_, world_, store_, placement_, registry_, opt_, schedule).go();
}

}  // namespace meshsim::cpu
