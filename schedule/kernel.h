// A compute kernel as the schedule describes it: what it is and how much work it does.
// Executors decide how long it takes (sim: roofline with efficiency curves; real
// backends: run it).
//
//   Kernel k = Kernel::gemm(4096, 12288, 36864, 2);   // m x k times k x n, bf16
//   k.flops == 2.0 * 4096 * 36864 * 12288
#pragma once

#include <cstdint>

namespace meshsim {

enum class KernelKind { Gemm, Attention, Norm, Elementwise, Softmax, Optimizer, Memcpy };
const char* to_string(KernelKind k);
inline constexpr int kKernelKinds = 7;

struct Kernel {
  KernelKind kind = KernelKind::Elementwise;
  double flops = 0;   // floating-point operations (multiply-add = 2)
  double bytes = 0;   // bytes read + written from device memory
  std::int64_t m = 0, n = 0, k = 0;  // GEMM shape (C[m,n] = A[m,k] B[k,n]); 0 otherwise
  int dtype_bytes = 2;

  static Kernel gemm(std::int64_t m, std::int64_t n, std::int64_t k, int dtype_bytes);
  static Kernel elementwise(KernelKind kind, double flops, double bytes, int dtype_bytes);
};

}  // namespace meshsim
