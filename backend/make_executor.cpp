#include "backend/make_executor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "backend/cpu/training_exec.h"
#include "backend/cuda/cuda_executor.h"
#include "core/enum_names.h"
#include "core/error.h"
#include "schedule/reference_executor.h"

namespace meshsim {

namespace {

constexpr EnumName<Backend> kBackendNames[] = {{Backend::Cpu, "cpu"}, {Backend::Cuda, "cuda"}};
constexpr EnumName<CollectivesMode> kCollectivesModeNames[] = {{CollectivesMode::Ours, "ours"},
                                                               {CollectivesMode::Nccl, "nccl"}};

// The cpu executor of a collective workload, handing its numerics to the caller after each
// run (the cuda one below fills the same vector), so callers see one kind of result.
class CheckedCpuExecutor final : public cpu::CpuExecutor {
 public:
  CheckedCpuExecutor(cpu::Transport& t, const AlgorithmRegistry& registry, cpu::CpuExecutorOptions o,
                     std::vector<cpu::NumericsCheck>* out)
      : CpuExecutor(t, registry, std::move(o)), out_(out) {}
  Trace execute(const Schedule& schedule) override {
    Trace t = CpuExecutor::execute(schedule);
    if (out_) *out_ = checks();
    return t;
  }

 private:
  std::vector<cpu::NumericsCheck>* out_;
};

// The cuda executor with the numerics of a collective workload: every op's input seeded as
// the cpu backend seeds it, and its output checked against the serial reference executor.
// The data callbacks are fixed when the executor is made, the schedule only at execute():
// they reach its ops and the checks through `state`.
class CheckedCudaExecutor final : public cuda::CudaExecutor {
 public:
  struct State {
    const Schedule* schedule = nullptr;
    std::vector<cpu::NumericsCheck>* checks = nullptr;
  };
  CheckedCudaExecutor(cuda::GpuApi& api, const AlgorithmRegistry& registry, const Placement& placement,
                      cuda::CudaExecutorOptions o, std::shared_ptr<State> state)
      : CudaExecutor(api, registry, placement, std::move(o)), state_(std::move(state)) {}
  Trace execute(const Schedule& schedule) override {
    const std::size_t ops = schedule.roles.front().ops.size();
    state_->checks->assign(ops, {});
    for (std::size_t i = 0; i < ops; ++i) (*state_->checks)[i].op = static_cast<int>(i);
    state_->schedule = &schedule;
    return CudaExecutor::execute(schedule);
  }

 private:
  std::shared_ptr<State> state_;
};

cuda::CollectiveData reference_check(const AlgorithmRegistry& registry, const cpu::CpuExecutorOptions& limits,
                                     const std::shared_ptr<CheckedCudaExecutor::State>& state) {
  const std::uint64_t seed = limits.seed;
  const std::int64_t check_limit_bytes = limits.check_limit_bytes;
  cuda::CollectiveData data;
  data.input = [seed](int op, const CollectiveSpec& spec, int grank) {
    return cpu::seeded_input(spec, grank, seed, op);
  };
  data.output = [&registry, seed, check_limit_bytes, state](int op, const CollectiveSpec& spec, int grank,
                                                            std::vector<float> got) {
    if (spec.bytes * spec.ranks > check_limit_bytes) return;
    const std::vector<Op>& ops = state->schedule->roles.front().ops;
    const Algorithm* alg = registry.find(ops[static_cast<std::size_t>(op)].algorithm, spec.kind);
    if (alg == nullptr) return;
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < spec.ranks; ++r) inputs.push_back(cpu::seeded_input(spec, r, seed, op));
    const auto expected = run_reference(*alg->build(spec), spec, std::move(inputs))[static_cast<std::size_t>(grank)];
    cpu::NumericsCheck& c = (*state->checks)[static_cast<std::size_t>(op)];
    c.checked = true;
    if (expected.size() != got.size()) {
      c.max_abs_error = INFINITY;
      return;
    }
    for (std::size_t k = 0; k < got.size(); ++k)
      c.max_abs_error = std::max(c.max_abs_error, static_cast<double>(std::fabs(expected[k] - got[k])));
  };
  return data;
}

std::unique_ptr<Executor> make_cuda(const AlgorithmRegistry& registry, const Placement& placement, ExecutorOptions& o) {
  cuda::CudaExecutorOptions c;
  c.rank = o.rank;
  if (o.device < 0) {
    const cuda::DeviceInfo info = require_cuda_devices();
    o.device = cuda::local_device(o.rank, info.count, [](const char* v) { return std::getenv(v); });
  }
  c.device = o.device;
  // Without a store the executor has no way to share the ncclUniqueId, and execute() says so.
  if (o.store) c.share_id = cuda::store_id_exchange(*o.store, o.rank, o.timeout, o.nccl_id_key);
  c.native_collectives = o.collectives == CollectivesMode::Nccl;
  c.watchdog.timeout = o.timeout;
  if (o.store) c.watchdog.job_failed = o.store->failure_probe();  // a peer the store saw die or stop
  // A host stuck inside a CUDA/NCCL call cannot throw: the monitor thread ends the rank with
  // the one line meshsim's main would print for an Error, and its exit status.
  c.watchdog.on_stuck = [](const std::string& msg) {
    std::fprintf(stderr, "meshsim: error: %s\n", msg.c_str());
    std::fflush(stderr);
    std::_Exit(2);
  };
  c.warmup = o.warmup;
  c.fp32_kernels = o.fp32_kernels;
  c.random_operands = true;
  cuda::GpuApi& api = o.gpu_api ? *o.gpu_api : cuda::real_gpu_api();
  if (!o.checks) return std::make_unique<cuda::CudaExecutor>(api, registry, placement, std::move(c));
  auto state = std::make_shared<CheckedCudaExecutor::State>();
  state->checks = o.checks;
  c.data = reference_check(registry, o.cpu, state);
  return std::make_unique<CheckedCudaExecutor>(api, registry, placement, std::move(c), std::move(state));
}

}  // namespace

const char* to_string(Backend b) { return enum_name(kBackendNames, b); }
const char* to_string(CollectivesMode c) { return enum_name(kCollectivesModeNames, c); }

// The messages name each value with what it means, so they are written out rather than
// made with enum_list; make_executor_test checks they name every value of the tables.
Backend parse_backend(std::string_view text) {
  if (const auto b = enum_parse(kBackendNames, text)) return *b;
  throw Error("--backend: '" + std::string(text) +
              "' is not a backend; use --backend cpu (processes over TCP) or cuda (GPUs)");
}

CollectivesMode parse_collectives_mode(std::string_view text) {
  if (const auto c = enum_parse(kCollectivesModeNames, text)) return *c;
  throw Error("--collectives: '" + std::string(text) + "' is not known; use ours (our step programs) or nccl");
}

void check_collectives_mode(Backend b, CollectivesMode c) {
  if (c == CollectivesMode::Nccl && b != Backend::Cuda)
    throw Error("--collectives nccl: native NCCL collectives need --backend cuda");
}

cuda::DeviceInfo require_cuda_devices() {
  cuda::DeviceInfo info = cuda::probe_devices();
  if (info.count == 0)
    throw Error("--backend cuda: no GPU found (" + info.reason + "); use --backend cpu or run on a GPU machine");
  return info;
}

std::unique_ptr<Executor> make_executor(const AlgorithmRegistry& registry, const Placement& placement,
                                        ExecutorOptions options) {
  ExecutorOptions& o = options;
  check_collectives_mode(o.backend, o.collectives);
  if (o.backend == Backend::Cuda) return make_cuda(registry, placement, o);
  if (o.schedule == ScheduleKind::Training) {
    if (!o.store)
      throw Error("make_executor: the cpu backend runs a training schedule through the rendezvous store; none given");
    cpu::TrainingExecOptions t;
    t.token = o.token;
    t.bind_addr = o.bind_addr;
    t.timeout = o.timeout;
    return std::make_unique<cpu::TrainingExecutor>(o.rank, o.world, *o.store, placement, registry, std::move(t));
  }
  if (!o.transport)
    throw Error("make_executor: the cpu backend runs a collective workload over a transport; none given");
  return std::make_unique<CheckedCpuExecutor>(*o.transport, registry, std::move(o.cpu), o.checks);
}

}  // namespace meshsim
