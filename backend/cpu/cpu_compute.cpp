// CpuCompute: a schedule's compute ops on this CPU (see cpu_compute.h).
#include "backend/cpu/cpu_compute.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "core/error.h"
#include "core/hash.h"
#include "kernels/attention.h"
#include "kernels/gemm.h"
#include "kernels/stream_pass.h"

namespace meshsim::cpu {
namespace {

// Floats an op needs in the workspace.
std::int64_t floats_of(const Op& op) {
  const Kernel& k = op.kernel;
  switch (k.kind) {
    case KernelKind::Gemm:
      return k.m * k.k + k.k * k.n + k.m * k.n;
    case KernelKind::Attention: {
      const auto a = CpuCompute::attention_of(op);
      const std::int64_t q = a.bh * a.sq * a.d, kv = a.bh * a.skv * a.d, lse = a.bh * a.sq;
      return a.backward ? 4 * q + 4 * kv + lse : 2 * q + 2 * kv + lse;  // q o (do dq) k v (dk dv) lse
    }
    default:
      return std::max<std::int64_t>(static_cast<std::int64_t>(k.bytes / 4), 2);  // x and y, half each
  }
}

Bytes host_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<Bytes>(pages) * page : GiB(8);
}

}  // namespace

CpuCompute::AttentionRun CpuCompute::attention_of(const Op& op) {
  const Kernel& k = op.kernel;
  AttentionRun a;
  a.sq = std::max<std::int64_t>(k.m, 1);
  a.skv = std::max<std::int64_t>(k.n, 1);
  a.d = std::max<std::int64_t>(k.k, 1);
  a.backward = op.phase == Phase::Backward;
  const double per_head = 4.0 * static_cast<double>(a.sq) * static_cast<double>(a.skv) * static_cast<double>(a.d) *
                          (a.backward ? 2.5 : 1.0);
  a.bh = std::max<std::int64_t>(static_cast<std::int64_t>(std::llround(k.flops / per_head)), 1);
  return a;
}

Bytes CpuCompute::workspace_for(const std::vector<Op>& ops, Bytes limit) {
  if (limit <= 0) limit = host_memory() / 4;
  auto gib = [](double b) { return fmt::format("{:.2f} GiB", b / (1 << 30)); };
  std::int64_t need = 0;
  for (const Op& op : ops) {
    if (op.kind != OpKind::Compute) continue;
    const std::int64_t f = floats_of(op);
    if (f * 4 > limit)
      throw Error(fmt::format("backend cpu: compute op '{}' ({} kernel, m={} n={} k={}) needs {} of workspace, more "
                              "than the {} this host allows; run a smaller model on the cpu backend (e.g. --set "
                              "model.hidden=512 --set model.layers=4 --set model.seq=512)",
                              op.name, to_string(op.kernel.kind), op.kernel.m, op.kernel.n, op.kernel.k,
                              gib(static_cast<double>(f) * 4), gib(static_cast<double>(limit))));
    need = std::max(need, f);
  }
  return need * 4;
}

void CpuCompute::reserve(const std::vector<Op>& ops, Bytes limit) {
  const std::int64_t need = workspace_for(ops, limit) / 4;
  if (static_cast<std::int64_t>(ws_.size()) >= need) return;
  ws_.resize(static_cast<std::size_t>(need));
  // Seeded values in [-1, 1): finite inputs for every kernel.
  for (std::size_t i = 0; i < ws_.size(); ++i)
    ws_[i] = static_cast<float>(static_cast<double>(splitmix64(seed_ + i) >> 11) * 0x1.0p-52 - 1.0);
}

void CpuCompute::run(const Op& op) {
  const Kernel& k = op.kernel;
  const std::int64_t need = floats_of(op);
  if (static_cast<std::int64_t>(ws_.size()) < need)
    throw Error(fmt::format("backend cpu: compute op '{}' is larger than the reserved workspace; reserve() the role's "
                            "ops before running them", op.name));
  float* w = ws_.data();
  switch (k.kind) {
    case KernelKind::Gemm: {
      if (k.m <= 0 || k.n <= 0 || k.k <= 0) return;
      float* a = w;
      float* b = a + k.m * k.k;
      float* c = b + k.k * k.n;
      kernels::gemm_cpu(kernels::Trans::kNo, kernels::Trans::kNo, k.m, k.n, k.k, 1.0f, a, k.k, b, k.n, 0.0f, c, k.n);
      return;
    }
    case KernelKind::Attention: {
      const AttentionRun r = attention_of(op);
      const kernels::AttentionShape shape{r.bh, r.sq, r.skv, r.d};
      const std::int64_t q = r.bh * r.sq * r.d, kv = r.bh * r.skv * r.d;
      float* qp = w;
      float* o = qp + q;
      float* kp = o + q;
      float* v = kp + kv;
      float* lse = v + kv;
      const float scale = 1.0f / std::sqrt(static_cast<float>(r.d));
      if (!r.backward) {
        kernels::attention_forward_cpu(qp, kp, v, o, lse, shape, scale, {});
        return;
      }
      float* dout = lse + r.bh * r.sq;
      float* dq = dout + q;
      float* dk = dq + q;
      float* dv = dk + kv;
      std::fill(dq, dv + kv, 0.0f);
      // Any lse at least the largest score keeps every probability in (0, 1]: scores are
      // at most sqrt(d) for inputs in [-1, 1) (the time does not depend on the values).
      std::fill(lse, lse + r.bh * r.sq, std::sqrt(static_cast<float>(r.d)) + std::log(static_cast<float>(r.skv)));
      kernels::attention_backward_cpu(qp, kp, v, o, dout, lse, dq, dk, dv, shape, scale, {});
      return;
    }
    default: {
      const std::size_t half = static_cast<std::size_t>(need / 2);
      kernels::stream_pass_cpu(w + half, w, half, 0.5f);
      return;
    }
  }
}

}  // namespace meshsim::cpu
