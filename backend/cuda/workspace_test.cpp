#include "backend/cuda/workspace.h"

#include <gtest/gtest.h>

#include "core/test_util.h"

namespace meshsim::cuda {
namespace {

// Every region aligned, inside its op's stream arena; regions of ops on different streams disjoint.
void expect_sound(const WorkspacePlan& p, const std::vector<Stream>& streams) {
  auto arena = [&](Stream s) {
    for (const Arena& a : p.arenas)
      if (a.stream == s) return a;
    ADD_FAILURE() << "no arena for " << to_string(s);
    return Arena{};
  };
  for (std::size_t i = 0; i < p.ops.size(); ++i) {
    const Arena a = arena(streams[i]);
    for (const Region& r : p.ops[i]) {
      EXPECT_EQ(r.offset % kWorkspaceAlign, 0) << i << " " << to_string(r.buf);
      EXPECT_GE(r.offset, a.offset);
      EXPECT_LE(r.end(), a.offset + a.bytes);
      EXPECT_LE(r.end(), p.total);
    }
    for (std::size_t j = 0; j < p.ops.size(); ++j) {
      if (streams[i] == streams[j]) continue;  // one stream: never live together
      for (const Region& x : p.ops[i])
        for (const Region& y : p.ops[j])
          EXPECT_TRUE(x.bytes == 0 || y.bytes == 0 || x.end() <= y.offset || y.end() <= x.offset)
              << "op " << i << " " << to_string(x.buf) << " aliases op " << j << " " << to_string(y.buf);
    }
  }
}

TEST(Workspace, ArenaPerStreamSizedByItsLargestOp) {
  const std::vector<Stream> streams = {Stream::Compute, Stream::Dp, Stream::Compute, Stream::Tp};
  const std::vector<std::vector<BufferNeed>> needs = {
      {{Buf::A, 100}, {Buf::B, 300}},           // 256 + 512 = 768
      {{Buf::Data, 1000}},                      // 1024
      {{Buf::Stage, 256}, {Buf::Snapshot, 1}},  // 256 + 256 = 512
      {{Buf::Args, 0}},                         // 0
  };
  const WorkspacePlan p = plan_workspace(streams, needs);
  // Arenas in Stream order: Compute [0, 768), Tp [768, 768), Dp [768, 1792).
  ASSERT_EQ(p.arenas.size(), 3u);
  EXPECT_EQ(p.arenas[0].stream, Stream::Compute);
  EXPECT_EQ(p.arenas[0].bytes, 768);
  EXPECT_EQ(p.arenas[1].stream, Stream::Tp);
  EXPECT_EQ(p.arenas[1].bytes, 0);
  EXPECT_EQ(p.arenas[2].stream, Stream::Dp);
  EXPECT_EQ(p.arenas[2].offset, 768);
  EXPECT_EQ(p.total, 1792);
  EXPECT_EQ(p.region(0, Buf::A).offset, 0);
  EXPECT_EQ(p.region(0, Buf::A).bytes, 100);
  EXPECT_EQ(p.region(0, Buf::B).offset, 256);
  EXPECT_EQ(p.region(2, Buf::Stage).offset, 0);  // same stream: reuses op 0's bytes
  EXPECT_EQ(p.region(2, Buf::Snapshot).offset, 256);
  EXPECT_EQ(p.region(1, Buf::Data).offset, 768);
  expect_sound(p, streams);
  EXPECT_TRUE(
      testing_util::contains(testing_util::error_of([&] { p.region(1, Buf::Stage); }), "op 1 has no buffer 'stage'"));
  EXPECT_TRUE(testing_util::contains(testing_util::error_of([] {
                                       plan_workspace({Stream::Dp}, {{{Buf::Send, -1}}});
                                     }),
                                     "op 0 buffer 'send' needs -1 bytes"));
}

TEST(Workspace, GemmAndMemoryBoundNeeds) {
  Op g;
  g.kernel = Kernel::gemm(64, 32, 16, 2);
  const auto n = op_needs(g);
  ASSERT_EQ(n.size(), 4u);
  EXPECT_EQ(n[0].buf, Buf::Cublas);  // first: at the arena start for every GEMM of a stream
  EXPECT_EQ(n[0].bytes, kCublasWorkspace);
  EXPECT_EQ(n[1].bytes, 64 * 16 * 2);
  EXPECT_EQ(n[2].bytes, 16 * 32 * 2);
  EXPECT_EQ(n[3].bytes, 64 * 32 * 2);
  Op e;  // no kernel of its own: a pass, 125 floats in and out, each rounded up to 16 bytes
  e.kernel = Kernel::elementwise(KernelKind::Optimizer, 10, 1002, 2);
  const auto m = op_needs(e);
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].buf, Buf::Args);
  EXPECT_EQ(m[0].bytes, 2 * 128 * 4);
  Op ln;  // LayerNorm backward of 4 x 8: dy 32, x 32, gamma 8, mean 4, rstd 4, dx 32, dgamma 8, dbeta 8
  ln.phase = Phase::Backward;
  ln.kernel = Kernel::rowwise(KernelKind::Norm, KernelFn::LayerNorm, 4, 8, 10, 100, 2);
  EXPECT_EQ(op_needs(ln)[0].bytes, (32 + 32 + 8 + 4 + 4 + 32 + 8 + 8) * 4);
  Op s;
  s.kind = OpKind::Send;
  s.bytes = 777;
  EXPECT_EQ(op_needs(s)[0].bytes, 777);
}

TEST(Workspace, StepLayoutStagesReductionsAndSnapshotsClobberedSends) {
  Step reduce;
  reduce.op = RecvOp::Reduce;
  reduce.sends = {{1, 0, 100, 0}};
  reduce.recvs = {{1, 0, 100, 0}, {2, 512, 300, 1}};
  const StepLayout r = cuda_step_layout(reduce, true);
  EXPECT_EQ(r.recv_stage, (std::vector<std::int64_t>{0, 256}));
  EXPECT_EQ(r.stage_bytes, 256 + 512);
  EXPECT_EQ(r.send_snapshot, (std::vector<std::int64_t>{-1}));  // the receive lands in staging
  Step copy;
  copy.sends = {{1, 0, 64, 0}, {2, 128, 64, 1}};
  copy.recvs = {{1, 32, 64, 0}};  // overwrites the second half of send 0
  const StepLayout c = cuda_step_layout(copy, true);
  EXPECT_EQ(c.recv_stage, (std::vector<std::int64_t>{-1}));
  EXPECT_EQ(c.send_snapshot, (std::vector<std::int64_t>{0, -1}));
  EXPECT_EQ(c.snapshot_bytes, 256);
  EXPECT_EQ(cuda_step_layout(copy, false).snapshot_bytes, 0);  // separate send and receive buffers
  Step overlap;
  overlap.recvs = {{1, 0, 64, 0}, {2, 32, 64, 1}};
  EXPECT_EQ(cuda_step_layout(overlap, true).recv_stage, (std::vector<std::int64_t>{0, 256}));
}

TEST(Workspace, RingAllReduceNeedsOneChunkOfStaging) {
  // p = 4, 4096 bytes: chunks of 1024; reduce-scatter steps receive one chunk each and
  // reduce it (staged); all-gather steps receive a chunk other than the one they send.
  CollectiveSpec spec;
  spec.kind = CollKind::AllReduce;
  spec.ranks = 4;
  spec.bytes = 4096;
  spec.element_bytes = 4;
  const auto prog = AlgorithmRegistry::builtin().find("ring", CollKind::AllReduce)->build(spec);
  const auto n = step_program_needs(*prog, spec, 1);
  ASSERT_EQ(n.size(), 3u);
  EXPECT_EQ(n[0].buf, Buf::Data);
  EXPECT_EQ(n[0].bytes, 4096);
  EXPECT_EQ(n[1].buf, Buf::Stage);
  EXPECT_EQ(n[1].bytes, 1024);
  EXPECT_EQ(n[2].buf, Buf::Snapshot);
  EXPECT_EQ(n[2].bytes, 0);
  spec.kind = CollKind::AllToAll;
  const auto a2a = AlgorithmRegistry::builtin().find("pairwise", CollKind::AllToAll)->build(spec);
  const auto m = step_program_needs(*a2a, spec, 0);
  EXPECT_EQ(m[0].buf, Buf::Send);
  EXPECT_EQ(m[1].buf, Buf::Recv);
  EXPECT_EQ(native_collective_needs(spec).size(), 2u);
}

TEST(Workspace, ManyOpsOnSeveralStreamsNeverAlias) {
  std::vector<Stream> streams;
  std::vector<std::vector<BufferNeed>> needs;
  for (int i = 0; i < 40; ++i) {
    streams.push_back(static_cast<Stream>(i * 7 % kStreams));
    needs.push_back({{Buf::A, (i * 977) % 5000}, {Buf::B, (i * 131) % 700 + 1}, {Buf::C, i % 3 == 0 ? 0 : 4096 + i}});
  }
  const WorkspacePlan p = plan_workspace(streams, needs);
  expect_sound(p, streams);
  std::int64_t sum = 0;
  for (const Arena& a : p.arenas) sum += a.bytes;
  EXPECT_EQ(sum, p.total);
}

}  // namespace
}  // namespace meshsim::cuda
