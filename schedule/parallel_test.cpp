// Recompute parsing and every bad-layout case of validate_parallel: each must throw an
// Error whose message starts with the field it is about.
#include "schedule/parallel.h"

#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include "core/error.h"
#include "core/test_util.h"

namespace meshsim {
namespace {

using testing_util::error_of;

TEST(Recompute, ParsesAndPrintsEveryMode) {
  for (const char* text : {"none", "full", "selective", "every:4", "sqrt", "ops"})
    EXPECT_EQ(Recompute::parse(text, "r").to_string(), text);
  const Recompute r = Recompute::parse("every:12", "r");
  EXPECT_EQ(r.mode, RecomputeMode::EveryK);
  EXPECT_EQ(r.every_k, 12);
  EXPECT_EQ(Recompute::parse("sqrt", "r").mode, RecomputeMode::Sqrt);
  EXPECT_STREQ(to_string(RecomputeMode::Selective), "selective");
}

TEST(Recompute, BadTextNamesTheField) {
  for (const char* text : {"", "every", "every:", "every:0", "every:-2", "every:x", "most", "Full"}) {
    const std::string msg = error_of([&] { Recompute::parse(text, "parallel.recompute"); });
    EXPECT_EQ(msg.rfind("parallel.recompute:", 0), 0u) << text << ": " << msg;
  }
}

// recompute: ops is modelled for dense blocks with the fused attention kernel: Llama 3 70B
// (flash, dense) passes; DeepSeek-V3 (experts, latent attention) and plain attention are
// refused, each naming parallel.recompute's field.
TEST(Recompute, OpsNeedsADenseBlockWithFusedAttention) {
  ParallelSpec p;
  p.dp = 8;
  p.recompute = Recompute::parse("ops", "r");
  ModelSpec llama = model_preset("llama3-70b");
  llama.attention = AttentionKind::Flash;
  EXPECT_NO_THROW(validate_parallel(p, llama, 8));
  ModelSpec plain = llama;
  plain.attention = AttentionKind::Plain;
  ModelSpec deepseek = model_preset("deepseek-v3");
  deepseek.attention = AttentionKind::Flash;
  for (const ModelSpec& m : {plain, deepseek}) {
    const std::string msg = error_of([&] { validate_parallel(p, m, 8); });
    EXPECT_NE(msg.find("recompute"), std::string::npos) << msg;
    EXPECT_NE(msg.find("ops"), std::string::npos) << msg;
  }
}

// GPT-3 175B on 1024 GPUs: tp 8 with sp, pp 8 interleaved x 2, dp 16, 64 micro-batches.
ParallelSpec good_gpt() {
  ParallelSpec p;
  p.tp = 8;
  p.sp = true;
  p.pp = 8;
  p.vchunks = 2;
  p.dp = 16;
  p.microbatches = 64;
  return p;
}

TEST(ValidateParallel, GoodLayoutsPass) {
  EXPECT_NO_THROW(validate_parallel(good_gpt(), model_preset("gpt3-175b"), 1024));
  ParallelSpec l;  // Llama 3 70B, tp 8 sp, cp 4 balanced, pp 4, dp 2 = 256 GPUs
  l.tp = 8;
  l.sp = true;
  l.cp = 4;
  l.pp = 4;
  l.dp = 2;
  l.microbatches = 8;
  l.zero = 1;
  EXPECT_NO_THROW(validate_parallel(l, model_preset("llama3-70b"), 256));
  ParallelSpec d;  // DeepSeek-V3-like: dp 64 with ep 32, pp 1
  d.dp = 64;
  d.ep = 32;
  EXPECT_NO_THROW(validate_parallel(d, model_preset("deepseek-v3"), 64));
  d.dp = 32;  // NeMo's DeepSeek-V3 recipe: EP 64 over TP 2 x DP 32, experts whole (ETP 1)
  d.tp = 2;
  d.sp = true;
  d.ep = 64;
  d.etp = 1;
  EXPECT_NO_THROW(validate_parallel(d, model_preset("deepseek-v3"), 64));
  EXPECT_EQ(d.ep_axis().str(), "ep+tp");
  ParallelSpec q2 = d;  // 2D tensor parallelism keeps tp = 1: the ep ranks come from dp
  q2.tp = 1;
  q2.sp = false;
  q2.etp = 0;
  q2.mesh2d = 2;
  q2.ep = 8;
  EXPECT_FALSE(q2.ep_spans_tp());
  EXPECT_EQ(q2.ep_axis().str(), "ep");
  ParallelSpec q;  // 2D on a 4 x 4 mesh
  q.mesh2d = 4;
  q.micro_batch_size = 4;
  q.dp = 2;
  EXPECT_NO_THROW(validate_parallel(q, model_preset("gpt3-175b"), 32));
  ParallelSpec r;  // GQA: tp 16 > kv_heads 8 with K/V replication
  r.tp = 16;
  r.kv_replicate = true;
  EXPECT_NO_THROW(validate_parallel(r, model_preset("llama2-70b"), 16));
}

struct BadCase {
  const char* what;
  const char* model;
  int gpus;
  const char* field;  // the message must start with this
  std::function<void(ParallelSpec&)> change;
};

TEST(ValidateParallel, EveryBadCaseNamesItsField) {
  const std::vector<BadCase> cases = {
      {"dp < 1", "gpt3-175b", 1024, "parallel.dp:", [](ParallelSpec& p) { p.dp = 0; }},
      {"tp < 1", "gpt3-175b", 1024, "parallel.tp:", [](ParallelSpec& p) { p.tp = 0; }},
      {"cp < 1", "gpt3-175b", 1024, "parallel.cp:", [](ParallelSpec& p) { p.cp = -1; }},
      {"pp < 1", "gpt3-175b", 1024, "parallel.pp:", [](ParallelSpec& p) { p.pp = 0; }},
      {"vchunks < 1", "gpt3-175b", 1024, "parallel.vchunks:", [](ParallelSpec& p) { p.vchunks = 0; }},
      {"microbatches < 1", "gpt3-175b", 1024, "parallel.microbatches:", [](ParallelSpec& p) { p.microbatches = 0; }},
      {"b < 1", "gpt3-175b", 1024, "parallel.micro_batch_size:", [](ParallelSpec& p) { p.micro_batch_size = 0; }},
      {"ep < 1", "gpt3-175b", 1024, "parallel.ep:", [](ParallelSpec& p) { p.ep = 0; }},
      {"mesh2d < 0", "gpt3-175b", 1024, "parallel.mesh2d:", [](ParallelSpec& p) { p.mesh2d = -4; }},
      {"zero 4", "gpt3-175b", 1024, "parallel.zero:", [](ParallelSpec& p) { p.zero = 4; }},
      {"zero -1", "gpt3-175b", 1024, "parallel.zero:", [](ParallelSpec& p) { p.zero = -1; }},
      {"imbalance < 1", "gpt3-175b", 1024, "parallel.ep_imbalance:", [](ParallelSpec& p) { p.ep_imbalance = 0.5; }},
      // the busiest of ep ranks gets at most all the tokens (was an internal error at 1e308)
      {"imbalance > ep", "mixtral-8x7b", 1024, "parallel.ep_imbalance:",
       [](ParallelSpec& p) {
         p.dp = 8;
         p.ep = 8;
         p.ep_imbalance = 1e308;
       }},
      {"imbalance inf", "mixtral-8x7b", 1024, "parallel.ep_imbalance:",
       [](ParallelSpec& p) {
         p.dp = 8;
         p.ep = 8;
         p.ep_imbalance = std::numeric_limits<double>::infinity();
       }},
      {"bucket 0", "gpt3-175b", 1024, "parallel.dp_bucket_mib:", [](ParallelSpec& p) { p.dp_bucket_mib = 0; }},
      {"every:0", "gpt3-175b", 1024, "parallel.recompute:",
       [](ParallelSpec& p) {
         p.recompute.mode = RecomputeMode::EveryK;
         p.recompute.every_k = 0;
       }},
      {"tp not dividing heads", "gpt3-175b", 640, "parallel.tp:",
       [](ParallelSpec& p) {
         p.tp = 5;
         p.sp = false;
       }},
      {"tp above kv_heads", "llama2-70b", 16, "parallel.tp:",
       [](ParallelSpec& p) {
         p = ParallelSpec{};
         p.tp = 16;
       }},
      {"tp not dividing kv_heads", "llama2-70b", 6, "parallel.tp:",
       [](ParallelSpec& p) {
         p = ParallelSpec{};
         p.tp = 6;
       }},
      {"gpu count", "gpt3-175b", 1000, "parallel.dp:", [](ParallelSpec&) {}},
      {"seq vs sp", "gpt3-175b", 1024, "parallel.sp:", [](ParallelSpec&) {}},
      {"seq vs cp", "llama2-70b", 24, "parallel.cp:",
       [](ParallelSpec& p) {
         p = ParallelSpec{};
         p.cp = 3;
         p.tp = 8;
         p.cp_balance = false;
       }},
      {"seq vs balanced cp", "gpt3-175b", 2048, "parallel.cp:", [](ParallelSpec& p) { p.cp = 2; }},
      {"microbatches < pp", "gpt3-175b", 1024, "parallel.microbatches:", [](ParallelSpec& p) { p.microbatches = 4; }},
      {"layers vs pp", "gpt3-175b", 640, "parallel.pp:",
       [](ParallelSpec& p) {
         p.pp = 5;
         p.vchunks = 1;
       }},
      {"layers vs vchunks", "gpt3-175b", 1024, "parallel.pp:", [](ParallelSpec& p) { p.vchunks = 5; }},
      {"interleave needs m % pp", "gpt3-175b", 1024,
       "parallel.microbatches:", [](ParallelSpec& p) { p.microbatches = 60; }},
      {"interleave needs pp > 1", "gpt3-175b", 128, "parallel.vchunks:",
       [](ParallelSpec& p) {
         p.pp = 1;
         p.vchunks = 2;
       }},
      {"ep without experts", "gpt3-175b", 1024, "parallel.ep:", [](ParallelSpec& p) { p.ep = 2; }},
      {"ep vs experts", "mixtral-8x7b", 12, "parallel.ep:",
       [](ParallelSpec& p) {
         p = ParallelSpec{};
         p.dp = 12;
         p.ep = 3;
       }},
      {"ep vs dp", "mixtral-8x7b", 6, "parallel.ep:",
       [](ParallelSpec& p) {
         p = ParallelSpec{};
         p.dp = 6;
         p.ep = 4;
       }},
      {"etp neither tp nor 1", "mixtral-8x7b", 16, "parallel.etp:",
       [](ParallelSpec& p) {
         p = ParallelSpec{};
         p.dp = 4;
         p.tp = 4;
         p.ep = 2;
         p.etp = 2;
       }},
      {"etp without ep", "mixtral-8x7b", 8, "parallel.etp:",
       [](ParallelSpec& p) {
         p = ParallelSpec{};
         p.dp = 4;
         p.tp = 2;
         p.etp = 1;
       }},
      {"etp 1: ep not a multiple of tp", "mixtral-8x7b", 16, "parallel.ep:",
       [](ParallelSpec& p) {
         p = ParallelSpec{};
         p.dp = 4;
         p.tp = 4;
         p.ep = 2;
         p.etp = 1;
       }},
      {"etp 1: ep beyond the stage", "mixtral-8x7b", 4, "parallel.ep:",
       [](ParallelSpec& p) {
         p = ParallelSpec{};
         p.dp = 2;
         p.tp = 2;
         p.ep = 8;
         p.etp = 1;
       }},
      {"mesh2d with tp", "gpt3-175b", 16, "parallel.mesh2d:",
       [](ParallelSpec& p) {
         p = ParallelSpec{};
         p.mesh2d = 4;
         p.tp = 2;
         p.micro_batch_size = 4;
       }},
      {"mesh2d with sp", "gpt3-175b", 16, "parallel.sp:",
       [](ParallelSpec& p) {
         p = ParallelSpec{};
         p.mesh2d = 4;
         p.sp = true;
         p.micro_batch_size = 4;
       }},
      {"mesh2d with cp", "gpt3-175b", 32, "parallel.cp:",
       [](ParallelSpec& p) {
         p = ParallelSpec{};
         p.mesh2d = 4;
         p.cp = 2;
         p.micro_batch_size = 4;
       }},
      {"mesh2d vs heads", "gpt3-175b", 25, "parallel.mesh2d:",
       [](ParallelSpec& p) {
         p = ParallelSpec{};
         p.mesh2d = 5;
         p.micro_batch_size = 5;
       }},
      {"mesh2d vs micro-batch", "gpt3-175b", 16, "parallel.mesh2d:",
       [](ParallelSpec& p) {
         p = ParallelSpec{};
         p.mesh2d = 4;
         p.micro_batch_size = 2;
       }},
      {"sp without tp", "gpt3-175b", 1, "parallel.sp:",
       [](ParallelSpec& p) {
         p = ParallelSpec{};
         p.sp = true;
       }},
      {"distributed checkpoints with sp", "gpt3-175b", 1024, "parallel.distribute_checkpoints:",
       [](ParallelSpec& p) {
         p.recompute.mode = RecomputeMode::Full;
         p.distribute_checkpoints = true;
       }},
      {"distributed checkpoints without tp", "gpt3-175b", 1, "parallel.distribute_checkpoints:",
       [](ParallelSpec& p) {
         p = ParallelSpec{};
         p.recompute.mode = RecomputeMode::Full;
         p.distribute_checkpoints = true;
       }},
      {"distributed checkpoints without checkpoints", "gpt3-175b", 1024, "parallel.distribute_checkpoints:",
       [](ParallelSpec& p) {
         p.sp = false;
         p.recompute.mode = RecomputeMode::Selective;
         p.distribute_checkpoints = true;
       }},
      // good_gpt has pp 8 x vchunks 2 = 16 virtual stages for 96 layers.
      {"stage_layers of the wrong length", "gpt3-175b", 1024,
       "parallel.stage_layers:", [](ParallelSpec& p) { p.stage_layers.assign(8, 12); }},
      {"stage_layers not adding up", "gpt3-175b", 1024,
       "parallel.stage_layers:", [](ParallelSpec& p) { p.stage_layers.assign(16, 5); }},
      {"stage_layers negative", "gpt3-175b", 1024, "parallel.stage_layers:",
       [](ParallelSpec& p) {
         p.stage_layers.assign(16, 6);
         p.stage_layers[0] = -1;
         p.stage_layers[1] = 13;
       }},
      {"uneven without stage_layers", "gpt3-175b", 896, "parallel.pp:", [](ParallelSpec& p) { p.pp = 7; }},
  };
  for (const BadCase& c : cases) {
    ModelSpec m = model_preset(c.model);
    ParallelSpec p = good_gpt();
    c.change(p);
    if (std::string(c.what) == "seq vs sp") m.seq = 2044;           // 2044 % 8 != 0
    if (std::string(c.what) == "seq vs balanced cp") m.seq = 2040;  // 2040 % (2*2*8) != 0 but 2040 % 8 == 0
    if (std::string(c.what) == "seq vs cp") m.seq = 4096;           // 4096 % 3 != 0
    if (std::string(c.what) == "tp not dividing kv_heads") {        // tp 6 divides heads 24, not kv_heads 8
      m.heads = 24;
      m.kv_heads = 8;
      m.hidden = 1536;
    }
    const std::string msg = error_of([&] { validate_parallel(p, m, c.gpus); });
    EXPECT_EQ(msg.rfind(c.field, 0), 0u) << c.what << ": '" << msg << "'";
  }
}

TEST(ValidateParallel, MessagesGiveValuesAndFix) {
  ParallelSpec p = good_gpt();
  p.tp = 5;
  p.sp = false;
  const std::string tp = error_of([&] { validate_parallel(p, model_preset("gpt3-175b"), 640); });
  EXPECT_NE(tp.find("5 does not divide heads = 96"), std::string::npos) << tp;
  const std::string gpus = error_of([&] { validate_parallel(good_gpt(), model_preset("gpt3-175b"), 512); });
  EXPECT_NE(gpus.find("1024"), std::string::npos) << gpus;
  EXPECT_NE(gpus.find("512"), std::string::npos) << gpus;
  ParallelSpec g;
  g.tp = 16;
  const std::string kv = error_of([&] { validate_parallel(g, model_preset("llama2-70b"), 16); });
  EXPECT_NE(kv.find("kv_replicate"), std::string::npos) << kv;
  ParallelSpec d = good_gpt();
  d.recompute.mode = RecomputeMode::Full;
  d.distribute_checkpoints = true;
  const std::string dc = error_of([&] { validate_parallel(d, model_preset("gpt3-175b"), 1024); });
  EXPECT_NE(dc.find("sequence parallelism already shards the checkpoints"), std::string::npos) << dc;
  EXPECT_NE(dc.find("set distribute_checkpoints false"), std::string::npos) << dc;
  d.sp = false;
  EXPECT_NO_THROW(validate_parallel(d, model_preset("gpt3-175b"), 1024));
}

TEST(ParallelSpec, SizesAndGlobalBatch) {
  const ParallelSpec p = good_gpt();
  EXPECT_EQ(p.world_size(), 1024);
  EXPECT_EQ(p.global_batch(), 16 * 64);
  ParallelSpec q;
  q.mesh2d = 4;
  q.dp = 2;
  EXPECT_EQ(q.tensor_size(), 16);
  EXPECT_EQ(q.world_size(), 32);
}

}  // namespace
}  // namespace meshsim
