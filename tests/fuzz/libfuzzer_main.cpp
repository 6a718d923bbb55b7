// libFuzzer entry point for one target of targets.h, chosen at build time
// (MESHSIM_FUZZ_TARGET); built only with clang and -DMESHSIM_LIBFUZZER=ON
// (docs/validation/robustness.md has the commands).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tests/fuzz/targets.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const meshsim::fuzz::Target* target = meshsim::fuzz::find_target(MESHSIM_FUZZ_TARGET);
  if (target == nullptr) __builtin_trap();
  (void)target->run(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
