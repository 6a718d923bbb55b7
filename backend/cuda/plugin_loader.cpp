// The main side of the CUDA plugin seam (plugin.h): find libmeshsim_cuda.so, dlopen() it,
// check its ABI version. Nothing here links or includes CUDA.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "backend/cuda/plugin.h"
#include "core/error.h"
#include "core/plugin_lookup.h"

namespace meshsim::cuda {
namespace {

std::string fix() {
  return std::string("; build meshsim with the CUDA toolkit and NCCL (README, On a GPU machine) or set ") +
         kCudaPluginEnv + " to the path of " + kCudaPluginFile;
}

// The error of a failed lookup. `also`: the other places looked in, when none had the file.
Error cannot_load(const std::string& path, const std::string& why, const std::vector<std::string>& also = {}) {
  std::string where = path;
  for (const std::string& a : also) where += " (nor " + a + ")";
  return Error("backend cuda: cannot load the CUDA plugin " + where + ": " + why + fix());
}

// load_cuda_plugin, with the places also looked in named when dlopen fails. RTLD_LOCAL: the
// plugin's symbols stay its own.
const MeshsimCudaPlugin& load(const std::string& path, const std::vector<std::string>& also) {
  return open_plugin<MeshsimCudaPlugin>(
      path, RTLD_LOCAL, {kCudaPluginSymbol, kCudaPluginAbi, "CUDA"},
      [&](const std::string& why) { return cannot_load(path, why, also); },
      [&](int version) {
        return Error("backend cuda: the CUDA plugin " + path + " has ABI version " + std::to_string(version) +
                     ", this meshsim needs " + std::to_string(kCudaPluginAbi) +
                     "; rebuild meshsim and the plugin from one tree, or set " + kCudaPluginEnv +
                     " to the matching plugin");
      });
}

}  // namespace

std::vector<std::string> cuda_plugin_candidates(const char* env, const std::string& exe) {
  return plugin_candidates(env, exe, kCudaPluginFile);
}

const MeshsimCudaPlugin& load_cuda_plugin(const std::string& path) { return load(path, {}); }

const MeshsimCudaPlugin& cuda_plugin() {
  const auto [path, also] = pick_plugin(cuda_plugin_candidates(std::getenv(kCudaPluginEnv), self_exe()));
  // One load per path, its table or its error kept (a process asks for the plugin a few times).
  static std::mutex mu;
  static std::map<std::string, std::variant<const MeshsimCudaPlugin*, std::string>> loaded;
  const std::lock_guard<std::mutex> lock(mu);
  auto it = loaded.find(path);
  if (it == loaded.end()) {
    try {
      it = loaded.emplace(path, &load(path, also)).first;
    } catch (const Error& e) {
      it = loaded.emplace(path, e.what()).first;
    }
  }
  if (const auto* error = std::get_if<std::string>(&it->second)) throw Error(*error);
  return *std::get<const MeshsimCudaPlugin*>(it->second);
}

}  // namespace meshsim::cuda
