// The rendezvous store: an Asio server on its own thread, a blocking client with deadlines.
// The protocol is documented in rendezvous.h.
#include "backend/launch/rendezvous.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>

#include "core/error.h"

namespace meshsim::launch {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

namespace {

constexpr std::uint64_t kMaxWaitMs = 24ull * 3600 * 1000;  // a GET waits at most a day
constexpr int kMaxLoggedRefusals = 32;
// A rank waiting for others asks the store at least this often whether it refused a wrong
// token, and fails this long after it first did while a rank is still missing.
constexpr Millis kWaitSlice{500};
constexpr Millis kWrongTokenGrace{2000};

void put_be(std::string& out, std::uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint64_t get_be(const unsigned char* p, int bytes) {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | p[i];
  return v;
}

// Reads the request fields in order; ok() turns false on a truncated body.
struct Reader {
  std::string_view s;
  std::size_t pos = 0;
  bool ok = true;
  std::uint64_t num(int bytes) {
    if (!ok || s.size() - pos < static_cast<std::size_t>(bytes)) return ok = false, 0;
    const std::uint64_t v = get_be(reinterpret_cast<const unsigned char*>(s.data()) + pos, bytes);
    pos += bytes;
    return v;
  }
  std::string_view str(std::size_t n) {
    if (!ok || s.size() - pos < n) return ok = false, std::string_view{};
    const std::string_view v = s.substr(pos, n);
    pos += n;
    return v;
  }
};

// Two proofs compared in constant time (no early exit on the first difference).
bool same_proof(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

constexpr std::string_view kHelloMagic = "MSRD";
constexpr std::size_t kHelloBytes = 4 + 1 + kNonceBytes;
constexpr std::size_t kChallengeBytes = 1 + kNonceBytes + kProofBytes;
constexpr std::string_view kStoreLabel = "meshsim-store", kRankLabel = "meshsim-rank";

std::string format_ms(Millis d) {
  const auto ms = d.count();
  if (ms % 1000 == 0) return fmt::format("{}s", ms / 1000);
  if (ms > 1000) return fmt::format("{:.1f}s", static_cast<double>(ms) / 1000);
  return fmt::format("{}ms", ms);
}

std::string format_seconds(Millis d) { return fmt::format("{:g} s", static_cast<double>(d.count()) / 1000); }

std::string list_ranks(const std::vector<int>& ranks) {
  std::string s;
  const std::size_t shown = std::min<std::size_t>(ranks.size(), 16);
  for (std::size_t i = 0; i < shown; ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  if (shown < ranks.size()) s += fmt::format(", ... ({} in all)", ranks.size());
  return s;
}

}  // namespace

std::string encode_frame(std::string_view body) {
  std::string out;
  put_be(out, body.size(), 4);
  out.append(body);
  return out;
}

std::string encode_request(RdzvOp op, std::string_view key, std::uint64_t arg, std::string_view value) {
  std::string body;
  body.push_back(static_cast<char>(op));
  put_be(body, key.size(), 2);
  body.append(key);
  put_be(body, arg, 8);
  body.append(value);
  return encode_frame(body);
}

std::string encode_hello(std::string_view client_nonce) {
  std::string body(kHelloMagic);
  body.push_back(static_cast<char>(kRdzvVersion));
  body.append(client_nonce);
  return encode_frame(body);
}

std::string token_proof(std::string_view token, std::string_view label, std::string_view first,
                        std::string_view second) {
  std::string msg(label);
  msg.append(first);
  msg.append(second);
  std::array<unsigned char, EVP_MAX_MD_SIZE> mac{};
  unsigned int n = 0;
  if (HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
           reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), mac.data(), &n) == nullptr ||
      n != kProofBytes)
    throw Error("rendezvous: OpenSSL's HMAC-SHA256 failed; is libcrypto intact?");
  return std::string(reinterpret_cast<const char*>(mac.data()), n);
}

std::string random_nonce() {
  std::array<unsigned char, kNonceBytes> n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1)
    throw Error("rendezvous: OpenSSL's RAND_bytes could not make a nonce (no entropy source?)");
  return std::string(reinterpret_cast<const char*>(n.data()), n.size());
}

std::string random_token() {
  std::string hex;
  for (const unsigned char c : random_nonce()) hex += fmt::format("{:02x}", c);
  return hex;
}

// ---------------------------------------------------------------------------------------
// Server: one Session per connection; all state lives on the io thread (no locks).

struct RendezvousServer::Impl {
  struct Session;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};  // out of descriptors: accept again after options.accept_backoff
  RendezvousServerOptions options;
  int port = 0;
  std::unordered_map<std::string, std::string> store;
  std::unordered_map<std::string, std::vector<std::weak_ptr<Session>>> waiters;  // GETs waiting per key
  std::map<Session*, std::weak_ptr<Session>> sessions;
  bool stopping = false;
  bool out_of_descriptors = false;  // logged once per episode
  int logged = 0;
  std::string failure;                          // why the job failed (the first reason); empty: it has not
  std::map<int, std::weak_ptr<Session>> ranks;  // registered (HELLO) connections by rank
  int wrong_tokens = 0;                         // connections refused for a wrong token
  std::atomic<bool> failed{false};              // failure is set (read by stop() on another thread)
  std::atomic<int> heard{0};                    // HELLOs, accepted or refused: ranks told (likewise)
  // After a failure: the registered ranks that have been answered FAILED (on any of their
  // connections, or that are the silent rank named), and whether every registered rank has
  // been, or has gone (all_told is read by stop()).
  std::set<int> told;
  std::atomic<bool> all_told{false};
  void note_told(int r);
  void update_all_told();
  // Registered ranks that announced heartbeats: when the store last heard from each.
  struct Beating {
    Clock::time_point last;
    std::weak_ptr<Session> session;  // the rank's registered connection
  };
  std::map<int, Beating> beating;
  asio::steady_timer liveness{io};  // checks `beating` every heartbeat_timeout / 10
  Clock::time_point last_check = Clock::now();
  std::thread thread;

  void check_liveness();  // arms the next check

  void accept();
  void make_room(const std::string& who);
  void set(const std::string& key, std::string_view value);
  void fail_job(const std::string& why);  // keeps the first reason; answers every waiting GET with it
  void shutdown();                        // on the io thread
  // Logs why a connection was refused or closed: the first kMaxLoggedRefusals, then says it stops,
  // so a flood of strangers cannot flood rank 0's log.
  void log(const std::string& line) {
    if (logged > kMaxLoggedRefusals) return;
    const std::string text =
        ++logged <= kMaxLoggedRefusals
            ? "meshsim: rendezvous: " + line
            : fmt::format("meshsim: rendezvous: more than {} refusals; no more are logged", kMaxLoggedRefusals);
    if (options.log)
      options.log(text);
    else
      std::fprintf(stderr, "%s\n", text.c_str());
  }
};

struct RendezvousServer::Impl::Session : std::enable_shared_from_this<Session> {
  Impl& srv;
  tcp::socket sock;
  std::string peer;          // "address:port" for the log
  asio::steady_timer timer;  // a waiting GET's deadline
  asio::steady_timer guard;  // closes a connection that does not authenticate, or stalls mid-frame
  Clock::time_point accepted = Clock::now();
  Clock::time_point progress = Clock::now();  // the last time bytes of a request arrived
  bool authenticated = false;                 // the handshake proved the token
  bool in_frame = false;                      // part of a request has arrived, the rest has not
  std::array<unsigned char, 4> header{};
  std::array<char, kHelloBytes> hello_frame{};  // the handshake's frames, in fixed buffers
  std::array<char, kProofBytes> proof{};
  std::string nonces;  // the client's then the store's nonce, once the challenge is sent
  std::uint64_t frame_len = 0;
  std::string body;  // a request, allocated only on a proven connection
  std::string out;
  std::string waiting_key;  // non-empty while a GET waits
  bool waiting = false;
  bool closed = false;
  int rank = -1;       // >= 0 once registered by HELLO
  int beat_rank = -1;  // >= 0 once a BEAT named its rank (the heartbeat connection)
  bool left = false;   // said BYE: closing is the end of a successful run

  Session(Impl& s, tcp::socket so, std::string who)
      : srv(s), sock(std::move(so)), peer(std::move(who)), timer(s.io), guard(s.io) {}

  void start() {
    srv.sessions[this] = weak_from_this();
    watch();
    read_hello();
  }

  // Until it authenticates, a connection has options.idle_timeout in all from its accept (no
  // slow trickle keeps a stranger's connection open); after, a request once begun must keep
  // making progress. An authenticated rank may stay idle between requests: it is part of the job.
  void watch() {
    const Millis idle = srv.options.idle_timeout;
    guard.expires_at(!authenticated ? accepted + idle : in_frame ? progress + idle : Clock::now() + idle);
    guard.async_wait([self = shared_from_this()](error_code ec) {
      if (ec || self->closed || self->srv.stopping) return;
      const Millis idle = self->srv.options.idle_timeout;
      const auto now = Clock::now();
      if (!self->authenticated && now >= self->accepted + idle) {
        self->srv.log(fmt::format("closed a connection from {}: it did not prove the token within {}", self->peer,
                                  format_ms(idle)));
        return self->close();
      }
      if (self->authenticated && self->in_frame && now >= self->progress + idle) {
        self->srv.log(
            fmt::format("closed a connection from {}: a request stalled halfway for {}", self->peer, format_ms(idle)));
        return self->close();
      }
      self->watch();
    });
  }

  // Reads exactly `buf`, noting every bit of progress for watch().
  template <class Buffer, class Then>
  void read(Buffer buf, Then then) {
    auto self = shared_from_this();
    asio::async_read(
        sock, buf,
        [self, total = asio::buffer_size(buf)](const error_code& ec, std::size_t n) -> std::size_t {
          if (n > 0) self->in_frame = true;
          self->progress = Clock::now();
          return ec ? 0 : std::min<std::size_t>(total - n, 64 << 10);
        },
        [self, then](error_code ec, std::size_t) {
          if (ec || self->srv.stopping) return self->close();
          then();
        });
  }

  // A refusal before the token was checked is logged: it is a stranger or a misconfigured rank.
  void refuse(const std::string& why) {
    if (!authenticated) srv.log(fmt::format("refused a connection from {}: {}", peer, why));
    fail(why);
  }

  // A handshake frame of exactly `size` bytes (any other announced length is refused before
  // its body is read) into `buf`.
  template <std::size_t N, class Then>
  void read_fixed(std::array<char, N>& buf, const char* what, Then then) {
    read(asio::buffer(header), [this, &buf, what, then] {
      const std::uint64_t len = get_be(header.data(), 4);
      if (len != N)
        return refuse(
            fmt::format("{} of {} bytes where the handshake has {}: not a rank of this meshsim (protocol "
                        "version {})",
                        what, len, N, kRdzvVersion));
      read(asio::buffer(buf), then);
    });
  }

  // The handshake (rendezvous.h): the client's nonce, the store's nonce and proof, the
  // client's proof.
  void read_hello() {
    read_fixed(hello_frame, "first message", [this] {
      const std::string_view h(hello_frame.data(), hello_frame.size());
      if (!h.starts_with(kHelloMagic)) return refuse("not a meshsim rank: its first message is no handshake");
      if (static_cast<unsigned char>(h[4]) != kRdzvVersion)
        return refuse(
            fmt::format("handshake of protocol version {} where this store speaks {}: run the same meshsim "
                        "on every rank",
                        static_cast<unsigned char>(h[4]), kRdzvVersion));
      const std::string client_nonce(h.substr(5));
      const std::string store_nonce = random_nonce();
      nonces = client_nonce + store_nonce;
      std::string b(1, static_cast<char>(RdzvStatus::Ok));
      b += store_nonce;
      b += token_proof(srv.options.token, kStoreLabel, client_nonce, store_nonce);
      out = encode_frame(b);
      asio::async_write(sock, asio::buffer(out), [self = shared_from_this()](error_code ec, std::size_t) {
        if (ec || self->srv.stopping) return self->close();
        self->read_proof();
      });
    });
  }

  void read_proof() {
    in_frame = false;
    read_fixed(proof, "proof", [this] {
      const std::string_view cn = std::string_view(nonces).substr(0, kNonceBytes),
                             sn = std::string_view(nonces).substr(kNonceBytes);
      if (!same_proof(std::string_view(proof.data(), proof.size()),
                      token_proof(srv.options.token, kRankLabel, sn, cn))) {
        ++srv.wrong_tokens;  // a timed-out barrier reports it: the missing rank may be this one
        srv.store["meshsim/wrong-token"] =
            fmt::format("{} connection(s) with a wrong MESHSIM_TOKEN, the last from {}", srv.wrong_tokens, peer);
        return refuse("wrong token: every rank must use the MESHSIM_TOKEN of the server (rank 0)");
      }
      authenticated = true;
      watch();  // from now on only a stalled request is timed out
      read_header();
    });
  }

  void read_header() {
    in_frame = false;
    read(asio::buffer(header), [this] {
      frame_len = get_be(header.data(), 4);
      if (frame_len > kMaxFrameBytes)
        return refuse(fmt::format("message of {} bytes exceeds the limit of {} bytes", frame_len, kMaxFrameBytes));
      if (frame_len < 1) return refuse("malformed request: the body is shorter than its fields say");
      body.resize(frame_len);  // <= kMaxFrameBytes, on a proven connection
      read(asio::buffer(body), [this] {
        in_frame = false;
        handle();
      });
    });
  }

  void handle() {
    Reader r{body};
    const auto op = static_cast<unsigned char>(r.num(1));
    const std::string_view key = r.str(r.num(2));
    const std::uint64_t arg = r.num(8);
    if (!r.ok) return fail("malformed request: the body is shorter than its fields say");
    const std::string_view value = std::string_view(body).substr(r.pos);
    // A failed job answers everything with why, so that each rank stops within a round trip.
    // The store's own keys stay readable: a rank that timed out at the same moment still
    // says which ranks never reached the store.
    const bool own_key = static_cast<RdzvOp>(op) == RdzvOp::Get && arg == 0 && key.starts_with("meshsim/");
    if (!srv.failure.empty() && static_cast<RdzvOp>(op) != RdzvOp::Abort && !own_key)
      return reply(RdzvStatus::Failed, srv.failure, /*then_close=*/true);
    switch (static_cast<RdzvOp>(op)) {
      case RdzvOp::Ping:
        return reply(RdzvStatus::Ok, {});
      case RdzvOp::Hello:
        return hello(static_cast<std::int32_t>(arg & 0xffffffffu), static_cast<std::int64_t>(arg >> 32), value);
      case RdzvOp::Beat:
        beat_rank = static_cast<int>(arg & 0x7fffffff);
        if (const auto it = srv.beating.find(beat_rank); it != srv.beating.end()) it->second.last = Clock::now();
        return reply(RdzvStatus::Ok, {});
      case RdzvOp::Abort:
        srv.fail_job(std::string(value));
        return reply(RdzvStatus::Ok, {});
      case RdzvOp::Bye:
        left = true;
        if (rank >= 0) srv.beating.erase(rank);  // done: its heartbeats stop now
        return reply(RdzvStatus::Ok, {});
      case RdzvOp::Set: {
        const std::string k(key);
        const std::string v(value);
        srv.set(k, v);  // may reply to waiting sessions; our own reply follows
        return reply(RdzvStatus::Ok, {});
      }
      case RdzvOp::Get: {
        const auto it = srv.store.find(std::string(key));
        if (it != srv.store.end()) return reply(RdzvStatus::Ok, it->second);
        if (arg == 0) return reply(RdzvStatus::Absent, {});
        wait_for(std::string(key), Millis(std::min(arg, kMaxWaitMs)));
        return;
      }
    }
    fail(fmt::format("unknown op {}", op));
  }

  // Registers this connection as rank r. A job that cannot succeed (a world size other than
  // the store's, a rank out of range, a rank taken twice) fails at once, for every rank.
  void hello(std::int32_t r, std::int64_t world, std::string_view value) {
    ++srv.heard;  // this rank gets an answer now: stop() need not linger for it
    const std::int64_t expected = srv.options.world_size > 0 ? srv.options.world_size : world;
    std::string why;
    if (world != expected)
      why = fmt::format(
          "rank {} has MESHSIM_WORLD_SIZE={} but rank 0 (the store) has {}; set the same MESHSIM_WORLD_SIZE on "
          "every rank",
          r, world, expected);
    else if (r < 0 || r >= expected)
      why = fmt::format(
          "a rank has MESHSIM_RANK={}, outside 0..{} (MESHSIM_WORLD_SIZE={}); give each rank its own "
          "MESHSIM_RANK in that range",
          r, expected - 1, expected);
    else if (const auto it = srv.ranks.find(r); it != srv.ranks.end())
      if (const auto other = it->second.lock(); other && other.get() != this && !other->closed && !other->left)
        why = fmt::format(
            "rank {} joined twice (from {} and from {}): two processes have MESHSIM_RANK={}; give each rank its "
            "own MESHSIM_RANK",
            r, other->peer, peer, r);
    if (!why.empty()) {
      srv.fail_job(why);
      return reply(RdzvStatus::Failed, srv.failure, /*then_close=*/true);
    }
    rank = r;
    srv.ranks[r] = weak_from_this();
    // A rank that will send heartbeats is watched from now on (so also when it stops before its first).
    if (value.size() == 4 && get_be(reinterpret_cast<const unsigned char*>(value.data()), 4) > 0 &&
        srv.options.heartbeat_timeout > Millis(0))
      srv.beating[r] = Beating{Clock::now(), weak_from_this()};
    srv.set(fmt::format("meshsim/joined/{}", r), peer);
    reply(RdzvStatus::Ok, {});
  }

  void wait_for(std::string key, Millis wait) {
    waiting = true;
    waiting_key = key;
    srv.waiters[key].push_back(weak_from_this());
    timer.expires_after(wait);
    timer.async_wait([self = shared_from_this()](error_code ec) {
      if (ec || !self->waiting) return;  // cancelled, or woken by a SET first
      self->stop_waiting();
      self->reply(RdzvStatus::Absent, {});
    });
  }

  void stop_waiting() {
    waiting = false;
    auto it = srv.waiters.find(waiting_key);
    if (it != srv.waiters.end()) {
      std::erase_if(it->second, [this](const std::weak_ptr<Session>& w) {
        auto s = w.lock();
        return !s || s.get() == this;
      });
      if (it->second.empty()) srv.waiters.erase(it);
    }
    waiting_key.clear();
  }

  void wake(const std::string& value) {  // the key we wait for was set
    waiting = false;
    waiting_key.clear();
    timer.cancel();
    reply(RdzvStatus::Ok, value);
  }

  void reply(RdzvStatus status, std::string_view payload, bool then_close = false) {
    if (status == RdzvStatus::Failed) srv.note_told(rank >= 0 ? rank : beat_rank);
    std::string b;
    b.push_back(static_cast<char>(status));
    b.append(payload);
    out = encode_frame(b);
    std::string().swap(body);  // a large SET's value is stored; do not keep a second copy per connection
    asio::async_write(sock, asio::buffer(out), [self = shared_from_this(), then_close](error_code ec, std::size_t) {
      if (ec || then_close || self->srv.stopping) return self->close();
      self->read_header();
    });
  }

  void fail(const std::string& message) { reply(RdzvStatus::Error, message, /*then_close=*/true); }

  void close() {
    if (closed) return;
    closed = true;
    if (waiting) stop_waiting();
    if (rank >= 0 && !left && !srv.stopping)
      srv.fail_job(fmt::format(
          "rank {} lost its connection to the store (from {}) before it finished: it exited, crashed or was "
          "killed; its own output says why",
          rank, peer));
    error_code ignored;
    timer.cancel();
    guard.cancel();
    sock.shutdown(tcp::socket::shutdown_both, ignored);
    sock.close(ignored);
    srv.sessions.erase(this);
    if (srv.failed) srv.update_all_told();
  }
};

void RendezvousServer::Impl::accept() {
  acceptor.async_accept([this](error_code ec, tcp::socket sock) {
    if (stopping || !acceptor.is_open()) return;
    // Out of descriptors (or kernel memory): the pending connection stays queued and the
    // listening socket stays readable, so accepting again at once would spin. Wait instead;
    // the queued clients are served once descriptors free up.
    if (ec == asio::error::no_descriptors || ec.value() == ENFILE || ec == asio::error::no_buffer_space ||
        ec == asio::error::no_memory) {
      if (!out_of_descriptors)
        log(fmt::format("cannot accept a connection: {}; retrying every {} (raise `ulimit -n`?)", ec.message(),
                        format_ms(options.accept_backoff)));
      out_of_descriptors = true;
      accept_retry.expires_after(options.accept_backoff);
      accept_retry.async_wait([this](error_code e) {
        if (!e && !stopping) accept();
      });
      return;
    }
    out_of_descriptors = false;
    if (!ec) {
      error_code ignored;
      const auto remote = sock.remote_endpoint(ignored);
      const std::string who = fmt::format("{}:{}", remote.address().to_string(), remote.port());
      const auto limit = static_cast<std::size_t>(std::max(1, options.max_connections));
      if (sessions.size() >= limit) make_room(who);
      if (sessions.size() >= limit) {
        log(fmt::format("refused a connection from {}: {} connections are open, the limit, every one a proven rank",
                        who, sessions.size()));
        sock.close(ignored);
      } else {
        sock.set_option(tcp::no_delay(true), ignored);
        std::make_shared<Session>(*this, std::move(sock), who)->start();
      }
    }
    accept();
  });
}

// At the connection limit, the oldest connection that has not proven the token makes room for
// the new one: strangers holding every slot cannot keep a rank out (each new connection
// evicts the oldest of theirs), and a proven rank is never evicted. A rank evicted
// mid-handshake tries again (RendezvousClient's connect backs off).
void RendezvousServer::Impl::make_room(const std::string& who) {
  std::shared_ptr<Session> oldest;
  for (auto& [ptr, weak] : sessions)
    if (auto s = weak.lock(); s && !s->closed && !s->authenticated && (!oldest || s->accepted < oldest->accepted))
      oldest = std::move(s);
  if (!oldest) return;
  log(
      fmt::format("closed the oldest connection that had not proven the token, from {}, to admit {} ({} "
                  "connections are open, the limit)",
                  oldest->peer, who, sessions.size()));
  oldest->close();
}

void RendezvousServer::Impl::set(const std::string& key, std::string_view value) {
  store[key] = std::string(value);
  const auto it = waiters.find(key);
  if (it == waiters.end()) return;
  std::vector<std::weak_ptr<Session>> woken = std::move(it->second);
  waiters.erase(it);
  for (auto& w : woken)
    if (auto s = w.lock(); s && s->waiting && !s->closed) s->wake(store[key]);
}

void RendezvousServer::Impl::note_told(int r) {
  if (r >= 0) told.insert(r);
  update_all_told();
}

void RendezvousServer::Impl::update_all_told() {
  all_told = std::all_of(ranks.begin(), ranks.end(), [this](const auto& entry) {
    const auto s = entry.second.lock();
    return told.contains(entry.first) || !s || s->closed || s->left;
  });
}

void RendezvousServer::Impl::fail_job(const std::string& why) {
  if (!failure.empty()) return;
  failure = why;
  failed = true;  // not logged: every rank's own error line says it
  std::vector<std::shared_ptr<Session>> waiting;
  for (auto& [ptr, weak] : sessions)
    if (auto s = weak.lock(); s && s->waiting && !s->closed) waiting.push_back(std::move(s));
  for (auto& s : waiting) {
    s->stop_waiting();
    s->timer.cancel();
    s->reply(RdzvStatus::Failed, failure, /*then_close=*/true);
  }
  update_all_told();
}

// A rank silent for heartbeat_timeout fails the job, named. Time when this process itself did
// not run (rank 0 stopped, or starved of CPU) is not counted against the others: after a gap
// of more than half the timeout between two checks, every rank's silence starts again.
void RendezvousServer::Impl::check_liveness() {
  const Millis timeout = options.heartbeat_timeout;
  liveness.expires_after(std::clamp(timeout / 10, Millis(10), Millis(250)));
  liveness.async_wait([this, timeout](error_code ec) {
    if (ec || stopping) return;
    const auto now = Clock::now();
    if (now - last_check > timeout / 2)
      for (auto& [r, b] : beating) b.last = now;
    last_check = now;
    for (auto it = beating.begin(); it != beating.end() && failure.empty();) {
      const auto s = it->second.session.lock();
      if (!s || s->closed || s->left) {
        it = beating.erase(it);
        continue;
      }
      if (now - it->second.last >= timeout) {
        told.insert(it->first);  // silent: it cannot be told, so stop() does not wait for it
        fail_job(fmt::format(
            "rank {} stopped answering for {} (stopped or hung?): no heartbeat from it (connected from {}) reached "
            "the store; if it is only slow or its network congested, raise MESHSIM_HEARTBEAT_TIMEOUT (now {})",
            it->first, format_seconds(timeout), s->peer, format_seconds(timeout)));
      }
      ++it;
    }
    check_liveness();
  });
}

void RendezvousServer::Impl::shutdown() {
  stopping = true;
  error_code ignored;
  accept_retry.cancel();
  liveness.cancel();
  acceptor.close(ignored);
  std::vector<std::shared_ptr<Session>> live;
  for (auto& [ptr, weak] : sessions)
    if (auto s = weak.lock()) live.push_back(std::move(s));
  for (auto& s : live) s->close();
  waiters.clear();
}

RendezvousServer::RendezvousServer(RendezvousServerOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.options = std::move(options);
  const RendezvousServerOptions& o = m.options;
  if (o.token.size() > kMaxTokenBytes)
    throw Error(fmt::format("rendezvous: MESHSIM_TOKEN has {} bytes; use at most {} (e.g. openssl rand -hex 16)",
                            o.token.size(), kMaxTokenBytes));
  if (o.port < 0 || o.port > 65535)
    throw Error(fmt::format("rendezvous: port {} is out of range; use 1..65535, or 0 to pick a free one", o.port));
  error_code ec;
  const auto addr = asio::ip::make_address(o.host, ec);
  if (ec)
    throw Error(fmt::format(
        "rendezvous: cannot listen on '{}': not a numeric IP address; use e.g. 127.0.0.1 or 0.0.0.0", o.host));
  const tcp::endpoint ep(addr, static_cast<unsigned short>(o.port));
  m.acceptor.open(ep.protocol(), ec);
  if (!ec) m.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) m.acceptor.bind(ep, ec);
  if (!ec) m.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec)
    throw Error(fmt::format("rendezvous: cannot listen on {}:{}: {}; pick another port (--port, MESHSIM_MASTER_PORT)",
                            o.host, o.port, ec.message()));
  m.port = m.acceptor.local_endpoint().port();
  m.accept();
  if (o.heartbeat_timeout > Millis(0)) m.check_liveness();
  m.thread = std::thread([&m] { m.io.run(); });
}

RendezvousServer::~RendezvousServer() { stop(); }

void RendezvousServer::stop() {
  if (!impl_ || !impl_->thread.joinable()) return;
  Impl& m = *impl_;
  // A failed job: ranks that have not reached the store yet would otherwise find no server
  // and retry until their connect timeout, and ranks that reached it but have not asked since
  // the failure (their next heartbeat is up to an interval away) would find it gone and blame
  // rank 0; serve a while longer so that every one of them learns why.
  const auto linger_until = Clock::now() + m.options.linger_on_failure;
  while (m.failed && (m.heard < m.options.world_size || !m.all_told) && Clock::now() < linger_until)
    std::this_thread::sleep_for(Millis(20));
  asio::post(m.io, [&m] { m.shutdown(); });
  m.thread.join();  // run() returns once every cancelled operation has finished
}

int RendezvousServer::port() const { return impl_->port; }
const std::string& RendezvousServer::host() const { return impl_->options.host; }

// ---------------------------------------------------------------------------------------
// Client: asynchronous operations run on a private io_context for at most a deadline.

namespace {

// Why the job failed, as the heartbeat thread learnt it; read by any thread.
class JobHealth {
 public:
  void set(std::string why) {
    const std::lock_guard lock(mu_);
    if (why_.empty()) why_ = std::move(why);
    failed_ = true;
  }
  std::string get() const {
    if (!failed_) return {};
    const std::lock_guard lock(mu_);
    return why_;
  }
  bool failed() const { return failed_; }

 private:
  mutable std::mutex mu_;
  std::string why_;
  std::atomic<bool> failed_{false};
};

enum class Ran { Done, Timeout, Cancelled };

// Starts writing the request `out` and reading one reply frame into body; ec is set when it ends.
void start_round_trip(tcp::socket& sock, const std::string& out, std::array<unsigned char, 4>& header,
                      std::string& body, error_code& ec) {
  asio::async_write(sock, asio::buffer(out), [&](error_code e, std::size_t) {
    if (e) return void(ec = e);
    asio::async_read(sock, asio::buffer(header), [&](error_code e2, std::size_t) {
      if (e2) return void(ec = e2);
      const std::uint64_t len = get_be(header.data(), 4);
      if (len == 0 || len > kMaxFrameBytes) return void(ec = asio::error::message_size);
      body.resize(len);
      asio::async_read(sock, asio::buffer(body), [&](error_code e3, std::size_t) { ec = e3; });
    });
  });
}

// Runs io until its work is done, the deadline passes or cancel() turns true (checked every
// 100 ms); then closes the socket (cancelling the operations) and lets their handlers run.
Ran run_until(asio::io_context& io, tcp::socket& sock, Clock::time_point deadline,
              const std::function<bool()>& cancel) {
  io.restart();
  Ran ran = Ran::Timeout;
  for (;;) {
    const auto slice = std::min(deadline, Clock::now() + Millis(100));
    io.run_until(slice);
    if (io.stopped()) return Ran::Done;
    if (cancel && cancel()) {
      ran = Ran::Cancelled;
      break;
    }
    if (Clock::now() >= deadline) break;
  }
  error_code ignored;
  sock.close(ignored);
  io.restart();
  io.run();
  return ran;
}

}  // namespace

struct RendezvousClient::Impl {
  RendezvousClientOptions o;
  asio::io_context io;
  tcp::socket sock{io};
  std::string where;                                   // "host:port" for messages
  std::string broken;                                  // why the connection can no longer be used
  std::map<std::string, int, std::less<>> generation;  // per barrier/gather name
  std::shared_ptr<JobHealth> health = std::make_shared<JobHealth>();
  // The heartbeat: its own connection and thread (see rendezvous.h).
  asio::io_context beat_io;
  tcp::socket beat_sock{beat_io};
  std::thread beat_thread;
  std::mutex beat_mu;
  std::condition_variable beat_cv;
  std::atomic<bool> beat_stop{false};

  ~Impl() { stop_beats(); }

  // Runs io until its work is done or the deadline passes (false: the socket was closed),
  // or until the heartbeat learnt that the job failed (Error, naming why).
  bool run_until(Clock::time_point deadline, std::string_view what = {}) {
    const Ran ran = meshsim::launch::run_until(io, sock, deadline, [this] { return health->failed(); });
    if (ran == Ran::Cancelled) {
      broken = "the run failed: " + health->get();
      throw Error(fmt::format("rendezvous: rank {}: {} stopped: {}", o.rank, what.empty() ? "connect" : what, broken));
    }
    return ran == Ran::Done;
  }

  void start_beats();
  void beat_loop();
  void failed(const std::string& why, bool verdict = false);
  void stop_beats() {
    if (!beat_thread.joinable()) return;
    {
      const std::lock_guard lock(beat_mu);
      beat_stop = true;
    }
    beat_cv.notify_all();
    beat_thread.join();
  }

  void connect() { connect(io, sock, o.connect_timeout); }
  // Connects and proves the token (handshake). A store that closes a connection before its
  // challenge (at its connection limit: a crowd of ranks joining at once, or strangers
  // holding slots) is tried again, backing off from 50 ms to 1 s, until `timeout`.
  void connect(asio::io_context& cio, tcp::socket& csock, Millis timeout) {
    const auto deadline = Clock::now() + timeout;
    for (Millis backoff(50);; backoff = std::min(backoff * 2, Millis(1000))) {
      tcp_connect(cio, csock, timeout, deadline);
      if (handshake(cio, csock)) return;
      error_code ignored;
      csock.close(ignored);
      if (Clock::now() + backoff >= deadline)
        throw Error(
            fmt::format("rendezvous: the store at {} kept closing the connection before its handshake for {}; "
                        "is rank 0 at its connection limit (strangers holding connections?), or exiting?",
                        where, format_ms(timeout)));
      std::this_thread::sleep_for(backoff);
    }
  }

  void tcp_connect(asio::io_context& cio, tcp::socket& csock, Millis timeout, Clock::time_point deadline) {
    error_code last;
    while (true) {
      tcp::resolver resolver(cio);
      error_code ec = asio::error::would_block;
      resolver.async_resolve(o.host, std::to_string(o.port), [&](error_code e, tcp::resolver::results_type results) {
        if (e) return void(ec = e);
        asio::async_connect(csock, results, [&](error_code e2, const tcp::endpoint&) { ec = e2; });
      });
      if (meshsim::launch::run_until(cio, csock, deadline, nullptr) != Ran::Done) ec = asio::error::timed_out;
      if (!ec) break;
      last = ec;
      if (ec == asio::error::host_not_found || ec == asio::error::host_not_found_try_again)
        throw Error(
            fmt::format("rendezvous: cannot resolve master address '{}': {}; set MESHSIM_MASTER_ADDR "
                        "(or MASTER_ADDR) to rank 0's host",
                        o.host, ec.message()));
      error_code ignored;
      csock.close(ignored);
      if (Clock::now() + Millis(50) >= deadline)
        throw Error(
            fmt::format("rendezvous: cannot reach the server at {} within {} ({}); is rank 0 running, and "
                        "are MESHSIM_MASTER_ADDR/MESHSIM_MASTER_PORT right?",
                        where, format_ms(timeout), last.message()));
      std::this_thread::sleep_for(Millis(50));  // the server may not be up yet
    }
    error_code ignored;
    csock.set_option(tcp::no_delay(true), ignored);
  }

  // The handshake (rendezvous.h): the store proves the token first; this client sends its own
  // proof either way (a real store with another token counts the refusal), then fails when
  // the store's proof was wrong, having sent nothing else. False: the store closed the
  // connection before its challenge (connect() tries again).
  bool handshake(asio::io_context& cio, tcp::socket& csock) {
    const std::string cn = random_nonce();
    std::array<unsigned char, 4> header{};
    std::string body;
    error_code ec = asio::error::would_block;
    start_round_trip(csock, encode_hello(cn), header, body, ec);
    if (meshsim::launch::run_until(cio, csock, Clock::now() + o.io_timeout, nullptr) != Ran::Done)
      throw Error(
          fmt::format("rendezvous: the store at {} did not answer the handshake within {}; is rank 0 a "
                      "meshsim of this version?",
                      where, format_ms(o.io_timeout)));
    if (ec == asio::error::eof || ec == asio::error::connection_reset || ec == asio::error::broken_pipe) return false;
    if (ec)
      throw Error(fmt::format("rendezvous: the store at {} broke the connection during the handshake ({})", where,
                              ec.message()));
    const auto status = static_cast<RdzvStatus>(static_cast<unsigned char>(body[0]));
    if (status == RdzvStatus::Error)
      throw Error(fmt::format("rendezvous: the store at {} refused the handshake: {}", where, body.substr(1)));
    if (status != RdzvStatus::Ok || body.size() != kChallengeBytes)
      throw Error(
          fmt::format("rendezvous: the store at {} answered the handshake with {} bytes of another form; is "
                      "a meshsim of this version rank 0 there?",
                      where, body.size()));
    const std::string sn = body.substr(1, kNonceBytes);
    const bool store_knows =
        same_proof(std::string_view(body).substr(1 + kNonceBytes), token_proof(o.token, kStoreLabel, cn, sn));
    const std::string mine = encode_frame(token_proof(o.token, kRankLabel, sn, cn));
    ec = asio::error::would_block;
    asio::async_write(csock, asio::buffer(mine), [&](error_code e, std::size_t) { ec = e; });
    meshsim::launch::run_until(cio, csock, Clock::now() + o.io_timeout, nullptr);
    if (!store_knows) {
      error_code ignored;
      csock.close(ignored);
      throw Error(fmt::format(
          "rendezvous: rank {}: connect: the store at {} did not prove it holds this rank's MESHSIM_TOKEN (wrong "
          "token): start every rank with the MESHSIM_TOKEN of rank 0 (or, if no rank 0 of yours listens there, another "
          "program holds the port: this rank sent it no secret)",
          o.rank, where));
    }
    if (ec)
      throw Error(fmt::format("rendezvous: the store at {} closed the connection during the handshake ({})", where,
                              ec.message()));
    return true;
  }

  // One request and its reply. Returns the status and fills payload.
  RdzvStatus request(RdzvOp op, std::string_view key, std::uint64_t arg, std::string_view value, Millis wait,
                     std::string& payload, std::string_view what) {
    if (!broken.empty()) throw Error(fmt::format("rendezvous: {} on {}: {}", what, where, broken));
    const std::string out = encode_request(op, key, arg, value);
    std::array<unsigned char, 4> header{};
    std::string body;
    error_code ec = asio::error::would_block;
    start_round_trip(sock, out, header, body, ec);
    if (!run_until(Clock::now() + wait + o.io_timeout, what)) {
      broken = fmt::format("no reply within {} (the connection was closed)", format_ms(wait + o.io_timeout));
      throw Error(fmt::format("rendezvous: {} on {}: no reply within {}; is rank 0 alive?", what, where,
                              format_ms(wait + o.io_timeout)));
    }
    if (ec) {
      broken = fmt::format("the connection was lost ({})", ec.message());
      throw Error(fmt::format("rendezvous: {} on {}: the server closed the connection ({}); did rank 0 exit?", what,
                              where, ec.message()));
    }
    const auto status = static_cast<RdzvStatus>(static_cast<unsigned char>(body[0]));
    payload.assign(body, 1);
    if (status == RdzvStatus::Failed) {
      broken = "the run failed: " + payload;
      throw Error(fmt::format("rendezvous: rank {}: {} stopped: the run failed: {}", o.rank, what, payload));
    }
    if (status == RdzvStatus::Error) {
      broken = "the server refused an earlier request: " + payload;
      throw Error(fmt::format("rendezvous: {} on {} refused: {}", what, where, payload));
    }
    if (status != RdzvStatus::Ok && status != RdzvStatus::Absent)
      throw Error(fmt::format("rendezvous: {} on {}: unknown reply status {}; is this a meshsim server?", what, where,
                              static_cast<int>(status)));
    return status;
  }

  // Whether kWrongTokenGrace has passed since this wait first saw the store's note that it
  // refused a connection for a wrong token (`refused_at`: when it first did, for this wait).
  bool wrong_token_grace_over(std::optional<Clock::time_point>& refused_at) {
    std::string v;
    if (o.world_size <= 0 || request(RdzvOp::Get, "meshsim/wrong-token", 0, {}, Millis(0), v, "get") != RdzvStatus::Ok)
      return false;
    if (!refused_at) refused_at = Clock::now();
    return Clock::now() - *refused_at >= kWrongTokenGrace;
  }

  // Waits for keys prefix/0 .. prefix/(world-1); returns their values or throws naming
  // the ranks whose key is missing: at the deadline, or kWrongTokenGrace after the store
  // refused a connection for a wrong token while a rank is still missing (that rank was most
  // likely started with another MESHSIM_TOKEN; a stranger alone never fails a job whose
  // ranks all arrive). Waits in slices so that the store's refusals are seen while waiting.
  std::vector<std::string> wait_all(const std::string& prefix, int world, Clock::time_point deadline, Millis timeout,
                                    std::string_view what, std::string_view missing_verb) {
    std::vector<std::string> values(world);
    std::optional<Clock::time_point> refused_at;  // when this rank first saw a wrong-token refusal
    for (int r = 0; r < world; ++r) {
      const std::string key = fmt::format("{}/{}", prefix, r);
      for (std::string v;;) {
        const auto left = std::max(Millis(0), std::chrono::duration_cast<Millis>(deadline - Clock::now()));
        const Millis slice = std::min(left, kWaitSlice);
        if (request(RdzvOp::Get, key, static_cast<std::uint64_t>(slice.count()), {}, slice, v, what) ==
            RdzvStatus::Ok) {
          values[r] = std::move(v);
          break;
        }
        if (Clock::now() >= deadline) fail_missing(prefix, r, world, timeout, what, missing_verb, false);
        if (wrong_token_grace_over(refused_at)) fail_missing(prefix, r, world, timeout, what, missing_verb, true);
      }
    }
    return values;
  }

  // The ranks from r on whose key is missing, named to every rank (abort) and thrown: after
  // the timeout, or (`wrong_token`) soon after the store refused a wrong token.
  [[noreturn]] void fail_missing(const std::string& prefix, int r, int world, Millis timeout, std::string_view what,
                                 std::string_view missing_verb, bool wrong_token) {
    std::string v;
    std::vector<int> missing{r};
    for (int q = r + 1; q < world; ++q)
      if (request(RdzvOp::Get, fmt::format("{}/{}", prefix, q), 0, {}, Millis(0), v, what) != RdzvStatus::Ok)
        missing.push_back(q);
    const std::string when =
        wrong_token ? fmt::format("stopped {} after the store refused a connection for a wrong MESHSIM_TOKEN",
                                  format_ms(std::chrono::duration_cast<Millis>(kWrongTokenGrace)))
                    : fmt::format("timed out after {}", format_ms(timeout));
    const std::string message =
        fmt::format("rendezvous: {} {}: rank{} {} of {} {}; {}{}", what, when, missing.size() > 1 ? "s" : "",
                    list_ranks(missing), world, missing_verb,
                    wrong_token ? "start every rank with the MESHSIM_TOKEN of rank 0"
                                : "are they running, with the same MESHSIM_TOKEN and master address?",
                    diagnose(missing));
    abort(fmt::format("rank {}: {}", o.rank, message));  // the others stop now, with this message
    throw Error(message);
  }

  // What the store knows about the missing ranks: which never reached it (registered ranks
  // only: others never say HELLO), and connections it refused for a wrong token.
  std::string diagnose(const std::vector<int>& missing) {
    std::string out;
    try {
      std::string v;
      if (o.world_size > 0) {
        std::vector<int> absent;
        for (std::size_t i = 0; i < missing.size() && i < 16; ++i)
          if (request(RdzvOp::Get, fmt::format("meshsim/joined/{}", missing[i]), 0, {}, Millis(0), v, "get") !=
              RdzvStatus::Ok)
            absent.push_back(missing[i]);
        if (!absent.empty())
          out += fmt::format(" (rank{} {} never reached the store: not started, or another MESHSIM_MASTER_ADDR/PORT)",
                             absent.size() > 1 ? "s" : "", list_ranks(absent));
      }
      if (request(RdzvOp::Get, "meshsim/wrong-token", 0, {}, Millis(0), v, "get") == RdzvStatus::Ok)
        out += fmt::format(" (the store refused {})", v);
    } catch (const Error&) {  // the diagnosis is a bonus; the timeout is the error
    }
    return out;
  }

  void abort(const std::string& why) noexcept {
    if (o.world_size <= 0) return;  // unregistered clients (tests, tools) may retry a barrier
    try {
      std::string ignored;
      request(RdzvOp::Abort, {}, 0, why, Millis(0), ignored, "abort");
    } catch (...) {  // the store is gone or the job failed already: nothing left to tell
    }
  }
};

// The heartbeat thread learned that the job failed: recorded for the application's calls, and
// told to on_failure.
void RendezvousClient::Impl::failed(const std::string& why, bool verdict) {
  health->set(why);
  if (o.on_failure) o.on_failure(health->get(), verdict);
}

// Opens the heartbeat connection (the store is up: the first connection reached it) and
// starts the thread that beats on it.
void RendezvousClient::Impl::start_beats() {
  connect(beat_io, beat_sock, std::max(o.io_timeout, Millis(1000)));
  beat_thread = std::thread([this] { beat_loop(); });
}

// Every heartbeat_interval: a BEAT and its reply. It ends when stopped, or when it learns
// that the job failed (FAILED), the store stopped answering, or the store closed; it then
// records why in `health`, where the application's store calls and transports find it.
void RendezvousClient::Impl::beat_loop() {
  const Millis patience = o.heartbeat_timeout > Millis(0) ? o.heartbeat_timeout : o.io_timeout;
  const std::string out = encode_request(RdzvOp::Beat, {}, static_cast<std::uint32_t>(o.rank), {});
  for (;;) {
    std::array<unsigned char, 4> header{};
    std::string body;
    error_code ec = asio::error::would_block;
    start_round_trip(beat_sock, out, header, body, ec);
    const Ran ran =
        meshsim::launch::run_until(beat_io, beat_sock, Clock::now() + patience, [this] { return beat_stop.load(); });
    if (beat_stop) return;
    if (ran == Ran::Timeout)
      return failed(fmt::format(
          "rank 0 (the store at {}) stopped answering for {} (stopped or hung?): no reply to rank {}'s heartbeat; "
          "check rank 0, or raise MESHSIM_HEARTBEAT_TIMEOUT (now {})",
          where, format_seconds(patience), o.rank, format_seconds(patience)));
    if (ec)
      return failed(fmt::format(
          "rank 0 (the store at {}) closed rank {}'s heartbeat connection ({}): rank 0 exited or crashed; its own "
          "output says why",
          where, o.rank, ec.message()));
    if (static_cast<RdzvStatus>(static_cast<unsigned char>(body[0])) != RdzvStatus::Ok)
      return failed(body.substr(1), true);  // FAILED: why the job failed, naming the rank
    std::unique_lock lock(beat_mu);
    if (beat_cv.wait_for(lock, o.heartbeat_interval, [this] { return beat_stop.load(); })) return;
  }
}

RendezvousClient::RendezvousClient(RendezvousClientOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->o = std::move(options);
  impl_->where = fmt::format("{}:{}", impl_->o.host, impl_->o.port);
  if (impl_->o.port <= 0 || impl_->o.port > 65535)
    throw Error(
        fmt::format("rendezvous: master port {} is out of range; set MESHSIM_MASTER_PORT to 1..65535", impl_->o.port));
  impl_->connect();
  std::string ignored;
  const int world = impl_->o.world_size;
  try {
    impl_->request(RdzvOp::Ping, {}, 0, {}, Millis(0), ignored, "connect");
    if (world > 0) {
      const Millis beat = std::max(impl_->o.heartbeat_interval, Millis(0));
      std::string announce;  // the store watches a rank that says it beats
      if (beat > Millis(0))
        put_be(announce, static_cast<std::uint32_t>(std::min<std::int64_t>(beat.count(), 1 << 30)), 4);
      impl_->request(RdzvOp::Hello, {},
                     (static_cast<std::uint64_t>(world) << 32) | static_cast<std::uint32_t>(impl_->o.rank), announce,
                     Millis(0), ignored, "register");
      if (beat > Millis(0)) impl_->start_beats();
    }
  } catch (const Error& e) {  // name the rank: under launch every rank writes to the same stderr
    const std::string_view m = e.what();
    const std::string_view head = "rendezvous: ";
    if (!m.starts_with(head) || m.starts_with("rendezvous: rank ")) throw;
    throw Error(fmt::format("rendezvous: rank {}: {}", impl_->o.rank, m.substr(head.size())));
  }
}

RendezvousClient::~RendezvousClient() {
  impl_->stop_beats();
  error_code ignored;
  impl_->sock.shutdown(tcp::socket::shutdown_both, ignored);
  impl_->sock.close(ignored);
}

int RendezvousClient::rank() const { return impl_->o.rank; }

std::string RendezvousClient::failure() const { return impl_->health->get(); }

std::function<std::string()> RendezvousClient::failure_probe() const {
  return [health = impl_->health] { return health->get(); };
}

void RendezvousClient::leave() {
  if (impl_->o.world_size <= 0) return;
  std::string ignored;
  impl_->request(RdzvOp::Bye, {}, 0, {}, Millis(0), ignored, "leave");
  impl_->stop_beats();  // after BYE: the store no longer expects them
}

void RendezvousClient::abort(std::string_view why) noexcept {
  try {
    impl_->abort(fmt::format("rank {}: {}", impl_->o.rank, why));
  } catch (...) {
  }
}

void RendezvousClient::set(std::string_view key, std::string_view value) {
  const std::string what = fmt::format("set '{}'", key);
  if (key.size() > 0xffff)
    throw Error(fmt::format("rendezvous: key of {} bytes is too long (limit 65535)", key.size()));
  if (value.size() + key.size() + 64 > kMaxFrameBytes)
    throw Error(
        fmt::format("rendezvous: {}: value of {} bytes is over the {} MiB limit of a message; store it in parts", what,
                    value.size(), kMaxFrameBytes >> 20));
  std::string ignored;
  impl_->request(RdzvOp::Set, key, 0, value, Millis(0), ignored, what);
}

std::string RendezvousClient::get(std::string_view key, Millis timeout, int publisher) {
  const std::string what = fmt::format("get '{}'", key);
  std::string value;
  const int world = impl_->o.world_size;
  // Waits in slices, as wait_all does: when a rank is to publish the key and the store refused
  // a wrong token while it is missing, the wait ends kWrongTokenGrace later (setup waited the
  // whole timeout for a rank started with another MESHSIM_TOKEN).
  const auto deadline = Clock::now() + std::max(timeout, Millis(1));
  std::optional<Clock::time_point> refused_at;
  for (;;) {
    const auto left = std::max(Millis(1), std::chrono::duration_cast<Millis>(deadline - Clock::now()));
    const Millis slice = publisher >= 0 && world > 0 ? std::min(left, kWaitSlice) : left;
    if (impl_->request(RdzvOp::Get, key, static_cast<std::uint64_t>(slice.count()), {}, slice, value, what) ==
        RdzvStatus::Ok)
      return value;
    if (Clock::now() >= deadline || publisher < 0 || world <= 0) break;
    if (!impl_->wrong_token_grace_over(refused_at)) continue;
    const std::string message = fmt::format(
        "rendezvous: stopped waiting for key '{}' on {} {} after the store refused a connection for a wrong "
        "MESHSIM_TOKEN: rank {} of {} did not set it; start every rank with the MESHSIM_TOKEN of rank 0{}",
        key, impl_->where, format_ms(std::chrono::duration_cast<Millis>(kWrongTokenGrace)), publisher, world,
        impl_->diagnose({publisher}));
    impl_->abort(fmt::format("rank {}: {}", impl_->o.rank, message));
    throw Error(message);
  }
  const std::string message =
      publisher < 0
          ? fmt::format(
                "rendezvous: timed out after {} waiting for key '{}' on {}; no rank set it (is the rank "
                "that publishes it running, with the same MESHSIM_TOKEN?){}",
                format_ms(timeout), key, impl_->where, impl_->diagnose({}))
          : fmt::format(
                "rendezvous: timed out after {} waiting for key '{}' on {}: rank {}{} did not set it; is it running, "
                "with the same MESHSIM_TOKEN and master address?{}",
                format_ms(timeout), key, impl_->where, publisher, world > 0 ? fmt::format(" of {}", world) : "",
                impl_->diagnose({publisher}));
  impl_->abort(fmt::format("rank {}: {}", impl_->o.rank, message));  // the others stop now, with this message
  throw Error(message);
}

bool RendezvousClient::try_get(std::string_view key, std::string& value) {
  return impl_->request(RdzvOp::Get, key, 0, {}, Millis(0), value, fmt::format("get '{}'", key)) == RdzvStatus::Ok;
}

void RendezvousClient::barrier(std::string_view name, int world_size, Millis timeout) {
  meet("barrier", name, impl_->o.rank, world_size, {}, timeout, "did not arrive");
}

std::vector<std::string> RendezvousClient::gather(std::string_view key_prefix, int rank, int world_size,
                                                  std::string_view value, Millis timeout) {
  return meet("gather", key_prefix, rank, world_size, value, timeout, "did not publish a value");
}

// A barrier or a gather: the n-th meeting of `name` publishes this rank's value under
// "<kind>/<name>/<n>/<rank>" and waits for every rank's.
std::vector<std::string> RendezvousClient::meet(std::string_view kind, std::string_view name, int rank, int world_size,
                                                std::string_view value, Millis timeout, std::string_view missing_verb) {
  const auto deadline = Clock::now() + timeout;
  if (rank < 0 || rank >= world_size)
    throw Error(fmt::format("rendezvous: {} '{}': rank {} is not in 0..{}; check MESHSIM_RANK and MESHSIM_WORLD_SIZE",
                            kind, name, rank, world_size - 1));
  const int gen = impl_->generation[fmt::format("{}/{}", kind, name)]++;
  const std::string prefix = fmt::format("{}/{}/{}", kind, name, gen);
  set(fmt::format("{}/{}", prefix, rank), value);
  return impl_->wait_all(prefix, world_size, deadline, timeout, fmt::format("{} '{}'", kind, name), missing_verb);
}

}  // namespace meshsim::launch
