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
// bf16 (cfg.bf16): the block's data, weights and activations bf16 as in model.h; C = A B
// accumulates its q panels in fp32 (rounded after the bias, as the single rank's GEMM);
// C = A B^T rounds each rank's partial to bf16 and reduces in bf16 (activation gradients);
// C = A^T B (weight gradients) stays fp32; the LayerNorm statistics stay fp32.
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

// Block (i, j) of a full tensor cut into q x q blocks, and the full tensor from the blocks of
// the q*q ranks (block (i, j) from rank i*q + j).
Tensor summa_block(const Tensor& full, int q, int i, int j);
std::vector<float> summa_assemble(const std::vector<Tensor>& blocks, int q);

// A rank's place on the q x q mesh: its row and column groups and its block (i, j).
struct SummaMesh {
  Comm row, col;  // row: group rank j; col: group rank i
  int q, i, j;
};
SummaMesh summa_mesh(Comm& mesh, int q);
// The three products on this rank's blocks (see above; `bf16` as there):
//   C(i,j) += A B        A(i,l) [m, kl], B(l,j) [kl, n]
//   C(i,l)  = A B^T      A(i,j) [m, n],  B(l,j) [kl, n]  -> [m, kl]
//   C(l,j)  = A^T B      A(i,l) [m, kl], B(i,j) [m, n]   -> [kl, n]
void summa_ab(SummaMesh& M, const Tensor& A, const Tensor& B, Tensor& C, bool bf16 = false);
Tensor summa_abt(SummaMesh& M, const Tensor& A, const Tensor& B, bool bf16 = false);
Tensor summa_atb(SummaMesh& M, const Tensor& A, const Tensor& B, bool bf16 = false);

// This rank's blocks: y, dx [T/q, h/q]; grads W1 [h/q, f/q], W2 [f/q, h/q]; the vector
// gradients [1, n/q] are complete on mesh row 0 only (other rows return them empty).
MlpBlockResult summa_mlp_block(const ModelConfig& cfg, const MlpBlockData& data, Comm& mesh, int q);

}  // namespace meshsim::numerics
