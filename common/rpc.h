// rpc.h: RpcEndpoint, request/response over any Transport: request ids, tickets or callbacks,
// a timeout on every call, decoding and validation of every message received, and error
// replies to bad requests. This is what processes (scheduler, servers, trainers) talk through.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "common/message.h"
#include "common/transport.h"

namespace strata {

using Millis = std::chrono::milliseconds;

struct RpcOptions {
  Millis default_timeout{30000};  // for calls that name none
  WireLimits limits;              // applied to every received message
};

namespace internal {
struct RpcCore;
struct CallState;
}  // namespace internal

// An incoming request. Answer it with Reply() or ReplyError(), from any thread, at most once;
// it may be kept and answered later (a barrier answers when the last member arrives).
// One-way messages (request id 0) need no answer and Reply() on them does nothing; they hold no
// reference to the endpoint, so their MakeReply() stamps no sender (kUnassignedNode).
class Request {
 public:
  Request(Request&&) noexcept;
  Request& operator=(Request&&) noexcept;
  ~Request();

  const Message& message() const { return message_; }
  const Source& source() const { return source_; }
  bool one_way() const { return message_.request_id() == 0; }
  // The reply skeleton: same request id, our node id as sender.
  Message MakeReply() const;
  void Reply(Message reply);
  void ReplyError(const Status& error);

 private:
  friend struct internal::RpcCore;  // receives into a Request in place
  explicit Request(const Source& source) : source_(source) {}

  std::shared_ptr<internal::RpcCore> core_;  // null for a one-way request
  Source source_;
  Message message_;
  bool answered_ = false;
};

// The handle of a call in flight. Copyable; Wait() hands the result out once.
class Ticket {
 public:
  Ticket() = default;
  explicit Ticket(std::shared_ptr<internal::CallState> state) : state_(std::move(state)) {}
  // Waits up to `timeout` for the reply. DeadlineExceeded if the wait ran out (the call may
  // still complete: Wait again) or if the call's own timeout expired (it will not).
  // A reply carrying an error Status is returned as that Status.
  Result<Message> Wait(Millis timeout);
  bool done() const;
  // When the reply (or the error) arrived; nullopt while it has not.
  std::optional<std::chrono::steady_clock::time_point> completed_at() const;

 private:
  std::shared_ptr<internal::CallState> state_;
};

// Thread-safe. Handlers and completion callbacks run on the transport's I/O thread and must
// not block: hand long work to a pool and Reply() from there.
class RpcEndpoint {
 public:
  // Takes the request by rvalue reference: a handler that keeps it moves it once, itself.
  using Handler = std::function<void(Request&&)>;
  using Callback = std::function<void(Result<Message>)>;

  RpcEndpoint(std::unique_ptr<Transport> transport, RpcOptions options = {});
  ~RpcEndpoint();
  RpcEndpoint(const RpcEndpoint&) = delete;
  RpcEndpoint& operator=(const RpcEndpoint&) = delete;

  // Sets the request handler. Call before Bind().
  void SetHandler(Handler handler);
  Result<std::string> Bind(const std::string& endpoint);
  Result<PeerId> Connect(const std::string& address);
  // The node id stamped as sender on everything sent (kUnassignedNode until registration).
  void set_node_id(uint32_t id);
  uint32_t node_id() const;

  // Sends a request; its reply (or DeadlineExceeded after `timeout`) completes the ticket.
  Ticket Call(PeerId peer, Message request, std::optional<Millis> timeout = std::nullopt);
  // As Call, but runs `done` with the result on the I/O or timer thread.
  void CallAsync(PeerId peer, Message request, Callback done,
                 std::optional<Millis> timeout = std::nullopt);
  // Call and Wait in one.
  Result<Message> CallAndWait(PeerId peer, Message request,
                              std::optional<Millis> timeout = std::nullopt);
  // Sends a one-way message (no reply, no ticket).
  Status Notify(PeerId peer, Message message);
  // Completes every call in flight to `peer` with `status` (e.g. the peer was declared dead).
  void FailCallsTo(PeerId peer, const Status& status);
  // Fails calls in flight with Cancelled and stops the transport. Idempotent.
  void Shutdown();

  const RpcOptions& options() const { return options_; }

 private:
  void Start(PeerId peer, Message request, std::shared_ptr<internal::CallState> state,
             Millis timeout);

  const RpcOptions options_;
  std::shared_ptr<internal::RpcCore> core_;
};

}  // namespace strata
