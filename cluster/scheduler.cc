// scheduler.cc: Scheduler.
#include "cluster/scheduler.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/check.h"
#include "common/net.h"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

bool InScope(Role role, wire::BarrierScope scope) {
  switch (scope) {
    case wire::BarrierScope::ALL: return true;
    case wire::BarrierScope::SERVERS: return role == Role::kServer;
    case wire::BarrierScope::TRAINERS: return role == Role::kTrainer;
  }
  return false;
}

std::string_view ScopeName(wire::BarrierScope scope) {
  switch (scope) {
    case wire::BarrierScope::ALL: return "all";
    case wire::BarrierScope::SERVERS: return "servers";
    case wire::BarrierScope::TRAINERS: return "trainers";
  }
  return "?";
}

// What a node hears when it calls a restarted scheduler before re-registering; Node retries the
// call after re-registering on Unavailable.
Status RejoinFirst(uint32_t sender, const std::string& what) {
  return Status::Unavailable(what + " from node " + std::to_string(sender) +
                             ": the scheduler restarted and does not know this node yet; " +
                             std::string(kRejoinFirst));
}

}  // namespace

Scheduler::Scheduler(SchedulerOptions options, std::unique_ptr<Transport> transport)
    : options_(std::move(options)), rpc_(std::move(transport)) {
  rpc_.set_node_id(kSchedulerId);
  rpc_.SetHandler([this](Request r) { Handle(std::move(r)); });
}

Scheduler::~Scheduler() { Stop(); }

Result<std::string> Scheduler::Start(const std::string& endpoint) {
  STRATA_ASSIGN_OR_RETURN(std::string address, rpc_.Bind(endpoint));
  monitor_ = std::thread([this] { Monitor(); });
  spdlog::info("scheduler: listening on {}, expecting {} servers and {} trainers", address,
               options_.cluster.servers, options_.cluster.trainers);
  return address;
}

bool Scheduler::WaitDone(Millis timeout) {
  std::unique_lock lock(mu_);
  return done_cv_.wait_for(lock, timeout, [this] { return done_; });
}

void Scheduler::Stop() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    if (!done_) EndJobLocked();
  }
  if (monitor_.joinable()) monitor_.join();
  rpc_.Shutdown();
}

void Scheduler::Abandon() {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    done_cv_.notify_all();
  }
  if (monitor_.joinable()) monitor_.join();
  rpc_.Shutdown();
}

ClusterView Scheduler::view() const {
  std::lock_guard lock(mu_);
  return ViewLocked();
}

ClusterView Scheduler::ViewLocked() const {
  ClusterView v;
  v.epoch = epoch_;
  if (!view_complete_) return v;
  for (const Member& m : members_) v.nodes.push_back(m.info);
  std::sort(v.nodes.begin(), v.nodes.end(),
            [](const NodeInfo& a, const NodeInfo& b) { return a.id < b.id; });
  return v;
}

Scheduler::Member* Scheduler::FindMemberLocked(uint32_t id) {
  for (Member& m : members_) {
    if (m.state != State::kPending && m.info.id == id) return &m;
  }
  return nullptr;
}

void Scheduler::Handle(Request request) {
  const auto start = Clock::now();
  Dispatch(std::move(request));
  request_seconds_.Observe(std::chrono::duration<double>(Clock::now() - start).count());
}

void Scheduler::Dispatch(Request request) {
  switch (request.message().op()) {
    case Op::REGISTER: return HandleRegister(std::move(request));
    case Op::HEARTBEAT: return HandleHeartbeat(std::move(request));
    case Op::BARRIER: return HandleBarrier(std::move(request));
    case Op::KV_SET: return HandleKvSet(std::move(request));
    case Op::KV_GET: return HandleKvGet(std::move(request));
    case Op::DEREGISTER: return HandleDeregister(std::move(request));
    case Op::SHUTDOWN: return HandleShutdown(std::move(request));
    case Op::SPLIT_LEASE: return HandleSplitLease(std::move(request));
    case Op::JOIN_COMMIT: return HandleJoinCommit(std::move(request));
    case Op::GET_VIEW: {
      Message reply = request.MakeReply();
      ToWire(view(), reply.builder().getBody().initView());
      return request.Reply(std::move(reply));
    }
    default:
      return request.ReplyError(Status::Unimplemented(
          "the scheduler does not serve " + std::string(OpName(request.message().op())) + " requests"));
  }
}

// ---------------------------------------------------------------------------------------------
// Heartbeats and failure detection

void Scheduler::HandleHeartbeat(Request request) {
  std::lock_guard lock(mu_);
  if (NeedsRejoinLocked(request.message().sender())) {
    Message reply = request.MakeReply();
    auto hb = reply.builder().getBody().initHeartbeatReply();
    hb.setViewEpoch(epoch_);
    hb.setReregister(true);
    return request.Reply(std::move(reply));
  }
  Member* m = FindMemberLocked(request.message().sender());
  // Dead, or absent from the view a restarted scheduler adopted: it may come back at its rank.
  if (m && m->MayComeBack()) {
    return request.ReplyError(Status::FailedPrecondition("heartbeat from " + m->info.Describe() + ", " +
                                                         std::string(kDeclaredDead) + "; re-register to come back"));
  }
  if (!m || m->state != State::kAlive) {
    return request.ReplyError(Status::FailedPrecondition(
        "heartbeat from node " + std::to_string(request.message().sender()) +
        ", which is not a live member" + (m ? " (it left the job)" : "")));
  }
  if (Status s = m->CheckSender(request.message(), "heartbeat"); !s.ok()) return request.ReplyError(std::move(s));
  m->last_seen = Clock::now();
  Message reply = request.MakeReply();
  reply.builder().getBody().initHeartbeatReply().setViewEpoch(epoch_);
  request.Reply(std::move(reply));
}

Status Scheduler::Member::CheckSender(const Message& message, std::string_view what) const {
  const uint32_t said = message.incarnation();
  if (said == kIncarnationNotSaid || said >= info.incarnation) return Status::OK();
  return Status::FailedPrecondition(std::string(what) + " from " + std::string(RoleName(info.role)) + " " +
                                    std::to_string(info.rank) + " (node " + std::to_string(info.id) + ") incarnation " +
                                    std::to_string(said) + ", but " + std::string(kSuperseded) + " (incarnation " +
                                    std::to_string(info.incarnation) + " at " + info.address + ", pid " +
                                    std::to_string(pid) + " on " + hostname +
                                    "): it was declared dead and replaced while it stalled");
}

void Scheduler::DeclareDeadLocked(Member& m, const std::string& why) {
  if (options_.cluster.elastic && m.info.role == Role::kServer && m.info.joining) return RollBackJoinLocked(m, why);
  m.state = State::kDead;
  m.info.alive = false;
  m.awaiting_rejoin = false;
  ++epoch_;
  spdlog::warn("scheduler: {} declared dead: {}", m.info.Describe(), why);
  FailBarriersWithLocked(m, why);
  if (options_.cluster.elastic && m.info.role == Role::kTrainer) split_.Leave(m.info.rank);
  NotifyEventLocked(wire::NodeEvent::Kind::DEAD, m.info);
  MaybeFinishLocked();
}

void Scheduler::Monitor() {
  const auto timeout = Millis(options_.cluster.heartbeat_timeout_ms);
  const auto tick = std::clamp(Millis(options_.cluster.heartbeat_interval_ms / 4), Millis(5),
                               Millis(250));
  std::unique_lock lock(mu_);
  while (!stopping_) {
    done_cv_.wait_for(lock, tick);
    if (stopping_) break;
    const auto now = Clock::now();
    for (Member& m : members_) {
      if (m.state != State::kAlive || now - m.last_seen <= timeout) continue;
      if (m.awaiting_rejoin) {
        DeclareDeadLocked(m, "did not re-register with the restarted scheduler within " +
                                 std::to_string(timeout.count()) + " ms (cluster.heartbeat_timeout_ms)");
      } else {
        DeclareDeadLocked(m, "no heartbeat for " +
                                 std::to_string(std::chrono::duration_cast<Millis>(now - m.last_seen).count()) +
                                 " ms (timeout " + std::to_string(timeout.count()) + " ms)");
      }
    }
    for (auto it = kv_waiters_.begin(); it != kv_waiters_.end();) {
      if (now >= it->deadline) {
        it->request.ReplyError(Status::DeadlineExceeded("kv key \"" + it->key + "\" was not set in time"));
        it = kv_waiters_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void Scheduler::NotifyAllLocked(const std::function<Message()>& make, uint32_t except) {
  for (const Member& m : members_) {
    if (m.state != State::kAlive || m.info.id == except || m.peer == kNoPeer) continue;
    Status s = rpc_.Notify(m.peer, make());
    if (!s.ok()) spdlog::debug("scheduler: notify {} failed: {}", m.info.Describe(), s.ToString());
  }
}

// ---------------------------------------------------------------------------------------------
// Barriers

std::vector<const Scheduler::Member*> Scheduler::BarrierMembersLocked(wire::BarrierScope scope) const {
  std::vector<const Member*> out;
  for (const Member& m : members_) {
    if ((m.state == State::kAlive || m.state == State::kDead) && InScope(m.info.role, scope)) {
      out.push_back(&m);
    }
  }
  return out;
}

void Scheduler::HandleBarrier(Request request) {
  auto b = request.message().reader().getBody().getBarrier();
  const std::string name = b.getName().cStr();
  const auto scope = b.getScope();
  const uint32_t sender = request.message().sender();
  std::lock_guard lock(mu_);
  if (NeedsRejoinLocked(sender)) return request.ReplyError(RejoinFirst(sender, "barrier \"" + name + "\""));
  if (!view_complete_) {
    return request.ReplyError(Status::FailedPrecondition("barrier \"" + name + "\" before the cluster is complete"));
  }
  if (name.empty()) return request.ReplyError(Status::InvalidArgument("barrier: empty name"));
  Member* m = FindMemberLocked(sender);
  if (!m || m->state != State::kAlive) {
    return request.ReplyError(Status::FailedPrecondition(
        "barrier \"" + name + "\": node " + std::to_string(sender) + " is not a live member"));
  }
  if (!InScope(m->info.role, scope)) {
    return request.ReplyError(Status::InvalidArgument(
        "barrier \"" + name + "\": " + m->info.Describe() + " is not in scope " +
        std::string(ScopeName(scope))));
  }
  for (const Member* member : BarrierMembersLocked(scope)) {
    if (member->state == State::kDead) {
      return request.ReplyError(Status::Aborted("barrier \"" + name + "\": member " +
                                                member->info.Describe() + " is dead"));
    }
  }
  auto [it, created] = barriers_.try_emplace(name);
  Barrier& barrier = it->second;
  if (created) barrier.scope = scope;
  if (barrier.scope != scope) {
    return request.ReplyError(Status::InvalidArgument(
        "barrier \"" + name + "\" is in progress with scope " + std::string(ScopeName(barrier.scope)) +
        "; " + m->info.Describe() + " entered it with scope " + std::string(ScopeName(scope))));
  }
  if (barrier.waiting.count(sender)) {
    return request.ReplyError(Status::AlreadyExists("barrier \"" + name + "\": " +
                                                     m->info.Describe() + " is already waiting"));
  }
  barrier.waiting.emplace(sender, std::move(request));
  MaybeReleaseBarrierLocked(name);
}

void Scheduler::MaybeReleaseBarrierLocked(const std::string& name) {
  auto it = barriers_.find(name);
  if (it == barriers_.end()) return;
  Barrier& barrier = it->second;
  for (const Member* m : BarrierMembersLocked(barrier.scope)) {
    if (!barrier.waiting.count(m->info.id)) return;
  }
  for (auto& [id, req] : barrier.waiting) req.Reply(req.MakeReply());
  barriers_.erase(it);
}

void Scheduler::FailBarriersWithLocked(const Member& lost, const std::string& why) {
  for (auto it = barriers_.begin(); it != barriers_.end();) {
    if (!InScope(lost.info.role, it->second.scope)) {
      ++it;
      continue;
    }
    const Status s = Status::Aborted("barrier \"" + it->first + "\": member " +
                                     lost.info.Describe() + " was declared dead: " + why);
    for (auto& [id, req] : it->second.waiting) req.ReplyError(s);
    it = barriers_.erase(it);
  }
}

// ---------------------------------------------------------------------------------------------
// Leaving and shutdown

void Scheduler::HandleDeregister(Request request) {
  std::lock_guard lock(mu_);
  const uint32_t sender = request.message().sender();
  if (NeedsRejoinLocked(sender)) return request.ReplyError(RejoinFirst(sender, "deregister"));
  Member* m = FindMemberLocked(request.message().sender());
  if (!m || m->state != State::kAlive) {
    return request.ReplyError(Status::FailedPrecondition(
        "deregister from node " + std::to_string(request.message().sender()) + ", which is not a live member"));
  }
  if (Status s = m->CheckSender(request.message(), "deregister"); !s.ok()) return request.ReplyError(std::move(s));
  m->state = State::kLeft;
  m->info.alive = false;
  m->info.left = options_.cluster.elastic;  // the view keeps it: PsClient leaves the server out of its layout
  ++epoch_;
  spdlog::info("scheduler: {} left", m->info.Describe());
  request.Reply(request.MakeReply());
  if (options_.cluster.elastic) {  // the others drop it (servers: from the SSP clocks)
    if (m->info.role == Role::kTrainer) split_.Leave(m->info.rank);
    NotifyEventLocked(wire::NodeEvent::Kind::LEFT, m->info);
  }
  std::vector<std::string> names;
  for (const auto& [name, b] : barriers_) names.push_back(name);
  for (const auto& name : names) MaybeReleaseBarrierLocked(name);
  MaybeFinishLocked();
}

void Scheduler::HandleShutdown(Request request) {
  std::lock_guard lock(mu_);
  const uint32_t sender = request.message().sender();
  // Ending the job before the nodes re-registered would leave them uninformed.
  if (NeedsRejoinLocked(sender)) return request.ReplyError(RejoinFirst(sender, "shutdown"));
  spdlog::info("scheduler: shutdown requested by node {}", request.message().sender());
  request.Reply(request.MakeReply());
  EndJobLocked();
}

void Scheduler::EndJobLocked() {
  NotifyAllLocked([] {
    Message m;
    m.set_op(Op::SHUTDOWN);
    return m;
  });
  done_ = true;
  done_cv_.notify_all();
}

void Scheduler::MaybeFinishLocked() {
  if (!view_complete_ || done_) return;
  for (const Member& m : members_) {
    if (m.state == State::kAlive) return;
  }
  spdlog::info("scheduler: no live members remain; the job is over");
  done_ = true;
  done_cv_.notify_all();
}

}  // namespace strata
