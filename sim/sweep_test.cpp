// The sweep engine without simulating: the variant list, --vary and --shard parsing, ranking,
// and shards written by RowWriter and read back by merge, whole or as parts of one shard (as
// the ranks of an MPI sweep hand theirs to rank 0).
#include "sim/sweep.h"

#include <gtest/gtest.h>

#include <sstream>

#include "core/error.h"

namespace meshsim::sweep {
namespace {

Sweep two_by_three() { return Sweep(parse_varies({"parallel.tp=1,2", "placement=natural|bunched:2,2|x"})); }

TEST(SweepEngine, VariantsAreMixedRadixTheLastVaryFastest) {
  const Sweep s = two_by_three();
  EXPECT_EQ(s.size(), 6);
  EXPECT_EQ(s.sets(0), (std::vector<std::string>{"parallel.tp=1", "placement=natural"}));
  EXPECT_EQ(s.sets(4), (std::vector<std::string>{"parallel.tp=2", "placement=bunched:2,2"}));
  EXPECT_EQ(s.choices(5), (std::vector<std::size_t>{1, 2}));
  EXPECT_EQ(Sweep({}).size(), 1);  // no vary: the base alone
}

TEST(SweepEngine, VaryAndShardErrorsNameTheFlag) {
  for (const auto& texts : std::vector<std::vector<std::string>>{{}, {"tp"}, {"a=1", "a=2"}, {"a=1,,2"}}) {
    try {
      (void)parse_varies(texts);
      ADD_FAILURE() << "accepted " << texts.size() << " --vary";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--vary"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(
      Sweep(parse_varies({"a=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", "b=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16",
                          "c=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16", "d=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16",
                          "e=1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17"})),
      Error);
  EXPECT_FALSE(parse_shard("").active);
  EXPECT_EQ(parse_shard("2/3").text(), "2/3");
  for (const char* bad : {"3/3", "1", "-1/2", "0/0"}) EXPECT_THROW(parse_shard(bad), Error) << bad;
}

// Rows made up for variant i: out of memory for i = 3, invalid for i = 5, the others fit.
std::vector<Row> made_up(const Sweep& s, const Shard& shard) {
  std::vector<Row> rows;
  for (long pos = 0; pos < shard.count(s.size()); ++pos) {
    Row r;
    r.index = shard.index(pos);
    r.sets = s.sets(r.index);
    for (const auto& x : r.sets) r.label += (r.label.empty() ? "" : " ") + x;
    r.valid = r.index != 5;
    r.error = r.valid ? "" : "parallel: tp x dp is not the GPU count";
    r.gpus = 8;
    r.layout = {8, 1, 1, 1, 1};
    r.iteration = Time::from_ps(1000003 * (r.index + 1));
    r.tokens_per_s = 1e6 / static_cast<double>(r.index + 1) / 3.0;
    r.mfu = 0.1 * static_cast<double>(r.index);
    r.peak = 1000 * r.index;
    r.fits = r.index != 3;
    rows.push_back(r);
  }
  return rows;
}

std::string shard_text(const Sweep& s, const Shard& shard) {
  const std::vector<Row> rows = made_up(s, shard);
  const auto header = shard_header(shard, "0123456789abcdef", "s.yaml", s);
  std::ostringstream out;
  RowWriter w(nullptr, &out, s, &header);
  for (long pos = static_cast<long>(rows.size()); pos-- > 0;) w.add(pos, rows[static_cast<std::size_t>(pos)]);
  return out.str();
}

std::string jsonl(const Sweep& s, const std::vector<Row>& rows) {
  std::ostringstream out;
  RowWriter(nullptr, &out, s).add_all(rows);
  return out.str();
}

TEST(SweepEngine, MergedShardsAreTheWholeSweepOrOneShard) {
  const Sweep s = two_by_three();
  std::istringstream a(shard_text(s, parse_shard("1/2"))), b(shard_text(s, parse_shard("0/2")));
  const Merged whole = merge({{"a", &a}, {"b", &b}});
  EXPECT_EQ(whole.source, "s.yaml");
  EXPECT_EQ(jsonl(whole.sweep, whole.rows), jsonl(s, made_up(s, Shard{})));
  // Shard 1/2 as two ranks run it: shards 1/4 and 3/4.
  std::istringstream r0(shard_text(s, parse_shard("1/4"))), r1(shard_text(s, parse_shard("3/4")));
  const Merged part = merge({{"rank 0", &r0}, {"rank 1", &r1}}, parse_shard("1/2"));
  EXPECT_EQ(jsonl(part.sweep, part.rows), jsonl(s, made_up(s, parse_shard("1/2"))));
  std::istringstream lone(shard_text(s, parse_shard("1/4")));
  try {
    (void)merge({{"rank 0", &lone}}, parse_shard("1/2"));
    ADD_FAILURE() << "merged without shard 3/4";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shard 3/4 is missing"), std::string::npos) << e.what();
  }
}

TEST(SweepEngine, RankedFitsFirstThenOutOfMemoryThenInvalid) {
  const Sweep s = two_by_three();
  const std::vector<Row> rows = made_up(s, Shard{});
  std::vector<long> order;
  for (const Row* r : ranked(rows, rank_metric("tokens_per_s"))) order.push_back(r->index);
  EXPECT_EQ(order, (std::vector<long>{0, 1, 2, 4, 3, 5}));
  order.clear();
  for (const Row* r : ranked(rows, rank_metric("memory"))) order.push_back(r->index);
  EXPECT_EQ(order, (std::vector<long>{0, 1, 2, 4, 3, 5}));
  order.clear();
  for (const Row* r : ranked(rows, rank_metric("iteration_s"))) order.push_back(r->index);
  EXPECT_EQ(order, (std::vector<long>{0, 1, 2, 4, 3, 5}));
  order.clear();
  for (const Row* r : ranked(rows, rank_metric("mfu"))) order.push_back(r->index);
  EXPECT_EQ(order, (std::vector<long>{4, 2, 1, 0, 3, 5}));
  EXPECT_THROW(rank_metric("speed"), Error);
}

}  // namespace
}  // namespace meshsim::sweep
