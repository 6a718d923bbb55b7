// The predicted-vs-measured comparison: text and JSON rendered from one hand-made table
// with known numbers (the exact bytes run and validate print), and the two builders' rows
// from a small schedule with known times.
#include "report/comparison.h"

#include <gtest/gtest.h>

#include <cmath>

#include "report/table.h"

namespace meshsim {
namespace {

TEST(TextTable, PadsEveryCellToItsColumnAndNeverCuts) {
  TextTable t({{"op", 6, Align::Left}, {"time", 8}, {"note", 4, Align::Left}});
  t.add_row({"ar", "1.00ms", "x"});
  t.add_row({"a_long_name", "2.5s"});  // longer than its column: pushes the line right
  EXPECT_EQ(t.text("  "),
            "  op         time note\n"
            "  ar       1.00ms x   \n"
            "  a_long_name     2.5s\n");
  EXPECT_THROW(t.add_row({"a", "b", "c", "d"}), std::invalid_argument);
}

// A collective workload's table, as validate prints it: two ops, predicted, and the total.
Comparison per_op() {
  Comparison c;
  c.shape = Comparison::Shape::PerOp;
  c.predicted = true;
  c.rows = {{"allreduce.0", 0, ComparedTime::of(ms(3.849)), 1.09, 2.18, ComparedTime::of(ms(2.935)), 31.14},
            {"allreduce.1", 0, ComparedTime::of(us(2.0)), 2097.15, 4194.3, ComparedTime::of(ms(2.935)), -99.93}};
  c.total.measured = ComparedTime::of_seconds(3.851e-3);
  c.total.predicted = ComparedTime::of_seconds(5.87e-3);
  c.total.error_pct = -34.4;
  return c;
}

TEST(Comparison, PerOpText) {
  EXPECT_EQ(comparison_text(per_op()),
            "  op                   measured        algbw        busbw    predicted    error\n"
            "  allreduce.0           3.849ms      1.09GB/s      2.18GB/s      2.935ms   +31.1%\n"
            "  allreduce.1            2.00us   2097.15GB/s   4194.30GB/s      2.935ms   -99.9%\n"
            "  total measured 3.851ms, predicted 5.870ms (-34.4%)\n");
  Comparison run = per_op();  // `run`: nothing predicted
  run.predicted = false;
  EXPECT_EQ(comparison_text(run),
            "  op                   measured        algbw        busbw\n"
            "  allreduce.0           3.849ms      1.09GB/s      2.18GB/s\n"
            "  allreduce.1            2.00us   2097.15GB/s   4194.30GB/s\n"
            "  total measured 3.851ms\n");
}

TEST(Comparison, PerOpJson) {
  nlohmann::ordered_json j{{"backend", "cpu"}};
  add_comparison_json(j, per_op());
  EXPECT_EQ(
      j.dump(),
      R"({"backend":"cpu","ops":[)"
      R"({"op":"allreduce.0","measured_s":0.003849,"algbw_GBps":1.09,"busbw_GBps":2.18,"predicted_s":0.002935,"error_pct":31.14},)"
      R"({"op":"allreduce.1","measured_s":2e-06,"algbw_GBps":2097.15,"busbw_GBps":4194.3,"predicted_s":0.002935,"error_pct":-99.93}],)"
      R"("measured_total_s":0.003851,"predicted_total_s":0.00587,"error_pct":-34.4})");
  Comparison run = per_op();
  run.predicted = false;
  nlohmann::ordered_json r;
  add_comparison_json(r, run);
  EXPECT_EQ(
      r.dump(),
      R"({"ops":[{"op":"allreduce.0","measured_s":0.003849,"algbw_GBps":1.09,"busbw_GBps":2.18},)"
      R"({"op":"allreduce.1","measured_s":2e-06,"algbw_GBps":2097.15,"busbw_GBps":4194.3}],"measured_total_s":0.003851})");
}

// A training schedule's table: op kinds, then the iteration row and the note.
Comparison per_op_kind() {
  Comparison c;
  c.shape = Comparison::Shape::PerOpKind;
  c.predicted = true;
  c.rows = {{"gemm", 78, ComparedTime::of_seconds(909.4e-6), 0, 0, ComparedTime::of_seconds(837.18e-6), 8.6},
            {"pp recv", 4, ComparedTime::of_seconds(12.582e-3), 0, 0, ComparedTime::of_seconds(0), 0},
            {"tp allreduce", 4, ComparedTime::of_seconds(2.055e-3), 0, 0, ComparedTime::of_seconds(626.82e-6), 227.84}};
  c.total = {"iteration", 0, ComparedTime::of(ms(20.313)), 0, 0, ComparedTime::of(ms(8.5)), 138.98};
  return c;
}

TEST(Comparison, PerOpKindText) {
  EXPECT_EQ(comparison_text(per_op_kind()),
            "  op kind (summed)          ops     measured    predicted    error\n"
            "  gemm                       78     909.40us     837.18us    +8.6%\n"
            "  pp recv                     4     12.582ms          0ps        -\n"
            "  tp allreduce                4      2.055ms     626.82us  +227.8%\n"
            "  iteration                         20.313ms      8.500ms  +139.0%\n"
            "  (op kinds: each op's time, averaged over its stage's ranks, summed over ops and stages; a "
            "collective's time includes waiting for its slowest member)\n");
  Comparison empty_row = per_op_kind();  // nothing measured, nothing predicted: no row
  empty_row.rows.push_back({"cp send", 2, ComparedTime::of_seconds(0), 0, 0, ComparedTime::of_seconds(0), 0});
  EXPECT_EQ(comparison_text(empty_row), comparison_text(per_op_kind()));
  Comparison run = per_op_kind();
  run.predicted = false;
  EXPECT_EQ(comparison_text(run),
            "  op kind (summed)          ops     measured\n"
            "  gemm                       78     909.40us\n"
            "  pp recv                     4     12.582ms\n"
            "  tp allreduce                4      2.055ms\n"
            "  iteration                         20.313ms\n"
            "  (op kinds: each op's time, averaged over its stage's ranks, summed over ops and stages; a "
            "collective's time includes waiting for its slowest member)\n");
}

TEST(Comparison, PerOpKindJson) {
  nlohmann::ordered_json j;
  add_comparison_json(j, per_op_kind());
  EXPECT_EQ(j.dump(),
            R"({"kinds":[{"kind":"gemm","ops":78,"measured_s":0.0009094,"predicted_s":0.00083718,"error_pct":8.6},)"
            R"({"kind":"pp recv","ops":4,"measured_s":0.012582,"predicted_s":0.0,"error_pct":0.0},)"
            R"({"kind":"tp allreduce","ops":4,"measured_s":0.002055,"predicted_s":0.00062682,"error_pct":227.84}],)"
            R"("measured_iteration_s":0.020313,"predicted_iteration_s":0.0085,"error_pct":138.98})");
}

// A time summed in seconds prints as the whole picoseconds below it, and keeps its exact
// seconds for the JSON.
TEST(Comparison, ATimeInSecondsPrintsItsWholePicoseconds) {
  const ComparedTime t = ComparedTime::of_seconds(1.0000000015e-3);  // 1'000'000'001.5 ps
  EXPECT_EQ(t.time.ps(), 1'000'000'001);
  EXPECT_EQ(t.seconds, 1.0000000015e-3);
  EXPECT_EQ(ComparedTime::of(ps(1234)).seconds, ps(1234).seconds());
}

TEST(Comparison, ErrorIsMeasuredOverPredictedAndZeroWithoutAPrediction) {
  EXPECT_DOUBLE_EQ(error_pct(3.0, 2.0), 50.0);
  EXPECT_DOUBLE_EQ(error_pct(1.0, 2.0), -50.0);
  EXPECT_EQ(error_pct(1.0, 0.0), 0.0);
}

Op collective(const std::string& name, const std::string& axis, CollKind k) {
  Op op;
  op.kind = OpKind::Collective;
  op.name = name;
  op.axis = MeshAxis::parse(axis, "axis");
  op.coll = k;
  return op;
}

// op_comparison: algbw = bytes / time, busbw = algbw x 2(p-1)/p for an all-reduce on 4
// ranks; the errors of the rows and of the total against the simulated trace.
TEST(Comparison, PerOpRowsFromMeasuredAndPredictedTimes) {
  Schedule s;
  s.roles = {Role{
      "all", 0, {collective("ar.0", "rank", CollKind::AllReduce), collective("ar.1", "rank", CollKind::AllReduce)}}};
  ScheduleSimResult sim;
  sim.trace.events = {{0, 0, -1, ms(1), ms(3)}, {0, 1, -1, ms(3), ms(5)}};  // 2 ms each
  const Comparison c = op_comparison(s, {ms(4), ms(1)}, &sim, CollKind::AllReduce, 1'000'000'000, 4);
  ASSERT_EQ(c.rows.size(), 2u);
  EXPECT_EQ(c.rows[0].name, "ar.0");
  EXPECT_DOUBLE_EQ(c.rows[0].algbw_GBps, 250.0);
  EXPECT_DOUBLE_EQ(c.rows[0].busbw_GBps, 375.0);
  EXPECT_EQ(c.rows[0].predicted.time, ms(2));
  EXPECT_DOUBLE_EQ(c.rows[0].error_pct, 100.0);
  EXPECT_DOUBLE_EQ(c.rows[1].error_pct, -50.0);
  EXPECT_DOUBLE_EQ(c.total.measured.seconds, 5e-3);
  EXPECT_DOUBLE_EQ(c.total.predicted.seconds, 4e-3);
  EXPECT_DOUBLE_EQ(c.total.error_pct, 25.0);
  // A one-rank run predicts nothing: the rows say 0, the total +inf% (JSON null), as always.
  ScheduleSimResult free;
  free.trace.events = {{0, 0, -1, ms(1), ms(1)}, {0, 1, -1, ms(1), ms(1)}};
  const Comparison one = op_comparison(s, {ms(4), ms(1)}, &free, CollKind::AllReduce, 1'000'000'000, 1);
  EXPECT_EQ(one.rows[0].error_pct, 0.0);
  EXPECT_TRUE(std::isinf(one.total.error_pct));
  EXPECT_NE(comparison_text(one).find("predicted 0ps (+inf%)"), std::string::npos) << comparison_text(one);
  nlohmann::ordered_json j;
  add_comparison_json(j, one);
  EXPECT_TRUE(j["error_pct"].is_number());  // stored as inf; dump() writes it as null
  EXPECT_NE(j.dump().find(R"("error_pct":null)"), std::string::npos) << j.dump();
}

// op_kind_comparison on two stages of two ranks each: each op's time averaged over its
// stage's ranks, summed per kind over ops and stages; the iteration is the latest end.
TEST(Comparison, PerOpKindRowsAverageOverAStagesRanks) {
  Op gemm;
  gemm.kernel.kind = KernelKind::Gemm;
  Op send;
  send.kind = OpKind::Send;
  Op recv;
  recv.kind = OpKind::Recv;
  Schedule s;
  s.roles = {Role{"stage 0", 0, {gemm, send, collective("tp.ar", "tp", CollKind::AllReduce)}},
             Role{"stage 1", 1, {recv, gemm}}};
  // Ranks 0 and 2 run stage 0, ranks 1 and 3 stage 1 (only the role matters here).
  const std::vector<TraceEvent> measured = {
      {0, 0, 0, ms(0), ms(2)}, {0, 1, 0, ms(2), ms(3)}, {0, 2, 0, ms(3), ms(5)},  // rank 0
      {1, 0, 1, ms(0), ms(3)}, {1, 1, 1, ms(3), ms(7)},                           // rank 1
      {0, 0, 2, ms(0), ms(4)}, {0, 1, 2, ms(4), ms(5)}, {0, 2, 2, ms(5), ms(6)},  // rank 2
      {1, 0, 3, ms(0), ms(3)}, {1, 1, 3, ms(3), ms(9)}};                          // rank 3
  ScheduleSimResult sim;
  sim.iteration = ms(8);
  sim.trace.events = {{0, 0, -1, ms(0), ms(2)},
                      {0, 1, -1, ms(2), ms(3)},
                      {0, 2, -1, ms(3), ms(4)},
                      {1, 0, -1, ms(0), ms(3)},
                      {1, 1, -1, ms(3), ms(8)}};
  const Comparison c = op_kind_comparison(s, measured, 4, &sim);
  ASSERT_EQ(c.rows.size(), 4u);  // by name: gemm, pp recv, pp send, tp allreduce
  EXPECT_EQ(c.rows[0].name, "gemm");
  EXPECT_EQ(c.rows[0].ops, 2);
  EXPECT_NEAR(c.rows[0].measured.seconds, 3e-3 + 5e-3, 1e-15);  // stage 0: (2 + 4) / 2; stage 1: (4 + 6) / 2
  EXPECT_NEAR(c.rows[0].predicted.seconds, 2e-3 + 5e-3, 1e-15);
  EXPECT_EQ(c.rows[1].name, "pp recv");
  EXPECT_NEAR(c.rows[1].measured.seconds, 3e-3, 1e-15);
  EXPECT_EQ(c.rows[2].name, "pp send");
  EXPECT_EQ(c.rows[3].name, "tp allreduce");
  EXPECT_NEAR(c.rows[3].measured.seconds, 1.5e-3, 1e-15);
  EXPECT_EQ(c.total.name, "iteration");
  EXPECT_EQ(c.total.measured.time, ms(9));
  EXPECT_EQ(c.total.predicted.time, ms(8));
  EXPECT_NEAR(c.total.error_pct, 12.5, 1e-9);
}

TEST(Comparison, OpKindLabels) {
  Op gemm;
  gemm.kernel.kind = KernelKind::Gemm;
  EXPECT_EQ(op_kind_label(gemm), "gemm");
  EXPECT_EQ(op_kind_label(collective("x", "cp", CollKind::SendRecv)), "cp sendrecv");
  Op send;
  send.kind = OpKind::Send;
  EXPECT_EQ(op_kind_label(send), "pp send");
}

}  // namespace
}  // namespace meshsim
