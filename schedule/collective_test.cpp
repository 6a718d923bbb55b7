// Every registered algorithm x every kind it implements x group sizes {2,3,8,64,1000}:
// run its step program in the reference executor on seeded random float32 data and
// compare with the result computed directly (exact for copies, 1e-4 relative for sums,
// whose order differs). Also: uneven all-to-all, spec validation, executor failure modes.
#include "schedule/collective.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>

#include "core/error.h"
#include "schedule/ir.h"
#include "schedule/reference_executor.h"
#include "schedule/test_collectives.h"

namespace meshsim {
namespace {

using testing::Buffers;

using Case = testing::CollectiveCase;
using testing::random_inputs;
using testing::spec_of;

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return c.algo + "_" + to_string(c.kind) + "_p" + std::to_string(c.p) + "_f" + std::to_string(c.floats) + "_g" +
         std::to_string(c.per_node) + "_k" + std::to_string(c.chunks) + (c.uneven ? "_uneven" : "");
}

std::vector<Case> all_cases() {
  std::vector<Case> out;
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  for (const Algorithm& a : reg.all())
    for (CollKind k : a.kinds)
      for (int p : {2, 3, 8, 64, 1000})
        for (int floats : {p * 8, p * 2 + 1, 5}) {
          if (p == 2 && floats == 5) continue;  // same as p*2+1
          std::vector<Case> variants;
          Case base{a.name, k, p, floats};
          variants.push_back(base);
          if (a.name == "hierarchical" || a.name == "hierarchical_tree" || a.name == "nccl_tree" ||
              a.name == "multiring" || a.name == "nvls_tree" || a.name == "nvls_sharp")
            for (int g : {2, 3, 4, 8})
              if (p % g == 0 && g < p) variants.push_back(Case{a.name, k, p, floats, g});
          if (a.name == "hierarchical" && p <= 8) variants.push_back(Case{a.name, k, p, floats, p});
          if (a.name == "pipeline" || a.name == "dbt" || a.name == "nccl_tree")
            variants.push_back(Case{a.name, k, p, floats, 1, 3});
          if (k == CollKind::AllToAll && floats == p * 8) variants.push_back(Case{a.name, k, p, floats, 1, 0, true});
          for (const Case& c : variants)
            if (!a.unsupported(spec_of(c))) out.push_back(c);
        }
  return out;
}

// Sum over ranks of element i, and the sum of magnitudes (for the tolerance).
struct Sum {
  double value = 0, magnitude = 0;
};
Sum sum_at(const Buffers& in, std::size_t i) {
  Sum s;
  for (const auto& b : in) {
    s.value += b[i];
    s.magnitude += std::fabs(b[i]);
  }
  return s;
}

void expect_sum(float got, const Sum& want, const std::string& where) {
  ASSERT_NEAR(got, want.value, 1e-4 * want.magnitude + 1e-6) << where;
}

class AlgorithmCase : public ::testing::TestWithParam<Case> {};

TEST_P(AlgorithmCase, MatchesDirectComputation) {
  const Case& c = GetParam();
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  const Algorithm* a = reg.find(c.algo, c.kind);
  ASSERT_NE(a, nullptr);
  const CollectiveSpec s = spec_of(c);
  auto prog = a->build(s);
  ASSERT_EQ(prog->ranks(), c.p);
  const Buffers in = random_inputs(s, 1234u + static_cast<std::uint32_t>(c.p * 31 + c.floats));
  const Buffers out = run_reference(*prog, s, in);
  const int p = c.p;
  auto floats_of = [&](int part, int i) {  // slice i of p as a float range
    const Range r = slice(s.bytes, part, i, 4);
    return std::pair<std::size_t, std::size_t>(r.begin / 4, r.end / 4);
  };
  std::vector<Sum> sums;
  if (c.kind == CollKind::AllReduce || c.kind == CollKind::ReduceScatter || c.kind == CollKind::Reduce)
    for (std::size_t i = 0; i < in[0].size(); ++i) sums.push_back(sum_at(in, i));
  switch (c.kind) {
    case CollKind::AllReduce:
      for (int r = 0; r < p; ++r)
        for (std::size_t i = 0; i < in[0].size(); ++i) expect_sum(out[r][i], sums[i], "rank " + std::to_string(r));
      break;
    case CollKind::ReduceScatter:
      for (int r = 0; r < p; ++r) {
        const auto [b, e] = floats_of(p, r);
        for (std::size_t i = b; i < e; ++i) expect_sum(out[r][i], sums[i], "rank " + std::to_string(r));
      }
      break;
    case CollKind::AllGather:
      for (int r = 0; r < p; ++r)
        for (int q = 0; q < p; ++q) {
          const auto [b, e] = floats_of(p, q);
          for (std::size_t i = b; i < e; ++i) ASSERT_EQ(out[r][i], in[q][i]) << "rank " << r << " slice " << q;
        }
      break;
    case CollKind::Broadcast:
      for (int r = 0; r < p; ++r) ASSERT_EQ(out[r], in[s.root]) << "rank " << r;
      break;
    case CollKind::Reduce:
      for (std::size_t i = 0; i < in[0].size(); ++i) expect_sum(out[s.root][i], sums[i], "root");
      break;
    case CollKind::SendRecv:
      ASSERT_EQ(out[1], in[0]);
      break;
    case CollKind::AllToAll: {
      // send_off[q] = where q's block for rank r starts in q's send buffer (advanced per r)
      std::vector<std::size_t> send_off(p, 0);
      for (int r = 0; r < p; ++r) {
        std::size_t recv_off = 0;
        for (int q = 0; q < p; ++q) {
          const std::size_t len = alltoall_block(s, q, r) / 4;
          for (std::size_t i = 0; i < len; ++i)
            ASSERT_EQ(out[r][recv_off + i], in[q][send_off[q] + i]) << "block " << q << "->" << r;
          recv_off += len;
          send_off[q] += len;
        }
        ASSERT_EQ(recv_off, out[r].size());
      }
      break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Registry, AlgorithmCase, ::testing::ValuesIn(all_cases()), case_name);

TEST(Registry, EveryKindHasAnAlgorithmAndNamesAreUnique) {
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  for (CollKind k : all_coll_kinds()) EXPECT_FALSE(reg.for_kind(k).empty()) << to_string(k);
  EXPECT_THROW(
      {
        AlgorithmRegistry r2 = AlgorithmRegistry::builtin();
        r2.add(reg.all().front());
      },
      Error);
  EXPECT_EQ(reg.find("ring", CollKind::Broadcast), nullptr);
  EXPECT_NE(reg.find("dbt", CollKind::AllReduce), nullptr);
  for (CollKind k : all_coll_kinds()) EXPECT_EQ(parse_coll_kind(to_string(k)), k);
  EXPECT_EQ(parse_coll_kind("all-reduce"), CollKind::AllReduce);
  EXPECT_FALSE(parse_coll_kind("allsum").has_value());
}

// nccl_tree with one rank per node has chains of one: its two trees per channel are dbt's,
// over the same halves, so with the same chunks the two programs are the same, step by step.
// And on g > 1, every message of nccl_tree stays on its chain (same node) or joins the heads
// of one channel (same local rank: one rail).
TEST(NcclTree, IsDbtWithOneRankPerNodeAndCrossesNodesOnOneRail) {
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  for (int p : {2, 3, 8, 64}) {
    CollectiveSpec s;
    s.kind = CollKind::AllReduce;
    s.ranks = p;
    s.bytes = 4096 + 4 * p;
    s.element_bytes = 4;
    s.chunks = 3;
    const auto tree = reg.find("nccl_tree", s.kind)->build(s), dbt = reg.find("dbt", s.kind)->build(s);
    for (int r = 0; r < p; ++r) {
      ASSERT_EQ(tree->num_steps(r), dbt->num_steps(r)) << p << " " << r;
      for (int i = 0; i < tree->num_steps(r); ++i) {
        Step a, b;
        tree->step(r, i, a);
        dbt->step(r, i, b);
        ASSERT_EQ(a.op, b.op);
        ASSERT_EQ(a.sends.size(), b.sends.size());
        ASSERT_EQ(a.recvs.size(), b.recvs.size());
        for (std::size_t j = 0; j < a.sends.size(); ++j) {
          EXPECT_EQ(a.sends[j].peer, b.sends[j].peer);
          EXPECT_EQ(a.sends[j].offset, b.sends[j].offset);
          EXPECT_EQ(a.sends[j].bytes, b.sends[j].bytes);
        }
        for (std::size_t j = 0; j < a.recvs.size(); ++j) {
          EXPECT_EQ(a.recvs[j].peer, b.recvs[j].peer);
          EXPECT_EQ(a.recvs[j].offset, b.recvs[j].offset);
          EXPECT_EQ(a.recvs[j].bytes, b.recvs[j].bytes);
        }
      }
    }
  }
  CollectiveSpec s;
  s.kind = CollKind::AllReduce;
  s.ranks = 64;
  s.ranks_per_node = 8;
  s.bytes = 4 << 20;
  const auto tree = reg.find("nccl_tree", s.kind)->build(s);
  long crossing = 0;
  for (int r = 0; r < 64; ++r)
    for (int i = 0; i < tree->num_steps(r); ++i) {
      Step st;
      tree->step(r, i, st);
      for (const Transfer& t : st.sends)
        if (t.peer / 8 != r / 8) {
          EXPECT_EQ(t.peer % 8, r % 8) << r << " -> " << t.peer;
          ++crossing;
        }
    }
  EXPECT_GT(crossing, 0);
}

TEST(Slice, EvenUnevenAndElementAligned) {
  EXPECT_EQ(slice(1024, 3, 0).size(), 341);
  EXPECT_EQ(slice(1024, 3, 2).size(), 342);
  EXPECT_EQ(slice(1024, 3, 2).end, 1024);
  const Range r = slice(40, 3, 1, 4);  // 10 floats in 3 parts: 3, 3, 4
  EXPECT_EQ(r.begin, 12);
  EXPECT_EQ(r.end, 24);
  // No overflow for 4 GiB split 1000 ways, and the slices tile the buffer.
  const Bytes n = GiB(4);
  Bytes total = 0;
  for (int i = 0; i < 1000; ++i) total += slice(n, 1000, i).size();
  EXPECT_EQ(total, n);
  EXPECT_EQ(slice(n, 1000, 999).size(), (n + 999) / 1000);
}

TEST(Alltoall, UnevenSizesMoveExactlyTheRequestedBytes) {
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  CollectiveSpec s;
  s.kind = CollKind::AllToAll;
  s.ranks = 4;
  s.element_bytes = 4;
  s.alltoall_bytes = {{4, 8, 0, 12}, {16, 0, 4, 4}, {0, 0, 0, 40}, {8, 12, 4, 0}};
  auto prog = reg.find("pairwise", CollKind::AllToAll)->build(s);
  std::vector<std::vector<Bytes>> moved(4, std::vector<Bytes>(4, 0));
  Step st;
  for (int r = 0; r < 4; ++r)
    for (int i = 0; i < prog->num_steps(r); ++i) {
      st.clear();
      prog->step(r, i, st);
      for (const Transfer& t : st.sends) moved[r][t.peer] += t.bytes;
      for (const Transfer& t : st.recvs) EXPECT_EQ(t.bytes, s.alltoall_bytes[t.peer][r]);
    }
  for (int a = 0; a < 4; ++a)
    for (int b = 0; b < 4; ++b) EXPECT_EQ(moved[a][b], a == b ? 0 : s.alltoall_bytes[a][b]) << a << "->" << b;
  const Buffers in = random_inputs(s, 7);
  const Buffers out = run_reference(*prog, s, in);
  EXPECT_EQ(out[3].size(), (12u + 4 + 40 + 0) / 4);
  EXPECT_EQ(out[3][0], in[0][3]);  // block 0->3 starts at rank 0's offset 12 = float 3
  EXPECT_EQ(out[3][3], in[1][5]);  // block 1->3 (rank 1's offset 16+0+4 = float 5) after it
}

TEST(RankBuffers, LayoutOfEachKind) {
  // All-reduce: one buffer of `bytes`, in place.
  CollectiveSpec ar;
  ar.ranks = 3;
  ar.bytes = 40;
  const RankBuffers a = rank_buffers(ar, 1);
  EXPECT_EQ(a.send, 40);
  EXPECT_EQ(a.recv, 40);
  EXPECT_EQ(a.own, 0);
  // Even all-to-all of 10 floats over 3 ranks: floor(10/3) = 3 floats per block, so 36
  // bytes each way; rank 1's own block is its second one, at byte 12 of both buffers.
  CollectiveSpec even;
  even.kind = CollKind::AllToAll;
  even.ranks = 3;
  even.bytes = 40;
  even.element_bytes = 4;
  const RankBuffers e = rank_buffers(even, 1);
  EXPECT_EQ(e.send, 36);
  EXPECT_EQ(e.recv, 36);
  EXPECT_EQ(e.self_send, 12);
  EXPECT_EQ(e.self_recv, 12);
  EXPECT_EQ(e.own, 12);
  // Uneven: rank 1 sends 4, 8, 12 bytes and receives 16, 8, 0 (column 1).
  CollectiveSpec uneven = even;
  uneven.bytes = 0;
  uneven.alltoall_bytes = {{0, 16, 4}, {4, 8, 12}, {8, 0, 4}};
  const RankBuffers u = rank_buffers(uneven, 1);
  EXPECT_EQ(u.send, 24);
  EXPECT_EQ(u.recv, 24);
  EXPECT_EQ(u.self_send, 4);
  EXPECT_EQ(u.self_recv, 16);
  EXPECT_EQ(u.own, 8);
}

TEST(Validation, ErrorsNameTheField) {
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  const Algorithm* a2a = reg.find("pairwise", CollKind::AllToAll);
  CollectiveSpec s;
  s.kind = CollKind::AllToAll;
  s.ranks = 3;
  s.alltoall_bytes = {{0, 1, 2}, {3, 4, 5}};
  try {
    a2a->build(s);
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("alltoall_bytes"), std::string::npos) << e.what();
  }
  s.alltoall_bytes = {{0, 1, 2}, {3, -4, 5}, {0, 0, 0}};
  EXPECT_THROW(a2a->build(s), Error);
  s.alltoall_bytes = {{0, 1, 2}, {3, 4}, {0, 0, 0}};
  EXPECT_THROW(a2a->cost_ps(s, CostParams{}), Error);
  CollectiveSpec b;
  b.kind = CollKind::Broadcast;
  b.ranks = 4;
  b.root = 4;
  try {
    reg.find("binomial", CollKind::Broadcast)->build(b);
    FAIL() << "expected Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("root"), std::string::npos) << e.what();
  }
  b.root = 0;
  b.bytes = 10;
  b.element_bytes = 4;
  EXPECT_THROW(reg.find("binomial", CollKind::Broadcast)->build(b), Error);
}

// A hand-written program whose ranks wait for each other: both receive first.
class DeadlockProgram final : public StepProgram {
 public:
  int ranks() const override { return 2; }
  int num_steps(int) const override { return 2; }
  void step(int rank, int s, Step& out) const override {
    if (s == 0)
      out.recvs.push_back(Transfer{1 - rank, 0, 4, 0});
    else
      out.sends.push_back(Transfer{1 - rank, 0, 4, 0});
  }
};

class LeftoverProgram final : public StepProgram {
 public:
  int ranks() const override { return 2; }
  int num_steps(int rank) const override { return rank == 0 ? 1 : 0; }
  void step(int, int, Step& out) const override { out.sends.push_back(Transfer{1, 0, 4, 0}); }
};

class OverflowProgram final : public StepProgram {
 public:
  int ranks() const override { return 2; }
  int num_steps(int) const override { return 1; }
  void step(int rank, int, Step& out) const override {
    if (rank == 0)
      out.sends.push_back(Transfer{1, 4, 8, 0});
    else
      out.recvs.push_back(Transfer{0, 0, 8, 0});
  }
};

TEST(ReferenceExecutor, ReportsDeadlockLeftoversAndOverflow) {
  CollectiveSpec s;
  s.ranks = 2;
  s.bytes = 8;
  s.element_bytes = 4;
  const Buffers in(2, std::vector<float>(2, 1.0f));
  try {
    run_reference(DeadlockProgram{}, s, in);
    FAIL() << "expected deadlock";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("deadlocked: rank 0 at step 0 waits for a message from rank 1"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(run_reference(LeftoverProgram{}, s, in), Error);
  EXPECT_THROW(run_reference(OverflowProgram{}, s, in), Error);
}

TEST(ReferenceExecutor, SendsReadTheBufferAsOfStepStart) {
  // Recursive doubling exchanges and reduces the same region in one step: with 2 ranks
  // both must end with a+b, which fails if a send saw the already-reduced buffer.
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  CollectiveSpec s;
  s.ranks = 2;
  s.bytes = 8;
  s.element_bytes = 4;
  auto prog = reg.find("recursive_doubling", CollKind::AllReduce)->build(s);
  const Buffers out = run_reference(*prog, s, {{1, 2}, {10, 20}});
  EXPECT_EQ(out[0], (std::vector<float>{11, 22}));
  EXPECT_EQ(out[1], (std::vector<float>{11, 22}));
}

}  // namespace
}  // namespace meshsim

namespace meshsim {
namespace {

// The op -> spec rule every executor shares: whole elements, the root, and a skewed
// all-to-all's per-pair sizes. 1000 bytes over 4 ranks, imbalance 2.5, float32: the mean
// block is 250 bytes; destination 0 gets 2.5 x 250 = 625 -> 624 (whole floats), the others
// (4 - 2.5) / 3 x 250 = 125 -> 124.
TEST(OpCollectiveSpec, WholeElementsRootAndSkewedAllToAll) {
  Op op;
  op.kind = OpKind::Collective;
  op.coll = CollKind::AllToAll;
  op.bytes = 1002;
  op.root = 0;
  op.imbalance = 2.5;
  const CollectiveSpec f32 = collective_spec(op, 4, 4);
  EXPECT_EQ(f32.bytes, 1000);
  EXPECT_EQ(f32.element_bytes, 4);
  ASSERT_EQ(f32.alltoall_bytes.size(), 4u);
  for (const auto& row : f32.alltoall_bytes) EXPECT_EQ(row, (std::vector<Bytes>{624, 124, 124, 124}));
  op.imbalance = 1.0;
  EXPECT_TRUE(collective_spec(op, 4, 4).alltoall_bytes.empty());  // even: bytes / p each
  op.coll = CollKind::Broadcast;
  op.root = 3;
  const CollectiveSpec bytes = collective_spec(op, 8, 1);
  EXPECT_EQ(bytes.bytes, 1002);
  EXPECT_EQ(bytes.root, 3);
  EXPECT_EQ(bytes.ranks, 8);
}

// One step's buffer layout, as both real backends use it. Receives [0,100) and [50,150)
// overlap: both staged. A send of [0,64) overwritten by an unstaged receive is snapshotted;
// one overwritten only by a staged receive is not (staged data lands after the sends).
TEST(StepLayout, StagesOverlapsAndOptionallyReductionsAndSnapshotsClobberedSends) {
  Step overlap;
  overlap.recvs = {{1, 0, 100, 0}, {2, 50, 100, 1}};
  overlap.sends = {{1, 20, 10, 0}};
  StepLayout l = layout_step(overlap, true, false);
  EXPECT_EQ(l.recv_stage, (std::vector<Bytes>{0, 100}));
  EXPECT_EQ(l.stage_bytes, 200);
  EXPECT_EQ(l.send_snapshot, (std::vector<Bytes>{-1}));
  EXPECT_EQ(l.snapshot_bytes, 0);

  Step reduce;
  reduce.op = RecvOp::Reduce;
  reduce.recvs = {{1, 0, 64, 0}};
  reduce.sends = {{1, 32, 64, 1}, {1, 200, 8, 2}};
  l = layout_step(reduce, true, false);  // the transport sums on arrival: in place
  EXPECT_EQ(l.recv_stage, (std::vector<Bytes>{-1}));
  EXPECT_EQ(l.send_snapshot, (std::vector<Bytes>{0, -1}));
  EXPECT_EQ(l.snapshot_bytes, 64);
  l = layout_step(reduce, true, true, 256);  // a reduce kernel after the transfer: staged
  EXPECT_EQ(l.recv_stage, (std::vector<Bytes>{0}));
  EXPECT_EQ(l.stage_bytes, 256);
  EXPECT_EQ(l.send_snapshot, (std::vector<Bytes>{-1, -1}));
  EXPECT_EQ(layout_step(reduce, false, false).snapshot_bytes, 0);  // separate buffers
}

}  // namespace
}  // namespace meshsim
