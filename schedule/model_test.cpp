// Model presets, parameter counts and FLOPs against closed forms written out here.
//
// GPT-3 175B (Megatron's count, biases included, tied embedding, no position embedding):
//   N = L(12h^2 + 13h) + Vh + 2h = 174.6e9
// Llama 2 70B (no biases, untied head): N = L(h(h + 2h_kv) + h^2 + 3hf + 4h) + 2Vh + 2h = 68.98e9
#include "schedule/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>

#include "core/error.h"
#include "core/test_util.h"

namespace meshsim {
namespace {

using testing_util::error_of;

TEST(ModelPresets, AllTenExistValidateAndAreUnique) {
  const std::vector<std::string> names = {"gpt3-175b",  "gpt-22b",     "gpt-530b",     "gpt-1t",      "llama2-70b",
                                          "llama3-70b", "llama3-405b", "mixtral-8x7b", "deepseek-v3", "bert-large"};
  EXPECT_EQ(model_presets().size(), names.size());
  std::set<std::string> seen;
  for (const ModelSpec& m : model_presets()) {
    EXPECT_NO_THROW(validate_model(m, "model")) << m.name;
    EXPECT_TRUE(seen.insert(m.name).second) << m.name;
  }
  for (const std::string& n : names) EXPECT_EQ(model_preset(n).name, n);
}

TEST(ModelPresets, PublishedShapes) {
  const ModelSpec g = model_preset("gpt3-175b");
  EXPECT_EQ(g.layers, 96);
  EXPECT_EQ(g.hidden, 12288);
  EXPECT_EQ(g.heads, 96);
  EXPECT_EQ(g.seq, 2048);
  EXPECT_EQ(g.vocab, 51200);
  EXPECT_EQ(g.ffn_hidden, 4 * 12288);
  const ModelSpec t = model_preset("gpt-1t");
  EXPECT_EQ(t.layers, 128);
  EXPECT_EQ(t.hidden, 25600);
  EXPECT_EQ(t.heads, 160);
  const ModelSpec l = model_preset("llama3-405b");
  EXPECT_EQ(l.layers, 126);
  EXPECT_EQ(l.kv_hidden(), 8 * 128);
  EXPECT_EQ(l.ffn, FfnKind::SwiGLU);
  EXPECT_EQ(l.attention, AttentionKind::Flash);
  const ModelSpec d = model_preset("deepseek-v3");
  EXPECT_EQ(d.experts, 256);
  EXPECT_EQ(d.top_k, 8);
  EXPECT_EQ(d.kv_heads, 128);
  EXPECT_EQ(model_preset("bert-large").seq, 512);
}

TEST(ModelPresets, UnknownNameListsThePresets) {
  const std::string msg = error_of([] { model_preset("gpt5"); });
  EXPECT_NE(msg.find("gpt5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gpt3-175b"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bert-large"), std::string::npos) << msg;
}

TEST(ModelParams, Gpt3_175bMatchesMegatronCount) {
  const ModelSpec m = model_preset("gpt3-175b");
  const double L = 96, h = 12288, V = 51200;
  const double expected = L * (12 * h * h + 13 * h) + V * h + 2 * h;
  EXPECT_DOUBLE_EQ(m.total_params(), expected);
  EXPECT_NEAR(m.total_params(), 175e9, 0.01 * 175e9);
}

TEST(ModelParams, Llama2_70bWithGqaAndSwiGLU) {
  const ModelSpec m = model_preset("llama2-70b");
  const double L = 80, h = 8192, hkv = 1024, f = 28672, V = 32000;
  // Two RMSNorms of h weights each (no bias), and the final one.
  const double layer = h * (h + 2 * hkv) + h * h + 3 * h * f + 2 * h;
  EXPECT_DOUBLE_EQ(m.params_per_layer(), layer);
  EXPECT_DOUBLE_EQ(m.total_params(), L * layer + 2 * V * h + h);
  EXPECT_NEAR(m.total_params(), 69e9, 0.01 * 69e9);
}

TEST(ModelParams, OtherPresetsNearTheirPublishedSizes) {
  EXPECT_NEAR(model_preset("llama3-405b").total_params(), 405e9, 0.01 * 405e9);
  EXPECT_NEAR(model_preset("llama3-70b").total_params(), 70.6e9, 0.01 * 70.6e9);
  EXPECT_NEAR(model_preset("mixtral-8x7b").total_params(), 46.7e9, 0.01 * 46.7e9);
  EXPECT_NEAR(model_preset("gpt-530b").total_params(), 530e9, 0.01 * 530e9);
  EXPECT_NEAR(model_preset("gpt-1t").total_params(), 1.008e12, 0.01 * 1.008e12);
  // Simplified DeepSeek-V3 (all 61 layers MoE, one shared expert): 703.8e9, not 671e9.
  EXPECT_NEAR(model_preset("deepseek-v3").total_params(), 703.8e9, 0.001 * 703.8e9);
  EXPECT_NEAR(model_preset("bert-large").total_params(), 335e6, 0.03 * 335e6);
}

// Multi-head latent attention, by hand from DeepSeek-V3's config.json (h 7168, 128 heads, q/kv
// latents 1536/512, query/key heads 128 + 64, value heads 128):
//   queries 7168*1536 + 1536 + 1536*128*192 = 48,760,320
//   keys/values 7168*(512 + 64) + 512 + 512*128*(128 + 128) = 20,906,496
//   output 128*128*7168 = 117,440,512                      -> 187,107,328
// and the paper's 671e9 parameters (arXiv 2412.19437, Table 1 / section 4.2) once its first 3
// layers are dense MLPs of 18432 instead of MoE layers (58 MoE layers, no MTP module).
TEST(ModelParams, DeepSeekV3WithItsDenseLayersHasThePapersParameters) {
  const ModelSpec d = model_preset("deepseek-v3");
  EXPECT_DOUBLE_EQ(d.attention_params(), 187107328.0);
  ModelSpec moe = d;
  moe.layers = 58;
  ModelSpec dense = d;
  dense.experts = 0;
  dense.shared_experts = 0;
  dense.ffn_hidden = 18432;
  const double total = moe.total_params() + 3 * dense.params_per_layer();
  EXPECT_NEAR(total, 671e9, 0.002 * 671e9);
  // Scores and scores x V: 2 b s^2 H d_qk + 2 b s^2 H d_v; projections 2 b s per weight.
  const double b = 1, s = 4096;
  const double attn = 2 * b * s * (187107328.0 - 1536 - 512) + 2 * b * s * s * 128 * (192 + 128);
  const double mlp = (8 + 1) * 6 * b * s * 7168 * 2048 + 2 * b * s * 7168 * 256;
  EXPECT_DOUBLE_EQ(layer_forward_flops(d, b, s), attn + mlp);
}

TEST(ModelParams, MoeExpertsAndRouter) {
  const ModelSpec m = model_preset("mixtral-8x7b");
  const double h = 4096, hkv = 1024, f = 14336, E = 8;
  EXPECT_DOUBLE_EQ(m.expert_params_per_layer(), E * 3 * h * f);
  EXPECT_DOUBLE_EQ(m.params_per_layer(), h * (h + 2 * hkv) + h * h + E * 3 * h * f + h * E + 2 * h);
  EXPECT_DOUBLE_EQ(model_preset("gpt3-175b").expert_params_per_layer(), 0.0);
}

// Shared experts, by hand on Mixtral's shapes with 2 shared: 2 more SwiGLU MLPs of 3hf
// parameters each per layer, and 2 x 6bshf more forward FLOPs; a dense model cannot have them.
TEST(ModelParams, SharedExpertsAreDenseMlpsEveryTokenRuns) {
  ModelSpec m = model_preset("mixtral-8x7b");
  const double h = 4096, f = 14336, b = 2, s = 4096;
  const double params = m.params_per_layer(), flops = layer_forward_flops(m, b, s);
  m.shared_experts = 2;
  EXPECT_DOUBLE_EQ(m.params_per_layer() - params, 2 * 3 * h * f);
  EXPECT_DOUBLE_EQ(m.expert_params_per_layer(), 8 * 3 * h * f);  // the routed ones only
  EXPECT_DOUBLE_EQ(layer_forward_flops(m, b, s) - flops, 2 * 6 * b * s * h * f);
  ModelSpec dense = model_preset("llama3-70b");
  dense.shared_experts = 1;
  EXPECT_THROW(validate_model(dense, "model"), Error);
}

TEST(ModelFlops, GptIterationClosedForms) {
  for (const char* name : {"gpt3-175b", "gpt-22b", "gpt-530b", "gpt-1t"}) {
    const ModelSpec m = model_preset(name);
    const double B = 1536, s = m.seq, L = m.layers, h = m.hidden, V = m.vocab;
    const double model = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * h * L));
    const double hardware = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * h * L));
    EXPECT_NEAR(model_flops_per_iteration(m, B, false) / model, 1.0, 1e-12) << name;
    EXPECT_NEAR(model_flops_per_iteration(m, B, true) / hardware, 1.0, 1e-12) << name;
  }
}

TEST(ModelFlops, LayerForwardGptIs24bsh2Plus4bs2h) {
  const ModelSpec m = model_preset("gpt3-175b");
  const double b = 4, s = 2048, h = 12288;
  EXPECT_DOUBLE_EQ(layer_forward_flops(m, b, s), 24 * b * s * h * h + 4 * b * s * s * h);
  EXPECT_DOUBLE_EQ(logits_forward_flops(m, b, s), 2 * b * s * h * 51200);
}

TEST(ModelFlops, LayerForwardGqaSwiGLUAndMoe) {
  const double b = 2, s = 4096;
  {
    const ModelSpec m = model_preset("llama2-70b");
    const double h = 8192, hkv = 1024, f = 28672;
    const double expected = 2 * b * s * h * (h + 2 * hkv) + 4 * b * s * s * h + 2 * b * s * h * h + 6 * b * s * h * f;
    EXPECT_DOUBLE_EQ(layer_forward_flops(m, b, s), expected);
  }
  {
    const ModelSpec m = model_preset("mixtral-8x7b");
    const double h = 4096, hkv = 1024, f = 14336, k = 2, E = 8;
    const double expected = 2 * b * s * h * (h + 2 * hkv) + 4 * b * s * s * h + 2 * b * s * h * h +
                            k * 6 * b * s * h * f + 2 * b * s * h * E;
    EXPECT_DOUBLE_EQ(layer_forward_flops(m, b, s), expected);
  }
}

TEST(ModelSpec, DtypeBytesAndNames) {
  ModelSpec m;
  EXPECT_EQ(m.dtype_bytes(), 2);
  m.dtype = DType::Fp32;
  EXPECT_EQ(m.dtype_bytes(), 4);
  m.dtype = DType::Fp16;
  EXPECT_EQ(m.dtype_bytes(), 2);
  // Text becomes a DType where it enters, once (sim/scenario.cpp names the field).
  EXPECT_EQ(parse_dtype("bf16"), DType::Bf16);
  EXPECT_EQ(parse_dtype("fp32"), DType::Fp32);
  EXPECT_EQ(parse_dtype("int3"), std::nullopt);
  EXPECT_STREQ(to_string(DType::Fp16), "fp16");
  EXPECT_STREQ(to_string(FfnKind::SwiGLU), "swiglu");
  EXPECT_STREQ(to_string(AttentionKind::Flash), "flash");
}

TEST(ModelSpec, ValidateNamesTheField) {
  struct Case {
    const char* field;
    std::function<void(ModelSpec&)> change;
  };
  const std::vector<Case> cases = {
      {"m.layers", [](ModelSpec& m) { m.layers = 0; }},
      {"m.hidden", [](ModelSpec& m) { m.hidden = -1; }},
      {"m.heads", [](ModelSpec& m) { m.heads = 5; }},  // 1024 % 5 != 0
      {"m.kv_heads", [](ModelSpec& m) { m.kv_heads = 3; }},
      {"m.seq", [](ModelSpec& m) { m.seq = 0; }},
      {"m.experts", [](ModelSpec& m) { m.experts = -2; }},
      {"m.top_k",
       [](ModelSpec& m) {
         m.experts = 4;
         m.top_k = 5;
       }},
  };
  for (const Case& c : cases) {
    ModelSpec m;
    c.change(m);
    const std::string msg = error_of([&] { validate_model(m, "m"); });
    EXPECT_EQ(msg.rfind(c.field, 0), 0u) << c.field << ": " << msg;
  }
}

}  // namespace
}  // namespace meshsim
