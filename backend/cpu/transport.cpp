// TCP transport of the cpu backend (see transport.h): setup, framing, concurrent steps.
#include "backend/cpu/transport.h"

#include <utility>  // before Asio: boost 1.74 awaitable.hpp uses std::exchange

#include <fmt/format.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "core/error.h"
#include "kernels/reduce.h"

namespace meshsim::cpu {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

// ---- directory ---------------------------------------------------------------------

void InMemoryDirectory::publish(int rank, const std::string& host_port) {
  {
    std::lock_guard lock(mu_);
    addrs_[rank] = host_port;
  }
  cv_.notify_all();
}

std::string InMemoryDirectory::lookup(int rank, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return addrs_.count(rank) > 0; }))
    throw Error(fmt::format("rank {} did not publish its address within {} ms; start every rank of the job", rank,
                            timeout.count()));
  return addrs_[rank];
}

// ---- wire format -------------------------------------------------------------------

namespace {

constexpr std::uint32_t kHelloMagic = 0x4c48534d;  // "MSHL"
constexpr std::uint32_t kFrameMagic = 0x4d46534d;  // "MSFM"
constexpr std::uint32_t kAbortMagic = 0x4d41534d;  // "MSAM": payload is the failing rank's message
constexpr std::size_t kMaxAbortText = 2048;
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kMaxToken = 256;
constexpr std::size_t kReduceChunk = 256 << 10;  // SumFloat receives add this many bytes at a time

struct Hello {
  std::uint32_t magic = kHelloMagic, version = kVersion;
  std::int32_t from = 0, to = 0, world = 0;
  std::uint32_t token_len = 0;
  char token[kMaxToken] = {};
};

struct Frame {
  std::uint32_t magic = kFrameMagic, reserved = 0;
  std::uint64_t bytes = 0;
};
static_assert(sizeof(Frame) == 16);

std::pair<std::string, unsigned short> split_host_port(int rank, const std::string& s) {
  const auto colon = s.rfind(':');
  if (colon == std::string::npos || colon + 1 == s.size())
    throw Error(fmt::format("rank {} published address '{}'; expected host:port", rank, s));
  std::string host = s.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return {host, static_cast<unsigned short>(std::stoi(s.substr(colon + 1)))};
}

}  // namespace

// ---- state -------------------------------------------------------------------------

struct Transport::Impl {
  int rank;
  int world;
  TransportOptions opt;
  asio::io_context io;
  std::vector<std::optional<tcp::socket>> socks;  // by peer
  std::vector<int> fds;                           // their descriptors, fixed after setup (interrupt())
  std::vector<std::vector<float>> scratch;        // by peer: SumFloat staging
  bool closed = false;
  // First failure of the running call. Lost: the connection to `peer` broke (text says
  // how); Protocol: text is the whole reason; Aborted: `peer` gave up, text is the root
  // cause it forwarded (so every rank's error names the rank that failed first).
  enum class Why { Lost, Protocol, Aborted };
  struct Failure {
    int peer = -1;
    std::string text;
    Why why = Why::Lost;
  };
  std::optional<Failure> failure;

  Impl(int r, int w, TransportOptions o) : rank(r), world(w), opt(std::move(o)), socks(w), scratch(w) {}

  void fail(int peer, std::string text, Why why = Why::Lost) {
    if (!failure) failure = Failure{peer, std::move(text), why};
  }

  // Best effort, never blocking: tells peers whose outgoing stream sits between messages
  // why this rank gives up, so their errors name the root cause, not this rank.
  void send_abort(const std::string& root, const std::vector<bool>& mid_message) {
    const std::string text = root.substr(0, kMaxAbortText);
    Frame f;
    f.magic = kAbortMagic;
    f.bytes = text.size();
    for (int q = 0; q < world; ++q) {
      if (!socks[q] || !socks[q]->is_open() || mid_message[q]) continue;
      boost::system::error_code ec;
      socks[q]->non_blocking(true, ec);
      const std::array<asio::const_buffer, 2> bufs{asio::buffer(&f, sizeof f), asio::buffer(text)};
      socks[q]->write_some(bufs, ec);
    }
  }

  void tune(tcp::socket& s) {
    s.set_option(tcp::no_delay(true));
    if (opt.socket_buffer_bytes > 0) {
      s.set_option(asio::socket_base::send_buffer_size(opt.socket_buffer_bytes));
      s.set_option(asio::socket_base::receive_buffer_size(opt.socket_buffer_bytes));
    }
  }

  // Sends FIN on every connection; unread input is drained first so the close is not a
  // reset that could discard an abort message the peer has not read yet.
  void close_all() {
    for (auto& s : socks)
      if (s && s->is_open()) {
        boost::system::error_code ec;
        s->shutdown(tcp::socket::shutdown_send, ec);
        s->non_blocking(true, ec);
        std::array<char, 64 << 10> sink;
        for (int i = 0; i < 64 && !ec; ++i) s->read_some(asio::buffer(sink), ec);
        s->close(ec);
      }
  }

  // Runs handlers until done() or a failure. With `idle` the deadline moves with every
  // handler that runs (no progress for `timeout` fails); otherwise it is absolute.
  // Returns false on timeout.
  template <class Done>
  bool drive(Done done, bool idle) {
    io.restart();
    auto deadline = Clock::now() + opt.timeout;
    while (!done() && !failure) {
      if (io.run_one_until(deadline) > 0) {
        if (idle) deadline = Clock::now() + opt.timeout;
        continue;
      }
      if (done() || failure) break;
      if (Clock::now() >= deadline) return false;
      MESHSIM_ASSERT(!io.stopped());  // outstanding operations keep the io_context busy
    }
    return true;
  }

  // After a failure or timeout: close every connection (peers fail fast instead of
  // waiting for their timeout), let the aborted handlers run, and mark the transport dead.
  void abandon() {
    close_all();
    io.restart();
    io.run();
    closed = true;
  }

  void check_usable(int peer, const std::string& what) const {
    if (closed)
      throw Error(
          fmt::format("rank {}: {} after the transport was closed (an earlier call failed or close() was "
                      "called); create a new Transport",
                      rank, what));
    if (peer < 0 || peer >= world || peer == rank || !socks[peer])
      throw Error(fmt::format("rank {}: {} names peer {}, which is not another rank of the {}-rank world", rank, what,
                              peer, world));
  }

  void setup(PeerDirectory& dir);
  void exchange(std::span<const SendOp> sends, std::span<const RecvOpDesc> recvs, const std::string& what);
  int wait_delivered(std::span<const SendOp> sends);
};

// ---- setup -------------------------------------------------------------------------

void Transport::Impl::setup(PeerDirectory& dir) {
  const auto deadline = Clock::now() + opt.timeout;
  auto left = [&] {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
  };
  tcp::acceptor acceptor(io);
  try {
    const tcp::endpoint ep(asio::ip::make_address(opt.bind_addr), 0);
    acceptor.open(ep.protocol());
    acceptor.set_option(tcp::acceptor::reuse_address(true));
    if (opt.socket_buffer_bytes > 0) {  // before listen, so accepted sockets scale their window
      acceptor.set_option(asio::socket_base::send_buffer_size(opt.socket_buffer_bytes));
      acceptor.set_option(asio::socket_base::receive_buffer_size(opt.socket_buffer_bytes));
    }
    acceptor.bind(ep);
    acceptor.listen(std::max(world, 16));
  } catch (const boost::system::system_error& e) {
    throw Error(
        fmt::format("rank {}: cannot listen on {}: {}; set TransportOptions::bind_addr to an address of this "
                    "host",
                    rank, opt.bind_addr, e.code().message()));
  }
  const std::string host = acceptor.local_endpoint().address().is_v6()
                               ? "[" + acceptor.local_endpoint().address().to_string() + "]"
                               : acceptor.local_endpoint().address().to_string();
  dir.publish(rank, fmt::format("{}:{}", host, acceptor.local_endpoint().port()));

  if (opt.token.size() > kMaxToken)
    throw Error(fmt::format("rank {}: token has {} bytes; use at most {}", rank, opt.token.size(), kMaxToken));
  auto make_hello = [&](int to) {
    Hello h;
    h.from = rank;
    h.to = to;
    h.world = world;
    h.token_len = static_cast<std::uint32_t>(opt.token.size());
    std::memcpy(h.token, opt.token.data(), opt.token.size());
    return h;
  };
  auto same_token = [&](const Hello& h) {  // no early exit on the first differing byte
    if (h.token_len != opt.token.size()) return false;
    unsigned char diff = 0;
    for (std::size_t i = 0; i < opt.token.size(); ++i) diff |= static_cast<unsigned char>(h.token[i] ^ opt.token[i]);
    return diff == 0;
  };
  // Checks the hello that the higher rank `q` answers ours with; fails setup on a mismatch
  // (we dialled the address `q` published in the directory: it is no stranger).
  auto check_reply = [&](const Hello& h, int q) {
    if (h.magic != kHelloMagic || h.version != kVersion) {
      fail(q,
           "setup: the peer is not a meshsim transport of this version (bad hello); check the address and "
           "that every rank runs the same build");
      return false;
    }
    if (!same_token(h)) {
      fail(q, "setup: wrong token in hello; start every rank of the job with the same MESHSIM_TOKEN");
      return false;
    }
    if (h.world != world || h.to != rank || h.from != q) {
      fail(q, fmt::format("setup: hello from rank {} (world {}) addressed to rank {}; this is rank {} of {} -- the "
                          "ranks disagree on the world size or rank numbering",
                          h.from, h.world, h.to, rank, world));
      return false;
    }
    return true;
  };

  int connected = 0;
  const int expected = world - 1;
  bool stopping = false;  // set before draining after a failure: no more retries
  std::vector<Hello> out_hello(world), in_hello(world);

  // Accept from every lower rank: read its hello, check it, answer with ours. Anyone who
  // can reach the port can connect, so a connection counts as rank p only once its hello
  // carries the job's token, this world size, this rank as addressee and a lower rank p
  // not connected yet. Anything else (a port scanner, garbage, another job, a duplicate)
  // is closed and logged, and setup goes on waiting for the real ranks; if they never
  // come, the timeout's error names what was refused.
  struct Pending {
    tcp::socket sock;
    std::string who;  // "address:port"
    Hello hello;
    Hello reply;
  };
  std::vector<std::shared_ptr<Pending>> accepted;  // closed by bail() so draining cannot block
  std::vector<bool> claimed(world, false);         // a hello from this rank was accepted
  int refused = 0;
  std::string last_refusal;
  const std::size_t max_pending = static_cast<std::size_t>(world) + 64;
  auto log = [&](const std::string& line) {
    if (refused > 17) return;  // a flood of strangers does not flood the log
    const std::string text = refused <= 16 ? fmt::format("meshsim: rank {}: transport setup: {}", rank, line)
                                           : fmt::format(
                                                 "meshsim: rank {}: transport setup: more than 16 "
                                                 "connections refused; no more are logged",
                                                 rank);
    if (opt.log)
      opt.log(text);
    else
      std::fprintf(stderr, "%s\n", text.c_str());
  };
  auto refuse = [&](Pending& p, const std::string& why) {
    ++refused;
    last_refusal = fmt::format("from {}: {}", p.who, why);
    log(fmt::format("refused a connection from {}: {}", p.who, why));
    boost::system::error_code ignored;
    p.sock.close(ignored);
  };
  // Why a hello is not from a rank this rank still waits for ("" when it is).
  auto stranger = [&](const Hello& h) -> std::string {
    if (h.magic != kHelloMagic || h.version != kVersion) return "not a meshsim hello of this version";
    if (!same_token(h)) return "wrong token (not MESHSIM_TOKEN of this job)";
    if (h.world != world || h.to != rank)
      return fmt::format("hello for rank {} of world {}; this is rank {} of {}", h.to, h.world, rank, world);
    if (h.from < 0 || h.from >= rank)
      return fmt::format("claims rank {}; only ranks 0..{} connect to rank {}", h.from, rank - 1, rank);
    if (claimed[h.from]) return fmt::format("claims rank {}, which is already connected", h.from);
    return "";
  };
  std::function<void()> accept_next = [&] {
    acceptor.async_accept([&](const boost::system::error_code& ec, tcp::socket s) {
      if (stopping) return;
      if (ec) return fail(-1, "setup: accept failed: " + ec.message());
      boost::system::error_code ignored;
      const auto remote = s.remote_endpoint(ignored);
      auto p = std::make_shared<Pending>(
          Pending{std::move(s), fmt::format("{}:{}", remote.address().to_string(), remote.port()), {}, {}});
      std::erase_if(accepted, [](const std::shared_ptr<Pending>& q) { return !q->sock.is_open(); });
      if (accepted.size() >= max_pending) {
        refuse(*p, fmt::format("{} connections are already waiting for their hello", accepted.size()));
        return accept_next();
      }
      accepted.push_back(p);
      asio::async_read(p->sock, asio::buffer(&p->hello, sizeof(Hello)),
                       [&, p](const boost::system::error_code& ec2, std::size_t) {
                         if (stopping) return;
                         if (ec2) return refuse(*p, "closed before a whole hello (" + ec2.message() + ")");
                         if (const std::string why = stranger(p->hello); !why.empty()) return refuse(*p, why);
                         const int from = p->hello.from;
                         claimed[from] = true;
                         tune(p->sock);
                         p->reply = make_hello(from);
                         asio::async_write(p->sock, asio::buffer(&p->reply, sizeof(Hello)),
                                           [&, p, from](const boost::system::error_code& ec3, std::size_t) {
                                             if (stopping) return;
                                             if (ec3) return fail(from, "setup: answering the hello: " + ec3.message());
                                             socks[from].emplace(std::move(p->sock));
                                             ++connected;
                                           });
                       });
      accept_next();
    });
  };
  if (rank > 0) accept_next();

  // Connect to every higher rank (retrying while it is not listening yet).
  std::vector<std::optional<tcp::socket>> dialing(world);
  std::vector<std::unique_ptr<asio::steady_timer>> timers(world);
  std::function<void(int, tcp::endpoint)> dial = [&](int q, tcp::endpoint ep) {
    dialing[q].emplace(io);
    dialing[q]->open(ep.protocol());
    tune(*dialing[q]);
    dialing[q]->async_connect(ep, [&, q, ep](const boost::system::error_code& ec) {
      if (stopping) return;
      if (ec) {
        if (Clock::now() >= deadline)
          return fail(q, "setup: cannot connect to " + ep.address().to_string() + ": " + ec.message());
        timers[q] = std::make_unique<asio::steady_timer>(io, std::chrono::milliseconds(20));
        timers[q]->async_wait([&, q, ep](const boost::system::error_code&) {
          if (!stopping) dial(q, ep);
        });
        return;
      }
      out_hello[q] = make_hello(q);
      asio::async_write(*dialing[q], asio::buffer(&out_hello[q], sizeof(Hello)),
                        [&, q](const boost::system::error_code& ec2, std::size_t) {
                          if (ec2) return fail(q, "setup: sending the hello: " + ec2.message());
                          asio::async_read(*dialing[q], asio::buffer(&in_hello[q], sizeof(Hello)),
                                           [&, q](const boost::system::error_code& ec3, std::size_t) {
                                             if (ec3)
                                               return fail(q, "setup: rank " + std::to_string(q) +
                                                                  " refused our hello (" + ec3.message() +
                                                                  "); check that every rank uses the same token and "
                                                                  "world size");
                                             if (!check_reply(in_hello[q], q)) return;
                                             socks[q].emplace(std::move(*dialing[q]));
                                             ++connected;
                                           });
                        });
    });
  };
  auto bail = [&](const std::string& why) {
    stopping = true;
    boost::system::error_code ec;
    acceptor.close(ec);
    for (auto& d : dialing)
      if (d) d->close(ec);
    for (auto& p : accepted) p->sock.close(ec);
    for (auto& t : timers)
      if (t) t->cancel();
    abandon();
    throw Error(why);
  };
  try {
    for (int q = rank + 1; q < world; ++q) {
      const auto [h, port] = split_host_port(q, dir.lookup(q, left()));
      dial(q, tcp::endpoint(asio::ip::make_address(h), port));
    }
  } catch (const std::exception& e) {
    bail(fmt::format("rank {}: setup: {}", rank, e.what()));
  }
  const bool in_time = drive([&] { return connected == expected; }, false);
  if (!in_time || failure) {
    std::string why;
    if (failure)
      why = failure->peer >= 0 ? fmt::format("rank {}: {} (peer rank {})", rank, failure->text, failure->peer)
                               : fmt::format("rank {}: {}", rank, failure->text);
    else
      why = fmt::format(
          "rank {}: setup: only {} of {} peers connected within {} ms{}; start every rank of the job "
          "(same world size, MESHSIM_TOKEN and directory) or raise the timeout",
          rank, connected, expected, opt.timeout.count(),
          refused == 0
              ? std::string()
              : fmt::format(" (refused {} connection{}, the last {})", refused, refused > 1 ? "s" : "", last_refusal));
    bail(why);
  }
  // Every lower rank is in: stop listening, drop whoever else is still connected, and let
  // their cancelled handlers run now (they refer to this frame).
  stopping = true;
  boost::system::error_code ignored;
  acceptor.close(ignored);
  for (auto& p : accepted)
    if (p->sock.is_open()) p->sock.close(ignored);
  for (auto& t : timers)
    if (t) t->cancel();
  io.restart();
  io.run();
  failure.reset();
  for (auto& sk : socks)
    if (sk) fds.push_back(sk->native_handle());
}

// ---- steps -------------------------------------------------------------------------

// Waits until the peer's TCP has acknowledged every byte sent to it (SIOCOUTQ, the unsent
// plus unacknowledged bytes of the socket, is 0) for every peer of `sends`. Returns -1, or
// a peer whose count made no progress for `timeout`.
int Transport::Impl::wait_delivered(std::span<const SendOp> sends) {
  std::vector<int> peers;
  for (const SendOp& s : sends)
    if (std::find(peers.begin(), peers.end(), s.peer) == peers.end()) peers.push_back(s.peer);
  std::vector<int> last(peers.size(), -1);
  auto progress = Clock::now();
  // Poll with a sleep sized to the drain rate seen so far (about half the time the bytes
  // still queued need), between 20 us and 2 ms, so a slow link costs few wake-ups.
  long long prev_total = -1;
  auto prev_time = Clock::now();
  for (;;) {
    long long total = 0;
    for (std::size_t i = 0; i < peers.size(); ++i) {
      int outq = 0;
      const int fd = socks[static_cast<std::size_t>(peers[i])]->native_handle();
      if (::ioctl(fd, SIOCOUTQ, &outq) != 0) outq = 0;
      if (outq > 0) {  // a peer that reset or closed will never acknowledge what is still queued: fail now
        pollfd pfd{fd, static_cast<short>(POLLRDHUP), 0};
        if (::poll(&pfd, 1, 0) > 0) {
          if (pfd.revents & (POLLERR | POLLHUP)) return peers[i];  // reset: the queue was dropped
          // An orderly close: the peer's FIN acknowledges everything it read, and may have
          // arrived after the ioctl above (a peer that finished its last step and closed).
          // Only bytes still unacknowledged now were never taken.
          if (pfd.revents & POLLRDHUP) {
            if (::ioctl(fd, SIOCOUTQ, &outq) != 0) outq = 0;
            if (outq > 0) return peers[i];
          }
        }
      }
      if (outq != last[i]) progress = Clock::now();
      last[i] = outq;
      total += outq;
    }
    if (total == 0) return -1;
    const auto now = Clock::now();
    if (now - progress > opt.timeout)
      for (std::size_t i = 0; i < peers.size(); ++i)
        if (last[i] != 0) return peers[i];
    auto nap = std::chrono::microseconds(20);
    if (prev_total > total) {
      const double rate = static_cast<double>(prev_total - total) /
                          std::chrono::duration<double, std::micro>(now - prev_time).count();  // bytes per us
      nap = std::clamp(std::chrono::microseconds(static_cast<long long>(0.5 * static_cast<double>(total) / rate)),
                       std::chrono::microseconds(20), std::chrono::microseconds(2000));
    }
    prev_total = total;
    prev_time = now;
    std::this_thread::sleep_for(nap);
  }
}

void Transport::Impl::exchange(std::span<const SendOp> sends, std::span<const RecvOpDesc> recvs,
                               const std::string& what) {
  for (const SendOp& s : sends) check_usable(s.peer, what + ": send");
  for (const RecvOpDesc& r : recvs) {
    check_usable(r.peer, what + ": receive");
    if (r.mode == RecvMode::SumFloat && r.bytes % sizeof(float) != 0)
      throw Error(fmt::format("rank {}: {}: a summing receive of {} bytes from rank {} is not whole float32 values",
                              rank, what, r.bytes, r.peer));
  }
  // Per peer: the ops in order, and the progress through them.
  struct Chan {
    std::vector<const SendOp*> sends;
    std::vector<const RecvOpDesc*> recvs;
    std::size_t si = 0, ri = 0;
    Frame out_frame, in_frame;
    std::array<asio::const_buffer, 2> out_bufs;
    std::size_t sent = 0;       // bytes of frame + payload of sends[si] written
    std::size_t got_frame = 0;  // header bytes of recvs[ri] read
    std::size_t got = 0;        // payload bytes of recvs[ri] read (SumFloat: also added, except `fill`)
    std::size_t fill = 0;       // SumFloat: bytes in scratch not yet added
  };
  std::vector<Chan> ch(world);
  std::vector<std::string> abort_text(world);
  for (const SendOp& s : sends) ch[s.peer].sends.push_back(&s);
  for (const RecvOpDesc& r : recvs) ch[r.peer].recvs.push_back(&r);
  std::size_t pending = sends.size() + recvs.size();
  failure.reset();

  std::function<void(int)> write_more, read_more;
  write_more = [&](int q) {
    Chan& c = ch[q];
    if (c.si == c.sends.size()) return;
    const SendOp& s = *c.sends[c.si];
    if (c.sent == 0) c.out_frame.bytes = s.bytes;
    // The buffer sequence must outlive the operation: it lives in the channel.
    std::size_t n = 0;
    if (c.sent < sizeof(Frame))
      c.out_bufs[n++] = asio::buffer(reinterpret_cast<const char*>(&c.out_frame) + c.sent, sizeof(Frame) - c.sent);
    const std::size_t payload_done = c.sent > sizeof(Frame) ? c.sent - sizeof(Frame) : 0;
    if (s.bytes > payload_done)
      c.out_bufs[n++] = asio::buffer(static_cast<const char*>(s.data) + payload_done, s.bytes - payload_done);
    socks[q]->async_write_some(std::span(c.out_bufs.data(), n),
                               [&, q](const boost::system::error_code& ec, std::size_t k) {
                                 Chan& cc = ch[q];
                                 const SendOp& op = *cc.sends[cc.si];
                                 if (ec) return fail(q, fmt::format("sending {} bytes ({})", op.bytes, ec.message()));
                                 cc.sent += k;
                                 if (cc.sent == sizeof(Frame) + op.bytes) {
                                   cc.sent = 0;
                                   ++cc.si;
                                   --pending;
                                 }
                                 write_more(q);
                               });
  };
  read_more = [&](int q) {
    Chan& c = ch[q];
    if (c.ri == c.recvs.size()) return;
    const RecvOpDesc& r = *c.recvs[c.ri];
    auto on_read = [&, q](const boost::system::error_code& ec, std::size_t k) {
      Chan& cc = ch[q];
      const RecvOpDesc& op = *cc.recvs[cc.ri];
      if (ec)
        return fail(q, fmt::format("receiving {} bytes ({})", op.bytes,
                                   ec == asio::error::eof ? "the peer closed the connection" : ec.message()));
      // Acknowledge now rather than after the delayed-ACK timer (40 ms on Linux): the
      // sender's step waits for delivery (wait_delivered), so a late ACK is dead time.
      if (opt.wait_delivered) {
        const int one = 1;
        ::setsockopt(socks[q]->native_handle(), IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
      }
      if (cc.got_frame < sizeof(Frame)) {
        cc.got_frame += k;
        if (cc.got_frame < sizeof(Frame)) return read_more(q);
        if (cc.in_frame.magic == kAbortMagic) {
          abort_text[q].assign(std::min<std::size_t>(cc.in_frame.bytes, kMaxAbortText), '\0');
          return asio::async_read(*socks[q], asio::buffer(abort_text[q]),
                                  [&, q](const boost::system::error_code& ec2, std::size_t) {
                                    if (ec2) return fail(q, "the peer gave up and closed the connection");
                                    fail(q, abort_text[q], Why::Aborted);
                                  });
        }
        if (cc.in_frame.magic != kFrameMagic)
          return fail(q,
                      fmt::format("the stream from rank {} is out of sync (bad frame magic); both ranks must run "
                                  "the same program",
                                  q),
                      Why::Protocol);
        if (cc.in_frame.bytes != op.bytes)
          return fail(q,
                      fmt::format("rank {} sent a {}-byte message where rank {} expects {} bytes; the two ranks "
                                  "run different step programs or buffer sizes",
                                  q, cc.in_frame.bytes, rank, op.bytes),
                      Why::Protocol);
      } else if (op.mode == RecvMode::Copy) {
        cc.got += k;
      } else {
        cc.fill += k;
        const std::size_t whole = cc.fill / sizeof(float);
        float* dst = static_cast<float*>(op.data) + cc.got / sizeof(float);
        kernels::reduce_sum_cpu(dst, scratch[q].data(), whole);
        const std::size_t rest = cc.fill - whole * sizeof(float);
        if (rest > 0) std::memmove(scratch[q].data(), reinterpret_cast<char*>(scratch[q].data()) + whole * 4, rest);
        cc.got += whole * sizeof(float);
        cc.fill = rest;
      }
      if (cc.got_frame == sizeof(Frame) && cc.got == op.bytes) {
        cc.got_frame = cc.got = cc.fill = 0;
        ++cc.ri;
        --pending;
      }
      read_more(q);
    };
    if (c.got_frame < sizeof(Frame)) {
      socks[q]->async_read_some(
          asio::buffer(reinterpret_cast<char*>(&c.in_frame) + c.got_frame, sizeof(Frame) - c.got_frame), on_read);
    } else if (r.mode == RecvMode::Copy) {
      socks[q]->async_read_some(asio::buffer(static_cast<char*>(r.data) + c.got, r.bytes - c.got), on_read);
    } else {
      auto& sc = scratch[q];
      if (sc.size() * sizeof(float) < kReduceChunk) sc.resize(kReduceChunk / sizeof(float));
      const std::size_t room = std::min(kReduceChunk - c.fill, r.bytes - c.got - c.fill);
      socks[q]->async_read_some(asio::buffer(reinterpret_cast<char*>(sc.data()) + c.fill, room), on_read);
    }
  };
  for (int q = 0; q < world; ++q) {
    write_more(q);
    read_more(q);
  }
  const bool in_time = drive([&] { return pending == 0; }, true);
  int undelivered = -1;  // a peer that did not acknowledge our bytes in time
  if (in_time && !failure && opt.wait_delivered) {
    undelivered = wait_delivered(sends);
    if (undelivered < 0) return;
  }
  if (in_time && !failure && undelivered < 0) return;
  std::string msg;
  std::string root;  // what peers are told
  if (failure && failure->why == Why::Aborted) {
    root = failure->text;
    msg = fmt::format("rank {}: {} stopped because rank {} gave up: {}", rank, what, failure->peer, root);
  } else if (failure && failure->why == Why::Protocol) {
    msg = fmt::format("rank {}: {}: {}", rank, what, failure->text);
  } else if (failure) {
    msg = fmt::format(
        "rank {}: lost connection to rank {} during {}: {}; rank {} exited, closed its transport or "
        "failed -- check its log",
        rank, failure->peer, what, failure->text, failure->peer);
  } else if (undelivered >= 0) {
    msg = fmt::format(
        "rank {}: lost connection to rank {} during {}: rank {} closed the connection or did not take "
        "delivery of the bytes sent to it for {} ms; it failed, is stuck or runs a different program -- check its log "
        "or raise "
        "TransportOptions::timeout",
        rank, undelivered, what, undelivered, opt.timeout.count());
  } else {
    int q = 0;
    std::string doing;
    for (int i = 0; i < world && doing.empty(); ++i)
      if (ch[i].ri < ch[i].recvs.size())
        q = i, doing = fmt::format("waiting to receive {} bytes", ch[i].recvs[ch[i].ri]->bytes);
    for (int i = 0; i < world && doing.empty(); ++i)
      if (ch[i].si < ch[i].sends.size())
        q = i, doing = fmt::format("waiting to send {} bytes", ch[i].sends[ch[i].si]->bytes);
    msg = fmt::format(
        "rank {}: lost connection to rank {} during {}: no progress for {} ms ({}); rank {} is stuck, "
        "dead or runs a different program -- check its log or raise TransportOptions::timeout",
        rank, q, what, opt.timeout.count(), doing, q);
  }
  if (root.empty()) root = msg;
  std::vector<bool> mid_message(world, false);
  for (int q = 0; q < world; ++q) mid_message[q] = ch[q].sent > 0;
  if (failure && failure->why == Why::Lost) mid_message[failure->peer] = true;  // that link is gone
  send_abort(root, mid_message);
  abandon();
  throw Error(msg);
}

// ---- public ------------------------------------------------------------------------

Transport::Transport(int rank, int world, PeerDirectory& directory, TransportOptions options)
    : rank_(rank), world_(world) {
  if (world < 1 || rank < 0 || rank >= world)
    throw Error(fmt::format("transport: rank {} of world {}; need 0 <= rank < world", rank, world));
  impl_ = std::make_unique<Impl>(rank, world, std::move(options));
  impl_->setup(directory);
}

Transport::~Transport() { close(); }

void Transport::close() {
  if (!impl_ || impl_->closed) return;
  impl_->abandon();
}

void Transport::interrupt() {
  if (!impl_) return;
  for (const int fd : impl_->fds) ::shutdown(fd, SHUT_RDWR);  // wakes the owner's pending operations
}

void Transport::send(int peer, const void* data, std::size_t bytes) {
  const SendOp op{peer, data, bytes};
  impl_->exchange(std::span(&op, 1), {}, fmt::format("send to rank {}", peer));
}

void Transport::recv(int peer, void* data, std::size_t bytes) {
  const RecvOpDesc op{peer, data, bytes, RecvMode::Copy};
  impl_->exchange({}, std::span(&op, 1), fmt::format("receive from rank {}", peer));
}

void Transport::exchange(std::span<const SendOp> sends, std::span<const RecvOpDesc> recvs, const std::string& what) {
  impl_->exchange(sends, recvs, what);
}

}  // namespace meshsim::cpu
