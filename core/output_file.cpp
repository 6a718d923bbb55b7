#include "core/output_file.h"

#include <fmt/format.h>

#include <cstdio>
#include <fstream>

#include "core/error.h"

namespace meshsim {

void write_file(const std::string& path, const std::string& text, const std::string& flag) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(fmt::format("{}: cannot write '{}'; check the directory exists and is writable", flag, path));
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) throw Error(fmt::format("{}: writing '{}' failed (disk full?); nothing usable was written", flag, path));
}

void say_wrote(const std::string& path, const std::string& what) {
  std::fprintf(stderr, "meshsim: wrote %s (%s)\n", path.c_str(), what.c_str());
}

}  // namespace meshsim
