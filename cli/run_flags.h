// What `meshsim run`, `validate` and `calibrate` share: run's and validate's flags, and the
// checks of --backend and --collectives (run_cmd.cpp).
#pragma once

#include <string>
#include <vector>

#include "backend/make_executor.h"
#include "report/run_report.h"

namespace meshsim::cli {

struct RunFlags : RunOptions {
  std::string file;
  std::vector<std::string> sets;
  int nprocs = 0;
};

// --backend and --collectives as typed: CLI11 binds them here, and check_backend alone reads
// them, so each flag is parsed once and everything after it reads RunOptions' enums.
struct BackendFlagText {
  std::string backend = to_string(Backend::Cpu);
  std::string collectives = to_string(CollectivesMode::Ours);
  std::string kernels = "bf16";  // --kernels: bf16 or fp32
  std::string attention;         // --attention: auto, cudnn or meshsim ("": not given)
};

// The checks the flags allow before any rank starts, in this order (the first that fails is
// the one clear error): --timeout in (0, 86400] seconds; --backend and --collectives known
// (parsed here into f.backend and f.collectives); NCCL's collectives only on cuda; --kernels bf16 or
// fp32 (into f.fp32_kernels); --attention auto, cudnn or meshsim (set as MESHSIM_ATTENTION, which
// the CUDA plugin reads and the ranks inherit); --format known (and not with --json); a GPU for cuda.
void check_backend(RunOptions& f, const BackendFlagText& typed);
// The help text of --kernels (run, validate, calibrate).
inline constexpr const char* kKernelsHelp =
    "cuda: the precision of our non-GEMM kernels for a 2-byte model: bf16 (default: activations in bf16, "
    "statistics and the optimizer in float, as mixed-precision training runs) or fp32 (every kernel in float32, "
    "as before the bf16 kernels); calibrate and validate must use the same";

// The help text of --attention (run, validate, calibrate).
inline constexpr const char* kAttentionHelp =
    "cuda: where bf16 attention runs: auto (cuDNN's fused flash attention where libcudnn.so.9 loads and takes "
    "the shape, else our kernel; the default), cudnn (cuDNN or an error) or meshsim (our kernel); sets "
    "MESHSIM_ATTENTION";

}  // namespace meshsim::cli
