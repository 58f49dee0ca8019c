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
// Registration

void Scheduler::HandleRegister(Request request) {
  auto r = request.message().reader().getBody().getRegister();
  const auto role = static_cast<Role>(r.getRole());
  const std::string address = r.getAddress().cStr();
  const std::string hostname = r.getHostname().cStr();
  const uint32_t pid = r.getPid();
  const int requested = r.getRequestedRank();
  auto reject = [&](const Status& s) {
    spdlog::warn("scheduler: rejected registration of {} at {}: {}", RoleName(role), address,
                 s.ToString());
    request.ReplyError(s);
  };

  if (role != Role::kServer && role != Role::kTrainer) {
    return reject(Status::InvalidArgument("register: role " + std::string(RoleName(role)) +
                                          " cannot join; only server and trainer nodes register"));
  }
  if (Status s = ValidateEndpoint(address); !s.ok()) return reject(s.WithContext("register"));
  if (IsWildcardEndpoint(address)) {
    return reject(Status::InvalidArgument(
        "register: address " + address + " names every interface, which peers cannot dial; "
        "advertise a host they can reach (--advertise or STRATA_ADVERTISE_HOST)"));
  }
  const int expected = role == Role::kServer ? options_.cluster.servers : options_.cluster.trainers;
  if (requested < -1 || requested >= expected) {
    return reject(Status::InvalidArgument(
        "register: requested rank " + std::to_string(requested) + " is out of range for " +
        std::to_string(expected) + " " + std::string(RoleName(role)) + "s"));
  }

  std::lock_guard lock(mu_);
  if (stopping_ || done_) return reject(Status::Unavailable("the scheduler is shutting down"));

  for (size_t i = 0; i < members_.size(); ++i) {
    Member& m = members_[i];
    if (m.info.address != address || (m.state != State::kPending && m.state != State::kAlive)) {
      continue;
    }
    if (m.state == State::kPending && m.hostname == hostname && m.pid == pid) {
      // The same process retrying (its first attempt timed out): answer the newest attempt.
      for (auto& p : pending_registrations_) {
        if (p.member == i) p.request = std::move(request);
      }
      return;
    }
    return reject(Status::AlreadyExists("register: address " + address + " is already registered by " +
                                        m.hostname + " pid " + std::to_string(m.pid)));
  }

  if (view_complete_) {
    // A node coming back: take the rank it asks for, or the lowest rank of its role that died.
    Member* target = nullptr;
    for (Member& m : members_) {
      if (m.info.role != role) continue;
      if (requested >= 0 ? m.info.rank == requested
                         : (m.state == State::kDead && (!target || m.info.rank < target->info.rank))) {
        target = &m;
      }
    }
    if (target && target->state == State::kAlive) {
      return reject(Status::AlreadyExists("register: " + target->info.Describe() +
                                          " is alive; its rank cannot be taken"));
    }
    if (!target || target->state != State::kDead) {
      return reject(Status::ResourceExhausted(
          "register: the cluster already has its " + std::to_string(expected) + " " +
          std::string(RoleName(role)) + "s and none of them is dead"));
    }
    target->info.address = address;
    target->info.alive = true;
    target->info.incarnation++;
    target->state = State::kAlive;
    target->hostname = hostname;
    target->pid = pid;
    target->last_seen = Clock::now();
    auto peer = rpc_.Connect(address);
    target->peer = peer.ok() ? *peer : kNoPeer;
    ++epoch_;
    spdlog::info("scheduler: {} rejoined (incarnation {})", target->info.Describe(),
                 target->info.incarnation);
    ReplyRegisteredLocked(request, *target);
    const NodeInfo about = target->info;
    const ClusterView v = ViewLocked();
    NotifyAllLocked(
        [&] {
          Message m;
          auto e = m.builder().getBody().initNodeEvent();
          e.setKind(wire::NodeEvent::Kind::REJOINED);
          ToWire(about, e.initNode());
          ToWire(v, e.initView());
          return m;
        },
        about.id);
    return;
  }

  int same_role = 0;
  for (const Member& m : members_) {
    if (m.info.role != role) continue;
    ++same_role;
    if (requested >= 0 && m.requested_rank == requested) {
      return reject(Status::AlreadyExists("register: " + std::string(RoleName(role)) + " rank " +
                                          std::to_string(requested) + " was already requested by " +
                                          m.info.address));
    }
  }
  if (same_role >= expected) {
    return reject(Status::ResourceExhausted(
        "register: the cluster expects " + std::to_string(expected) + " " +
        std::string(RoleName(role)) + "s and all have registered"));
  }

  Member m;
  m.info.role = role;
  m.info.address = address;
  m.hostname = hostname;
  m.pid = pid;
  m.requested_rank = requested;
  members_.push_back(std::move(m));
  pending_registrations_.push_back({std::move(request), members_.size() - 1});
  spdlog::info("scheduler: {} at {} registered ({}/{} nodes)", RoleName(role), address,
               members_.size(), options_.cluster.servers + options_.cluster.trainers);
  if (static_cast<int>(members_.size()) == options_.cluster.servers + options_.cluster.trainers) {
    CompleteRegistrationLocked();
  }
}

void Scheduler::CompleteRegistrationLocked() {
  for (Role role : {Role::kServer, Role::kTrainer}) {
    const int count = role == Role::kServer ? options_.cluster.servers : options_.cluster.trainers;
    std::vector<bool> taken(count, false);
    std::vector<Member*> unranked;
    for (Member& m : members_) {
      if (m.info.role != role) continue;
      if (m.requested_rank >= 0) {
        m.info.rank = m.requested_rank;
        taken[m.requested_rank] = true;
      } else {
        unranked.push_back(&m);
      }
    }
    // Deterministic: the same addresses get the same ranks whatever order they joined in.
    std::sort(unranked.begin(), unranked.end(),
              [](const Member* a, const Member* b) { return a->info.address < b->info.address; });
    int next = 0;
    for (Member* m : unranked) {
      while (taken[next]) ++next;
      m->info.rank = next++;
    }
  }
  const auto now = Clock::now();
  for (Member& m : members_) {
    m.info.id = m.info.role == Role::kServer ? 1 + m.info.rank
                                             : 1 + options_.cluster.servers + m.info.rank;
    m.info.alive = true;
    m.state = State::kAlive;
    m.last_seen = now;
    auto peer = rpc_.Connect(m.info.address);
    m.peer = peer.ok() ? *peer : kNoPeer;
  }
  view_complete_ = true;
  epoch_ = 1;
  for (auto& p : pending_registrations_) ReplyRegisteredLocked(p.request, members_[p.member]);
  pending_registrations_.clear();
  spdlog::info("scheduler: cluster complete: {} servers, {} trainers (epoch {})",
               options_.cluster.servers, options_.cluster.trainers, epoch_);
}

void Scheduler::ReplyRegisteredLocked(Request& request, const Member& m) {
  Message reply = request.MakeReply();
  auto r = reply.builder().getBody().initRegisterReply();
  r.setNodeId(m.info.id);
  r.setRank(m.info.rank);
  r.setHeartbeatIntervalMs(options_.cluster.heartbeat_interval_ms);
  r.setHeartbeatTimeoutMs(options_.cluster.heartbeat_timeout_ms);
  ToWire(ViewLocked(), r.initView());
  request.Reply(std::move(reply));
}

// ---------------------------------------------------------------------------------------------
// Heartbeats and failure detection

void Scheduler::HandleHeartbeat(Request request) {
  std::lock_guard lock(mu_);
  Member* m = FindMemberLocked(request.message().sender());
  if (!m || m->state != State::kAlive) {
    return request.ReplyError(Status::FailedPrecondition(
        "heartbeat from node " + std::to_string(request.message().sender()) +
        ", which is not a live member" + (m ? " (declared dead or left); re-register" : "")));
  }
  m->last_seen = Clock::now();
  Message reply = request.MakeReply();
  reply.builder().getBody().initHeartbeatReply().setViewEpoch(epoch_);
  request.Reply(std::move(reply));
}

void Scheduler::DeclareDeadLocked(Member& m, const std::string& why) {
  m.state = State::kDead;
  m.info.alive = false;
  ++epoch_;
  spdlog::warn("scheduler: {} declared dead: {}", m.info.Describe(), why);
  FailBarriersWithLocked(m, why);
  const NodeInfo about = m.info;
  const ClusterView v = ViewLocked();
  NotifyAllLocked([&] {
    Message msg;
    auto e = msg.builder().getBody().initNodeEvent();
    e.setKind(wire::NodeEvent::Kind::DEAD);
    ToWire(about, e.initNode());
    ToWire(v, e.initView());
    return msg;
  });
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
      if (m.state == State::kAlive && now - m.last_seen > timeout) {
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
// Key-value store

void Scheduler::HandleKvSet(Request request) {
  auto kv = request.message().reader().getBody().getKvSet();
  const std::string key = kv.getKey().cStr();
  auto value = kv.getValue();
  if (key.empty() || key.size() > options_.max_kv_key_bytes) {
    return request.ReplyError(Status::InvalidArgument(
        "kvSet: key must be 1 to " + std::to_string(options_.max_kv_key_bytes) + " bytes"));
  }
  if (value.size() > options_.max_kv_value_bytes) {
    return request.ReplyError(Status::InvalidArgument(
        "kvSet \"" + key + "\": value of " + std::to_string(value.size()) + " bytes exceeds " +
        std::to_string(options_.max_kv_value_bytes)));
  }
  std::lock_guard lock(mu_);
  if (!kv_.count(key) && kv_.size() >= options_.max_kv_entries) {
    return request.ReplyError(Status::ResourceExhausted("kvSet: the store holds " +
                                                        std::to_string(kv_.size()) + " keys, the limit"));
  }
  std::string& slot = kv_[key];
  slot.assign(reinterpret_cast<const char*>(value.begin()), value.size());
  request.Reply(request.MakeReply());
  for (auto it = kv_waiters_.begin(); it != kv_waiters_.end();) {
    if (it->key != key) {
      ++it;
      continue;
    }
    Message reply = it->request.MakeReply();
    reply.builder().getBody().setKvValue(
        capnp::Data::Reader(reinterpret_cast<const kj::byte*>(slot.data()), slot.size()));
    it->request.Reply(std::move(reply));
    it = kv_waiters_.erase(it);
  }
}

void Scheduler::HandleKvGet(Request request) {
  auto kv = request.message().reader().getBody().getKvGet();
  const std::string key = kv.getKey().cStr();
  const Millis wait(kv.getWaitMs());
  if (key.empty() || key.size() > options_.max_kv_key_bytes) {
    return request.ReplyError(Status::InvalidArgument(
        "kvGet: key must be 1 to " + std::to_string(options_.max_kv_key_bytes) + " bytes"));
  }
  if (wait > options_.max_kv_wait) {
    return request.ReplyError(Status::InvalidArgument(
        "kvGet \"" + key + "\": wait of " + std::to_string(wait.count()) + " ms exceeds the limit of " +
        std::to_string(options_.max_kv_wait.count()) + " ms"));
  }
  std::lock_guard lock(mu_);
  if (auto it = kv_.find(key); it != kv_.end()) {
    Message reply = request.MakeReply();
    reply.builder().getBody().setKvValue(
        capnp::Data::Reader(reinterpret_cast<const kj::byte*>(it->second.data()), it->second.size()));
    return request.Reply(std::move(reply));
  }
  if (wait.count() == 0) return request.ReplyError(Status::NotFound("kv key \"" + key + "\" is not set"));
  kv_waiters_.push_back({std::move(request), key, Clock::now() + wait});
}

// ---------------------------------------------------------------------------------------------
// Leaving and shutdown

void Scheduler::HandleDeregister(Request request) {
  std::lock_guard lock(mu_);
  Member* m = FindMemberLocked(request.message().sender());
  if (!m || m->state != State::kAlive) {
    return request.ReplyError(Status::FailedPrecondition(
        "deregister from node " + std::to_string(request.message().sender()) + ", which is not a live member"));
  }
  m->state = State::kLeft;
  m->info.alive = false;
  ++epoch_;
  spdlog::info("scheduler: {} left", m->info.Describe());
  request.Reply(request.MakeReply());
  std::vector<std::string> names;
  for (const auto& [name, b] : barriers_) names.push_back(name);
  for (const auto& name : names) MaybeReleaseBarrierLocked(name);
  MaybeFinishLocked();
}

void Scheduler::HandleShutdown(Request request) {
  std::lock_guard lock(mu_);
  spdlog::info("scheduler: shutdown requested by node {}", request.message().sender());
  request.Reply(request.MakeReply());
  EndJobLocked();
}

void Scheduler::EndJobLocked() {
  NotifyAllLocked([] {
    Message m;
    m.builder().getBody().setShutdown();
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
