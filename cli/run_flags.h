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
};

// The checks the flags allow before any rank starts, in this order (the first that fails is
// the one clear error): --timeout in (0, 86400] seconds; --backend and --collectives known
// (parsed here into f.backend and f.collectives); NCCL's collectives only on cuda; --format known (and
// not with --json); a GPU for cuda.
void check_backend(RunOptions& f, const BackendFlagText& typed);

}  // namespace meshsim::cli
