// zmq_transport.h: ZmqTransport, the ZeroMQ Transport. One I/O thread owns every socket: the
// bound ROUTER that receives requests, one DEALER per connected peer (replies come back on it),
// and an eventfd (wakeup.h) that other threads signal, after releasing the queue's lock, to wake
// it when they queue frames (one wake-up per batch of queued messages, none for a reply queued on
// the I/O thread itself). Payloads of
// kZeroCopyMinBytes or more are handed to ZeroMQ without copying; their owner is released when
// ZeroMQ has written them. Small messages (every frame under kZeroCopyMinBytes) are copied
// into a batch (frame_batch.h) on the caller's thread as they are queued, one open batch per
// link (or, on the ROUTER, per route), up to kMaxBatchMessages and kMaxBatchBytes; the I/O
// thread sends each batch as one ZeroMQ message, and the receiving transport hands its messages
// to its receiver one by one, in order. So ZeroMQ's per-message cost is paid per batch, and a
// message's own memory (its envelope, its frame vector) is released on the thread that made it,
// where the allocator recycles it cheaply. A message with a larger frame closes its link's open
// batch and goes out as it is, after it.
// Why not send from the caller's thread: a DEALER also receives the replies to what it sends,
// on the I/O thread, and a ZeroMQ socket must not be used by two threads at once; and a queue is
// what lets small messages leave in batches.
// With options.curve set, the ROUTER is a CURVE server (options.curve.server) and every DEALER a
// CURVE client (options.curve.client); the I/O thread also answers ZeroMQ's authentication
// requests (ZAP, RFC 27) on inproc://zeromq.zap.01 in this transport's context, accepting only
// client keys in options.curve.authorized. A refused peer never gets a message through; refusals
// are logged at warning level, the first and then at most one line per 10 s with a count.
// With options.max_connections_per_host > 0 the ROUTER's handshakes go through that ZAP handler
// too (CURVE or not), which refuses those from a host holding more connections than the bound
// (common/connection_limit.h; a socket monitor tells the I/O thread of every connection accepted
// and closed).
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <zmq.hpp>

#include "common/connection_limit.h"
#include "common/frame_batch.h"
#include "common/log_limiter.h"
#include "common/transport.h"
#include "common/wakeup.h"

namespace strata {

class ZmqTransport final : public Transport {
 public:
  static constexpr size_t kZeroCopyMinBytes = 16 * 1024;
  // Batching: messages whose frames are all smaller than kZeroCopyMinBytes, at most this many
  // in one batch, whose frames take at most this many bytes (bounded by max_message_mb, too).
  static constexpr size_t kMaxBatchMessages = 1024;
  static constexpr size_t kMaxBatchBytes = 256 * 1024;
  // A wake-up that finds this many messages queued for one peer has met a stream: they came
  // much faster than the I/O thread's round of wake-up, send and poll. options.coalesce_us
  // applies. Fewer, a burst (a trainer's requests for one layer's tensors, say), leave at once.
  static constexpr size_t kStreamMessages = 16;

  explicit ZmqTransport(const TransportOptions& options);
  ~ZmqTransport() override;

  void SetReceiver(Receiver receiver) override;
  Result<std::string> Bind(const std::string& endpoint) override;
  Result<PeerId> Connect(const std::string& address) override;
  Status Send(PeerId peer, Frames frames) override;
  Status Reply(const Source& to, Frames frames) override;
  void Shutdown() override;

 private:
  struct Outgoing {
    PeerId peer = kNoPeer;  // kNoPeer: goes out of the ROUTER along `route`
    std::string route;
    Frames frames;
    std::unique_ptr<BatchWriter> batch;  // an open batch (frames empty until the I/O thread takes it)
  };
  struct Link {
    std::unique_ptr<zmq::socket_t> socket;
    std::deque<Outgoing> backlog;  // frames that met a full queue (high-water mark)
  };

  Status Enqueue(Outgoing out);
  void Run();
  // Takes the outbox and sends what it can; returns the most messages one batch held.
  size_t TakeCommands();
  // After a wake-up during a stream (options_.coalesce_us): sleeps until coalesce_us after the
  // previous take, so that the stream's next messages join this batch.
  void WaitToCoalesce();
  // Tries to send; false if the socket's queue is full (then the caller keeps it for later).
  bool TrySend(zmq::socket_t& socket, Outgoing& out);
  void Flush(Link& link);
  // Hands a received batch's messages to the receiver (a bad batch is dropped and logged).
  void DeliverBatch(const Source& source, zmq::message_t&& batch);
  void Drain(zmq::socket_t& socket, PeerId peer);
  void ConfigureSocket(zmq::socket_t& socket);
  // options_.max_message_mb in bytes, and InvalidArgument naming it for a larger frame.
  int64_t MaxFrameBytes() const { return int64_t{options_.max_message_mb} << 20; }
  Status CheckFrameSizes(const Frames& frames) const;
  // Answers one ZAP request: 400 from a host past max_connections_per_host, else 200 for an
  // authorized CURVE client key (or any, without CURVE), 400 otherwise.
  void AnswerZap();
  // Takes the ROUTER monitor's pending events (connections accepted and closed) into limit_.
  void DrainMonitor();

  const TransportOptions options_;
  zmq::context_t context_;
  Receiver receiver_;

  std::mutex mu_;  // guards the fields down to the blank line (shared with callers)
  std::vector<Outgoing> outbox_;  // swapped with taken_, so that both keep their capacity
  std::vector<size_t> open_batches_;  // indices into outbox_ of batches still taking messages
  std::vector<std::pair<PeerId, std::unique_ptr<zmq::socket_t>>> new_links_;
  std::unique_ptr<zmq::socket_t> new_router_;
  std::unique_ptr<zmq::socket_t> new_monitor_;  // the ROUTER's socket monitor (PAIR), if limited
  std::unordered_map<std::string, PeerId> peer_by_address_;
  PeerId next_peer_ = 0;
  bool shut_down_ = false;
  // The socket file of an ipc:// bind, removed at Shutdown (libzmq removes only the files of
  // wildcard binds).
  std::string ipc_file_;

  // I/O thread only.
  std::vector<Outgoing> taken_;
  bool streaming_ = false;  // the last wake-up's take held a batch of kStreamMessages or more
  std::chrono::steady_clock::time_point last_take_{};
  Link router_;
  std::vector<Link> links_;  // indexed by PeerId
  std::vector<zmq::message_t> parts_;  // Drain's scratch
  std::unique_ptr<zmq::socket_t> zap_;  // CURVE or a connection bound: the ZAP handler's REP socket
  std::unique_ptr<zmq::socket_t> monitor_;  // the ROUTER's socket monitor, with a connection bound
  std::unordered_set<std::string> authorized_;  // CURVE client public keys, 32 bytes each
  ConnectionLimit limit_;
  LogLimiter refusals_;
  LogLimiter crowded_;  // refusals past max_connections_per_host
  LogLimiter bad_batches_;

  Wakeup wakeup_;  // signalled by any thread, cleared by the I/O thread
  std::atomic<bool> stop_{false};
  std::thread io_thread_;
};

}  // namespace strata
