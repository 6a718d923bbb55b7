// 2D tensor parallelism (Optimus, docs/math.md section 6) on a q x q mesh for the numerics tests:
// the pre-LN MLP block of layer 0 of the reference model,
//
//   y = x + GeLU(LN(x) W1 + b1) W2 + b2      x, y [T, h] (T = B*S), W1 [h, f], W2 [f, h]
//
// forward and backward with every matrix in q x q blocks. Rank i*q + j of `mesh` holds block
// (i, j) of x, y, W1, W2 and of every activation; the vectors b1, b2 and the LayerNorm gamma,
// beta live on mesh row 0 (slice j on rank (0, j)), are broadcast down their column forward,
// and their gradients are reduced back to row 0. Products by SUMMA (l = 0..q-1):
//
//   C = A B    : A(i,l) broadcast along row i, B(l,j) along column j, C(i,j) += A(i,l) B(l,j)
//   C = A B^T  : B(l,j) broadcast along column j, T = A(i,j) B(l,j)^T, reduce T along row i to (i,l)
//   C = A^T B  : A(i,l) broadcast along row i, T = A(i,l)^T B(i,j), reduce T along column j to (l,j)
//
//        j=0   j=1           row i: broadcast / reduce among (i, 0..q-1)
//   i=0 [0,0] [0,1]          column j: among (0..q-1, j)
//   i=1 [1,0] [1,1]
//
// LayerNorm: local {sum x, sum x^2} -> all-reduce along the row -> apply; backward likewise
// with {sum g, sum g xhat} (kernels/norm.h layernorm2d_*).
//
//   Comm mesh(transport, {0, 1, 2, 3}, registry);      // q = 2
//   SummaBlock s = summa_mlp_block(cfg, data, mesh, 2);
#pragma once

#include "backend/cpu/numerics/comm.h"
#include "backend/cpu/numerics/model.h"

namespace meshsim::numerics {

struct MlpBlockData {
  Tensor x;   // [T, h] block input
  Tensor dy;  // [T, h] gradient of the loss sum(y * dy) with respect to y
};
MlpBlockData mlp_block_data(const ModelConfig& cfg, std::uint64_t data_seed);

// Outputs and gradients: y, dx, and grads named like the model's ("l0.ln2.g", "l0.ln2.b",
// "l0.mlp.w1", "l0.mlp.b1", "l0.mlp.w2", "l0.mlp.b2").
struct MlpBlockResult {
  Tensor y, dx;
  TensorMap grads;
};
MlpBlockResult reference_mlp_block(const ModelConfig& cfg, const MlpBlockData& data);

// Throws Error unless the mesh has q*q ranks and q divides T, h and f.
void validate_summa(const ModelConfig& cfg, int q, int mesh_size);

// This rank's blocks: y, dx [T/q, h/q]; grads W1 [h/q, f/q], W2 [f/q, h/q]; the vector
// gradients [1, n/q] are complete on mesh row 0 only (other rows return them empty).
MlpBlockResult summa_mlp_block(const ModelConfig& cfg, const MlpBlockData& data, Comm& mesh, int q);

}  // namespace meshsim::numerics
