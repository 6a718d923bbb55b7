// Test helper: runs `fn(rank)` on `world` threads and collects each rank's Error text.
//
//   std::vector<std::string> errs = run_ranks(3, [&](int r) { ... });   // "" = no error
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace meshsim::cpu::testing {

inline std::vector<std::string> run_ranks(int world, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(static_cast<std::size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
        if (errors[r].empty()) errors[r] = "(empty error)";
      }
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace meshsim::cpu::testing
