// Heterogeneous clusters (Scenario::node_gpus) and balanced stages (stage_layers: balance).
#include <gtest/gtest.h>

#include <numeric>

#include "core/error.h"
#include "sim/scenario.h"
#include "sim/training_sim.h"

namespace meshsim {
namespace {

Scenario scenario(const std::string& extra) {
  return ScenarioNode::parse(
             "model: {preset: gpt3-175b, layers: 16}\n"
             "parallel: {tp: 8, sp: true, pp: 2, dp: 1, microbatches: 8, zero: 1}\n"
             "topology: dgx-h100:nodes=2\n"
             "order: [pp, dp, cp, tp]\n" +
                 extra,
             "test")
      .resolve();
}

// Every node named a100 is the same cluster as `gpu: a100`: the same kernels, op for op.
TEST(Hetero, EveryNodeOfOneKindIsThatGpu) {
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  const TrainingResult named = simulate_training(scenario("node_gpus: 0-1=a100\n"), reg, true);
  const TrainingResult whole = simulate_training(scenario("gpu: a100\n"), reg, true);
  EXPECT_EQ(named.sim.iteration, whole.sim.iteration);
  EXPECT_DOUBLE_EQ(named.peak_flops, whole.peak_flops);
  EXPECT_EQ(named.stage_gpus, (std::vector<std::string>{"a100", "a100"}));
}

// Stage 1 on A100s (node 1): its kernels take the A100's times, so the pipeline waits for it.
// Balancing gives the H100 stage more layers: about the A100/H100 time ratio of a layer more.
TEST(Hetero, BalancedStagesGiveTheFasterGpusMoreLayers) {
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  const TrainingResult even = simulate_training(scenario("node_gpus: 1=a100\n"), reg, true);
  const TrainingResult h100 = simulate_training(scenario(""), reg, true);
  EXPECT_GT(even.sim.iteration, h100.sim.iteration);
  EXPECT_EQ(even.stage_gpus, (std::vector<std::string>{"h100", "a100"}));
  ScenarioNode node = ScenarioNode::parse(
      "model: {preset: gpt3-175b, layers: 16}\n"
      "parallel: {tp: 8, sp: true, pp: 2, dp: 1, microbatches: 8, zero: 1, stage_layers: balance}\n"
      "topology: dgx-h100:nodes=2\norder: [pp, dp, cp, tp]\nnode_gpus: 1=a100\n",
      "test");
  const TrainingResult bal = simulate_training(node.resolve(), reg, true);
  const std::vector<int>& n = bal.scenario.parallel.stage_layers;
  ASSERT_EQ(n.size(), 2U);
  EXPECT_EQ(n[0] + n[1], 16);
  EXPECT_GT(n[0], 2 * n[1]);  // an A100 layer takes ~3x an H100's (312 vs 989 TFLOP/s, 0.75 vs 0.78 x 0.87)
  EXPECT_LT(bal.sim.iteration, even.sim.iteration);
  // No other split of the 16 layers does better.
  for (int first = 1; first < 16; ++first) {
    if (first == n[0]) continue;
    Scenario s = scenario("node_gpus: 1=a100\n");
    s.parallel.stage_layers = {first, 16 - first};
    EXPECT_GE(simulate_training(s, reg, true).sim.iteration, bal.sim.iteration) << first;
  }
}

TEST(Hetero, BadNodeGpusNameTheField) {
  auto error = [](const std::string& extra) {
    try {
      (void)scenario(extra);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error("node_gpus: 2=a100\n").find("node_gpus: node 2 is not in topology"), std::string::npos);
  EXPECT_NE(error("node_gpus: 0-1=a100,1=h200\n").find("node_gpus: node 1 is given twice"), std::string::npos);
  EXPECT_NE(error("node_gpus: 1=a1000\n").find("a1000"), std::string::npos);
  EXPECT_NE(error("node_gpus: a100\n").find("is not NODES=GPU"), std::string::npos);
}

}  // namespace
}  // namespace meshsim
