// Workspace planning (see workspace.h).
#include "backend/cuda/workspace.h"

#include <fmt/format.h>

#include <algorithm>

#include "backend/kernel_call.h"
#include "core/enum_names.h"
#include "core/error.h"

namespace meshsim::cuda {

std::int64_t align_up(std::int64_t bytes, std::int64_t align) { return (bytes + align - 1) / align * align; }

namespace {
constexpr EnumName<Buf> kBufNames[] = {{Buf::Cublas, "cublas"}, {Buf::A, "a"},         {Buf::B, "b"},
                                       {Buf::C, "c"},           {Buf::Data, "data"},   {Buf::Send, "send"},
                                       {Buf::Recv, "recv"},     {Buf::Stage, "stage"}, {Buf::Snapshot, "snapshot"},
                                       {Buf::Args, "args"}};
}  // namespace

const char* to_string(Buf b) { return enum_name(kBufNames, b); }

const Region& WorkspacePlan::region(int op, Buf b) const {
  if (op >= 0 && op < static_cast<int>(ops.size()))
    for (const Region& r : ops[static_cast<std::size_t>(op)])
      if (r.buf == b) return r;
  throw Error(fmt::format("backend cuda: workspace: op {} has no buffer '{}'", op, to_string(b)));
}

WorkspacePlan plan_workspace(const std::vector<Stream>& streams, const std::vector<std::vector<BufferNeed>>& needs) {
  MESHSIM_ASSERT(streams.size() == needs.size());
  std::vector<std::int64_t> footprint(static_cast<std::size_t>(kStreams), 0);
  std::vector<bool> used(static_cast<std::size_t>(kStreams), false);
  for (std::size_t i = 0; i < needs.size(); ++i) {
    std::int64_t size = 0;
    for (const BufferNeed& n : needs[i]) {
      if (n.bytes < 0)
        throw Error(
            fmt::format("backend cuda: workspace: op {} buffer '{}' needs {} bytes", i, to_string(n.buf), n.bytes));
      size += align_up(n.bytes);
    }
    const auto s = static_cast<std::size_t>(streams[i]);
    used[s] = true;
    footprint[s] = std::max(footprint[s], size);
  }
  WorkspacePlan plan;
  std::vector<std::int64_t> base(static_cast<std::size_t>(kStreams), 0);
  for (int s = 0; s < kStreams; ++s) {
    if (!used[static_cast<std::size_t>(s)]) continue;
    base[static_cast<std::size_t>(s)] = plan.total;
    plan.arenas.push_back({static_cast<Stream>(s), plan.total, footprint[static_cast<std::size_t>(s)]});
    plan.total += footprint[static_cast<std::size_t>(s)];
  }
  plan.ops.resize(needs.size());
  for (std::size_t i = 0; i < needs.size(); ++i) {
    std::int64_t at = base[static_cast<std::size_t>(streams[i])];
    for (const BufferNeed& n : needs[i]) {
      plan.ops[i].push_back({n.buf, at, n.bytes});
      at += align_up(n.bytes);
    }
  }
  return plan;
}

std::vector<BufferNeed> step_program_needs(const StepProgram& program, const CollectiveSpec& spec, int group_rank) {
  const RankBuffers rb = rank_buffers(spec, group_rank);
  const bool shared = spec.kind != CollKind::AllToAll;
  std::vector<BufferNeed> needs;
  if (shared) {
    needs.push_back({Buf::Data, rb.send});
  } else {
    needs.push_back({Buf::Send, rb.send});
    needs.push_back({Buf::Recv, rb.recv});
  }
  std::int64_t stage = 0, snapshot = 0;
  Step st;
  const int steps = program.num_steps(group_rank);
  for (int s = 0; s < steps; ++s) {
    st.clear();
    program.step(group_rank, s, st);
    const StepLayout l = cuda_step_layout(st, shared);
    stage = std::max(stage, l.stage_bytes);
    snapshot = std::max(snapshot, l.snapshot_bytes);
  }
  needs.push_back({Buf::Stage, stage});
  needs.push_back({Buf::Snapshot, snapshot});
  return needs;
}

std::vector<BufferNeed> native_collective_needs(const CollectiveSpec& spec) {
  if (spec.kind == CollKind::AllToAll) return {{Buf::Send, spec.bytes}, {Buf::Recv, spec.bytes}};
  if (spec.kind == CollKind::SendRecv) return {{Buf::Send, spec.bytes}, {Buf::Recv, spec.bytes}};
  return {{Buf::Data, spec.bytes}};
}

std::vector<BufferNeed> op_needs(const Op& op, bool bf16) {
  switch (op.kind) {
    case OpKind::Send:
    case OpKind::Recv:
      return {{Buf::Data, op.bytes}};
    case OpKind::Collective:
      throw Error("backend cuda: workspace: op '" + op.name + "' is a collective; plan it from its step program");
    case OpKind::Compute:
      break;
  }
  const Kernel& k = op.kernel;
  if (k.kind == KernelKind::Gemm) {
    const std::int64_t d = k.dtype_bytes;
    return {{Buf::Cublas, kCublasWorkspace}, {Buf::A, k.m * k.k * d}, {Buf::B, k.k * k.n * d}, {Buf::C, k.m * k.n * d}};
  }
  return {{Buf::Args, kernel_call(k, op.phase, bf16).floats() * 4}};  // the kernel's operands (kernel_call.h)
}

}  // namespace meshsim::cuda
