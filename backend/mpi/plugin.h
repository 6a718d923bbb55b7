// The seam between meshsim and MPI. `meshsim sweep` run under a launcher (mpirun, srun)
// shares its variants across the ranks; everything that calls MPI lives in a shared library,
// libmeshsim_mpi.so (built only when CMake's find_package(MPI) finds it), which sweep
// dlopen()s when the environment says a launcher started it (launcher_env below). The meshsim
// binary never links libmpi, so every other command starts as fast as before, and a sweep
// outside a launcher never loads the plugin. The plugin exports one C symbol,
// meshsim_mpi_plugin, returning the table below.
//
//   const Launcher l = launcher_env();              // from OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_RANK
//   if (l.active) { const MeshsimMpiPlugin& p = mpi_plugin(); p.init(&rank, &size, &local); ... }
//
// Lookup (mpi_plugin_candidates): $MESHSIM_MPI_PLUGIN when set (that file only); else
// libmeshsim_mpi.so in the executable's folder (/proc/self/exe), then in its ../lib. A plugin
// that cannot be loaded is one line naming the file, dlerror() and the fix.
//
// The table passes C++ types (std::string, std::vector): the plugin and meshsim are built
// from one tree with one compiler; kMpiPluginAbi guards it (bump it whenever the table changes).
#pragma once

#include <string>
#include <vector>

namespace meshsim::mpi {

inline constexpr int kMpiPluginAbi = 1;
inline constexpr const char* kMpiPluginFile = "libmeshsim_mpi.so";
inline constexpr const char* kMpiPluginSymbol = "meshsim_mpi_plugin";
inline constexpr const char* kMpiPluginEnv = "MESHSIM_MPI_PLUGIN";
// MESHSIM_MPI=0: ignore the launcher (every rank runs the whole sweep on its own).
inline constexpr const char* kMpiDisableEnv = "MESHSIM_MPI";

}  // namespace meshsim::mpi

struct MeshsimMpiPlugin {
  int abi_version;           // the plugin's kMpiPluginAbi; the caller checks it before any other field
  const char* (*library)();  // MPI_Get_library_version's first line ("Open MPI v4.1.4, ...")
  // MPI_Init_thread (MPI_THREAD_FUNNELED: only the calling thread uses MPI); fills this rank,
  // the world size and how many ranks share this node. Returns "" or the error.
  std::string (*init)(int* rank, int* size, int* local_size);
  // Collective: every rank passes its bytes; rank 0 gets each rank's bytes in rank order,
  // the other ranks an empty vector.
  std::vector<std::string> (*gather)(const std::string& bytes);
  // Collective: every rank passes a string and gets every rank's, in rank order.
  std::vector<std::string> (*all_gather)(const std::string& text);
  void (*finalize)();       // MPI_Finalize (collective)
  void (*abort)(int code);  // MPI_Abort on MPI_COMM_WORLD: ends every rank, never returns
};

// The plugin's entry point (defined only in the plugin; meshsim finds it with dlsym).
extern "C" __attribute__((visibility("default"))) const MeshsimMpiPlugin* meshsim_mpi_plugin(int abi_version);

namespace meshsim::mpi {

// What the environment says about a launcher: active when OMPI_COMM_WORLD_SIZE, PMI_SIZE or
// PMIX_RANK is set (and MESHSIM_MPI is not 0); `rank` from OMPI_COMM_WORLD_RANK, PMI_RANK or
// PMIX_RANK (0 when none), `variable` the one that gave it away ("OMPI_COMM_WORLD_SIZE=2").
struct Launcher {
  bool active = false;
  int rank = 0;
  std::string variable;
};
Launcher launcher_env();

// Where the plugin is looked for, in order: `env` alone when set and non-empty; else
// <exe folder>/libmeshsim_mpi.so, then <exe folder>/../lib/libmeshsim_mpi.so.
std::vector<std::string> mpi_plugin_candidates(const char* env, const std::string& exe);

// dlopen()s the plugin at `path` (RTLD_GLOBAL: Open MPI's own components resolve libmpi
// through it) and checks its ABI version. Throws Error, one line naming the file and the fix.
const MeshsimMpiPlugin& load_mpi_plugin(const std::string& path);

// The process's plugin by the lookup rule, loaded on first use; throws the loader's Error.
const MeshsimMpiPlugin& mpi_plugin();

}  // namespace meshsim::mpi
