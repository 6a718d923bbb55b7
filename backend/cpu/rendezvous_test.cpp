// The rendezvous store: set/get across threads, timeouts that name what was missing,
// and a server that refuses wrong tokens and malformed messages but keeps serving.
#include "backend/cpu/rendezvous.h"

#include <gtest/gtest.h>

#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <thread>

#include "backend/cpu/launch_env.h"
#include "core/error.h"
#include "core/test_util.h"

namespace meshsim::cpu {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

RendezvousClientOptions client_of(const RendezvousServer& s, int rank = 0, std::string token = "secret") {
  RendezvousClientOptions o;
  o.port = s.port();
  o.token = std::move(token);
  o.rank = rank;
  o.connect_timeout = 2s;
  return o;
}

using testing_util::error_of;

// Sends raw bytes on a fresh connection, then says it is done sending; returns what the
// server answered before closing.
std::string raw_exchange(int port, const std::string& bytes) {
  namespace asio = boost::asio;
  asio::io_context io;
  asio::ip::tcp::socket sock(io);
  sock.connect({asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
  boost::system::error_code ec;  // the server may close before it has read everything
  asio::write(sock, asio::buffer(bytes), ec);
  sock.shutdown(asio::ip::tcp::socket::shutdown_send, ec);  // nothing more from us
  ec = {};
  std::string got;
  std::array<char, 512> buf{};
  while (!ec) {
    const std::size_t n = sock.read_some(asio::buffer(buf), ec);
    got.append(buf.data(), n);
  }
  return got;  // reading ended: the server closed the connection
}

TEST(Rendezvous, SetGetAcrossThreads) {
  RendezvousServer server({.token = "secret"});
  ASSERT_GT(server.port(), 0);
  constexpr int kThreads = 4;
  std::vector<std::vector<std::string>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      RendezvousClient c(client_of(server, t));
      c.set("addr/" + std::to_string(t), std::string("host") + std::to_string(t) + std::string(1, '\0') + "x");
      for (int q = 0; q < kThreads; ++q) seen[t].push_back(c.get("addr/" + std::to_string(q), 5s));
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t)
    for (int q = 0; q < kThreads; ++q)
      EXPECT_EQ(seen[t][q], "host" + std::to_string(q) + std::string(1, '\0') + "x");  // binary-safe
}

TEST(Rendezvous, GetWaitsForALaterSet) {
  RendezvousServer server({.token = "secret"});
  std::thread setter([&] {
    RendezvousClient c(client_of(server));
    std::this_thread::sleep_for(100ms);
    c.set("late", "value");
  });
  RendezvousClient c(client_of(server));
  EXPECT_EQ(c.get("late", 5s), "value");
  setter.join();
  c.set("late", "replaced");
  EXPECT_EQ(c.get("late", 1s), "replaced");
  std::string v;
  EXPECT_FALSE(c.try_get("never", v));
}

TEST(Rendezvous, GetTimeoutNamesTheKey) {
  RendezvousServer server({.token = "secret"});
  RendezvousClient c(client_of(server));
  const auto start = Clock::now();
  const std::string msg = error_of([&] { c.get("addr/7", 200ms); });
  EXPECT_LT(Clock::now() - start, 3s);
  EXPECT_NE(msg.find("'addr/7'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("200ms"), std::string::npos) << msg;
  c.set("after", "timeout");  // the connection is still usable
  EXPECT_EQ(c.get("after", 1s), "timeout");
}

TEST(Rendezvous, BarrierMeetsAndIsReusable) {
  RendezvousServer server({.token = "secret"});
  constexpr int kWorld = 3;
  std::atomic<int> arrived{0};
  std::atomic<bool> early{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      RendezvousClient c(client_of(server, r));
      for (int round = 0; round < 3; ++round) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20 * r));
        ++arrived;
        c.barrier("step", kWorld, 5s);
        if (arrived.load() < kWorld * (round + 1)) early = true;
        c.barrier("step-done", kWorld, 5s);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_FALSE(early.load());
  EXPECT_EQ(arrived.load(), 3 * kWorld);
}

TEST(Rendezvous, BarrierTimeoutNamesMissingRanks) {
  RendezvousServer server({.token = "secret"});
  std::thread rank1([&] {
    RendezvousClient c(client_of(server, 1));
    EXPECT_NE(error_of([&] { c.barrier("init", 4, 300ms); }).find("ranks 2, 3 of 4 did not arrive"), std::string::npos);
  });
  RendezvousClient c(client_of(server, 0));
  const std::string msg = error_of([&] { c.barrier("init", 4, 300ms); });
  rank1.join();
  EXPECT_NE(msg.find("barrier 'init'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("ranks 2, 3 of 4 did not arrive"), std::string::npos) << msg;
}

TEST(Rendezvous, GatherReturnsValuesInRankOrder) {
  RendezvousServer server({.token = "secret"});
  constexpr int kWorld = 3;
  std::vector<std::vector<std::string>> got(kWorld);
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      RendezvousClient c(client_of(server, r));
      got[r] = c.gather("addr", r, kWorld, "10.0.0." + std::to_string(r), 5s);
      EXPECT_EQ(c.gather("addr", r, kWorld, "second", 5s), std::vector<std::string>(kWorld, "second"));
    });
  }
  for (auto& th : threads) th.join();
  for (int r = 0; r < kWorld; ++r) EXPECT_EQ(got[r], (std::vector<std::string>{"10.0.0.0", "10.0.0.1", "10.0.0.2"}));

  RendezvousClient lone(client_of(server, 0));
  const std::string msg = error_of([&] { lone.gather("result", 0, 2, "x", 200ms); });
  EXPECT_NE(msg.find("rank 1 of 2 did not publish"), std::string::npos) << msg;
}

TEST(Rendezvous, WrongTokenIsRefusedAndServerKeepsServing) {
  RendezvousServer server({.token = "secret"});
  RendezvousClient good(client_of(server));
  good.set("k", "v");
  const std::string msg = error_of([&] { RendezvousClient bad(client_of(server, 1, "guess")); });
  EXPECT_NE(msg.find("wrong token"), std::string::npos) << msg;
  EXPECT_NE(msg.find("MESHSIM_TOKEN"), std::string::npos) << msg;
  // A raw SET with a wrong token does not reach the store.
  const std::string reply = raw_exchange(server.port(), encode_request(RdzvOp::Set, "guess", "k", 0, "evil"));
  ASSERT_GE(reply.size(), 5u);
  EXPECT_EQ(reply[4], static_cast<char>(RdzvStatus::Error));
  EXPECT_EQ(good.get("k", 1s), "v");
  RendezvousClient late(client_of(server, 2));
  EXPECT_EQ(late.get("k", 1s), "v");
}

TEST(Rendezvous, MalformedMessagesAreRefusedWithoutTakingTheServerDown) {
  RendezvousServer server({.token = "secret"});
  const std::string good_set = encode_request(RdzvOp::Set, "secret", "k", 0, "v");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"oversized", std::string("\xff\xff\xff\xff", 4) + "xxxx"},
      {"just over the limit", encode_frame(std::string(kMaxFrameBytes + 1, 'a')).substr(0, 64)},
      {"truncated fields", encode_frame(std::string("\x02\x00\x40se", 5))},
      {"empty body", encode_frame("")},
      {"unknown op", encode_request(static_cast<RdzvOp>(99), "secret", "k", 0, "v")},
  };
  for (const auto& [name, bytes] : cases) {
    const std::string reply = raw_exchange(server.port(), bytes);
    ASSERT_GE(reply.size(), 5u) << name;
    EXPECT_EQ(reply[4], static_cast<char>(RdzvStatus::Error)) << name;
    EXPECT_LT(reply.size(), 300u) << name;
  }
  // Half a header, then a disconnect.
  EXPECT_EQ(raw_exchange(server.port(), std::string("\x00\x00", 2)), "");
  // The good path still works, raw and through a client.
  const std::string ok = raw_exchange(server.port(), good_set + encode_request(RdzvOp::Get, "secret", "k", 0, "") +
                                                         encode_request(RdzvOp::Ping, "guess", "", 0, ""));
  EXPECT_EQ(ok.substr(0, 5), std::string("\x00\x00\x00\x01\x00", 5));   // SET: OK
  EXPECT_EQ(ok.substr(5, 6), std::string("\x00\x00\x00\x02\x00v", 6));  // GET: OK "v"
  EXPECT_EQ(ok[15], static_cast<char>(RdzvStatus::Error));              // bad token: ERROR
  RendezvousClient c(client_of(server));
  EXPECT_EQ(c.get("k", 1s), "v");
}

TEST(Rendezvous, StopWakesWaitingClientsAndLeavesNothingRunning) {
  auto server = std::make_unique<RendezvousServer>(RendezvousServerOptions{.token = "secret"});
  RendezvousClient c(client_of(*server));
  std::thread stopper([&] {
    std::this_thread::sleep_for(100ms);
    server->stop();
  });
  const auto start = Clock::now();
  const std::string msg = error_of([&] { c.get("never", 20s); });
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_NE(msg.find("closed the connection"), std::string::npos) << msg;
  stopper.join();
  server.reset();
}

TEST(Rendezvous, UnreachableServerIsAnErrorNotAHang) {
  int port = 0;
  {
    RendezvousServer s({});
    port = s.port();
  }  // closed again: nobody listens there now
  RendezvousClientOptions o;
  o.port = port;
  o.connect_timeout = 300ms;
  const std::string msg = error_of([&] { RendezvousClient c(o); });
  EXPECT_NE(msg.find("cannot reach"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(port)), std::string::npos) << msg;
}

TEST(Rendezvous, PortInUseIsAnError) {
  RendezvousServer a({});
  const std::string msg = error_of([&] { RendezvousServer b({.port = a.port(), .token = ""}); });
  EXPECT_NE(msg.find(std::to_string(a.port())), std::string::npos) << msg;
  EXPECT_NE(msg.find("pick another port"), std::string::npos) << msg;
}

// Run by tests/launch_test.cpp under `meshsim launch -n 3`; skips itself otherwise.
TEST(RendezvousLaunched, GatherAndBarrierAcrossProcesses) {
  if (!std::getenv(kRankVar)) GTEST_SKIP() << "runs under `meshsim launch` only";
  const LaunchEnv env = launch_env();
  std::optional<RendezvousServer> server;
  if (env.rank == 0) server.emplace(RendezvousServerOptions{.port = env.master_port, .token = env.token});
  RendezvousClient c({.host = env.master_addr, .port = env.master_port, .token = env.token, .rank = env.rank});
  const std::vector<std::string> all = c.gather("name", env.rank, env.world_size, "r" + std::to_string(env.rank), 20s);
  c.barrier("done", env.world_size, 20s);
  if (env.rank != 0) {
    c.set("left/" + std::to_string(env.rank), "");  // rank 0 keeps serving until everyone is through
    return;
  }
  for (int r = 1; r < env.world_size; ++r) c.get("left/" + std::to_string(r), 20s);
  std::string joined;
  for (const std::string& v : all) joined += (joined.empty() ? "" : ",") + v;
  std::cout << "gathered: " << joined << std::endl;
}

}  // namespace
}  // namespace meshsim::cpu
