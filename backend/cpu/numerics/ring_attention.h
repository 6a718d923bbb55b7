// Context parallelism with ring attention (docs/math.md section 7) for the numerics tests.
//
// Every sequence of S tokens is cut into 2c chunks of n = S/(2c); rank r of the c ranks of
// `cp` holds chunks r and 2c-1-r of every sequence (causal load balancing: each rank gets
// one early and one late chunk, so all ranks do the same attention work):
//
//   c = 2, S = 8, n = 2:   chunks  0 1 | 2 3 | 4 5 | 6 7      rank 0: chunks 0, 3
//                                  c0    c1    c2    c3       rank 1: chunks 1, 2
//
// LayerNorm, projections, MLP, dropout (by global token index) and the loss are token-local
// and run on the rank's rows. Attention (RingAttention): the rank's K/V block (both chunks)
// travels around the ring; at step t = 0..c-1 the rank holds the block of rank (r - t) mod c
// and, for each of its query chunks qc and each held key chunk kc <= qc, computes the
// blocked attention with the causal mask at global offsets (q0 = qc n, k0 = kc n) and merges
// it into its running (o, lse) with the log-sum-exp merge; then sendrecv passes the block to
// r+1 and takes the next from r-1 (c-1 passes). Backward: with the merged o and lse, the
// block travels the ring again together with its dK/dV accumulators; each rank adds its
// queries' contributions (dQ stays local) and after c passes every block is home with its
// complete dK/dV. Parameter gradients are all-reduced over the group (every rank holds all
// weights), the loss sum too.
//
//   Comm cp(transport, {0, 1}, registry);
//   CpStep s = context_parallel_step(cfg, params, batch, cp);
#pragma once

#include <vector>

#include "backend/cpu/numerics/comm.h"
#include "backend/cpu/numerics/model.h"

namespace meshsim::numerics {

// Throws Error unless 2c divides the sequence length.
void validate_cp(const ModelConfig& cfg, int c);

// Global token rows of rank r (batch outer; chunk r then chunk 2c-1-r of every sequence).
std::vector<std::int64_t> cp_rows(const ModelConfig& cfg, int c, int r);

class RingAttention : public AttentionCore {
 public:
  // batch sequences per rank, each as two chunks of `chunk` rows. bf16: each block pair's
  // attention writes bf16 (its output, its dq/dk/dv, as a flash attention's bf16 stores),
  // merged and accumulated in fp32 (the running output and log-sum-exp, dQ, and dK/dV as
  // they travel), each result rounded once at the end.
  RingAttention(Comm& cp, int heads, int head_dim, int batch, int chunk, bool bf16 = false);
  std::unique_ptr<Saved> forward(const float* qkv, std::int64_t rows, float* ctx) override;
  void backward(const Saved& saved, const float* dctx, std::int64_t rows, float* dqkv) override;

 private:
  // Ring step t: for every sequence b and every pair (query chunk j of this rank, key chunk
  // jj of the block held, rank r - t's) not entirely in the causal future, calls
  // fn(query slot 2b + j, key slot 2b + jj, the causal mask at those chunks' positions).
  template <class Fn>
  void for_each_block_pair(int t, Fn&& fn) const;

  Comm& cp_;
  int heads_, d_, batch_, n_;
  bool bf16_;
};

struct CpStep {
  double loss = 0;                 // mean over the batch
  std::vector<std::int64_t> rows;  // this rank's global token rows
  Tensor logits;                   // [rows, V] in `rows` order
  TensorMap grads;                 // all-reduced, full
};

CpStep context_parallel_step(const ModelConfig& cfg, const TensorMap& params, const Batch& batch, Comm& cp);

}  // namespace meshsim::numerics
