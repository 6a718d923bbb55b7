// The cuda backend behind the Executor interface: this process is one rank on one GPU.
//
// Launch as the cpu backend is launched (meshsim launch, torchrun, srun, mpirun: one
// process per GPU, device = local rank). Rank 0 makes the ncclUniqueId and shares it
// through the rendezvous store; every rank builds the world communicator and splits it
// per process group (comm_plan.h). Then, for this rank's role:
//   - one CUDA stream per schedule stream; op.deps across streams become event waits;
//   - GEMMs: cublasGemmEx with the op's m, n, k in bf16 (dtype_bytes 2; fp16 on request)
//     or fp32 (dtype_bytes 4), fp32 accumulation; one cuBLAS handle per stream;
//   - norms, activations, softmax, attention, optimizer: our kernels (kernels/cuda_ops.h)
//     on the op's shape (backend/kernel_call.h), bf16 for a 2-byte model (activations in
//     bf16, statistics and the optimizer in float; `fp32_kernels` runs them all in float32);
//     copies and routing: a memory-bound pass of the op's bytes (kernels/stream_pass.h);
//   - collectives: our step programs, every step one NCCL group of ncclSend/ncclRecv plus
//     the reduction kernel (kernels/reduce.h) on float32 data, exactly the messages the
//     simulator times; or native NCCL collectives (native_collectives = true);
//     a SendRecv collective on an axis is a ring shift (send to the next, receive from the
//     previous rank of the group); pipeline Send/Recv: ncclSend/ncclRecv on the world
//     communicator;
//   - buffers: one workspace allocated before the step (workspace.h), none during it;
//   - times: CUDA events around every op, relative to a per-rank start event recorded
//     after a device-side barrier (an all-reduce of one value over the world), of the last
//     of 1 + `warmup` passes over the role (first calls of cuBLAS, our kernels and NCCL
//     connections are paid in the untimed ones);
//   - GEMM operands: their buffers in the arena (what earlier ops left there), or with
//     `random_operands` (as `meshsim run`/`validate` ask) one pool beside the arena that no
//     op writes, holding the random words calibrate times its GEMMs on (cuda_calibrate.h).
// Every status goes through one Checker (check.h); the host waits only through the
// Watchdog, so an asynchronous NCCL error or a stuck peer aborts the communicators and
// throws an Error naming the rank and the op. Where the host blocks inside a call instead
// (ncclCommInitRank and the first connection between two ranks wait for the peer; a launch
// spins once the launch queue is full behind a kernel that waits on one), the watchdog's
// monitor thread ends the rank with the store's verdict (check.h). Pipeline Send/Recv:
// an NCCL send waits for its receive, where the simulator's sends are eager; so every rank
// issues its messages in one global message order (p2p_plan.h: receives move ahead of
// sends where the schedule crosses them, as 1F1B's steady state does), which cannot
// deadlock; the host issues ops in that order, not always in schedule order. All-to-all ops run even (op.imbalance is
// not applied).
//
//   GpuApi& api = real_gpu_api();
//   CudaExecutor ex(api, registry, placement, {.rank = env.rank, .device = local_rank,
//                   .share_id = store_id_exchange(store, env.rank, timeout)});
//   Trace mine = ex.execute(schedule);      // this rank's events: {role, op, rank, start, end}
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/gpu_api.h"
#include "schedule/collective.h"
#include "schedule/executor.h"
#include "topology/placement.h"

namespace meshsim::launch {
class RendezvousClient;
}

namespace meshsim::cuda {

// Rank 0 passes its ncclUniqueId and gets it back; other ranks pass "" and get rank 0's.
using IdExchange = std::function<std::string(const std::string& mine)>;
// `key` names the id in the store: a process that builds several world communicators (one
// per executor) passes a fresh key for each.
IdExchange store_id_exchange(launch::RendezvousClient& store, int rank, std::chrono::milliseconds timeout,
                             std::string key = "nccl/unique_id");

// Numerics of collective ops (collective workloads): fill the input before the op, check
// the output after it. Filling and checking wait for the op's stream (host copies), so
// they are for validation runs, not for timing a training step.
struct CollectiveData {
  // Float32 input of this rank (group rank `group_rank`) for op `op`, sized as
  // rank_buffers(spec, group_rank).send / 4.
  std::function<std::vector<float>(int op, const CollectiveSpec& spec, int group_rank)> input;
  // The result (the receive buffer for all-to-all, else the data buffer).
  std::function<void(int op, const CollectiveSpec& spec, int group_rank, std::vector<float> result)> output;
};

struct CudaExecutorOptions {
  int rank = 0;    // world rank; the placement puts mesh rank r on world rank gpu_of(r)
  int device = 0;  // CUDA device (the local rank)
  IdExchange share_id;
  bool native_collectives = false;  // --collectives nccl
  bool fp16 = false;                // 2-byte GEMMs in fp16 instead of bf16
  bool fp32_kernels = false;        // non-GEMM kernels of a 2-byte model in float32 instead of bf16
  WatchdogOptions watchdog;
  int max_in_flight = 4096;      // ops issued but not known finished before the host waits
  int warmup = 0;                // untimed passes of the role before the timed one
  bool random_operands = false;  // GEMMs read a pool of calibrate's random words
  CollectiveData data;           // empty functions: no numerics
};

class CudaExecutor : public Executor {
 public:
  CudaExecutor(GpuApi& api, const AlgorithmRegistry& registry, const Placement& placement, CudaExecutorOptions options,
               WatchClock clock = {});
  std::string name() const override { return "cuda"; }
  // Runs this rank's role 1 + warmup times and returns the last pass's times. Device resources (communicators, streams,
  // events, the workspace) live for the call and are released on return, also when it throws.
  Trace execute(const Schedule& schedule) override;

 private:
  GpuApi& api_;
  const AlgorithmRegistry& registry_;
  const Placement& placement_;
  CudaExecutorOptions opt_;
  WatchClock clock_;
};

}  // namespace meshsim::cuda
