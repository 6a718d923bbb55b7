// The main side of the CUDA plugin seam (plugin.h): find libmeshsim_cuda.so, dlopen() it,
// check its ABI version. Nothing here links or includes CUDA.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
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

namespace fs = std::filesystem;

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

// load_cuda_plugin, with the places also looked in named when dlopen fails.
const MeshsimCudaPlugin& load(const std::string& path, const std::vector<std::string>& also) {
  // RTLD_LOCAL: the plugin's symbols stay its own. It is never closed (CUDA and NCCL keep
  // threads and handlers that outlive an unload).
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) throw cannot_load(path, dl_error(), also);
  ::dlerror();
  void* sym = ::dlsym(handle, kCudaPluginSymbol);
  if (sym == nullptr)
    throw cannot_load(path,
                      std::string("not a meshsim CUDA plugin (no ") + kCudaPluginSymbol + ": " + dl_error() + ")");
  const auto entry = reinterpret_cast<const MeshsimCudaPlugin* (*)(int)>(sym);
  const MeshsimCudaPlugin* table = entry(kCudaPluginAbi);
  if (table == nullptr) throw cannot_load(path, std::string(kCudaPluginSymbol) + " returned no table");
  if (table->abi_version != kCudaPluginAbi)
    throw Error("backend cuda: the CUDA plugin " + path + " has ABI version " + std::to_string(table->abi_version) +
                ", this meshsim needs " + std::to_string(kCudaPluginAbi) +
                "; rebuild meshsim and the plugin from one tree, or set " + kCudaPluginEnv + " to the matching plugin");
  return *table;
}

}  // namespace

std::vector<std::string> cuda_plugin_candidates(const char* env, const std::string& exe) {
  return plugin_candidates(env, exe, kCudaPluginFile);
}

const MeshsimCudaPlugin& load_cuda_plugin(const std::string& path) { return load(path, {}); }

const MeshsimCudaPlugin& cuda_plugin() {
  const std::vector<std::string> candidates = cuda_plugin_candidates(std::getenv(kCudaPluginEnv), self_exe());
  // The first candidate that exists; when none does, the first, so dlerror names it.
  std::string path = candidates.front();
  std::vector<std::string> also(candidates.begin() + 1, candidates.end());
  for (const std::string& c : candidates) {
    std::error_code ec;
    if (fs::exists(c, ec)) {
      path = c;
      also.clear();
      break;
    }
  }
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
