// Rendezvous: a small TCP key-value store that ranks use to find each other.
//
// Rank 0 hosts a RendezvousServer; every rank (rank 0 included) talks to it through a
// RendezvousClient: publish its listening address, wait for the others', meet at barriers,
// and gather per-rank results at the end of a run.
//
//   RendezvousServer server({.port = env.master_port, .token = env.token});   // rank 0 only
//   RendezvousClient rdzv({.host = env.master_addr, .port = env.master_port,
//                          .token = env.token, .rank = env.rank});
//   std::vector<std::string> addrs = rdzv.gather("addr", env.rank, env.world_size, my_addr, 30s);
//   rdzv.barrier("ready", env.world_size, 30s);
//
// Rank 0 must keep its server up until every rank is done with it: after the last
// barrier, ranks > 0 set "left/<rank>" and rank 0 waits for those keys before stopping.
//
// Every blocking call has a timeout and fails with a meshsim::Error that names the key or
// the ranks it waited for, never a hang. Values are bytes (std::string is binary-safe).
// A client is not thread-safe: use one per thread. The server serves any number of
// clients on its own thread and stops (no thread left behind) when destroyed.
//
// Wire protocol (all integers big-endian). Every message in both directions is a frame:
//
//   u32 length | body[length]          length <= kMaxFrameBytes (4 MiB)
//
// Handshake: each connection starts with a mutual proof of the token in which neither side
// sends it (protocol version 2; HMAC-SHA256 from OpenSSL, nonces from its RAND_bytes):
//
//   client -> store   "MSRD" | u8 version (2) | client nonce cn (16 bytes)
//   store -> client   u8 status 0 | store nonce sn (16) | HMAC(token, "meshsim-store" | cn | sn)
//   client -> store   HMAC(token, "meshsim-rank" | sn | cn)
//
// The client checks the store's proof before anything else: a program squatting the master
// port, or rank 0 of another job, cannot make it, and the client stops with a wrong-token
// error having sent nothing but its nonce and its own proof (which it still sends, so that a
// real store with another token counts the refusal; an HMAC of fresh nonces tells nothing of
// a random token, while a guessable one such as `insecure` could be found by trying words).
// The store checks the client's proof likewise. Requests follow on the proven connection:
//
// Request body:
//
//   u8 op | u16 key_len | key | u64 arg | value (rest of the body)
//
//   op 1 PING  nothing to do; key, arg and value are empty/0            -> OK
//   op 2 SET   store value under key (replaces; wakes waiting GETs)      -> OK
//   op 3 GET   the value of key; if absent wait up to arg milliseconds  -> OK value | ABSENT
//   op 4 HELLO register as a rank of the job: arg = world_size << 32 | rank  -> OK
//              value: empty, or u32 heartbeat interval in ms (> 0: the rank sends BEATs)
//   op 5 ABORT this rank failed; value = why, one line                   -> OK
//   op 6 BYE   this rank is done: its connection closing is no failure   -> OK
//   op 7 BEAT  a liveness heartbeat from rank arg (on a connection of its own) -> OK
//
// Reply body:   u8 status | payload
//
//   status 0 OK      payload = the value (GET) or empty
//   status 1 ABSENT  GET found no value within its wait; payload empty
//   status 2 ERROR   payload = one line of text; the server then closes the connection
//   status 3 FAILED  the job has failed; payload = why (one line naming the rank); the
//                    server then closes the connection
//
// Failure detection. A rank that says HELLO is registered; the store then fails the whole
// job at once, rather than let every rank wait out its timeout, when
//   - a HELLO gives a world size other than the store's (options.world_size, rank 0's
//     MESHSIM_WORLD_SIZE), or a rank outside 0..world_size-1 (MESHSIM_RANK),
//   - a second connection says HELLO with a rank already registered (two ranks share a
//     MESHSIM_RANK),
//   - a rank says ABORT (it failed: e.g. its barrier timed out, naming the missing ranks),
//   - a registered rank's connection closes before it said BYE (it exited or crashed),
//   - a registered rank that announced heartbeats (HELLO value) has not sent one for
//     options.heartbeat_timeout (MESHSIM_HEARTBEAT_TIMEOUT, default 5 s): it was stopped
//     (SIGSTOP: its connections stay open) or hung.
// From then on every waiting GET and every later request is answered FAILED with the first
// reason, so each rank fails within a round trip with one line that names the rank and
// what to fix. The store keeps "meshsim/joined/<rank>" (the rank's address) for each
// registered rank, so a barrier that times out can tell a rank that never reached the
// store from one that reached it and did not arrive. A connection with the wrong token
// cannot be told from a stranger's, so it does not fail the job (a stranger must not be
// able to stop it); the store counts them under "meshsim/wrong-token" and a timed-out
// barrier reports that count, pointing at MESHSIM_TOKEN.
//
// Liveness. A registered client with heartbeat_interval > 0 (MESHSIM_HEARTBEAT_INTERVAL,
// default 1 s) opens a second connection to the store and sends a BEAT on it every interval
// from a thread of its own: the rank's application thread may compute for hours without a
// store call and is not declared dead, while a stopped process (every thread stopped) is.
// A second connection, not the first, so that a heartbeat never waits behind a long GET.
// The reply to a BEAT is the push channel: once the job has failed it is FAILED with the
// reason, which the client keeps (failure(), failure_probe()) so that a transport waiting
// for a dead or stopped peer stops within about an interval instead of its own timeout.
// A BEAT without a reply within heartbeat_timeout means the store (rank 0) itself stopped
// answering: the client records that as the failure too. The store does not count the
// time its own process was stopped (e.g. rank 0 under SIGSTOP) against the other ranks.
//
// Every connection proves the shared token (MESHSIM_TOKEN) in its handshake. A wrong proof,
// a handshake of another form or version, an oversized length, a truncated body or an unknown
// op is answered with ERROR and its connection closed; the server keeps serving everyone
// else. The token is a guard against strangers and stale jobs, not encryption
// (docs/security.md).
//
// Anyone who can reach the port can connect, so the server spends nothing on a peer
// before it has proven the token, and bounds what it keeps per connection:
//   - the handshake's frames have fixed sizes (21 and 32 bytes; any other length is refused
//     before its body is read), read into fixed buffers; only a proven connection's requests
//     get their bodies allocated. Before that a connection holds a few hundred bytes,
//     whatever length it announced.
//   - a connection must complete the handshake within idle_timeout of its accept, and once
//     authenticated, a request once begun must keep arriving (no idle_timeout without a
//     byte); otherwise it is closed. An authenticated connection may stay idle between
//     requests: ranks hold theirs for the whole run.
//   - at most max_connections are open; at the limit a new connection closes the oldest one
//     that has not proven the token (so strangers holding every slot cannot keep a rank out:
//     each new arrival evicts the oldest of theirs), or, when every open connection is a
//     proven rank, is closed itself as soon as it is accepted.
//   - when accept fails for want of descriptors (EMFILE, ENFILE) or kernel memory, the
//     server tries again after accept_backoff instead of at once (the pending connection
//     keeps the socket readable: retrying at once would spin a core), and serves the
//     waiting clients once descriptors free up.
// Each refusal is logged (one line naming the peer address and the reason; the first 32).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace meshsim::launch {

using Millis = std::chrono::milliseconds;

inline constexpr std::uint32_t kMaxFrameBytes = 4u << 20;  // 4 MiB per message
inline constexpr std::size_t kMaxTokenBytes = 256;         // MESHSIM_TOKEN (openssl rand -hex 16: 32)
inline constexpr std::uint8_t kRdzvVersion = 2;            // the handshake's protocol version
inline constexpr std::size_t kNonceBytes = 16;
inline constexpr std::size_t kProofBytes = 32;  // HMAC-SHA256

enum class RdzvOp : std::uint8_t { Ping = 1, Set = 2, Get = 3, Hello = 4, Abort = 5, Bye = 6, Beat = 7 };
enum class RdzvStatus : std::uint8_t { Ok = 0, Absent = 1, Error = 2, Failed = 3 };

struct RendezvousServerOptions {
  std::string host = "127.0.0.1";                         // the address to bind: "0.0.0.0" for every interface
  int port = 0;                                           // 0: pick a free port (see port())
  std::string token;                                      // clients must prove the same token (at most kMaxTokenBytes)
  int max_connections = 1024;                             // open at once; a run uses 4 x world size + 64
  Millis idle_timeout = Millis(10'000);                   // to authenticate; and without progress inside a request
  Millis accept_backoff = Millis(100);                    // before accepting again when out of descriptors
  std::function<void(const std::string&)> log = nullptr;  // a refusal, as one line; unset: stderr
  int world_size = 0;  // > 0: a HELLO must give this world size (MESHSIM_WORLD_SIZE); 0: any
  // After the job failed, stop() keeps serving up to this long while fewer than world_size
  // HELLOs (accepted or refused) have come, or while a registered rank still connected has not
  // been answered FAILED (its next heartbeat is up to an interval away; the silent rank named
  // is not waited for), so that every rank is told why instead of finding the store gone and
  // blaming rank 0, and a late rank is not left to retry.
  Millis linger_on_failure = Millis(0);
  // > 0: a registered rank that announced heartbeats and sent none for this long fails the
  // job, named (MESHSIM_HEARTBEAT_TIMEOUT); 0: no liveness check.
  Millis heartbeat_timeout = Millis(0);
};

class RendezvousServer {
 public:
  // Binds and starts serving on a thread of its own. Throws Error when the address
  // cannot be bound (port in use, bad address).
  explicit RendezvousServer(RendezvousServerOptions options);
  ~RendezvousServer();  // stops serving, closes every connection, joins the thread
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  int port() const;
  const std::string& host() const;
  void stop();  // idempotent; the destructor calls it (after linger_on_failure, if that applies)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct RendezvousClientOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string token;
  int rank = 0;                             // this client's rank (barrier names the missing ones)
  Millis connect_timeout = Millis(30'000);  // retries while the server is not up yet
  Millis io_timeout = Millis(10'000);       // a reply must come within this (plus any GET wait)
  int world_size = 0;                       // > 0: register (HELLO) as rank of a job this size at connect; 0: do not
  // With world_size > 0: > 0 sends a heartbeat this often from a thread of its own
  // (MESHSIM_HEARTBEAT_INTERVAL); 0: none.
  Millis heartbeat_interval = Millis(0);
  // How long a heartbeat may wait for its reply before the store counts as stopped
  // (MESHSIM_HEARTBEAT_TIMEOUT; 0: io_timeout).
  Millis heartbeat_timeout = Millis(0);
  // Called once, from the heartbeat thread, when it learns that the job failed: `why` names
  // the failed rank; `verdict` is true when the store said so (it failed the job: every rank
  // hears the same reason), false when this rank found the store itself silent or gone. For
  // a program whose main thread may be blocked elsewhere (an MPI collective) and must stop.
  std::function<void(const std::string& why, bool verdict)> on_failure = nullptr;
};

class RendezvousClient {
 public:
  // Connects (retrying until connect_timeout: rank 0 may start its server later than the
  // others start their clients) and proves the token both ways; with world_size > 0 also
  // registers.
  // Throws Error naming the address, and the rank and the variable to fix when refused.
  explicit RendezvousClient(RendezvousClientOptions options);
  ~RendezvousClient();
  RendezvousClient(const RendezvousClient&) = delete;
  RendezvousClient& operator=(const RendezvousClient&) = delete;

  void set(std::string_view key, std::string_view value);
  // Blocks until key is set or the timeout passes: then Error naming the key, and the rank
  // expected to set it when publisher >= 0 (with what the store knows of it). A registered
  // client's timeout fails the job, so that the other ranks stop with the same message.
  std::string get(std::string_view key, Millis timeout, int publisher = -1);
  // Without waiting: true and the value when key is set now, else false.
  bool try_get(std::string_view key, std::string& value);
  // All world_size ranks (each with its own client) meet; a barrier name may be reused,
  // the n-th call with a name meets the other ranks' n-th call. Error names missing ranks.
  void barrier(std::string_view name, int world_size, Millis timeout);
  // Publishes value for this rank and returns every rank's value, in rank order. Like a
  // barrier, the n-th gather with a prefix meets the other ranks' n-th one (the keys are
  // internal: "gather/<prefix>/<n>/<rank>"). Error names the ranks whose value did not arrive.
  // A registered client's barrier or gather that times out fails the job (see above).
  std::vector<std::string> gather(std::string_view key_prefix, int rank, int world_size, std::string_view value,
                                  Millis timeout);

  // A registered rank is done: its connection may close without failing the job. Call it
  // after the last request of a successful run.
  void leave();
  // Fails the job with why (one line; sent as "rank <r>: why"), so that the other ranks stop
  // waiting at once. Only a registered client (world_size > 0) does; best effort, never throws.
  void abort(std::string_view why) noexcept;

  int rank() const;

  // Why the job failed, as the store said in a heartbeat reply (or that the store stopped
  // answering); empty while it has not. Safe from any thread.
  std::string failure() const;
  // The same as a function that outlives this client, for TransportOptions::job_failed.
  std::function<std::string()> failure_probe() const;

 private:
  std::vector<std::string> meet(std::string_view kind, std::string_view name, int rank, int world_size,
                                std::string_view value, Millis timeout, std::string_view missing_verb);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Encoding helpers, public so tests can craft (bad) messages byte by byte.
std::string encode_request(RdzvOp op, std::string_view key, std::uint64_t arg, std::string_view value);
std::string encode_frame(std::string_view body);          // prepends the u32 length
std::string encode_hello(std::string_view client_nonce);  // the client's first frame of the handshake
// HMAC-SHA256 under `token` of label | first | second (kProofBytes), and kNonceBytes of
// OpenSSL's RAND_bytes: the handshake's pieces.
std::string token_proof(std::string_view token, std::string_view label, std::string_view first,
                        std::string_view second);
std::string random_nonce();
// A fresh MESHSIM_TOKEN for a job one launcher starts: random_nonce() in hexadecimal (32 digits).
std::string random_token();

}  // namespace meshsim::launch
