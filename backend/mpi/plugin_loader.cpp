// The main side of the MPI plugin seam (plugin.h): see whether a launcher started this
// process, find libmeshsim_mpi.so, dlopen() it, check its ABI version. Nothing here links or
// includes MPI.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/mpi/plugin.h"
#include "core/error.h"
#include "core/plugin_lookup.h"

namespace meshsim::mpi {
namespace {

Error cannot_load(const std::string& where, const std::string& why) {
  const std::string by = launcher_env().variable;
  return Error("started by an MPI launcher" + (by.empty() ? "" : " (" + by + ")") + " but cannot load the MPI plugin " +
               where + ": " + why +
               "; install Open MPI (apt-get install libopenmpi-dev openmpi-bin, or tools/install-deps.sh) and rebuild "
               "meshsim so libmeshsim_mpi.so is built beside it, set " +
               kMpiPluginEnv + " to its path, or set " + kMpiDisableEnv + "=0 to run the whole command in every rank");
}

// RTLD_GLOBAL: Open MPI's own components dlopen() later and need libmpi's symbols.
const MeshsimMpiPlugin& load(const std::string& path, const std::string& where) {
  return open_plugin<MeshsimMpiPlugin>(
      path, RTLD_GLOBAL, {kMpiPluginSymbol, kMpiPluginAbi, "MPI"},
      [&](const std::string& why) { return cannot_load(where, why); },
      [&](int version) {
        return Error("the MPI plugin " + path + " has ABI version " + std::to_string(version) +
                     ", this meshsim needs " + std::to_string(kMpiPluginAbi) +
                     "; rebuild meshsim and the plugin from one tree, or set " + kMpiPluginEnv +
                     " to the matching plugin");
      });
}

std::optional<int> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0') return std::nullopt;
  return static_cast<int>(x);
}

}  // namespace

Launcher launcher_env() {
  Launcher l;
  const char* off = std::getenv(kMpiDisableEnv);
  if (off != nullptr && std::string(off) == "0") return l;
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (const char* x = std::getenv(v); x != nullptr && *x != '\0') {
      l.active = true;
      l.variable = std::string(v) + "=" + x;
      break;
    }
  }
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
    if (const auto r = env_int(v)) {
      l.rank = *r;
      break;
    }
  return l;
}

std::vector<std::string> mpi_plugin_candidates(const char* env, const std::string& exe) {
  return plugin_candidates(env, exe, kMpiPluginFile);
}

const MeshsimMpiPlugin& load_mpi_plugin(const std::string& path) { return load(path, path); }

const MeshsimMpiPlugin& mpi_plugin() {
  static std::mutex mu;
  static const MeshsimMpiPlugin* table = nullptr;
  const std::lock_guard<std::mutex> lock(mu);
  if (table != nullptr) return *table;
  const auto [path, also] = pick_plugin(mpi_plugin_candidates(std::getenv(kMpiPluginEnv), self_exe()));
  std::string where = path;
  for (const std::string& a : also) where += " (nor " + a + ")";
  return *(table = &load(path, where));
}

}  // namespace meshsim::mpi
