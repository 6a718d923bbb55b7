#include "backend/cuda/device.h"

#include <cstdlib>

#include "backend/cuda/plugin.h"
#include "core/error.h"

namespace meshsim::cuda {

int local_device(int rank, int devices, const std::function<const char*(const char*)>& getenv) {
  int local = rank;
  for (const char* v : {"LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK", "MESHSIM_LOCAL_RANK"}) {
    const char* text = getenv(v);
    if (text == nullptr || *text == '\0') continue;
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (*end == '\0' && value >= 0) {
      local = static_cast<int>(value);
      break;
    }
  }
  return devices > 0 ? local % devices : 0;
}

// GPU discovery and the self-tests run in the CUDA plugin (plugin.h), loaded on first use;
// when it cannot be loaded, the loader's one-line error is the reason.
DeviceInfo probe_devices() {
  try {
    return cuda_plugin().probe_devices();
  } catch (const Error& e) {
    DeviceInfo info;
    info.reason = e.what();
    return info;
  }
}

std::string reduce_on_device(const std::vector<float>& a, const std::vector<float>& b, std::vector<float>& out) {
  try {
    return cuda_plugin().reduce_on_device(a, b, out);
  } catch (const Error& e) {
    return e.what();
  }
}

std::string stream_pass_on_device(const std::vector<float>& in, float scale, std::vector<float>& out) {
  try {
    return cuda_plugin().stream_pass_on_device(in, scale, out);
  } catch (const Error& e) {
    return e.what();
  }
}

}  // namespace meshsim::cuda
