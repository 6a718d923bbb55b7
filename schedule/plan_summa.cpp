// One transformer layer under 2D tensor parallelism (Optimus: SUMMA on a q x q mesh),
// docs/math.md section 6. Device (i, j) holds block (i, j) of every activation [b*s, h] and of
// every weight [k, n]. Mesh axes: "col" varies along a mesh row, "row" along a column, so
// a broadcast "along row i" is a collective on axis "col".
//
//   C = A B     for l: bcast A(i,l) along row i, bcast B(l,j) along col j, C(i,j) += A(i,l) B(l,j)
//   C = A B^T   for l: bcast B(l,j) along col j, T = A(i,j) B(l,j)^T, reduce T along row i to C(i,l)
//   C = A^T B   for l: bcast A(i,l) along row i, T = A(i,l)^T B(i,j), reduce T along col j to C(l,j)
//
// A linear layer Y = X W runs C = A B forward; backward dX = dY W^T (A B^T) and
// dW = X^T dY (A^T B). Biases and LayerNorm parameters live on mesh row 0: broadcast down
// the columns forward, their gradients reduced back to row 0. LayerNorm: local sums of x
// and x^2, all-reduced along the mesh row.
#include <cmath>

#include "schedule/plan_internal.h"

namespace meshsim::plan {
namespace {

struct Summa {
  const Ctx& c;
  Emitter& e;
  int layer, mb;
  Phase phase;
  int q = c.p.mesh2d;
  int P = c.P;
  double T = c.tokens;  // rows of the activation (b*s)
  double h = c.m.hidden;

  Bytes block(double rows, double cols) const { return static_cast<Bytes>(rows / q * (cols / q)) * P; }
  void bcast(const MeshAxis& axis, Bytes bytes, int root, const std::string& name) {
    Op op = collective(phase, Stream::Tp, CollKind::Broadcast, axis, q, bytes, name, layer, mb);
    op.root = root;
    e.blocking(std::move(op));
  }
  void reduce(const MeshAxis& axis, Bytes bytes, int root, const std::string& name) {
    Op op = collective(phase, Stream::Tp, CollKind::Reduce, axis, q, bytes, name, layer, mb);
    op.root = root;
    e.blocking(std::move(op));
  }
  void gemm(const std::string& name, double m, double n, double k) {
    e.compute(phase, name, layer, mb, Kernel::gemm(i64(m), i64(n), i64(k), P));
  }

  // Y[T, n] = X[T, k] W[k, n] (+ bias on row 0, broadcast down the columns).
  void linear_forward(const std::string& name, double k, double n) {
    for (int l = 0; l < q; ++l) {
      bcast(MeshAxis::col(), block(T, k), l, "summa." + name + ".bcast_a");
      bcast(MeshAxis::row(), block(k, n), l, "summa." + name + ".bcast_b");
      gemm("summa." + name, T / q, n / q, k / q);
    }
    bcast(MeshAxis::row(), static_cast<Bytes>(n / q) * P, 0, "summa." + name + ".bias_bcast");
  }
  void linear_backward(const std::string& name, double k, double n) {
    // dX = dY W^T: C = A B^T with A = dY [T, n], B = W [k, n].
    for (int l = 0; l < q; ++l) {
      bcast(MeshAxis::row(), block(k, n), l, "summa." + name + ".dgrad.bcast_b");
      gemm("summa." + name + ".dgrad", T / q, k / q, n / q);
      reduce(MeshAxis::col(), block(T, k), l, "summa." + name + ".dgrad.reduce");
    }
    // dW = X^T dY: C = A^T B with A = X [T, k], B = dY [T, n].
    for (int l = 0; l < q; ++l) {
      bcast(MeshAxis::col(), block(T, k), l, "summa." + name + ".wgrad.bcast_a");
      gemm("summa." + name + ".wgrad", k / q, n / q, T / q);
      reduce(MeshAxis::row(), block(k, n), l, "summa." + name + ".wgrad.reduce");
    }
    reduce(MeshAxis::row(), static_cast<Bytes>(n / q) * P, 0, "summa." + name + ".bias_grad_reduce");
  }
  void layernorm(const std::string& name, bool backward) {
    const double elems = (T / q) * (h / q);
    e.compute(phase, name + (backward ? ".bwd" : ""), layer, mb, [&] {
      Kernel k = Kernel::rowwise(KernelKind::Norm, KernelFn::LayerNorm2d, dim(T / q), dim(h / q), 8 * elems,
                                 (backward ? 4.0 : 2.0) * P * elems, P);
      k.k = c.m.hidden;
      return k;
    }());
    // Row sums of x and x^2 (backward: of dy and dy*x), fp32, all-reduced along the mesh row.
    e.blocking(collective(phase, Stream::Tp, CollKind::AllReduce, MeshAxis::col(), q, static_cast<Bytes>(T / q) * 4 * 2,
                          "summa." + name + ".row_allreduce", layer, mb));
    if (backward)
      reduce(MeshAxis::row(), static_cast<Bytes>(2 * h / q) * P, 0, "summa." + name + ".param_grad_reduce");
    else
      bcast(MeshAxis::row(), static_cast<Bytes>(2 * h / q) * P, 0, "summa." + name + ".param_bcast");
  }
  // A row kernel on this device's [T/q, cols] block.
  void elementwise(const std::string& name, KernelFn fn, double cols, double bytes_per, bool backward) {
    const double f = backward ? 2 : 1, elems = (T / q) * cols;
    e.compute(phase, name + (backward ? ".bwd" : ""), layer, mb,
              Kernel::rowwise(KernelKind::Elementwise, fn, dim(T / q), dim(cols), 3 * elems * f,
                              bytes_per * P * elems * f, P));
  }
  void attention(bool backward) {
    // b/q sequences and heads/q heads per device, the whole sequence: local.
    const double seqs = static_cast<double>(c.p.micro_batch_size) / q;
    const double s = c.m.seq;
    const double causal = c.m.attention == AttentionKind::Flash ? 0.5 : 1.0;
    const double fl = 4 * seqs * s * s * h / q * causal * (backward ? 2 : 1);
    const double bytes = P * 4 * (T / q) * (h / q) * (backward ? 2 : 1);
    e.compute(backward ? Phase::Backward : phase, backward ? "attn.core.bwd" : "attn.core", layer, mb,
              attention_kernel(seqs * c.m.heads / q, s, s, c.m.head_dim(), causal < 1, fl, bytes, P));
  }

  KernelFn act_fn() const { return c.m.ffn == FfnKind::SwiGLU ? KernelFn::SwiGLU : KernelFn::Gelu; }
  double up() const { return c.m.ffn == FfnKind::SwiGLU ? 2.0 * c.m.ffn_hidden : c.m.ffn_hidden; }
  double qkv() const { return h + 2.0 * c.m.kv_hidden(); }

  void forward() {
    layernorm("ln1", false);
    linear_forward("qkv", h, qkv());
    attention(false);
    linear_forward("proj", h, h);
    elementwise("attn.dropout_residual", KernelFn::DropoutAdd, h / q, 4, false);
    layernorm("ln2", false);
    linear_forward("fc1", h, up());
    elementwise("mlp.act", act_fn(), c.m.ffn_hidden / q, 2, false);
    linear_forward("fc2", c.m.ffn_hidden, h);
    elementwise("mlp.dropout_residual", KernelFn::DropoutAdd, h / q, 4, false);
  }
  void backward() {
    if (c.p.recompute.mode == RecomputeMode::Selective) {
      const Phase keep = phase;
      phase = Phase::Recompute;
      attention(false);
      phase = keep;
    }
    elementwise("mlp.dropout_residual", KernelFn::DropoutAdd, h / q, 4, true);
    linear_backward("fc2", c.m.ffn_hidden, h);
    elementwise("mlp.act", act_fn(), c.m.ffn_hidden / q, 2, true);
    linear_backward("fc1", h, up());
    layernorm("ln2", true);
    elementwise("attn.dropout_residual", KernelFn::DropoutAdd, h / q, 4, true);
    linear_backward("proj", h, h);
    attention(true);
    linear_backward("qkv", h, qkv());
    layernorm("ln1", true);
  }
};

}  // namespace

void summa_layer_forward(const Ctx& c, Emitter& e, int layer, int mb, Phase phase) {
  Summa{c, e, layer, mb, phase}.forward();
}

void summa_layer_backward(const Ctx& c, Emitter& e, int layer, int mb) {
  Summa{c, e, layer, mb, Phase::Backward}.backward();
}

}  // namespace meshsim::plan
