// Examples are tests: every scenario under examples/scenarios runs through the meshsim
// command and its key figures are checked against docs/math.md and the papers' claims.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "cli_util.h"

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

std::string run(const std::string& args) {
  const cli_testing::Result r = cli_testing::meshsim(args);
  EXPECT_EQ(r.code, 0) << args << "\n" << r.err;
  return r.out;
}

std::string scenario(const std::string& name) {
  return (fs::path(MESHSIM_SOURCE_DIR) / "examples" / "scenarios" / (name + ".yaml")).string();
}

Json simulate(const std::string& name, const std::string& sets = "") {
  const std::string out = run("simulate " + scenario(name) + " --json " + sets);
  return Json::parse(out);
}

std::string whatif(const std::string& name) {
  return (fs::path(MESHSIM_SOURCE_DIR) / "examples" / "whatif" / (name + ".yaml")).string();
}

double breakdown(const Json& j, const std::string& key) {
  return j["breakdown_s"].contains(key) ? j["breakdown_s"][key].get<double>() : 0.0;
}

// 1D (Megatron) vs 2D (SUMMA) in weak scaling on Frontera RTX nodes (docs/math.md section 6).
TEST(Examples, SummaVersusMegatronWeakScaling) {
  struct Size {
    int gpus, q, hidden, heads, nodes;
  };
  const Size sizes[] = {{4, 2, 2048, 32, 1}, {16, 4, 4096, 64, 4}, {36, 6, 6912, 72, 9}, {64, 8, 8192, 128, 16}};
  double prev_1d = 0, prev_2d = 0;
  for (const Size& s : sizes) {
    const std::string model = " --set model.hidden=" + std::to_string(s.hidden) +
                              " --set model.heads=" + std::to_string(s.heads) +
                              " --set model.ffn_hidden=" + std::to_string(4 * s.hidden) +
                              " --set topology=frontera-rtx:nodes=" + std::to_string(s.nodes);
    const Json one =
        simulate("summa-vs-megatron", model + " --set parallel.mesh2d=0 --set parallel.tp=" + std::to_string(s.gpus));
    const Json natural = simulate("summa-vs-megatron", model + " --set parallel.mesh2d=" + std::to_string(s.q));
    const Json bunched = simulate(
        "summa-vs-megatron", model + " --set parallel.mesh2d=" + std::to_string(s.q) + " --set placement=bunched:2x2");
    const double t1 = one["iteration_s"], tn = natural["iteration_s"], tb = bunched["iteration_s"];
    EXPECT_EQ(one["gpus"], s.gpus);
    if (s.nodes == 1) {
      EXPECT_DOUBLE_EQ(tb, tn) << "one node: the arrangements are the same";
    } else if (s.gpus >= 36) {
      // Columns span 6 or 8 nodes under natural; bunched halves the GPUs per uplink.
      EXPECT_LT(tb, 0.8 * tn) << s.gpus << " GPUs";
    }
    // Weak scaling over a 56 Gb/s fabric: both are communication-bound and slow down.
    EXPECT_GT(t1, prev_1d);
    EXPECT_GT(tb, prev_2d);
    // 2D splits both GEMM dimensions: its local compute is smaller than 1D's.
    EXPECT_LT(breakdown(bunched, "compute"), breakdown(one, "compute"));
    prev_1d = t1;
    prev_2d = tb;
  }
}

// Llama-3 70B at 128k: with CP 8 a rank fits in 80 GiB; without CP its activations alone are
// the itemized 245 GiB of docs/math.md section 11 (80 layers, t = 8, first stage holds L layers).
TEST(Examples, Llama70bAt128kNeedsContextParallelism) {
  const Json cp = simulate("llama3-70b-128k");
  EXPECT_TRUE(cp["fits"].get<bool>());
  EXPECT_GT(breakdown(cp, "compute"), 0.0);
  const Json no_cp = simulate("llama3-70b-128k", "--set parallel.cp=1 --set parallel.dp=8");
  EXPECT_FALSE(no_cp["fits"].get<bool>());
  const double act = no_cp["memory"][0]["activation_peak_bytes"].get<double>();
  EXPECT_NEAR(act / (1024.0 * 1024 * 1024), 245.0, 0.5);
  // CP divides the activations by c.
  EXPECT_NEAR(cp["memory"][0]["activation_peak_bytes"].get<double>() * 8, act, act * 1e-6);
  const std::string mem = run("memory " + scenario("llama3-70b-128k") + " --set parallel.cp=1 --set parallel.dp=8");
  EXPECT_NE(mem.find("DOES NOT FIT"), std::string::npos);
}

// GPT-3 175B on 1024 H100: TP 8, PP 8 interleaved (v = 2), DP 16, 64 micro-batches.
TEST(Examples, Gpt3On1024H100) {
  const Json f = simulate("gpt3-175b-1024xh100");
  EXPECT_EQ(f["gpus"], 1024);
  EXPECT_TRUE(f["fits"].get<bool>());
  EXPECT_GT(f["mfu"].get<double>(), 0.30);
  EXPECT_LT(f["mfu"].get<double>(), 0.60);
  // Interleaved 1F1B: bubble (p-1)/(m v) = 7/128 of the ideal, plus the other stages' exposed comm.
  const double busy = breakdown(f, "compute") + breakdown(f, "recompute");
  EXPECT_GT(breakdown(f, "pipeline bubble") / busy, 7.0 / 128);
  EXPECT_LT(breakdown(f, "pipeline bubble") / busy, 2 * 7.0 / 128);
  // Flow adds contention (DP reduce-scatters share the rails) but never removes work.
  const Json w = simulate("gpt3-175b-1024xh100", "--fidelity flow");
  EXPECT_GE(w["iteration_s"].get<double>(), f["iteration_s"].get<double>() * 0.999);
  EXPECT_LT(w["iteration_s"].get<double>(), f["iteration_s"].get<double>() * 1.10);
  EXPECT_EQ(w["busiest_links"].size(), 5u);
}

// One GPT-3 layer for GPU validation (docs/validation/gpu.md): on one H100 it is GEMM-bound
// (MFU below the preset's 0.78 GEMM efficiency, above 0.3); TP 8 on a node splits every GEMM
// 8 ways, so it runs 4 to 8 times faster (smaller GEMMs and the TP all-reduces cost extra).
TEST(Examples, Gpt3LayerOnOneGpuAndAtTp8) {
  const Json one = simulate("gpt3-layer-gpu");
  EXPECT_EQ(one["gpus"], 1);
  EXPECT_TRUE(one["fits"].get<bool>());
  EXPECT_GT(one["mfu"].get<double>(), 0.30);
  EXPECT_LT(one["mfu"].get<double>(), 0.78);
  const Json tp8 = simulate("gpt3-layer-gpu", "--set parallel.tp=8 --set topology=dgx-h100:nodes=1");
  EXPECT_EQ(tp8["gpus"], 8);
  const double speedup = one["iteration_s"].get<double>() / tp8["iteration_s"].get<double>();
  EXPECT_GT(speedup, 4.0);
  EXPECT_LT(speedup, 8.0);
}

// An MoE layer under EP vs TP (docs/math.md section 8): EP moves tokens with all-to-alls and
// keeps attention replicated; TP splits everything and all-reduces.
TEST(Examples, MoeExpertParallelVersusTensorParallel) {
  const Json ep = simulate("moe-ep-vs-tp");
  const Json tp =
      simulate("moe-ep-vs-tp", "--set parallel.ep=1 --set parallel.dp=1 --set parallel.tp=8 --set parallel.sp=true");
  EXPECT_GT(breakdown(ep, "exposed ep comm"), 0.0);
  EXPECT_EQ(breakdown(ep, "exposed tp comm"), 0.0);
  EXPECT_GT(breakdown(tp, "exposed tp comm"), 0.0);
  EXPECT_EQ(breakdown(tp, "exposed ep comm"), 0.0);
  auto weights = [](const Json& j) {
    double w = 0;
    for (const auto& it : j["memory"][0]["items"])
      if (it["category"] == "weights") w += it["bytes"].get<double>();
    return w;
  };
  // EP holds 1/8 of the experts but all of attention; TP 1/8 of everything.
  EXPECT_GT(weights(ep), weights(tp));
}

// Recomputation modes side by side (docs/math.md sections 12 and 13).
TEST(Examples, RecomputationModesTradeMemoryForTime) {
  const fs::path csv = fs::temp_directory_path() / ("meshsim_examples_" + std::to_string(::getpid()) + ".csv");
  run("sweep " + scenario("recompute-modes") + " --vary parallel.recompute=none,selective,full,every:4,sqrt --csv " +
      csv.string());
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);                              // header
  std::map<std::string, std::pair<double, double>> r;  // mode -> (time, peak bytes)
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::vector<std::string> f;
    for (std::string x; std::getline(ss, x, ',');) f.push_back(x);
    ASSERT_GE(f.size(), 7u) << line;
    r[f[0].substr(f[0].find('=') + 1)] = {std::stod(f[2]), std::stod(f[6])};
  }
  fs::remove(csv);
  ASSERT_EQ(r.size(), 5u);
  EXPECT_LT(r["none"].first, r["selective"].first);
  EXPECT_LT(r["selective"].first, r["full"].first);
  EXPECT_GT(r["none"].second, r["selective"].second);
  EXPECT_GT(r["selective"].second, r["full"].second);
  EXPECT_GT(r["every:4"].second, r["full"].second);
  EXPECT_LT(r["every:4"].second, r["none"].second);
  // Every whole-layer mode recomputes each layer's forward once: the same time.
  EXPECT_NEAR(r["every:4"].first, r["full"].first, r["full"].first * 1e-9);
  EXPECT_NEAR(r["sqrt"].first, r["full"].first, r["full"].first * 1e-9);
}

// The collective workload runs for real on 2 processes: every op timed, every result equal
// to the serial reference.
TEST(Examples, AllReduceOnTheCpuBackend) {
  const Json j = Json::parse(run("run " + scenario("allreduce-cpu") + " -n 2 --json"));
  EXPECT_EQ(j["algorithm"], "ring");
  EXPECT_EQ(j["ops"].size(), 5u);
  EXPECT_TRUE(j["numerics_checked"].get<bool>());
  EXPECT_EQ(j["max_abs_error"].get<double>(), 0.0);
  EXPECT_GT(j["measured_total_s"].get<double>(), 0.0);
}

// The what-if examples (docs/whatif.md). A perturbation only slows parts down, so it never
// shortens the iteration, and it can stretch it at most as much as its slowest part: a stage
// whose GPUs compute at f takes at most 1/f of its nominal time (compute stretches, the rest
// does not), a link at f carries its bytes in at most 1/f of the time.
TEST(Examples, WhatIfPerturbationsCostTimeWithinTheirBounds) {
  const std::pair<const char*, double> cases[] = {
      {"throttled-gpu", 0.8}, {"stragglers", 0.7}, {"half-speed-nic", 0.5}, {"failed-spine-link", 0.0}};
  for (const auto& [name, f] : cases) {
    const Json j = Json::parse(run("simulate " + whatif(name) + " --json"));
    const double t = j["iteration_s"], nominal = j["nominal_iteration_s"];
    if (f > 0) {
      EXPECT_GT(t, nominal) << name;
      EXPECT_LE(t, nominal / f) << name;
    } else {
      EXPECT_GE(t, nominal) << name;  // routed around: as fast at best, never cut off
    }
  }
}

// Drawn GPU speeds depend only on the seed: the same seed gives the same bytes, another seed
// another cluster.
TEST(Examples, WhatIfStragglersAreDrawnFromTheSeed) {
  const std::string a = run("simulate " + whatif("stragglers") + " --json");
  EXPECT_EQ(run("simulate " + whatif("stragglers") + " --json"), a);
  EXPECT_NE(run("simulate " + whatif("stragglers") + " --json --set perturb.seed=2"), a);
}

// Llama 3 405B's long run (docs/math.md section 15): 419 interruptions in 54 days on 16,384
// GPUs is an MTBF of 54 x 86400 / 419 s; the analytic goodput agrees with the Monte Carlo of
// the same model, and lands above the report's "more than 90% effective training time".
TEST(Examples, WhatIfLlama3GoodputMatchesItsMonteCarloAndTheReport) {
  const Json j = Json::parse(run("goodput " + whatif("llama3-405b-16k") +
                                 " --interruptions 419 --over-days 54 --checkpoint-bw 2TB/s --relaunch 600s "
                                 "--days 54 --json"));
  EXPECT_EQ(j["gpus"], 16384);
  EXPECT_NEAR(j["mtbf_s"].get<double>(), 54.0 * 86400 / 419, 1e-6);
  const double g = j["goodput"];
  EXPECT_NEAR(j["monte_carlo"]["goodput"].get<double>(), g, 0.02 * g);
  EXPECT_GT(g, 0.90);
}

// Adaptive routing pools a leaf's uplinks (docs/topology.md, Routing): on a non-blocking fat-tree
// the iteration is then the one-leaf fabric's (every NIC on one crossbar), to the picosecond's
// rounding; ECMP's hashed rings can only be slower.
TEST(Examples, WhatIfAdaptiveRoutingMakesANonBlockingFatTreeOneCrossbar) {
  const std::string base = "simulate " + whatif("adaptive-routing") + " --json --set topology=spectrum-x:nodes=32,";
  auto iteration = [&](const std::string& rest) { return Json::parse(run(base + rest))["iteration_s"].get<double>(); };
  const double adaptive = Json::parse(run("simulate " + whatif("adaptive-routing") + " --json"))["iteration_s"];
  const double one_leaf = iteration("inter=fat-tree,hosts_per_leaf=32");
  const double ecmp = iteration("inter=fat-tree,hosts_per_leaf=4,routing=ecmp");
  EXPECT_NEAR(adaptive / one_leaf, 1.0, 1e-9);
  EXPECT_GT(ecmp, adaptive);
}

}  // namespace
