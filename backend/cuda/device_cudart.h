// GPU discovery on the CUDA runtime, header-only, for code that links cudart itself: the
// CUDA plugin (its probe_devices, plugin.cpp) and kernels_bench. The
// simulator calls device.h's probe_devices(), which asks the plugin.
//
//   const DeviceInfo d = probe_devices_cudart();   // count 0: d.reason is the runtime's text
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/device.h"

namespace meshsim::cuda {

inline DeviceInfo probe_devices_cudart() {
  DeviceInfo info;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    info.reason = cudaGetErrorString(e);
    return info;
  }
  info.count = n;
  if (n == 0) info.reason = "the CUDA runtime reports no device";
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) == cudaSuccess) info.names.emplace_back(p.name);
  }
  return info;
}

}  // namespace meshsim::cuda
