// A field named the way the front end in use spells it: the CLI's flags by default, Python's
// keyword arguments once the module says so.
#include "core/flag.h"

#include <gtest/gtest.h>

namespace meshsim {
namespace {

TEST(Flag, EachFrontEndSpellsAFieldItsOwnWay) {
  ASSERT_EQ(spelling(), Spelling::Cli);  // what meshsim's commands see without asking
  EXPECT_EQ(flag("algo"), "--algo");
  EXPECT_EQ(flag("ranks", "N"), "--ranks N");
  set_spelling(Spelling::Python);
  EXPECT_EQ(flag("algo"), "algo");
  EXPECT_EQ(flag("algo", "nccl"), "algo=nccl");
  set_spelling(Spelling::Cli);
  EXPECT_EQ(flag("fidelity", "flow"), "--fidelity flow");
}

}  // namespace
}  // namespace meshsim
