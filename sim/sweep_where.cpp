// sweep --where: see sweep_where.h.
#include "sim/sweep_where.h"

#include <fmt/format.h>
#include <muParser.h>

#include <array>
#include <string_view>
#include <utility>

#include "core/error.h"

namespace meshsim {
namespace {

constexpr std::size_t kVariables = 19;

// muParser's message without its closing full stop (ours follow it).
std::string message(const mu::Parser::exception_type& e) {
  std::string m = e.GetMsg();
  while (!m.empty() && (m.back() == '.' || m.back() == ' ')) m.pop_back();
  return m;
}

// Every variable's name and value for one scenario (the layout, then the model).
std::array<std::pair<const char*, double>, kVariables> values_of(const Scenario& s) {
  const ParallelSpec& p = s.parallel;
  const ModelSpec& m = s.model;
  return {{{"dp", p.dp},
           {"tp", p.tp},
           {"pp", p.pp},
           {"cp", p.cp},
           {"ep", p.ep},
           {"zero", p.zero},
           {"vchunks", p.vchunks},
           {"microbatches", p.microbatches},
           {"micro_batch_size", p.micro_batch_size},
           {"global_batch", static_cast<double>(p.global_batch())},
           {"gpus", p.world_size()},
           {"layers", m.layers},
           {"hidden", m.hidden},
           {"heads", m.heads},
           {"kv_heads", m.kv_heads},
           {"ffn_hidden", m.ffn_hidden},
           {"seq", m.seq},
           {"vocab", m.vocab},
           {"experts", m.experts}}};
}

// The parser for `expr` with every variable bound to `storage`.
void bind_variables(mu::Parser& parser, const std::string& expr, std::array<double, kVariables>& storage,
                    const std::array<std::pair<const char*, double>, kVariables>& values) {
  for (std::size_t i = 0; i < kVariables; ++i) {
    storage[i] = values[i].second;
    parser.DefineVar(values[i].first, &storage[i]);
  }
  parser.SetExpr(expr);
}

}  // namespace

WhereFilter::WhereFilter(std::string expr) : expr_(std::move(expr)) {
  if (expr_.find_first_not_of(" \t") == std::string::npos)
    throw Error("--where: the expression is empty; write e.g. --where 'tp*pp <= 64'");
  // muParser reads a lone '=' as an assignment (tp = 4 sets tp and is true): refuse it.
  for (std::size_t i = 0; i < expr_.size(); ++i) {
    if (expr_[i] != '=') continue;
    const bool compound = (i > 0 && std::string_view("<>!=").find(expr_[i - 1]) != std::string_view::npos) ||
                          (i + 1 < expr_.size() && expr_[i + 1] == '=');
    if (!compound)
      throw Error(fmt::format("--where '{}': '=' assigns a variable; compare with '==' (e.g. tp == 4)", expr_));
    if (i + 1 < expr_.size() && expr_[i + 1] == '=') ++i;
  }
  // Checked once on a neutral layout, so a typo fails before any variant runs.
  Scenario neutral;
  mu::Parser parser;
  std::array<double, kVariables> storage{};
  try {
    bind_variables(parser, expr_, storage, values_of(neutral));
    (void)parser.Eval();
  } catch (const mu::Parser::exception_type& e) {
    throw Error(fmt::format("--where '{}': {}; the variables are {}", expr_, message(e), variables()));
  }
}

bool WhereFilter::accepts(const Scenario& s) const {
  mu::Parser parser;
  std::array<double, kVariables> storage{};
  try {
    bind_variables(parser, expr_, storage, values_of(s));
    return parser.Eval() != 0.0;
  } catch (const mu::Parser::exception_type& e) {
    throw Error(fmt::format("--where '{}': {}", expr_, message(e)));
  }
}

std::string WhereFilter::variables() {
  std::string out;
  for (const auto& [name, value] : values_of(Scenario{})) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

}  // namespace meshsim
