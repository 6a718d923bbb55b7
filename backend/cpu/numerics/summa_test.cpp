// 2D SUMMA (Optimus) MLP block with the 2D LayerNorm against the single-rank block.
#include "backend/cpu/numerics/summa.h"

#include <gtest/gtest.h>

#include "backend/cpu/numerics/test_util.h"
#include "core/error.h"

namespace meshsim::numerics {
namespace {

ModelConfig small() {
  ModelConfig c;
  c.layers = 1, c.hidden = 16, c.heads = 4, c.seq = 8, c.batch = 3, c.vocab = 32, c.ffn = 48;
  c.seed = 77;
  return c;
}

void check_summa(const ModelConfig& cfg, int q) {
  const MlpBlockData data = mlp_block_data(cfg, 23);
  const MlpBlockResult ref = reference_mlp_block(cfg, data);
  const std::vector<MlpBlockResult> res =
      testing::run_group(q * q, [&](int, Comm& mesh) { return summa_mlp_block(cfg, data, mesh, q); });
  if (::testing::Test::HasFailure()) return;
  auto blocks = [&](auto get) {
    std::vector<Tensor> b;
    for (auto& x : res) b.push_back(get(x));
    return summa_assemble(b, q);
  };
  testing::expect_close(blocks([](const MlpBlockResult& x) { return x.y; }), ref.y.data, "y");
  testing::expect_close(blocks([](const MlpBlockResult& x) { return x.dx; }), ref.dx.data, "dx");
  for (const char* w : {"l0.mlp.w1", "l0.mlp.w2"})
    testing::expect_close(blocks([&](const MlpBlockResult& x) { return x.grads.at(w); }), ref.grads.at(w).data, w);
  for (const char* v : {"l0.mlp.b1", "l0.mlp.b2", "l0.ln2.g", "l0.ln2.b"}) {
    std::vector<float> full;
    for (int j = 0; j < q; ++j) {
      const auto& g = res[j].grads.at(v).data;  // row 0
      full.insert(full.end(), g.begin(), g.end());
      EXPECT_TRUE(res[q + j].grads.at(v).data.empty()) << v << ": only mesh row 0 holds it";
    }
    testing::expect_close(full, ref.grads.at(v).data, v);
  }
}

TEST(Summa2D, TwoByTwoMeshMlpBlockMatchesSingleRank) { check_summa(small(), 2); }
TEST(Summa2D, ThreeByThreeMeshMlpBlockMatchesSingleRank) {
  ModelConfig cfg = small();
  cfg.hidden = 18, cfg.heads = 3, cfg.ffn = 36;  // q = 3 divides T = 24, h and f
  check_summa(cfg, 3);
}

// The comparison can fail: assembling the blocks transposed on the mesh (block (i, j) read
// from rank j*q + i) is far outside the tolerance.
TEST(Summa2D, TransposedBlockLayoutWouldFail) {
  const ModelConfig cfg = small();
  const MlpBlockResult ref = reference_mlp_block(cfg, mlp_block_data(cfg, 23));
  const std::vector<MlpBlockResult> res =
      testing::run_group(4, [&](int, Comm& mesh) { return summa_mlp_block(cfg, mlp_block_data(cfg, 23), mesh, 2); });
  std::vector<Tensor> b{res[0].y, res[2].y, res[1].y, res[3].y};
  EXPECT_GT(testing::worst_ratio(summa_assemble(b, 2), ref.y.data), 100.0);
}

TEST(Summa2D, RejectsMeshesThatDoNotFit) {
  const ModelConfig cfg = small();
  EXPECT_THROW(validate_summa(cfg, 2, 3), Error);   // 3 ranks are no 2 x 2 mesh
  EXPECT_THROW(validate_summa(cfg, 5, 25), Error);  // 5 does not divide hidden 16
  EXPECT_NO_THROW(validate_summa(cfg, 2, 4));
}

}  // namespace
}  // namespace meshsim::numerics
