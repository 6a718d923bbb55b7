// cpu backend over loopback, between real processes: raw TCP throughput against the ring
// all-reduce of run_collective_cpu, in one run.
//
//   RawTcp/<MiB>        two processes, one blocking TCP connection (TCP_NODELAY), rank 0
//                       send()s the bytes, rank 1 recv()s them and acks with one byte.
//   RawTcpDuplex/<MiB>  the same pair, both directions at once (each side a sender and a
//                       receiver thread): the load one rank of a ring puts on its socket.
//   RawTcpRing/<p>/<MiB> p processes in a ring of blocking TCP connections; every process
//                       sends <MiB> to the next and receives <MiB> from the previous at once:
//                       what raw TCP moves between the same p processes under a ring's load,
//                       per process (bytes/time), the baseline for the ring's busbw.
//   RingAllReduce/<p>/<MiB>  p processes (fork), Transport + run_collective_cpu, ring
//                       algorithm; busbw = bytes/time * 2(p-1)/p (NCCL test definition): the
//                       bytes every rank sends per second, comparable with RawTcpRing.
//
// Children are forked per benchmark and find each other through files in a temporary
// folder (FileDirectory); rank 0 (this process) tells them, per iteration, to run one more
// collective or to stop. A summary table (medians over repetitions, with the ratios) is
// printed at the end.
//
//   build/bench/cpu_transport_bench --benchmark_min_time=0.3 --benchmark_repetitions=3
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <vector>

#include "backend/cpu/collective_exec.h"
#include "core/error.h"

namespace {

namespace fs = std::filesystem;
using namespace meshsim;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kMiB = 1 << 20;

// Addresses as files "<dir>/rank-<r>", written to a temporary name and renamed.
class FileDirectory : public cpu::PeerDirectory {
 public:
  explicit FileDirectory(fs::path dir) : dir_(std::move(dir)) {}
  void publish(int rank, const std::string& host_port) override {
    const fs::path tmp = dir_ / fmt::format("tmp-{}", rank);
    std::ofstream(tmp) << host_port;
    fs::rename(tmp, dir_ / fmt::format("rank-{}", rank));
  }
  std::string lookup(int rank, std::chrono::milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    const fs::path f = dir_ / fmt::format("rank-{}", rank);
    while (!fs::exists(f)) {
      if (Clock::now() > deadline) throw Error(fmt::format("rank {} did not publish its address", rank));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::string s;
    std::ifstream(f) >> s;
    return s;
  }

 private:
  fs::path dir_;
};

fs::path fresh_dir() {
  std::string tmpl = (fs::temp_directory_path() / "meshsim-bench-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  return tmpl;
}

// ---- raw TCP --------------------------------------------------------------------------

void send_all(int fd, const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k <= 0) throw std::runtime_error("send failed");
    p += k, n -= static_cast<std::size_t>(k);
  }
}
void recv_all(int fd, char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k <= 0) throw std::runtime_error("recv failed");
    p += k, n -= static_cast<std::size_t>(k);
  }
}

// A connected loopback TCP pair split across a fork: returns the fd; *child says which side.
int tcp_pair_fork(bool* child, pid_t* pid) {
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (::bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(lfd, 1) != 0 ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("listen failed");
  *pid = ::fork();  // the port is chosen; the child connects to it
  *child = *pid == 0;
  int fd = -1;
  if (*child) {
    ::close(lfd);
    fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) _exit(2);
  } else {
    fd = ::accept(lfd, nullptr, nullptr);
    ::close(lfd);
  }
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

// Control protocol of the raw pair: the parent sends a 1-byte command (1 = one more round,
// 0 = stop) before each round; the child answers each round with a 1-byte ack.
void raw_tcp(benchmark::State& state, bool duplex) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0)) * kMiB;
  std::vector<char> out(bytes, 1), in(bytes);
  bool child = false;
  pid_t pid = 0;
  const int fd = tcp_pair_fork(&child, &pid);
  auto round = [&](bool initiator) {
    if (!duplex) {
      if (initiator)
        send_all(fd, out.data(), bytes);
      else
        recv_all(fd, in.data(), bytes);
      return;
    }
    std::thread sender([&] { send_all(fd, out.data(), bytes); });
    recv_all(fd, in.data(), bytes);
    sender.join();
  };
  if (child) {
    try {
      char cmd = 0;
      while (recv_all(fd, &cmd, 1), cmd == 1) {
        round(false);
        const char ack = 1;
        send_all(fd, &ack, 1);
      }
    } catch (...) {
      _exit(1);
    }
    _exit(0);
  }
  for (auto _ : state) {
    const auto t0 = Clock::now();
    const char cmd = 1;
    send_all(fd, &cmd, 1);
    round(true);
    char ack = 0;
    recv_all(fd, &ack, 1);
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const char stop = 0;
  send_all(fd, &stop, 1);
  ::close(fd);
  ::waitpid(pid, nullptr, 0);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
  state.counters["GBps"] =
      benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate);
}

// Forks ranks 1..p-1 of p (their pids into `kids`); returns this process's rank (0: the parent).
int fork_ranks(int p, std::vector<pid_t>& kids) {
  for (int r = 1; r < p; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) return r;
    kids.push_back(pid);
  }
  return 0;
}

// A loopback listener on a kernel-chosen port.
int listen_loopback(sockaddr_in* a) {
  const int lfd = ::socket(AF_INET, SOCK_STREAM, 0);
  *a = sockaddr_in{};
  a->sin_family = AF_INET;
  a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof *a;
  if (::bind(lfd, reinterpret_cast<sockaddr*>(a), sizeof *a) != 0 || ::listen(lfd, 1) != 0 ||
      ::getsockname(lfd, reinterpret_cast<sockaddr*>(a), &len) != 0)
    throw std::runtime_error("listen failed");
  return lfd;
}

// p processes, process i connected to i+1 (mod p) by one TCP connection. Control goes over
// pipes, not the measured sockets: the parent writes a command byte to every child (1 = one
// more round, 0 = stop); each child answers a round with one byte on the shared ack pipe.
void BM_RawTcpRing(benchmark::State& state) {
  const int p = static_cast<int>(state.range(0));
  const std::size_t bytes = static_cast<std::size_t>(state.range(1)) * kMiB;
  std::vector<int> listeners(static_cast<std::size_t>(p));
  std::vector<sockaddr_in> addrs(static_cast<std::size_t>(p));
  for (int i = 0; i < p; ++i) listeners[i] = listen_loopback(&addrs[i]);
  std::vector<std::array<int, 2>> cmd(static_cast<std::size_t>(p));
  std::array<int, 2> ack{};
  for (auto& c : cmd)
    if (::pipe(c.data()) != 0) throw std::runtime_error("pipe failed");
  if (::pipe(ack.data()) != 0) throw std::runtime_error("pipe failed");
  std::vector<pid_t> kids;
  const int rank = fork_ranks(p, kids);
  const int out = ::socket(AF_INET, SOCK_STREAM, 0);
  const auto& to = addrs[static_cast<std::size_t>((rank + 1) % p)];
  if (::connect(out, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0) throw std::runtime_error("connect");
  const int in = ::accept(listeners[static_cast<std::size_t>(rank)], nullptr, nullptr);
  for (int l : listeners) ::close(l);
  const int one = 1;
  ::setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::vector<char> src(bytes, 1), dst(bytes);
  auto round = [&] {
    std::thread sender([&] { send_all(out, src.data(), bytes); });
    recv_all(in, dst.data(), bytes);
    sender.join();
  };
  if (rank != 0) {
    char c = 0;
    while (::read(cmd[static_cast<std::size_t>(rank)][0], &c, 1) == 1 && c == 1) {
      round();
      if (::write(ack[1], &c, 1) != 1) _exit(1);
    }
    _exit(0);
  }
  for (auto _ : state) {
    const auto t0 = Clock::now();
    const char go = 1;
    for (int r = 1; r < p; ++r)
      if (::write(cmd[static_cast<std::size_t>(r)][1], &go, 1) != 1) throw std::runtime_error("pipe write");
    round();
    for (int r = 1; r < p; ++r) {
      char c = 0;
      if (::read(ack[0], &c, 1) != 1) throw std::runtime_error("a ring process died");
    }
    state.SetIterationTime(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  const char stop = 0;
  for (int r = 1; r < p; ++r)
    if (::write(cmd[static_cast<std::size_t>(r)][1], &stop, 1) != 1) throw std::runtime_error("pipe write");
  for (pid_t k : kids) ::waitpid(k, nullptr, 0);
  for (auto& c : cmd) ::close(c[0]), ::close(c[1]);
  ::close(ack[0]), ::close(ack[1]), ::close(in), ::close(out);
  state.counters["GBps_per_process"] =
      benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_RawTcp(benchmark::State& state) { raw_tcp(state, false); }
void BM_RawTcpDuplex(benchmark::State& state) { raw_tcp(state, true); }

// ---- cpu backend ring all-reduce ----------------------------------------------------------

void BM_RingAllReduce(benchmark::State& state) {
  const int p = static_cast<int>(state.range(0));
  const std::size_t bytes = static_cast<std::size_t>(state.range(1)) * kMiB;
  CollectiveSpec spec;
  spec.kind = CollKind::AllReduce;
  spec.ranks = p;
  spec.bytes = static_cast<Bytes>(bytes);
  spec.element_bytes = 4;
  const AlgorithmRegistry reg = AlgorithmRegistry::builtin();
  const auto prog = reg.find("ring", CollKind::AllReduce)->build(spec);
  const fs::path dir = fresh_dir();
  std::vector<pid_t> kids;
  const int rank = fork_ranks(p, kids);
  FileDirectory directory(dir);
  cpu::TransportOptions opt;
  opt.token = dir.string();
  std::vector<float> buf(bytes / 4, 1.0f);
  if (rank != 0) {
    int code = 0;
    try {
      cpu::Transport t(rank, p, directory, opt);
      std::int32_t cmd = 0;
      while (t.recv(0, &cmd, sizeof cmd), cmd == 1) cpu::run_collective_cpu(t, *prog, spec, buf);
    } catch (const std::exception& e) {
      fmt::print(stderr, "child rank {}: {}\n", rank, e.what());
      code = 1;
    }
    _exit(code);
  }
  {
    cpu::Transport t(0, p, directory, opt);
    std::vector<cpu::SendOp> go;
    const std::int32_t one = 1, zero = 0;
    for (int q = 1; q < p; ++q) go.push_back(cpu::SendOp{q, &one, sizeof one});
    for (auto _ : state) {
      t.exchange(go, {}, "start");
      const auto run = cpu::run_collective_cpu(t, *prog, spec, buf);
      state.SetIterationTime(std::chrono::duration<double>(run.total).count());
    }
    for (auto& g : go) g.data = &zero;
    t.exchange(go, {}, "stop");
  }
  for (pid_t k : kids) ::waitpid(k, nullptr, 0);
  fs::remove_all(dir);
  state.counters["busbw_GBps"] =
      benchmark::Counter(static_cast<double>(bytes) * 2.0 * (p - 1) / p, benchmark::Counter::kIsIterationInvariantRate);
}

// Console output plus a summary: ring busbw against the raw pair, per size.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.iterations == 0 || r.error_occurred) continue;
      const std::string name = r.benchmark_name();
      const double secs = r.real_accumulated_time / static_cast<double>(r.iterations);
      auto arg = [&](const std::string& key) {
        const auto at = name.find(key + ":");
        return at == std::string::npos ? 0 : std::atoi(name.c_str() + at + key.size() + 1);
      };
      const int mib = arg("MiB");
      const double b = static_cast<double>(mib) * kMiB;
      if (name.rfind("BM_RawTcpDuplex", 0) == 0)
        figures_[{"raw-duplex", 2, mib}].push_back(b / secs / 1e9);
      else if (name.rfind("BM_RawTcpRing", 0) == 0)
        figures_[{"raw-ring", arg("p"), mib}].push_back(b / secs / 1e9);
      else if (name.rfind("BM_RawTcp", 0) == 0)
        figures_[{"raw", 2, mib}].push_back(b / secs / 1e9);
      else if (name.rfind("BM_RingAllReduce", 0) == 0) {
        const int p = arg("p");
        figures_[{"ring", p, mib}].push_back(b / secs * 2.0 * (p - 1) / p / 1e9);
      }
    }
  }
  // Medians over --benchmark_repetitions; ring busbw against the raw baselines.
  void Finalize() override {
    ConsoleReporter::Finalize();
    auto median = [&](const std::tuple<std::string, int, int>& key) {
      auto it = figures_.find(key);
      if (it == figures_.end()) return 0.0;
      std::vector<double> v = it->second;
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    fmt::print("\nmedians: {:>4} {:>7} {:>12} {:>12} {:>14} {:>12} {:>10} {:>10} {:>12}\n", "p", "MiB", "raw GB/s",
               "duplex GB/s", "raw ring GB/s", "busbw GB/s", "vs raw", "vs duplex", "vs raw ring");
    for (const auto& [key, values] : figures_) {
      const auto& [what, p, mib] = key;
      if (what != "ring") continue;
      const double busbw = median(key), raw = median({"raw", 2, mib}), dup = median({"raw-duplex", 2, mib});
      const double rring = median({"raw-ring", p, mib});
      auto pct = [&](double base) { return base > 0 ? 100 * busbw / base : 0.0; };
      fmt::print("         {:>4} {:>7} {:>12.2f} {:>12.2f} {:>14.2f} {:>12.2f} {:>9.0f}% {:>9.0f}% {:>11.0f}%\n", p,
                 mib, raw, dup, rring, busbw, pct(raw), pct(dup), pct(rring));
    }
  }

 private:
  std::map<std::tuple<std::string, int, int>, std::vector<double>> figures_;
};

}  // namespace

int main(int argc, char** argv) {
  // Size-major order, so the raw and backend figures of one size are taken close together
  // in time (the loopback speed of a shared machine drifts).
  for (int mib : {4, 16, 64, 256}) {
    benchmark::RegisterBenchmark("BM_RawTcp", BM_RawTcp)
        ->ArgName("MiB")
        ->Arg(mib)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("BM_RawTcpDuplex", BM_RawTcpDuplex)
        ->ArgName("MiB")
        ->Arg(mib)
        ->UseManualTime()
        ->Unit(benchmark::kMillisecond);
    for (int p : {2, 3, 4}) {
      benchmark::RegisterBenchmark("BM_RawTcpRing", BM_RawTcpRing)
          ->ArgNames({"p", "MiB"})
          ->Args({p, mib})
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark("BM_RingAllReduce", BM_RingAllReduce)
          ->ArgNames({"p", "MiB"})
          ->Args({p, mib})
          ->UseManualTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}
