// --where against hand-evaluated layouts: the variables read the resolved scenario, the
// operators are muParser's, and a bad expression is one error naming --where.
#include "sim/sweep_where.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace meshsim {
namespace {

Scenario layout(int dp, int tp, int pp, int microbatches) {
  Scenario s;
  s.parallel.dp = dp;
  s.parallel.tp = tp;
  s.parallel.pp = pp;
  s.parallel.microbatches = microbatches;
  return s;
}

TEST(SweepWhere, ReadsTheLayoutAndModel) {
  const WhereFilter w("tp*pp <= 16 && microbatches >= 2*pp");
  EXPECT_TRUE(w.accepts(layout(1, 4, 4, 8)));                                               // 16 <= 16, 8 >= 8
  EXPECT_FALSE(w.accepts(layout(1, 8, 4, 8)));                                              // 32 > 16
  EXPECT_FALSE(w.accepts(layout(1, 4, 4, 7)));                                              // 7 < 8
  EXPECT_TRUE(WhereFilter("gpus == 32").accepts(layout(2, 4, 4, 8)));                       // 2 x 4 x 4
  EXPECT_TRUE(WhereFilter("global_batch == dp*microbatches").accepts(layout(3, 1, 1, 5)));  // micro-batch size 1
  Scenario big = layout(1, 1, 1, 1);
  big.model.layers = 96;
  big.model.heads = 96;
  EXPECT_TRUE(WhereFilter("layers == 96 && heads/tp >= 8").accepts(big));
  EXPECT_FALSE(WhereFilter("layers < 96 || heads > 96").accepts(big));
}

TEST(SweepWhere, BadExpressionsNameTheFlagAndTheVariables) {
  for (const char* bad : {"tp*pq <= 4", "tp <=", "", "  "}) {
    try {
      WhereFilter w(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--where"), std::string::npos) << m;
    }
  }
  try {
    WhereFilter w("tp*pq <= 4");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("microbatches"), std::string::npos) << e.what();  // the variable list
  }
}

}  // namespace
}  // namespace meshsim
