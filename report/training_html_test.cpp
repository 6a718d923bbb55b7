// The training report's pipeline view: per stage a row of micro-batch blocks (F0, B0, ...) with
// the idle time between them, checked on a two-stage 1F1B run on near-free links, where the
// schedule is known by hand: stage 1 starts its first forward when stage 0's first forward ends,
// and each stage runs m forwards and m backwards.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "report/training_report.h"
#include "sim/scenario.h"
#include "sim/training_sim.h"

namespace meshsim {
namespace {

TEST(TrainingHtml, EachStageShowsItsMicroBatchesAndItsIdleTime) {
  const ScenarioNode n = ScenarioNode::parse(
      "model: {preset: gpt3-175b, layers: 4, seq: 512}\nparallel: {tp: 1, pp: 2, microbatches: 4}\n"
      "topology: switch:gpus_per_node=2,bandwidth=1000000GB/s,latency=0us\ngpu: h100\n",
      "pp.yaml");
  const TrainingResult r = simulate_training(n.resolve(), AlgorithmRegistry::builtin(), true);
  const HtmlReport h = training_html(r);
  ASSERT_EQ(h.lanes[0], "stage 0 · micro-batches");
  std::map<int, std::map<std::string, int>> labels;  // lane -> label -> count
  std::map<int, double> idle, first_forward_start, first_forward_end;
  for (const HtmlSpan& s : h.spans) {
    if (h.lanes[static_cast<std::size_t>(s.lane)].find("micro-batches") == std::string::npos) continue;
    if (s.category == "idle") {
      idle[s.lane] += s.end_s - s.start_s;
      continue;
    }
    ++labels[s.lane][s.label.substr(0, 1)];
    EXPECT_EQ(s.category, s.label[0] == 'F' ? "forward" : "backward") << s.label;
    if (s.label == "F0") first_forward_start[s.lane] = s.start_s, first_forward_end[s.lane] = s.end_s;
  }
  ASSERT_EQ(labels.size(), 2u);
  const int stage1 = std::next(labels.begin())->first;
  for (const auto& [lane, count] : labels) {
    EXPECT_EQ(count.at("F"), 4) << h.lanes[static_cast<std::size_t>(lane)];
    EXPECT_EQ(count.at("B"), 4) << h.lanes[static_cast<std::size_t>(lane)];
  }
  // Stage 1 waits for stage 0's first forward (and the activation's send, nanoseconds on these
  // links): its idle time starts with that wait.
  EXPECT_NEAR(first_forward_start[stage1], first_forward_end[0], 1e-6);
  EXPECT_GT(first_forward_start[stage1], first_forward_end[0]);
  EXPECT_GE(idle[stage1], first_forward_start[stage1] - 1e-12);
  // A period of the steady state lies inside the iteration.
  ASSERT_TRUE(h.detail_window.has_value());
  EXPECT_GT(h.detail_window->first, 0);
  EXPECT_LT(h.detail_window->second, r.sim.iteration.seconds());
}

}  // namespace
}  // namespace meshsim
