// One rank of a step program over sockets (see collective_exec.h).
#include "backend/cpu/collective_exec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/bf16.h"
#include "core/error.h"
#include "kernels/reduce.h"

namespace meshsim::cpu {
namespace {

using Clock = std::chrono::steady_clock;
constexpr Bytes kFloat = 4;

class RankRunner {
 public:
  RankRunner(Transport& t, const StepProgram& prog, const CollectiveSpec& spec, std::vector<float>& buffer,
             std::span<const int> members, ReduceIn reduce_in)
      : t_(t),
        prog_(prog),
        spec_(spec),
        members_(members.begin(), members.end()),
        p_(prog.ranks()),
        reduce_in_(reduce_in),
        buffer_(buffer) {
    if (members_.empty())
      for (int q = 0; q < t.world(); ++q) members_.push_back(q);
    r_ = static_cast<int>(std::find(members_.begin(), members_.end(), t.rank()) - members_.begin());
    if (r_ == static_cast<int>(members_.size()))
      throw Error(fmt::format("rank {}: not a member of the group {}; run the collective on the group's ranks only",
                              t.rank(), fmt::join(members_, ",")));
    for (int q : members_)
      if (q < 0 || q >= t.world())
        throw Error(
            fmt::format("rank {}: group member {} is not a rank of the {}-rank transport", t.rank(), q, t.world()));
  }

  CollectiveRun run() {
    const auto t0 = Clock::now();
    setup_buffers();
    CollectiveRun out;
    const int steps = prog_.num_steps(r_);
    out.steps.reserve(static_cast<std::size_t>(std::max(steps, 0)));
    Step st;
    for (int s = 0; s < steps; ++s) {
      StepTiming timing{s, Clock::now(), {}};
      st.clear();
      prog_.step(r_, s, st);
      run_step(s, steps, st);
      timing.end = Clock::now();
      out.steps.push_back(timing);
    }
    if (spec_.kind == CollKind::AllToAll) buffer_ = std::move(recv_store_);
    out.total = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0);
    return out;
  }

 private:
  void setup_buffers() {
    if (prog_.ranks() != spec_.ranks || static_cast<int>(members_.size()) != spec_.ranks)
      throw Error(
          fmt::format("rank {}: the program has {} ranks, the spec {} and the group {}; run the "
                      "collective on a group of the program's size",
                      r_, prog_.ranks(), spec_.ranks, members_.size()));
    if (spec_.bytes % kFloat != 0)
      throw Error(fmt::format("rank {}: bytes = {} is not a whole number of float32 values", r_, spec_.bytes));
    send_ = &buffer_;
    recv_ = &buffer_;
    if (spec_.kind != CollKind::AllToAll) {
      check_size(buffer_.size(), spec_.bytes);
      return;
    }
    const RankBuffers b = rank_buffers(spec_, r_);
    check_size(buffer_.size(), b.send);
    recv_store_.assign(static_cast<std::size_t>(b.recv / kFloat), 0.0f);
    std::copy_n(buffer_.begin() + b.self_send / kFloat, b.own / kFloat, recv_store_.begin() + b.self_recv / kFloat);
    recv_ = &recv_store_;
  }

  void check_size(std::size_t floats, Bytes bytes) const {
    if (static_cast<Bytes>(floats) * kFloat != bytes)
      throw Error(fmt::format("rank {}: the buffer has {} floats, the {} collective needs {} bytes", r_, floats,
                              to_string(spec_.kind), bytes));
  }

  float* at(std::vector<float>& buf, const Transfer& t, int s, const char* what) const {
    if (t.offset % kFloat != 0 || t.bytes % kFloat != 0)
      throw Error(
          fmt::format("rank {}: step {} {} [{}, +{}) is not whole float32 elements; build the program with "
                      "element_bytes = 4",
                      r_, s, what, t.offset, t.bytes));
    if (t.offset < 0 || t.bytes < 0 || t.offset + t.bytes > static_cast<Bytes>(buf.size()) * kFloat)
      throw Error(fmt::format("rank {}: step {} {} [{}, +{}) exceeds the {}-byte buffer", r_, s, what, t.offset,
                              t.bytes, buf.size() * kFloat));
    if (t.peer < 0 || t.peer >= p_ || t.peer == r_)
      throw Error(fmt::format("rank {}: step {} {} names peer {} (group of {})", r_, s, what, t.peer, p_));
    return buf.data() + t.offset / kFloat;
  }

  // Buffers per schedule/collective.h's layout_step: the transport sums a reducing receive
  // on arrival, so only receives that overlap another receive of the step are staged.
  void run_step(int s, int steps, const Step& st) {
    const StepLayout l = layout_step(st, send_ == recv_, /*stage_reductions=*/false);
    stage_.resize(std::max(stage_.size(), static_cast<std::size_t>(l.stage_bytes / kFloat)));
    snapshot_.resize(std::max(snapshot_.size(), static_cast<std::size_t>(l.snapshot_bytes / kFloat)));
    sends_.clear();
    for (std::size_t i = 0; i < st.sends.size(); ++i) {
      const Transfer& t = st.sends[i];
      const float* src = at(*send_, t, s, "send");
      if (l.send_snapshot[i] >= 0) {  // the payload must be the buffer as of the step start
        float* copy = snapshot_.data() + l.send_snapshot[i] / kFloat;
        std::copy_n(src, t.bytes / kFloat, copy);
        src = copy;
      }
      sends_.push_back(SendOp{members_[static_cast<std::size_t>(t.peer)], src, static_cast<std::size_t>(t.bytes)});
    }
    recvs_.clear();
    for (std::size_t i = 0; i < st.recvs.size(); ++i) {
      const Transfer& t = st.recvs[i];
      float* dst = at(*recv_, t, s, "receive");
      const bool staged = l.recv_stage[i] >= 0;
      const RecvMode mode = st.op == RecvOp::Reduce && !staged ? RecvMode::SumFloat : RecvMode::Copy;
      recvs_.push_back(RecvOpDesc{members_[static_cast<std::size_t>(t.peer)],
                                  staged ? stage_.data() + l.recv_stage[i] / kFloat : dst,
                                  static_cast<std::size_t>(t.bytes), mode});
    }
    t_.exchange(sends_, recvs_, fmt::format("step {} of {} of {} {}", s, steps, p_, to_string(spec_.kind)));
    const bool round = st.op == RecvOp::Reduce && reduce_in_ == ReduceIn::Bf16;
    for (std::size_t i = 0; i < st.recvs.size(); ++i) {
      const Transfer& t = st.recvs[i];
      float* dst = recv_->data() + t.offset / kFloat;
      const auto n = static_cast<std::size_t>(t.bytes / kFloat);
      if (l.recv_stage[i] < 0) {  // summed on arrival: a bf16 sum is rounded now
        if (round) round_to_bf16(dst, n);
        continue;
      }
      const float* src = stage_.data() + l.recv_stage[i] / kFloat;  // staged receives apply in order
      if (st.op == RecvOp::Reduce)
        kernels::reduce_sum_cpu(dst, src, n);
      else
        std::copy_n(src, n, dst);
      if (round) round_to_bf16(dst, n);
    }
  }

  Transport& t_;
  const StepProgram& prog_;
  const CollectiveSpec& spec_;
  std::vector<int> members_;  // group rank -> transport rank
  int r_ = 0;                 // this rank's index in the group
  int p_;
  ReduceIn reduce_in_;
  std::vector<float>& buffer_;
  std::vector<float>* send_ = nullptr;
  std::vector<float>* recv_ = nullptr;
  std::vector<float> recv_store_;  // all-to-all receive buffer
  // Per-step scratch (stage and snapshot areas of layout_step), reused across steps.
  std::vector<float> stage_, snapshot_;
  std::vector<SendOp> sends_;
  std::vector<RecvOpDesc> recvs_;
};

}  // namespace

CollectiveRun run_collective_cpu(Transport& transport, const StepProgram& program, const CollectiveSpec& spec,
                                 std::vector<float>& buffer, std::span<const int> members, ReduceIn reduce_in) {
  validate_spec(spec);
  RankRunner runner(transport, program, spec, buffer, members, reduce_in);
  return runner.run();
}

}  // namespace meshsim::cpu
