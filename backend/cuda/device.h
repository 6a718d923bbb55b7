// GPU discovery for the cuda backend, safe on machines without a GPU, driver or CUDA libraries.
//
//   DeviceInfo d = probe_devices();
//   if (d.count == 0) std::cout << "no GPU: " << d.reason;   // tests skip with this reason
//
// probe_devices and the device self-tests run in the CUDA plugin (plugin.h), loaded on first
// use; when it cannot be loaded, the reason (or the self-test's error) is the loader's one-line
// error. CUDA status codes are turned into strings inside backend/cuda and never leak out.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace meshsim::cuda {

struct DeviceInfo {
  int count = 0;
  std::vector<std::string> names;
  std::string reason;  // why count is 0 (no CUDA plugin, no driver, no device)
};

DeviceInfo probe_devices();

// The GPU of this rank: its local rank on the node (LOCAL_RANK from torchrun,
// SLURM_LOCALID, OMPI_COMM_WORLD_LOCAL_RANK, MESHSIM_LOCAL_RANK; first set wins), else
// the global rank, modulo the devices seen. `getenv` returns a variable or nullptr.
int local_device(int rank, int devices, const std::function<const char*(const char*)>& getenv);

// Test helper: out = a + b computed by the reduction kernel on device 0. Returns "" on
// success, else the CUDA error text.
std::string reduce_on_device(const std::vector<float>& a, const std::vector<float>& b, std::vector<float>& out);
// Test helper: out = scale * in by the memory-bound pass kernel on device 0; "" or the CUDA error text.
std::string stream_pass_on_device(const std::vector<float>& in, float scale, std::vector<float>& out);

}  // namespace meshsim::cuda
