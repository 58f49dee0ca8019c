// scheduler_elastic.cc: Scheduler's elastic membership (cluster.elastic): nodes joining a
// running job at the next rank of their role, membership events, and the trainers' data split
// leases (cluster/split_schedule.h).
#include <spdlog/spdlog.h>

#include <algorithm>

#include "cluster/scheduler.h"

namespace strata {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

int Scheduler::RanksLocked(Role role) const {
  int ranks = role == Role::kServer ? options_.cluster.servers : options_.cluster.trainers;
  if (!view_complete_) return ranks;
  for (const Member& m : members_) {
    if (m.info.role == role) ranks = std::max(ranks, m.info.rank + 1);
  }
  return ranks;
}

bool Scheduler::IdMatchesLocked(Role role, int rank, uint32_t id) const {
  const int initial = role == Role::kServer ? options_.cluster.servers : options_.cluster.trainers;
  if (rank < initial) return id == NodeIdFor(role, rank);
  for (const Member& m : members_) {
    if (m.state != State::kPending && m.info.role == role && m.info.rank == rank) return m.info.id == id;
  }
  // Not known yet (a restarted scheduler before the view is adopted): ids past the first ones.
  return id > static_cast<uint32_t>(options_.cluster.servers + options_.cluster.trainers);
}

void Scheduler::NotifyEventLocked(wire::NodeEvent::Kind kind, const NodeInfo& about) {
  const ClusterView v = ViewLocked();
  NotifyAllLocked(
      [&] {
        Message m;
        auto e = m.builder().getBody().initNodeEvent();
        e.setKind(kind);
        ToWire(about, e.initNode());
        ToWire(v, e.initView());
        return m;
      },
      about.id);
}

void Scheduler::HandleJoinLocked(Request& request, const Registration& reg) {
  auto reject = [&](const Status& s) {
    spdlog::warn("scheduler: rejected the join of {} at {}: {}", RoleName(reg.role), reg.address, s.ToString());
    request.ReplyError(s);
  };
  if (!options_.cluster.elastic) {
    return reject(Status::FailedPrecondition(
        "register: " + std::string(RoleName(reg.role)) + " at " + reg.address +
        " asked to join a running job (--join), but the job is not elastic: set cluster.elastic true "
        "(for the scheduler and every node)"));
  }
  if (!view_complete_) {
    return reject(Status::FailedPrecondition("register: --join joins a running job, and this one has not started (" +
                                             std::to_string(members_.size()) +
                                             " nodes registered so far): start the node without --join"));
  }
  for (const Member& m : members_) {
    if (m.info.address != reg.address || m.state != State::kAlive) continue;
    if (m.hostname == reg.hostname && m.pid == reg.pid) {
      ReplyRegisteredLocked(request, m);  // the same process again: its reply was lost
      return;
    }
    return reject(Status::AlreadyExists("register: address " + reg.address + " is already registered by " +
                                        m.hostname + " pid " + std::to_string(m.pid)));
  }
  uint32_t next_id = static_cast<uint32_t>(options_.cluster.servers + options_.cluster.trainers);
  for (const Member& m : members_) next_id = std::max(next_id, m.info.id);
  Member m;
  m.info.id = next_id + 1;
  m.info.role = reg.role;
  m.info.rank = RanksLocked(reg.role);
  m.info.address = reg.address;
  m.info.alive = true;
  m.info.joining = reg.role == Role::kServer;  // until it commits (HandleJoinCommit)
  m.state = State::kAlive;
  m.hostname = reg.hostname;
  m.pid = reg.pid;
  m.requested_rank = m.info.rank;
  m.last_seen = Clock::now();
  auto peer = rpc_.Connect(reg.address);
  m.peer = peer.ok() ? *peer : kNoPeer;
  members_.push_back(std::move(m));
  ++epoch_;
  const Member& joined = members_.back();
  spdlog::info("scheduler: {} joined the running job (epoch {})", joined.info.Describe(), epoch_);
  ReplyRegisteredLocked(request, joined);
  NotifyEventLocked(wire::NodeEvent::Kind::JOINED, joined.info);
}

void Scheduler::HandleJoinCommit(Request request) {
  const uint32_t sender = request.message().sender();
  std::lock_guard lock(mu_);
  if (NeedsRejoinLocked(sender)) {
    return request.ReplyError(Status::Unavailable("joinCommit from node " + std::to_string(sender) +
                                                  ": the scheduler restarted and does not know this node yet; " +
                                                  std::string(kRejoinFirst)));
  }
  Member* m = FindMemberLocked(sender);
  if (!m || m->info.role != Role::kServer) {
    return request.ReplyError(Status::FailedPrecondition("joinCommit from node " + std::to_string(sender) +
                                                         ", which is not a server of this job"));
  }
  if (m->state != State::kAlive) {
    return request.ReplyError(Status::FailedPrecondition(
        "joinCommit: " + m->info.Describe() + " was taken out of the job before it finished joining (" +
        (m->info.left && m->info.joining ? "its join was rolled back: the older servers kept its keys"
                                         : "it is not a live member") +
        "); start it again with --join"));
  }
  if (!m->info.joining) return request.Reply(request.MakeReply());  // a repeat after a lost reply
  m->info.joining = false;
  ++epoch_;
  spdlog::info("scheduler: {} holds its keys and serves them (epoch {})", m->info.Describe(), epoch_);
  request.Reply(request.MakeReply());
}

void Scheduler::RollBackJoinLocked(Member& m, const std::string& why) {
  m.state = State::kLeft;
  m.info.alive = false;
  m.info.left = true;  // info.joining stays: the view says the join was rolled back, not completed
  m.awaiting_rejoin = false;
  ++epoch_;
  spdlog::warn("scheduler: {} died before it finished joining ({}): its join is rolled back, its keys stay on the "
               "servers that held them (epoch {})",
               m.info.Describe(), why, epoch_);
  NotifyEventLocked(wire::NodeEvent::Kind::LEFT, m.info);
  std::vector<std::string> names;
  for (const auto& [name, b] : barriers_) names.push_back(name);
  for (const auto& name : names) MaybeReleaseBarrierLocked(name);
  MaybeFinishLocked();
}

void Scheduler::HandleSplitLease(Request request) {
  const uint32_t sender = request.message().sender();
  auto lease = request.message().reader().getBody().getSplitLease();
  std::lock_guard lock(mu_);
  if (NeedsRejoinLocked(sender)) {
    return request.ReplyError(Status::Unavailable("splitLease from node " + std::to_string(sender) +
                                                  ": the scheduler restarted and does not know this node yet; " +
                                                  std::string(kRejoinFirst)));
  }
  if (!options_.cluster.elastic) {
    return request.ReplyError(Status::FailedPrecondition(
        "splitLease: the job is not elastic (cluster.elastic false): the data split is fixed by rank"));
  }
  const Member* m = FindMemberLocked(sender);
  if (!m || m->state != State::kAlive || m->info.role != Role::kTrainer) {
    return request.ReplyError(Status::FailedPrecondition("splitLease from node " + std::to_string(sender) +
                                                         ", which is not a live trainer"));
  }
  const int64_t until = lease.getUntil();
  if (until < 0) return request.ReplyError(Status::InvalidArgument("splitLease: until " + std::to_string(until) + " < 0"));
  switch (lease.getChange()) {
    case wire::SplitChange::NONE: break;
    case wire::SplitChange::JOIN:
      spdlog::info("scheduler: {} splits the data from step {}", m->info.Describe(), split_.Join(m->info.rank));
      break;
    case wire::SplitChange::LEAVE:
      spdlog::info("scheduler: {} leaves the data split from step {}", m->info.Describe(), split_.Leave(m->info.rank));
      break;
  }
  split_.Lease(until);
  Message reply = request.MakeReply();
  split_.ToWire(reply.builder().getBody().initSplitSchedule());
  request.Reply(std::move(reply));
}

}  // namespace strata
