// Helpers shared by the tests: the message of the meshsim::Error a call throws.
//
//   EXPECT_TRUE(contains(error_of([] { make_preset("nope"); }), "unknown preset"));
#pragma once

#include <functional>
#include <string>

#include "core/error.h"

namespace meshsim::testing_util {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace meshsim::testing_util
