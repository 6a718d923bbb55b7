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
constexpr std::size_t kReduceChunk = 256 << 10;     // SumFloat receives add this many bytes at a time
constexpr std::chrono::milliseconds kJobPoll{100};  // how often a waiting call asks opt.job_failed

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
  // Job: the store says the job failed (opt.job_failed); text says why, peer is -1.
  enum class Why { Lost, Protocol, Aborted, Job };
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
    auto next_check = Clock::now() + kJobPoll;
    while (!done() && !failure) {
      if (io.run_one_until(opt.job_failed ? std::min(deadline, next_check) : deadline) > 0) {
        if (idle) deadline = Clock::now() + opt.timeout;
        if (!opt.job_failed || Clock::now() < next_check) continue;
      }
      if (done() || failure) break;
      if (Clock::now() >= next_check) {
        next_check = Clock::now() + kJobPoll;
        if (job_failed()) break;
      }
      if (Clock::now() >= deadline) return false;
      MESHSIM_ASSERT(!io.stopped());  // outstanding operations keep the io_context busy
    }
    return true;
  }

  // Asks opt.job_failed (every kJobPoll while waiting); true (and `failure` set) when the
  // store says the job failed.
  bool job_failed() {
    if (!opt.job_failed) return false;
    std::string why = opt.job_failed();
    if (why.empty()) return false;
    fail(-1, "the run failed: " + why, Why::Job);
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

  class Setup;  // one run of setup()
  class Step;   // one run of exchange()
  void setup(PeerDirectory& dir);
  void exchange(std::span<const SendOp> sends, std::span<const RecvOpDesc> recvs, const std::string& what);
  int wait_delivered(std::span<const SendOp> sends);
};

// ---- setup -------------------------------------------------------------------------

// One run of setup(): the listening socket, the connections on their way in (accepted,
// waiting for a hello) and out (dialled, trading hellos), and the named handlers that move
// them along. The handlers refer to this object, which lives in setup()'s frame, so every
// way out of run() first closes everything and lets the cancelled handlers run.
//
// Accepting: every lower rank connects, sends its hello and gets ours back. Anyone who can
// reach the port can connect, so a connection counts as rank p only once its hello carries
// the job's token, this world size, this rank as addressee and a lower rank p not connected
// yet. Anything else (a port scanner, garbage, another job, a duplicate) is closed and
// logged, and setup goes on waiting for the real ranks; if they never come, the timeout's
// error names what was refused.
//
// Dialling: this rank connects to every higher rank (retrying while it is not listening
// yet), sends its hello and checks the reply.
class Transport::Impl::Setup {
 public:
  Setup(Impl& t, PeerDirectory& dir)
      : t_(t),
        dir_(dir),
        deadline_(Clock::now() + t.opt.timeout),
        acceptor_(t.io),
        expected_(t.world - 1),
        out_hello_(static_cast<std::size_t>(t.world)),
        in_hello_(static_cast<std::size_t>(t.world)),
        claimed_(static_cast<std::size_t>(t.world), false),
        max_pending_(static_cast<std::size_t>(t.world) + 64),
        dialing_(static_cast<std::size_t>(t.world)),
        timers_(static_cast<std::size_t>(t.world)) {}

  // Listens, publishes, connects every pair; throws Error (after closing everything) on
  // failure or timeout.
  void run();

 private:
  using error_code = boost::system::error_code;
  // A connection accepted on the listening socket, not yet known to be a rank.
  struct Pending {
    tcp::socket sock;
    std::string who;  // "address:port"
    Hello hello;
    Hello reply;
  };

  std::chrono::milliseconds left() const {
    return std::max(std::chrono::milliseconds(1),
                    std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - Clock::now()));
  }
  void listen();
  Hello make_hello(int to) const;
  bool same_token(const Hello& h) const;
  bool check_reply(const Hello& h, int q);
  std::string stranger(const Hello& h) const;
  void log(const std::string& line) const;
  void refuse(Pending& p, const std::string& why);

  void accept_next();
  void on_accept(const error_code& ec, tcp::socket s);
  void on_hello(const std::shared_ptr<Pending>& p, const error_code& ec);
  void on_replied(const std::shared_ptr<Pending>& p, int from, const error_code& ec);

  void dial(int q, const tcp::endpoint& ep);
  void on_connect(int q, const tcp::endpoint& ep, const error_code& ec);
  void on_hello_sent(int q, const error_code& ec);
  void on_reply(int q, const error_code& ec);

  std::string why_failed() const;
  [[noreturn]] void bail(const std::string& why);
  void finish();

  Impl& t_;
  PeerDirectory& dir_;
  const Clock::time_point deadline_;
  tcp::acceptor acceptor_;
  int connected_ = 0;
  const int expected_;
  bool stopping_ = false;  // set before draining after a failure: no more retries
  std::vector<Hello> out_hello_, in_hello_;
  std::vector<std::shared_ptr<Pending>> accepted_;  // closed by bail() so draining cannot block
  std::vector<bool> claimed_;                       // a hello from this rank was accepted
  int refused_ = 0;
  std::string last_refusal_;
  const std::size_t max_pending_;
  std::vector<std::optional<tcp::socket>> dialing_;
  std::vector<std::unique_ptr<asio::steady_timer>> timers_;
};

void Transport::Impl::setup(PeerDirectory& dir) { Setup(*this, dir).run(); }

void Transport::Impl::Setup::run() {
  listen();
  if (t_.opt.token.size() > kMaxToken)
    throw Error(fmt::format("rank {}: token has {} bytes; use at most {}", t_.rank, t_.opt.token.size(), kMaxToken));
  if (t_.rank > 0) accept_next();
  try {
    for (int q = t_.rank + 1; q < t_.world; ++q) {
      const auto [h, port] = split_host_port(q, dir_.lookup(q, left()));
      dial(q, tcp::endpoint(asio::ip::make_address(h), port));
    }
  } catch (const std::exception& e) {
    bail(fmt::format("rank {}: setup: {}", t_.rank, e.what()));
  }
  const bool in_time = t_.drive([&] { return connected_ == expected_; }, false);
  if (!in_time || t_.failure) bail(why_failed());
  finish();
}

// Opens the listening socket on bind_addr port 0 and publishes its "host:port".
void Transport::Impl::Setup::listen() {
  const TransportOptions& opt = t_.opt;
  try {
    const tcp::endpoint ep(asio::ip::make_address(opt.bind_addr), 0);
    acceptor_.open(ep.protocol());
    acceptor_.set_option(tcp::acceptor::reuse_address(true));
    if (opt.socket_buffer_bytes > 0) {  // before listen, so accepted sockets scale their window
      acceptor_.set_option(asio::socket_base::send_buffer_size(opt.socket_buffer_bytes));
      acceptor_.set_option(asio::socket_base::receive_buffer_size(opt.socket_buffer_bytes));
    }
    acceptor_.bind(ep);
    acceptor_.listen(std::max(t_.world, 16));
  } catch (const boost::system::system_error& e) {
    throw Error(
        fmt::format("rank {}: cannot listen on {}: {}; set TransportOptions::bind_addr to an address of this "
                    "host",
                    t_.rank, opt.bind_addr, e.code().message()));
  }
  const std::string host = acceptor_.local_endpoint().address().is_v6()
                               ? "[" + acceptor_.local_endpoint().address().to_string() + "]"
                               : acceptor_.local_endpoint().address().to_string();
  dir_.publish(t_.rank, fmt::format("{}:{}", host, acceptor_.local_endpoint().port()));
}

Hello Transport::Impl::Setup::make_hello(int to) const {
  Hello h;
  h.from = t_.rank;
  h.to = to;
  h.world = t_.world;
  h.token_len = static_cast<std::uint32_t>(t_.opt.token.size());
  std::memcpy(h.token, t_.opt.token.data(), t_.opt.token.size());
  return h;
}

// No early exit on the first differing byte.
bool Transport::Impl::Setup::same_token(const Hello& h) const {
  const std::string& token = t_.opt.token;
  if (h.token_len != token.size()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < token.size(); ++i) diff |= static_cast<unsigned char>(h.token[i] ^ token[i]);
  return diff == 0;
}

// Checks the hello that the higher rank `q` answers ours with; fails setup on a mismatch
// (we dialled the address `q` published in the directory: it is no stranger).
bool Transport::Impl::Setup::check_reply(const Hello& h, int q) {
  if (h.magic != kHelloMagic || h.version != kVersion) {
    t_.fail(q,
            "setup: the peer is not a meshsim transport of this version (bad hello); check the address and "
            "that every rank runs the same build");
    return false;
  }
  if (!same_token(h)) {
    t_.fail(q, "setup: wrong token in hello; start every rank of the job with the same MESHSIM_TOKEN");
    return false;
  }
  if (h.world != t_.world || h.to != t_.rank || h.from != q) {
    t_.fail(q, fmt::format("setup: hello from rank {} (world {}) addressed to rank {}; this is rank {} of {} -- the "
                           "ranks disagree on the world size or rank numbering",
                           h.from, h.world, h.to, t_.rank, t_.world));
    return false;
  }
  return true;
}

// Why a hello is not from a rank this rank still waits for ("" when it is).
std::string Transport::Impl::Setup::stranger(const Hello& h) const {
  const int rank = t_.rank, world = t_.world;
  if (h.magic != kHelloMagic || h.version != kVersion) return "not a meshsim hello of this version";
  if (!same_token(h)) return "wrong token (not MESHSIM_TOKEN of this job)";
  if (h.world != world || h.to != rank)
    return fmt::format("hello for rank {} of world {}; this is rank {} of {}", h.to, h.world, rank, world);
  if (h.from < 0 || h.from >= rank)
    return fmt::format("claims rank {}; only ranks 0..{} connect to rank {}", h.from, rank - 1, rank);
  if (claimed_[static_cast<std::size_t>(h.from)])
    return fmt::format("claims rank {}, which is already connected", h.from);
  return "";
}

void Transport::Impl::Setup::log(const std::string& line) const {
  if (refused_ > 17) return;  // a flood of strangers does not flood the log
  const std::string text = refused_ <= 16 ? fmt::format("meshsim: rank {}: transport setup: {}", t_.rank, line)
                                          : fmt::format(
                                                "meshsim: rank {}: transport setup: more than 16 "
                                                "connections refused; no more are logged",
                                                t_.rank);
  if (t_.opt.log)
    t_.opt.log(text);
  else
    std::fprintf(stderr, "%s\n", text.c_str());
}

void Transport::Impl::Setup::refuse(Pending& p, const std::string& why) {
  ++refused_;
  last_refusal_ = fmt::format("from {}: {}", p.who, why);
  log(fmt::format("refused a connection from {}: {}", p.who, why));
  error_code ignored;
  p.sock.close(ignored);
}

// ---- setup: accepting from the lower ranks

void Transport::Impl::Setup::accept_next() {
  acceptor_.async_accept([this](const error_code& ec, tcp::socket s) { on_accept(ec, std::move(s)); });
}

// A connection came in: at most max_pending_ wait for their hello at once.
void Transport::Impl::Setup::on_accept(const error_code& ec, tcp::socket s) {
  if (stopping_) return;
  if (ec) return t_.fail(-1, "setup: accept failed: " + ec.message());
  error_code ignored;
  const auto remote = s.remote_endpoint(ignored);
  auto p = std::make_shared<Pending>(
      Pending{std::move(s), fmt::format("{}:{}", remote.address().to_string(), remote.port()), {}, {}});
  std::erase_if(accepted_, [](const std::shared_ptr<Pending>& q) { return !q->sock.is_open(); });
  if (accepted_.size() >= max_pending_) {
    refuse(*p, fmt::format("{} connections are already waiting for their hello", accepted_.size()));
    return accept_next();
  }
  accepted_.push_back(p);
  asio::async_read(p->sock, asio::buffer(&p->hello, sizeof(Hello)),
                   [this, p](const error_code& ec2, std::size_t) { on_hello(p, ec2); });
  accept_next();
}

// Its hello is in: a rank still awaited gets ours back, anyone else is refused.
void Transport::Impl::Setup::on_hello(const std::shared_ptr<Pending>& p, const error_code& ec) {
  if (stopping_) return;
  if (ec) return refuse(*p, "closed before a whole hello (" + ec.message() + ")");
  if (const std::string why = stranger(p->hello); !why.empty()) return refuse(*p, why);
  const int from = p->hello.from;
  claimed_[static_cast<std::size_t>(from)] = true;
  t_.tune(p->sock);
  p->reply = make_hello(from);
  asio::async_write(p->sock, asio::buffer(&p->reply, sizeof(Hello)),
                    [this, p, from](const error_code& ec2, std::size_t) { on_replied(p, from, ec2); });
}

void Transport::Impl::Setup::on_replied(const std::shared_ptr<Pending>& p, int from, const error_code& ec) {
  if (stopping_) return;
  if (ec) return t_.fail(from, "setup: answering the hello: " + ec.message());
  t_.socks[static_cast<std::size_t>(from)].emplace(std::move(p->sock));
  ++connected_;
}

// ---- setup: dialling the higher ranks

void Transport::Impl::Setup::dial(int q, const tcp::endpoint& ep) {
  auto& d = dialing_[static_cast<std::size_t>(q)];
  d.emplace(t_.io);
  d->open(ep.protocol());
  t_.tune(*d);
  d->async_connect(ep, [this, q, ep](const error_code& ec) { on_connect(q, ep, ec); });
}

// Connected: send our hello. Refused: retry in 20 ms until the deadline.
void Transport::Impl::Setup::on_connect(int q, const tcp::endpoint& ep, const error_code& ec) {
  if (stopping_) return;
  const auto i = static_cast<std::size_t>(q);
  if (ec) {
    if (Clock::now() >= deadline_)
      return t_.fail(q, "setup: cannot connect to " + ep.address().to_string() + ": " + ec.message());
    timers_[i] = std::make_unique<asio::steady_timer>(t_.io, std::chrono::milliseconds(20));
    timers_[i]->async_wait([this, q, ep](const error_code&) {
      if (!stopping_) dial(q, ep);
    });
    return;
  }
  out_hello_[i] = make_hello(q);
  asio::async_write(*dialing_[i], asio::buffer(&out_hello_[i], sizeof(Hello)),
                    [this, q](const error_code& ec2, std::size_t) { on_hello_sent(q, ec2); });
}

void Transport::Impl::Setup::on_hello_sent(int q, const error_code& ec) {
  if (ec) return t_.fail(q, "setup: sending the hello: " + ec.message());
  const auto i = static_cast<std::size_t>(q);
  asio::async_read(*dialing_[i], asio::buffer(&in_hello_[i], sizeof(Hello)),
                   [this, q](const error_code& ec2, std::size_t) { on_reply(q, ec2); });
}

void Transport::Impl::Setup::on_reply(int q, const error_code& ec) {
  if (ec)
    return t_.fail(q, "setup: rank " + std::to_string(q) + " refused our hello (" + ec.message() +
                          "); check that every rank uses the same token and world size");
  const auto i = static_cast<std::size_t>(q);
  if (!check_reply(in_hello_[i], q)) return;
  t_.socks[i].emplace(std::move(*dialing_[i]));
  ++connected_;
}

// ---- setup: endings

// The error of a setup that failed or ran out of time.
std::string Transport::Impl::Setup::why_failed() const {
  const int rank = t_.rank;
  if (const auto& f = t_.failure)
    return f->peer >= 0 ? fmt::format("rank {}: {} (peer rank {})", rank, f->text, f->peer)
                        : fmt::format("rank {}: {}", rank, f->text);
  return fmt::format(
      "rank {}: setup: only {} of {} peers connected within {} ms{}; start every rank of the job "
      "(same world size, MESHSIM_TOKEN and directory) or raise the timeout",
      rank, connected_, expected_, t_.opt.timeout.count(),
      refused_ == 0
          ? std::string()
          : fmt::format(" (refused {} connection{}, the last {})", refused_, refused_ > 1 ? "s" : "", last_refusal_));
}

// Closes everything, lets the cancelled handlers run, marks the transport dead and throws.
void Transport::Impl::Setup::bail(const std::string& why) {
  stopping_ = true;
  error_code ec;
  acceptor_.close(ec);
  for (auto& d : dialing_)
    if (d) d->close(ec);
  for (auto& p : accepted_) p->sock.close(ec);
  for (auto& t : timers_)
    if (t) t->cancel();
  t_.abandon();
  throw Error(why);
}

// Every lower rank is in: stop listening, drop whoever else is still connected, and let
// their cancelled handlers run now (they refer to this object).
void Transport::Impl::Setup::finish() {
  stopping_ = true;
  error_code ignored;
  acceptor_.close(ignored);
  for (auto& p : accepted_)
    if (p->sock.is_open()) p->sock.close(ignored);
  for (auto& t : timers_)
    if (t) t->cancel();
  t_.io.restart();
  t_.io.run();
  t_.failure.reset();
  for (auto& sk : t_.socks)
    if (sk) t_.fds.push_back(sk->native_handle());
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
  auto next_check = Clock::now() + kJobPoll;
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
    if (now >= next_check) {
      next_check = now + kJobPoll;
      if (job_failed()) return -1;  // `failure` says why
    }
    std::this_thread::sleep_for(nap);
  }
}

// One exchange(): per peer, its ops in order and the progress through them, and the named
// handlers that write and read them. The handlers refer to this object, which lives in
// exchange()'s frame; a failed step lets them all finish (abandon()) before it throws.
class Transport::Impl::Step {
 public:
  Step(Impl& t, std::span<const SendOp> sends, std::span<const RecvOpDesc> recvs, const std::string& what);
  // Runs the step to its end; throws Error (after telling the peers and closing) on failure.
  void run();

 private:
  using error_code = boost::system::error_code;
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

  void write_more(int q);
  void on_written(int q, const error_code& ec, std::size_t k);
  void read_more(int q);
  void on_read(int q, const error_code& ec, std::size_t k);
  bool on_header(int q, std::size_t k);
  void add_summed(int q, std::size_t k);
  std::string failure_message(int undelivered, std::string& root) const;
  std::string stall_message() const;
  [[noreturn]] void give_up(int undelivered);

  Impl& t_;
  std::span<const SendOp> sends_;
  const std::string& what_;
  std::vector<Chan> ch_;
  std::vector<std::string> abort_text_;
  std::size_t pending_;  // ops not complete yet
};

void Transport::Impl::exchange(std::span<const SendOp> sends, std::span<const RecvOpDesc> recvs,
                               const std::string& what) {
  for (const SendOp& s : sends) check_usable(s.peer, what + ": send");
  for (const RecvOpDesc& r : recvs) {
    check_usable(r.peer, what + ": receive");
    if (r.mode == RecvMode::SumFloat && r.bytes % sizeof(float) != 0)
      throw Error(fmt::format("rank {}: {}: a summing receive of {} bytes from rank {} is not whole float32 values",
                              rank, what, r.bytes, r.peer));
  }
  Step(*this, sends, recvs, what).run();
}

Transport::Impl::Step::Step(Impl& t, std::span<const SendOp> sends, std::span<const RecvOpDesc> recvs,
                            const std::string& what)
    : t_(t),
      sends_(sends),
      what_(what),
      ch_(static_cast<std::size_t>(t.world)),
      abort_text_(static_cast<std::size_t>(t.world)),
      pending_(sends.size() + recvs.size()) {
  for (const SendOp& s : sends) ch_[static_cast<std::size_t>(s.peer)].sends.push_back(&s);
  for (const RecvOpDesc& r : recvs) ch_[static_cast<std::size_t>(r.peer)].recvs.push_back(&r);
  t_.failure.reset();
}

void Transport::Impl::Step::run() {
  for (int q = 0; q < t_.world; ++q) {
    write_more(q);
    read_more(q);
  }
  const bool in_time = t_.drive([&] { return pending_ == 0; }, true);
  int undelivered = -1;  // a peer that did not acknowledge our bytes in time
  if (in_time && !t_.failure && t_.opt.wait_delivered) {
    undelivered = t_.wait_delivered(sends_);
    if (undelivered < 0 && !t_.failure) return;
  }
  if (in_time && !t_.failure && undelivered < 0) return;
  give_up(undelivered);
}

// Writes what is left of the peer's current send: the rest of its frame and payload.
void Transport::Impl::Step::write_more(int q) {
  Chan& c = ch_[static_cast<std::size_t>(q)];
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
  t_.socks[static_cast<std::size_t>(q)]->async_write_some(
      std::span(c.out_bufs.data(), n), [this, q](const error_code& ec, std::size_t k) { on_written(q, ec, k); });
}

void Transport::Impl::Step::on_written(int q, const error_code& ec, std::size_t k) {
  Chan& c = ch_[static_cast<std::size_t>(q)];
  const SendOp& op = *c.sends[c.si];
  if (ec) return t_.fail(q, fmt::format("sending {} bytes ({})", op.bytes, ec.message()));
  c.sent += k;
  if (c.sent == sizeof(Frame) + op.bytes) {
    c.sent = 0;
    ++c.si;
    --pending_;
  }
  write_more(q);
}

// Reads the next piece of the peer's current receive: its frame header, then its payload
// (Copy: into the destination; SumFloat: into the scratch, a chunk at most).
void Transport::Impl::Step::read_more(int q) {
  const auto i = static_cast<std::size_t>(q);
  Chan& c = ch_[i];
  if (c.ri == c.recvs.size()) return;
  const RecvOpDesc& r = *c.recvs[c.ri];
  tcp::socket& sock = *t_.socks[i];
  auto on = [this, q](const error_code& ec, std::size_t k) { on_read(q, ec, k); };
  if (c.got_frame < sizeof(Frame)) {
    sock.async_read_some(asio::buffer(reinterpret_cast<char*>(&c.in_frame) + c.got_frame, sizeof(Frame) - c.got_frame),
                         on);
  } else if (r.mode == RecvMode::Copy) {
    sock.async_read_some(asio::buffer(static_cast<char*>(r.data) + c.got, r.bytes - c.got), on);
  } else {
    auto& sc = t_.scratch[i];
    if (sc.size() * sizeof(float) < kReduceChunk) sc.resize(kReduceChunk / sizeof(float));
    const std::size_t room = std::min(kReduceChunk - c.fill, r.bytes - c.got - c.fill);
    sock.async_read_some(asio::buffer(reinterpret_cast<char*>(sc.data()) + c.fill, room), on);
  }
}

void Transport::Impl::Step::on_read(int q, const error_code& ec, std::size_t k) {
  Chan& c = ch_[static_cast<std::size_t>(q)];
  const RecvOpDesc& op = *c.recvs[c.ri];
  if (ec)
    return t_.fail(q, fmt::format("receiving {} bytes ({})", op.bytes,
                                  ec == asio::error::eof ? "the peer closed the connection" : ec.message()));
  // Acknowledge now rather than after the delayed-ACK timer (40 ms on Linux): the
  // sender's step waits for delivery (wait_delivered), so a late ACK is dead time.
  if (t_.opt.wait_delivered) {
    const int one = 1;
    ::setsockopt(t_.socks[static_cast<std::size_t>(q)]->native_handle(), IPPROTO_TCP, TCP_QUICKACK, &one, sizeof one);
  }
  if (c.got_frame < sizeof(Frame)) {
    if (!on_header(q, k)) return;
  } else if (op.mode == RecvMode::Copy) {
    c.got += k;
  } else {
    add_summed(q, k);
  }
  if (c.got_frame == sizeof(Frame) && c.got == op.bytes) {
    c.got_frame = c.got = c.fill = 0;
    ++c.ri;
    --pending_;
  }
  read_more(q);
}

// `k` more header bytes of the current receive arrived. Returns true when the header is
// whole and matches the receive; otherwise it has read on, failed the step, or started
// reading the peer's abort message.
bool Transport::Impl::Step::on_header(int q, std::size_t k) {
  const auto i = static_cast<std::size_t>(q);
  Chan& c = ch_[i];
  const RecvOpDesc& op = *c.recvs[c.ri];
  c.got_frame += k;
  if (c.got_frame < sizeof(Frame)) {
    read_more(q);
    return false;
  }
  if (c.in_frame.magic == kAbortMagic) {
    abort_text_[i].assign(std::min<std::size_t>(c.in_frame.bytes, kMaxAbortText), '\0');
    asio::async_read(*t_.socks[i], asio::buffer(abort_text_[i]), [this, q, i](const error_code& ec, std::size_t) {
      if (ec) return t_.fail(q, "the peer gave up and closed the connection");
      t_.fail(q, abort_text_[i], Why::Aborted);
    });
    return false;
  }
  if (c.in_frame.magic != kFrameMagic) {
    t_.fail(q,
            fmt::format("the stream from rank {} is out of sync (bad frame magic); both ranks must run "
                        "the same program",
                        q),
            Why::Protocol);
    return false;
  }
  if (c.in_frame.bytes != op.bytes) {
    t_.fail(q,
            fmt::format("rank {} sent a {}-byte message where rank {} expects {} bytes; the two ranks "
                        "run different step programs or buffer sizes",
                        q, c.in_frame.bytes, t_.rank, op.bytes),
            Why::Protocol);
    return false;
  }
  return true;
}

// `k` more bytes of a SumFloat receive are in the scratch: adds the whole floats among them
// to the destination and keeps the rest for the next read.
void Transport::Impl::Step::add_summed(int q, std::size_t k) {
  Chan& c = ch_[static_cast<std::size_t>(q)];
  const RecvOpDesc& op = *c.recvs[c.ri];
  auto& sc = t_.scratch[static_cast<std::size_t>(q)];
  c.fill += k;
  const std::size_t whole = c.fill / sizeof(float);
  float* dst = static_cast<float*>(op.data) + c.got / sizeof(float);
  kernels::reduce_sum_cpu(dst, sc.data(), whole);
  const std::size_t rest = c.fill - whole * sizeof(float);
  if (rest > 0) std::memmove(sc.data(), reinterpret_cast<char*>(sc.data()) + whole * 4, rest);
  c.got += whole * sizeof(float);
  c.fill = rest;
}

// The error of a failed step; `root` gets what the peers are told when it is not the error.
std::string Transport::Impl::Step::failure_message(int undelivered, std::string& root) const {
  const int rank = t_.rank;
  const auto& f = t_.failure;
  if (f && f->why == Why::Aborted) {
    root = f->text;
    return fmt::format("rank {}: {} stopped because rank {} gave up: {}", rank, what_, f->peer, root);
  }
  if (f && f->why == Why::Protocol) return fmt::format("rank {}: {}: {}", rank, what_, f->text);
  if (f && f->why == Why::Job) {
    root = f->text;
    return fmt::format("rank {}: {} stopped: {}", rank, what_, f->text);
  }
  if (f)
    return fmt::format(
        "rank {}: lost connection to rank {} during {}: {}; rank {} exited, closed its transport or "
        "failed -- check its log",
        rank, f->peer, what_, f->text, f->peer);
  if (undelivered >= 0)
    return fmt::format(
        "rank {}: lost connection to rank {} during {}: rank {} closed the connection or did not take "
        "delivery of the bytes sent to it for {} ms; it failed, is stuck or runs a different program -- check its "
        "log or raise "
        "TransportOptions::timeout",
        rank, undelivered, what_, undelivered, t_.opt.timeout.count());
  return stall_message();
}

// The error of a step that made no progress for `timeout`: names the first peer it waits for.
std::string Transport::Impl::Step::stall_message() const {
  const int world = t_.world;
  int q = 0;
  std::string doing;
  for (int i = 0; i < world && doing.empty(); ++i) {
    const Chan& c = ch_[static_cast<std::size_t>(i)];
    if (c.ri < c.recvs.size()) q = i, doing = fmt::format("waiting to receive {} bytes", c.recvs[c.ri]->bytes);
  }
  for (int i = 0; i < world && doing.empty(); ++i) {
    const Chan& c = ch_[static_cast<std::size_t>(i)];
    if (c.si < c.sends.size()) q = i, doing = fmt::format("waiting to send {} bytes", c.sends[c.si]->bytes);
  }
  return fmt::format(
      "rank {}: lost connection to rank {} during {}: no progress for {} ms ({}); rank {} is stuck, "
      "dead or runs a different program -- check its log or raise TransportOptions::timeout",
      t_.rank, q, what_, t_.opt.timeout.count(), doing, q);
}

// Tells the peers why (those whose stream sits between messages), closes and throws.
void Transport::Impl::Step::give_up(int undelivered) {
  std::string root;  // what peers are told
  const std::string msg = failure_message(undelivered, root);
  if (root.empty()) root = msg;
  std::vector<bool> mid_message(static_cast<std::size_t>(t_.world), false);
  for (int q = 0; q < t_.world; ++q)
    mid_message[static_cast<std::size_t>(q)] = ch_[static_cast<std::size_t>(q)].sent > 0;
  if (t_.failure && t_.failure->why == Why::Lost)
    mid_message[static_cast<std::size_t>(t_.failure->peer)] = true;  // that link is gone
  t_.send_abort(root, mid_message);
  t_.abandon();
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
