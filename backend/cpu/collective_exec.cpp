// One rank of a step program over sockets (see collective_exec.h).
#include "backend/cpu/collective_exec.h"

#include <algorithm>
#include <fmt/format.h>

#include "core/error.h"
#include "kernels/reduce.h"

namespace meshsim::cpu {
namespace {

using Clock = std::chrono::steady_clock;
constexpr Bytes kFloat = 4;

bool overlaps(const Transfer& a, const Transfer& b) {
  return a.bytes > 0 && b.bytes > 0 && a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
}

class RankRunner {
 public:
  RankRunner(Transport& t, const StepProgram& prog, const CollectiveSpec& spec, std::vector<float>& buffer,
             std::span<const int> group)
      : t_(t), prog_(prog), spec_(spec), group_(group), r_(local_rank(t, group)), p_(prog.ranks()), buffer_(buffer) {}

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
  static int local_rank(const Transport& t, std::span<const int> group) {
    if (group.empty()) return t.rank();
    const auto it = std::find(group.begin(), group.end(), t.rank());
    if (it == group.end())
      throw Error(fmt::format("rank {}: not a member of the group it was asked to run a collective in", t.rank()));
    return static_cast<int>(it - group.begin());
  }

  // The transport rank of group member `peer`.
  int global(int peer) const { return group_.empty() ? peer : group_[static_cast<std::size_t>(peer)]; }

  void setup_buffers() {
    const int members = group_.empty() ? t_.world() : static_cast<int>(group_.size());
    if (prog_.ranks() != spec_.ranks || members != spec_.ranks)
      throw Error(fmt::format("rank {}: the program has {} ranks, the spec {} and the group {}; run the "
                              "collective on a group of the spec's size",
                              r_, prog_.ranks(), spec_.ranks, members));
    for (const int g : group_)
      if (g < 0 || g >= t_.world())
        throw Error(fmt::format("rank {}: group member {} is not a rank of the transport (world {})", t_.rank(), g,
                                t_.world()));
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
      throw Error(fmt::format("rank {}: step {} {} [{}, +{}) is not whole float32 elements; build the program with "
                              "element_bytes = 4",
                              r_, s, what, t.offset, t.bytes));
    if (t.offset < 0 || t.bytes < 0 || t.offset + t.bytes > static_cast<Bytes>(buf.size()) * kFloat)
      throw Error(fmt::format("rank {}: step {} {} [{}, +{}) exceeds the {}-byte buffer", r_, s, what, t.offset,
                              t.bytes, buf.size() * kFloat));
    if (t.peer < 0 || t.peer >= p_ || t.peer == r_)
      throw Error(fmt::format("rank {}: step {} {} names peer {} (group of {})", r_, s, what, t.peer, p_));
    return buf.data() + t.offset / kFloat;
  }

  void run_step(int s, int steps, const Step& st) {
    const bool shared = send_ == recv_;  // sends and receives touch one buffer
    const std::size_t nr = st.recvs.size();
    // Receives overlapping another receive of the step are staged and applied in order.
    staged_.assign(nr, false);
    for (std::size_t i = 0; i < nr; ++i)
      for (std::size_t j = i + 1; j < nr; ++j)
        if (overlaps(st.recvs[i], st.recvs[j])) staged_[i] = staged_[j] = true;
    sends_.clear();
    snapshots_.resize(std::max(snapshots_.size(), st.sends.size()));
    for (std::size_t i = 0; i < st.sends.size(); ++i) {
      const Transfer& t = st.sends[i];
      const float* src = at(*send_, t, s, "send");
      bool clobbered = false;
      if (shared)
        for (const Transfer& rv : st.recvs) clobbered = clobbered || overlaps(t, rv);
      if (clobbered) {  // the payload must be the buffer as of the step start
        snapshots_[i].assign(src, src + t.bytes / kFloat);
        src = snapshots_[i].data();
      }
      sends_.push_back(SendOp{global(t.peer), src, static_cast<std::size_t>(t.bytes)});
    }
    recvs_.clear();
    stage_bufs_.resize(std::max(stage_bufs_.size(), nr));
    for (std::size_t i = 0; i < nr; ++i) {
      const Transfer& t = st.recvs[i];
      float* dst = at(*recv_, t, s, "receive");
      if (staged_[i]) {
        stage_bufs_[i].resize(static_cast<std::size_t>(t.bytes / kFloat));
        recvs_.push_back(RecvOpDesc{global(t.peer), stage_bufs_[i].data(), static_cast<std::size_t>(t.bytes), RecvMode::Copy});
      } else {
        const RecvMode mode = st.op == RecvOp::Reduce ? RecvMode::SumFloat : RecvMode::Copy;
        recvs_.push_back(RecvOpDesc{global(t.peer), dst, static_cast<std::size_t>(t.bytes), mode});
      }
    }
    t_.exchange(sends_, recvs_, fmt::format("step {} of {} of {} {}", s, steps, p_, to_string(spec_.kind)));
    for (std::size_t i = 0; i < nr; ++i) {
      if (!staged_[i]) continue;
      const Transfer& t = st.recvs[i];
      float* dst = recv_->data() + t.offset / kFloat;
      const std::vector<float>& src = stage_bufs_[i];
      if (st.op == RecvOp::Reduce)
        kernels::reduce_sum_cpu(dst, src.data(), src.size());
      else
        std::copy(src.begin(), src.end(), dst);
    }
  }

  Transport& t_;
  const StepProgram& prog_;
  const CollectiveSpec& spec_;
  std::span<const int> group_;  // group member -> transport rank (empty: identity)
  int r_;
  int p_;
  std::vector<float>& buffer_;
  std::vector<float>* send_ = nullptr;
  std::vector<float>* recv_ = nullptr;
  std::vector<float> recv_store_;  // all-to-all receive buffer
  // Per-step scratch, reused across steps.
  std::vector<bool> staged_;
  std::vector<std::vector<float>> snapshots_, stage_bufs_;
  std::vector<SendOp> sends_;
  std::vector<RecvOpDesc> recvs_;
};

}  // namespace

CollectiveRun run_collective_cpu(Transport& transport, const StepProgram& program, const CollectiveSpec& spec,
                                 std::vector<float>& buffer, std::span<const int> group) {
  validate_spec(spec);
  RankRunner runner(transport, program, spec, buffer, group);
  return runner.run();
}

}  // namespace meshsim::cpu
