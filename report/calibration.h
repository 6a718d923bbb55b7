// `meshsim calibrate` on one rank, and the measurements it and validate turn into a machine
// profile (sim/machine_profile.h, docs/profile.md): what `meshsim simulate --profile` (and a
// scenario's run.profile) reads.
//
//   CalibrateOptions o;  o.out = "profile.yaml";   // what the flags asked for
//   return calibrate_rank(o);                       // each rank, started by a launcher
//
// What a calibration measures:
//   - compute, on every rank at once (rank 0's figures): cpu: the GEMM grid, memory
//     bandwidth, per-op overhead and attention rate of the cpu backend's kernels
//     (measure_cpu); cuda: cuBLAS GEMMs over shapes and dtypes, memory bandwidth, launch
//     overhead, and our LayerNorm, GeLU and softmax kernels as memory efficiencies (measure_cuda);
//   - collectives, with two or more ranks: for every group size g (the powers of two
//     dividing N, and N), every kind, every size of the sweep, `repeats` times: the
//     collective in every group of g ranks at once, as a training step runs its groups,
//     through the backend's executor (cpu: our step programs over TCP; cuda: ours over
//     NCCL send/recv or NCCL's own). An op's time is its slowest rank's; per size the
//     median over repeats; then alpha and bandwidth fitted by least squares (an entry
//     whose times do not grow with the size, noise on a busy host, is left out with a
//     warning, and the simulator keeps the topology model for it).
// Rank 0 writes the profile (after checking that it loads) and prints what it measured.
// Errors name calibrate's flags (--kinds, --sizes, --out).
#pragma once

#include <string>
#include <vector>

#include "backend/cpu/cpu_calibrate.h"
#include "backend/cuda/cuda_calibrate.h"
#include "backend/make_executor.h"
#include "schedule/collective.h"
#include "sim/machine_profile.h"

namespace meshsim {

struct CalibrateOptions {
  Backend backend = Backend::Cpu;
  CollectivesMode collectives = CollectivesMode::Ours;
  std::string out;                     // the profile to write
  std::string sizes = "256KiB:16MiB";  // the collectives' sizes, MIN:MAX doubling
  std::string kinds = "allreduce,allgather,reducescatter,broadcast,alltoall";
  int repeats = 3;
  double timeout_s = 300;
  bool fp32_kernels = false;  // cuda: time our kernels in float32, not bf16 (--kernels fp32)
};

// --kinds: the collectives to calibrate, comma-separated, each once (an Error naming --kinds
// for sendrecv, an unknown kind or none).
std::vector<CollKind> parse_calibration_kinds(const std::string& text);

// One rank of the calibration (every rank calls it, started by a launcher): rank 0 writes
// o.out and prints the figures.
int calibrate_rank(const CalibrateOptions& o);

// This host's compute as a machine profile: the measured GEMM grid (as points for 2- and
// 4-byte GEMMs: the cpu backend computes in fp32 whatever the model's dtype), memory
// bandwidth, per-op overhead, and the reference kernels' rates (apply_kernel_rates).
MachineProfile cpu_machine_profile(const cpu::CpuMeasurements& m);

// Our timed kernels (calibration_calls) into a profile: per kernel kind the memory
// efficiency (bytes per second over p.gpu.memory_bandwidth) and the attention efficiency
// (FLOP/s over `attention_peak`), each kept within [0.001, 1].
void apply_kernel_rates(MachineProfile& p, const std::vector<MeasuredKernel>& kernels, double attention_peak);
// The row kernels timed at several row lengths (calibrate's sweep, row_kernel_calls) into the
// profile's row points: per function, pass and width, bytes per second over
// p.gpu.memory_bandwidth, kept within [0.001, 1].
void apply_row_sweep(MachineProfile& p, const std::vector<MeasuredKernel>& sweep);
// Attention timed at several sequence lengths (calibrate's sweep, attention_calls) into the
// profile's attention points: per sequence, mask and pass, FLOP/s over `peak`, kept within
// [0.001, 1].
void apply_attention_sweep(MachineProfile& p, const std::vector<MeasuredKernel>& sweep, double peak);

// The GEMM shapes of one layer of every model preset (model_presets(): its embedding, layer
// and logits, forward and backward) at TP 1 and TP 8, micro-batch 1, at the preset's
// sequence, each once, in the order first planned, leaving out a shape with an operand over
// `max_operand_bytes` (bf16): what `calibrate --backend cuda` times besides its grid, so
// validate predicts such a layer's GEMMs from their own measured times (an exact shape's
// measured rate, ComputeModel::time) rather than interpolated from the grid.
std::vector<cuda::GemmShape> preset_gemm_shapes(std::size_t max_operand_bytes);

}  // namespace meshsim
