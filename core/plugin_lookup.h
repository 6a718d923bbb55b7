// What the plugin loaders share (backend/cuda/plugin_loader.cpp, backend/mpi/plugin_loader.cpp):
// this executable's path, dlerror() on one line, and the lookup order of a plugin file.
//
//   plugin_candidates(std::getenv("MESHSIM_X_PLUGIN"), self_exe(), "libmeshsim_x.so")
//     -> {$MESHSIM_X_PLUGIN} when set, else {<exe dir>/libmeshsim_x.so, <exe dir>/../lib/libmeshsim_x.so}
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

namespace meshsim {

// /proc/self/exe, or "" where it cannot be read.
inline std::string self_exe() {
  std::string buf(4096, '\0');
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) return "";
  buf.resize(static_cast<std::size_t>(n));
  return buf;
}

// dlerror() text on one line (a message must stay one line).
inline std::string dl_error() {
  const char* e = ::dlerror();
  std::string s = e == nullptr ? "unknown dlopen error" : e;
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

// Where to look for plugin `file`: the variable's path alone when it is set; else beside the
// executable (`exe`; the working directory when unknown), then in its ../lib.
inline std::vector<std::string> plugin_candidates(const char* env, const std::string& exe, const char* file) {
  namespace fs = std::filesystem;
  if (env != nullptr && *env != '\0') return {env};
  const fs::path dir = exe.empty() ? fs::current_path() : fs::path(exe).parent_path();
  return {(dir / file).string(), (dir.parent_path() / "lib" / file).string()};
}

}  // namespace meshsim
