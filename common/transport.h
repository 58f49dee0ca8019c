// transport.h: Transport, the interface that moves Frames between processes, and the factory
// that picks an implementation from an endpoint's scheme:
//   tcp://host:port, ipc:///path  ZeroMQ (zmq_transport.h): one ROUTER to receive, one DEALER
//                                 per peer to send; replies come back on the DEALER.
//   mem://name                    in-process (inproc_transport.h), for unit tests.
// Request ids, timeouts and the Message codec live one level up, in rpc.h.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/buffer.h"
#include "common/options.h"
#include "common/status.h"

namespace strata {

using PeerId = uint32_t;
inline constexpr PeerId kNoPeer = 0xffffffffu;

// Where frames came from. A request arrives on our receive socket with a `route` that Reply()
// takes to answer it; a reply arrives on the link we opened with Connect(), named by `peer`.
struct Source {
  PeerId peer = kNoPeer;  // set for frames that arrived on a Connect()ed link
  std::string route;      // set for frames that arrived on the bound (receive) socket
  bool from_peer() const { return peer != kNoPeer; }
};

// Moves Frames. All methods are safe to call from any thread. The receiver callback runs on the
// transport's own I/O thread, one message at a time, and must not block.
class Transport {
 public:
  using Receiver = std::function<void(const Source& source, Frames frames)>;

  virtual ~Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  // Sets the callback for every received message. Call before Bind() or Connect().
  virtual void SetReceiver(Receiver receiver) = 0;
  // Binds the receive socket and starts delivering. Port 0 picks a free port; the returned
  // address is the one peers should connect to (e.g. "tcp://127.0.0.1:45123").
  virtual Result<std::string> Bind(const std::string& endpoint) = 0;
  // Opens (or reuses) a link to a peer's bound address. Does not wait for the peer to be up:
  // messages queue until it is.
  virtual Result<PeerId> Connect(const std::string& address) = 0;
  // Queues frames for a peer. Returns at once; delivery is not guaranteed (the peer may be dead).
  virtual Status Send(PeerId peer, Frames frames) = 0;
  // Queues frames back along the route a request came in on.
  virtual Status Reply(const Source& to, Frames frames) = 0;
  // Stops the I/O thread and closes every socket; queued frames are dropped. Idempotent. Once
  // it has returned, the receiver is not running and never runs again (RpcEndpoint relies on it).
  virtual void Shutdown() = 0;

 protected:
  Transport() = default;
};

class InprocHub;

// Makes the transport for `endpoint`'s scheme (tcp://, ipc://, mem://), wrapped in fault
// injection when options.fault is enabled. `hub` is required for mem:// endpoints.
Result<std::unique_ptr<Transport>> MakeTransport(const std::string& endpoint,
                                                 const TransportOptions& options,
                                                 InprocHub* hub = nullptr);

// Checks the form of an endpoint: tcp://host:port (port 0..65535), ipc:///path, mem://name.
Status ValidateEndpoint(const std::string& endpoint);

}  // namespace strata
