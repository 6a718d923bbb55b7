// Element-wise activations and bias of a transformer MLP, forward and backward.
//
// GeLU, tanh approximation (GPT-2, Megatron), with c = sqrt(2/pi), u = c * (x + 0.044715 x^3):
//   y  = 0.5 x (1 + tanh u)
//   dx = dy * (0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) c (1 + 3 * 0.044715 x^2))
// SwiGLU (Llama MLP), out = silu(a) * b with silu(a) = a * sigmoid(a):
//   da = dout * b * sigmoid(a) (1 + a (1 - sigmoid(a))),  db = dout * silu(a)
// a and b are [rows, cols] read with row stride ld_in, so both layouts work:
//   two tensors:               swiglu_forward_cpu(a, b, cols, out, rows, cols)
//   one fused [rows, 2*cols]:  swiglu_forward_cpu(x, x + cols, 2 * cols, out, rows, cols)
//   (a = first half of the last dim, b = second half; the backward writes da, db likewise
//    into dx and dx + cols with the same stride). out and dout are [rows, cols] contiguous.
// Bias of a linear layer over [rows, cols]: y[r, :] += bias; dbias += sum_r dy[r, :].
//
//   gelu_forward_cpu(x, y, n);        gelu_backward_cpu(dy, x, dx, n);
//   add_bias_cpu(y, bias, rows, cols); bias_backward_cpu(dy, dbias, rows, cols);
//
// Outputs are overwritten except dbias, which ACCUMULATES (+=) like every parameter
// gradient here. Element-wise outputs may alias an input of the same shape (y may be x;
// dx may be dy). The CUDA kernels in cuda_ops.h mirror these signatures.
#pragma once

#include <cstddef>
#include <cstdint>

namespace meshsim::kernels {

void gelu_forward_cpu(const float* x, float* y, std::size_t n);
void gelu_backward_cpu(const float* dy, const float* x, float* dx, std::size_t n);

void swiglu_forward_cpu(const float* a, const float* b, std::int64_t ld_in, float* out, std::int64_t rows,
                        std::int64_t cols);
// da and db use the same row stride ld_in as a and b.
void swiglu_backward_cpu(const float* dout, const float* a, const float* b, std::int64_t ld_in, float* da, float* db,
                         std::int64_t rows, std::int64_t cols);

void add_bias_cpu(float* y, const float* bias, std::int64_t rows, std::int64_t cols);
void bias_backward_cpu(const float* dy, float* dbias, std::int64_t rows, std::int64_t cols);

}  // namespace meshsim::kernels
