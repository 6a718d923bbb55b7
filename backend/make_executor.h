// The one place that turns "which backend, which collectives" into an Executor, so the
// commands that run schedules for real (meshsim run, validate, calibrate) name the backend
// as a value and never build executors themselves.
//
//   Backend b = parse_backend("cuda");                       // throws the --backend error
//   ExecutorOptions o;
//   o.backend = b;  o.rank = env.rank;  o.world = env.world_size;  o.store = &store;
//   std::unique_ptr<Executor> ex = make_executor(registry, placement, o);
//   Trace mine = ex->execute(schedule);
//
// What it makes:
//   cpu,  ScheduleKind::Collectives  cpu::CpuExecutor over options.transport (a collective
//                                    workload; numerics checked against the reference)
//   cpu,  ScheduleKind::Training     cpu::TrainingExecutor (its own transports, through the store)
//   cuda, either                     cuda::CudaExecutor on this rank's GPU through the CUDA
//                                    plugin (backend/cuda/plugin.h), the ncclUniqueId shared
//                                    through the store; collectives as our step programs or,
//                                    with CollectivesMode::Nccl, NCCL's own
// Nothing here links CUDA: the cuda executor reaches the GPU through real_gpu_api(), which
// loads the plugin on first use, so the meshsim binary stays free of cudart, cuBLAS and NCCL.
//
// The names are the values of the --backend and --collectives flags of run, validate and
// calibrate, and the parse errors are those flags' errors: the flags are parsed once, here,
// and everything after that reads the enums.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cpu/cpu_executor.h"
#include "backend/cuda/device.h"
#include "schedule/collective.h"
#include "schedule/executor.h"
#include "topology/placement.h"

namespace meshsim {

namespace cuda {
class GpuApi;
}

enum class Backend { Cpu, Cuda };
// Who runs a collective on the cuda backend: our step programs over ncclSend/ncclRecv (what
// the simulator times), or NCCL's own collectives. The cpu backend runs ours only.
enum class CollectivesMode { Ours, Nccl };

const char* to_string(Backend b);          // "cpu", "cuda"
const char* to_string(CollectivesMode c);  // "ours", "nccl"
// The value named `text` exactly; otherwise an Error in the words of the flag:
//   --backend: 'tpu' is not a backend; use --backend cpu (processes over TCP) or cuda (GPUs)
//   --collectives: 'mpi' is not known; use ours (our step programs) or nccl
Backend parse_backend(std::string_view text);
CollectivesMode parse_collectives_mode(std::string_view text);
// NCCL's own collectives exist on the cuda backend only; otherwise the Error
// "--collectives nccl: native NCCL collectives need --backend cuda".
void check_collectives_mode(Backend b, CollectivesMode c);

// This machine's GPUs, at least one, or the Error every command gives for --backend cuda
// without one: "--backend cuda: no GPU found (REASON); use --backend cpu or run on a GPU
// machine" (REASON: probe_devices', e.g. the plugin that could not be loaded).
cuda::DeviceInfo require_cuda_devices();

// What an executor of a collective workload or a training schedule runs (the cpu backend has
// one executor for each; the cuda executor runs both).
enum class ScheduleKind { Collectives, Training };

struct ExecutorOptions {
  Backend backend = Backend::Cpu;
  CollectivesMode collectives = CollectivesMode::Ours;
  ScheduleKind schedule = ScheduleKind::Collectives;
  int rank = 0;                               // this process: GPU `rank` of the placement's topology
  int world = 1;                              // ranks running
  std::chrono::milliseconds timeout{120000};  // any wait on a peer (transports, watchdog, the store)
  // cuda: untimed passes before the timed one; the GEMM operands hold calibrate's random words.
  int warmup = 1;
  // cuda: a 2-byte model's non-GEMM kernels in float32 instead of bf16 (--kernels fp32).
  bool fp32_kernels = false;
  // The job's rendezvous store: cpu training (address exchange) and cuda (the ncclUniqueId).
  launch::RendezvousClient* store = nullptr;

  // cpu, collective workloads: the transport between all ranks, and the executor's options
  // (seed, the numerics check's size limit, the process groups per mesh axis). The seed and
  // the check limit also seed and bound the cuda backend's numerics check (`checks` below),
  // so both backends check the same inputs.
  cpu::Transport* transport = nullptr;
  cpu::CpuExecutorOptions cpu;
  // cpu, training: the job's token and the address the transports bind.
  std::string token;
  std::string bind_addr = "127.0.0.1";

  // cuda: the device; -1 is this rank's local GPU (cuda::local_device over
  // require_cuda_devices, so none is the --backend cuda error). A process that builds several
  // world communicators (one per executor) passes a fresh nccl_id_key for each.
  int device = -1;
  std::string nccl_id_key = "nccl/unique_id";
  cuda::GpuApi* gpu_api = nullptr;  // null: the real one, the plugin's (tests pass a fake)

  // Collective workloads: when set, each execute() fills it with one NumericsCheck per op of
  // role 0, this rank's result against the serial reference executor, on either backend.
  std::vector<cpu::NumericsCheck>* checks = nullptr;
};

// The executor `options` ask for. `registry` and `placement` are referenced, not copied:
// they must outlive it. Throws Error for CollectivesMode::Nccl on the cpu backend (the
// --collectives nccl error), for cuda without a GPU when options.device is -1 (see
// require_cuda_devices), and for a missing transport or store the backend needs.
std::unique_ptr<Executor> make_executor(const AlgorithmRegistry& registry, const Placement& placement,
                                        ExecutorOptions options);

}  // namespace meshsim
