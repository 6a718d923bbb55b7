// CpuCompute: a schedule's compute ops on this CPU (see cpu_compute.h).
#include "backend/cpu/cpu_compute.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "backend/kernel_call.h"
#include "core/error.h"
#include "core/hash.h"
#include "kernels/gemm.h"

namespace meshsim::cpu {
namespace {

// Floats an op needs in the workspace.
std::int64_t floats_of(const Op& op) {
  const Kernel& k = op.kernel;
  if (k.kind == KernelKind::Gemm) return k.m * k.k + k.k * k.n + k.m * k.n;
  return kernel_call(k, op.phase).floats();
}

}  // namespace

Bytes host_memory() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<Bytes>(pages) * page : GiB(8);
}

Bytes CpuCompute::workspace_for(const std::vector<Op>& ops, Bytes limit) {
  if (limit <= 0) limit = host_memory() / 4;
  auto gib = [](double b) { return fmt::format("{:.2f} GiB", b / (1 << 30)); };
  std::int64_t need = 0;
  for (const Op& op : ops) {
    if (op.kind != OpKind::Compute) continue;
    const std::int64_t f = floats_of(op);
    if (f * 4 > limit)
      throw Error(
          fmt::format("backend cpu: compute op '{}' ({} kernel, m={} n={} k={}) needs {} of workspace, more "
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
  const bool gemm = k.kind == KernelKind::Gemm;
  const KernelCall call = gemm ? KernelCall{} : kernel_call(k, op.phase);
  const std::int64_t need = gemm ? floats_of(op) : call.floats();
  if (static_cast<std::int64_t>(ws_.size()) < need)
    throw Error(
        fmt::format("backend cpu: compute op '{}' is larger than the reserved workspace; reserve() the role's "
                    "ops before running them",
                    op.name));
  float* w = ws_.data();
  if (!gemm) {
    // The loss's targets valid, as in training (kernel_call.h, targets_operand): the seeded
    // workspace holds negative ids in about half its words, rows the loss would skip.
    if (const int j = targets_operand(call); j >= 0) std::memset(call.operand(w, j), 0, targets_bytes(call));
    run_kernel_call_cpu(call, w);
    return;
  }
  if (k.m <= 0 || k.n <= 0 || k.k <= 0) return;
  float* a = w;
  float* b = a + k.m * k.k;
  float* c = b + k.k * k.n;
  kernels::gemm_cpu(kernels::Trans::No, kernels::Trans::No, k.m, k.n, k.k, 1.0f, a, k.k, b, k.n, 0.0f, c, k.n);
}

}  // namespace meshsim::cpu
