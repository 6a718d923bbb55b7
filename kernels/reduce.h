// Element-wise reductions that collective step programs need (recv-reduce: dst += src).
//
// Every kernel has a CPU reference with the same contract; the cpu backend uses the
// reference, the cuda backend the kernel, and a test holds the two against each other.
//
//   reduce_sum_cpu(dst, src, n);                    // dst[i] += src[i]
//   reduce_max_cpu(dst, src, n);                    // dst[i] = max(dst[i], src[i]) (cross-entropy max)
//   reduce_sum_cuda(d_dst, d_src, n, stream);       // same on device memory (CUDA builds)
//   reduce_max_cuda(d_dst, d_src, n, stream);
#pragma once

#include <cstddef>

namespace meshsim::kernels {

void reduce_sum_cpu(float* dst, const float* src, std::size_t n);
void reduce_max_cpu(float* dst, const float* src, std::size_t n);

#if defined(MESHSIM_HAVE_CUDA)
// Returns a cudaError_t as int (0 = success) so this header needs no CUDA includes.
int reduce_sum_cuda(float* dst, const float* src, std::size_t n, void* stream);
int reduce_max_cuda(float* dst, const float* src, std::size_t n, void* stream);
#endif

}  // namespace meshsim::kernels
