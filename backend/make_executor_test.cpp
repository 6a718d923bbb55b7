// make_executor and the backend names: the names round-trip through their tables, a wrong
// name is the flag's error naming every valid value, and each (backend, schedule) gets its
// executor. The cuda executor is made on a fake GpuApi (no GPU needed); only the paths
// through the real GPU discovery depend on this machine, and they say when they skip.
#include "backend/make_executor.h"

#include <gtest/gtest.h>

#include "backend/cpu/test_util.h"
#include "backend/cpu/training_exec.h"
#include "backend/cpu/transport.h"
#include "backend/cuda/cuda_executor.h"
#include "backend/cuda/fake_gpu_api.h"
#include "backend/launch/rendezvous.h"
#include "core/test_util.h"
#include "schedule/plan.h"
#include "topology/presets.h"

namespace meshsim {
namespace {

using testing_util::contains;
using testing_util::error_of;
using namespace std::chrono_literals;

TEST(BackendNames, RoundTripThroughTheirTables) {
  for (Backend b : {Backend::Cpu, Backend::Cuda}) EXPECT_EQ(parse_backend(to_string(b)), b);
  for (CollectivesMode c : {CollectivesMode::Ours, CollectivesMode::Nccl})
    EXPECT_EQ(parse_collectives_mode(to_string(c)), c);
  // The flags' values: what run, validate and calibrate accept and pass on to their ranks.
  EXPECT_STREQ(to_string(Backend::Cpu), "cpu");
  EXPECT_STREQ(to_string(Backend::Cuda), "cuda");
  EXPECT_STREQ(to_string(CollectivesMode::Ours), "ours");
  EXPECT_STREQ(to_string(CollectivesMode::Nccl), "nccl");
}

// The messages are the flags' (tests/run_test.cpp matches them end to end) and name every
// value of the tables, so a value added to a table without its words fails here.
TEST(BackendNames, AWrongNameIsTheFlagsErrorNamingEveryValue) {
  const std::string backend = error_of([] { parse_backend("tpu"); });
  EXPECT_EQ(backend, "--backend: 'tpu' is not a backend; use --backend cpu (processes over TCP) or cuda (GPUs)");
  for (Backend b : {Backend::Cpu, Backend::Cuda})
    EXPECT_TRUE(contains(backend, std::string(" ") + to_string(b) + " ")) << to_string(b);
  const std::string coll = error_of([] { parse_collectives_mode("mpi"); });
  EXPECT_EQ(coll, "--collectives: 'mpi' is not known; use ours (our step programs) or nccl");
  for (CollectivesMode c : {CollectivesMode::Ours, CollectivesMode::Nccl})
    EXPECT_TRUE(contains(coll, std::string(" ") + to_string(c))) << to_string(c);
  // Exact names only: no case folding, no prefixes.
  EXPECT_NE(error_of([] { parse_backend("CPU"); }), "(no error)");
  EXPECT_NE(error_of([] { parse_backend(""); }), "(no error)");
  EXPECT_NE(error_of([] { parse_collectives_mode("ours "); }), "(no error)");
}

// A collective workload of `ranks` ranks: `iterations` ring all-reduces of 4 KiB.
Schedule workload(int ranks, int iterations) {
  CollectiveWorkload w;
  w.kind = CollKind::AllReduce;
  w.bytes = 4096;
  w.ranks = ranks;
  w.iterations = iterations;
  w.algorithm = "ring";
  return plan_collectives(w);
}

struct OneRank {
  Topology topo = make_preset("switch", {{"gpus_per_node", "2"}});
  AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  Schedule schedule = workload(1, 2);
  Placement placement = Placement::natural(Mesh{schedule.axes}, topo);
};

TEST(MakeExecutor, CpuCollectiveWorkloadIsTheCpuExecutorAndReportsItsNumerics) {
  OneRank s;
  cpu::InMemoryDirectory dir;
  cpu::Transport solo(0, 1, dir);
  std::vector<cpu::NumericsCheck> checks;
  ExecutorOptions o;
  o.transport = &solo;
  o.checks = &checks;
  const std::unique_ptr<Executor> ex = make_executor(s.registry, s.placement, o);
  EXPECT_NE(dynamic_cast<cpu::CpuExecutor*>(ex.get()), nullptr);
  EXPECT_EQ(ex->name(), "cpu");
  const Trace t = ex->execute(s.schedule);
  EXPECT_EQ(t.events.size(), 2u);
  ASSERT_EQ(checks.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(checks[static_cast<std::size_t>(i)].op, i);
    EXPECT_TRUE(checks[static_cast<std::size_t>(i)].checked);
    EXPECT_EQ(checks[static_cast<std::size_t>(i)].max_abs_error, 0.0);
  }
}

TEST(MakeExecutor, CpuTrainingIsTheTrainingExecutor) {
  OneRank s;
  launch::RendezvousServer server({.token = "t"});
  launch::RendezvousClientOptions co;
  co.port = server.port();
  co.token = "t";
  launch::RendezvousClient store(co);
  ExecutorOptions o;
  o.schedule = ScheduleKind::Training;
  o.store = &store;
  o.token = "t";
  const std::unique_ptr<Executor> ex = make_executor(s.registry, s.placement, o);
  EXPECT_NE(dynamic_cast<cpu::TrainingExecutor*>(ex.get()), nullptr);
  EXPECT_EQ(ex->name(), "cpu");
}

TEST(MakeExecutor, CpuRefusesNcclCollectivesAndMissingConnections) {
  OneRank s;
  cpu::InMemoryDirectory dir;
  cpu::Transport solo(0, 1, dir);
  ExecutorOptions o;
  o.transport = &solo;
  o.collectives = CollectivesMode::Nccl;
  EXPECT_EQ(error_of([&] { make_executor(s.registry, s.placement, o); }),
            "--collectives nccl: native NCCL collectives need --backend cuda");
  o.collectives = CollectivesMode::Ours;
  o.transport = nullptr;
  EXPECT_TRUE(contains(error_of([&] { make_executor(s.registry, s.placement, o); }), "over a transport; none given"));
  o.schedule = ScheduleKind::Training;
  EXPECT_TRUE(contains(error_of([&] { make_executor(s.registry, s.placement, o); }), "rendezvous store; none given"));
}

// With the device given and a GpuApi of the caller's, nothing probes the machine: the cuda
// executor, for either collectives mode, on any machine.
TEST(MakeExecutor, CudaIsTheCudaExecutor) {
  OneRank s;
  cuda::FakeGpuApi api;
  for (CollectivesMode c : {CollectivesMode::Ours, CollectivesMode::Nccl}) {
    ExecutorOptions o;
    o.backend = Backend::Cuda;
    o.collectives = c;
    o.device = 0;
    o.gpu_api = &api;
    const std::unique_ptr<Executor> ex = make_executor(s.registry, s.placement, o);
    EXPECT_NE(dynamic_cast<cuda::CudaExecutor*>(ex.get()), nullptr) << to_string(c);
    EXPECT_EQ(ex->name(), "cuda");
  }
}

// The cuda backend checks a collective workload's numerics as the cpu backend does: inputs
// seeded alike, every op's result against the serial reference. Two ranks on fakes sharing
// one wire (on one rank the cuda executor moves nothing): the fake moves no data either, so
// what is checked here is that every op's result reaches the checks, not its values.
TEST(MakeExecutor, CudaChecksEveryOpOfACollectiveWorkload) {
  const Topology topo = make_preset("switch", {{"gpus_per_node", "2"}});
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  const Schedule schedule = workload(2, 2);
  const Placement placement = Placement::natural(Mesh{schedule.axes}, topo);
  launch::RendezvousServer server({.token = "t"});
  cuda::FakeWire wire;
  std::vector<cuda::FakeGpuApi> apis(2);
  std::vector<std::vector<cpu::NumericsCheck>> checks(2);
  const std::vector<std::string> errors = cpu::testing::run_ranks(2, [&](int rank) {
    launch::RendezvousClientOptions co;
    co.port = server.port();
    co.token = "t";
    co.rank = rank;
    launch::RendezvousClient store(co);
    apis[static_cast<std::size_t>(rank)].wire = &wire;
    ExecutorOptions o;
    o.backend = Backend::Cuda;
    o.rank = rank;
    o.world = 2;
    o.device = 0;
    o.gpu_api = &apis[static_cast<std::size_t>(rank)];
    o.store = &store;
    o.timeout = 5s;
    o.checks = &checks[static_cast<std::size_t>(rank)];
    const Trace t = make_executor(registry, placement, o)->execute(schedule);
    EXPECT_EQ(t.events.size(), 2u);
  });
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_EQ(errors[static_cast<std::size_t>(rank)], "") << "rank " << rank;
    const auto& c = checks[static_cast<std::size_t>(rank)];
    ASSERT_EQ(c.size(), 2u) << "rank " << rank;
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(c[static_cast<std::size_t>(i)].op, i);
      EXPECT_TRUE(c[static_cast<std::size_t>(i)].checked) << "rank " << rank << " op " << i;
    }
  }
}

// Without a GPU (or without the CUDA plugin), asking for this rank's GPU is the one error
// every command gives for --backend cuda. With a GPU the same call makes the cuda executor.
TEST(MakeExecutor, CudaWithoutAGpuIsTheBackendCudaError) {
  const cuda::DeviceInfo info = cuda::probe_devices();
  if (info.count > 0) GTEST_SKIP() << "this machine has " << info.count << " GPU(s); this tests the no-GPU path";
  const std::string want =
      "--backend cuda: no GPU found (" + info.reason + "); use --backend cpu or run on a GPU machine";
  EXPECT_EQ(error_of([] { require_cuda_devices(); }), want);
  OneRank s;
  ExecutorOptions o;
  o.backend = Backend::Cuda;
  EXPECT_EQ(error_of([&] { make_executor(s.registry, s.placement, o); }), want);
}

TEST(MakeExecutor, CudaOnThisMachinesGpu) {
  const cuda::DeviceInfo info = cuda::probe_devices();
  if (info.count == 0) GTEST_SKIP() << "no GPU on this machine (" << info.reason << ")";
  EXPECT_EQ(require_cuda_devices().count, info.count);
  OneRank s;
  ExecutorOptions o;
  o.backend = Backend::Cuda;
  const std::unique_ptr<Executor> ex = make_executor(s.registry, s.placement, o);
  EXPECT_NE(dynamic_cast<cuda::CudaExecutor*>(ex.get()), nullptr);
}

}  // namespace
}  // namespace meshsim
