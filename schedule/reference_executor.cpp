// Serial reference executor for step programs (see reference_executor.h).
#include "schedule/reference_executor.h"

#include <fmt/format.h>

#include <deque>
#include <map>
#include <utility>

#include "core/bf16.h"
#include "core/error.h"

namespace meshsim {
namespace {

constexpr Bytes kFloat = 4;

struct Message {
  std::vector<float> data;
  int sender_step = 0;
};

struct RankState {
  int step = 0;
  bool posted = false;  // the sends of `step` are queued
  Step current;
};

class Executor {
 public:
  Executor(const StepProgram& prog, const CollectiveSpec& spec, std::vector<std::vector<float>> inputs,
           ReduceIn reduce_in)
      : prog_(prog),
        spec_(spec),
        p_(prog.ranks()),
        reduce_in_(reduce_in),
        send_(std::move(inputs)),
        state_(static_cast<std::size_t>(p_)) {}

  std::vector<std::vector<float>> run() {
    setup_buffers();
    int unfinished = 0;
    for (int r = 0; r < p_; ++r)
      if (prog_.num_steps(r) > 0) ++unfinished;
    while (unfinished > 0) {
      bool progress = false;
      for (int r = 0; r < p_; ++r) {
        const int total = prog_.num_steps(r);
        if (state_[r].step >= total) continue;
        while (state_[r].step < total && advance(r)) progress = true;
        if (state_[r].step >= total) --unfinished;
      }
      if (!progress && unfinished > 0) throw_deadlock();
    }
    for (const auto& [pair, q] : queues_)
      if (!q.empty())
        throw Error(
            fmt::format("step program left {} message(s) from rank {} to rank {} unreceived (first sent at "
                        "step {}); every send needs a matching receive",
                        q.size(), pair.first, pair.second, q.front().sender_step));
    return std::move(*recv_);
  }

 private:
  void setup_buffers() {
    if (static_cast<int>(send_.size()) != p_)
      throw Error(fmt::format("reference executor: got {} input buffers for {} ranks", send_.size(), p_));
    if (spec_.kind != CollKind::AllToAll) {
      for (int r = 0; r < p_; ++r) check_size(r, send_[r], spec_.bytes);
      recv_ = &send_;
      return;
    }
    // All-to-all: separate receive buffers, blocks by source; copy the local block now.
    recv_store_.resize(static_cast<std::size_t>(p_));
    for (int r = 0; r < p_; ++r) {
      const RankBuffers b = rank_buffers(spec_, r);
      check_size(r, send_[r], b.send);
      recv_store_[r].assign(static_cast<std::size_t>(b.recv / kFloat), 0.0f);
      std::copy_n(send_[r].begin() + b.self_send / kFloat, b.own / kFloat,
                  recv_store_[r].begin() + b.self_recv / kFloat);
    }
    recv_ = &recv_store_;
  }

  void check_size(int r, const std::vector<float>& buf, Bytes bytes) const {
    if (static_cast<Bytes>(buf.size()) * kFloat != bytes)
      throw Error(fmt::format("reference executor: rank {} input has {} floats, the buffer needs {} bytes", r,
                              buf.size(), bytes));
  }

  // Checks a transfer against a buffer and returns its float range.
  std::pair<std::size_t, std::size_t> span(int r, const Transfer& t, const std::vector<float>& buf,
                                           const char* what) const {
    if (t.offset % kFloat != 0 || t.bytes % kFloat != 0)
      throw Error(
          fmt::format("reference executor: rank {} step {} {} [{}, +{}) is not whole float32 elements; "
                      "build the program with element_bytes = 4",
                      r, state_[r].step, what, t.offset, t.bytes));
    if (t.offset < 0 || t.bytes < 0 || t.offset + t.bytes > static_cast<Bytes>(buf.size()) * kFloat)
      throw Error(fmt::format("step program: rank {} step {} {} [{}, +{}) exceeds the {}-byte buffer", r,
                              state_[r].step, what, t.offset, t.bytes, buf.size() * kFloat));
    if (t.peer < 0 || t.peer >= p_ || t.peer == r)
      throw Error(fmt::format("step program: rank {} step {} {} names peer {} (group of {})", r, state_[r].step, what,
                              t.peer, p_));
    return {static_cast<std::size_t>(t.offset / kFloat), static_cast<std::size_t>(t.bytes / kFloat)};
  }

  // Runs one step of rank r if its receives are available; returns whether it did.
  bool advance(int r) {
    RankState& st = state_[r];
    if (!st.posted) {
      st.current.clear();
      prog_.step(r, st.step, st.current);
      for (const Transfer& t : st.current.sends) {  // eager: payload as of the step start
        const auto [off, len] = span(r, t, send_[r], "send");
        Message m;
        m.data.assign(send_[r].begin() + off, send_[r].begin() + off + len);
        m.sender_step = st.step;
        queues_[{r, t.peer}].push_back(std::move(m));
      }
      st.posted = true;
    }
    // All receives available? (several from one peer take consecutive queue entries)
    std::map<int, std::size_t> need;
    for (const Transfer& t : st.current.recvs)
      if (++need[t.peer] > queue_size(t.peer, r)) return false;
    std::vector<float>& buf = (*recv_)[r];
    for (const Transfer& t : st.current.recvs) {
      const auto [off, len] = span(r, t, buf, "receive");
      auto& q = queues_[{t.peer, r}];
      Message m = std::move(q.front());
      q.pop_front();
      if (m.data.size() != len)
        throw Error(
            fmt::format("step program: rank {} step {} expects {} bytes from rank {} but the message (sent at "
                        "its step {}) has {} bytes",
                        r, st.step, t.bytes, t.peer, m.sender_step, m.data.size() * kFloat));
      if (st.current.op == RecvOp::Reduce) {
        for (std::size_t i = 0; i < len; ++i) buf[off + i] += m.data[i];
        if (reduce_in_ == ReduceIn::Bf16) round_to_bf16(buf.data() + off, len);
      } else {
        std::copy(m.data.begin(), m.data.end(), buf.begin() + static_cast<std::ptrdiff_t>(off));
      }
    }
    ++st.step;
    st.posted = false;
    return true;
  }

  std::size_t queue_size(int from, int to) const {
    auto it = queues_.find({from, to});
    return it == queues_.end() ? 0 : it->second.size();
  }

  [[noreturn]] void throw_deadlock() const {
    for (int r = 0; r < p_; ++r) {
      const RankState& st = state_[r];
      if (st.step >= prog_.num_steps(r)) continue;
      std::map<int, std::size_t> need;
      for (const Transfer& t : st.current.recvs)
        if (++need[t.peer] > queue_size(t.peer, r))
          throw Error(
              fmt::format("step program deadlocked: rank {} at step {} waits for a message from rank {} "
                          "(rank {} is at step {} of {})",
                          r, st.step, t.peer, t.peer, state_[t.peer].step, prog_.num_steps(t.peer)));
    }
    throw Error("step program deadlocked");
  }

  const StepProgram& prog_;
  const CollectiveSpec& spec_;
  int p_;
  ReduceIn reduce_in_;
  std::vector<std::vector<float>> send_;
  std::vector<std::vector<float>> recv_store_;
  std::vector<std::vector<float>>* recv_ = nullptr;
  std::vector<RankState> state_;
  std::map<std::pair<int, int>, std::deque<Message>> queues_;
};

}  // namespace

std::vector<std::vector<float>> run_reference(const StepProgram& program, const CollectiveSpec& spec,
                                              std::vector<std::vector<float>> inputs, ReduceIn reduce_in) {
  validate_spec(spec);
  if (program.ranks() != spec.ranks)
    throw Error(fmt::format("reference executor: program has {} ranks but the spec {}", program.ranks(), spec.ranks));
  if (spec.bytes % kFloat != 0)
    throw Error(fmt::format("reference executor: bytes = {} is not a whole number of float32 values", spec.bytes));
  Executor ex(program, spec, std::move(inputs), reduce_in);
  return ex.run();
}

}  // namespace meshsim
