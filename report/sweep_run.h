// `meshsim sweep` and `meshsim sweep-merge` past their flags: the sweep engine (sim/sweep.h)
// run in this process or over the ranks of an MPI job (backend/mpi/ranks.h), its files and its
// ranked output (report/sweep_report.h).
//
//   SweepRequest r;  r.vary = {"parallel.tp=1,2,4,8"};  r.csv = "all.csv";
//   return run_sweep(r, base, ranks);     // ranks: mpi::join_ranks(), Ranks{} outside a launcher
//
// --csv and --jsonl stream the rows in variant order while the sweep runs (a row waits only
// for the variants before it), so a long sweep leaves its results on disk as it goes and the
// files have the same bytes for any --jobs. The ranked table and a summary line close the run.
//
// Beyond one machine: --shard K/N runs the variants whose index i has i % N == K, its --jsonl
// a shard's (a header line, each row with its index); sweep-merge prints exactly what the whole
// sweep prints. Under a launcher (mpirun, srun) rank r of R runs what --shard r/R runs (of a
// --shard K/N run: shard K + r*N of N*R), into a JSON-lines text in memory; rank 0 gathers the
// texts, merges them as sweep-merge does and writes the files and the ranked output: the same
// bytes as one process. So under mpirun rank 0 writes --csv and --jsonl only once every rank is
// done, not while the sweep runs. The ranks watch each other (backend/mpi/ranks.h), so a
// stopped rank ends the sweep instead of leaving the others waiting. Errors name the flags.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "backend/mpi/ranks.h"
#include "sim/scenario.h"

namespace meshsim {

// What a sweep and a merge print and write.
struct SweepOutput {
  std::string csv, jsonl, report;
  std::string rank_by = "tokens_per_s";  // --rank-by
  bool json = false;
};

// A sweep's own flags.
struct SweepRequest : SweepOutput {
  std::vector<std::string> vary;
  std::string global_batch;  // --global-batch
  int jobs = 0;
  std::string shard;
  std::string where;
};

// The scenario a sweep varies: `load` makes it (the file, or the built-in default, with --set,
// --fidelity and --profile applied) and is called once the sweep's own flags are checked, so
// their errors come first; the rest is what the sweep's definition hash reads of it.
struct SweepBase {
  std::function<ScenarioNode()> load;
  std::string file;
  std::vector<std::string> sets;
  std::string fidelity, profile;
};

// The sweep in this process, one of `ranks` (with none, the single-process sweep); the exit
// status (2 when a rank's setup failed: rank 0 has said why).
int run_sweep(const SweepRequest& r, const SweepBase& base, const mpi::Ranks& ranks);

// sweep-merge: the shards' --jsonl files merged, written and printed as the whole sweep.
int run_sweep_merge(const std::vector<std::string>& shards, const SweepOutput& out);

}  // namespace meshsim
