// scheduler_register.cc: Scheduler's registration: first registrations until the cluster is
// complete, a dead node rejoining at its rank, and nodes re-registering with a restarted
// scheduler, which rebuilds the running job's membership from their views.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "cluster/scheduler.h"
#include "common/net.h"

namespace strata {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

uint32_t Scheduler::NodeIdFor(Role role, int rank) const {
  return static_cast<uint32_t>(role == Role::kServer ? 1 + rank : 1 + options_.cluster.servers + rank);
}

// ---------------------------------------------------------------------------------------------
// Registration

void Scheduler::HandleRegister(Request request) {
  auto r = request.message().reader().getBody().getRegister();
  const Registration reg{static_cast<Role>(r.getRole()), r.getAddress().cStr(), r.getHostname().cStr(),
                         r.getPid(), r.getRequestedRank()};
  const Role role = reg.role;
  const std::string& address = reg.address;
  const int requested = reg.requested_rank;
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
  if (r.getJoin() && requested != -1) {
    return reject(Status::InvalidArgument("register: a node joining a running job (--join) gets the next rank of "
                                          "its role; it cannot ask for rank " + std::to_string(requested)));
  }

  std::lock_guard lock(mu_);
  if (stopping_ || done_) return reject(Status::Unavailable("the scheduler is shutting down"));
  // A re-registration's id and rank are checked against the job it rebuilds.
  if (r.getRejoin()) return HandleRejoinLocked(request, reg);
  const int expected = RanksLocked(role);
  if (requested < -1 || requested >= expected) {
    return reject(Status::InvalidArgument(
        "register: requested rank " + std::to_string(requested) + " is out of range for " +
        std::to_string(expected) + " " + std::string(RoleName(role)) + "s"));
  }
  if (r.getJoin()) return HandleJoinLocked(request, reg);
  HandleRegisterLocked(request, reg);
}

void Scheduler::HandleRegisterLocked(Request& request, const Registration& reg) {
  const Role role = reg.role;
  const std::string& address = reg.address;
  const std::string& hostname = reg.hostname;
  const uint32_t pid = reg.pid;
  const int requested = reg.requested_rank;
  const int expected = RanksLocked(role);
  auto reject = [&](const Status& s) {
    spdlog::warn("scheduler: rejected registration of {} at {}: {}", RoleName(role), address,
                 s.ToString());
    request.ReplyError(s);
  };

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
    const bool takeable = target && target->MayComeBack();
    if (!takeable) {
      return reject(Status::ResourceExhausted(
          "register: the cluster already has its " + std::to_string(expected) + " " +
          std::string(RoleName(role)) + "s and none of them is dead"));
    }
    return RejoinDeadLocked(request, *target, reg);
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
    m.info.id = NodeIdFor(m.info.role, m.info.rank);
    m.info.alive = true;
    m.state = State::kAlive;
    m.last_seen = now;
    auto peer = rpc_.Connect(m.info.address);
    m.peer = peer.ok() ? *peer : kNoPeer;
  }
  view_complete_ = true;
  epoch_ = 1;
  if (options_.cluster.elastic) {
    std::vector<int> trainers;
    for (int r = 0; r < options_.cluster.trainers; ++r) trainers.push_back(r);
    split_ = SplitSchedule(std::move(trainers));
  }
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

void Scheduler::RejoinDeadLocked(Request& request, Member& target, const Registration& reg) {
  target.info.address = reg.address;
  target.info.alive = true;
  target.info.incarnation++;
  target.state = State::kAlive;
  target.awaiting_rejoin = false;
  target.absent_when_adopted = false;
  target.hostname = reg.hostname;
  target.pid = reg.pid;
  target.last_seen = Clock::now();
  auto peer = rpc_.Connect(reg.address);
  target.peer = peer.ok() ? *peer : kNoPeer;
  ++epoch_;
  spdlog::info("scheduler: {} rejoined (incarnation {})", target.info.Describe(), target.info.incarnation);
  ReplyRegisteredLocked(request, target);
  NotifyEventLocked(wire::NodeEvent::Kind::REJOINED, target.info);
}

// ---------------------------------------------------------------------------------------------
// Re-registration after a restart

bool Scheduler::NeedsRejoinLocked(uint32_t sender) {
  if (sender == kUnassignedNode || sender == kSchedulerId) return false;
  // Restarted and no view yet: a node with an id belongs to a running job (first registrations
  // have none until the cluster completes).
  if (!view_complete_) return true;
  const Member* m = FindMemberLocked(sender);
  return m && m->awaiting_rejoin;
}

Status Scheduler::AdoptViewLocked(const ClusterView& v, const Registration& reg) {
  const int servers = v.Count(Role::kServer), trainers = v.Count(Role::kTrainer);
  // An elastic job may have grown past its first counts; it never has fewer ranks.
  const bool fits = options_.cluster.elastic
                        ? servers >= options_.cluster.servers && trainers >= options_.cluster.trainers
                        : servers == options_.cluster.servers && trainers == options_.cluster.trainers;
  if (!fits) {
    return Status::FailedPrecondition(
        "re-register: the view of " + reg.address + " (epoch " + std::to_string(v.epoch) + ") has " +
        std::to_string(servers) + " servers and " + std::to_string(trainers) +
        " trainers; this scheduler's job has cluster.servers " + std::to_string(options_.cluster.servers) +
        " and cluster.trainers " + std::to_string(options_.cluster.trainers));
  }
  const int first = options_.cluster.servers + options_.cluster.trainers;
  for (const NodeInfo& n : v.nodes) {
    const int initial = n.role == Role::kServer ? options_.cluster.servers : options_.cluster.trainers;
    const bool id_ok = n.rank < initial ? n.id == NodeIdFor(n.role, n.rank) : n.id > static_cast<uint32_t>(first);
    if ((n.role != Role::kServer && n.role != Role::kTrainer) || n.rank < 0 ||
        n.rank >= (n.role == Role::kServer ? servers : trainers) || !id_ok) {
      return Status::FailedPrecondition("re-register: the view of " + reg.address + " holds " + n.Describe() +
                                        ", whose id does not match its role and rank");
    }
  }
  const auto now = Clock::now();
  for (const NodeInfo& n : v.nodes) {
    Member m;
    m.info = n;
    m.requested_rank = n.rank;
    // A node the view shows not alive has left or died; which, the view does not say. Counting it
    // as left keeps barriers of the others from failing on it.
    m.state = n.alive ? State::kAlive : State::kLeft;
    m.awaiting_rejoin = n.alive;
    m.absent_when_adopted = !n.alive && !n.left;  // one that left (elastic) does not come back
    m.last_seen = now;
    if (n.alive) {
      auto peer = rpc_.Connect(n.address);
      m.peer = peer.ok() ? *peer : kNoPeer;
    }
    members_.push_back(std::move(m));
  }
  view_complete_ = true;
  epoch_ = v.epoch + 1;
  if (options_.cluster.elastic) {
    // The schedule is not in the view: the live trainers split the steps from here on. Steps a
    // trainer leased before the restart keep the split it holds (docs/reliability.md).
    std::vector<int> live;
    for (const NodeInfo& n : v.nodes) {
      if (n.role == Role::kTrainer && n.alive) live.push_back(n.rank);
    }
    split_ = SplitSchedule(std::move(live));
  }
  spdlog::warn("scheduler: restarted mid-job: rebuilt the membership from the view of {} (epoch {}, {} servers, "
               "{} trainers); waiting for every live node to re-register",
               reg.address, v.epoch, servers, trainers);
  return Status::OK();
}

void Scheduler::HandleRejoinLocked(Request& request, const Registration& reg) {
  auto r = request.message().reader().getBody().getRegister();
  const uint32_t id = r.getNodeId();
  const std::string who = std::string(RoleName(reg.role)) + " " + std::to_string(reg.requested_rank) +
                          " (node " + std::to_string(id) + ", " + reg.address + ")";
  auto reject = [&](const Status& s) {
    spdlog::warn("scheduler: rejected the re-registration of {}: {}", who, s.ToString());
    request.ReplyError(s);
  };
  if (reg.requested_rank < 0 || !IdMatchesLocked(reg.role, reg.requested_rank, id)) {
    return reject(Status::InvalidArgument("re-register: node id " + std::to_string(id) + " does not match " +
                                          std::string(RoleName(reg.role)) + " rank " +
                                          std::to_string(reg.requested_rank)));
  }
  if (!view_complete_) {
    // Fresh registrations that reached this restarted scheduler before any node of the running
    // job came back (a server restarted at the same moment) are set aside, the job's view is
    // adopted, and they are handled again against it: as a dead or gone rank coming back.
    std::vector<PendingRegistration> fresh = std::move(pending_registrations_);
    pending_registrations_.clear();
    std::vector<Member> gathered = std::move(members_);
    members_.clear();
    if (Status s = AdoptViewLocked(FromWire(r.getView()), reg); !s.ok()) {
      members_ = std::move(gathered);
      pending_registrations_ = std::move(fresh);
      return reject(s.WithContext("this scheduler is gathering a new cluster of " + std::to_string(members_.size()) +
                                  " nodes"));
    }
    for (PendingRegistration& p : fresh) {
      const Member& g = gathered[p.member];
      HandleRegisterLocked(p.request, Registration{g.info.role, g.info.address, g.hostname, g.pid, g.requested_rank});
    }
  }
  Member* m = FindMemberLocked(id);
  if (!m || m->info.role != reg.role) {
    return reject(Status::NotFound("re-register: the cluster has no " + who));
  }
  if (m->MayComeBack()) return RejoinDeadLocked(request, *m, reg);
  if (m->state != State::kAlive) {
    return reject(Status::FailedPrecondition("re-register: " + m->info.Describe() + " has left the job"));
  }
  if (!m->awaiting_rejoin && m->info.address != reg.address) {
    return reject(Status::AlreadyExists("re-register: " + m->info.Describe() + " is alive at another address"));
  }
  if (m->info.address != reg.address || m->peer == kNoPeer) {
    auto peer = rpc_.Connect(reg.address);
    m->peer = peer.ok() ? *peer : kNoPeer;
  }
  m->info.address = reg.address;
  m->info.incarnation = std::max(m->info.incarnation, r.getIncarnation());
  m->info.alive = true;
  m->hostname = reg.hostname;
  m->pid = reg.pid;
  m->last_seen = Clock::now();
  if (m->awaiting_rejoin) {
    m->awaiting_rejoin = false;
    int waiting = 0;
    for (const Member& other : members_) waiting += other.awaiting_rejoin ? 1 : 0;
    spdlog::info("scheduler: {} re-registered ({} live nodes still to come back)", m->info.Describe(), waiting);
    if (waiting == 0) ++epoch_;  // every node fetches the view with nobody awaited
  }
  ReplyRegisteredLocked(request, *m);
}

}  // namespace strata
