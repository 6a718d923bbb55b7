// End-to-end tests of `meshsim run` and `meshsim validate` on the cpu backend: real
// processes over loopback TCP, results checked against the serial reference executor.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <iterator>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "cli_util.h"

namespace {

using namespace cli_testing;
using Json = nlohmann::json;

fs::path workload(const std::string& name, const std::string& kind, const std::string& bytes, int iterations,
                  const std::string& algorithm = "auto") {
  return write_file(name + ".yaml", "name: " + name + "\nworkload: {collective: " + kind + ", bytes: " + bytes +
                                        ", algorithm: " + algorithm + ", iterations: " + std::to_string(iterations) +
                                        "}\n");
}

TEST(Run, AllReduceOverRealSocketsEqualsTheSerialReference) {
  const Result r = meshsim("run " + workload("ar", "allreduce", "4MiB", 3, "ring").string() + " -n 3 --json");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["ranks"], 3);
  EXPECT_EQ(j["algorithm"], "ring");
  ASSERT_EQ(j["ops"].size(), 3u);
  for (const auto& op : j["ops"]) EXPECT_GT(op["measured_s"].get<double>(), 0.0);
  EXPECT_TRUE(j["numerics_checked"].get<bool>());
  EXPECT_EQ(j["max_abs_error"].get<double>(), 0.0);
}

TEST(Run, EveryCollectiveKindWithItsAutoAlgorithm) {
  for (const char* kind : {"allgather", "reducescatter", "broadcast", "reduce", "alltoall"}) {
    const Result r = meshsim("run " + workload(std::string("k_") + kind, kind, "1MiB", 1).string() + " -n 4 --json");
    ASSERT_EQ(r.code, 0) << kind << ": " << r.err << r.out;
    const Json j = Json::parse(r.out);
    EXPECT_TRUE(j["numerics_checked"].get<bool>()) << kind;
    EXPECT_EQ(j["max_abs_error"].get<double>(), 0.0) << kind;
    EXPECT_FALSE(j["algorithm"].get<std::string>().empty()) << kind;
  }
}

// An even all-to-all whose size does not split into equal blocks: each rank sends
// floor(e/p) elements per destination (collective.h), and the inputs are laid out so.
TEST(Run, AllToAllWithASizeThatDoesNotSplitEvenly) {
  const Result r = meshsim("run " + workload("a2a_odd", "alltoall", "1048580", 1).string() + " -n 3 --json");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const Json j = Json::parse(r.out);
  EXPECT_TRUE(j["numerics_checked"].get<bool>());
  EXPECT_EQ(j["max_abs_error"].get<double>(), 0.0);
}

// --format nccl-tests: nccl-tests' 13 columns from the measured run, read as a script reads
// nccl-tests output; #wrong 0 from the numerics check; busbw = algbw x 2(p-1)/p for 3 ranks.
TEST(Run, NcclTestsTableFromTheMeasuredRun) {
  const fs::path f = workload("nt", "allreduce", "4MiB", 3, "ring");
  const Result r = meshsim("run " + f.string() + " -n 3 --format nccl-tests");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  std::istringstream in(r.out);
  std::vector<std::vector<std::string>> rows;
  double avg = -1;
  bool ok_line = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# Avg bus bandwidth    : ", 0) == 0) avg = std::stod(line.substr(25));
    if (line == "# Out of bounds values : 0 OK") ok_line = true;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream cols(line);
    rows.emplace_back(std::istream_iterator<std::string>(cols), std::istream_iterator<std::string>());
  }
  ASSERT_EQ(rows.size(), 1u) << r.out;
  const auto& c = rows[0];
  ASSERT_EQ(c.size(), 13u) << r.out;
  EXPECT_EQ(c[0], "4194304");
  EXPECT_EQ(c[1], "1048576");
  EXPECT_EQ(c[3], "sum");
  EXPECT_EQ(c[8], "0");
  EXPECT_GT(std::stod(c[5]), 0.0);
  EXPECT_NEAR(std::stod(c[6]), 4194304 / std::stod(c[5]) * 1e-3, 0.01 + 0.01 * std::stod(c[6])) << r.out;
  EXPECT_NEAR(std::stod(c[7]), std::stod(c[6]) * 4.0 / 3.0, 0.01 + 0.01 * std::stod(c[7])) << r.out;
  EXPECT_NEAR(avg, std::stod(c[7]), 0.01) << r.out;
  EXPECT_TRUE(ok_line) << r.out;
  expect_user_error(meshsim("run " + f.string() + " -n 3 --format nccl-tests --json"), "--format nccl-tests",
                    "drop --json");
  expect_user_error(meshsim("run " + f.string() + " -n 3 --format nccl"), "--format", "meshsim or nccl-tests");
}

TEST(Validate, PrintsPredictedAgainstMeasured) {
  const fs::path trace = temp_dir() / "validate_trace.json";
  const Result r =
      meshsim("validate " + workload("v", "allreduce", "8MiB", 2, "ring").string() + " -n 2 --trace " + trace.string());
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("predicted"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("machine model: switch:gpus_per_node=2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("equals the serial reference"), std::string::npos) << r.out;
  const Json t = Json::parse(slurp(trace));
  int measured = 0, predicted = 0;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "X") (e["pid"] == 1 ? measured : predicted) += 1;
  EXPECT_EQ(measured, 2 * 2);  // 2 ranks x 2 ops
  EXPECT_EQ(predicted, 2);
}

fs::path tiny_training(const std::string& name) {
  return write_file(name + ".yaml",
                    "name: " + name +
                        "\nmodel: {layers: 2, hidden: 64, heads: 2, ffn_hidden: 256, vocab: 512, seq: 64, "
                        "dtype: fp32}\nparallel: {tp: 2, sp: true, pp: 2, micro_batch_size: 1, "
                        "microbatches: 2}\n");
}

// A training layout (TP 2 + SP, PP 2: 4 ranks) runs for real: every op of every stage runs on
// every rank of that stage (the measured trace has 2 events per simulated op), and validate
// compares per op kind, GEMMs and the tensor-parallel collectives among them.
TEST(Validate, ATrainingScheduleRunsEveryOpOnEveryRank) {
  const fs::path trace = temp_dir() / "train_trace.json";
  const Result r = meshsim("validate " + tiny_training("tiny").string() + " --json --trace " + trace.string());
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["ranks"], 4);
  std::set<std::string> kinds;
  for (const auto& k : j["kinds"]) {
    kinds.insert(k["kind"].get<std::string>());
    EXPECT_GE(k["measured_s"].get<double>(), 0.0);
  }
  for (const char* k : {"gemm", "softmax", "norm", "tp allgather", "tp reducescatter", "pp send", "pp recv"})
    EXPECT_TRUE(kinds.count(k)) << k << " missing from " << r.out;
  EXPECT_GT(j["measured_iteration_s"].get<double>(), 0.0);
  EXPECT_GT(j["predicted_iteration_s"].get<double>(), 0.0);
  const Json t = Json::parse(slurp(trace));
  int measured = 0, predicted = 0;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "X") (e["pid"] == 1 ? measured : predicted) += 1;
  EXPECT_GT(predicted, 100);
  EXPECT_EQ(measured, 2 * predicted);
}

TEST(Run, ATrainingLayoutNeedsItsRankCount) {
  expect_user_error(meshsim("run " + tiny_training("tiny_n").string() + " -n 3"), "give -n 4");
}

TEST(Run, AModelTooLargeForTheHostIsRefusedClearly) {
  const fs::path f = write_file("huge.yaml", "model: gpt3-175b\n");
  expect_user_error(meshsim("run " + f.string()), "run a smaller model on the cpu backend");
}

TEST(Run, UnknownBackendIsAClearError) {
  expect_user_error(meshsim("run " + workload("b", "allreduce", "1MiB", 1).string() + " -n 2 --backend tpu"),
                    "--backend");
}

// Without a GPU (no device, no driver, or a build without CUDA) --backend cuda is one
// clear error before any rank starts, for run and validate alike.
TEST(Run, CudaBackendWithoutAGpuIsOneClearError) {
  const fs::path f = workload("cu", "allreduce", "1MiB", 1, "ring");
  for (const char* cmd : {"run", "validate"}) {
    const Result r = meshsim(std::string(cmd) + " " + f.string() + " -n 2 --backend cuda --collectives nccl");
    if (r.code == 0) GTEST_SKIP() << "GPUs ran the workload; this tests the no-GPU path";
    expect_user_error(r, "--backend cuda: no GPU found (");
    EXPECT_NE(r.err.find("); use --backend cpu or run on a GPU machine"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("rank 1"), std::string::npos) << "one error, not one per rank: " << r.err;
  }
}

// The cuda backend is a plugin meshsim loads on first use (backend/cuda/plugin.h): one it
// cannot load is the same one error, naming the file tried, the loader's reason and the fix.
TEST(Run, CudaBackendWithAMissingPluginNamesTheFile) {
  const fs::path f = workload("cu_plugin", "allreduce", "1MiB", 1, "ring");
  ::setenv("MESHSIM_CUDA_PLUGIN", "/nonexistent/libmeshsim_cuda.so", 1);
  const Result r = meshsim("run " + f.string() + " -n 2 --backend cuda");
  ::unsetenv("MESHSIM_CUDA_PLUGIN");
  expect_user_error(
      r, "--backend cuda: no GPU found (backend cuda: cannot load the CUDA plugin /nonexistent/libmeshsim_cuda.so: ",
      "build meshsim with the CUDA toolkit and NCCL (README, On a GPU machine) or set MESHSIM_CUDA_PLUGIN");
  EXPECT_NE(r.err.find("No such file or directory"), std::string::npos) << r.err;
}

// meshsim finds its plugin beside itself: without a GPU the reason is the CUDA runtime's, not
// the loader's. Builds without the CUDA toolkit and NCCL have no plugin: the loader's error
// names the file it looked for beside meshsim.
TEST(Run, CudaBackendFindsThePluginBesideTheBinary) {
  const fs::path f = workload("cu_beside", "allreduce", "1MiB", 1, "ring");
  ::unsetenv("MESHSIM_CUDA_PLUGIN");
  const Result r = meshsim("run " + f.string() + " -n 2 --backend cuda");
  if (r.code == 0) GTEST_SKIP() << "GPUs ran the workload; the plugin was found";
  expect_user_error(r, "--backend cuda: no GPU found (");
  const std::string beside = (fs::path(MESHSIM_BINARY).parent_path() / "libmeshsim_cuda.so").string();
#if defined(MESHSIM_CUDA_PLUGIN_BUILT)
  EXPECT_EQ(r.err.find("cannot load the CUDA plugin"), std::string::npos) << r.err;
#else
  EXPECT_NE(r.err.find("cannot load the CUDA plugin " + beside), std::string::npos) << r.err;
#endif
}

// A training scenario on --backend cuda: no longer refused as "cpu only"; without a GPU
// it is the same one error as collective workloads.
TEST(Run, CudaTrainingWithoutAGpuIsOneClearError) {
  const fs::path f = tiny_training("tiny_cuda");
  for (const char* cmd : {"run", "validate"}) {
    const Result r = meshsim(std::string(cmd) + " " + f.string() + " --backend cuda");
    if (r.code == 0) GTEST_SKIP() << "GPUs ran the training schedule; this tests the no-GPU path";
    expect_user_error(r, "--backend cuda: no GPU found (");
    EXPECT_EQ(r.err.find("training schedules run on --backend cpu"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("rank 1"), std::string::npos) << "one error, not one per rank: " << r.err;
  }
}

TEST(Run, CollectivesFlagIsChecked) {
  const fs::path f = workload("cf", "allreduce", "1MiB", 1, "ring");
  expect_user_error(meshsim("run " + f.string() + " -n 2 --collectives nccl"),
                    "--collectives nccl: native NCCL collectives need --backend cuda");
  expect_user_error(meshsim("run " + f.string() + " -n 2 --backend cuda --collectives mpi"), "--collectives: 'mpi'");
  expect_user_error(meshsim("validate " + f.string() + " -n 2 --kernels fp16"),
                    "--kernels: unknown precision 'fp16'; use bf16 or fp32");
  expect_user_error(meshsim("validate " + f.string() + " -n 2 --attention flash"),
                    "--attention: unknown choice 'flash'; use auto, cudnn or meshsim");
}

// Sets environment variables for one scope (the ranks a test starts by hand inherit them)
// and restores the previous values after, so no other test sees them.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::vector<std::pair<std::string, const char*>>& vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
      value ? ::setenv(name.c_str(), value, 1) : ::unsetenv(name.c_str());
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, old] : saved_) old ? ::setenv(name.c_str(), old->c_str(), 1) : ::unsetenv(name.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

// A rank started by hand (here as torchrun would) without MESHSIM_TOKEN stops before it
// opens a socket, in one line that says how to make a token and how to waive it.
TEST(Run, HandStartedRanksWithoutATokenStopAtOnce) {
  const fs::path f = workload("notoken", "allreduce", "1MiB", 1, "ring");
  const ScopedEnv env({{"RANK", "0"},
                       {"WORLD_SIZE", "2"},
                       {"MASTER_ADDR", "127.0.0.1"},
                       {"MASTER_PORT", "29517"},
                       {"MESHSIM_TOKEN", nullptr}});
  const auto start = std::chrono::steady_clock::now();
  const Result r = meshsim("run " + f.string());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));  // no wait for rank 1
  expect_user_error(r, "MESHSIM_TOKEN is not set (torchrun launch, rank 0 of 2)",
                    "export MESHSIM_TOKEN=$(openssl rand -hex 16)");
  EXPECT_NE(r.err.find("MESHSIM_TOKEN=insecure"), std::string::npos) << r.err;
  expect_user_error(meshsim("calibrate --backend cpu --out " + (temp_dir() / "p.yaml").string()),
                    "MESHSIM_TOKEN is not set");
}

// MESHSIM_TOKEN=insecure runs, unauthenticated, with a warning line saying so on every rank
// (one rank here).
TEST(Run, AnInsecureTokenRunsWithOneWarning) {
  const fs::path f = workload("insecure", "allreduce", "1MiB", 1, "ring");
  const std::string port = std::to_string(free_port());
  const ScopedEnv env({{"RANK", "0"},
                       {"WORLD_SIZE", "1"},
                       {"MASTER_ADDR", "127.0.0.1"},
                       {"MASTER_PORT", port.c_str()},
                       {"MESHSIM_TOKEN", "insecure"}});
  const Result r = meshsim("run " + f.string() + " --json");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("warning: rank 0: MESHSIM_TOKEN=insecure: this run is not authenticated"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("127.0.0.1:" + port), std::string::npos) << r.err;
  EXPECT_EQ(Json::parse(r.out)["max_abs_error"].get<double>(), 0.0);
}

// A rank killed mid-run: the run stops within a bounded time, naming the rank, and
// leaves no process behind (the launcher's process group).
TEST(Run, ARankKilledMidRunStopsEveryRank) {
  const fs::path f = workload("long", "allreduce", "64MiB", 200, "ring");
  const std::string cmd = "launch -n 3 -- sh -c '" + std::string(MESHSIM_BINARY) + " run " + f.string() +
                          " & pid=$!; if [ \"$MESHSIM_RANK\" = 2 ]; then sleep 2; kill -9 $pid; fi; wait $pid'";
  const auto start = std::chrono::steady_clock::now();
  const Result r = meshsim(cmd);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.err.find("rank 2"), std::string::npos) << r.err;
  EXPECT_LT(secs, 60.0);
}

// Ranks started by hand (no launcher to stop them), each with its own environment: every
// rank's stderr, its exit code, and how long the slowest took. Rank r runs with env[r]
// prepended to its command line.
struct HandRun {
  std::vector<std::string> err;
  std::vector<int> code;
  double secs = 0;
};
HandRun run_by_hand(const fs::path& scenario, const std::vector<std::string>& env, const std::string& flags) {
  const std::string port = std::to_string(free_port());
  std::string script = "export MESHSIM_MASTER_ADDR=127.0.0.1 MESHSIM_MASTER_PORT=" + port +
                       " MESHSIM_TOKEN=0123456789abcdef0123456789abcdef; ";
  const fs::path dir = temp_dir() / ("hand" + port);
  fs::create_directories(dir);
  for (std::size_t r = 0; r < env.size(); ++r)
    script += "(env " + env[r] + " " + MESHSIM_BINARY + " run " + scenario.string() + " " + flags + " >/dev/null 2>" +
              (dir / std::to_string(r)).string() + "; echo $? > " + (dir / (std::to_string(r) + ".rc")).string() +
              ") & ";
  script += "wait";
  const auto start = std::chrono::steady_clock::now();
  const int rc = std::system(("sh -c '" + script + "'").c_str());
  HandRun h;
  h.secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(rc, 0);
  for (std::size_t r = 0; r < env.size(); ++r) {
    h.err.push_back(slurp(dir / std::to_string(r)));
    const std::string code = slurp(dir / (std::to_string(r) + ".rc"));
    h.code.push_back(code.empty() ? -1 : std::stoi(code));
  }
  return h;
}

// A rank with another MESHSIM_WORLD_SIZE: every rank stops within seconds (not the 120 s
// timeout), and each says which rank and which variable.
TEST(RunFailure, AnotherWorldSizeStopsEveryRankAtOnce) {
  const fs::path f = workload("worldsize", "allreduce", "1MiB", 1, "ring");
  const HandRun h = run_by_hand(f,
                                {"MESHSIM_RANK=0 MESHSIM_WORLD_SIZE=3", "MESHSIM_RANK=1 MESHSIM_WORLD_SIZE=3",
                                 "MESHSIM_RANK=2 MESHSIM_WORLD_SIZE=4"},
                                "");
  EXPECT_LT(h.secs, 15.0);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(h.code[r], 2) << h.err[r];
    EXPECT_NE(h.err[r].find("rank 2 has MESHSIM_WORLD_SIZE=4 but rank 0 (the store) has 3"), std::string::npos)
        << "rank " << r << ": " << h.err[r];
  }
}

// Two ranks with the same MESHSIM_RANK: refused at the store, every rank stops at once.
TEST(RunFailure, ARankIdTakenTwiceStopsEveryRankAtOnce) {
  const fs::path f = workload("duprank", "allreduce", "1MiB", 1, "ring");
  const HandRun h = run_by_hand(f,
                                {"MESHSIM_RANK=0 MESHSIM_WORLD_SIZE=3", "MESHSIM_RANK=1 MESHSIM_WORLD_SIZE=3",
                                 "MESHSIM_RANK=1 MESHSIM_WORLD_SIZE=3"},
                                "");
  EXPECT_LT(h.secs, 15.0);
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(h.code[r], 0) << h.err[r];
    EXPECT_NE(h.err[r].find("MESHSIM_RANK=1"), std::string::npos) << "rank " << r << ": " << h.err[r];
  }
}

// A rank that never starts: the others' error names exactly that rank, and says it never
// reached the store, rather than blaming rank 0.
TEST(RunFailure, ARankThatNeverStartsIsNamedExactly) {
  const fs::path f = workload("norank", "allreduce", "1MiB", 1, "ring");
  const HandRun h = run_by_hand(f,
                                {"MESHSIM_RANK=0 MESHSIM_WORLD_SIZE=4", "MESHSIM_RANK=1 MESHSIM_WORLD_SIZE=4",
                                 "MESHSIM_RANK=2 MESHSIM_WORLD_SIZE=4"},
                                "--timeout 3");
  EXPECT_LT(h.secs, 20.0);
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(h.code[r], 0) << h.err[r];
    EXPECT_NE(h.err[r].find("rank 3 of 4"), std::string::npos) << "rank " << r << ": " << h.err[r];
    EXPECT_NE(h.err[r].find("rank 3 never reached the store"), std::string::npos) << "rank " << r << ": " << h.err[r];
    EXPECT_EQ(h.err[r].find("did rank 0 exit"), std::string::npos) << "rank " << r << ": " << h.err[r];
  }
}

// meshsim calibrate --backend cpu on 4 ranks: a profile with this host's compute and, per
// group size (2 and 4) and kind, a fitted collective, which `simulate --profile` loads.
TEST(Calibrate, CpuWritesAProfileWithEveryGroupSizeAndKind) {
  const fs::path out = temp_dir() / "calibrated.yaml";
  fs::remove(out);
  const Result r = meshsim("calibrate --backend cpu -n 4 --out " + out.string() +
                           " --sizes 1MiB:8MiB --kinds allreduce,broadcast --repeats 3");
  ASSERT_EQ(r.code, 0) << r.err << r.out;
  const std::string yaml = slurp(out);
  for (const char* line : {"name: \"cpu\"", "gemm:\n  - {m: 64, n: 64, k: 64, dtype: bf16",
                           "collectives:", "{kind: allreduce, ranks: 2, alpha: ", "{kind: allreduce, ranks: 4, alpha: ",
                           "{kind: broadcast, ranks: 2, alpha: ", "{kind: broadcast, ranks: 4, alpha: "})
    EXPECT_NE(yaml.find(line), std::string::npos) << line << " in\n" << yaml;
  EXPECT_NE(yaml.find("algorithm: binomial"), std::string::npos) << yaml;
  EXPECT_NE(r.out.find("allreduce          4 ring"), std::string::npos) << r.out;
  // The tiny GPT's TP and DP groups have 2 ranks: its all-reduces take the measured figures.
  const std::string tiny = std::string(MESHSIM_SOURCE_DIR) + "/examples/scenarios/tiny-gpt-cpu.yaml";
  const Result with = meshsim("simulate " + tiny + " --profile " + out.string() + " --json");
  ASSERT_EQ(with.code, 0) << with.err << with.out;
}

TEST(Calibrate, BadFlagsAreOneClearError) {
  const std::string out = " --out " + (temp_dir() / "bad.yaml").string();
  expect_user_error(meshsim("calibrate --backend tpu" + out), "--backend: 'tpu'");
  expect_user_error(meshsim("calibrate --kinds allreduce,sendrecv" + out), "--kinds: 'sendrecv'");
  expect_user_error(meshsim("calibrate --sizes 1MiB" + out), "--sizes: one size cannot separate alpha from bandwidth");
  expect_user_error(meshsim("calibrate --sizes 1MiB:1KiB" + out), "--sizes: sweep");
  expect_user_error(meshsim("calibrate --collectives nccl" + out), "--collectives nccl: native NCCL collectives need");
  expect_user_error(meshsim("calibrate --kernels bf32" + out), "--kernels: unknown precision 'bf32'");
  expect_user_error(meshsim("calibrate --attention cuDNN" + out), "--attention: unknown choice 'cuDNN'");
  expect_user_error(meshsim("calibrate --out /nonexistent-dir/p.yaml"),
                    "--out: folder '/nonexistent-dir' does not exist");
  const Result cuda = meshsim("calibrate --backend cuda" + out);
  if (cuda.code != 0) expect_user_error(cuda, "--backend cuda: no GPU found (");
}

}  // namespace
