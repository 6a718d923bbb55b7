// CUDA AdamW step (kernels/optimizer.h has the math): a grid-stride loop, float4 when all
// four arrays are 16-byte aligned, scalar tail. The CPU reference's float operations in its
// order (bias corrections as float factors computed on the host in double); nvcc may contract
// a * b + c into FMAs, so results agree up to float rounding.
#include <cmath>

#include "kernels/cuda_common.cuh"
#include "kernels/cuda_ops.h"

namespace meshsim::kernels {
namespace {

using namespace cuda_detail;

constexpr int kThreads = 256;

struct AdamWFactors {
  float beta1, beta2, lr, eps, decay, c1, c2;
};

__device__ __forceinline__ void adamw_one(const AdamWFactors& f, float& p, float g, float& m, float& v) {
  m = f.beta1 * m + (1.f - f.beta1) * g;
  v = f.beta2 * v + (1.f - f.beta2) * g * g;
  p = p * f.decay - f.lr * (m * f.c1) / (sqrtf(v * f.c2) + f.eps);
}

template <int W>
__global__ void adamw_kernel(AdamWFactors f, float* p, const float* g, float* m, float* v, std::size_t n) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t nvec = n / W;
  for (std::size_t i = first; i < nvec; i += stride) {
    float vp[W], vg[W], vm[W], vv[W];
    load_vec<W>(p + i * W, vp);
    load_vec<W>(g + i * W, vg);
    load_vec<W>(m + i * W, vm);
    load_vec<W>(v + i * W, vv);
#pragma unroll
    for (int w = 0; w < W; ++w) adamw_one(f, vp[w], vg[w], vm[w], vv[w]);
    store_vec<W>(p + i * W, vp);
    store_vec<W>(m + i * W, vm);
    store_vec<W>(v + i * W, vv);
  }
  for (std::size_t i = nvec * W + first; i < n; i += stride) adamw_one(f, p[i], g[i], m[i], v[i]);
}

}  // namespace

int adamw_step_cuda(float* p, const float* g, float* m, float* v, std::size_t n, const AdamW& hp, std::int64_t step,
                    void* stream) {
  if (step < 1) return kInvalidValue;
  if (n == 0) return 0;
  const double t = static_cast<double>(step);
  const AdamWFactors f{hp.beta1,
                       hp.beta2,
                       hp.lr,
                       hp.eps,
                       1.f - hp.lr * hp.weight_decay,
                       static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(hp.beta1), t))),
                       static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(hp.beta2), t)))};
  const cudaStream_t s = as_stream(stream);
  if (aligned16(p) && aligned16(g) && aligned16(m) && aligned16(v)) {
    const auto work = static_cast<std::int64_t>(n / 4);
    adamw_kernel<4><<<grid_for(work, kThreads), kThreads, 0, s>>>(f, p, g, m, v, n);
  } else {
    adamw_kernel<1><<<grid_for(static_cast<std::int64_t>(n), kThreads), kThreads, 0, s>>>(f, p, g, m, v, n);
  }
  return launch_status();
}

}  // namespace meshsim::kernels
