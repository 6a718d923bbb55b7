// The seam between meshsim and its CUDA backend. Everything that calls CUDA, cuBLAS or NCCL
// (the real GpuApi, kernels/*.cu, GPU discovery and the device self-tests) is built into a
// shared library, libmeshsim_cuda.so, which meshsim dlopen()s on first use, so a command that
// touches no GPU never loads cudart, cuBLAS(Lt) or NCCL, and the binary starts on machines
// without them. The plugin exports one C symbol, meshsim_cuda_plugin, returning the table below.
//
//   const MeshsimCudaPlugin& p = cuda_plugin();   // loaded by the lookup rule; throws Error
//   GpuApi& api = p.gpu_api();                     // what real_gpu_api() returns
//
// Lookup (cuda_plugin_candidates): $MESHSIM_CUDA_PLUGIN when set (that file only); else
// libmeshsim_cuda.so in the executable's folder (/proc/self/exe), then in its ../lib. A plugin
// that cannot be loaded is one line naming the file, dlerror() and the fix.
//
// The table passes C++ types (GpuApi, DeviceInfo, std::string): the plugin and meshsim are
// built from one tree with one compiler. kCudaPluginAbi guards the rest: bump it whenever
// this table, gpu_api.h, device.h or backend/kernel_call.h's KernelCall change, and a plugin
// from another tree is refused with both versions named.
#pragma once

#include <string>
#include <vector>

#include "backend/cuda/device.h"
#include "backend/cuda/gpu_api.h"

namespace meshsim::cuda {

inline constexpr int kCudaPluginAbi = 1;
inline constexpr const char* kCudaPluginFile = "libmeshsim_cuda.so";
inline constexpr const char* kCudaPluginSymbol = "meshsim_cuda_plugin";
inline constexpr const char* kCudaPluginEnv = "MESHSIM_CUDA_PLUGIN";

}  // namespace meshsim::cuda

struct MeshsimCudaPlugin {
  int abi_version;                      // the plugin's kCudaPluginAbi; the caller checks it before any other field
  const char* libraries;                // what it was built against: "CUDA runtime 13.0, cuBLAS 13.1.0, NCCL 2.28.3"
  meshsim::cuda::GpuApi& (*gpu_api)();  // the RealGpuApi (gpu_api_real.cpp), one per process
  // device.h's functions, run by the plugin.
  meshsim::cuda::DeviceInfo (*probe_devices)();
  std::string (*reduce_on_device)(const std::vector<float>& a, const std::vector<float>& b, std::vector<float>& out);
  std::string (*stream_pass_on_device)(const std::vector<float>& in, float scale, std::vector<float>& out);
};

// The plugin's entry point (defined only in the plugin; meshsim finds it with dlsym).
// `abi_version` is the caller's kCudaPluginAbi; the plugin returns its table whatever it is,
// and the caller refuses a table of another version.
extern "C" __attribute__((visibility("default"))) const MeshsimCudaPlugin* meshsim_cuda_plugin(int abi_version);

namespace meshsim::cuda {

// Where the plugin is looked for, in order: `env` alone when set and non-empty; else
// <exe folder>/libmeshsim_cuda.so, then <exe folder>/../lib/libmeshsim_cuda.so.
std::vector<std::string> cuda_plugin_candidates(const char* env, const std::string& exe);

// dlopen()s the plugin at `path` and checks its ABI version (no caching; a loaded plugin
// stays loaded). Throws Error, one line: "backend cuda: cannot load the CUDA plugin PATH:
// DLERROR; build meshsim with the CUDA toolkit and NCCL ... or set MESHSIM_CUDA_PLUGIN ...".
const MeshsimCudaPlugin& load_cuda_plugin(const std::string& path);

// The process's plugin by the lookup rule ($MESHSIM_CUDA_PLUGIN, /proc/self/exe), loaded on
// first use and kept per path (a failure too); throws the loader's Error.
const MeshsimCudaPlugin& cuda_plugin();

}  // namespace meshsim::cuda
