// End-to-end tests of the `meshsim` command: what a user types, what they see.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <iterator>
#include <sstream>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_util.h"

namespace {

namespace fs = std::filesystem;
using namespace cli_testing;

TEST(Cli, DefaultCollectiveRuns) {
  const Result r = meshsim("collective allreduce");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("busbw"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("busiest"), std::string::npos) << r.out;
}

TEST(Cli, SweepPrintsOneRowPerSize) {
  const Result r = meshsim("collective allgather --ranks 8 --bytes 1KiB:8KiB --topology switch");
  ASSERT_EQ(r.code, 0) << r.err;
  int rows = 0;
  for (const char* size : {" 1024 ", " 2048 ", " 4096 ", " 8192 "}) rows += r.out.find(size) != std::string::npos;
  EXPECT_EQ(rows, 4) << r.out;
  EXPECT_NE(r.out.find("busbw"), std::string::npos);
}

// nccl-tests' layout, read as a script reads nccl-tests output: lines not starting with '#'
// split on blanks into its 13 columns; the closing average is the mean of the busbw column.
TEST(Cli, NcclTestsLayoutParsesLikeNcclTests) {
  const Result r = meshsim("collective allreduce -t switch -b 8 -e 1MiB --stepfactor 4 --format nccl-tests");
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream in(r.out);
  std::vector<std::vector<std::string>> rows;
  double avg = -1;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# Avg bus bandwidth    : ", 0) == 0) avg = std::stod(line.substr(25));
    if (line.empty() || line[0] == '#') continue;
    std::istringstream cols(line);
    rows.emplace_back(std::istream_iterator<std::string>(cols), std::istream_iterator<std::string>());
  }
  ASSERT_EQ(rows.size(), 9u) << r.out;  // 8, 32, ..., 524288 (x4 up to 1 MiB)
  double sum = 0;
  long long size = 8;
  for (const auto& c : rows) {
    ASSERT_EQ(c.size(), 13u) << r.out;
    EXPECT_EQ(std::stoll(c[0]), size);
    EXPECT_EQ(std::stoll(c[1]), size / 4);  // fp32 elements
    EXPECT_EQ(c[2], "float");
    EXPECT_EQ(c[3], "sum");
    EXPECT_EQ(c[4], "-1");
    EXPECT_EQ(c[8], "N/A");
    for (int i = 5; i <= 8; ++i) EXPECT_EQ(c[static_cast<std::size_t>(i)], c[static_cast<std::size_t>(i + 4)]);
    // busbw = algbw x 2(p-1)/p on 8 ranks, and algbw = size / time.
    EXPECT_NEAR(std::stod(c[7]), std::stod(c[6]) * 1.75, 0.01 + 0.001 * std::stod(c[7])) << c[0];
    EXPECT_NEAR(std::stod(c[6]), static_cast<double>(size) / std::stod(c[5]) * 1e-3, 0.01 + 0.01 * std::stod(c[6]));
    sum += std::stod(c[7]);
    size *= 4;
  }
  EXPECT_NEAR(avg, sum / 9, 0.01) << r.out;
  const Result both = meshsim("collective allreduce -b 8:1MiB -e 2MiB --format nccl-tests");
  EXPECT_EQ(both.code, 2);
  EXPECT_NE(both.err.find("--maxbytes: give the sweep either as"), std::string::npos) << both.err;
}

TEST(Cli, ExplainShowsFormulaAndStepTable) {
  const Result r = meshsim("collective allreduce --ranks 4 --bytes 4MiB --algo ring --topology switch --explain");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("Formula (docs/math.md section 1)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0 -> 1"), std::string::npos) << r.out;  // a step-table row
  EXPECT_NE(r.out.find("reduce"), std::string::npos) << r.out;
}

TEST(Cli, ExplainAtFormulaFidelityStillShowsSteps) {
  const Result r = meshsim(
      "collective broadcast --ranks 4 --bytes 1MiB --algo binomial --fidelity formula --topology switch --explain");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("0 -> 2"), std::string::npos) << r.out;
}

TEST(Cli, JsonIsByteIdenticalAcrossRuns) {
  const std::string args =
      "collective allreduce --ranks 16 --bytes 64MiB --topology frontera-rtx:nodes=4 --group col --placement "
      "bunched:2x2 --json";
  const Result a = meshsim(args);
  const Result b = meshsim(args);
  ASSERT_EQ(a.code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  const auto j = nlohmann::json::parse(a.out);
  EXPECT_EQ(j["groups"], 4);
  EXPECT_GT(j["busbw_GBps"].get<double>(), 0);
}

TEST(Cli, TraceIsChromeTraceJson) {
  const fs::path trace = temp_dir() / "trace.json";
  const Result r = meshsim("collective allreduce --ranks 4 --bytes 1MiB --topology switch --trace " + trace.string());
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(slurp(trace));
  ASSERT_TRUE(j.contains("traceEvents"));
  int rank_slices = 0, link_slices = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] != "X") continue;
    (e["pid"] == 1 ? rank_slices : link_slices)++;
  }
  EXPECT_GT(rank_slices, 0);
  EXPECT_GT(link_slices, 0);
}

TEST(Cli, TopologyShowAndDot) {
  const fs::path dot = temp_dir() / "t.dot";
  const Result r = meshsim("topology show frontera-rtx:nodes=2 --dot " + dot.string());
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("injection"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bisection"), std::string::npos) << r.out;
  EXPECT_NE(slurp(dot).find("graph \"frontera-rtx:nodes=2\" {"), std::string::npos) << slurp(dot);
}

TEST(Cli, AlgorithmsListComesFromTheRegistry) {
  const Result r = meshsim("algorithms");
  ASSERT_EQ(r.code, 0);
  for (const char* name : {"ring", "binomial", "pipeline", "recursive_doubling", "rabenseifner", "dbt", "pairwise",
                           "hierarchical", "direct"})
    EXPECT_NE(r.out.find(name), std::string::npos) << name;
}

// ---- examples/ double as tests: each file runs, and its key figure is checked ----

// examples/topologies/two-pcie-nodes.yaml: a send from node 0 to node 1 crosses
// gpu -> cpu -> nic -> tor -> nic -> cpu -> gpu: latency 1 + 1 + 1.5 + 1.5 + 1 + 1 = 7 us;
// narrowest link the NIC, 100 Gb/s x 0.92 = 11.5 GB/s. 64 MiB: 7 us + 67108864 B / 11.5 GB/s
// = 7e6 ps + 5835553391.3 ps, rounded up to whole picoseconds = 5842553392 ps.
TEST(Examples, TwoPcieNodesSendRecvHandComputed) {
  const std::string file = std::string(MESHSIM_SOURCE_DIR) + "/examples/topologies/two-pcie-nodes.yaml";
  const Result r = meshsim(
      "collective sendrecv --ranks 4 --bytes 64MiB --mesh rank=4 --placement list:0,2,1,3 "
      "--json --topology " +
      file);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["time_ps"].get<std::int64_t>(), 5842553392);
  EXPECT_NEAR(j["busbw_GBps"].get<double>(), 11.486, 1e-3);
}

// examples/topologies/frontera-16.yaml: the preset form; 16 GPUs in 4 nodes, and the
// bisection crosses two nodes' FDR links: 2 x 54.54/8 x 0.90 = 12.27 GB/s.
TEST(Examples, Frontera16PresetFile) {
  const Result r =
      meshsim("topology show " + std::string(MESHSIM_SOURCE_DIR) + "/examples/topologies/frontera-16.yaml");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("16 GPUs in 4 nodes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bisection bandwidth (one direction): 12.27GB/s"), std::string::npos) << r.out;
}

// ---- bad input: one line naming the field and the fix, exit code 2 ----

// Absurd sizes and counts (issue 16's reproducers): each is one line naming the field and
// the limit, exit 2, in seconds; none crashes, hangs, wraps or asserts.
TEST(CliBadInput, AbsurdSizesAndCountsAreNamedNotCrashes) {
  const std::string tiny = std::string(MESHSIM_SOURCE_DIR) + "/examples/scenarios/tiny-gpt-cpu.yaml";
  const struct {
    std::string args;
    std::string field, fix;
  } cases[] = {
      // dp x cp x tp wrapped a 32-bit int to the GPU count, then segfaulted
      {"simulate " + tiny + " --set parallel.dp=536870913 --set parallel.cp=2", "parallel.dp", "limit of 1048576"},
      {"simulate --set parallel.dp=65536 --set parallel.cp=64", "parallel.dp", "exceeds meshsim's limit"},
      {"simulate --set model.layers=1000000", "model.layers", "limit of 10000"},
      {"simulate --set parallel.microbatches=536870913", "parallel.microbatches", "limit"},
      {"simulate --set parallel.micro_batch_size=1000000000", "parallel.micro_batch_size", "limit"},
      {"simulate --set model.seq=1000000000", "model.seq", "limit"},
      {"simulate --set model.seq=16000000", "model.seq = 16000000", "reduce them"},  // was an assert
      {"collective allreduce --bytes 8000000TB", "--bytes", "over 1PiB"},            // int64 ps overflow
      {"collective allreduce --bytes 1:8000000TB", "--bytes", "over 1PiB"},          // doubling never ended
      {"collective allreduce -t switch:bandwidth=1e-300B/s", "bandwidth", "outside 1KB/s .. 1PB/s"},
      {"collective broadcast -a pipeline --chunks 1000000000", "chunks", "1..65536"},                // hung
      {"collective allreduce --fidelity nccl --nccl-channels 1000000", "--nccl-channels", "1..64"},  // 1 GiB in 48 us
      // hung; then refused above 32768 ranks; now routed in seconds, and refused at flow fidelity
      {"collective allreduce -t frontera-rtx:nodes=99999", "--fidelity flow", "use --fidelity formula"},
      {"collective allreduce -t dgx-h100:nodes=2048 -n 16384 -a ring", "--fidelity flow", "rank-steps"},
      {"run " + std::string(MESHSIM_SOURCE_DIR) + "/examples/scenarios/allreduce-cpu.yaml --timeout nan", "--timeout",
       "(0, 86400]"},  // became -9223372036854775808 ms
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args);
    expect_user_error(meshsim(c.args), c.field, c.fix);
  }
}

// yaml-cpp keeps a repeated key and reads the first; a second parallel: was silently ignored.
TEST(CliBadInput, DuplicateKeyIsAnError) {
  const fs::path f = write_file("dup.yaml", "model: gpt3-175b\nparallel: {tp: 8}\nparallel: {tp: 4}\n");
  expect_user_error(meshsim("simulate " + f.string()), "dup.yaml:3:", "parallel: given twice");
}

TEST(CliBadInput, MalformedYaml) {
  const fs::path f = write_file("bad.yaml", "devices: [ {name: a, kind: gpu\nlinks: ]]\n");
  expect_user_error(meshsim("topology show " + f.string()), "bad.yaml");
}

// A collective workload scenario is for run/validate: simulate, memory and sweep say so
// (memory used to report a default model on one GPU, exit 0).
TEST(CliBadInput, WorkloadScenarioInATrainingCommand) {
  const std::string file = std::string(MESHSIM_SOURCE_DIR) + "/examples/scenarios/allreduce-cpu.yaml";
  for (const char* cmd : {"simulate ", "memory ", "sweep --vary run.fidelity=formula,flow "})
    expect_user_error(meshsim(cmd + file), "collective workload", "meshsim collective allreduce");
}

// Two GPUs (nodes 0 and 1) on one switch, g0's link at `g0_bandwidth` (the value under test).
std::string two_gpus_on_a_switch(const std::string& g0_bandwidth) {
  return "devices:\n  - {name: g0, kind: gpu, node: 0}\n  - {name: g1, kind: gpu, node: 1}\n"
         "  - {name: sw, kind: switch}\n"
         "links:\n  - {a: g0, b: sw, bandwidth: " +
         g0_bandwidth +
         ", latency: 1us}\n"
         "  - {a: g1, b: sw, bandwidth: 25GB/s, latency: 1us}\n";
}

TEST(CliBadInput, NegativeBandwidth) {
  const fs::path f = write_file("neg.yaml", two_gpus_on_a_switch("-25GB/s"));
  expect_user_error(meshsim("collective allreduce --topology " + f.string()), "bandwidth", "positive");
}

TEST(CliBadInput, ZeroBandwidthPresetParameter) {
  expect_user_error(meshsim("collective allreduce --topology switch:bandwidth=0GB/s"), "bandwidth", "positive");
}

TEST(CliBadInput, UnknownUnit) {
  const fs::path f = write_file("unit.yaml", two_gpus_on_a_switch("25GB/sec"));
  expect_user_error(meshsim("collective allreduce --topology " + f.string()), "bandwidth", "GB/s");
  expect_user_error(meshsim("collective allreduce --bytes 64MiBs"), "--bytes", "MiB");
}

TEST(CliBadInput, ZeroRanks) { expect_user_error(meshsim("collective allreduce --ranks 0"), "--ranks", "N >= 1"); }

TEST(CliBadInput, MoreRanksThanGpus) {
  expect_user_error(meshsim("collective allreduce --ranks 64 --topology dgx-h100"), "--ranks", "nodes=");
}

TEST(CliBadInput, DisconnectedTopology) {
  const fs::path f = write_file("island.yaml",
                                "devices:\n  - {name: g0, kind: gpu, node: 0}\n  - {name: g1, kind: gpu, node: 1}\n"
                                "  - {name: g2, kind: gpu, node: 2}\n  - {name: sw, kind: switch}\n"
                                "links:\n  - {a: g0, b: sw, bandwidth: 25GB/s, latency: 1us}\n"
                                "  - {a: g1, b: sw, bandwidth: 25GB/s, latency: 1us}\n");
  expect_user_error(meshsim("collective allreduce --topology " + f.string()), "disconnected", "g2");
}

TEST(CliBadInput, PlacementThatDoesNotTileTheNodes) {
  expect_user_error(meshsim("collective broadcast --ranks 16 --topology frontera-rtx:nodes=4 --placement bunched:2x3"),
                    "bunched:2x3");
}

TEST(CliBadInput, AlgorithmThatDoesNotSupportN) {
  expect_user_error(meshsim("collective allreduce --ranks 6 --topology switch --algo recursive_doubling"),
                    "recursive_doubling", "power");
}

TEST(Cli, AlgoNcclNamesAlgorithmAndProtocol) {
  const Result r = meshsim("collective allreduce --algo nccl --bytes 64MiB --topology dgx-h100:nodes=2");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("fidelity nccl"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("NCCL picks "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("<- chosen"), std::string::npos) << r.out;
  for (const char* col : {"Tree", "Ring", "LL128", "Simple", "busbw"})
    EXPECT_NE(r.out.find(col), std::string::npos) << col << "\n" << r.out;

  const Result j = meshsim("collective allreduce --algo nccl --bytes 4KiB --topology dgx-h100:nodes=16 --json");
  ASSERT_EQ(j.code, 0) << j.err;
  const auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["algorithm"], "nccl:Tree/LL");
  EXPECT_EQ(doc["nccl"]["algorithm"], "Tree");
  EXPECT_EQ(doc["nccl"]["protocol"], "LL");
  EXPECT_EQ(doc["nccl"]["candidates"].size(), 12u);  // Tree, Ring, NVLS, NVLSTree x LL, LL128, Simple
  // Across nodes NVLS is off and says why; NVLSTree/Simple is on (dgx-h100's NVSwitches reduce).
  bool nvls_off = false, nvls_tree_on = false;
  for (const auto& c : doc["nccl"]["candidates"]) {
    if (c["algorithm"] == "NVLS" && c["protocol"] == "Simple")
      nvls_off =
          !c["enabled"].get<bool>() && c["disabled"].get<std::string>().find("across nodes") != std::string::npos;
    if (c["algorithm"] == "NVLSTree" && c["protocol"] == "Simple") nvls_tree_on = c["enabled"].get<bool>();
  }
  EXPECT_TRUE(nvls_off) << doc["nccl"].dump();
  EXPECT_TRUE(nvls_tree_on) << doc["nccl"].dump();
  EXPECT_EQ(j.out, meshsim("collective allreduce --algo nccl --bytes 4KiB --topology dgx-h100:nodes=16 --json").out);

  const Result e = meshsim("collective allgather --algo nccl --bytes 1MiB --explain");
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_NE(e.out.find("Ring/Simple:"), std::string::npos) << e.out;
  EXPECT_NE(e.out.find("latency = base"), std::string::npos) << e.out;
}

TEST(CliBadInput, AlgoNcclOnKindsItDoesNotCover) {
  expect_user_error(meshsim("collective alltoall --algo nccl"), "--algo nccl", "--algo auto");
  expect_user_error(meshsim("collective allreduce --algo nccl --fidelity flow"), "--algo nccl", "--fidelity nccl");
  expect_user_error(meshsim("collective allreduce --algo nccl --nccl-arch sm9x"), "--nccl-arch", "sm90");
}

TEST(CliBadInput, UnknownCollectiveAndAlgorithm) {
  expect_user_error(meshsim("collective allsum"), "allsum", "allreduce");
  expect_user_error(meshsim("collective allreduce --algo fastest"), "--algo", "ring");
}

}  // namespace
