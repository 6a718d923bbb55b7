// A memory-bound pass: out[i] = scale * in[i] over float32 values. The real backends run
// it for the ops that have no kernel of their own (copies, MoE routing): it moves the op's
// bytes through memory, half read and half written, so the op takes a memory-bound time of
// the right size. calibrate measures memory bandwidth with it.
//
//   stream_pass_cpu(out, in, n, 0.5f);                 // reference
//   stream_pass_cuda(d_out, d_in, n, 0.5f, stream);    // same on device memory (CUDA builds)
#pragma once

#include <cstddef>

namespace meshsim::kernels {

void stream_pass_cpu(float* out, const float* in, std::size_t n, float scale);

#if defined(MESHSIM_HAVE_CUDA)
// Returns a cudaError_t as int (0 = success) so this header needs no CUDA includes.
int stream_pass_cuda(float* out, const float* in, std::size_t n, float scale, void* stream);
#endif

}  // namespace meshsim::kernels
