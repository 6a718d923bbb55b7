// AdamW (Loshchilov & Hutter, "Decoupled Weight Decay Regularization"; the update
// torch.optim.AdamW makes), one step on fp32 master weights and moments, element-wise:
//
//   m  = beta1 m + (1 - beta1) g
//   v  = beta2 v + (1 - beta2) g^2
//   m^ = m / (1 - beta1^t),  v^ = v / (1 - beta2^t)          (t = step, counted from 1)
//   p  = p (1 - lr wd) - lr m^ / (sqrt(v^) + eps)
//
// It reads p, g, m, v and writes p, m, v: 28 bytes per parameter, what the schedule counts
// for a mixed-precision step (bf16 gradient in, bf16 weight out, fp32 master and moments).
//
//   AdamW hp{.lr = 3e-4f, .weight_decay = 0.1f};
//   adamw_step_cpu(p, g, m, v, n, hp, step);        // CUDA twin: adamw_step_cuda (cuda_ops.h)
#pragma once

#include <cstddef>
#include <cstdint>

namespace meshsim::kernels {

struct AdamW {
  float lr = 1e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;  // GPT-3's
  float eps = 1e-8f;
  float weight_decay = 0.1f;
};

// step >= 1. p, m and v are updated in place; g is read only; the four arrays must not overlap.
void adamw_step_cpu(float* p, const float* g, float* m, float* v, std::size_t n, const AdamW& hp, std::int64_t step);

}  // namespace meshsim::kernels
