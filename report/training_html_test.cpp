// The training report's pipeline view: per stage a row of micro-batch blocks (F0, B0, ...) with
// the idle time between them, checked on a two-stage 1F1B run on near-free links, where the
// schedule is known by hand: stage 1 starts its first forward when stage 0's first forward ends,
// and each stage runs m forwards and m backwards.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "report/teaching_html.h"
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

namespace meshsim {
namespace {

// The per-collective table against the breakdown: with tensor parallelism the only
// communication (pp 1, dp 1), the time its rows say the compute stream sat idle is the
// breakdown's exposed tp comm; each layer's forward runs Megatron's two all-reduces.
TEST(CollectiveRows, ExposedTimeAddsUpToTheBreakdown) {
  const ScenarioNode n = ScenarioNode::parse(
      "model: {preset: gpt3-175b, layers: 4, seq: 1024}\nparallel: {tp: 4, microbatches: 2}\n"
      "topology: switch:gpus_per_node=4\ngpu: h100\n",
      "tp.yaml");
  const TrainingResult r = simulate_training(n.resolve(), AlgorithmRegistry::builtin(), true);
  const std::vector<CollectiveRow> rows = collective_rows(r);
  double exposed = 0;
  int allreduces = 0;
  for (const CollectiveRow& c : rows) {
    EXPECT_EQ(c.axis, "tp") << c.kind;
    EXPECT_EQ(c.group, 4);
    EXPECT_LE(c.exposed_s, c.time_s * (1 + 1e-12));
    exposed += c.exposed_s;
    if (c.kind == "allreduce") allreduces += c.count;
  }
  EXPECT_NEAR(exposed, r.sim.breakdown.exposed.at("tp").seconds(), 1e-9);
  EXPECT_GE(allreduces, 2 * 4 * 2);  // 2 a layer forward, 4 layers, 2 micro-batches (and the backward's)
  const std::string csv = collective_rows_csv(rows);
  EXPECT_EQ(csv.rfind("stage,axis,kind,bytes,group,count,time_s,mean_us,exposed_s\n", 0), 0u);
  EXPECT_EQ(collective_rows_json(rows).size(), rows.size());
}

}  // namespace
}  // namespace meshsim

namespace meshsim {
namespace {

// The teaching page: a round per step plus round 0, and the last round of a ring all-reduce all
// finished (p x p green cells), the ring drawn as p arrows.
TEST(TeachingHtml, ARingAllReduceEndsAllGreen) {
  CollectiveSpec s;
  s.kind = CollKind::AllReduce;
  s.ranks = 4;
  s.bytes = 4096;
  const auto prog = AlgorithmRegistry::builtin().find("ring", s.kind)->build(s);
  const std::string page = teaching_html(buffer_view(*prog, s), s, "ring <4>", "formula text");
  auto count = [&](const std::string& needle, std::size_t from = 0) {
    int n = 0;
    for (std::size_t at = page.find(needle, from); at != std::string::npos; at = page.find(needle, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("<div class=\"round"), 7);  // round 0 and 2(p - 1) steps
  EXPECT_EQ(count("marker-end=\"url(#arrow)\""), 4);
  const std::size_t last = page.rfind("<div class=\"round");
  EXPECT_EQ(count("fill=\"#59a14f\"", last), 16);
  EXPECT_NE(page.find("ring &lt;4&gt;"), std::string::npos);  // the title escaped
  EXPECT_NE(page.find("formula text"), std::string::npos);
}

}  // namespace
}  // namespace meshsim
