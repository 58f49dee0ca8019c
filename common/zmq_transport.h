// zmq_transport.h: ZmqTransport, the ZeroMQ Transport. One I/O thread owns every socket: the
// bound ROUTER that receives requests, one DEALER per connected peer (replies come back on it),
// and an inproc PULL that other threads use to wake it when they queue frames. Payloads of
// kZeroCopyMinBytes or more are handed to ZeroMQ without copying; their owner is released when
// ZeroMQ has written them.
// With options.curve set, the ROUTER is a CURVE server (options.curve.server) and every DEALER a
// CURVE client (options.curve.client); the I/O thread also answers ZeroMQ's authentication
// requests (ZAP, RFC 27) on inproc://zeromq.zap.01 in this transport's context, accepting only
// client keys in options.curve.authorized. A refused peer never gets a message through; refusals
// are logged at warning level, the first and then at most one line per 10 s with a count.
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

#include "common/log_limiter.h"
#include "common/transport.h"

namespace strata {

class ZmqTransport final : public Transport {
 public:
  static constexpr size_t kZeroCopyMinBytes = 16 * 1024;

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
  };
  struct Link {
    std::unique_ptr<zmq::socket_t> socket;
    std::deque<Outgoing> backlog;  // frames that met a full queue (high-water mark)
  };

  Status Enqueue(Outgoing out);
  void Run();
  void TakeCommands();
  // Tries to send; false if the socket's queue is full (then the caller keeps it for later).
  bool TrySend(zmq::socket_t& socket, Outgoing& out);
  void Flush(Link& link);
  void Drain(zmq::socket_t& socket, PeerId peer);
  void ConfigureSocket(zmq::socket_t& socket);
  // options_.max_message_mb in bytes, and InvalidArgument naming it for a larger frame.
  int64_t MaxFrameBytes() const { return int64_t{options_.max_message_mb} << 20; }
  Status CheckFrameSizes(const Frames& frames) const;
  // Answers one ZAP request: 200 for an authorized CURVE client key, 400 otherwise.
  void AnswerZap();

  const TransportOptions options_;
  zmq::context_t context_;
  Receiver receiver_;

  std::mutex mu_;  // guards the fields down to the blank line (shared with callers)
  std::vector<Outgoing> outbox_;
  std::vector<std::pair<PeerId, std::unique_ptr<zmq::socket_t>>> new_links_;
  std::unique_ptr<zmq::socket_t> new_router_;
  std::unordered_map<std::string, PeerId> peer_by_address_;
  PeerId next_peer_ = 0;
  zmq::socket_t wake_push_;
  bool shut_down_ = false;
  // The socket file of an ipc:// bind, removed at Shutdown (libzmq removes only the files of
  // wildcard binds).
  std::string ipc_file_;

  // I/O thread only.
  zmq::socket_t wake_pull_;
  Link router_;
  std::vector<Link> links_;  // indexed by PeerId
  std::vector<zmq::message_t> parts_;  // Drain's scratch
  std::unique_ptr<zmq::socket_t> zap_;  // CURVE only: the ZAP handler's REP socket
  std::unordered_set<std::string> authorized_;  // CURVE client public keys, 32 bytes each
  LogLimiter refusals_;

  std::atomic<bool> stop_{false};
  std::thread io_thread_;
};

}  // namespace strata
