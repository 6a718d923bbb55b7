// Test double for GpuApi: no GPU, host memory, a log of calls, failures on demand.
//
//   FakeGpuApi api;
//   api.fail("gemm", /*status=*/13);               // the first gemm returns 13
//   ... run the executor ...
//   EXPECT_EQ(api.count("malloc"), 1);
//
// Memory is host memory, so the kernels run on the host (reduce_sum_cpu, copies); sends
// and receives move nothing. Every record stamps its event with a fake time (0.5 ms per
// record, in call order) and elapsed times are differences of those stamps. Events
// finish at once unless `events_finish` is false; comm_get_async_error reports
// `async_error` once `async_after_polls` polls have passed.
//
// Blocking point-to-point (FakeWire): fakes of several ranks, each driven by its own
// thread, share one wire. Then an ncclSend/ncclRecv on the world communicator blocks the
// calling thread until the peer has posted the other end (messages match in order per
// direction, as NCCL's do), and a group blocks at group_end until every message in it is
// matched: NCCL's GPU-side blocking with every operation of a rank run one after another,
// the worst case NCCL allows. A wait longer than wire.timeout gives up and returns
// kFakeDeadlock (ncclInternalError), so a deadlock fails a test instead of hanging it;
// a size mismatch returns ncclInvalidArgument. Split communicators do not block.
//
//   FakeWire wire;                    // shared
//   FakeGpuApi a, b;  a.wire = &wire;  b.wire = &wire;   // then run rank 0 on a, rank 1 on b
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/gpu_api.h"
#include "kernels/reduce.h"
#include "kernels/stream_pass.h"

namespace meshsim::cuda {

inline constexpr int kFakeDeadlock = 3;  // ncclInternalError

class FakeWire {
 public:
  std::chrono::milliseconds timeout{2000};

  // Posts the sends and receives of `me` (peer, bytes each), then waits until each is
  // matched. Returns 0, kFakeDeadlock on timeout, 4 on a size mismatch.
  int exchange(int me, const std::vector<std::pair<int, std::size_t>>& sends,
               const std::vector<std::pair<int, std::size_t>>& recvs) {
    std::unique_lock<std::mutex> lock(mu_);
    std::vector<std::tuple<int, int, std::size_t>> mine;  // (from, to, index)
    for (const auto& [peer, bytes] : sends) {
      auto& q = sends_[{me, peer}];
      q.push_back(bytes);
      mine.emplace_back(me, peer, q.size() - 1);
    }
    for (const auto& [peer, bytes] : recvs) {
      auto& q = recvs_[{peer, me}];
      q.push_back(bytes);
      mine.emplace_back(peer, me, q.size() - 1);
    }
    cv_.notify_all();
    auto matched = [&] {
      for (const auto& [from, to, k] : mine)
        if (sends_[{from, to}].size() <= k || recvs_[{from, to}].size() <= k) return false;
      return true;
    };
    if (!cv_.wait_for(lock, timeout, matched)) {
      ++deadlocks;
      return kFakeDeadlock;
    }
    for (const auto& [from, to, k] : mine)
      if (sends_[{from, to}][k] != recvs_[{from, to}][k]) return 4;
    return 0;
  }
  int deadlocks = 0;  // read after the threads have joined

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int, int>, std::vector<std::size_t>> sends_, recvs_;  // (from, to) -> message sizes, in order
};

class FakeGpuApi : public GpuApi {
 public:
  FakeWire* wire = nullptr;  // blocking point-to-point with other ranks' fakes (see above)
  std::vector<std::string> log;
  bool events_finish = true;
  int async_error = 0;
  int async_after_polls = 0;

  void fail(const std::string& call, int status, int after = 0) { fails_[call] = {status, after}; }
  int count(const std::string& call) const {
    return static_cast<int>(std::count_if(
        log.begin(), log.end(), [&](const std::string& l) { return l == call || l.rfind(call + " ", 0) == 0; }));
  }
  bool has(const std::string& line) const { return std::find(log.begin(), log.end(), line) != log.end(); }
  // The name a handle was created with ("stream#2", "comm#1", "event#7").
  std::string name(const void* h) const {
    auto it = names_.find(h);
    return it == names_.end() ? "?" : it->second;
  }

  std::string error_string(Lib lib, int status) override {
    return "fake " + std::string(to_string(lib)) + " error " + std::to_string(status);
  }
  int set_device(int d) override { return call("set_device " + std::to_string(d)); }
  int malloc(void** p, std::size_t bytes) override {
    if (int e = call("malloc " + std::to_string(bytes))) return e;
    blocks_.push_back(std::make_unique<std::vector<float>>((bytes + 3) / 4 + 1));
    *p = blocks_.back()->data();
    return 0;
  }
  int free(void*) override { return call("free"); }
  int memset_async(void* p, int v, std::size_t bytes, StreamH) override {
    if (int e = call("memset " + std::to_string(bytes))) return e;
    std::fill_n(static_cast<char*>(p), bytes, static_cast<char>(v));
    return 0;
  }
  int memcpy_to_device(void* dst, const void* src, std::size_t bytes) override {
    if (int e = call("memcpy_to_device")) return e;
    std::copy_n(static_cast<const char*>(src), bytes, static_cast<char*>(dst));
    return 0;
  }
  int memcpy_to_host(void* dst, const void* src, std::size_t bytes) override {
    if (int e = call("memcpy_to_host")) return e;
    std::copy_n(static_cast<const char*>(src), bytes, static_cast<char*>(dst));
    return 0;
  }
  int stream_create(StreamH* s) override { return make("stream_create", "stream", s); }
  int stream_destroy(StreamH s) override { return call("stream_destroy " + name(s)); }
  int event_create(EventH* e) override { return make("event_create", "event", e); }
  int event_destroy(EventH e) override { return call("event_destroy " + name(e)); }
  int event_record(EventH e, StreamH s) override {
    if (int r = call("record " + name(e) + " on " + name(s))) return r;
    stamp_[e] = 0.5f * static_cast<float>(++records_);
    return 0;
  }
  int stream_wait_event(StreamH s, EventH e) override { return call("wait " + name(s) + " for " + name(e)); }
  int event_query(EventH, bool* done) override {
    if (int r = call("query")) return r;
    *done = events_finish;
    return 0;
  }
  int event_elapsed_ms(float* ms, EventH a, EventH b) override {
    if (int r = call("elapsed")) return r;
    *ms = stamp_[b] - stamp_[a];
    return 0;
  }
  int get_unique_id(std::string* id) override {
    if (int r = call("get_unique_id")) return r;
    *id = std::string(kUniqueIdBytes, 'u');
    return 0;
  }
  int comm_init_rank(CommH* c, int n, const std::string&, int rank) override {
    if (int e = make("comm_init_rank n=" + std::to_string(n) + " rank=" + std::to_string(rank), "comm", c)) return e;
    world_ = *c;
    rank_ = rank;
    return 0;
  }
  int comm_split(CommH, int color, int key, CommH* out) override {
    return make("comm_split color=" + std::to_string(color) + " key=" + std::to_string(key), "comm", out);
  }
  int comm_get_async_error(CommH, int* a) override {
    if (int r = call("async_poll")) return r;
    *a = ++polls_ > async_after_polls ? async_error : 0;
    return 0;
  }
  int comm_abort(CommH c) override { return call("abort " + name(c)); }
  int comm_destroy(CommH c) override { return call("comm_destroy " + name(c)); }
  int group_start() override {
    ++depth_;
    return call("group_start");
  }
  int group_end() override {
    if (int e = call("group_end")) return e;
    if (depth_ > 0 && --depth_ == 0 && wire != nullptr && (!group_sends_.empty() || !group_recvs_.empty())) {
      const int r = wire->exchange(rank_, group_sends_, group_recvs_);
      group_sends_.clear();
      group_recvs_.clear();
      if (r != 0) log.push_back("blocked");
      return r;
    }
    return 0;
  }
  int send(const void*, std::size_t bytes, int peer, CommH c, StreamH) override {
    if (int e = call("send " + std::to_string(bytes) + " to " + std::to_string(peer) + " on " + name(c))) return e;
    return p2p(true, peer, bytes, c);
  }
  int recv(void*, std::size_t bytes, int peer, CommH c, StreamH) override {
    if (int e = call("recv " + std::to_string(bytes) + " from " + std::to_string(peer) + " on " + name(c))) return e;
    return p2p(false, peer, bytes, c);
  }
  int collective(CollKind kind, const void*, void*, std::size_t count, DType t, int root, CommH c, StreamH) override {
    return call("collective " + std::string(to_string(kind)) + " count=" + std::to_string(count) + " " + to_string(t) +
                " root=" + std::to_string(root) + " on " + name(c));
  }
  int blas_create(BlasH* h) override { return make("blas_create", "blas", h); }
  int blas_destroy(BlasH h) override { return call("blas_destroy " + name(h)); }
  int blas_set_stream(BlasH h, StreamH s) override { return call("blas_set_stream " + name(h) + " " + name(s)); }
  int blas_set_workspace(BlasH h, void*, std::size_t bytes) override {
    return call("blas_set_workspace " + name(h) + " " + std::to_string(bytes));
  }
  int gemm(BlasH h, std::int64_t m, std::int64_t n, std::int64_t k, DType t, const void*, const void*, void*) override {
    return call("gemm " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) + " " + to_string(t) +
                " " + name(h));
  }
  int reduce_sum(float* dst, const float* src, std::size_t n, StreamH) override {
    if (int e = call("reduce_sum " + std::to_string(n))) return e;
    kernels::reduce_sum_cpu(dst, src, n);
    return 0;
  }
  // Runs the call's CPU reference on the (host) workspace.
  int kernel(const KernelCall& c, float* ws, StreamH) override {
    if (int e = call("kernel " + c.text())) return e;
    run_kernel_call_cpu(c, ws);
    return 0;
  }
  int stream_pass(float* dst, const float* src, std::size_t n, StreamH) override {
    if (int e = call("stream_pass " + std::to_string(n))) return e;
    kernels::stream_pass_cpu(dst, src, n, 1.0f);
    return 0;
  }

 private:
  int p2p(bool is_send, int peer, std::size_t bytes, CommH c) {
    if (wire == nullptr || c != world_) return 0;
    auto& list = is_send ? group_sends_ : group_recvs_;
    if (depth_ > 0) {
      list.emplace_back(peer, bytes);
      return 0;
    }
    const std::vector<std::pair<int, std::size_t>> one{{peer, bytes}};
    const int r = is_send ? wire->exchange(rank_, one, {}) : wire->exchange(rank_, {}, one);
    if (r != 0) log.push_back("blocked");
    return r;
  }
  int call(const std::string& line) {
    log.push_back(line);
    const std::string key = line.substr(0, line.find(' '));
    auto it = fails_.find(key);
    if (it == fails_.end()) return 0;
    if (it->second.second-- > 0) return 0;
    return it->second.first;
  }
  template <typename H>
  int make(const std::string& line, const std::string& kind, H* out) {
    if (int e = call(line)) return e;
    *out = reinterpret_cast<H>(static_cast<std::uintptr_t>(++handles_ * 16));
    names_[reinterpret_cast<const void*>(*out)] = kind + "#" + std::to_string(++per_kind_[kind]);
    return 0;
  }

  std::map<std::string, std::pair<int, int>> fails_;  // call -> (status, successes before it fails)
  std::vector<std::unique_ptr<std::vector<float>>> blocks_;
  std::map<const void*, std::string> names_;
  std::map<std::string, int> per_kind_;
  std::map<const void*, float> stamp_;
  std::uintptr_t handles_ = 0;
  int records_ = 0;
  int polls_ = 0;
  CommH world_ = nullptr;
  int rank_ = 0;
  int depth_ = 0;
  std::vector<std::pair<int, std::size_t>> group_sends_, group_recvs_;
};

}  // namespace meshsim::cuda
