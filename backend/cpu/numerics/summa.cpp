#include "backend/cpu/numerics/summa.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/hash.h"
#include "kernels/kernels.h"

namespace meshsim::numerics {
namespace k = meshsim::kernels;

MlpBlockData mlp_block_data(const ModelConfig& cfg, std::uint64_t data_seed) {
  const std::int64_t T = cfg.tokens(), h = cfg.hidden;
  MlpBlockData d{Tensor(T, h), Tensor(T, h)};
  const std::uint64_t kx = splitmix64(data_seed ^ 0x2d1), kdy = splitmix64(data_seed ^ 0x2d2);
  for (std::int64_t i = 0; i < T * h; ++i) {
    d.x.data[i] = 2.f * k::dropout_uniform(kx, i) - 1.f + 0.3f;  // nonzero mean: LN has work to do
    d.dy.data[i] = 2.f * k::dropout_uniform(kdy, i) - 1.f;
  }
  round_if(cfg.bf16, d.x.p(), T * h);
  round_if(cfg.bf16, d.dy.p(), T * h);
  return d;
}

namespace {
const char* const kNames[] = {"l0.ln2.g", "l0.ln2.b", "l0.mlp.w1", "l0.mlp.b1", "l0.mlp.w2", "l0.mlp.b2"};
}

MlpBlockResult reference_mlp_block(const ModelConfig& cfg, const MlpBlockData& d) {
  const std::int64_t T = cfg.tokens(), h = cfg.hidden, f = cfg.ffn;
  const bool bf = cfg.bf16;
  TensorMap w;
  for (const char* n : kNames) {
    const ParamInfo info = param_info(cfg, n);
    w.emplace(n, init_block(cfg, n, 0, info.rows, 0, info.cols));
  }
  if (bf) w = bf16_copy(w);
  MlpBlockResult r{Tensor(T, h), Tensor(T, h), zeros_like(w)};
  std::vector<float> xn(T * h), mu(T), rs(T), dxn(T * h);
  k::layernorm_forward_cpu(d.x.p(), w.at("l0.ln2.g").p(), w.at("l0.ln2.b").p(), xn.data(), mu.data(), rs.data(), T, h,
                           cfg.ln_eps);
  round_if(bf, xn.data(), T * h);
  MlpSaved s;
  mlp_forward(xn.data(), T, h, f, w.at("l0.mlp.w1").p(), w.at("l0.mlp.b1").p(), w.at("l0.mlp.w2").p(),
              w.at("l0.mlp.b2").p(), r.y.p(), s, bf);
  add_into(r.y.p(), d.x.p(), T * h);
  round_if(bf, r.y.p(), T * h);
  auto G = [&](const char* n) { return r.grads.at(n).p(); };
  mlp_backward(s, d.dy.p(), T, h, f, w.at("l0.mlp.w1").p(), w.at("l0.mlp.w2").p(), dxn.data(), G("l0.mlp.w1"),
               G("l0.mlp.b1"), G("l0.mlp.w2"), G("l0.mlp.b2"), bf);
  k::layernorm_backward_cpu(dxn.data(), d.x.p(), w.at("l0.ln2.g").p(), mu.data(), rs.data(), r.dx.p(), G("l0.ln2.g"),
                            G("l0.ln2.b"), T, h);
  round_if(bf, r.dx.p(), T * h);
  add_into(r.dx.p(), d.dy.p(), T * h);
  round_if(bf, r.dx.p(), T * h);
  return r;
}

void validate_summa(const ModelConfig& cfg, int q, int mesh_size) {
  validate(cfg);
  if (q < 1 || q * q != mesh_size)
    throw Error(fmt::format("2D mesh: {} ranks are not a {} x {} mesh; use q*q ranks", mesh_size, q, q));
  auto divides = [&](std::int64_t v, const char* what) {
    if (v % q != 0) throw Error(fmt::format("2D mesh: {} = {} does not divide by q = {}", what, v, q));
  };
  divides(cfg.tokens(), "batch x seq");
  divides(cfg.hidden, "model.hidden");
  divides(cfg.ffn, "model.ffn");
}

Tensor summa_block(const Tensor& full, int q, int i, int j) {
  const std::int64_t r = full.rows / q, c = full.cols / q;
  Tensor b(r, c);
  for (std::int64_t a = 0; a < r; ++a)
    std::copy_n(full.data.begin() + (i * r + a) * full.cols + j * c, c, b.data.begin() + a * c);
  return b;
}

std::vector<float> summa_assemble(const std::vector<Tensor>& blocks, int q) {
  const std::int64_t r = blocks[0].rows, c = blocks[0].cols;
  std::vector<float> full(static_cast<std::size_t>(r * c * q * q));
  for (int i = 0; i < q; ++i)
    for (int j = 0; j < q; ++j)
      for (std::int64_t a = 0; a < r; ++a)
        std::copy_n(blocks[i * q + j].data.begin() + a * c, c, full.begin() + (i * r + a) * c * q + j * c);
  return full;
}

SummaMesh summa_mesh(Comm& mesh, int q) {
  const int i = mesh.rank() / q, j = mesh.rank() % q;
  std::vector<int> row_ranks, col_ranks;
  for (int a = 0; a < q; ++a) row_ranks.push_back(i * q + a), col_ranks.push_back(a * q + j);
  return SummaMesh{mesh.subgroup(row_ranks), mesh.subgroup(col_ranks), q, i, j};
}

void summa_ab(SummaMesh& M, const Tensor& A, const Tensor& B, Tensor& C, bool bf16) {
  for (int l = 0; l < M.q; ++l) {
    std::vector<float> a = M.j == l ? A.data : std::vector<float>(A.data.size());
    std::vector<float> b = M.i == l ? B.data : std::vector<float>(B.data.size());
    M.row.broadcast(a, l);
    M.col.broadcast(b, l);
    matmul(bf16, k::Trans::No, k::Trans::No, A.rows, B.cols, A.cols, a.data(), A.cols, b.data(), B.cols, 1.f, C.p(),
           C.cols);
  }
}

Tensor summa_abt(SummaMesh& M, const Tensor& A, const Tensor& B, bool bf16) {
  Tensor C(A.rows, B.rows);
  for (int l = 0; l < M.q; ++l) {
    std::vector<float> b = M.i == l ? B.data : std::vector<float>(B.data.size());
    M.col.broadcast(b, l);
    std::vector<float> t(static_cast<std::size_t>(A.rows * B.rows));
    matmul(bf16, k::Trans::No, k::Trans::Yes, A.rows, B.rows, A.cols, A.p(), A.cols, b.data(), B.cols, 0.f, t.data(),
           B.rows);
    round_if(bf16, t.data(), std::int64_t(t.size()));
    M.row.reduce(t, l, bf16 ? ReduceIn::Bf16 : ReduceIn::Float32);
    if (M.j == l) C.data = std::move(t);
  }
  return C;
}

Tensor summa_atb(SummaMesh& M, const Tensor& A, const Tensor& B, bool bf16) {
  Tensor C(A.cols, B.cols);
  for (int l = 0; l < M.q; ++l) {
    std::vector<float> a = M.j == l ? A.data : std::vector<float>(A.data.size());
    M.row.broadcast(a, l);
    std::vector<float> t(static_cast<std::size_t>(A.cols * B.cols));
    matmul(bf16, k::Trans::Yes, k::Trans::No, A.cols, B.cols, A.rows, a.data(), A.cols, B.p(), B.cols, 0.f, t.data(),
           B.cols);
    M.col.reduce(t, l);
    if (M.i == l) C.data = std::move(t);
  }
  return C;
}

namespace {

// A vector slice kept on row 0: broadcast down the column (forward).
std::vector<float> column_vector(const ModelConfig& cfg, SummaMesh& M, const char* name, std::int64_t n) {
  const std::int64_t w = n / M.q;
  std::vector<float> v(static_cast<std::size_t>(w));
  if (M.i == 0) v = init_block(cfg, name, 0, 1, M.j * w, (M.j + 1) * w).data;
  round_if(cfg.bf16, v.data(), w);
  M.col.broadcast(v, 0);
  return v;
}

}  // namespace

MlpBlockResult summa_mlp_block(const ModelConfig& cfg, const MlpBlockData& d, Comm& mesh, int q) {
  validate_summa(cfg, q, mesh.size());
  SummaMesh M = summa_mesh(mesh, q);
  const int i = M.i, j = M.j;
  const bool bf = cfg.bf16;
  const std::int64_t T = cfg.tokens(), h = cfg.hidden, f = cfg.ffn, Tq = T / q, hq = h / q, fq = f / q;

  const Tensor x = summa_block(d.x, q, i, j), dy = summa_block(d.dy, q, i, j);
  Tensor w1 = init_block(cfg, "l0.mlp.w1", i * hq, (i + 1) * hq, j * fq, (j + 1) * fq);
  Tensor w2 = init_block(cfg, "l0.mlp.w2", i * fq, (i + 1) * fq, j * hq, (j + 1) * hq);
  round_if(bf, w1.p(), w1.size());
  round_if(bf, w2.p(), w2.size());
  const std::vector<float> gamma = column_vector(cfg, M, "l0.ln2.g", h), beta = column_vector(cfg, M, "l0.ln2.b", h);
  const std::vector<float> b1 = column_vector(cfg, M, "l0.mlp.b1", f), b2 = column_vector(cfg, M, "l0.mlp.b2", h);

  // forward
  std::vector<float> stats(2 * Tq), mu(Tq), rs(Tq);
  k::layernorm2d_stats_cpu(x.p(), stats.data(), Tq, hq);
  M.row.allreduce(stats);
  Tensor xn(Tq, hq);
  k::layernorm2d_apply_cpu(x.p(), stats.data(), gamma.data(), beta.data(), xn.p(), mu.data(), rs.data(), Tq, hq, h,
                           cfg.ln_eps);
  round_if(bf, xn.p(), xn.size());
  Tensor pre(Tq, fq), act(Tq, fq);
  summa_ab(M, xn, w1, pre, bf);
  k::add_bias_cpu(pre.p(), b1.data(), Tq, fq);
  round_if(bf, pre.p(), pre.size());
  k::gelu_forward_cpu(pre.p(), act.p(), act.data.size());
  round_if(bf, act.p(), act.size());
  MlpBlockResult r{Tensor(Tq, hq), Tensor(Tq, hq), {}};
  summa_ab(M, act, w2, r.y, bf);
  k::add_bias_cpu(r.y.p(), b2.data(), Tq, hq);
  round_if(bf, r.y.p(), r.y.size());
  add_into(r.y.p(), x.p(), Tq * hq);
  round_if(bf, r.y.p(), r.y.size());

  // backward
  auto to_row0 = [&](std::vector<float> partial, const char* name) {  // column-reduce a vector gradient
    M.col.reduce(partial, 0);
    Tensor g;
    if (i == 0) g = Tensor(1, std::int64_t(partial.size())), g.data = std::move(partial);
    r.grads.emplace(name, std::move(g));
  };
  std::vector<float> db2(hq, 0.f), db1(fq, 0.f), dgamma(hq, 0.f), dbeta(hq, 0.f);
  k::bias_backward_cpu(dy.p(), db2.data(), Tq, hq);
  to_row0(db2, "l0.mlp.b2");
  Tensor dact = summa_abt(M, dy, w2, bf);                   // dy W2^T
  r.grads.emplace("l0.mlp.w2", summa_atb(M, act, dy, bf));  // act^T dy
  k::gelu_backward_cpu(dact.p(), pre.p(), dact.p(), dact.data.size());
  round_if(bf, dact.p(), dact.size());
  k::bias_backward_cpu(dact.p(), db1.data(), Tq, fq);
  to_row0(db1, "l0.mlp.b1");
  const Tensor dxn = summa_abt(M, dact, w1, bf);
  r.grads.emplace("l0.mlp.w1", summa_atb(M, xn, dact, bf));
  std::vector<float> dstats(2 * Tq);
  k::layernorm2d_backward_stats_cpu(dxn.p(), x.p(), gamma.data(), mu.data(), rs.data(), dstats.data(), Tq, hq);
  M.row.allreduce(dstats);
  k::layernorm2d_backward_apply_cpu(dxn.p(), x.p(), gamma.data(), mu.data(), rs.data(), dstats.data(), r.dx.p(),
                                    dgamma.data(), dbeta.data(), Tq, hq, h);
  round_if(bf, r.dx.p(), r.dx.size());
  add_into(r.dx.p(), dy.p(), Tq * hq);
  round_if(bf, r.dx.p(), r.dx.size());
  to_row0(dgamma, "l0.ln2.g");
  to_row0(dbeta, "l0.ln2.b");
  return r;
}

}  // namespace meshsim::numerics
