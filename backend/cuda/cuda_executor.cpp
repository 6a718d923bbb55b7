// CudaExecutor: one rank of a schedule on one GPU, through GpuApi (see cuda_executor.h).
#include "backend/cuda/cuda_executor.h"

#include <fmt/format.h>

#include <map>
#include <memory>
#include <tuple>

#include "backend/cuda/comm_plan.h"
#include "backend/cuda/cuda_calibrate.h"
#include "backend/cuda/event_trace.h"
#include "backend/cuda/p2p_plan.h"
#include "backend/cuda/workspace.h"
#include "backend/launch/rendezvous.h"
#include "core/error.h"

namespace meshsim::cuda {

IdExchange store_id_exchange(launch::RendezvousClient& store, int rank, std::chrono::milliseconds timeout,
                             std::string key) {
  return [&store, rank, timeout, key = std::move(key)](const std::string& mine) {
    if (rank == 0) {
      store.set(key, mine);
      return mine;
    }
    return store.get(key, timeout);
  };
}

namespace {

constexpr std::int64_t kFloat = 4;

// Device resources of one execute(); released on every path. On the error path (the
// Checker has aborted the communicators) statuses are ignored; on success they are checked.
class Resources {
 public:
  Resources(GpuApi& api, Checker& check) : api_(api), check_(check) {}
  ~Resources() { release(false); }
  Resources(const Resources&) = delete;
  Resources& operator=(const Resources&) = delete;

  void release(bool checked) {
    auto done = [&](Lib lib, int status, const char* call) {
      if (checked) check_.check(lib, status, call, "teardown");
    };
    for (EventH e : events) done(Lib::Cuda, api_.event_destroy(e), "cudaEventDestroy");
    events.clear();
    for (BlasH& h : blas)
      if (h != nullptr) done(Lib::Cublas, api_.blas_destroy(std::exchange(h, nullptr)), "cublasDestroy");
    for (StreamH& s : streams)
      if (s != nullptr) done(Lib::Cuda, api_.stream_destroy(std::exchange(s, nullptr)), "cudaStreamDestroy");
    if (workspace != nullptr) done(Lib::Cuda, api_.free(std::exchange(workspace, nullptr)), "cudaFree");
    if (!check_.aborted()) {
      for (CommH& c : split)
        if (c != nullptr) done(Lib::Nccl, api_.comm_destroy(std::exchange(c, nullptr)), "ncclCommDestroy");
      if (world != nullptr) done(Lib::Nccl, api_.comm_destroy(std::exchange(world, nullptr)), "ncclCommDestroy");
    }
    split.clear();
    world = nullptr;
  }

  CommH world = nullptr;
  std::vector<CommH> split;
  std::vector<StreamH> streams = std::vector<StreamH>(static_cast<std::size_t>(kStreams), nullptr);
  std::vector<BlasH> blas = std::vector<BlasH>(static_cast<std::size_t>(kStreams), nullptr);
  std::vector<EventH> events;
  void* workspace = nullptr;

 private:
  GpuApi& api_;
  Checker& check_;
};

using ProgramKey = std::tuple<int, int, Bytes, int, std::string, double>;  // + all-to-all imbalance

class Run {
 public:
  Run(GpuApi& api, const AlgorithmRegistry& registry, const Placement& placement, const CudaExecutorOptions& opt,
      const WatchClock& clock, const Schedule& schedule)
      : api_(api),
        registry_(registry),
        opt_(opt),
        plan_(plan_comms(schedule, placement, opt.rank)),
        role_(schedule.roles[plan_.role]),
        schedule_(schedule),
        check_(api, opt.rank),
        res_(api, check_),
        dog_(check_, opt.watchdog, clock) {}

  Trace go() {
    dog_.start_monitor("setup");  // the host may block inside a call: ncclCommInitRank waits for every rank
    prepare_ops();
    setup_device();
    dog_.host_at("setup: NCCL communicators");
    setup_comms();
    // Untimed passes first: each GEMM shape's first cuBLAS call (its heuristics, its kernels
    // loaded lazily), our kernels' first launches and NCCL's first connection between two
    // ranks cost milliseconds that a training step does not pay again.
    for (int pass = 0; pass <= opt_.warmup; ++pass) run_pass(pass == opt_.warmup);
    const std::size_t n = role_.ops.size();
    std::vector<OpTiming> timings(n);
    for (std::size_t i = 0; i < n; ++i) {
      const int op = static_cast<int>(i);
      timings[i].op = op;
      check_.cuda(api_.event_elapsed_ms(&timings[i].start_ms, start_event(), start_event_of(op)),
                  "cudaEventElapsedTime", label(op));
      check_.cuda(api_.event_elapsed_ms(&timings[i].end_ms, start_event(), end_event(op)), "cudaEventElapsedTime",
                  label(op));
    }
    res_.release(true);
    return assemble_trace(plan_.role, opt_.rank, timings);
  }

 private:
  std::string label(int op) const {
    return fmt::format("op '{}' (#{} of role {})", role_.ops[op].name, op, plan_.role);
  }
  StreamH stream(Stream s) const { return res_.streams[static_cast<std::size_t>(s)]; }
  EventH start_event() const { return res_.events.front(); }
  EventH start_event_of(int op) const { return res_.events[static_cast<std::size_t>(1 + 2 * op)]; }
  EventH end_event(int op) const { return res_.events[static_cast<std::size_t>(2 + 2 * op)]; }
  char* at(int op, Buf b) const { return static_cast<char*>(res_.workspace) + ws_.region(op, b).offset; }

  // One pass over the role: a device-side barrier over the world, then this rank's start
  // event, which every stream waits for; every op in issue order; the host waits for all.
  // Numerics (collective workloads) are filled and checked in the timed pass only.
  void run_pass(bool timed) {
    StreamH compute = stream(Stream::Compute);
    dog_.host_at("start barrier");
    check_.nccl(api_.collective(CollKind::AllReduce, barrier_, barrier_, 1, DType::Fp32, 0, res_.world, compute),
                "ncclAllReduce", "start barrier");
    check_.cuda(api_.event_record(start_event(), compute), "cudaEventRecord", "start barrier");
    for (int s = 0; s < kStreams; ++s)
      if (res_.streams[static_cast<std::size_t>(s)] != nullptr && s != static_cast<int>(Stream::Compute))
        check_.cuda(api_.stream_wait_event(res_.streams[static_cast<std::size_t>(s)], start_event()),
                    "cudaStreamWaitEvent", "start barrier");
    dog_.progress();
    std::vector<int> issued;  // ops in issue order; issued[0, waited) are known finished
    issued.reserve(role_.ops.size());
    std::size_t waited = 0;
    for (int op : order_) {
      issue(op, timed);
      issued.push_back(op);
      while (static_cast<int>(issued.size() - waited) > std::max(opt_.max_in_flight, 1)) {
        dog_.wait(end_event(issued[waited]), label(issued[waited]));
        ++waited;
      }
    }
    for (; waited < issued.size(); ++waited) dog_.wait(end_event(issued[waited]), label(issued[waited]));
  }

  // Step programs, specs and buffer needs of every op; then the workspace plan.
  void prepare_ops() {
    const std::size_t n = role_.ops.size();
    specs_.resize(n);
    programs_.resize(n);
    calls_.resize(n);
    std::vector<Stream> streams(n);
    std::vector<std::vector<BufferNeed>> needs(n);
    std::map<ProgramKey, std::shared_ptr<StepProgram>> cache;
    for (std::size_t i = 0; i < n; ++i) {
      const Op& op = role_.ops[i];
      streams[i] = op.stream;
      for (int d : op.deps)
        if (d < 0 || d >= static_cast<int>(i))
          throw Error(
              fmt::format("backend cuda: op {} ('{}') depends on op {}, which does not come before it", i, op.name, d));
      if (op.kind != OpKind::Collective) {
        if (op.kind == OpKind::Compute && op.kernel.kind != KernelKind::Gemm)
          calls_[i] = kernel_call(op.kernel, op.phase, !opt_.fp32_kernels);
        needs[i] = op_needs(op, !opt_.fp32_kernels);
        if (opt_.random_operands && op.kind == OpKind::Compute && op.kernel.kind == KernelKind::Gemm)
          take_operands_to_pool(needs[i]);
        continue;
      }
      const CollectiveSpec spec = collective_spec(op, op.group_size, kFloat);
      specs_[i] = spec;
      if (spec.bytes == 0 || spec.ranks < 2) continue;  // nothing moves
      const int grank = plan_.axis(op.axis).key;
      if (spec.kind == CollKind::SendRecv || opt_.native_collectives) {
        if (opt_.native_collectives && spec.kind != CollKind::SendRecv) check_native(static_cast<int>(i), spec);
        needs[i] = native_collective_needs(spec);
        continue;
      }
      // `auto` is resolved once, by the simulator's resolve_algorithms, before any backend runs.
      const std::string& alg_name = op.algorithm;
      const ProgramKey key{static_cast<int>(spec.kind), spec.ranks, spec.bytes, spec.root, alg_name, op.imbalance};
      auto it = cache.find(key);
      if (it == cache.end()) {
        const Algorithm* alg = alg_name.empty() ? nullptr : registry_.find(alg_name, spec.kind);
        if (alg == nullptr)
          throw Error(
              fmt::format("backend cuda: op {} ('{}') names no {} algorithm ('{}'); resolve_algorithms() "
                          "before running, or see meshsim algorithms",
                          i, op.name, to_string(spec.kind), alg_name));
        it = cache.emplace(key, std::shared_ptr<StepProgram>(alg->build(spec))).first;
      }
      programs_[i] = it->second;
      needs[i] = step_program_needs(*programs_[i], spec, grank);
    }
    ws_ = plan_workspace(streams, needs);
    // Pipeline messages in the global message order (p2p_plan.h), so blocking NCCL
    // sends cannot deadlock.
    order_ = issue_order(schedule_, plan_.role, plan_p2p_order(schedule_)[static_cast<std::size_t>(plan_.role)]);
  }

  void check_native(int i, const CollectiveSpec& spec) const {
    const bool per_rank =
        spec.kind == CollKind::AllGather || spec.kind == CollKind::ReduceScatter || spec.kind == CollKind::AllToAll;
    if (per_rank && spec.bytes % (kFloat * spec.ranks) != 0)
      throw Error(
          fmt::format("backend cuda: op {} ('{}'): native NCCL {} needs bytes divisible by 4 x {} ranks, "
                      "got {}; use --collectives ours",
                      i, role_.ops[i].name, to_string(spec.kind), spec.ranks, spec.bytes));
    if (!spec.alltoall_bytes.empty())
      throw Error(
          fmt::format("backend cuda: op {} ('{}'): native ncclAlltoAll moves even blocks, but this all-to-all "
                      "is skewed (imbalance {}); use --collectives ours",
                      i, role_.ops[i].name, role_.ops[i].imbalance));
  }

  void setup_device() {
    check_.cuda(api_.set_device(opt_.device), "cudaSetDevice", "setup");
    std::vector<bool> used(static_cast<std::size_t>(kStreams), false), gemm(static_cast<std::size_t>(kStreams), false);
    used[static_cast<std::size_t>(Stream::Compute)] = true;  // the start barrier runs there
    for (const Op& op : role_.ops) {
      used[static_cast<std::size_t>(op.stream)] = true;
      if (op.kind == OpKind::Compute && op.kernel.kind == KernelKind::Gemm)
        gemm[static_cast<std::size_t>(op.stream)] = true;
    }
    // The workspace, plus 256 bytes at its end for the start barrier's all-reduce, then the
    // GEMM operand pool (random_operands).
    const std::int64_t pool = pool_a_ + pool_b_, bytes = ws_.total + kWorkspaceAlign + pool;
    check_.cuda(api_.malloc(&res_.workspace, static_cast<std::size_t>(bytes)), "cudaMalloc",
                fmt::format("setup: workspace of {} bytes", bytes));
    barrier_ = static_cast<char*>(res_.workspace) + ws_.total;
    for (int s = 0; s < kStreams; ++s) {
      if (!used[static_cast<std::size_t>(s)]) continue;
      StreamH& h = res_.streams[static_cast<std::size_t>(s)];
      check_.cuda(api_.stream_create(&h), "cudaStreamCreateWithFlags", "setup");
      if (!gemm[static_cast<std::size_t>(s)]) continue;
      BlasH& b = res_.blas[static_cast<std::size_t>(s)];
      check_.cublas(api_.blas_create(&b), "cublasCreate", "setup");
      check_.cublas(api_.blas_set_stream(b, h), "cublasSetStream", "setup");
      // Every GEMM of the stream has its cuBLAS workspace at the arena start (workspace.h).
      for (std::size_t i = 0; i < role_.ops.size(); ++i)
        if (role_.ops[i].stream == static_cast<Stream>(s) && role_.ops[i].kind == OpKind::Compute &&
            role_.ops[i].kernel.kind == KernelKind::Gemm) {
          check_.cublas(api_.blas_set_workspace(b, at(static_cast<int>(i), Buf::Cublas), kCublasWorkspace),
                        "cublasSetWorkspace", "setup");
          break;
        }
    }
    // Zeroed once on the compute stream; the other streams start after it (start event). The
    // pool is copied in synchronously: the two never touch the same bytes.
    check_.cuda(api_.memset_async(res_.workspace, 0, static_cast<std::size_t>(ws_.total + kWorkspaceAlign),
                                  stream(Stream::Compute)),
                "cudaMemsetAsync", "setup");
    if (pool > 0)
      copy_calibration_operands(api_, check_, static_cast<char*>(res_.workspace) + ws_.total + kWorkspaceAlign,
                                static_cast<std::size_t>(pool), "setup: GEMM operands");
    res_.events.assign(1 + 2 * role_.ops.size(), nullptr);
    for (EventH& e : res_.events) check_.cuda(api_.event_create(&e), "cudaEventCreate", "setup");
  }

  // random_operands: every GEMM reads A from the start of one pool and B from after the
  // largest A, a pool no op writes, holding the random words calibrate times its GEMMs on
  // (cuda_calibrate.h). In the arena the operands would hold what earlier ops left there
  // (zeros from the embedding of ids outside the shard, from zero_grads), and on such data the
  // tensor cores run faster than on real data: GPT-3's GEMMs ran 16% faster than the profile on
  // an H100 (docs/validation/gpu-h100.md). The executor carries no data between ops anyway
  // (workspace.h), so a GEMM's inputs are any numbers of the right size.
  void take_operands_to_pool(std::vector<BufferNeed>& need) {
    std::erase_if(need, [&](const BufferNeed& b) {
      if (b.buf == Buf::A) pool_a_ = std::max(pool_a_, align_up(b.bytes));
      if (b.buf == Buf::B) pool_b_ = std::max(pool_b_, align_up(b.bytes));
      return b.buf == Buf::A || b.buf == Buf::B;
    });
  }
  char* operand(int op, Buf b) const {
    if (pool_a_ + pool_b_ == 0) return at(op, b);
    char* pool = static_cast<char*>(res_.workspace) + ws_.total + kWorkspaceAlign;
    return b == Buf::A ? pool : pool + pool_a_;
  }

  void setup_comms() {
    std::string id;
    if (opt_.rank == 0) check_.nccl(api_.get_unique_id(&id), "ncclGetUniqueId", "setup");
    if (!opt_.share_id) throw Error("backend cuda: no way to share the ncclUniqueId (share_id is empty)");
    id = opt_.share_id(id);
    if (id.size() != kUniqueIdBytes)
      throw Error(fmt::format("backend cuda: rank {}: the ncclUniqueId from rank 0 has {} bytes, not {}", opt_.rank,
                              id.size(), kUniqueIdBytes));
    check_.nccl(api_.comm_init_rank(&res_.world, plan_.world_size, id, opt_.rank), "ncclCommInitRank", "setup");
    check_.add_comm(res_.world);
    for (const AxisComm& a : plan_.axes) {
      if (a.whole_world) {
        comms_[a.axis] = res_.world;
        continue;
      }
      CommH c = nullptr;
      check_.nccl(api_.comm_split(res_.world, a.color, a.key, &c), "ncclCommSplit",
                  fmt::format("setup: communicator for axis '{}'", a.axis.str()));
      res_.split.push_back(c);
      check_.add_comm(c);
      comms_[a.axis] = c;
    }
  }

  void issue(int i, bool timed) {
    const Op& op = role_.ops[i];
    const std::string where = label(i);
    dog_.host_at(where);  // a launch can block once the launch queue is full
    StreamH s = stream(op.stream);
    for (int d : op.deps)
      if (role_.ops[d].stream != op.stream)
        check_.cuda(api_.stream_wait_event(s, end_event(d)), "cudaStreamWaitEvent", where);
    const bool numerics = timed && op.kind == OpKind::Collective && opt_.data.input &&
                          specs_[static_cast<std::size_t>(i)].bytes > 0 &&
                          specs_[static_cast<std::size_t>(i)].ranks > 1 && op.coll != CollKind::SendRecv;
    if (numerics) fill_input(i);
    if (op.kind == OpKind::Compute && op.kernel.kind != KernelKind::Gemm) valid_targets(i, s);
    check_.cuda(api_.event_record(start_event_of(i), s), "cudaEventRecord", where);
    switch (op.kind) {
      case OpKind::Compute:
        issue_compute(i, s);
        break;
      case OpKind::Collective:
        issue_collective(i, s);
        break;
      case OpKind::Send:
      case OpKind::Recv:
        issue_p2p(i);
        break;
    }
    check_.cuda(api_.event_record(end_event(i), s), "cudaEventRecord", where);
    last_on_stream_[static_cast<std::size_t>(op.stream)] = i;
    if (numerics) read_output(i);
  }

  void issue_p2p(int i) {
    const Op& op = role_.ops[i];
    StreamH s = stream(op.stream);
    if (op.kind == OpKind::Send)
      check_.nccl(
          api_.send(at(i, Buf::Data), static_cast<std::size_t>(op.bytes), plan_.stage_peers.at(op.peer), res_.world, s),
          "ncclSend", label(i));
    else
      check_.nccl(
          api_.recv(at(i, Buf::Data), static_cast<std::size_t>(op.bytes), plan_.stage_peers.at(op.peer), res_.world, s),
          "ncclRecv", label(i));
  }

  // A loss call's targets, zeroed before its timed window: its buffer holds the arena's last
  // contents, and negative ids would mark rows as ignored (kernel_call.h, targets_operand).
  void valid_targets(int i, StreamH s) {
    const KernelCall& call = calls_[static_cast<std::size_t>(i)];
    if (const int j = targets_operand(call); j >= 0)
      check_.cuda(
          api_.memset_async(call.operand(reinterpret_cast<float*>(at(i, Buf::Args)), j), 0, targets_bytes(call), s),
          "cudaMemsetAsync", label(i) + " (its targets)");
  }

  void issue_compute(int i, StreamH s) {
    const Op& op = role_.ops[i];
    const Kernel& k = op.kernel;
    if (k.kind == KernelKind::Gemm) {
      if (k.m <= 0 || k.n <= 0 || k.k <= 0) return;
      DType t = DType::Fp32;
      if (k.dtype_bytes == 2)
        t = opt_.fp16 ? DType::Fp16 : DType::Bf16;
      else if (k.dtype_bytes != 4)
        throw Error(
            fmt::format("backend cuda: {}: GEMMs of {}-byte elements are not supported (2: bf16/fp16, "
                        "4: fp32)",
                        label(i), k.dtype_bytes));
      check_.cublas(api_.gemm(res_.blas[static_cast<std::size_t>(op.stream)], k.m, k.n, k.k, t, operand(i, Buf::A),
                              operand(i, Buf::B), at(i, Buf::C)),
                    "cublasGemmEx", label(i));
      return;
    }
    const KernelCall& call = calls_[static_cast<std::size_t>(i)];
    check_.cuda(api_.kernel(call, reinterpret_cast<float*>(at(i, Buf::Args)), s), call.text(), label(i));
  }

  void issue_collective(int i, StreamH s) {
    const Op& op = role_.ops[i];
    const CollectiveSpec& spec = specs_[static_cast<std::size_t>(i)];
    if (spec.bytes == 0 || spec.ranks < 2) return;
    const AxisComm& group = plan_.axis(op.axis);
    CommH comm = comms_.at(op.axis);
    const std::string where = label(i);
    const auto bytes = static_cast<std::size_t>(spec.bytes);
    if (spec.kind == CollKind::SendRecv) {  // ring shift along the axis
      const int p = spec.ranks;
      check_.nccl(api_.group_start(), "ncclGroupStart", where);
      check_.nccl(api_.send(at(i, Buf::Send), bytes, (group.key + 1) % p, comm, s), "ncclSend", where);
      check_.nccl(api_.recv(at(i, Buf::Recv), bytes, (group.key + p - 1) % p, comm, s), "ncclRecv", where);
      check_.nccl(api_.group_end(), "ncclGroupEnd", where);
      return;
    }
    if (opt_.native_collectives) {
      issue_native(i, s, comm, group.key);
      return;
    }
    const StepProgram& prog = *programs_[static_cast<std::size_t>(i)];
    const bool shared = spec.kind != CollKind::AllToAll;
    char* send = shared ? at(i, Buf::Data) : at(i, Buf::Send);
    char* recv = shared ? send : at(i, Buf::Recv);
    const Region& recv_region = ws_.region(i, shared ? Buf::Data : Buf::Recv);
    const Region& send_region = ws_.region(i, shared ? Buf::Data : Buf::Send);
    char* stage = at(i, Buf::Stage);
    char* snapshot = at(i, Buf::Snapshot);
    if (!shared) {  // the block a rank keeps for itself
      const RankBuffers rb = rank_buffers(spec, group.key);
      check_.cuda(api_.stream_pass(reinterpret_cast<float*>(recv + rb.self_recv),
                                   reinterpret_cast<const float*>(send + rb.self_send),
                                   static_cast<std::size_t>(rb.own / kFloat), s),
                  "stream_pass kernel (own block)", where);
    }
    Step st;
    const int steps = prog.num_steps(group.key);
    for (int k = 0; k < steps; ++k) {
      st.clear();
      prog.step(group.key, k, st);
      const StepLayout l = cuda_step_layout(st, shared);
      auto in_bounds = [&](const Transfer& t, const Region& r, const char* what) {
        if (t.offset < 0 || t.bytes < 0 || t.offset + t.bytes > r.bytes || t.offset % kFloat != 0 ||
            t.bytes % kFloat != 0 || t.peer < 0 || t.peer >= spec.ranks || t.peer == group.key)
          check_.fail(where, fmt::format("step {}: {} [{}, +{}) to/from peer {} does not fit the {}-byte buffer of a "
                                         "{}-rank group (a malformed step program)",
                                         k, what, t.offset, t.bytes, t.peer, r.bytes, spec.ranks));
      };
      for (std::size_t j = 0; j < st.sends.size(); ++j) {
        in_bounds(st.sends[j], send_region, "send");
        if (l.send_snapshot[j] >= 0 && st.sends[j].bytes > 0)
          check_.cuda(api_.stream_pass(reinterpret_cast<float*>(snapshot + l.send_snapshot[j]),
                                       reinterpret_cast<const float*>(send + st.sends[j].offset),
                                       static_cast<std::size_t>(st.sends[j].bytes / kFloat), s),
                      "stream_pass kernel (snapshot)", where);
      }
      for (const Transfer& t : st.recvs) in_bounds(t, recv_region, "receive");
      check_.nccl(api_.group_start(), "ncclGroupStart", where);
      for (std::size_t j = 0; j < st.sends.size(); ++j) {
        const Transfer& t = st.sends[j];
        if (t.bytes == 0) continue;
        const char* src = l.send_snapshot[j] >= 0 ? snapshot + l.send_snapshot[j] : send + t.offset;
        check_.nccl(api_.send(src, static_cast<std::size_t>(t.bytes), t.peer, comm, s), "ncclSend", where);
      }
      for (std::size_t j = 0; j < st.recvs.size(); ++j) {
        const Transfer& t = st.recvs[j];
        if (t.bytes == 0) continue;
        char* dst = l.recv_stage[j] >= 0 ? stage + l.recv_stage[j] : recv + t.offset;
        check_.nccl(api_.recv(dst, static_cast<std::size_t>(t.bytes), t.peer, comm, s), "ncclRecv", where);
      }
      check_.nccl(api_.group_end(), "ncclGroupEnd", where);
      for (std::size_t j = 0; j < st.recvs.size(); ++j) {  // staged receives, in receive order
        const Transfer& t = st.recvs[j];
        if (l.recv_stage[j] < 0 || t.bytes == 0) continue;
        auto* dst = reinterpret_cast<float*>(recv + t.offset);
        const auto* src = reinterpret_cast<const float*>(stage + l.recv_stage[j]);
        const auto count = static_cast<std::size_t>(t.bytes / kFloat);
        if (st.op == RecvOp::Reduce)
          check_.cuda(api_.reduce_sum(dst, src, count, s), "reduce_sum kernel", where);
        else
          check_.cuda(api_.stream_pass(dst, src, count, s), "stream_pass kernel (staged copy)", where);
      }
    }
  }

  void issue_native(int i, StreamH s, CommH comm, int grank) {
    const CollectiveSpec& spec = specs_[static_cast<std::size_t>(i)];
    const std::size_t count = static_cast<std::size_t>(spec.bytes / kFloat);
    const auto p = static_cast<std::size_t>(spec.ranks);
    const auto r = static_cast<std::size_t>(grank);
    const char* call = "ncclAllReduce";
    int status = 0;
    switch (spec.kind) {
      case CollKind::AllGather: {  // in place: rank r's block sits at slice r
        char* data = at(i, Buf::Data);
        call = "ncclAllGather";
        status = api_.collective(spec.kind, data + r * (count / p) * kFloat, data, count / p, DType::Fp32, 0, comm, s);
        break;
      }
      case CollKind::ReduceScatter: {  // in place: rank r keeps slice r
        char* data = at(i, Buf::Data);
        call = "ncclReduceScatter";
        status = api_.collective(spec.kind, data, data + r * (count / p) * kFloat, count / p, DType::Fp32, 0, comm, s);
        break;
      }
      case CollKind::AllToAll:
        call = "ncclAlltoAll";
        status = api_.collective(spec.kind, at(i, Buf::Send), at(i, Buf::Recv), count / p, DType::Fp32, 0, comm, s);
        break;
      default:
        call = spec.kind == CollKind::Broadcast ? "ncclBroadcast"
               : spec.kind == CollKind::Reduce  ? "ncclReduce"
                                                : "ncclAllReduce";
        status = api_.collective(spec.kind, at(i, Buf::Data), at(i, Buf::Data), count, DType::Fp32, spec.root, comm, s);
        break;
    }
    check_.nccl(status, call, label(i));
  }

  // Numerics: wait for the previous op of the stream (it shares the arena), then copy the input in.
  void fill_input(int i) {
    const Op& op = role_.ops[i];
    const int prev = last_on_stream_[static_cast<std::size_t>(op.stream)];
    if (prev >= 0) dog_.wait(end_event(prev), label(prev));
    const CollectiveSpec& spec = specs_[static_cast<std::size_t>(i)];
    const int grank = plan_.axis(op.axis).key;
    const std::vector<float> in = opt_.data.input(i, spec, grank);
    const bool shared = spec.kind != CollKind::AllToAll;
    const Region& r = ws_.region(i, shared ? Buf::Data : Buf::Send);
    if (static_cast<std::int64_t>(in.size()) * kFloat > r.bytes)
      throw Error(
          fmt::format("backend cuda: {}: input of {} floats exceeds its {}-byte buffer", label(i), in.size(), r.bytes));
    check_.cuda(api_.memcpy_to_device(at(i, shared ? Buf::Data : Buf::Send), in.data(), in.size() * sizeof(float)),
                "cudaMemcpy (input)", label(i));
  }

  void read_output(int i) {
    dog_.wait(end_event(i), label(i));
    const Op& op = role_.ops[i];
    const CollectiveSpec& spec = specs_[static_cast<std::size_t>(i)];
    const int grank = plan_.axis(op.axis).key;
    const bool shared = spec.kind != CollKind::AllToAll;
    const std::int64_t bytes = rank_buffers(spec, grank).recv;
    std::vector<float> out(static_cast<std::size_t>(bytes / kFloat));
    check_.cuda(api_.memcpy_to_host(out.data(), at(i, shared ? Buf::Data : Buf::Recv), out.size() * sizeof(float)),
                "cudaMemcpy (output)", label(i));
    if (opt_.data.output) opt_.data.output(i, spec, grank, std::move(out));
  }

  GpuApi& api_;
  const AlgorithmRegistry& registry_;
  const CudaExecutorOptions& opt_;
  CommPlan plan_;
  const Role& role_;
  const Schedule& schedule_;
  std::vector<int> order_;                // host issue order (p2p_plan.h)
  std::int64_t pool_a_ = 0, pool_b_ = 0;  // random_operands: the GEMM operand pool's A and B parts
  Checker check_;
  Resources res_;
  Watchdog dog_;
  WorkspacePlan ws_;
  std::vector<CollectiveSpec> specs_;
  std::vector<std::shared_ptr<StepProgram>> programs_;
  std::vector<KernelCall> calls_;  // each non-GEMM compute op's kernel call, made once (kernel_call.h)
  std::map<MeshAxis, CommH> comms_;
  std::vector<int> last_on_stream_ = std::vector<int>(static_cast<std::size_t>(kStreams), -1);
  char* barrier_ = nullptr;
};

}  // namespace

CudaExecutor::CudaExecutor(GpuApi& api, const AlgorithmRegistry& registry, const Placement& placement,
                           CudaExecutorOptions options, WatchClock clock)
    : api_(api), registry_(registry), placement_(placement), opt_(std::move(options)), clock_(std::move(clock)) {}

Trace CudaExecutor::execute(const Schedule& schedule) {
  Run run(api_, registry_, placement_, opt_, clock_, schedule);
  return run.go();
}

}  // namespace meshsim::cuda
