// The cpu backend runs every registered algorithm, for every kind it implements, with
// 2, 3, 4 and 8 ranks as threads over loopback TCP, and every rank's buffer equals the
// serial reference executor's bit for bit (all-reduce also equals the direct serial sum
// within fp32 tolerance). Sizes include ones not divisible by p; the large size runs with
// 16 KiB socket buffers, so an algorithm that relied on unbounded eager buffering would
// deadlock (and fail on the timeout) here. Also: a rank that vanishes mid-collective,
// ranks that disagree on the size.
#include "backend/cpu/collective_exec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backend/cpu/test_util.h"
#include "core/bf16.h"
#include "core/error.h"
#include "schedule/reference_executor.h"
#include "schedule/test_collectives.h"

namespace meshsim::cpu {
namespace {

using meshsim::testing::Buffers;
using testing::run_ranks;
using namespace std::chrono_literals;

using Case = meshsim::testing::CollectiveCase;
using meshsim::testing::random_inputs;
using meshsim::testing::spec_of;

constexpr int kLarge = 300'007;  // floats; ~1.2 MB, far above the 16 KiB socket buffers

std::vector<Case> all_cases() {
  std::vector<Case> out;
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  for (const Algorithm& a : reg.all())
    for (CollKind k : a.kinds)
      for (int p : {2, 3, 4, 8})
        for (int floats : {p * 8, p * 2 + 1, 5, kLarge}) {
          if (p == 2 && floats == 5) continue;  // same as p*2+1
          std::vector<Case> variants{Case{a.name, k, p, floats}};
          if (a.name == "hierarchical" || a.name == "hierarchical_tree" || a.name == "nccl_tree" ||
              a.name == "multiring" || a.name == "nvls_tree" || a.name == "nvls_sharp")
            for (int g : {2, 4})
              if (p % g == 0 && g < p) variants.push_back(Case{a.name, k, p, floats, g});
          if (k == CollKind::AllToAll && floats == p * 8) variants.push_back(Case{a.name, k, p, floats, 1, 0, true});
          for (const Case& c : variants)
            if (!a.unsupported(spec_of(c))) out.push_back(c);
        }
  return out;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return c.algo + "_" + to_string(c.kind) + "_p" + std::to_string(c.p) + "_f" + std::to_string(c.floats) + "_g" +
         std::to_string(c.per_node) + (c.uneven ? "_uneven" : "");
}

// Runs the program on p threads, each with its own Transport; returns buffers and errors.
struct Result {
  Buffers out;
  std::vector<std::string> errors;
  std::vector<CollectiveRun> runs;
};
Result run_threads(const StepProgram& prog, const CollectiveSpec& s, const Buffers& in, int socket_buffer_bytes,
                   const std::function<bool(int, Transport&, std::vector<float>&)>& before = {},
                   ReduceIn reduce_in = ReduceIn::Float32) {
  InMemoryDirectory dir;
  Result res;
  res.out = in;
  res.runs.resize(in.size());
  res.errors = run_ranks(s.ranks, [&](int r) {
    TransportOptions o;
    o.token = "collective-test";
    o.timeout = 10s;
    o.socket_buffer_bytes = socket_buffer_bytes;
    Transport t(r, s.ranks, dir, o);
    if (before && !before(r, t, res.out[r])) return;
    res.runs[r] = run_collective_cpu(t, prog, s, res.out[r], {}, reduce_in);
  });
  return res;
}

class CpuCollective : public ::testing::TestWithParam<Case> {};

TEST_P(CpuCollective, EqualsReferenceBitForBit) {
  const Case& c = GetParam();
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  const CollectiveSpec s = spec_of(c);
  auto prog = reg.find(c.algo, c.kind)->build(s);
  const Buffers in = random_inputs(s, 777u + static_cast<std::uint32_t>(c.p * 131 + c.floats));
  const Buffers want = run_reference(*prog, s, in);
  const Result got = run_threads(*prog, s, in, c.floats == kLarge ? 16 << 10 : 0);
  for (int r = 0; r < c.p; ++r) EXPECT_EQ(got.errors[r], "") << "rank " << r;
  for (int r = 0; r < c.p; ++r) {
    ASSERT_EQ(got.errors[r], "") << "rank " << r;
    ASSERT_EQ(got.out[r].size(), want[r].size()) << "rank " << r;
    // Bit for bit: compare representations (NaN-safe, -0 vs +0 distinguished).
    ASSERT_EQ(std::memcmp(got.out[r].data(), want[r].data(), want[r].size() * 4), 0) << "rank " << r;
    ASSERT_EQ(got.runs[r].steps.size(), static_cast<std::size_t>(prog->num_steps(r)));
    for (const StepTiming& st : got.runs[r].steps) ASSERT_LE(st.start, st.end);
  }
  if (c.kind == CollKind::AllReduce)
    for (std::size_t i = 0; i < in[0].size(); ++i) {
      double sum = 0, mag = 0;
      for (const auto& b : in) sum += b[i], mag += std::fabs(b[i]);
      for (int r = 0; r < c.p; ++r) ASSERT_NEAR(got.out[r][i], sum, 1e-5 * mag + 1e-6) << "rank " << r << " at " << i;
    }
}

INSTANTIATE_TEST_SUITE_P(Registry, CpuCollective, ::testing::ValuesIn(all_cases()), case_name);

TEST(CpuCollective, CoversEveryAlgorithmAndKind) {
  const auto cases = all_cases();
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  for (const Algorithm& a : reg.all())
    for (CollKind k : a.kinds) {
      bool found = false;
      for (const Case& c : cases) found = found || (c.algo == a.name && c.kind == k);
      EXPECT_TRUE(found) << a.name << " " << to_string(k);
    }
}

// Hand-worked: 1 + 2^-8 is the tie between bf16's 1 and 1 + 2^-7, and ties go to even: a
// bf16 sum of 1 and 2^-8 is 1, where the float32 sum keeps 1.00390625.
TEST(CpuCollectiveBf16, TwoRankSumRoundsToNearestEven) {
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  const CollectiveSpec s = spec_of(Case{"ring", CollKind::AllReduce, 2, 2});
  auto prog = reg.find("ring", CollKind::AllReduce)->build(s);
  // 3 + 2^-7: the tie between 3 and 3 + 2^-6 (bf16's step in [2, 4)); 3's last bit is even.
  const Buffers in{{1.f, 3.f}, {0x1p-8f, 0x1p-7f}};
  const Buffers want_bf16{{1.f, 3.f}, {1.f, 3.f}};
  EXPECT_EQ(run_reference(*prog, s, in, ReduceIn::Bf16), want_bf16);
  EXPECT_EQ(run_reference(*prog, s, in)[0], (std::vector<float>{1.00390625f, 3.0078125f}));
  const Result got = run_threads(*prog, s, in, 0, {}, ReduceIn::Bf16);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(got.out[r], want_bf16[r]) << "rank " << r << " " << got.errors[r];
}

// Every algorithm that sums (all-reduce, reduce-scatter, reduce), 2..8 ranks, bf16 inputs:
// the cpu backend equals the serial reference bit for bit with bf16 sums too, every result is
// a bf16 value, and it is within the bound of p-1 roundings (each add of a reduction tree
// with p leaves moves its sum by at most 2^-8 of the sum of the magnitudes below it) of the
// exact sum.
TEST(CpuCollectiveBf16, EveryReducingAlgorithmEqualsReferenceAndStaysWithinItsRoundings) {
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  int checked = 0;
  for (const Case& c0 : all_cases()) {
    if (c0.kind != CollKind::AllReduce && c0.kind != CollKind::ReduceScatter && c0.kind != CollKind::Reduce) continue;
    if (c0.floats == kLarge || c0.p == 3) continue;
    SCOPED_TRACE(c0.algo + " " + to_string(c0.kind) + " p" + std::to_string(c0.p) + " g" + std::to_string(c0.per_node));
    const CollectiveSpec s = spec_of(c0);
    auto prog = reg.find(c0.algo, c0.kind)->build(s);
    Buffers in = random_inputs(s, 91u + static_cast<std::uint32_t>(c0.p * 7 + c0.floats));
    for (auto& b : in)
      for (float& x : b) x = round_to_bf16(x);
    const Buffers want = run_reference(*prog, s, in, ReduceIn::Bf16);
    const Result got = run_threads(*prog, s, in, 0, {}, ReduceIn::Bf16);
    for (int r = 0; r < c0.p; ++r) {
      ASSERT_EQ(got.errors[r], "") << "rank " << r;
      ASSERT_EQ(std::memcmp(got.out[r].data(), want[r].data(), want[r].size() * 4), 0) << "rank " << r;
    }
    if (c0.kind != CollKind::AllReduce) continue;
    for (std::size_t i = 0; i < in[0].size(); ++i) {
      double sum = 0, mag = 0;
      for (const auto& b : in) sum += b[i], mag += std::fabs(b[i]);
      const double bound = (c0.p - 1) * 0x1p-8 * mag * 1.01;
      for (int r = 0; r < c0.p; ++r) {
        ASSERT_EQ(got.out[r][i], round_to_bf16(got.out[r][i])) << "rank " << r << " at " << i;
        ASSERT_LE(std::fabs(got.out[r][i] - sum), bound) << "rank " << r << " at " << i;
      }
    }
    ++checked;
  }
  EXPECT_GT(checked, 20);
}

// Rank 2 runs only its first step and then closes its transport: every rank that needs
// it, directly or through another rank, fails with an Error that names rank 2 (a failing
// rank tells its peers why), within the timeout. In a ring every rank needs every other.
class FirstSteps : public StepProgram {
 public:
  FirstSteps(const StepProgram& inner, int victim, int steps) : inner_(inner), victim_(victim), steps_(steps) {}
  int ranks() const override { return inner_.ranks(); }
  int num_steps(int r) const override { return r == victim_ ? steps_ : inner_.num_steps(r); }
  void step(int r, int s, Step& out) const override { inner_.step(r, s, out); }

 private:
  const StepProgram& inner_;
  int victim_, steps_;
};

TEST(CpuCollectiveFailure, PeerClosingMidCollectiveNamesIt) {
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  for (const char* algo : {"ring", "recursive_doubling"}) {
    const Algorithm* a = reg.find(algo, CollKind::AllReduce);
    ASSERT_NE(a, nullptr) << algo;
    CollectiveSpec s = spec_of(Case{algo, CollKind::AllReduce, 4, 1 << 18});
    auto prog = a->build(s);
    const FirstSteps partial(*prog, 2, 1);
    const Buffers in = random_inputs(s, 5);
    const auto t0 = std::chrono::steady_clock::now();
    const Result got = run_threads(partial, s, in, 0, [&](int r, Transport& t, std::vector<float>& buf) {
      if (r != 2) return true;
      run_collective_cpu(t, partial, s, buf);
      t.close();
      return false;
    });
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 8s) << algo;
    int failed = 0;
    for (int r : {0, 1, 3}) {
      if (got.errors[r].empty() && std::string(algo) != "ring") continue;  // did not need rank 2 after step 0
      ++failed;
      EXPECT_NE(got.errors[r].find("lost connection to rank 2"), std::string::npos)
          << algo << " rank " << r << ": " << got.errors[r];
      EXPECT_EQ(got.errors[r].rfind("rank " + std::to_string(r) + ": ", 0), 0u) << got.errors[r];
    }
    EXPECT_GE(failed, 1) << algo;
    EXPECT_EQ(got.errors[2], "");
  }
}

// Two groups of a 4-rank transport, {0, 2} and {3, 1} (mesh columns, one out of order),
// run a ring all-reduce at once; each member ends with its own group's reference result.
TEST(CpuCollective, GroupsOfTheTransportRunAtOnce) {
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  const CollectiveSpec s = spec_of(Case{"ring", CollKind::AllReduce, 2, 1000});
  auto prog = reg.find("ring", CollKind::AllReduce)->build(s);
  const std::vector<std::vector<int>> groups = {{0, 2}, {3, 1}};
  Buffers in(4, std::vector<float>(1000));
  for (int r = 0; r < 4; ++r)
    for (std::size_t i = 0; i < in[r].size(); ++i)
      in[r][i] = static_cast<float>((r + 1) * 10 + static_cast<int>(i % 7));
  Buffers out = in;
  InMemoryDirectory dir;
  const auto errs = run_ranks(4, [&](int r) {
    Transport t(r, 4, dir);
    const auto& g = r == 0 || r == 2 ? groups[0] : groups[1];
    run_collective_cpu(t, *prog, s, out[static_cast<std::size_t>(r)], g);
  });
  for (int r = 0; r < 4; ++r) EXPECT_EQ(errs[static_cast<std::size_t>(r)], "") << "rank " << r;
  for (const auto& g : groups) {
    const Buffers want =
        run_reference(*prog, s, {in[static_cast<std::size_t>(g[0])], in[static_cast<std::size_t>(g[1])]});
    EXPECT_EQ(out[static_cast<std::size_t>(g[0])], want[0]);
    EXPECT_EQ(out[static_cast<std::size_t>(g[1])], want[1]);
  }
  // A rank outside the group it is given is an Error, not a hang.
  InMemoryDirectory dir1;
  Transport solo(0, 1, dir1);
  std::vector<float> buf(1000);
  const std::vector<int> other = {1, 2};
  EXPECT_THROW(run_collective_cpu(solo, *prog, s, buf, other), Error);
}

TEST(CpuCollectiveFailure, RanksDisagreeingOnSizeGetAnError) {
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  CollectiveSpec big = spec_of(Case{"ring", CollKind::AllGather, 2, 64});
  CollectiveSpec small = spec_of(Case{"ring", CollKind::AllGather, 2, 32});
  auto pb = reg.find("ring", CollKind::AllGather)->build(big);
  auto ps = reg.find("ring", CollKind::AllGather)->build(small);
  InMemoryDirectory dir;
  const auto errs = run_ranks(2, [&](int r) {
    TransportOptions o;
    o.timeout = 5s;
    Transport t(r, 2, dir, o);
    std::vector<float> buf(r == 0 ? 64 : 32, 1.0f);
    run_collective_cpu(t, r == 0 ? *pb : *ps, r == 0 ? big : small, buf);
  });
  EXPECT_NE(errs[1].find("rank 0 sent a 128-byte message where rank 1 expects 64 bytes"), std::string::npos) << errs[1];
  EXPECT_NE(errs[0].find("rank 0: "), std::string::npos) << errs[0];
}

TEST(CpuCollectiveFailure, WrongBufferSizeIsAnError) {
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  CollectiveSpec s = spec_of(Case{"ring", CollKind::AllReduce, 1, 8});
  s.ranks = 1;
  InMemoryDirectory dir;
  Transport t(0, 1, dir);
  auto prog =
      reg.find("ring", CollKind::AllReduce)->unsupported(s) ? nullptr : reg.find("ring", CollKind::AllReduce)->build(s);
  if (!prog) GTEST_SKIP() << "ring refuses 1 rank";
  std::vector<float> buf(7);
  EXPECT_THROW(run_collective_cpu(t, *prog, s, buf), Error);
}

}  // namespace
}  // namespace meshsim::cpu

namespace meshsim::cpu {
namespace {

// Sub-groups of one transport: 6 ranks hold two groups {4,0,2} and {5,1,3} (group rank i
// runs on transport rank members[i]); both run a ring all-reduce at once, and every member
// ends with the serial reference's buffer for its group rank.
TEST(CpuCollectiveGroups, DisjointSubGroupsOfOneTransport) {
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  const CollectiveSpec s = spec_of(Case{"ring", CollKind::AllReduce, 3, 1001});
  auto prog = reg.find("ring", CollKind::AllReduce)->build(s);
  const std::vector<std::vector<int>> groups{{4, 0, 2}, {5, 1, 3}};
  std::vector<Buffers> in{random_inputs(s, 11), random_inputs(s, 12)};
  std::vector<Buffers> want{run_reference(*prog, s, in[0]), run_reference(*prog, s, in[1])};
  std::vector<std::vector<float>> out(6);
  InMemoryDirectory dir;
  const auto errors = run_ranks(6, [&](int r) {
    TransportOptions o;
    o.timeout = 10s;
    Transport t(r, 6, dir, o);
    const std::size_t g = static_cast<std::size_t>(r % 2 == 0 ? 0 : 1);
    const auto& m = groups[g];
    const std::size_t idx = static_cast<std::size_t>(std::find(m.begin(), m.end(), r) - m.begin());
    out[r] = in[g][idx];
    run_collective_cpu(t, *prog, s, out[r], m);
  });
  for (int r = 0; r < 6; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    const std::size_t g = static_cast<std::size_t>(r % 2 == 0 ? 0 : 1);
    const auto& m = groups[g];
    const std::size_t idx = static_cast<std::size_t>(std::find(m.begin(), m.end(), r) - m.begin());
    ASSERT_EQ(std::memcmp(out[r].data(), want[g][idx].data(), out[r].size() * 4), 0) << "rank " << r;
  }
}

TEST(CpuCollectiveGroups, ANonMemberIsRefused) {
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  const CollectiveSpec s = spec_of(Case{"ring", CollKind::AllReduce, 2, 8});
  auto prog = reg.find("ring", CollKind::AllReduce)->build(s);
  InMemoryDirectory dir;
  const auto errors = run_ranks(3, [&](int r) {
    TransportOptions o;
    o.timeout = 5s;
    Transport t(r, 3, dir, o);
    if (r != 2) return;
    std::vector<float> buf(2, 1.0f);
    const std::vector<int> members{0, 1};
    run_collective_cpu(t, *prog, s, buf, members);
  });
  EXPECT_NE(errors[2].find("rank 2: not a member of the group 0,1"), std::string::npos) << errors[2];
}

}  // namespace
}  // namespace meshsim::cpu
