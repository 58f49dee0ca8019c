// node.cc: Node.
#include "cluster/node.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>

#include "common/check.h"
#include "common/net.h"
#include "common/steady_millis.h"

namespace strata {
namespace {

std::unique_ptr<Transport> MakeOrDie(const std::string& endpoint, const TransportOptions& options,
                                     InprocHub* hub) {
  auto t = MakeTransport(endpoint, options, hub);
  // The endpoint was validated with the config; failing here is a bug in the caller.
  STRATA_CHECK(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

std::string Hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

}  // namespace

Node::Node(NodeOptions options, InprocHub* hub)
    : options_(std::move(options)),
      rpc_(MakeOrDie(options_.bind, options_.transport, hub),
           RpcOptions{Millis(options_.transport.request_timeout_ms), {}}) {}

Node::~Node() {
  if (joined_) (void)Leave();
  rpc_.Shutdown();
}

void Node::SetRequestHandler(RpcEndpoint::Handler handler) { app_handler_ = std::move(handler); }
void Node::OnEvent(EventCallback callback) { on_event_.push_back(std::move(callback)); }

Status Node::Join() {
  rpc_.SetHandler([this](Request r) { Handle(std::move(r)); });
  STRATA_ASSIGN_OR_RETURN(const std::string bound, rpc_.Bind(options_.bind));
  address_ = AdvertisedAddress(bound, options_.advertise_host, Hostname());
  // ZeroMQ would retry an unreachable address silently until join_timeout_ms; probe first so a
  // wrong host or port fails naming them.
  STRATA_RETURN_IF_ERROR(WaitReachable(options_.cluster.scheduler,
                                       Millis(options_.cluster.connect_timeout_ms))
                             .WithContext("joining the cluster: the scheduler"));
  STRATA_ASSIGN_OR_RETURN(scheduler_, rpc_.Connect(options_.cluster.scheduler));

  Message req;
  auto r = req.builder().getBody().initRegister();
  r.setRole(static_cast<wire::Role>(options_.role));
  r.setAddress(address_);
  r.setRequestedRank(options_.requested_rank);
  r.setHostname(Hostname());
  r.setPid(static_cast<uint32_t>(getpid()));
  r.setJoin(options_.join);
  const Millis join_timeout(options_.cluster.join_timeout_ms);
  auto reply = rpc_.CallAndWait(scheduler_, std::move(req), join_timeout);
  if (!reply.ok()) {
    return reply.status().WithContext("joining the cluster at " + options_.cluster.scheduler);
  }
  auto rr = reply->reader().getBody();
  if (rr.which() != Op::REGISTER_REPLY) {
    return Status::Internal("the scheduler answered register with " + std::string(OpName(rr.which())));
  }
  auto reg = rr.getRegisterReply();
  id_ = reg.getNodeId();
  rank_ = reg.getRank();
  rpc_.set_node_id(id_);
  {
    std::lock_guard lock(mu_);
    view_ = FromWire(reg.getView());
    joined_ = true;
  }
  DeliverHeldRequests();
  spdlog::info("node: joined as {} {} (node {}) at {}; view epoch {} with {} nodes",
               RoleName(options_.role), rank_.load(), id_.load(), address_, view().epoch,
               view().nodes.size());
  heard_ms_ = SteadyMillis();
  beat_sent_ms_ = heard_ms_.load();  // the registration counts as this node's first beat
  heartbeat_ = std::thread([this] { Heartbeats(); });
  return Status::OK();
}

void Node::Handle(Request request) {
  const Message& msg = request.message();
  switch (msg.op()) {
    case Op::NODE_EVENT: {
      auto e = msg.reader().getBody().getNodeEvent();
      NodeEvent::Kind kind = NodeEvent::Kind::kRejoined;
      switch (e.getKind()) {
        case wire::NodeEvent::Kind::DEAD: kind = NodeEvent::Kind::kDead; break;
        case wire::NodeEvent::Kind::REJOINED: kind = NodeEvent::Kind::kRejoined; break;
        case wire::NodeEvent::Kind::JOINED: kind = NodeEvent::Kind::kJoined; break;
        case wire::NodeEvent::Kind::LEFT: kind = NodeEvent::Kind::kLeft; break;
      }
      NodeEvent event{kind, FromWire(e.getNode()), FromWire(e.getView())};
      {
        std::lock_guard lock(mu_);
        if (event.view.epoch > view_.epoch) view_ = event.view;
      }
      switch (event.kind) {
        case NodeEvent::Kind::kDead: spdlog::warn("node: {} is dead", event.node.Describe()); break;
        case NodeEvent::Kind::kRejoined: spdlog::info("node: {} rejoined", event.node.Describe()); break;
        case NodeEvent::Kind::kJoined: spdlog::info("node: {} joined", event.node.Describe()); break;
        case NodeEvent::Kind::kLeft: spdlog::info("node: {} left", event.node.Describe()); break;
        case NodeEvent::Kind::kShutdown: break;
      }
      for (auto& cb : on_event_) cb(event);
      return;
    }
    case Op::SHUTDOWN: {
      if (msg.sender() != kSchedulerId) {
        return request.ReplyError(Status::InvalidArgument("only the scheduler may order a shutdown"));
      }
      NodeEvent event{NodeEvent::Kind::kShutdown, {}, view()};
      {
        std::lock_guard lock(mu_);
        shutdown_notice_ = true;
        cv_.notify_all();
      }
      spdlog::info("node: the scheduler ended the job");
      for (auto& cb : on_event_) cb(event);
      return;
    }
    case Op::ECHO: {
      Message reply = request.MakeReply();
      reply.set_op(Op::ECHO);
      for (size_t i = 0; i < msg.num_payloads(); ++i) {
        auto info = msg.payload_info(i);
        reply.AddPayload(info.dtype, info.shape, *info.buffer);
      }
      return request.Reply(std::move(reply));
    }
    default: {
      if (!app_handler_) {
        return request.ReplyError(Status::Unimplemented(std::string(RoleName(options_.role)) +
                                                        " does not serve " +
                                                        std::string(OpName(msg.op()))));
      }
      {
        std::lock_guard lock(mu_);
        if (!delivering_) {
          held_.push_back(std::move(request));
          return;
        }
      }
      return app_handler_(std::move(request));
    }
  }
}

void Node::DeliverHeldRequests() {
  while (true) {
    std::vector<Request> batch;
    {
      std::lock_guard lock(mu_);
      if (held_.empty()) {
        delivering_ = true;  // under mu_ with held_ empty: Handle() cannot overtake the batches
        return;
      }
      batch.swap(held_);
    }
    for (Request& r : batch) app_handler_(std::move(r));
  }
}

Status Node::SchedulerStatus() const {
  {
    std::lock_guard lock(dead_mu_);
    if (!superseded_.ok()) return superseded_;
    if (!come_back_failed_.ok()) return come_back_failed_;
  }
  if (declared_dead_ && !step_down_) {  // set before Join: read without mu_
    return Status::FailedPrecondition(
        "the scheduler at " + options_.cluster.scheduler + " declared this " + std::string(RoleName(options_.role)) +
        " dead while it ran (no heartbeat reached it within cluster.heartbeat_timeout_ms " +
        std::to_string(options_.cluster.heartbeat_timeout_ms) +
        " ms: the process stalled, was paused or starved); the job went on without it");
  }
  const int64_t limit = options_.cluster.scheduler_timeout_ms, heard = heard_ms_;
  if (limit <= 0 || heard == 0) return Status::OK();
  const int64_t silent = SteadyMillis() - heard;
  if (silent < limit) return Status::OK();
  return Status::Unavailable("lost the scheduler at " + options_.cluster.scheduler + ": no answer to " +
                             std::to_string(failed_beats_.load()) + " heartbeats over " +
                             std::to_string(silent / 1000) + " s (cluster.scheduler_timeout_ms " +
                             std::to_string(limit) + ")");
}

void Node::Heartbeats() {
  const Millis interval(options_.cluster.heartbeat_interval_ms);
  std::unique_lock lock(mu_);
  while (!leaving_) {
    cv_.wait_for(lock, interval, [this] { return leaving_ || rejoin_wanted_ || come_back_wanted_; });
    if (leaving_) return;
    if (come_back_wanted_) {
      come_back_wanted_ = false;
      const uint64_t generation = generation_;
      lock.unlock();
      ComeBack(generation);
      lock.lock();
      continue;
    }
    if (rejoin_wanted_) {
      rejoin_wanted_ = false;
      const uint64_t generation = rejoin_generation_;
      lock.unlock();
      if (Status s = Rejoin(generation); !s.ok()) spdlog::warn("node: {}", s.ToString());
      lock.lock();
      continue;
    }
    const uint64_t known_epoch = view_.epoch, generation = generation_;
    const uint32_t incarnation = IncarnationLocked();
    lock.unlock();
    const int64_t sent = SteadyMillis(), last = beat_sent_ms_.exchange(sent);
    if (last > 0 && sent - last > options_.cluster.heartbeat_timeout_ms && silent_since_ms_ == 0) {
      silent_since_ms_ = sent;
      spdlog::warn("node: no heartbeat for {:.1f} s (past cluster.heartbeat_timeout_ms): the scheduler may have "
                   "declared this node dead; waiting for its answer", (sent - last) / 1e3);
    }
    Message hb;
    hb.set_op(Op::HEARTBEAT);
    hb.set_incarnation(incarnation);
    rpc_.CallAsync(
        scheduler_, std::move(hb),
        [this, known_epoch, generation, sent](Result<Message> r) {
          const int64_t now = SteadyMillis();
          // Any answer to a beat sent after a silence says what the scheduler made of it.
          if (r.ok() || r.status().code() == StatusCode::kFailedPrecondition) {
            int64_t since = silent_since_ms_;
            if (since > 0 && sent >= since) silent_since_ms_.compare_exchange_strong(since, 0);
          }
          if (!r.ok() && r.status().code() == StatusCode::kFailedPrecondition &&
              r.status().message().find(kSuperseded) != std::string::npos) {
            heard_ms_ = now;
            failed_beats_ = 0;
            std::lock_guard l(mu_);
            if (generation_ != generation) return;  // an answer to a beat of before a re-registration
            std::lock_guard d(dead_mu_);
            if (superseded_.ok()) {
              superseded_ = Status::FailedPrecondition(
                  "the scheduler at " + options_.cluster.scheduler + " answered: " + r.status().message() +
                  "; this process ends without touching the job");
              spdlog::error("node: {}", superseded_.message());
            }
            return;
          }
          if (!r.ok() && r.status().code() == StatusCode::kFailedPrecondition &&
              r.status().message().find(kDeclaredDead) != std::string::npos) {
            heard_ms_ = now;  // an answer: the scheduler is there
            failed_beats_ = 0;
            bool wake = false;
            {
              std::lock_guard l(mu_);
              if (generation_ == generation) {
                if (!declared_dead_.exchange(true)) spdlog::error("node: {}", r.status().message());
                std::lock_guard d(dead_mu_);
                wake = come_back_wanted_ = step_down_ && come_back_failed_.ok();
              }
            }
            if (wake) cv_.notify_all();
            return;
          }
          if (!r.ok()) {
            const uint64_t failed = ++failed_beats_;
            if (failed == 1 || now - warned_ms_ >= 10000) {
              warned_ms_ = now;
              spdlog::warn("node: heartbeat failed ({} since the last answer, {:.1f} s ago): {}", failed,
                           (now - heard_ms_) / 1e3, r.status().ToString());
            }
            return;
          }
          heard_ms_ = now;
          failed_beats_ = 0;
          if (r->reader().getBody().getHeartbeatReply().getReregister()) {
            {
              std::lock_guard l(mu_);
              // An answer to a beat sent before a re-registration that already happened is stale.
              if (generation_ == generation) {
                rejoin_wanted_ = true;
                rejoin_generation_ = generation;
              }
            }
            cv_.notify_all();
            return;
          }
          if (r->reader().getBody().getHeartbeatReply().getViewEpoch() > known_epoch) {
            // A change we missed a notification for: fetch the view, off the I/O thread.
            Message get;
            get.set_op(Op::GET_VIEW);
            rpc_.CallAsync(scheduler_, std::move(get), [this](Result<Message> v) {
              if (!v.ok() || v->op() != Op::VIEW) return;
              ClusterView fresh = FromWire(v->reader().getBody().getView());
              std::lock_guard l(mu_);
              if (fresh.epoch > view_.epoch) view_ = std::move(fresh);
            });
          }
        },
        interval * 4);
    lock.lock();
  }
}

bool Node::Silent() const {
  const int64_t last = beat_sent_ms_;
  return silent_since_ms_ > 0 || (last > 0 && SteadyMillis() - last > options_.cluster.heartbeat_timeout_ms);
}

Result<Message> Node::CallScheduler(const std::function<Message()>& make, Millis timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    struct Attempt {
      bool done = false;
      std::optional<Result<Message>> result;
    };
    auto attempt = std::make_shared<Attempt>();
    uint64_t generation;
    {
      std::lock_guard lock(mu_);
      generation = generation_;
    }
    const auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    if (left <= Millis(0)) {
      return Status::DeadlineExceeded("no answer from the scheduler at " + options_.cluster.scheduler +
                                      " within " + std::to_string(timeout.count()) + " ms");
    }
    rpc_.CallAsync(
        scheduler_, make(),
        [this, attempt](Result<Message> r) {
          {
            std::lock_guard lock(mu_);
            attempt->result = std::move(r);
            attempt->done = true;
          }
          cv_.notify_all();
        },
        left);
    std::unique_lock lock(mu_);
    // Ticks so that a scheduler gone past cluster.scheduler_timeout_ms ends the wait.
    while (!attempt->done && generation_ == generation) {
      cv_.wait_for(lock, Millis(100));
      if (attempt->done || generation_ != generation) break;
      if (Status s = SchedulerStatus(); !s.ok()) return s;
    }
    if (generation_ != generation && !attempt->done) continue;  // a restarted scheduler: ask it again
    Result<Message> result = std::move(*attempt->result);
    lock.unlock();
    if (!result.ok() && result.status().code() == StatusCode::kUnavailable &&
        result.status().message().find(kRejoinFirst) != std::string::npos &&
        std::chrono::steady_clock::now() < deadline) {
      // The scheduler restarted and does not know us yet: register again, then repeat the
      // call; pause a little if that failed, to not spin.
      if (Status s = Rejoin(generation); !s.ok()) {
        // Refused (another job's scheduler, a rank taken): calling again will not help.
        if (s.code() != StatusCode::kUnavailable && s.code() != StatusCode::kDeadlineExceeded) return s;
        spdlog::warn("node: {}", s.ToString());
        std::this_thread::sleep_for(Millis(options_.cluster.heartbeat_interval_ms));
      }
      continue;
    }
    return result;
  }
}

void Node::OnDeclaredDead(std::function<void()> step_down, std::function<void()> rejoined) {
  std::lock_guard lock(mu_);
  step_down_ = std::move(step_down);
  rejoined_ = std::move(rejoined);
}

void Node::ComeBack(uint64_t generation) {
  spdlog::warn("node: {} {} was declared dead while it ran (no heartbeat reached the scheduler within "
               "cluster.heartbeat_timeout_ms {} ms): stepping down and registering again at its rank",
               RoleName(options_.role), rank_.load(), options_.cluster.heartbeat_timeout_ms);
  step_down_();
  if (Status s = Rejoin(generation, "after being declared dead"); !s.ok()) {
    const bool again = s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
    if (again) {
      spdlog::warn("node: {}; trying again at the next heartbeat", s.ToString());
      return;
    }
    std::lock_guard lock(dead_mu_);
    come_back_failed_ = s.WithContext("the scheduler declared this node dead while it ran, and refused it back");
    return;
  }
  declared_dead_ = false;
  rejoined_();
}

Status Node::Rejoin(uint64_t generation, std::string_view why) {
  std::lock_guard rejoin(rejoin_mu_);
  Message req;
  std::map<std::string, std::string> kv;
  {
    std::lock_guard lock(mu_);
    if (generation_ != generation) return Status::OK();  // done meanwhile
    auto r = req.builder().getBody().initRegister();
    r.setRole(static_cast<wire::Role>(options_.role));
    r.setAddress(address_);
    r.setRequestedRank(rank_);
    r.setHostname(Hostname());
    r.setPid(static_cast<uint32_t>(getpid()));
    r.setRejoin(true);
    r.setNodeId(id_);
    const NodeInfo* self = view_.Find(id_);
    r.setIncarnation(self ? self->incarnation : 0);
    ToWire(view_, r.initView());
    kv = kv_written_;
  }
  const std::string where = "re-registering with the scheduler at " + options_.cluster.scheduler;
  auto reply = rpc_.CallAndWait(scheduler_, std::move(req), Timeout());
  if (!reply.ok()) return reply.status().WithContext(where);
  auto body = reply->reader().getBody();
  if (body.which() != Op::REGISTER_REPLY) {
    return Status::Internal(where + ": it answered with " + std::string(OpName(body.which())));
  }
  auto reg = body.getRegisterReply();
  if (reg.getNodeId() != id_ || reg.getRank() != rank_) {
    return Status::Internal(where + ": it gave node " + std::to_string(reg.getNodeId()) + " rank " +
                            std::to_string(reg.getRank()) + " to node " + std::to_string(id_) + " rank " +
                            std::to_string(rank_));
  }
  uint32_t incarnation = 0;
  {
    ClusterView fresh = FromWire(reg.getView());
    std::lock_guard lock(mu_);
    if (fresh.epoch > view_.epoch && !fresh.nodes.empty()) view_ = std::move(fresh);
    if (const NodeInfo* self = view_.Find(id_)) incarnation = self->incarnation;
  }
  for (const auto& [key, value] : kv) {
    Message set;
    auto s = set.builder().getBody().initKvSet();
    s.setKey(key);
    s.setValue(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(value.data()), value.size()));
    auto r = rpc_.CallAndWait(scheduler_, std::move(set), Timeout());
    if (!r.ok()) return r.status().WithContext(where + ": publishing kv key \"" + key + "\" again");
  }
  heard_ms_ = SteadyMillis();
  failed_beats_ = 0;
  {
    std::lock_guard lock(mu_);
    ++generation_;
  }
  cv_.notify_all();
  spdlog::warn("node: re-registered {} (the scheduler at {}) as {} {} (node {}, incarnation {}); published {} kv "
               "keys again", why, options_.cluster.scheduler, RoleName(options_.role), rank_.load(), id_.load(), incarnation,
               kv.size());
  return Status::OK();
}

Status Node::Barrier(const std::string& name, wire::BarrierScope scope, std::optional<Millis> timeout) {
  auto r = CallScheduler(
      [&] {
        Message req;
        auto b = req.builder().getBody().initBarrier();
        b.setName(name);
        b.setScope(scope);
        return req;
      },
      timeout.value_or(Timeout()));
  return r.ok() ? Status::OK() : r.status();
}

Status Node::KvSet(const std::string& key, std::string_view value) {
  auto r = CallScheduler(
      [&] {
        Message req;
        auto kv = req.builder().getBody().initKvSet();
        kv.setKey(key);
        kv.setValue(capnp::Data::Reader(reinterpret_cast<const kj::byte*>(value.data()), value.size()));
        return req;
      },
      Timeout());
  if (!r.ok()) return r.status();
  std::lock_guard lock(mu_);
  kv_written_[key] = std::string(value);
  return Status::OK();
}

Result<std::string> Node::KvGet(const std::string& key, Millis wait) {
  // Each attempt waits at most what is left of `wait` at the scheduler.
  const auto until = std::chrono::steady_clock::now() + wait;
  STRATA_ASSIGN_OR_RETURN(Message reply, CallScheduler(
                                             [&] {
                                               Message req;
                                               auto kv = req.builder().getBody().initKvGet();
                                               kv.setKey(key);
                                               const auto left = std::max(
                                                   Millis(0), std::chrono::duration_cast<Millis>(
                                                                  until - std::chrono::steady_clock::now()));
                                               kv.setWaitMs(static_cast<uint32_t>(left.count()));
                                               return req;
                                             },
                                             wait + Timeout()));
  if (reply.op() != Op::KV_VALUE) return Status::Internal("kvGet answered with " + std::string(OpName(reply.op())));
  auto v = reply.reader().getBody().getKvValue();
  return std::string(reinterpret_cast<const char*>(v.begin()), v.size());
}

Result<ClusterView> Node::RefreshView() {
  STRATA_ASSIGN_OR_RETURN(Message reply, CallScheduler(
                                             [] {
                                               Message req;
                                               req.set_op(Op::GET_VIEW);
                                               return req;
                                             },
                                             Timeout()));
  if (reply.op() != Op::VIEW) return Status::Internal("getView answered with " + std::string(OpName(reply.op())));
  ClusterView fresh = FromWire(reply.reader().getBody().getView());
  std::lock_guard lock(mu_);
  if (fresh.epoch >= view_.epoch && !fresh.nodes.empty()) view_ = fresh;
  return view_;
}

Result<SplitSchedule> Node::LeaseSplit(int64_t until, wire::SplitChange change) {
  STRATA_ASSIGN_OR_RETURN(Message reply, CallScheduler(
                                             [&] {
                                               Message req;
                                               auto l = req.builder().getBody().initSplitLease();
                                               l.setUntil(until);
                                               l.setChange(change);
                                               return req;
                                             },
                                             Timeout()));
  if (reply.op() != Op::SPLIT_SCHEDULE) {
    return Status::Internal("splitLease answered with " + std::string(OpName(reply.op())));
  }
  return SplitSchedule::FromWire(reply.reader().getBody().getSplitSchedule());
}

Status Node::RequestShutdown() {
  return CallScheduler([] { return Message(Op::SHUTDOWN); }, Timeout()).status();
}

Status Node::CommitJoin() {
  return CallScheduler([] { return Message(Op::JOIN_COMMIT); }, Timeout()).status();
}

void Node::StopWithoutLeaving() {
  {
    std::lock_guard lock(mu_);
    if (!joined_ || leaving_) return;
    leaving_ = true;
    cv_.notify_all();
  }
  if (heartbeat_.joinable()) heartbeat_.join();
  std::lock_guard lock(mu_);
  joined_ = false;
}

Status Node::Leave(std::optional<Millis> timeout) {
  {
    std::lock_guard lock(mu_);
    if (!joined_ || leaving_) return Status::OK();
    leaving_ = true;
    cv_.notify_all();
  }
  if (heartbeat_.joinable()) heartbeat_.join();
  bool ordered_to_stop;
  {
    std::lock_guard lock(mu_);
    joined_ = false;
    ordered_to_stop = shutdown_notice_;
  }
  // After a shutdown notice the scheduler is ending the job and may be gone already.
  if (ordered_to_stop) return Status::OK();
  {
    std::lock_guard lock(dead_mu_);
    if (!superseded_.ok()) return Status::OK();  // the rank is the newer process's to leave
  }
  const uint32_t incarnation = [this] {
    std::lock_guard lock(mu_);
    return IncarnationLocked();
  }();
  auto r = CallScheduler(
      [incarnation] {
        Message req;
        req.set_op(Op::DEREGISTER);
        req.set_incarnation(incarnation);
        return req;
      },
      timeout.value_or(Timeout()));
  if (!r.ok()) return r.status().WithContext("leaving the cluster");
  return Status::OK();
}

bool Node::WaitForShutdown(Millis timeout) {
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return shutdown_notice_; });
}

uint32_t Node::IncarnationLocked() const {
  const NodeInfo* self = view_.Find(id_);
  return self ? self->incarnation : kIncarnationNotSaid;
}

ClusterView Node::view() const {
  std::lock_guard lock(mu_);
  return view_;
}

}  // namespace strata
