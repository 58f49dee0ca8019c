// rpc.cc: RpcEndpoint, Request and Ticket.
#include "common/rpc.h"

#include "common/log_limiter.h"
#include "common/source_name.h"

#include <kj/exception.h>
#include <spdlog/spdlog.h>

#include "common/check.h"

namespace strata {
namespace internal {

using Clock = std::chrono::steady_clock;

struct CallState {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Result<Message>> result;
  bool taken = false;
  Clock::time_point completed{};  // when the result arrived (set with it)
  RpcEndpoint::Callback callback;

  // Called exactly once: whoever removes the call from RpcCore::pending completes it.
  void Complete(Result<Message> r) {
    RpcEndpoint::Callback cb;
    {
      std::unique_lock lock(mu);
      if (!callback) {
        result.emplace(std::move(r));
        completed = Clock::now();
        lock.unlock();
        // After unlocking: a waiter woken under the lock would block on it straight away.
        cv.notify_all();
        return;
      }
      cb = std::move(callback);
    }
    cb(std::move(r));
  }
};

struct RpcCore : std::enable_shared_from_this<RpcCore> {
  struct Pending {
    std::shared_ptr<CallState> state;
    PeerId peer;
    Clock::time_point deadline;
    Op op;
  };

  std::unique_ptr<Transport> transport;
  RpcOptions options;
  std::atomic<uint32_t> node_id{kUnassignedNode};
  RpcEndpoint::Handler handler;
  std::atomic<uint64_t> next_request_id{1};
  LogLimiter rejected;  // malformed messages

  std::mutex mu;  // guards the fields down to the blank line
  std::condition_variable timer_cv;
  std::unordered_map<uint64_t, Pending> pending;
  std::multimap<Clock::time_point, uint64_t> deadlines;
  Clock::time_point timer_wakes_at = Clock::time_point::max();  // when RunTimer next looks
  bool stop = false;

  std::thread timer;

  // Removes a call from the tables; null if it is no longer pending.
  std::shared_ptr<CallState> Take(uint64_t id, Pending* out = nullptr) {
    std::lock_guard lock(mu);
    auto it = pending.find(id);
    if (it == pending.end()) return nullptr;
    auto [lo, hi] = deadlines.equal_range(it->second.deadline);
    for (auto d = lo; d != hi; ++d) {
      if (d->second == id) {
        deadlines.erase(d);
        break;
      }
    }
    if (out) *out = it->second;
    auto state = std::move(it->second.state);
    pending.erase(it);
    return state;
  }

  void SendReply(const Source& to, Message reply) {
    const uint64_t id = reply.request_id();
    const bool error_reply = !reply.status().ok();
    Status s = transport->Reply(to, Encode(std::move(reply)));
    if (s.ok()) return;
    spdlog::debug("rpc: reply not sent: {}", s.ToString());
    // A reply the transport refuses (a frame over transport.max_message_mb) becomes an error
    // reply naming why, so the caller learns it now rather than at its deadline.
    if (s.code() == StatusCode::kInvalidArgument && !error_reply) {
      (void)transport->Reply(to, Encode(ErrorReply(id, s.WithContext("the reply"))));
    }
  }

  Message ErrorReply(uint64_t request_id, const Status& error) {
    Message reply;
    reply.set_request_id(request_id);
    reply.set_reply(true);
    reply.set_sender(node_id.load());
    reply.set_status(error);
    return reply;
  }

  void OnReceive(const Source& source, Frames frames) {
    // Decoded in place: a request is not moved on its way to the handler (a reply moves once,
    // into its call's state).
    Request request(source);
    Message& msg = request.message_;
    if (Status s = DecodeInto(frames, options.limits, &msg); !s.ok()) {
      // Anyone who can reach the port can send garbage: a sender's first rejection is logged,
      // then one line per 10 s for it with its count (log_limiter.h bounds the rest).
      const std::string from = SourceName(source);
      if (const LogLimiter::Tick tick = rejected.Count(from); tick.log) {
        spdlog::warn("rpc: rejected a message from {}: {}; {} rejected from it, {} since its last warning "
                     "({} from {} senders in all)",
                     from, s.ToString(), tick.total, tick.since, tick.all, tick.peers);
      }
      // A request that fails validation is still answered, if its header names it (a few
      // loads from the fixed header, which DecodeInto left in place).
      if (!source.from_peer() && !frames.empty()) {
        std::optional<uint64_t> id = PeekRequestId(frames[0]);
        if (id) SendReply(source, ErrorReply(*id, s));
      }
      return;
    }
    if (msg.is_reply()) {
      auto state = Take(msg.request_id());
      if (!state) {
        spdlog::debug("rpc: late or unknown reply {}", msg.request_id());
        return;
      }
      Status s = msg.status();
      if (s.ok()) {
        state->Complete(std::move(msg));
      } else {
        state->Complete(std::move(s));
      }
      return;
    }
    const uint64_t id = msg.request_id();
    if (!handler) {
      if (id) SendReply(source, ErrorReply(id, Status::Unimplemented("this node serves no requests")));
      return;
    }
    // A one-way request is never answered: it holds no reference to the endpoint (two atomic
    // operations fewer per message of a stream).
    if (id) request.core_ = shared_from_this();
    try {
      handler(std::move(request));
    } catch (const kj::Exception& e) {
      spdlog::error("rpc: handler threw on request {}: {}", id, e.getDescription().cStr());
    } catch (const std::exception& e) {
      spdlog::error("rpc: handler threw on request {}: {}", id, e.what());
    }
  }

  // An idle timer looks this often, so that calls with longer timeouts need not wake it.
  static constexpr Millis kTimerTick{1000};

  void RunTimer() {
    std::unique_lock lock(mu);
    while (!stop) {
      const auto now = Clock::now();
      if (deadlines.empty() || now < deadlines.begin()->first) {
        timer_wakes_at = deadlines.empty() ? now + kTimerTick
                                           : std::min(deadlines.begin()->first, now + kTimerTick);
        timer_cv.wait_until(lock, timer_wakes_at);
        continue;
      }
      const uint64_t id = deadlines.begin()->second;
      lock.unlock();
      Pending p;
      if (auto state = Take(id, &p)) {
        state->Complete(Status::DeadlineExceeded(std::string(OpName(p.op)) + " request " +
                                                 std::to_string(id) + " to peer " +
                                                 std::to_string(p.peer) + " timed out"));
      }
      lock.lock();
    }
  }
};

}  // namespace internal

using internal::CallState;
using internal::Clock;
using internal::RpcCore;

// ---------------------------------------------------------------------------------------------
// Request

Request::Request(Request&&) noexcept = default;
Request& Request::operator=(Request&&) noexcept = default;
Request::~Request() = default;

Message Request::MakeReply() const {
  return message_.MakeReply(core_ ? core_->node_id.load() : kUnassignedNode);
}

void Request::Reply(Message reply) {
  if (one_way() || answered_) return;
  answered_ = true;
  core_->SendReply(source_, std::move(reply));
}

void Request::ReplyError(const Status& error) {
  if (one_way() || answered_) return;
  Reply(message_.MakeErrorReply(core_->node_id.load(), error));
}

// ---------------------------------------------------------------------------------------------
// Ticket

Result<Message> Ticket::Wait(Millis timeout) {
  if (!state_) return Status::FailedPrecondition("Wait on an empty ticket");
  std::unique_lock lock(state_->mu);
  if (!state_->cv.wait_for(lock, timeout, [&] { return state_->result.has_value() || state_->taken; })) {
    return Status::DeadlineExceeded("no reply within " + std::to_string(timeout.count()) + " ms");
  }
  if (state_->taken) return Status::FailedPrecondition("ticket result already taken");
  state_->taken = true;
  Result<Message> r = std::move(*state_->result);
  state_->result.reset();
  return r;
}

std::optional<std::chrono::steady_clock::time_point> Ticket::completed_at() const {
  if (!state_) return std::nullopt;
  std::lock_guard lock(state_->mu);
  if (!state_->result.has_value() && !state_->taken) return std::nullopt;
  return state_->completed;
}

bool Ticket::done() const {
  if (!state_) return false;
  std::lock_guard lock(state_->mu);
  return state_->result.has_value() || state_->taken;
}

// ---------------------------------------------------------------------------------------------
// RpcEndpoint

RpcEndpoint::RpcEndpoint(std::unique_ptr<Transport> transport, RpcOptions options)
    : options_(options), core_(std::make_shared<RpcCore>()) {
  core_->transport = std::move(transport);
  core_->options = options;
  // The core owns the transport, no receiver runs during or after Transport::Shutdown(), and
  // Shutdown() shuts the transport down before the endpoint lets go of the core: the plain
  // pointer cannot outlive what it points to (and a reference here would be a cycle).
  core_->transport->SetReceiver([core = core_.get()](const Source& source, Frames frames) {
    core->OnReceive(source, std::move(frames));
  });
  core_->timer = std::thread([core = core_.get()] { core->RunTimer(); });
}

RpcEndpoint::~RpcEndpoint() { Shutdown(); }

void RpcEndpoint::SetHandler(Handler handler) { core_->handler = std::move(handler); }
Result<std::string> RpcEndpoint::Bind(const std::string& e) { return core_->transport->Bind(e); }
Result<PeerId> RpcEndpoint::Connect(const std::string& a) { return core_->transport->Connect(a); }
void RpcEndpoint::set_node_id(uint32_t id) { core_->node_id = id; }
uint32_t RpcEndpoint::node_id() const { return core_->node_id; }

void RpcEndpoint::Start(PeerId peer, Message request, std::shared_ptr<CallState> state,
                        Millis timeout) {
  const uint64_t id = core_->next_request_id++;
  request.set_request_id(id);
  request.set_reply(false);
  request.set_sender(core_->node_id.load());
  const Op op = request.op();
  {
    std::lock_guard lock(core_->mu);
    if (core_->stop) {
      state->Complete(Status::Cancelled("rpc endpoint is shut down"));
      return;
    }
    const auto deadline = Clock::now() + timeout;
    core_->pending.emplace(id, RpcCore::Pending{state, peer, deadline, op});
    core_->deadlines.emplace(deadline, id);
    // Most calls time out later than the timer looks anyway: only earlier ones wake it.
    if (deadline < core_->timer_wakes_at) core_->timer_cv.notify_one();
  }
  Status s = core_->transport->Send(peer, Encode(std::move(request)));
  if (!s.ok()) {
    if (auto st = core_->Take(id)) st->Complete(s.WithContext(std::string(OpName(op))));
  }
}

Ticket RpcEndpoint::Call(PeerId peer, Message request, std::optional<Millis> timeout) {
  auto state = std::make_shared<CallState>();
  Start(peer, std::move(request), state, timeout.value_or(options_.default_timeout));
  return Ticket(state);
}

void RpcEndpoint::CallAsync(PeerId peer, Message request, Callback done,
                            std::optional<Millis> timeout) {
  auto state = std::make_shared<CallState>();
  state->callback = std::move(done);
  Start(peer, std::move(request), state, timeout.value_or(options_.default_timeout));
}

Result<Message> RpcEndpoint::CallAndWait(PeerId peer, Message request,
                                         std::optional<Millis> timeout) {
  const Millis t = timeout.value_or(options_.default_timeout);
  // The call's own deadline fires first; the extra second only guards against a stuck timer.
  return Call(peer, std::move(request), t).Wait(t + Millis(1000));
}

Status RpcEndpoint::Notify(PeerId peer, Message message) {
  message.set_request_id(0);
  message.set_reply(false);
  message.set_sender(core_->node_id.load());
  return core_->transport->Send(peer, Encode(std::move(message)));
}

void RpcEndpoint::FailCallsTo(PeerId peer, const Status& status) {
  std::vector<uint64_t> ids;
  {
    std::lock_guard lock(core_->mu);
    for (const auto& [id, p] : core_->pending) {
      if (p.peer == peer) ids.push_back(id);
    }
  }
  for (uint64_t id : ids) {
    if (auto st = core_->Take(id)) st->Complete(status);
  }
}

void RpcEndpoint::Shutdown() {
  {
    std::lock_guard lock(core_->mu);
    if (core_->stop) return;
    core_->stop = true;
    core_->timer_cv.notify_all();
  }
  core_->transport->Shutdown();  // no receiver runs after this
  if (core_->timer.joinable()) core_->timer.join();
  std::vector<uint64_t> ids;
  {
    std::lock_guard lock(core_->mu);
    for (const auto& [id, p] : core_->pending) ids.push_back(id);
  }
  for (uint64_t id : ids) {
    if (auto st = core_->Take(id)) st->Complete(Status::Cancelled("rpc endpoint shut down"));
  }
}

}  // namespace strata
