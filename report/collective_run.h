// `meshsim collective` past its flags: one collective (or a size sweep) simulated and printed
// as meshsim's summary, a sweep table, nccl-tests' table or JSON, with --explain's formula
// and step table, the teaching page (--html) and a Perfetto trace (--trace).
//
//   CollectiveRunOptions o;  o.job.kind = "allreduce";  o.job.bytes = "1GiB";
//   print_collective_run(o);   // stdout; the files it names on stderr
//
// --algo nccl (or --fidelity nccl): NCCL's tuning model picks the algorithm and protocol
// (sim/nccl_model.h) and prints its candidate table. Errors name the flags.
#pragma once

#include <string>

#include "sim/collective_job.h"

namespace meshsim {

struct CollectiveRunOptions {
  CollectiveJob job;               // what the flags bound to it ask for; --bytes as given
  std::string maxbytes;            // nccl-tests' -e: --bytes is then the sweep's MIN
  int stepfactor = 0;              // nccl-tests' -f (our -f is --fidelity): multiply by this; 0 = 2
  std::string format = "meshsim";  // or nccl-tests
  bool json = false;
  std::string trace;  // --trace: the Perfetto trace to write
  std::string html;   // --html: the teaching page
};

// Runs every size asked for and prints it (flushed row by row in a sweep); writes the files.
void print_collective_run(const CollectiveRunOptions& o);

}  // namespace meshsim
