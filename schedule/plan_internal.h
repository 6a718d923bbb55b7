// Internals of plan_iteration (plan.cpp, plan_layer.cpp, plan_summa.cpp): the emitter
// that appends ops to a role with the usual dependency pattern, and the per-layer builders.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedule/ir.h"
#include "schedule/model.h"
#include "schedule/parallel.h"

namespace meshsim::plan {

// Appends ops to one role. Compute ops run in order on the compute stream and wait for
// whatever is pending (a blocking collective, a received activation). A blocking
// collective waits for the last compute op and makes the next compute op wait for it;
// an async one (DP buckets, pipeline sends) only waits for the last compute op.
class Emitter {
 public:
  explicit Emitter(Role& role) : role_(role) {}

  int compute(Phase phase, const std::string& name, int layer, int mb, const Kernel& k);
  int blocking(Op op);
  int async(Op op);
  // A Recv: waits for nothing local; the next compute op waits for it.
  int recv(Op op);
  void wait_for(int op) { pending_.push_back(op); }
  // An op that waits only for what is pending (e.g. a Recv), not the last compute op; the
  // next compute op waits for it instead.
  int follow(Op op);
  int last_compute() const { return last_compute_; }
  Op& op(int i) { return role_.ops[i]; }
  int size() const { return static_cast<int>(role_.ops.size()); }

 private:
  int push(Op op);
  Role& role_;
  int last_compute_ = -1;
  std::vector<int> pending_;
};

// An op's identity: what it is, its phase and stream, its name, layer and micro-batch.
Op op_of(OpKind kind, Phase phase, Stream stream, const std::string& name, int layer, int mb);
Op collective(Phase phase, Stream stream, CollKind kind, const MeshAxis& axis, int group, Bytes bytes,
              const std::string& name, int layer, int mb);

// Sizes of kernel shapes: v rounded to the nearest whole number; dim() at least 1.
std::int64_t i64(double v);
std::int64_t dim(double v);

// Attention of batch_heads x seq_q queries against seq_kv keys (each rounded, at least 1),
// with the FLOPs and bytes the schedule counts (K/V of kv_heads, which may be fewer than the
// query heads).
Kernel attention_kernel(double batch_heads, double seq_q, double seq_kv, double head_dim, bool causal, double flops,
                        double bytes, int P);

// Shared context of one plan: sizes every layer builder needs.
struct Ctx {
  const ModelSpec& m;
  const ParallelSpec& p;
  int P = 2;          // bytes per element
  double tokens = 0;  // b*s/c: tokens of one micro-batch on one cp rank
  MeshAxis dp_axis;   // dp, or edp+ep (+cp)
};

// One transformer layer of the Megatron family (tp, sp, cp, moe/ep): forward ops, and
// the backward ops preceded by whatever the recompute mode recomputes.
void layer_forward(const Ctx& c, Emitter& e, int layer, int mb, Phase phase);
void layer_backward(const Ctx& c, Emitter& e, int layer, int mb);
// The same for 2D SUMMA (p.mesh2d = q).
void summa_layer_forward(const Ctx& c, Emitter& e, int layer, int mb, Phase phase);
void summa_layer_backward(const Ctx& c, Emitter& e, int layer, int mb);

}  // namespace meshsim::plan
