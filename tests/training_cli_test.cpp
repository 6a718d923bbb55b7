// End-to-end tests of `meshsim simulate`, `meshsim memory` and `meshsim sweep`: what a
// user types, what they see. Scenario files are written into a temp dir by each test.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.h"

namespace {

namespace fs = std::filesystem;
using namespace cli_testing;

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (auto pos = s.find(what); pos != std::string::npos; pos = s.find(what, pos + what.size())) ++n;
  return n;
}

// A small dense model on one 8-GPU switch: dp 2 x pp 2 x tp 2, milliseconds to simulate.
const char* kSmall = R"(name: small
model: {layers: 8, hidden: 1024, heads: 16, ffn_hidden: 4096, vocab: 50304, seq: 1024}
parallel: {dp: 2, tp: 2, pp: 2, microbatches: 4}
topology: switch:gpus_per_node=8
placement: natural
)";

// Llama-2 70B on 8 RTX 5000s (16 GiB each): about 150 GiB per rank, far from fitting.
const char* kTooBig = R"(name: too-big
model: llama2-70b
parallel: {dp: 1, tp: 4, pp: 2, microbatches: 4}
topology: frontera-rtx:nodes=2
gpu: rtx5000
)";

// For sweeps: a ~1.2B-parameter model with 12 heads on 8 RTX 5000s. Varying tp and dp gives
// layouts that fit (tp 2 and 4), one out of memory (tp 1, dp 8: ~17 GiB without ZeRO) and
// invalid ones (tp 8 does not divide 12 heads; dp x tp != 8 GPUs).
const char* kSweep = R"(name: sweep-small
model: {layers: 8, hidden: 3072, heads: 12, ffn_hidden: 12288, vocab: 50304, seq: 1024}
parallel: {dp: 1, tp: 1, pp: 1, microbatches: 2}
topology: switch:gpus_per_node=8
gpu: rtx5000
)";

const char* kSweepVary = " --vary parallel.tp=1,2,4,8 --vary parallel.dp=1,2,4,8 --vary placement=natural";

std::string layout_line(const std::string& out) {
  for (const auto& line : split_lines(out))
    if (line.find("  layout ") == 0) return line;
  return "";
}

// Every "http://" or "https://" in `html` that is not the SVG xmlns namespace.
std::vector<std::string> external_refs(const std::string& html) {
  std::vector<std::string> refs;
  for (const std::string scheme : {"http://", "https://"})
    for (auto pos = html.find(scheme); pos != std::string::npos; pos = html.find(scheme, pos + 1))
      if (html.compare(pos, 26, "http://www.w3.org/2000/svg") != 0) refs.push_back(html.substr(pos, 60));
  return refs;
}

void expect_self_contained_html(const fs::path& file) {
  ASSERT_TRUE(fs::exists(file)) << file;
  const std::string html = slurp(file);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  const std::vector<std::string> refs = external_refs(html);
  EXPECT_TRUE(refs.empty()) << "external reference: " << (refs.empty() ? "" : refs.front());
}

// ---- meshsim simulate ----

TEST(Simulate, BuiltInDefaultScenario) {
  const Result r = meshsim("simulate");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  for (const char* s : {"iteration time", "tokens/s", "MFU / HFU", "breakdown of stage", "compute", "exposed tp comm",
                        "exposed dp comm", "pipeline bubble", "optimizer", "memory per rank"})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << " in:\n" << r.out;
  // The default is GPT-3 175B on dp 2 x pp 8 x tp 8: one memory line per pipeline stage.
  EXPECT_NE(r.out.find("dp 2 x pp 8 x cp 1 x tp 8 (sp) = 128 GPUs"), std::string::npos) << r.out;
  for (int st = 0; st < 8; ++st)
    EXPECT_NE(r.out.find("    stage " + std::to_string(st) + " "), std::string::npos) << "stage " << st;
  EXPECT_EQ(count(r.out, " -> peak "), 8) << r.out;
}

void expect_consistent_json(const nlohmann::json& j, std::size_t stages) {
  const double it = j["iteration_s"].get<double>();
  EXPECT_GT(it, 0);
  EXPECT_EQ(j["iteration_ps"].get<std::int64_t>() > 0, true);
  EXPECT_GT(j["mfu"].get<double>(), 0);
  EXPECT_LT(j["mfu"].get<double>(), 1);
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0);
  double sum = 0;
  ASSERT_TRUE(j["breakdown_s"].is_object());
  for (const auto& [label, t] : j["breakdown_s"].items()) {
    EXPECT_GE(t.get<double>(), 0) << label;
    sum += t.get<double>();
  }
  EXPECT_NEAR(sum, it, 1e-9 * it) << j["breakdown_s"].dump();
  ASSERT_EQ(j["memory"].size(), stages);
  for (std::size_t st = 0; st < stages; ++st) {
    const auto& m = j["memory"][st];
    EXPECT_EQ(m["stage"], st);
    EXPECT_FALSE(m["items"].empty());
    EXPECT_GT(m["peak_bytes"].get<double>(), 0);
  }
}

TEST(Simulate, JsonIsConsistentAndByteIdenticalAcrossRuns) {
  const Result a = meshsim("simulate --json");
  const Result b = meshsim("simulate --json");
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  const auto j = nlohmann::json::parse(a.out);
  EXPECT_EQ(j["fidelity"], "formula");
  EXPECT_EQ(j["gpus"], 128);
  expect_consistent_json(j, 8);
}

TEST(Simulate, FlowFidelityJsonIsDeterministic) {
  const fs::path f = write_file("small_flow.yaml", kSmall);
  const std::string args = "simulate " + f.string() + " --fidelity flow --json";
  const Result a = meshsim(args);
  const Result b = meshsim(args);
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  const auto j = nlohmann::json::parse(a.out);
  EXPECT_EQ(j["fidelity"], "flow");
  EXPECT_EQ(j["gpus"], 8);
  expect_consistent_json(j, 2);
  EXPECT_FALSE(j["busiest_links"].empty()) << "flow fidelity reports link load";
  // The flow timings run side by side on --jobs workers; one worker gives the same bytes.
  const Result one = meshsim(args + " --jobs 1");
  ASSERT_EQ(one.code, 0) << one.err;
  EXPECT_EQ(one.out, a.out);
  const Result bad = meshsim(args + " --jobs -2");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("--jobs"), std::string::npos) << bad.err;
}

TEST(Simulate, SetOverridesTheLayout) {
  const Result base = meshsim("simulate");
  const Result r = meshsim("simulate --set parallel.tp=4 --set parallel.dp=4");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(layout_line(base.out), layout_line(r.out));
  EXPECT_NE(layout_line(r.out).find("dp 4 x pp 8 x cp 1 x tp 4 (sp) = 128 GPUs"), std::string::npos) << r.out;
}

// dp: auto fills the topology: 128 GPUs (the default's 16 DGX nodes) over pp 8 x tp 4 = 4.
TEST(Simulate, DpAutoFillsTheTopologysGpus) {
  const Result r = meshsim("simulate --set parallel.tp=4 --set parallel.dp=auto");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(layout_line(r.out).find("dp 4 x pp 8 x cp 1 x tp 4 (sp) = 128 GPUs"), std::string::npos) << r.out;
  const fs::path f = write_file("dp_auto.yaml",
                                "model: gpt3-175b\nparallel: {dp: auto, tp: 8, pp: 3, microbatches: 8}\n"
                                "topology: dgx-h100:nodes=2\n");
  const Result bad = meshsim("simulate " + f.string());
  expect_user_error(bad, "parallel.dp: auto: the 16 GPUs of topology dgx-h100:nodes=2", "pp x cp x tp = 24");
  EXPECT_NE(bad.err.find("dp_auto.yaml:2:"), std::string::npos) << bad.err;  // the file and line of `dp: auto`
}

// parallel.global_batch: with dp: auto, layouts of one cluster keep one global batch (the
// micro-batches are global_batch / (dp x micro_batch_size)): 128 GPUs, batch 256 of 1 sequence:
// tp 8 x pp 4 gives dp 4 and 64 micro-batches, tp 4 x pp 4 dp 8 and 32. A batch that is no
// multiple of dp x micro_batch_size, or microbatches given too, is one error naming the field.
TEST(Simulate, GlobalBatchSetsTheMicroBatchesOfEachLayout) {
  const fs::path f = write_file("global_batch.yaml",
                                "model: gpt3-175b\nparallel: {dp: auto, tp: 8, pp: 4, sp: true, micro_batch_size: 1, "
                                "global_batch: 256}\ntopology: dgx-h100:nodes=16\n");
  for (const auto& [tp, dp, m] : {std::tuple{8, 4, 64}, std::tuple{4, 8, 32}}) {
    const Result r = meshsim("simulate " + f.string() + " --set parallel.tp=" + std::to_string(tp));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(layout_line(r.out).find("dp " + std::to_string(dp) + " x pp 4 x cp 1 x tp " + std::to_string(tp)),
              std::string::npos)
        << r.out;
    EXPECT_NE(layout_line(r.out).find(std::to_string(m) + " micro-batches of 1, global batch 256"), std::string::npos)
        << r.out;
  }
  expect_user_error(meshsim("simulate " + f.string() + " --set parallel.global_batch=102"), "parallel.global_batch",
                    "use a multiple of 4");
  expect_user_error(meshsim("simulate " + f.string() + " --set parallel.microbatches=8"), "parallel.global_batch",
                    "not both");
}

TEST(Simulate, SetOnAnUnknownFieldNamesItAndListsTheKnownOnes) {
  const Result r = meshsim("simulate --set parallel.tpp=4");
  expect_user_error(r, "--set: parallel: unknown key 'tpp'", "valid keys");
  for (const char* known : {"dp", "tp", "pp", "microbatches", "dp_bucket"})
    EXPECT_NE(r.err.find(known), std::string::npos) << known << " in: " << r.err;
}

// ---- bad input: one line naming the field and the fix, exit code 2 ----

TEST(TrainingBadInput, TpNotDividingHeads) {
  const fs::path f =
      write_file("heads.yaml",
                 "model: {layers: 4, hidden: 768, heads: 12, ffn_hidden: 3072, vocab: 50304, seq: 1024}\n"
                 "parallel: {tp: 8}\n"
                 "topology: switch:gpus_per_node=8\n");
  expect_user_error(meshsim("simulate " + f.string()), "parallel.tp", "heads = 12");
  expect_user_error(meshsim("memory " + f.string()), "parallel.tp", "heads = 12");
}

TEST(TrainingBadInput, TpAboveKvHeadsWithoutReplication) {
  const fs::path f = write_file("gqa.yaml", "model: llama2-70b\nparallel: {tp: 16}\ntopology: dgx-h100:nodes=2\n");
  expect_user_error(meshsim("simulate " + f.string()), "parallel.tp", "kv_replicate");
}

TEST(TrainingBadInput, LayoutThatDoesNotUseTheTopologysGpus) {
  const fs::path f = write_file("count.yaml",
                                "model: gpt3-175b\nparallel: {tp: 8, pp: 8, microbatches: 8}\n"
                                "topology: dgx-h100:nodes=2\n");
  const Result r = meshsim("simulate " + f.string());
  expect_user_error(r, "parallel.dp", "product is 16");
  EXPECT_NE(r.err.find("uses 64 GPUs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("topology dgx-h100:nodes=2 has 16"), std::string::npos) << r.err;
}

TEST(TrainingBadInput, SeqNotDivisibleBySequenceParallelism) {
  const fs::path f =
      write_file("sp.yaml",
                 "model: {layers: 4, hidden: 1024, heads: 16, ffn_hidden: 4096, vocab: 50304, seq: 1020}\n"
                 "parallel: {tp: 8, sp: true}\n"
                 "topology: switch:gpus_per_node=8\n");
  expect_user_error(meshsim("simulate " + f.string()), "parallel.sp", "seq = 1020");
}

TEST(TrainingBadInput, FewerMicroBatchesThanStages) {
  const fs::path f =
      write_file("mb.yaml",
                 "model: {layers: 8, hidden: 1024, heads: 16, ffn_hidden: 4096, vocab: 50304, seq: 1024}\n"
                 "parallel: {pp: 4, dp: 2, microbatches: 2}\n"
                 "topology: switch:gpus_per_node=8\n");
  expect_user_error(meshsim("simulate " + f.string()), "parallel.microbatches", "at least 4");
}

TEST(TrainingBadInput, UnknownFieldsNameTheFileLineAndTheValidKeys) {
  const fs::path top = write_file("top.yaml", "model: gpt3-175b\nmodle: gpt3-175b\n");
  expect_user_error(meshsim("simulate " + top.string()), "top.yaml:2: scenario: unknown key 'modle'",
                    "valid keys: name, model, parallel");
  const fs::path model = write_file("model.yaml", "model: {preset: gpt3-175b, layerz: 4}\n");
  expect_user_error(meshsim("simulate " + model.string()), "model.yaml:1: model: unknown key 'layerz'", "layers");
  const fs::path par = write_file("par.yaml", "model: gpt3-175b\nparallel:\n  tp: 8\n  dpp: 2\n");
  expect_user_error(meshsim("simulate " + par.string()), "par.yaml:4: parallel: unknown key 'dpp'", "valid keys: dp");
  const fs::path run = write_file("run.yaml", "model: gpt3-175b\nrun: {fidelty: flow}\n");
  expect_user_error(meshsim("simulate " + run.string()), "run.yaml:2: run: unknown key 'fidelty'", "fidelity");
  // A bad value: the file and line of the value; from --set, the override.
  const fs::path value = write_file("value.yaml", "model: gpt3-175b\nparallel:\n  tp: eight\n");
  expect_user_error(meshsim("simulate " + value.string()), "value.yaml:3: parallel.tp: 'eight' is not an integer", "");
  expect_user_error(meshsim("simulate " + value.string() + " --set parallel.tp=x8"),
                    "--set: parallel.tp: 'x8' is not an integer", "");
}

// model.bias and model.tied_embeddings are scenario fields. GPT-3 175B at TP 8, PP 8: a layer
// has 9h bias parameters (QKV 3h, output h, fc1 4h, fc2 h; schedule/model.cpp), a rank 9h/8
// of them, so stage 0's 12 layers hold 2 bytes x 12 x 9 x 12288 / 8 = 331776 bytes of biases.
TEST(TrainingScenario, BiasFieldDropsTheLayersBiases) {
  auto layer_weights = [](const std::string& sets) {
    const Result r = meshsim("simulate --json" + sets);
    EXPECT_EQ(r.code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    for (const auto& item : j["memory"][0]["items"])
      if (item["category"] == "weights" && item["name"] == "layers") return item["bytes"].get<double>();
    ADD_FAILURE() << "no layer weights in " << r.out.substr(0, 200);
    return 0.0;
  };
  EXPECT_DOUBLE_EQ(layer_weights("") - layer_weights(" --set model.bias=false"), 331776.0);
  expect_user_error(meshsim("simulate --set model.tied_embeddings=perhaps"), "--set: model.tied_embeddings",
                    "not true or false");
}

TEST(TrainingBadInput, DistributeCheckpointsIsABooleanAndExcludesSp) {
  expect_user_error(meshsim("simulate --set parallel.distribute_checkpoints=maybe"), "parallel.distribute_checkpoints",
                    "not true or false");
  // The built-in scenario runs sp: its checkpoints are already sharded over tp.
  expect_user_error(meshsim("simulate --set parallel.recompute=full --set parallel.distribute_checkpoints=true"),
                    "parallel.distribute_checkpoints", "set distribute_checkpoints false");
  const Result r = meshsim(
      "simulate --set parallel.recompute=full --set parallel.sp=false "
      "--set parallel.distribute_checkpoints=true");
  EXPECT_EQ(r.code, 0) << r.err;
}

TEST(TrainingBadInput, MalformedYaml) {
  const fs::path f = write_file("malformed.yaml", "model: {preset: gpt3-175b\nparallel: ]]\n");
  expect_user_error(meshsim("simulate " + f.string()), "malformed.yaml", "malformed YAML");
  expect_user_error(meshsim("memory " + f.string()), "malformed.yaml", "malformed YAML");
}

TEST(TrainingBadInput, MissingScenarioFile) {
  const fs::path f = temp_dir() / "no-such-scenario.yaml";
  expect_user_error(meshsim("simulate " + f.string()), "no-such-scenario.yaml", "cannot open");
  expect_user_error(meshsim("sweep " + f.string() + " --vary parallel.tp=1,2"), "no-such-scenario.yaml", "cannot open");
}

TEST(TrainingBadInput, UnitTypo) {
  const fs::path f = write_file("bucket.yaml", kSmall);
  expect_user_error(meshsim("simulate " + f.string() + " --set parallel.dp_bucket=25MBB"), "parallel.dp_bucket", "MiB");
  const fs::path g = write_file("bucket2.yaml",
                                "model: gpt3-175b\nparallel: {dp: 2, tp: 8, sp: true, pp: 8, microbatches: 16, "
                                "dp_bucket: 25MBB}\ntopology: dgx-h100:nodes=16\n");
  expect_user_error(meshsim("simulate " + g.string()), "parallel.dp_bucket", "25MBB");
}

TEST(TrainingBadInput, UnknownModelPreset) {
  const fs::path f = write_file("preset.yaml", "model: gpt5-1t\n");
  expect_user_error(meshsim("simulate " + f.string()), "gpt5-1t", "gpt3-175b");
  expect_user_error(meshsim("simulate --set model=gpt5-1t"), "gpt5-1t", "llama2-70b");
}

TEST(TrainingBadInput, UnknownFidelity) {
  expect_user_error(meshsim("simulate --fidelity exact"), "--fidelity", "use one of formula, flow, nccl");
  const fs::path f = write_file("fidelity.yaml", std::string(kSmall) + "run: {fidelity: exact}\n");
  expect_user_error(meshsim("simulate " + f.string()), "run.fidelity", "use one of formula, flow, nccl");
}

// ---- meshsim memory ----

TEST(Memory, ItemizedTablePerStage) {
  const fs::path f = write_file("small_mem.yaml", kSmall);
  const Result r = meshsim("memory " + f.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("stage 0 of 2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stage 1 of 2"), std::string::npos) << r.out;
  for (const char* cat : {"  weights ", "  gradients ", "  optimizer ", "  activations "})
    EXPECT_EQ(count(r.out, cat) >= 2, true) << cat << " in:\n" << r.out;
  EXPECT_EQ(count(r.out, "  total "), 2) << r.out;
  EXPECT_EQ(count(r.out, "fits in 80.00 GiB"), 2) << r.out;
  EXPECT_EQ(r.out.find("DOES NOT FIT"), std::string::npos) << r.out;
}

TEST(Memory, BigModelOnSmallGpusDoesNotFit) {
  const fs::path f = write_file("too_big.yaml", kTooBig);
  const Result r = meshsim("memory " + f.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(count(r.out, "DOES NOT FIT in 16.00 GiB"), 2) << r.out;
  // simulate agrees: every stage is over capacity.
  const Result s = meshsim("simulate " + f.string() + " --json");
  ASSERT_EQ(s.code, 0) << s.err;
  const auto j = nlohmann::json::parse(s.out);
  EXPECT_FALSE(j["fits"].get<bool>());
  for (const auto& st : j["memory"]) EXPECT_GT(st["peak_bytes"].get<double>(), j["capacity_bytes"].get<double>());
  EXPECT_NE(meshsim("simulate " + f.string()).out.find("DOES NOT FIT"), std::string::npos);
}

// memory --json carries the text table's figures: per stage the items (their bytes add up
// to the stage's total, and simulate's JSON lists the same items), the capacity, and the
// fit, which agrees with the text (both stages fit in 80 GiB; both overflow 16 GiB).
TEST(Memory, JsonCarriesTheTable) {
  const fs::path f = write_file("small_mem_json.yaml", kSmall);
  const Result r = meshsim("memory " + f.string() + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["stages"].size(), 2u);
  EXPECT_EQ(j["capacity_bytes"].get<double>(), 80.0 * (1ull << 30));
  EXPECT_TRUE(j["fits"].get<bool>());
  const auto sim = nlohmann::json::parse(meshsim("simulate " + f.string() + " --json").out);
  for (std::size_t st = 0; st < 2; ++st) {
    const auto& stage = j["stages"][st];
    double sum = 0;
    for (const auto& it : stage["items"]) sum += it["bytes"].get<double>();
    EXPECT_EQ(sum, stage["total_bytes"].get<double>()) << st;
    EXPECT_EQ(stage["items"], sim["memory"][st]["items"]) << st;
  }
  const auto big =
      nlohmann::json::parse(meshsim("memory " + write_file("too_big_json.yaml", kTooBig).string() + " --json").out);
  EXPECT_FALSE(big["fits"].get<bool>());
}

// ---- outputs on a full disk (issue 40): an error naming the file, never exit 0 ----

TEST(Outputs, AFullDiskIsAnErrorNamingTheFile) {
  const Result out = meshsim("simulate --json >/dev/full");
  EXPECT_EQ(out.code, 2);
  EXPECT_NE(out.err.find("writing to standard output failed"), std::string::npos) << out.err;
  expect_user_error(meshsim("simulate --trace /dev/full"), "--trace: writing '/dev/full' failed", "disk full");
  expect_user_error(meshsim("collective allreduce --trace /dev/full"), "--trace: writing '/dev/full' failed",
                    "disk full");
  expect_user_error(meshsim("topology show dgx-h100 --dot /dev/full"), "--dot: writing '/dev/full' failed",
                    "disk full");
  const fs::path f = write_file("sweep_full.yaml", kSweep);
  expect_user_error(meshsim("sweep " + f.string() + kSweepVary + " --csv /dev/full"),
                    "--csv: writing '/dev/full' failed", "disk full");
  expect_user_error(meshsim("sweep " + f.string() + kSweepVary + " --jsonl /dev/full"),
                    "--jsonl: writing '/dev/full' failed", "disk full");
}

// ---- meshsim sweep ----

TEST(Sweep, RankedTableAndCsv) {
  const fs::path f = write_file("sweep.yaml", kSweep);
  const fs::path csv = temp_dir() / "sweep.csv";
  const Result r = meshsim("sweep " + f.string() + kSweepVary + " --csv " + csv.string());
  ASSERT_EQ(r.code, 0) << r.err;
  // No progress bar when stderr is not a terminal; only the line naming the file written.
  EXPECT_EQ(r.err, "meshsim: wrote " + csv.string() + " (CSV, 16 variants)\n");
  std::vector<std::string> rows = split_lines(r.out);
  ASSERT_EQ(rows.size(), 18u) << r.out;  // header + 4 x 4 x 1 variants + the summary
  EXPECT_EQ(rows.back().rfind("16 variants: 2 fit, 1 out of memory, 13 invalid; best: parallel.tp=", 0), 0u)
      << rows.back();
  rows.pop_back();
  EXPECT_EQ(rows[0].rfind("rank", 0), 0u) << rows[0];
  // Ranks 1..16 in order; fitting layouts, then out-of-memory ones, then invalid ones.
  int last_class = 0, fits = 0, oom = 0, invalid = 0;
  std::vector<std::string> fit_labels;
  for (std::size_t k = 1; k < rows.size(); ++k) {
    EXPECT_EQ(rows[k].rfind(std::to_string(k) + " ", 0), 0u) << rows[k];
    const int cls = rows[k].find("invalid: ") != std::string::npos            ? 2
                    : rows[k].find("NO (out of memory)") != std::string::npos ? 1
                                                                              : 0;
    EXPECT_GE(cls, last_class) << "row out of order: " << rows[k] << "\n" << r.out;
    last_class = cls;
    (cls == 0 ? fits : cls == 1 ? oom : invalid)++;
    if (cls == 0) {
      EXPECT_NE(rows[k].find("  yes"), std::string::npos) << rows[k];
      std::istringstream in(rows[k]);
      std::string rank, tp, dp;
      in >> rank >> tp >> dp;
      fit_labels.push_back(tp + " " + dp);
    }
  }
  EXPECT_EQ(fits, 2) << r.out;  // tp 2 x dp 4, tp 4 x dp 2
  EXPECT_EQ(oom, 1) << r.out;   // tp 1 x dp 8
  EXPECT_EQ(invalid, 13) << r.out;
  EXPECT_NE(r.out.find("invalid: parallel.tp: 8 does not divide heads = 12"), std::string::npos) << r.out;

  // CSV: a header and one row per variant, in --vary order.
  const std::vector<std::string> csv_rows = split_lines(slurp(csv));
  ASSERT_EQ(csv_rows.size(), 17u) << slurp(csv);
  EXPECT_EQ(
      csv_rows[0],
      "variant,gpus,iteration_s,tokens_per_s,mfu,hfu,peak_bytes,fits,error,dp,tp,pp,cp,ep,global_batch,"
      "parallel.tp,parallel.dp,placement,compute_s,recompute_s,optimizer_s,bubble_s,tp_s,cp_s,ep_s,pp_s,dp_s,2d_s,"
      "weights_bytes,gradients_bytes,optimizer_bytes,activations_bytes");
  EXPECT_EQ(csv_rows[1].rfind("parallel.tp=1 parallel.dp=1 placement=natural,", 0), 0u) << csv_rows[1];
  std::map<std::string, double> throughput;  // fitting variants' tokens_per_s
  for (std::size_t k = 1; k < csv_rows.size(); ++k) {
    std::vector<std::string> cells;
    std::istringstream in(csv_rows[k]);
    for (std::string c; std::getline(in, c, ',');) cells.push_back(c);
    if (csv_rows[k].back() == ',') cells.emplace_back();
    ASSERT_EQ(cells.size(), 32u) << csv_rows[k];
    // A column per --vary path, its value (valid or not): the label's assignments.
    EXPECT_EQ(
        csv_rows[k].rfind("parallel.tp=" + cells[15] + " parallel.dp=" + cells[16] + " placement=" + cells[17], 0), 0u)
        << csv_rows[k];
    if (cells[7] == "yes") {
      std::istringstream label(cells[0]);
      std::string tp, dp;
      label >> tp >> dp;
      throughput[tp + " " + dp] = std::stod(cells[3]);
      // The layout as numbers: the label's tp and dp, pp = cp = ep = 1, and the global batch
      // dp x 2 micro-batches x 1 sequence.
      EXPECT_EQ("parallel.dp=" + cells[9], dp) << csv_rows[k];
      EXPECT_EQ("parallel.tp=" + cells[10], tp) << csv_rows[k];
      EXPECT_EQ(cells[11] + cells[12] + cells[13], "111") << csv_rows[k];
      EXPECT_EQ(std::stoi(cells[14]), 2 * std::stoi(cells[9])) << csv_rows[k];
      // The breakdown columns add up to the iteration (the critical stage's time, all of it
      // accounted for); the memory columns are parts of the peak.
      double parts = 0;
      for (std::size_t c = 18; c < 28; ++c) parts += std::stod(cells[c]);
      EXPECT_NEAR(parts, std::stod(cells[2]), 1e-8 * std::stod(cells[2])) << csv_rows[k];
      double memory = 0;
      for (std::size_t c = 28; c < 32; ++c) memory += std::stod(cells[c]);
      EXPECT_GT(memory, 0) << csv_rows[k];
      EXPECT_LE(memory, std::stod(cells[6])) << csv_rows[k];
    }
    if (cells[1].empty()) {
      EXPECT_FALSE(cells[8].empty()) << "an invalid variant gives its error: " << csv_rows[k];
    }
  }
  // The fitting variants are ranked by throughput.
  ASSERT_EQ(fit_labels.size(), 2u);
  ASSERT_EQ(throughput.size(), 2u);
  EXPECT_GE(throughput.at(fit_labels[0]), throughput.at(fit_labels[1]));
}

// --jsonl streams one line per variant in --vary order (the last --vary fastest), the same
// bytes with one worker or two, each line the --json object of that variant without its rank.
TEST(Sweep, JsonlStreamsEveryVariantInOrderForAnyJobs) {
  const fs::path f = write_file("sweep_jsonl.yaml", kSweep);
  std::string files[2];
  for (int jobs : {1, 2}) {
    const fs::path out = temp_dir() / ("sweep" + std::to_string(jobs) + ".jsonl");
    const Result r = meshsim("sweep " + f.string() + kSweepVary + " --jobs " + std::to_string(jobs) + " --jsonl " +
                             out.string() + " --json");
    ASSERT_EQ(r.code, 0) << r.err;
    files[jobs - 1] = slurp(out);
    if (jobs == 2) {
      const std::vector<std::string> lines = split_lines(files[1]);
      ASSERT_EQ(lines.size(), 16u);
      const auto ranked = nlohmann::json::parse(r.out);
      ASSERT_EQ(ranked.size(), 16u);
      const char* tps[] = {"1", "2", "4", "8"};
      for (std::size_t k = 0; k < lines.size(); ++k) {
        auto line = nlohmann::json::parse(lines[k]);
        EXPECT_EQ(line["set"][0], std::string("parallel.tp=") + tps[k / 4]) << lines[k];
        EXPECT_EQ(line["set"][1], std::string("parallel.dp=") + tps[k % 4]) << lines[k];
        // ... and as typed values, a number where the value is one.
        EXPECT_EQ(line["vary"]["parallel.tp"], std::stoi(tps[k / 4])) << lines[k];
        EXPECT_EQ(line["vary"]["placement"], "natural") << lines[k];
        bool found = false;
        for (auto j : ranked)
          if (j["variant"] == line["variant"]) {
            j.erase("rank");
            EXPECT_EQ(j, line);
            found = true;
          }
        EXPECT_TRUE(found) << lines[k];
      }
    }
  }
  EXPECT_EQ(files[0], files[1]);
}

// --json: the ranked table as data. Each valid variant equals `simulate --json` of the same
// --set (an independent run of the scenario), invalid ones carry the error the table shows.
TEST(Sweep, JsonIsTheRankedTableAndEachRowIsThatVariantsSimulation) {
  const fs::path f = write_file("sweep.yaml", kSweep);
  const Result r = meshsim("sweep " + f.string() + kSweepVary + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 16u);
  const Result table = meshsim("sweep " + f.string() + kSweepVary);
  const std::vector<std::string> rows = split_lines(table.out);
  int checked = 0;
  for (std::size_t k = 0; k < j.size(); ++k) {
    const auto& v = j[k];
    EXPECT_EQ(v["rank"], k + 1);
    // The same order as the text table: its row k+1 names the same variant.
    EXPECT_NE(rows[k + 1].find(v["variant"].get<std::string>()), std::string::npos) << rows[k + 1];
    if (v.contains("error")) {
      EXPECT_NE(rows[k + 1].find("invalid: "), std::string::npos);
      continue;
    }
    if (checked++ >= 3) continue;  // three simulations are enough to tie the rows to their runs
    std::string sets;
    for (const auto& s : v["set"]) sets += " --set " + s.get<std::string>();
    const Result one = meshsim("simulate " + f.string() + sets + " --json");
    ASSERT_EQ(one.code, 0) << one.err;
    const auto sim = nlohmann::json::parse(one.out);
    EXPECT_EQ(v["iteration_s"].get<double>(), sim["iteration_s"].get<double>()) << v["variant"];
    EXPECT_EQ(v["gpus"], sim["gpus"]);
  }
  EXPECT_GT(checked, 0) << r.out;
}

// --rank-by: the fitting variants ordered by the metric named (checked against each variant's
// own figures in --json), still before the out-of-memory and invalid ones; the summary names
// the best by that metric; a typo is one error before anything runs.
TEST(Sweep, RankByOrdersTheFittingLayoutsByTheMetricNamed) {
  const fs::path f = write_file("sweep_rank_by.yaml", kSweep);
  struct Case {
    const char* metric;
    const char* field;
    bool most_first;
    const char* summary;
  };
  for (const Case& c : {Case{"iteration_s", "iteration_s", false, "s per iteration)"},
                        Case{"mfu", "mfu", true, "% MFU)"}, Case{"memory", "peak_bytes", false, "GiB peak memory)"}}) {
    const Result r = meshsim("sweep " + f.string() + kSweepVary + " --rank-by " + c.metric + " --json");
    ASSERT_EQ(r.code, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    std::vector<double> fit;
    bool past_fit = false;
    for (const auto& v : j) {
      const bool fits = v.contains("fits") && v["fits"].get<bool>();
      if (!fits) past_fit = true;
      EXPECT_FALSE(fits && past_fit) << c.metric << ": a fitting layout after one that does not fit";
      if (fits) fit.push_back(v[c.field].get<double>());
    }
    ASSERT_EQ(fit.size(), 2u) << r.out;
    EXPECT_TRUE(c.most_first ? fit[0] >= fit[1] : fit[0] <= fit[1]) << c.metric << ": " << fit[0] << ", " << fit[1];
    const Result text = meshsim("sweep " + f.string() + kSweepVary + " --rank-by " + c.metric);
    EXPECT_NE(text.out.find(c.summary), std::string::npos) << text.out;
  }
  expect_user_error(meshsim("sweep " + f.string() + kSweepVary + " --rank-by tokens"), "--rank-by", "tokens_per_s");
}

// --global-batch: with dp=auto each layout runs the same batch (kSweep's microbatches: 2 are
// dropped): 8 GPUs, batch 16 of 1 sequence: tp 1, 2, 4 give dp 8, 4, 2 and 2, 4, 8 micro-batches.
TEST(Sweep, GlobalBatchIsTheSameForEveryLayout) {
  const fs::path f = write_file("sweep_gb.yaml", kSweep);
  const Result r =
      meshsim("sweep " + f.string() + " --set parallel.dp=auto --vary parallel.tp=1,2,4 --global-batch 16 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 3u);
  for (const auto& v : j) {
    ASSERT_FALSE(v.contains("error")) << v.dump();
    EXPECT_EQ(v["global_batch"], 16) << v.dump();
    EXPECT_EQ(v["layout"]["dp"].get<int>() * v["layout"]["tp"].get<int>(), 8) << v.dump();
  }
}

TEST(Sweep, OutputDoesNotDependOnJobs) {
  const fs::path f = write_file("sweep_jobs.yaml", kSweep);
  const Result one = meshsim("sweep " + f.string() + kSweepVary + " --jobs 1");
  const Result two = meshsim("sweep " + f.string() + kSweepVary + " --jobs 2");
  ASSERT_EQ(one.code, 0) << one.err;
  ASSERT_EQ(two.code, 0) << two.err;
  EXPECT_EQ(one.out, two.out);
}

// --where: of the 16 tp x dp variants of kSweep, 'tp*dp == 8 && tp <= 4' keeps tp 1/2/4 with
// dp 8/4/2 (3 variants); the other 13 are excluded before they run: counted in the summary,
// left out of the table, and in the CSV with the reason.
TEST(Sweep, WhereExcludesVariantsBeforeTheyRun) {
  const fs::path f = write_file("sweep_where.yaml", kSweep);
  const fs::path csv = temp_dir() / "where.csv";
  const Result r =
      meshsim("sweep " + f.string() + kSweepVary + " --where 'tp*dp == 8 && tp <= 4' --csv " + csv.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("16 variants: 2 fit, 1 out of memory, 0 invalid, 13 excluded by --where; best: "),
            std::string::npos)
      << r.out;
  EXPECT_EQ(count(r.out, "excluded"), 1) << r.out;  // only the summary: the table leaves them out
  const std::string rows = slurp(csv);
  EXPECT_EQ(count(rows, "excluded by --where 'tp*dp == 8 && tp <= 4'"), 13) << rows;
}

TEST(Sweep, VaryWithoutValuesIsAClearError) {
  const fs::path f = write_file("sweep_bad.yaml", kSweep);
  expect_user_error(meshsim("sweep " + f.string() + " --vary parallel.tp"), "--vary", "parallel.tp=1,2,4,8");
}

// ---- reports and traces ----

TEST(Reports, SimulateHtmlIsSelfContained) {
  const fs::path f = write_file("small_report.yaml", kSmall);
  const fs::path html = temp_dir() / "simulate.html";
  const Result r = meshsim("simulate " + f.string() + " --report " + html.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "meshsim: wrote " + html.string() + " (HTML report)\n");
  expect_self_contained_html(html);
}

TEST(Reports, SweepHtmlIsSelfContained) {
  const fs::path f = write_file("sweep_report.yaml", kSweep);
  const fs::path html = temp_dir() / "sweep.html";
  const Result r = meshsim("sweep " + f.string() + kSweepVary + " --report " + html.string());
  ASSERT_EQ(r.code, 0) << r.err;
  expect_self_contained_html(html);
}

TEST(Reports, TraceHasTimedSlicesPerStage) {
  const fs::path f = write_file("small_trace.yaml", kSmall);
  const fs::path trace = temp_dir() / "training_trace.json";
  const Result r = meshsim("simulate " + f.string() + " --trace " + trace.string() + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  // The file is named on stderr, so --json on stdout stays one document.
  EXPECT_EQ(r.err, "meshsim: wrote " + trace.string() + " (Perfetto trace: open in https://ui.perfetto.dev)\n");
  EXPECT_TRUE(nlohmann::json::accept(r.out)) << r.out;
  const auto j = nlohmann::json::parse(slurp(trace));
  ASSERT_TRUE(j.contains("traceEvents"));
  ASSERT_TRUE(j["traceEvents"].is_array());
  int slices = 0, processes = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") ++processes;
    if (e["ph"] != "X") continue;
    ++slices;
    ASSERT_TRUE(e.contains("ts") && e["ts"].is_number()) << e.dump();
    ASSERT_TRUE(e.contains("dur") && e["dur"].is_number()) << e.dump();
    EXPECT_GE(e["ts"].get<double>(), 0) << e.dump();
    EXPECT_GE(e["dur"].get<double>(), 0) << e.dump();
  }
  EXPECT_EQ(processes, 2);  // one per pipeline stage
  EXPECT_GT(slices, 0);
}

// The MoE example's layout on one DGX H100 (ZeRO-0): its expert all-to-alls and DP all-reduce
// overlap on the NVSwitch ports, so at flow fidelity the ops share links.
const char* kMoeFlow = R"(name: moe-flow
model: {preset: mixtral-8x7b, layers: 4}
parallel: {dp: 8, ep: 8, ep_imbalance: 1.3, micro_batch_size: 2, microbatches: 1, zero: 0}
topology: dgx-h100
run: {fidelity: flow}
)";

// --links, the trace's counter tracks and the report's link-load section agree with the
// JSON: each CSV row's utilization is its bytes / (capacity x iteration), no link's peak is
// above its rate or below its average, and the tiers' bytes add up to the rows'.
TEST(Reports, FlowLinkLoadInCsvTraceAndReport) {
  const fs::path f = write_file("moe_flow.yaml", kMoeFlow);
  const fs::path csv = temp_dir() / "links.csv", trace = temp_dir() / "links_trace.json",
                 html = temp_dir() / "links.html";
  const Result r = meshsim("simulate " + f.string() + " --json --links " + csv.string() + " --trace " + trace.string() +
                           " --report " + html.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("meshsim: wrote " + csv.string() + " (per-link load CSV)"), std::string::npos) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j["link_sharing"].get<bool>());
  EXPECT_TRUE(j["sharing_delay"].contains("ep")) << j["sharing_delay"].dump();
  const double iteration = j["iteration_s"].get<double>();

  const std::vector<std::string> lines = split_lines(slurp(csv));
  ASSERT_GT(lines.size(), 1U);
  EXPECT_EQ(lines[0], "link,name,tier,capacity_GBps,bytes,utilization,peak");
  double csv_bytes = 0;
  std::map<std::string, std::string> tier_of;  // link name -> tier
  for (std::size_t i = 1; i < lines.size(); ++i) {
    std::vector<std::string> c;
    std::stringstream ss(lines[i]);
    for (std::string cell; std::getline(ss, cell, ',');) c.push_back(cell);
    ASSERT_EQ(c.size(), 7U) << lines[i];
    tier_of[c[1]] = c[2];
    const double cap = std::stod(c[3]) * 1e9, bytes = std::stod(c[4]), util = std::stod(c[5]), peak = std::stod(c[6]);
    EXPECT_GT(bytes, 0) << lines[i];
    EXPECT_NEAR(util, bytes / (cap * iteration), 1e-5) << lines[i];
    EXPECT_LE(peak, 1 + 1e-6) << lines[i];
    EXPECT_GE(peak + 1e-6, util) << lines[i];
    csv_bytes += bytes;
  }
  double tier_bytes = 0;
  for (const auto& t : j["link_tiers"]) tier_bytes += t["bytes"].get<double>();
  EXPECT_NEAR(csv_bytes, tier_bytes, 1e-6 * tier_bytes);

  int counters = 0;
  std::set<std::string> tracked_tiers;  // every tier has its busiest link's load over time
  const auto events = nlohmann::json::parse(slurp(trace))["traceEvents"];
  for (const auto& e : events) {
    if (e["ph"] != "C") continue;
    ++counters;
    tracked_tiers.insert(tier_of[e["name"].get<std::string>().substr(std::string("load % ").size())]);
    const double load = e["args"]["load"].get<double>();
    EXPECT_GE(load, 0);
    EXPECT_LE(load, 100 + 1e-6);
  }
  EXPECT_GT(counters, 0);
  for (const auto& t : j["link_tiers"]) EXPECT_TRUE(tracked_tiers.count(t["tier"].get<std::string>())) << t.dump();
  const std::string page = slurp(html);
  EXPECT_NE(page.find("<section id=\"links\">"), std::string::npos);
  EXPECT_NE(page.find("<th>time lost</th>"), std::string::npos);  // the sharing delay by category
  EXPECT_NE(page.find("<tr><td>ep</td>"), std::string::npos);

  // Every op alone: no sharing reported, and the iteration is no longer.
  const Result alone = meshsim("simulate " + f.string() + " --json --no-link-sharing");
  ASSERT_EQ(alone.code, 0) << alone.err;
  const auto ja = nlohmann::json::parse(alone.out);
  EXPECT_FALSE(ja["link_sharing"].get<bool>());
  EXPECT_FALSE(ja.contains("sharing_delay"));
  EXPECT_LE(ja["iteration_s"].get<double>(), iteration);
}

TEST(TrainingBadInput, LinksNeedsFlowFidelity) {
  const fs::path f = write_file("small_links.yaml", kSmall);
  const Result r = meshsim("simulate " + f.string() + " --links " + (temp_dir() / "x.csv").string());
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--links"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--fidelity flow"), std::string::npos) << r.err;
}

}  // namespace
