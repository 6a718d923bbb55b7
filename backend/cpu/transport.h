// Transport: full-duplex TCP connections between the `world` ranks of the cpu backend.
//
// Every pair of ranks shares one connection (the lower rank connects to the higher one),
// set up in the constructor: each rank listens on `bind_addr` port 0, publishes
// "host:port" in a PeerDirectory, looks its higher peers up and connects; a hello
// (magic, version, both ranks, world size, token) is checked on both ends.
//
// Anyone who can reach a rank's port can connect to it during setup. The accepting rank
// counts a connection as rank p only when its hello carries the job's token, this world
// size, this rank as addressee, and a lower rank p that has not connected yet; anything
// else (garbage, a port scanner, another job, a second "rank p") is closed and logged,
// and setup goes on with the real ranks (its timeout error names what was refused). The
// token travels in clear and is compared as is: it keeps out whoever does not know it,
// which is the threat model (docs/security.md); an on-path attacker who can read the
// traffic can read the data too, so hashing the token with the rank would not help. The
// dialling rank found its peer's address in the (authenticated) directory, so a reply
// that fails the check is an Error.
//
// Messages are framed: a 16-byte header (magic, byte count) before the payload. A
// receive whose expected size differs from the header's count is an Error naming both
// ranks. Between one pair of ranks, messages arrive in the order they were sent (FIFO).
//
// exchange() posts several sends and receives at once (a collective step) and returns
// when all sends are delivered (the peer's TCP acknowledged every byte: SIOCOUTQ is 0)
// and all receives have arrived: the step semantics of the simulator, where a send
// completes when delivered. (With `wait_delivered = false` a send completes when the
// kernel has taken it, which on a slow link lets a rank with only sends run ahead by up
// to a socket buffer, e.g. 4 MiB = 84 ms at 400 Mbit/s.) It runs
// Boost.Asio asynchronous operations on the transport's own io_context in the calling
// thread: no extra threads, no copies of payloads (a send is written straight from the
// caller's memory with writev, a Copy receive is read straight into the destination, a
// SumFloat receive is read in cache-sized pieces and added as they arrive).
//
// A Transport belongs to one thread at a time (it has no internal threads or locks).
//
// Failures never hang: a peer that closes (EOF, reset) or is silent for longer than
// `timeout` makes the call throw Error("rank R: lost connection to rank P during ...").
// A peer that is stopped (SIGSTOP) or hung keeps its connections open and is silent: with
// `job_failed` set (the store's verdict, rendezvous.h) the call fails within about a second
// of the store naming that rank, rather than after `timeout`.
// A rank that fails closes all its connections after telling the peers why (best effort),
// so their errors name the rank that failed first rather than the messenger.
//
//   InMemoryDirectory dir;                        // ranks as threads in one process
//   Transport t(rank, world, dir, TransportOptions{.token = "job-42"});
//   t.send(1, data, bytes);                       // blocking, framed
//   t.exchange(sends, recvs);                     // one step: all at once
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>

namespace meshsim::cpu {

// Where ranks publish and find each other's listening address ("host:port").
struct PeerDirectory {
  virtual ~PeerDirectory() = default;
  virtual void publish(int rank, const std::string& host_port) = 0;
  // Blocks until `rank` has published; throws Error after `timeout`.
  virtual std::string lookup(int rank, std::chrono::milliseconds timeout) = 0;
};

// Ranks as threads of one process: a map behind a mutex and a condition variable.
class InMemoryDirectory : public PeerDirectory {
 public:
  void publish(int rank, const std::string& host_port) override;
  std::string lookup(int rank, std::chrono::milliseconds timeout) override;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, std::string> addrs_;
};

struct TransportOptions {
  std::string bind_addr = "127.0.0.1";
  std::string token;  // every rank of a job must use the same token
  // Setup deadline, and the longest a call may go without any progress on its sockets.
  std::chrono::milliseconds timeout{30000};
  int socket_buffer_bytes = 4 << 20;  // SO_SNDBUF / SO_RCVBUF (0 = system default)
  bool wait_delivered = true;         // exchange() returns once the peers acknowledged the bytes sent
  std::function<void(const std::string&)> log = nullptr;  // a connection refused in setup, one line; unset: stderr
  // Set: asked about every 100 ms while a call waits (from the owning thread); a non-empty
  // answer (why the job failed, e.g. "rank 3 stopped answering ...") fails the call at once
  // with it, instead of after `timeout`. RendezvousClient::failure_probe() gives one.
  std::function<std::string()> job_failed = nullptr;
};

struct SendOp {
  int peer = 0;
  const void* data = nullptr;
  std::size_t bytes = 0;
};

enum class RecvMode {
  Copy,      // data arrives into `data`
  SumFloat,  // `data` is float32; each arriving element is added to it (bytes % 4 == 0)
};

struct RecvOpDesc {
  int peer = 0;
  void* data = nullptr;
  std::size_t bytes = 0;
  RecvMode mode = RecvMode::Copy;
};

class Transport {
 public:
  // Connects to all other ranks; throws Error naming the rank and the fix on failure.
  Transport(int rank, int world, PeerDirectory& directory, TransportOptions options = {});
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  int rank() const { return rank_; }
  int world() const { return world_; }

  void send(int peer, const void* data, std::size_t bytes);
  void recv(int peer, void* data, std::size_t bytes);
  // All sends and receives run concurrently; several ops with one peer keep their order
  // (sends in `sends` order, receives in `recvs` order). `what` names the caller's
  // activity in error messages (e.g. "step 3 of ring allreduce").
  void exchange(std::span<const SendOp> sends, std::span<const RecvOpDesc> recvs, const std::string& what = "exchange");
  // Closes every connection now (peers see EOF); later calls throw.
  void close();
  // The one call that is safe from any thread: shuts every connection down for reading and
  // writing, so a call blocked on this transport in its owning thread fails at once (and
  // the peers see the connection end). Used to stop a rank's other streams after an error.
  void interrupt();

 private:
  struct Impl;
  int rank_;
  int world_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshsim::cpu
