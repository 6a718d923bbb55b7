// A stand-in CUDA plugin for plugin_test.cpp, built with no CUDA at all: the loader's success
// and ABI-mismatch paths run in every build. FAKE_PLUGIN_ABI is the version it reports
// (kCudaPluginAbi, or another to be refused); it has no GPU and no GpuApi.
#include <stdexcept>
#include <string>
#include <vector>

#include "backend/cuda/plugin.h"

namespace {

meshsim::cuda::GpuApi& no_gpu_api() { throw std::logic_error("the fake CUDA plugin has no GpuApi"); }

meshsim::cuda::DeviceInfo probe() {
  meshsim::cuda::DeviceInfo info;
  info.reason = "fake CUDA plugin, ABI " + std::to_string(FAKE_PLUGIN_ABI);
  return info;
}

std::string no_device(const std::vector<float>&, const std::vector<float>&, std::vector<float>&) {
  return "fake: no device";
}
std::string no_device_pass(const std::vector<float>&, float, std::vector<float>&) { return "fake: no device"; }

}  // namespace

extern "C" const MeshsimCudaPlugin* meshsim_cuda_plugin(int) {
  static const MeshsimCudaPlugin table{
      .abi_version = FAKE_PLUGIN_ABI,
      .libraries = "none (fake)",
      .gpu_api = &no_gpu_api,
      .probe_devices = &probe,
      .reduce_on_device = &no_device,
      .stream_pass_on_device = &no_device_pass,
  };
  return &table;
}
