// Planning one training iteration: model + parallel layout -> Schedule (schedule/ir.h).
//
//   ModelSpec m = model_preset("gpt3-175b");
//   ParallelSpec p;  p.tp = 8;  p.pp = 8;  p.vchunks = 2;  p.dp = 16;  p.microbatches = 64;
//   Schedule s = plan_iteration(m, p);    // 8 roles (pipeline stages), ops per stage
//
// What each role runs, in order (docs/math.md sections 5-13):
//   - pipeline order: 1F1B (warm-up forwards, steady one-forward-one-backward, cool-down
//     backwards) or Megatron's interleaved order with v model chunks per device; stage
//     boundaries are Send/Recv ops of b*s*h*P/c bytes (/t with SP);
//   - per layer forward: LayerNorm, QKV, attention (local, or a ring of c steps with K/V
//     passed along the cp axis and a log-sum-exp merge per step), output projection,
//     MLP (dense, or router + experts with dispatch/combine all-to-alls on the ep axis),
//     with Megatron's f / f-bar all-reduces on the tp axis (SP: g / g-bar all-gather and
//     reduce-scatter); or, with mesh2d, the SUMMA broadcasts/reduces on the row and col
//     axes (plan_summa.cpp);
//   - per layer backward: the conjugates (dgrad and wgrad GEMMs, the collectives that f and
//     g turn into), preceded by the recomputed forward when the recompute mode asks (with
//     distribute_checkpoints, each recomputed segment starts with a blocking all-gather of
//     its input, b*s*h*P/c, on the tp axis);
//   - data parallel: gradients of the last micro-batch's backward reduced in buckets on
//     the dp axis, overlapped with backward (ZeRO 1-2: reduce-scatter, then an all-gather
//     of parameters after the optimizer; ZeRO 3: also an all-gather of each layer's
//     parameters, one tensor-parallel rank's share, for its forward, recomputed forward and
//     backward, prefetched on the dp stream while the previous layer computes); then the
//     optimizer step.
#pragma once

#include <memory>

#include "schedule/ir.h"
#include "schedule/model.h"
#include "schedule/parallel.h"

namespace meshsim {

// The mesh axes of the layout, outermost first: dp (or edp, ep with expert parallelism),
// pp, cp, tp (or row, col with mesh2d). Axes of size 1 are kept, so axis names are stable.
std::vector<std::pair<std::string, int>> mesh_axes(const ParallelSpec& p);

// Validates (validate_parallel with gpus = p.world_size()) and plans the iteration.
Schedule plan_iteration(const CheckedLayout& layout);
Schedule plan_iteration(const ModelSpec& m, const ParallelSpec& p);  // checks the layout first

// Building blocks of plan_iteration for executors that exploit identical micro-batches
// (sim/fast_formula.h): a stage's pipeline order and each unit's ops on their own.
struct PipelineUnit {
  bool forward = true;
  int microbatch = 0;
  int chunk = 0;
};
std::vector<PipelineUnit> pipeline_units(const ParallelSpec& p, int stage);

class UnitPlanner {
 public:
  explicit UnitPlanner(const CheckedLayout& layout);
  UnitPlanner(const ModelSpec& m, const ParallelSpec& p);  // checks the layout first
  ~UnitPlanner();
  UnitPlanner(const UnitPlanner&) = delete;
  UnitPlanner& operator=(const UnitPlanner&) = delete;
  // The ops of one unit as a fresh Role of `stage` (dependencies local to it), exactly as
  // plan_iteration emits them. Units of the last micro-batch carry the data-parallel
  // gradient buckets, so call those in pipeline order.
  Role unit(int stage, const PipelineUnit& u);
  // What follows the last unit (the final bucket, the optimizer); its optimizer waits only
  // for the buckets the epilogue emits itself.
  Role epilogue(int stage);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A collective benchmark as a schedule: `iterations` back-to-back collectives over every
// rank (one role, mesh axis "rank"), the workload `meshsim run|validate` time for real and
// in the simulator alike. With a `mesh` (e.g. {{"row", 2}, {"col", 4}}), the schedule's
// axes are the mesh's and each collective runs along dimension `group` ("all": every
// rank), in every group of that dimension at once; a placement says where mesh ranks run.
struct CollectiveWorkload {
  CollKind kind = CollKind::AllReduce;
  Bytes bytes = 0;
  int ranks = 2;
  int iterations = 5;
  int root = 0;
  AlgorithmChoice algorithm;                      // auto: the executor picks
  std::vector<std::pair<std::string, int>> mesh;  // empty: one axis "rank" of `ranks`
  std::string group = "all";                      // with a mesh: the dimension collectives run along
};
Schedule plan_collectives(const CollectiveWorkload& w);

// Bytes each rank of a ring moves for one collective of `n` bytes over `p` ranks
// (2(p-1)/p n for all-reduce, (p-1)/p n for all-gather, reduce-scatter and all-to-all,
// n for the rest): the accounting of docs/math.md's per-layer communication figures.
double ring_bytes_moved(CollKind kind, Bytes n, int p);

}  // namespace meshsim
