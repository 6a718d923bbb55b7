// Transport: ranks as threads on loopback. Data arrives intact and in FIFO order, steps run
// full duplex, summing receives add, and every failure (size mismatch, closed peer, silent
// peer, wrong token, missing rank) is an Error naming the ranks, never a hang.
#include "backend/cpu/transport.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <numeric>
#include <random>

#include "backend/cpu/test_util.h"
#include "core/error.h"

namespace meshsim::cpu {
namespace {

using testing::run_ranks;
using namespace std::chrono_literals;

TransportOptions opts(std::chrono::milliseconds timeout = 10s) {
  TransportOptions o;
  o.token = "transport-test";
  o.timeout = timeout;
  return o;
}

std::vector<float> iota_data(std::size_t n, float start) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(Transport, SendRecvSizesIncludingEmptyAndLarge) {
  InMemoryDirectory dir;
  const std::vector<std::size_t> sizes = {0, 1, 3, 4096, 1 << 20, 40'000'003};
  const auto errs = run_ranks(2, [&](int r) {
    Transport t(r, 2, dir, opts());
    for (std::size_t n : sizes) {
      std::vector<char> buf(n);
      if (r == 0) {
        for (std::size_t i = 0; i < n; ++i) buf[i] = static_cast<char>(i * 7 + n);
        t.send(1, buf.data(), n);
      } else {
        t.recv(0, buf.data(), n);
        for (std::size_t i = 0; i < n; ++i)
          if (buf[i] != static_cast<char>(i * 7 + n)) FAIL() << "byte " << i << " of " << n;
      }
    }
  });
  EXPECT_EQ(errs, std::vector<std::string>(2));
}

TEST(Transport, ExchangeIsFullDuplexAndFifoPerPair) {
  // Every rank sends two messages to every other rank and receives both, in one step,
  // with messages larger than the socket buffers (so the step must run concurrently).
  const int p = 4;
  const std::size_t n = 3'000'001;
  InMemoryDirectory dir;
  const auto errs = run_ranks(p, [&](int r) {
    TransportOptions o = opts();
    o.socket_buffer_bytes = 64 << 10;
    Transport t(r, p, dir, o);
    std::vector<std::vector<float>> out, in;
    std::vector<SendOp> sends;
    std::vector<RecvOpDesc> recvs;
    for (int q = 0; q < p; ++q)
      for (int k = 0; k < 2 && q != r; ++k) {
        out.push_back(iota_data(n, static_cast<float>(r * 100 + q * 10 + k)));
        in.emplace_back(n);
      }
    std::size_t i = 0;
    for (int q = 0; q < p; ++q)
      for (int k = 0; k < 2 && q != r; ++k, ++i) {
        sends.push_back(SendOp{q, out[i].data(), n * 4});
        recvs.push_back(RecvOpDesc{q, in[i].data(), n * 4, RecvMode::Copy});
      }
    t.exchange(sends, recvs, "test step");
    i = 0;
    for (int q = 0; q < p; ++q)
      for (int k = 0; k < 2 && q != r; ++k, ++i)
        ASSERT_EQ(in[i], iota_data(n, static_cast<float>(q * 100 + r * 10 + k))) << r << " from " << q << " #" << k;
  });
  EXPECT_EQ(errs, std::vector<std::string>(p));
}

TEST(Transport, SumFloatAddsWhatArrives) {
  InMemoryDirectory dir;
  const std::size_t n = 1'000'003;  // not a multiple of the reduce chunk
  const auto errs = run_ranks(2, [&](int r) {
    Transport t(r, 2, dir, opts());
    std::vector<float> mine = iota_data(n, static_cast<float>(r));
    std::vector<float> orig = mine;
    const SendOp s{1 - r, orig.data(), n * 4};
    const RecvOpDesc v{1 - r, mine.data(), n * 4, RecvMode::SumFloat};
    t.exchange(std::span(&s, 1), std::span(&v, 1));
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(mine[i], static_cast<float>(i) * 2 + 1) << i;
  });
  EXPECT_EQ(errs, std::vector<std::string>(2));
}

TEST(Transport, SizeMismatchNamesBothRanks) {
  InMemoryDirectory dir;
  const auto errs = run_ranks(2, [&](int r) {
    Transport t(r, 2, dir, opts());
    std::vector<char> buf(100);
    if (r == 0) t.send(1, buf.data(), 100);
    if (r == 1) t.recv(0, buf.data(), 64);
  });
  EXPECT_NE(errs[1].find("rank 1: receive from rank 0: rank 0 sent a 100-byte message where rank 1 expects 64 bytes"),
            std::string::npos)
      << errs[1];
}

TEST(Transport, ClosedPeerFailsFastNamingIt) {
  InMemoryDirectory dir;
  const auto t0 = std::chrono::steady_clock::now();
  const auto errs = run_ranks(3, [&](int r) {
    Transport t(r, 3, dir, opts(20s));
    std::vector<float> buf(1 << 20);
    if (r == 2) return t.close();
    // rank 0 waits for rank 2; rank 1 waits for rank 0, which gives up and tells it why.
    if (r == 0) t.recv(2, buf.data(), buf.size() * 4);
    if (r == 1) t.recv(0, buf.data(), buf.size() * 4);
  });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  EXPECT_NE(errs[0].find("rank 0: lost connection to rank 2 during receive from rank 2"), std::string::npos) << errs[0];
  EXPECT_NE(
      errs[1].find("rank 1: receive from rank 0 stopped because rank 0 gave up: rank 0: lost connection to rank 2"),
      std::string::npos)
      << errs[1];
  EXPECT_EQ(errs[2], "");
}

TEST(Transport, SilentPeerTimesOut) {
  InMemoryDirectory dir;
  const auto t0 = std::chrono::steady_clock::now();
  const auto errs = run_ranks(2, [&](int r) {
    Transport t(r, 2, dir, opts(300ms));
    std::vector<float> buf(16);
    if (r == 0) t.recv(1, buf.data(), 64);
    if (r == 1) std::this_thread::sleep_for(1s);  // alive but never sends
  });
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
  EXPECT_NE(errs[0].find("rank 0: lost connection to rank 1 during receive from rank 1: no progress for 300 ms"),
            std::string::npos)
      << errs[0];
}

// A peer that is stopped (SIGSTOP) keeps its connection open and says nothing: the store
// names it (rendezvous.h), and a rank waiting for it stops within about kJobPoll of learning
// that, instead of after its own 60 s timeout.
TEST(Transport, AWaitStopsSoonAfterTheStoreSaysTheJobFailed) {
  using Clock = std::chrono::steady_clock;
  InMemoryDirectory dir;
  std::atomic<bool> declared{false}, rank0_done{false};
  Clock::time_point declared_at{}, failed_at{};
  std::string error;
  run_ranks(2, [&](int r) {
    TransportOptions o = opts(60s);
    o.job_failed = [&]() -> std::string {
      return declared ? "rank 1 stopped answering for 5 s (stopped or hung?)" : "";
    };
    Transport t(r, 2, dir, o);
    std::vector<float> buf(16);
    if (r == 0) {
      try {
        t.recv(1, buf.data(), 64);
      } catch (const Error& e) {
        error = e.what();
      }
      failed_at = Clock::now();
      rank0_done = true;
      return;
    }
    std::this_thread::sleep_for(300ms);  // "stopped": its connection open, it never sends
    declared_at = Clock::now();
    declared = true;
    while (!rank0_done) std::this_thread::sleep_for(10ms);
  });
  EXPECT_LT(failed_at - declared_at, 2s);
  EXPECT_NE(error.find("rank 0: receive from rank 1 stopped: the run failed: rank 1 stopped answering for 5 s"),
            std::string::npos)
      << error;
}

TEST(Transport, WrongTokenIsRefused) {
  InMemoryDirectory dir;
  const auto errs = run_ranks(2, [&](int r) {
    TransportOptions o = opts(2s);
    if (r == 1) o.token = "other-job";
    Transport t(r, 2, dir, o);
  });
  EXPECT_NE(errs[0].find("rank 0: setup: rank 1 refused our hello"), std::string::npos) << errs[0];
  // Rank 1 cannot tell a misconfigured rank 0 from a stranger: it drops the connection and
  // waits for the real rank 0; its timeout names what it refused.
  EXPECT_NE(errs[1].find("rank 1: setup: only 0 of 1 peers connected within 2000 ms"), std::string::npos) << errs[1];
  EXPECT_NE(errs[1].find("wrong token"), std::string::npos) << errs[1];
}

// A directory that lets strangers at rank 1's port the moment it is published, before
// rank 0 can look it up: 300 random bytes, a hello without the token claiming to be rank
// 0, and a connection that sends nothing. They sit first in rank 1's accept queue.
class StrangersDirectory : public PeerDirectory {
 public:
  ~StrangersDirectory() override {
    for (const int fd : fds_) ::close(fd);
  }
  void publish(int rank, const std::string& host_port) override {
    if (rank == 1) {
      const int port = std::stoi(host_port.substr(host_port.rfind(':') + 1));
      std::mt19937 rng(16);
      std::string garbage(300, '\0');
      for (char& c : garbage) c = static_cast<char>(rng());
      std::string impostor(280, '\0');  // Hello: magic, version, from 0, to 1, world 2, token "guess"
      const std::uint32_t fields[] = {0x4c48534d, 1, 0, 1, 2, 5};
      std::memcpy(impostor.data(), fields, sizeof fields);
      std::memcpy(impostor.data() + sizeof fields, "guess", 5);
      for (const std::string& bytes : {garbage, impostor, std::string()}) {
        const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<std::uint16_t>(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
        if (!bytes.empty()) {
          EXPECT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
        }
        fds_.push_back(fd);
      }
    }
    inner_.publish(rank, host_port);
  }
  std::string lookup(int rank, std::chrono::milliseconds timeout) override { return inner_.lookup(rank, timeout); }

 private:
  InMemoryDirectory inner_;
  std::vector<int> fds_;
};

TEST(Transport, StrangersDuringSetupAreDroppedAndTheJobCompletes) {
  StrangersDirectory dir;
  std::mutex mu;
  std::vector<std::string> log;
  std::vector<std::vector<float>> got(2, std::vector<float>(1000));
  const auto errs = run_ranks(2, [&](int r) {
    TransportOptions o = opts(5s);
    o.log = [&](const std::string& line) {
      std::lock_guard lock(mu);
      log.push_back(line);
    };
    Transport t(r, 2, dir, o);
    const std::vector<float> mine = iota_data(1000, 1000.0f * static_cast<float>(r));
    const SendOp send{1 - r, mine.data(), mine.size() * sizeof(float)};
    const RecvOpDesc recv{1 - r, got[r].data(), got[r].size() * sizeof(float)};
    t.exchange(std::span(&send, 1), std::span(&recv, 1));
  });
  EXPECT_EQ(errs[0], "");
  EXPECT_EQ(errs[1], "");
  EXPECT_EQ(got[0], iota_data(1000, 1000.0f));  // rank 1's data, intact
  EXPECT_EQ(got[1], iota_data(1000, 0.0f));
  std::string all;
  for (const auto& l : log) all += l + "\n";
  EXPECT_NE(all.find("meshsim: rank 1: transport setup: refused a connection from 127.0.0.1:"), std::string::npos)
      << all;
  EXPECT_NE(all.find("not a meshsim hello"), std::string::npos) << all;  // the garbage
  EXPECT_NE(all.find("wrong token"), std::string::npos) << all;          // the impostor
  EXPECT_EQ(log.size(), 2u) << all;  // the silent one is closed when setup is done, not refused
}

TEST(Transport, MissingRankFailsSetupWithinTimeout) {
  InMemoryDirectory dir;
  const auto errs = run_ranks(2, [&](int r) { Transport t(r, 3, dir, opts(300ms)); });  // rank 2 never starts
  for (int r = 0; r < 2; ++r) EXPECT_NE(errs[r].find("rank 2"), std::string::npos) << errs[r];
}

TEST(Transport, BadPeerAndClosedUseAreErrors) {
  InMemoryDirectory dir;
  const auto errs = run_ranks(1, [&](int r) {
    Transport t(r, 1, dir, opts());
    char c = 0;
    EXPECT_THROW(t.send(0, &c, 1), Error);  // itself
    EXPECT_THROW(t.send(5, &c, 1), Error);
    t.close();
    EXPECT_THROW(t.send(0, &c, 1), Error);
  });
  EXPECT_EQ(errs[0], "");
}

}  // namespace
}  // namespace meshsim::cpu
