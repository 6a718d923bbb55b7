// The teaching view against what each collective is defined to leave behind: run over every
// registry algorithm's own step program, at 4 and 8 ranks (in nodes of 2 and 4), its last round
// must hold the collective's result in every rank's buffer, and the first rounds of a ring what
// a ring does by hand.
#include "schedule/buffer_view.h"

#include <gtest/gtest.h>

#include <string>

namespace meshsim {
namespace {

// Whether the final buffers are what `spec.kind` defines (docs/collectives.md).
std::string final_state_error(const BufferView& v, const CollectiveSpec& s) {
  if (!v.not_shown.empty()) return v.not_shown;
  if (v.truncated) return "truncated";
  const auto& last = v.rounds.back().ranks;
  const std::uint32_t all = (1u << s.ranks) - 1;
  for (int r = 0; r < s.ranks; ++r)
    for (int i = 0; i < s.ranks; ++i) {
      const SliceState c = last[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
      std::uint32_t want = 0;
      bool checked = true;
      switch (s.kind) {
        case CollKind::AllReduce:
          want = all;
          break;
        case CollKind::ReduceScatter:
          want = all, checked = i == r;
          break;
        case CollKind::Reduce:
          want = all, checked = r == s.root;
          break;
        case CollKind::Broadcast:
          want = 1u << s.root;
          break;
        case CollKind::AllGather:
          want = 1u << i;
          break;
        case CollKind::AllToAll:
          want = 1u << i;
          break;
        case CollKind::SendRecv:
          want = 1u, checked = r == 1 && i == 0;
          break;
      }
      if (checked && (c.mixed || c.ranks != want))
        return "rank " + std::to_string(r) + " slice " + std::to_string(i) + " holds " + std::to_string(c.ranks) +
               (c.mixed ? " (mixed)" : "") + ", not " + std::to_string(want);
    }
  return "";
}

TEST(BufferView, EveryAlgorithmEndsWithItsCollectivesResult) {
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  int views = 0;
  for (const Algorithm& a : reg.all())
    for (CollKind k : a.kinds)
      for (const int p : {4, 8}) {
        CollectiveSpec s;
        s.kind = k;
        s.ranks = k == CollKind::SendRecv ? 2 : p;
        s.bytes = 8 * 4096;
        s.ranks_per_node = p / 2;
        s.root = k == CollKind::Broadcast || k == CollKind::Reduce ? 1 : 0;
        if (a.unsupported && a.unsupported(s)) continue;
        const auto prog = a.build(s);
        const BufferView v = buffer_view(*prog, s);
        EXPECT_EQ(final_state_error(v, s), "") << a.name << " " << to_string(k) << " p=" << s.ranks;
        ++views;
      }
  EXPECT_GE(views, 40);
}

// Ring all-reduce on 4 ranks by hand: after the first round each rank holds one slice summed
// with its left neighbour's (the slice that neighbour sent), after p - 1 = 3 rounds one slice
// finished, after 2(p - 1) = 6 every slice; the ring is drawn as one cycle.
TEST(BufferView, RingAllReduceRoundByRound) {
  CollectiveSpec s;
  s.kind = CollKind::AllReduce;
  s.ranks = 4;
  s.bytes = 4096;
  const auto prog = AlgorithmRegistry::builtin().find("ring", s.kind)->build(s);
  const BufferView v = buffer_view(*prog, s);
  ASSERT_EQ(v.rounds.size(), 7u);  // round 0 and six steps
  for (int r = 0; r < 4; ++r) {
    int pairs = 0, finished = 0;
    const std::uint32_t with_left = (1u << r) | (1u << ((r + 3) % 4));
    for (const SliceState& c : v.rounds[1].ranks[static_cast<std::size_t>(r)]) pairs += c.ranks == with_left ? 1 : 0;
    for (const SliceState& c : v.rounds[3].ranks[static_cast<std::size_t>(r)]) finished += c.ranks == 0xfu ? 1 : 0;
    EXPECT_EQ(pairs, 1) << "rank " << r;
    EXPECT_EQ(finished, 1) << "rank " << r;
  }
  EXPECT_TRUE(v.rounds[1].reduced && !v.rounds[1].copied);
  EXPECT_TRUE(v.rounds[4].copied && !v.rounds[4].reduced);
  const std::string text = buffer_view_text(v, s);
  EXPECT_NE(text.find("ring: 0 -> 1 -> 2 -> 3 -> 0"), std::string::npos) << text;
  EXPECT_NE(text.find("round 6 (copy, 4 messages)"), std::string::npos) << text;
}

TEST(BufferView, LargeGroupsAreNotDrawn) {
  CollectiveSpec s;
  s.kind = CollKind::AllReduce;
  s.ranks = 32;
  s.bytes = 1 << 20;
  const auto prog = AlgorithmRegistry::builtin().find("ring", s.kind)->build(s);
  const BufferView v = buffer_view(*prog, s);
  EXPECT_TRUE(v.rounds.empty());
  EXPECT_NE(buffer_view_text(v, s).find("up to 16 ranks (this one has 32)"), std::string::npos);
}

}  // namespace
}  // namespace meshsim
