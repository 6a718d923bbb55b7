// The published-suite loader: every error names file:line, the field and the fix.
#include "sim/published.h"

#include <gtest/gtest.h>

#include "core/test_util.h"

namespace meshsim {
namespace {

using testing_util::contains;
using testing_util::error_of;

constexpr const char* kGood = R"(source: a paper
counts: iteration time
groups:
  - name: t
    where: Table 1
    scenario: {model: gpt3-175b}
    bound: {mean_abs: 1, worst_abs: 2}
    cases:
      - {id: a, metric: iteration_s, measured: 1.5, set: [parallel.tp=8]}
)";

std::string with(const std::string& from, const std::string& to) {
  std::string s = kGood;
  s.replace(s.find(from), from.size(), to);
  return s;
}

TEST(PublishedSource, ParsesAGroupAndItsCases) {
  const PublishedSource s = parse_published_source(kGood, "x.yaml");
  ASSERT_EQ(s.groups.size(), 1u);
  ASSERT_EQ(s.groups[0].cases.size(), 1u);
  EXPECT_EQ(s.groups[0].cases[0].measured, 1.5);
  EXPECT_EQ(s.groups[0].cases[0].set, (std::vector<std::string>{"parallel.tp=8"}));
  EXPECT_EQ(s.key, "x");
}

TEST(PublishedSource, ErrorsNameFileLineAndField) {
  const struct {
    std::string text;
    std::vector<std::string> want;
  } cases[] = {
      {with("measured: 1.5, ", ""), {"x.yaml:9:", "groups[0].cases[0]", "missing field 'measured'"}},
      {with("measured: 1.5", "measured: -1"), {"x.yaml:9:", "cases[0].measured", "must be a positive number"}},
      {with("measured: 1.5", "measured: fast"), {"cases[0].measured", "'fast' is not a number"}},
      {with("id: a,", "id: a, colour: red,"), {"x.yaml:9:", "unknown key 'colour'", "measured"}},
      {with("metric: iteration_s", "metric: speed"), {"cases[0].metric", "unknown metric 'speed'", "iteration_s"}},
      {with("set: [parallel.tp=8]", "set: parallel.tp=8"), {"cases[0].set", "expected a list such as"}},
      {with("groups:", "groups: ]"), {"x.yaml:", "malformed YAML"}},
  };
  for (const auto& c : cases) {
    const std::string e = error_of([&] { parse_published_source(c.text, "x.yaml"); });
    for (const std::string& w : c.want) EXPECT_TRUE(contains(e, w)) << e << "\n  wants: " << w;
  }
}

TEST(PublishedSuite, KeepOnlyCutsToASourceOrOneOfItsGroups) {
  PublishedSource a = parse_published_source(kGood, "a.yaml");
  a.groups.push_back(a.groups[0]);
  a.groups[1].name = "u";
  const PublishedSuite suite{{a, parse_published_source(kGood, "b.yaml")}};
  PublishedSuite one = suite;
  keep_only(one, "a", "dir");
  ASSERT_EQ(one.sources.size(), 1u);
  EXPECT_EQ(one.sources[0].groups.size(), 2u);
  PublishedSuite group = suite;
  keep_only(group, "a/u", "dir");
  ASSERT_EQ(group.sources.size(), 1u);
  ASSERT_EQ(group.sources[0].groups.size(), 1u);
  EXPECT_EQ(group.sources[0].groups[0].name, "u");
  PublishedSuite none = suite;
  const std::string e = error_of([&] { keep_only(none, "a/v", "dir"); });
  EXPECT_TRUE(contains(e, "--only: 'a/v' matches no source/group of dir")) << e;
}

}  // namespace
}  // namespace meshsim
