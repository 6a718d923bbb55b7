#include "kernels/norm.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/parallel.h"

namespace meshsim::kernels {
namespace {

// dgamma[j] += sum_r dy[r, j] * xhat[r, j]; dbeta[j] += sum_r dy[r, j], per column serially
// over rows. xhat is recomputed from x, mean, rstd. Columns are those of the local slice.
// RMSNorm: mean == nullptr (taken as 0) and dbeta == nullptr (no bias).
void accumulate_param_grads(const float* dy, const float* x, const float* mean, const float* rstd, float* dgamma,
                            float* dbeta, std::int64_t rows, std::int64_t cols) {
  detail::for_each_column_block(cols, [&](std::int64_t c0, std::int64_t c1) {
    std::vector<double> dg(c1 - c0, 0.0), db(c1 - c0, 0.0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* dyr = dy + r * cols;
      const float* xr = x + r * cols;
      for (std::int64_t j = c0; j < c1; ++j) {
        const double xhat = (static_cast<double>(xr[j]) - (mean != nullptr ? mean[r] : 0.f)) * rstd[r];
        dg[j - c0] += dyr[j] * xhat;
        db[j - c0] += dyr[j];
      }
    }
    for (std::int64_t j = c0; j < c1; ++j) {
      dgamma[j] += static_cast<float>(dg[j - c0]);
      if (dbeta != nullptr) dbeta[j] += static_cast<float>(db[j - c0]);
    }
  });
}

// The backward's row sums over a row's cols columns: {sum g, sum g * xhat}, g = dy * gamma.
std::pair<double, double> backward_row_sums(const float* dyr, const float* xr, const float* gamma, float mean,
                                            float rstd, std::int64_t cols) {
  double sg = 0, sgx = 0;
  for (std::int64_t j = 0; j < cols; ++j) {
    const double g = static_cast<double>(dyr[j]) * gamma[j];
    sg += g;
    sgx += g * ((xr[j] - static_cast<double>(mean)) * rstd);
  }
  return {sg, sgx};
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) over a row's cols columns, the means over
// the whole row (mg, mgx).
void backward_row_dx(const float* dyr, const float* xr, const float* gamma, float mean, float rstd, double mg,
                     double mgx, float* dxr, std::int64_t cols) {
  for (std::int64_t j = 0; j < cols; ++j) {
    const double xhat = (xr[j] - static_cast<double>(mean)) * rstd;
    const double g = static_cast<double>(dyr[j]) * gamma[j];
    dxr[j] = static_cast<float>(rstd * (g - mg - xhat * mgx));
  }
}

}  // namespace

void layernorm_forward_cpu(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                           std::int64_t rows, std::int64_t h, float eps) {
  MESHSIM_ASSERT(rows >= 0 && h > 0);
  detail::for_each_index(rows, [&](std::int64_t r) {
    const float* xr = x + r * h;
    double s = 0;
    for (std::int64_t j = 0; j < h; ++j) s += xr[j];
    const double mu = s / static_cast<double>(h);
    double v = 0;
    for (std::int64_t j = 0; j < h; ++j) v += (xr[j] - mu) * (xr[j] - mu);
    const double rs = 1.0 / std::sqrt(v / static_cast<double>(h) + eps);
    mean[r] = static_cast<float>(mu);
    rstd[r] = static_cast<float>(rs);
    float* yr = y + r * h;
    for (std::int64_t j = 0; j < h; ++j) yr[j] = static_cast<float>((xr[j] - mu) * rs) * gamma[j] + beta[j];
  });
}

void layernorm_backward_cpu(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                            float* dx, float* dgamma, float* dbeta, std::int64_t rows, std::int64_t h) {
  MESHSIM_ASSERT(rows >= 0 && h > 0);
  detail::for_each_index(rows, [&](std::int64_t r) {
    const auto [sg, sgx] = backward_row_sums(dy + r * h, x + r * h, gamma, mean[r], rstd[r], h);
    backward_row_dx(dy + r * h, x + r * h, gamma, mean[r], rstd[r], sg / static_cast<double>(h),
                    sgx / static_cast<double>(h), dx + r * h, h);
  });
  accumulate_param_grads(dy, x, mean, rstd, dgamma, dbeta, rows, h);
}

void rmsnorm_forward_cpu(const float* x, const float* gamma, float* y, float* rstd, std::int64_t rows, std::int64_t h,
                         float eps) {
  MESHSIM_ASSERT(rows >= 0 && h > 0);
  detail::for_each_index(rows, [&](std::int64_t r) {
    const float* xr = x + r * h;
    double ss = 0;
    for (std::int64_t j = 0; j < h; ++j) ss += static_cast<double>(xr[j]) * xr[j];
    const double rs = 1.0 / std::sqrt(ss / static_cast<double>(h) + eps);
    rstd[r] = static_cast<float>(rs);
    float* yr = y + r * h;
    for (std::int64_t j = 0; j < h; ++j) yr[j] = static_cast<float>(xr[j] * rs) * gamma[j];
  });
}

void rmsnorm_backward_cpu(const float* dy, const float* x, const float* gamma, const float* rstd, float* dx,
                          float* dgamma, std::int64_t rows, std::int64_t h) {
  MESHSIM_ASSERT(rows >= 0 && h > 0);
  detail::for_each_index(rows, [&](std::int64_t r) {
    const auto [sg, sgx] = backward_row_sums(dy + r * h, x + r * h, gamma, 0.f, rstd[r], h);
    (void)sg;  // LayerNorm's mean(g) term comes from the centring RMSNorm does not do
    backward_row_dx(dy + r * h, x + r * h, gamma, 0.f, rstd[r], 0.0, sgx / static_cast<double>(h), dx + r * h, h);
  });
  accumulate_param_grads(dy, x, nullptr, rstd, dgamma, nullptr, rows, h);
}

void layernorm2d_stats_cpu(const float* x, float* stats, std::int64_t rows, std::int64_t h_local) {
  MESHSIM_ASSERT(rows >= 0 && h_local >= 0);
  detail::for_each_index(rows, [&](std::int64_t r) {
    const float* xr = x + r * h_local;
    double s1 = 0, s2 = 0;
    for (std::int64_t j = 0; j < h_local; ++j) {
      s1 += xr[j];
      s2 += static_cast<double>(xr[j]) * xr[j];
    }
    stats[2 * r] = static_cast<float>(s1);
    stats[2 * r + 1] = static_cast<float>(s2);
  });
}

void layernorm2d_apply_cpu(const float* x, const float* stats, const float* gamma, const float* beta, float* y,
                           float* mean, float* rstd, std::int64_t rows, std::int64_t h_local, std::int64_t h,
                           float eps) {
  MESHSIM_ASSERT(rows >= 0 && h_local >= 0 && h >= h_local && h > 0);
  detail::for_each_index(rows, [&](std::int64_t r) {
    const double mu = static_cast<double>(stats[2 * r]) / static_cast<double>(h);
    const double var = std::max(0.0, static_cast<double>(stats[2 * r + 1]) / static_cast<double>(h) - mu * mu);
    const double rs = 1.0 / std::sqrt(var + eps);
    mean[r] = static_cast<float>(mu);
    rstd[r] = static_cast<float>(rs);
    const float* xr = x + r * h_local;
    float* yr = y + r * h_local;
    for (std::int64_t j = 0; j < h_local; ++j) yr[j] = static_cast<float>((xr[j] - mu) * rs) * gamma[j] + beta[j];
  });
}

void layernorm2d_backward_stats_cpu(const float* dy, const float* x, const float* gamma, const float* mean,
                                    const float* rstd, float* dstats, std::int64_t rows, std::int64_t h_local) {
  MESHSIM_ASSERT(rows >= 0 && h_local >= 0);
  detail::for_each_index(rows, [&](std::int64_t r) {
    const auto [sg, sgx] = backward_row_sums(dy + r * h_local, x + r * h_local, gamma, mean[r], rstd[r], h_local);
    dstats[2 * r] = static_cast<float>(sg);
    dstats[2 * r + 1] = static_cast<float>(sgx);
  });
}

void layernorm2d_backward_apply_cpu(const float* dy, const float* x, const float* gamma, const float* mean,
                                    const float* rstd, const float* dstats, float* dx, float* dgamma, float* dbeta,
                                    std::int64_t rows, std::int64_t h_local, std::int64_t h) {
  MESHSIM_ASSERT(rows >= 0 && h_local >= 0 && h >= h_local && h > 0);
  detail::for_each_index(rows, [&](std::int64_t r) {
    backward_row_dx(dy + r * h_local, x + r * h_local, gamma, mean[r], rstd[r],
                    static_cast<double>(dstats[2 * r]) / static_cast<double>(h),
                    static_cast<double>(dstats[2 * r + 1]) / static_cast<double>(h), dx + r * h_local, h_local);
  });
  accumulate_param_grads(dy, x, mean, rstd, dgamma, dbeta, rows, h_local);
}

}  // namespace meshsim::kernels
