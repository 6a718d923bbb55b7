// What the plugin loaders share (backend/cuda/plugin_loader.cpp, backend/mpi/plugin_loader.cpp):
// this executable's path, dlerror() on one line, the lookup order of a plugin file, and opening
// one: dlopen, its entry symbol, its table and the table's ABI version.
//
//   plugin_candidates(std::getenv("MESHSIM_X_PLUGIN"), self_exe(), "libmeshsim_x.so")
//     -> {$MESHSIM_X_PLUGIN} when set, else {<exe dir>/libmeshsim_x.so, <exe dir>/../lib/libmeshsim_x.so}
//   const PluginPick pick = pick_plugin(candidates);   // the first that exists
//   const X& t = open_plugin<X>(pick.path, RTLD_LOCAL, {"meshsim_x_plugin", kXAbi, "X"}, fail, wrong_abi);
#pragma once

#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "core/error.h"

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

// The first candidate that exists; when none does, the first, with the others in `also` so
// the error can name every place looked in.
struct PluginPick {
  std::string path;
  std::vector<std::string> also;
};
inline PluginPick pick_plugin(const std::vector<std::string>& candidates) {
  for (const std::string& c : candidates) {
    std::error_code ec;
    if (std::filesystem::exists(c, ec)) return {c, {}};
  }
  return {candidates.front(), std::vector<std::string>(candidates.begin() + 1, candidates.end())};
}

// A plugin's entry: the C symbol it exports, the ABI version this tree builds, and the word
// its errors use for it ("CUDA", "MPI").
struct PluginEntry {
  const char* symbol;
  int abi;
  const char* what;
};

// dlopen()s `path` (RTLD_NOW | `scope`; never closed: CUDA, NCCL and MPI keep threads and
// handlers that outlive an unload), calls its entry with the ABI version and checks the
// returned table's `abi_version`. `fail(why)` makes the Error of a plugin that cannot be
// loaded, `wrong_abi(version)` that of a plugin from another tree.
template <class Table>
const Table& open_plugin(const std::string& path, int scope, const PluginEntry& entry,
                         const std::function<Error(const std::string&)>& fail,
                         const std::function<Error(int)>& wrong_abi) {
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | scope);
  if (handle == nullptr) throw fail(dl_error());
  ::dlerror();
  void* sym = ::dlsym(handle, entry.symbol);
  if (sym == nullptr)
    throw fail(std::string("not a meshsim ") + entry.what + " plugin (no " + entry.symbol + ": " + dl_error() + ")");
  const Table* table = reinterpret_cast<const Table* (*)(int)>(sym)(entry.abi);
  if (table == nullptr) throw fail(std::string(entry.symbol) + " returned no table");
  if (table->abi_version != entry.abi) throw wrong_abi(table->abi_version);
  return *table;
}

}  // namespace meshsim
