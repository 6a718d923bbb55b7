// Pipeline message groups (p2p_plan.h) and the cuda executor running pipeline schedules
// on fakes whose sends and receives block like NCCL's (FakeWire), one thread per rank.
#include "backend/cuda/p2p_plan.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <future>
#include <thread>

#include "backend/cuda/cuda_executor.h"
#include "backend/cuda/fake_gpu_api.h"
#include "core/test_util.h"
#include "schedule/plan.h"
#include "schedule/test_models.h"
#include "topology/presets.h"

namespace meshsim::cuda {
namespace {

using testing_util::contains;
using testing_util::error_of;
using namespace std::chrono_literals;

Schedule pipeline(int pp, int microbatches, int vchunks = 1) {
  ParallelSpec p;
  p.pp = pp;
  p.microbatches = microbatches;
  p.vchunks = vchunks;
  return plan_iteration(testing::gpt_model(4 * vchunks, 64, 4, 32, 256), p);
}

// "S3"/"R3": the send/receive of tag 3, in issue order.
std::vector<std::string> describe(const Schedule& s, int role, const std::vector<int>& ops) {
  std::vector<std::string> out;
  for (int i : ops) {
    const Op& op = s.roles[role].ops[i];
    out.push_back(std::string(op.kind == OpKind::Send ? "S" : "R") + std::to_string(op.tag));
  }
  return out;
}

TEST(P2pPlan, OneFOneBPostsTheNextActivationReceiveBeforeTheGradientSend) {
  const Schedule s = pipeline(2, 4);
  const auto order = plan_p2p_order(s);
  ASSERT_EQ(order.size(), 2u);
  // tag = (mb * 2 + stage) * 2 + grad: activations of stage 0 are 0, 4, 8, 12; gradients 1, 5, 9, 13.
  // In schedule order stage 1 sends gradient 1 before receiving activation 4 while stage 0
  // sends activation 4 before receiving gradient 1: stage 1's receive moves first.
  EXPECT_EQ(describe(s, 0, order[0]), (std::vector<std::string>{"S0", "S4", "R1", "S8", "R5", "S12", "R9", "R13"}));
  EXPECT_EQ(describe(s, 1, order[1]), (std::vector<std::string>{"R0", "R4", "S1", "R8", "S5", "R12", "S9", "S13"}));
}

TEST(P2pPlan, CrossedSendsAreUncrossedByPostingAReceiveFirst) {
  Schedule s;
  Op send, recv;
  send.kind = OpKind::Send;
  send.stream = Stream::Pp;
  send.bytes = 64;
  recv = send;
  recv.kind = OpKind::Recv;
  Op s0 = send, r0 = recv, s1 = send, r1 = recv;
  s0.peer = r0.peer = 1;
  s1.peer = r1.peer = 0;
  s0.tag = r1.tag = 1;
  s1.tag = r0.tag = 2;
  s.roles = {Role{"stage 0", 0, {s0, r0}}, Role{"stage 1", 1, {s1, r1}}};
  const auto order = plan_p2p_order(s);
  EXPECT_EQ(describe(s, 0, order[0]), (std::vector<std::string>{"S1", "R2"}));
  EXPECT_EQ(describe(s, 1, order[1]), (std::vector<std::string>{"R1", "S2"}));
  EXPECT_EQ(issue_order(s, 1, order[1]), (std::vector<int>{1, 0}));
}

TEST(P2pPlan, IssueOrderKeepsEveryOpOnceAfterItsDepsAndMessagesInOrder) {
  for (const Schedule& s : {pipeline(2, 4), pipeline(4, 8, 2)}) {
    const auto p2p = plan_p2p_order(s);
    for (std::size_t r = 0; r < s.roles.size(); ++r) {
      const auto order = issue_order(s, static_cast<int>(r), p2p[r]);
      const std::vector<Op>& ops = s.roles[r].ops;
      std::vector<int> pos(ops.size(), -1), sent;
      for (std::size_t k = 0; k < order.size(); ++k) {
        ASSERT_EQ(pos[static_cast<std::size_t>(order[k])], -1) << "op issued twice";
        pos[static_cast<std::size_t>(order[k])] = static_cast<int>(k);
        if (ops[static_cast<std::size_t>(order[k])].kind == OpKind::Send ||
            ops[static_cast<std::size_t>(order[k])].kind == OpKind::Recv)
          sent.push_back(order[k]);
      }
      for (std::size_t i = 0; i < ops.size(); ++i) {
        ASSERT_GE(pos[i], 0) << "op " << i << " never issued";
        for (int d : ops[i].deps) EXPECT_LT(pos[static_cast<std::size_t>(d)], pos[i]);
      }
      EXPECT_EQ(sent, p2p[r]) << "role " << r;
    }
  }
}

TEST(P2pPlan, MessageWithoutItsOtherEndIsAnError) {
  Schedule s = pipeline(2, 2);
  for (Op& op : s.roles[1].ops)
    if (op.kind == OpKind::Recv) {
      op.tag = 999;
      break;
    }
  EXPECT_TRUE(contains(error_of([&] { plan_p2p_order(s); }), "which has no matching"));
}

TEST(P2pPlan, MessagesThatWaitForEachOtherAreAnError) {
  // Each stage receives, computes on it, then sends what the other receives: a true cycle.
  Schedule s;
  Op recv, send, comp;
  recv.kind = OpKind::Recv;
  recv.stream = Stream::Pp;
  recv.bytes = 64;
  comp.name = "compute";
  comp.kernel = Kernel::gemm(8, 8, 8, 2);
  comp.deps = {0};
  send = recv;
  send.kind = OpKind::Send;
  send.deps = {1};
  Op r0 = recv, s0 = send, r1 = recv, s1 = send;
  r0.peer = s0.peer = 1;
  r1.peer = s1.peer = 0;
  r0.tag = s1.tag = 1;
  r1.tag = s0.tag = 2;
  s.roles = {Role{"stage 0", 0, {r0, comp, s0}}, Role{"stage 1", 1, {r1, comp, s1}}};
  EXPECT_TRUE(contains(error_of([&] { plan_p2p_order(s); }), "form a cycle"));
}

// The fake models NCCL's blocking: a send before the peer's matching receive, with the peer
// doing the same, deadlocks unless both are in one group.
TEST(FakeWire, UngroupedCrossedSendsDeadlockGroupedOnesComplete) {
  FakeWire wire;
  wire.timeout = 200ms;
  FakeGpuApi a, b;
  a.wire = b.wire = &wire;
  CommH ca = nullptr, cb = nullptr;
  ASSERT_EQ(a.comm_init_rank(&ca, 2, "", 0), 0);
  ASSERT_EQ(b.comm_init_rank(&cb, 2, "", 1), 0);
  auto crossed = [](FakeGpuApi& api, CommH c, int peer, bool grouped) {
    if (grouped) api.group_start();
    int e = api.send(nullptr, 8, peer, c, nullptr);
    if (e == 0) e = api.recv(nullptr, 8, peer, c, nullptr);
    if (grouped && e == 0) e = api.group_end();
    return e;
  };
  auto fa = std::async(std::launch::async, crossed, std::ref(a), ca, 1, false);
  auto fb = std::async(std::launch::async, crossed, std::ref(b), cb, 0, false);
  EXPECT_EQ(fa.get(), kFakeDeadlock);
  EXPECT_EQ(fb.get(), kFakeDeadlock);
  FakeWire wire2;
  a.wire = b.wire = &wire2;
  auto ga = std::async(std::launch::async, crossed, std::ref(a), ca, 1, true);
  auto gb = std::async(std::launch::async, crossed, std::ref(b), cb, 0, true);
  EXPECT_EQ(ga.get(), 0);
  EXPECT_EQ(gb.get(), 0);
}

// Every rank of a pipeline schedule on its own thread and fake; the fakes block like NCCL.
void run_pipeline_ranks(const Schedule& s, int ranks) {
  const Topology topo = make_preset("switch", {{"nodes", "1"}, {"gpus_per_node", "8"}});
  const AlgorithmRegistry registry = AlgorithmRegistry::builtin();
  const Placement pl = Placement::natural(Mesh{s.axes}, topo);
  FakeWire wire;
  wire.timeout = 2000ms;
  std::vector<std::unique_ptr<FakeGpuApi>> apis;
  std::vector<std::future<std::string>> done;
  for (int r = 0; r < ranks; ++r) {
    apis.push_back(std::make_unique<FakeGpuApi>());
    apis.back()->wire = &wire;
  }
  for (int r = 0; r < ranks; ++r)
    done.push_back(std::async(std::launch::async, [&, r]() -> std::string {
      CudaExecutorOptions o;
      o.rank = r;
      o.share_id = [](const std::string&) { return std::string(kUniqueIdBytes, 'u'); };
      o.watchdog.timeout = 5000ms;
      CudaExecutor ex(*apis[static_cast<std::size_t>(r)], registry, pl, o);
      try {
        const Trace t = ex.execute(s);
        return t.events.empty() ? "no events" : "";
      } catch (const std::exception& e) {
        return e.what();
      }
    }));
  for (int r = 0; r < ranks; ++r) {
    // The wire gives up after 2 s, so a deadlock ends every rank well within this.
    if (done[static_cast<std::size_t>(r)].wait_for(60s) != std::future_status::ready) {
      std::fprintf(stderr, "rank %d of the pipeline never finished: a deadlock the fake did not catch\n", r);
      std::_Exit(1);
    }
    EXPECT_EQ(done[static_cast<std::size_t>(r)].get(), "") << "rank " << r;
  }
  EXPECT_EQ(wire.deadlocks, 0);
  // Every message went out: as many sends as receives, one per Send/Recv op.
  int sends = 0, recvs = 0, ops = 0;
  for (const auto& api : apis) {
    sends += api->count("send");
    recvs += api->count("recv");
  }
  for (const Role& role : s.roles)
    for (const Op& op : role.ops) ops += op.kind == OpKind::Send || op.kind == OpKind::Recv ? 1 : 0;
  EXPECT_EQ(sends + recvs, ops);
  EXPECT_EQ(sends, recvs);
}

TEST(CudaExecutorPipeline, OneFOneBOnTwoRanksWithBlockingSendRecvFinishes) { run_pipeline_ranks(pipeline(2, 4), 2); }

TEST(CudaExecutorPipeline, OneFOneBOnFourRanksFinishes) { run_pipeline_ranks(pipeline(4, 8), 4); }

TEST(CudaExecutorPipeline, InterleavedOneFOneBOnFourRanksFinishes) { run_pipeline_ranks(pipeline(4, 8, 2), 4); }

}  // namespace
}  // namespace meshsim::cuda
