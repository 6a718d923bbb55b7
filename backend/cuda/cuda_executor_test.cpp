// The cuda executor's control flow on a fake GpuApi: which calls it makes, in what order,
// with what arguments, what Trace it builds, and how it fails. No GPU needed.
#include "backend/cuda/cuda_executor.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backend/cuda/fake_gpu_api.h"
#include "backend/cuda/plugin.h"
#include "backend/cuda/workspace.h"
#include "core/test_util.h"
#include "topology/presets.h"

namespace meshsim::cuda {
namespace {

using testing_util::contains;
using testing_util::error_of;
using namespace std::chrono_literals;

Op gemm(const std::string& name, std::int64_t m, std::int64_t n, std::int64_t k, int dtype, std::vector<int> deps) {
  Op op;
  op.name = name;
  op.kernel = Kernel::gemm(m, n, k, dtype);
  op.deps = std::move(deps);
  return op;
}
Op coll(const std::string& axis, int size, Bytes bytes, Stream s, std::vector<int> deps) {
  Op op;
  op.kind = OpKind::Collective;
  op.stream = s;
  op.name = axis + ".allreduce";
  op.axis = MeshAxis::parse(axis, "axis");
  op.group_size = size;
  op.bytes = bytes;
  op.algorithm = "ring";
  op.deps = std::move(deps);
  return op;
}

// Two ranks along dp: fc1 (GEMM), norm after it, a dp all-reduce after fc1 on its own
// stream, then an fp32 GEMM after the all-reduce.
Schedule small() {
  Schedule s;
  s.axes = {{"dp", 2}};
  s.pp_axis = {};
  Op norm;
  norm.name = "norm";
  norm.kernel = Kernel::rowwise(KernelKind::Norm, KernelFn::LayerNorm, 8, 64, 1, 4096, 2);
  norm.deps = {0};
  s.roles = {Role{
      "all",
      0,
      {gemm("fc1", 64, 32, 16, 2, {}), norm, coll("dp", 2, 1024, Stream::Dp, {0}), gemm("head", 8, 8, 8, 4, {2})}}};
  return s;
}

struct Fixture {
  Topology topo = make_preset("switch", {{"nodes", "1"}, {"gpus_per_node", "4"}});
  AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  FakeGpuApi api;
  SteadyTime now{};
  std::string shared_id;

  CudaExecutorOptions options(int rank) {
    CudaExecutorOptions o;
    o.rank = rank;
    o.share_id = [this](const std::string& mine) {
      if (!mine.empty()) shared_id = mine;
      return std::string(kUniqueIdBytes, 'u');
    };
    o.watchdog.timeout = 100ms;
    o.watchdog.poll = 10ms;
    return o;
  }
  WatchClock clock() {
    return {[this] { return now; }, [this](std::chrono::microseconds d) { now += d; }};
  }
  Trace run(const Schedule& s, const CudaExecutorOptions& o) {
    const Placement pl = Placement::natural(Mesh{s.axes}, topo);
    CudaExecutor ex(api, registry, pl, o, clock());
    return ex.execute(s);
  }
};

TEST(CudaExecutor, IssuesEveryOpOnItsStreamWithCrossStreamWaits) {
  Fixture f;
  const Trace t = f.run(small(), f.options(1));
  const FakeGpuApi& a = f.api;
  EXPECT_TRUE(a.has("set_device 0"));
  EXPECT_EQ(a.count("malloc"), 1);         // one workspace, nothing allocated during the step
  EXPECT_EQ(a.count("get_unique_id"), 0);  // rank 1 gets rank 0's
  EXPECT_TRUE(a.has("comm_init_rank n=2 rank=1"));
  EXPECT_EQ(a.count("comm_split"), 0);  // the dp group is the whole world
  // Streams: #1 compute, #2 dp. Events: #1 the rank's start, then (start, end) per op.
  EXPECT_TRUE(a.has("collective allreduce count=1 fp32 root=0 on comm#1"));  // start barrier
  EXPECT_TRUE(a.has("record event#1 on stream#1"));
  EXPECT_TRUE(a.has("wait stream#2 for event#1"));
  EXPECT_TRUE(a.has("wait stream#2 for event#3"));   // all-reduce waits for fc1's end
  EXPECT_TRUE(a.has("wait stream#1 for event#7"));   // head waits for the all-reduce's end
  EXPECT_FALSE(a.has("wait stream#1 for event#3"));  // norm follows fc1 on the same stream
  EXPECT_TRUE(a.has("gemm 64x32x16 bf16 blas#1"));
  EXPECT_TRUE(a.has("gemm 8x8x8 fp32 blas#1"));
  EXPECT_TRUE(a.has("blas_set_workspace blas#1 " + std::to_string(kCublasWorkspace)));
  EXPECT_TRUE(a.has("kernel layernorm_fwd 8x64 bf16"));  // norm: our LayerNorm on its rows x cols, bf16 as planned
  // Ring all-reduce of 1024 bytes on 2 ranks: one reduce-scatter and one all-gather step,
  // each one NCCL group with a 512-byte send and receive; the reduction after the first.
  EXPECT_EQ(a.count("group_start"), 2);
  EXPECT_EQ(a.count("send 512 to 0 on comm#1"), 2);
  EXPECT_EQ(a.count("recv 512 from 0 on comm#1"), 2);
  EXPECT_EQ(a.count("reduce_sum 128"), 1);
  // Trace: fake records are 0.5 ms apart: start at 0.5, op i from 1.0 + i ms to 1.5 + i ms.
  EXPECT_EQ(t.source, "cuda");
  ASSERT_EQ(t.events.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const TraceEvent& e = t.events[static_cast<std::size_t>(i)];
    EXPECT_EQ(e.op, i);
    EXPECT_EQ(e.role, 0);
    EXPECT_EQ(e.rank, 1);
    EXPECT_EQ(e.start.ps(), (500'000'000LL + i * 1'000'000'000LL));
    EXPECT_EQ(e.end.ps(), (1'000'000'000LL + i * 1'000'000'000LL));
  }
  // Everything released, the communicator destroyed (not aborted).
  EXPECT_EQ(a.count("event_destroy"), 9);
  EXPECT_EQ(a.count("stream_destroy"), 2);
  EXPECT_EQ(a.count("blas_destroy"), 1);
  EXPECT_EQ(a.count("free"), 1);
  EXPECT_TRUE(a.has("comm_destroy comm#1"));
  EXPECT_EQ(a.count("abort"), 0);
}

TEST(CudaExecutor, RankZeroMakesTheUniqueId) {
  Fixture f;
  f.run(small(), f.options(0));
  EXPECT_EQ(f.api.count("get_unique_id"), 1);
  EXPECT_EQ(f.shared_id, std::string(kUniqueIdBytes, 'u'));
  EXPECT_TRUE(f.api.has("comm_init_rank n=2 rank=0"));
}

TEST(CudaExecutor, NativeCollectivesAndFp16) {
  Fixture f;
  CudaExecutorOptions o = f.options(1);
  o.native_collectives = true;
  o.fp16 = true;
  f.run(small(), o);
  EXPECT_TRUE(f.api.has("collective allreduce count=256 fp32 root=0 on comm#1"));
  EXPECT_EQ(f.api.count("send"), 0);
  EXPECT_TRUE(f.api.has("gemm 64x32x16 fp16 blas#1"));
}

TEST(CudaExecutor, SplitsPerAxisAndUsesEachGroupsCommunicator) {
  Fixture f;
  Schedule s;
  s.axes = {{"dp", 2}, {"tp", 2}};
  s.pp_axis = {};
  s.roles = {Role{"all", 0, {coll("tp", 2, 64, Stream::Tp, {}), coll("dp", 2, 128, Stream::Dp, {})}}};
  f.run(s, f.options(3));
  // Axes split in name order: dp ({1, 3}: color 1, key 1) -> comm#2, tp ({2, 3}) -> comm#3.
  std::vector<std::string> splits;
  for (const std::string& l : f.api.log)
    if (l.rfind("comm_split", 0) == 0) splits.push_back(l);
  EXPECT_EQ(splits, (std::vector<std::string>{"comm_split color=1 key=1", "comm_split color=1 key=1"}));
  EXPECT_EQ(f.api.count("send 32 to 0 on comm#3"), 2);  // tp: 64 bytes, chunks of 32
  EXPECT_EQ(f.api.count("send 64 to 0 on comm#2"), 2);  // dp: 128 bytes
  EXPECT_TRUE(f.api.has("comm_destroy comm#2"));
  EXPECT_TRUE(f.api.has("comm_destroy comm#3"));
}

TEST(CudaExecutor, PipelineSendRecvUseTheWorldCommunicatorAndPeerRank) {
  Fixture f;
  Schedule s;
  s.axes = {{"pp", 2}};
  s.pp_axis = MeshAxis::pp();
  Op send, recv;
  send.kind = OpKind::Send;
  send.stream = Stream::Pp;
  send.peer = 1;
  send.bytes = 1000;
  recv = send;
  recv.kind = OpKind::Recv;
  recv.peer = 0;
  s.roles = {Role{"stage 0", 0, {send}}, Role{"stage 1", 1, {recv}}};
  const Trace t = f.run(s, f.options(1));
  EXPECT_TRUE(f.api.has("recv 1000 from 0 on comm#1"));
  ASSERT_EQ(t.events.size(), 1u);
  EXPECT_EQ(t.events[0].role, 1);
}

// fp32_kernels (--kernels fp32): the 2-byte model's LayerNorm runs our float32 kernel, in a
// workspace sized for float32 operands; GEMMs keep the model's dtype.
TEST(CudaExecutor, Fp32KernelsRunTheFloatKernelsOfATwoByteModel) {
  Fixture f;
  CudaExecutorOptions o = f.options(1);
  o.fp32_kernels = true;
  f.run(small(), o);
  EXPECT_TRUE(f.api.has("kernel layernorm_fwd 8x64"));
  EXPECT_FALSE(f.api.has("kernel layernorm_fwd 8x64 bf16"));
  EXPECT_TRUE(f.api.has("gemm 64x32x16 bf16 blas#1"));
}

// warmup = 2: the role runs three times, the barrier before each; the times are the last
// pass's. random_operands: the GEMMs read a pool of calibrate's random words, copied in
// once, instead of their buffers in the arena.
TEST(CudaExecutor, WarmupPassesRunFirstAndGemmOperandsAreRandom) {
  Fixture f;
  CudaExecutorOptions o = f.options(1);
  o.warmup = 2;
  o.random_operands = true;
  const Trace t = f.run(small(), o);
  const FakeGpuApi& a = f.api;
  EXPECT_EQ(a.count("collective allreduce count=1 fp32 root=0 on comm#1"), 3);
  EXPECT_EQ(a.count("gemm 64x32x16 bf16 blas#1"), 3);
  EXPECT_EQ(a.count("kernel layernorm_fwd 8x64 bf16"), 3);
  EXPECT_EQ(a.count("send 512 to 0 on comm#1"), 6);
  EXPECT_EQ(a.count("memset"), 1);
  EXPECT_EQ(a.count("memcpy_to_device"), 1);  // the operand pool, once (under 16 MiB: one copy)
  ASSERT_EQ(t.events.size(), 4u);
  for (const TraceEvent& e : t.events) EXPECT_EQ((e.end - e.start).ps(), 500'000'000LL);  // one record apart
  // Without: one memset of the whole workspace, nothing copied, each op once.
  Fixture g;
  g.run(small(), g.options(1));
  EXPECT_EQ(g.api.count("memset"), 1);
  EXPECT_EQ(g.api.count("memcpy_to_device"), 0);
  EXPECT_EQ(g.api.count("gemm 64x32x16 bf16 blas#1"), 1);
  // The pool holds the largest A (fc1's 64x16 bf16, 2048 bytes) and the largest B (16x32,
  // 1024), which leave fc1's buffers in the arena, the compute stream's largest op: the
  // workspace has the same size either way.
  const auto malloc_line = [](const FakeGpuApi& api) {
    for (const std::string& l : api.log)
      if (l.rfind("malloc ", 0) == 0) return l;
    return std::string("none");
  };
  EXPECT_EQ(malloc_line(a), malloc_line(g.api));
  EXPECT_NE(malloc_line(a), "none");
}

// The loss's target ids are zeroed before its call, outside its timed window: in the arena
// they hold whatever the last op left, and a negative id marks a row the backward skips.
TEST(CudaExecutor, LossTargetsAreValidBeforeTheCall) {
  Schedule s;
  s.axes = {{"dp", 1}};
  s.pp_axis = {};
  Op ce;
  ce.name = "cross_entropy.bwd";
  ce.phase = Phase::Backward;
  ce.kernel = Kernel::rowwise(KernelKind::Softmax, KernelFn::CrossEntropy, 8, 64, 1, 2.0 * 4 * 8 * 64, 4);
  s.roles = {Role{"all", 0, {ce}}};
  Fixture f;
  f.run(s, f.options(0));
  const std::vector<std::string>& log = f.api.log;
  const auto at = [&](const std::string& line) { return std::find(log.begin(), log.end(), line) - log.begin(); };
  const auto kernel = at("kernel cross_entropy_bwd 8x64");
  ASSERT_LT(kernel, static_cast<std::ptrdiff_t>(log.size()));
  EXPECT_EQ(log[static_cast<std::size_t>(kernel - 2)], "memset 64");  // 8 ids of 8 bytes, then the start event
  EXPECT_EQ(log[static_cast<std::size_t>(kernel - 1)].rfind("record ", 0), 0u)
      << log[static_cast<std::size_t>(kernel - 1)];
}

TEST(CudaExecutor, CollectiveDataIsFilledAndReadBackFromTheOpsBuffer) {
  Fixture f;
  CudaExecutorOptions o = f.options(1);
  std::vector<float> got;
  o.data.input = [](int op, const CollectiveSpec& spec, int group_rank) {
    EXPECT_EQ(op, 2);
    EXPECT_EQ(group_rank, 1);
    std::vector<float> v(static_cast<std::size_t>(spec.bytes / 4));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
    return v;
  };
  o.data.output = [&](int, const CollectiveSpec&, int, std::vector<float> r) { got = std::move(r); };
  f.run(small(), o);
  // The fake moves no data and the staging area is zeroed: the result is the input.
  ASSERT_EQ(got.size(), 256u);
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(i));
  EXPECT_EQ(f.api.count("memcpy_to_device"), 1);
  EXPECT_EQ(f.api.count("memcpy_to_host"), 1);
}

// A skewed MoE all-to-all (the busiest expert receives imbalance x the mean block) runs
// with the per-pair sizes the simulator times (schedule's collective_spec), not even blocks.
TEST(CudaExecutor, SkewedAllToAllMovesThePlannedBlocks) {
  Fixture f;
  Schedule s;
  s.axes = {{"ep", 2}};
  s.pp_axis = {};
  Op a2a = coll("ep", 2, 1024, Stream::Ep, {});
  a2a.coll = CollKind::AllToAll;
  a2a.algorithm = "pairwise";
  a2a.imbalance = 1.5;
  s.roles = {Role{"all", 0, {a2a}}};
  f.run(s, f.options(1));
  // Mean block 512: rank 0 (the busiest destination) receives 1.5 x 512 = 768 from rank 1,
  // rank 1 receives the rest, 0.5 x 512 = 256, from rank 0.
  EXPECT_TRUE(f.api.has("send 768 to 0 on comm#1")) << testing::PrintToString(f.api.log);
  EXPECT_TRUE(f.api.has("recv 256 from 0 on comm#1"));
  CudaExecutorOptions native = f.options(1);
  native.native_collectives = true;
  EXPECT_TRUE(contains(error_of([&] { f.run(s, native); }), "native ncclAlltoAll moves even blocks"));
}

TEST(CudaExecutor, FailingCallNamesRankAndOpAbortsAndReleases) {
  Fixture f;
  f.api.fail("gemm", 13, /*after=*/1);  // the second GEMM fails
  const std::string msg = error_of([&] { f.run(small(), f.options(1)); });
  EXPECT_EQ(msg,
            "backend cuda: rank 1: op 'head' (#3 of role 0): cublasGemmEx failed: cuBLAS error 13 (fake cuBLAS "
            "error 13); NCCL communicators aborted");
  EXPECT_TRUE(f.api.has("abort comm#1"));
  EXPECT_FALSE(f.api.has("comm_destroy comm#1"));  // aborted communicators are not destroyed again
  EXPECT_EQ(f.api.count("free"), 1);
  EXPECT_EQ(f.api.count("event_destroy"), 9);
}

TEST(CudaExecutor, SetupFailureBeforeAnyCommunicator) {
  Fixture f;
  f.api.fail("malloc", 2);  // cudaErrorMemoryAllocation
  const std::string msg = error_of([&] { f.run(small(), f.options(0)); });
  EXPECT_TRUE(contains(msg, "backend cuda: rank 0: setup: workspace of ")) << msg;
  EXPECT_TRUE(contains(msg, "cudaMalloc failed: CUDA error 2"));
  EXPECT_EQ(f.api.count("abort"), 0);
}

TEST(CudaExecutor, AsyncErrorWhileWaitingAbortsAndNamesTheOldestUnfinishedOp) {
  Fixture f;
  f.api.events_finish = false;
  f.api.async_error = 6;
  const std::string msg = error_of([&] { f.run(small(), f.options(1)); });
  EXPECT_EQ(msg,
            "backend cuda: rank 1: op 'fc1' (#0 of role 0): asynchronous NCCL error 6 (fake NCCL error 6) while "
            "waiting for the op; NCCL communicators aborted");
  EXPECT_TRUE(f.api.has("abort comm#1"));
}

TEST(CudaExecutor, StuckOpTimesOut) {
  Fixture f;
  f.api.events_finish = false;
  const std::string msg = error_of([&] { f.run(small(), f.options(0)); });
  EXPECT_TRUE(contains(msg, "rank 0: op 'fc1' (#0 of role 0): timed out: no progress for 100 ms")) << msg;
  EXPECT_TRUE(f.api.has("abort comm#1"));
}

TEST(CudaExecutor, BoundedOpsInFlight) {
  Fixture f;
  CudaExecutorOptions o = f.options(1);
  o.max_in_flight = 1;
  f.run(small(), o);
  // With one op in flight the host waits for each op before issuing the next: a query
  // before every record of the next op's start event.
  EXPECT_EQ(f.api.count("query"), 4);
  const auto first_query = std::find(f.api.log.begin(), f.api.log.end(), "query");
  const auto second_gemm = std::find(f.api.log.begin(), f.api.log.end(), "gemm 8x8x8 fp32 blas#1");
  EXPECT_LT(first_query, second_gemm);
}

TEST(CudaExecutor, DependencyOnALaterOpIsAnError) {
  Fixture f;
  Schedule s = small();
  s.roles[0].ops[1].deps = {3};
  EXPECT_TRUE(contains(error_of([&] { f.run(s, f.options(0)); }),
                       "op 1 ('norm') depends on op 3, which does not come before it"));
}

// real_gpu_api() comes from the CUDA plugin (plugin.h), which needs the CUDA toolkit and
// NCCL: without one it is a single line naming the file tried and the fix; with this build's
// plugin it is the real API (cudart's text for status 0, no GPU needed).
TEST(CudaExecutor, RealApiNeedsTheToolkitAndNccl) {
  const char* old = std::getenv(kCudaPluginEnv);
  const std::string saved = old == nullptr ? "" : old;
  ::setenv(kCudaPluginEnv, "/nonexistent/libmeshsim_cuda.so", 1);
  const std::string e = error_of([] { real_gpu_api(); });
  EXPECT_TRUE(contains(e, "backend cuda: cannot load the CUDA plugin /nonexistent/libmeshsim_cuda.so: ")) << e;
  EXPECT_TRUE(contains(e, "build meshsim with the CUDA toolkit and NCCL")) << e;
  EXPECT_FALSE(contains(e, "\n")) << e;
#if defined(MESHSIM_CUDA_PLUGIN_FILE)
  ::setenv(kCudaPluginEnv, MESHSIM_CUDA_PLUGIN_FILE, 1);
  EXPECT_EQ(real_gpu_api().error_string(Lib::Cuda, 0), "no error");
#endif
  if (old == nullptr)
    ::unsetenv(kCudaPluginEnv);
  else
    ::setenv(kCudaPluginEnv, saved.c_str(), 1);
}

}  // namespace
}  // namespace meshsim::cuda
