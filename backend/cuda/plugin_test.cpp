// The CUDA plugin seam (plugin.h): where meshsim looks for libmeshsim_cuda.so, the one-line
// error when it cannot be loaded, the ABI check, and (CUDA builds) this build's plugin.
#include "backend/cuda/plugin.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/device.h"
#include "backend/cuda/gpu_api.h"
#include "core/test_util.h"

namespace meshsim::cuda {
namespace {

using testing_util::contains;
using testing_util::error_of;

// Sets MESHSIM_CUDA_PLUGIN for one test and restores it after.
class PluginEnv {
 public:
  explicit PluginEnv(const std::string& value) {
    if (const char* old = std::getenv(kCudaPluginEnv)) old_ = old;
    ::setenv(kCudaPluginEnv, value.c_str(), 1);
  }
  ~PluginEnv() {
    if (old_)
      ::setenv(kCudaPluginEnv, old_->c_str(), 1);
    else
      ::unsetenv(kCudaPluginEnv);
  }
  PluginEnv(const PluginEnv&) = delete;
  PluginEnv& operator=(const PluginEnv&) = delete;

 private:
  std::optional<std::string> old_;
};

TEST(CudaPlugin, LooksBesideTheExecutableThenInItsLib) {
  EXPECT_EQ(cuda_plugin_candidates(nullptr, "/opt/meshsim/bin/meshsim"),
            (std::vector<std::string>{"/opt/meshsim/bin/libmeshsim_cuda.so", "/opt/meshsim/lib/libmeshsim_cuda.so"}));
  EXPECT_EQ(cuda_plugin_candidates("", "/b/cli/meshsim"),
            (std::vector<std::string>{"/b/cli/libmeshsim_cuda.so", "/b/lib/libmeshsim_cuda.so"}));
}

TEST(CudaPlugin, TheEnvironmentVariableAloneWhenSet) {
  EXPECT_EQ(cuda_plugin_candidates("/x/my_plugin.so", "/b/cli/meshsim"), (std::vector<std::string>{"/x/my_plugin.so"}));
}

TEST(CudaPlugin, BadPathIsOneLineNamingTheFileAndTheFix) {
  const std::string e = error_of([] { load_cuda_plugin("/nonexistent"); });
  EXPECT_TRUE(contains(e, "backend cuda: cannot load the CUDA plugin /nonexistent: ")) << e;
  EXPECT_TRUE(contains(e, "No such file or directory")) << e;  // dlerror()
  EXPECT_TRUE(contains(e, "; build meshsim with the CUDA toolkit and NCCL")) << e;
  EXPECT_TRUE(contains(e, "or set MESHSIM_CUDA_PLUGIN to the path of libmeshsim_cuda.so")) << e;
  EXPECT_FALSE(contains(e, "\n")) << e;
}

TEST(CudaPlugin, BadEnvironmentPathReachesRealApiAndProbe) {
  const PluginEnv env("/nonexistent");
  const std::string e = error_of([] { real_gpu_api(); });
  EXPECT_TRUE(contains(e, "cannot load the CUDA plugin /nonexistent: ")) << e;
  EXPECT_FALSE(contains(e, "\n")) << e;
  const DeviceInfo info = probe_devices();
  EXPECT_EQ(info.count, 0);
  EXPECT_EQ(info.reason, e);  // the "no GPU" reason is the same line
  std::vector<float> out;
  EXPECT_EQ(reduce_on_device({1}, {2}, out), e);
  EXPECT_EQ(stream_pass_on_device({1}, 0.5f, out), e);
}

TEST(CudaPlugin, ALibraryWithoutTheEntryPointIsRefused) {
  const std::string e = error_of([] { load_cuda_plugin("libm.so.6"); });
  EXPECT_TRUE(contains(e, "cannot load the CUDA plugin libm.so.6: not a meshsim CUDA plugin (no meshsim_cuda_plugin"))
      << e;
  EXPECT_FALSE(contains(e, "\n")) << e;
}

TEST(CudaPlugin, LoadsAPluginOfThisAbi) {
  const MeshsimCudaPlugin& p = load_cuda_plugin(FAKE_PLUGIN_OK);
  EXPECT_EQ(p.abi_version, kCudaPluginAbi);
  const PluginEnv env(FAKE_PLUGIN_OK);
  const DeviceInfo info = probe_devices();
  EXPECT_EQ(info.count, 0);
  EXPECT_EQ(info.reason, "fake CUDA plugin, ABI " + std::to_string(kCudaPluginAbi));
}

TEST(CudaPlugin, RefusesAPluginOfAnotherAbi) {
  const std::string e = error_of([] { load_cuda_plugin(FAKE_PLUGIN_OTHER_ABI); });
  EXPECT_TRUE(contains(e, std::string("the CUDA plugin ") + FAKE_PLUGIN_OTHER_ABI + " has ABI version " +
                              std::to_string(kCudaPluginAbi + 1) + ", this meshsim needs " +
                              std::to_string(kCudaPluginAbi)))
      << e;
  EXPECT_TRUE(contains(e, "rebuild meshsim and the plugin from one tree")) << e;
  EXPECT_FALSE(contains(e, "\n")) << e;
}

// This build's libmeshsim_cuda.so (CUDA and NCCL builds): it loads here, GPU or not (only
// the CUDA libraries are needed), and reports this tree's ABI.
TEST(CudaPlugin, ThisBuildsPluginLoads) {
#if defined(MESHSIM_CUDA_PLUGIN_FILE)
  const MeshsimCudaPlugin& p = load_cuda_plugin(MESHSIM_CUDA_PLUGIN_FILE);
  EXPECT_EQ(p.abi_version, kCudaPluginAbi);
  EXPECT_TRUE(contains(p.libraries, "CUDA runtime ")) << p.libraries;
  EXPECT_TRUE(contains(p.libraries, ", NCCL ")) << p.libraries;
#ifdef MESHSIM_HAVE_CUDNN_HEADER
  EXPECT_TRUE(contains(p.libraries, ", cuDNN 9.")) << p.libraries;
#endif
  const PluginEnv env(MESHSIM_CUDA_PLUGIN_FILE);
  const DeviceInfo info = probe_devices();
  if (info.count == 0) {  // the CUDA runtime's own reason, not the loader's
    EXPECT_FALSE(info.reason.empty());
    EXPECT_FALSE(contains(info.reason, "cannot load")) << info.reason;
  }
  std::cout << "plugin " << MESHSIM_CUDA_PLUGIN_FILE << ": ABI " << p.abi_version << ", " << p.libraries << ", "
            << info.count << " GPU(s)" << (info.count == 0 ? " (" + info.reason + ")" : "") << "\n";
#else
  GTEST_SKIP() << "this build has no CUDA plugin (it needs the CUDA toolkit and NCCL)";
#endif
}

}  // namespace
}  // namespace meshsim::cuda
