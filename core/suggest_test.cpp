#include "core/suggest.h"

#include <gtest/gtest.h>

namespace meshsim {
namespace {

// Hand-counted distances: one substitution, one deletion, one swap of neighbours, case.
TEST(Suggest, EditDistanceCountsEachEditOnce) {
  EXPECT_EQ(edit_distance("ring", "ring"), 0);
  EXPECT_EQ(edit_distance("rng", "ring"), 1);          // an insertion
  EXPECT_EQ(edit_distance("rung", "ring"), 1);         // a substitution
  EXPECT_EQ(edit_distance("fidelty", "fidelity"), 1);  // a deletion
  EXPECT_EQ(edit_distance("paralle", "parallel"), 1);
  EXPECT_EQ(edit_distance("tpo", "top"), 1);    // neighbours swapped
  EXPECT_EQ(edit_distance("Ring", "ring"), 0);  // case does not count
  EXPECT_EQ(edit_distance("", "abc"), 3);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
}

TEST(Suggest, SuggestsOnlyACloseUnambiguousName) {
  const std::vector<std::string> commands = {"collective", "topology", "simulate", "sweep", "sweep-merge", "run"};
  EXPECT_EQ(closest_name("colective", commands), "collective");
  EXPECT_EQ(closest_name("simualte", commands), "simulate");
  EXPECT_EQ(closest_name("sweep-merg", commands), "sweep-merge");
  EXPECT_EQ(closest_name("xyz", commands), std::nullopt);         // 3 letters: 1 edit at most
  EXPECT_EQ(closest_name("collective", commands), std::nullopt);  // exact: nothing to suggest
  EXPECT_EQ(closest_name("sw", {"sweep", "swap"}), std::nullopt);
  EXPECT_EQ(closest_name("tp", {"dp", "pp"}), std::nullopt);  // a tie names neither
  EXPECT_EQ(did_you_mean("fidelty", {"fidelity", "format"}), "did you mean 'fidelity'?");
  EXPECT_EQ(did_you_mean("fidelty", {"fidelity"}, ""), "did you mean fidelity?");
  EXPECT_EQ(did_you_mean("qqqqqq", {"fidelity"}), "");
}

}  // namespace
}  // namespace meshsim
