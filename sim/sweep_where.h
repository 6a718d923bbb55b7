// `sweep --where EXPR`: a condition on each variant's resolved scenario, checked before the
// variant is simulated; a variant for which it is false is excluded (counted in the summary,
// its row saying why). The expression is muParser's (libmuparser-dev): arithmetic, comparisons
// (< <= > >= == !=), && || and parentheses, over the variables below, each a number.
//
//   WhereFilter w("tp*pp <= 64 && microbatches >= 2*pp");   // throws Error naming --where
//   w.accepts(scenario)                                      // true: simulate it
#pragma once

#include <string>

#include "sim/scenario.h"

namespace meshsim {

class WhereFilter {
 public:
  // Checks the expression once (syntax, unknown names); throws Error naming --where.
  explicit WhereFilter(std::string expr);
  const std::string& text() const { return expr_; }
  // Whether the scenario passes (nonzero). Thread-safe: each call has its own parser.
  bool accepts(const Scenario& s) const;
  // "dp, tp, pp, ...": the variables an expression may use.
  static std::string variables();

 private:
  std::string expr_;
};

}  // namespace meshsim
