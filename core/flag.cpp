#include "core/flag.h"

#include <atomic>

namespace meshsim {

namespace {
std::atomic<Spelling> g_spelling{Spelling::Cli};
}  // namespace

void set_spelling(Spelling s) { g_spelling.store(s, std::memory_order_relaxed); }
Spelling spelling() { return g_spelling.load(std::memory_order_relaxed); }

std::string flag(std::string_view name) {
  return spelling() == Spelling::Python ? std::string(name) : "--" + std::string(name);
}

std::string flag(std::string_view name, std::string_view value) {
  return flag(name) + (spelling() == Spelling::Python ? "=" : " ") + std::string(value);
}

}  // namespace meshsim
