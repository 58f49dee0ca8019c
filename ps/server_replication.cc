// server_replication.cc: PsServer's primary-backup replication (ps/replication.h): the copy of
// the previous rank's shard, routing requests to it, each shard's role, forwarding state
// changes from the serving holder to the backup, and take-over when the serving holder dies
// (the state transfer to a restarted holder is in server_transfer.cc).
#include <spdlog/spdlog.h>

#include "ps/server.h"
#include "ps/server_table.h"

namespace strata {
namespace {

// Whether server `rank` in `view` is alive in incarnation `incarnation`.
bool Current(const ClusterView& view, uint32_t rank, uint32_t incarnation) {
  const NodeInfo* n = view.Find(Role::kServer, static_cast<int>(rank));
  return n && n->alive && n->incarnation == incarnation;
}

}  // namespace

PsServer::PsServer(PsServer& parent, ServerOptions options, ServerStores stores, uint32_t shard, ShardRole role)
    : node_(parent.node_), options_(std::move(options)), parent_(&parent), backup_of_(static_cast<int>(shard)), role_(role),
      stores_(std::move(stores)),
      parked_quota_(static_cast<uint64_t>(options_.max_parked_per_peer),
                    static_cast<uint64_t>(options_.max_parked_mb_per_peer) << 20) {
  // One worker: forwarded requests apply in the order the serving holder applied them.
  StartWorkers(1);
}

PsServer* PsServer::Copy() {
  if (IsCopy() || options_.replication != Replication::kBackup) return nullptr;
  const int rank = node_.rank();
  if (rank < 0) return nullptr;
  std::lock_guard lock(backup_mu_);
  if (!backup_) {
    const PsLayout layout = KeyLayout();
    if (RingSize(layout) < 2) return nullptr;
    // An original server holds the backup of the previous shard from the start; a restarted one
    // holds nothing until a state transfer arrives. So does one with durable stores, at the start
    // too: what its directory holds may be stale, and the serving holder may have restored rows
    // of an earlier run (the first chunk of the copy clears the directory). So does a server that
    // joined the running job (FollowRing asks for its copy).
    const uint32_t shard = BackedUpShard(static_cast<uint32_t>(rank), layout);
    const ClusterView view = node_.view();
    const NodeInfo* self = view.Find(Role::kServer, rank);
    const bool original = shard == BackedUpShard(static_cast<uint32_t>(rank), FixedLayout(layout.base));
    const ShardRole role = original && self && self->incarnation == 0 && !stores_.durable() && !joined_late_
                               ? ShardRole::kBackup
                               : ShardRole::kEmpty;
    ServerStores stores = stores_.backup ? stores_.backup(shard) : ServerStores{stores_.make, {}, {}};
    ServerOptions options = options_;
    options.tables_file.clear();  // a copy always starts from a state transfer: nothing to reload
    backup_.reset(new PsServer(*this, std::move(options), std::move(stores), shard, role));
  }
  return backup_.get();
}

bool PsServer::RouteToBackup(Request& request) {
  if (IsCopy()) return true;
  const int32_t shard = request.message().shard();
  const int rank = node_.rank();
  if (shard < 0 || shard == rank) return true;
  PsServer* copy = Copy();
  if (!copy || static_cast<uint32_t>(shard) != copy->Shard()) {
    ++requests_;
    ++errors_;
    std::string why = std::string(OpName(request.message().op())) + " for shard " + std::to_string(shard) +
                      " from node " + std::to_string(request.message().sender()) + " reached server " +
                      std::to_string(rank) + ", which holds shard " + std::to_string(rank) +
                      (copy ? " and shard " + std::to_string(copy->Shard())
                            : std::string(options_.replication == Replication::kNone
                                              ? " only (server.replication: none)"
                                              : " only (no other server is left)"));
    if (options_.replication == Replication::kBackup && node_.options().cluster.elastic) {
      // The ring moved with a server joining or leaving, and the sender's view is behind: it
      // sends the shard's requests to its other holder, or where its keys live now.
      request.ReplyError(Status::Unavailable(why + ": it " + std::string(kNotServing) + " " + std::to_string(shard) +
                                             " under the layout of " + std::to_string(KeyLayout().servers) +
                                             " servers"));
      return false;
    }
    request.ReplyError(Status::InvalidArgument(why));
    return false;
  }
  copy->Dispatch(std::move(request));
  return false;
}

PsServer::ShardRole PsServer::RoleNow() {
  ShardRole role = role_.load();
  if (role != ShardRole::kUnknown) return role;
  const ClusterView view = node_.view();
  const NodeInfo* self = view.Find(Role::kServer, node_.rank());
  const ShardRole resolved = self && self->incarnation == 0 ? ShardRole::kServing : ShardRole::kEmpty;
  role_.compare_exchange_strong(role, resolved);
  return role_.load();
}

uint32_t PsServer::OtherRank() const {
  return OtherHolder(Shard(), static_cast<uint32_t>(node_.rank()), KeyLayout());
}

bool PsServer::Admit(Request& request) {
  const Message& m = request.message();
  const Op op = m.op();
  if (op == Op::GET_STATS || options_.replication == Replication::kNone) return true;
  const ClusterView view = node_.view();
  const uint32_t shard = Shard();
  const NodeInfo* other = view.Find(Role::kServer, static_cast<int>(OtherRank()));
  const ShardRole role = RoleNow();
  auto refuse = [&](const Status& s) {
    ++errors_;
    request.ReplyError(s);
    return false;
  };
  const std::string self = "server " + std::to_string(node_.rank());
  const std::string not_serving =
      self + " " + std::string(kNotServing) + " " + std::to_string(shard) +
      (role == ShardRole::kBackup ? " (it holds its backup)" : " (it is waiting for a copy of it)");
  if (HasOrigin(m) || op == Op::STATE_TRANSFER || op == Op::REPLICA_JOIN) {
    // Between the shard's two holders only.
    if (!other || other->id != m.sender()) {
      return refuse(Status::InvalidArgument(std::string(OpName(op)) + " for shard " + std::to_string(shard) +
                                            " from node " + std::to_string(m.sender()) +
                                            ", which is not that shard's other holder (" +
                                            (other ? other->Describe() : "none in the view") + ")"));
    }
    if (op == Op::STATE_TRANSFER) return true;
    if (op == Op::REPLICA_JOIN) return role == ShardRole::kServing || refuse(Status::Unavailable(not_serving));
    if (role == ShardRole::kEmpty && install_forwards_) {
      ++forwards_while_installing_;  // between the chunks of its copy's tail
      return true;
    }
    if (role != ShardRole::kBackup) {
      return refuse(Status::FailedPrecondition(
          "an update of shard " + std::to_string(shard) + " forwarded by " + other->Describe() + ", but " + self +
          (role == ShardRole::kServing ? " " + std::string(kTookOver) : " holds no copy of it yet")));
    }
    return true;
  }
  if (role != ShardRole::kServing) return refuse(Status::Unavailable(not_serving));
  if (node_.Silent()) {
    // Stopped past the heartbeat timeout (SIGSTOP, a starved host): its backup may serve the
    // shard by now, and a trainer whose view is behind would read stale rows here.
    return refuse(Status::Unavailable(self + " was silent past cluster.heartbeat_timeout_ms and may have been "
                                      "declared dead: it serves shard " + std::to_string(shard) +
                                      " again once the scheduler answers its heartbeat"));
  }
  return true;
}

std::unique_lock<std::mutex> PsServer::ReplicationLock() {
  if (options_.replication != Replication::kBackup) return {};
  return std::unique_lock(forward_mu_);
}

PsServer::Replica* PsServer::ReplicaLocked() {
  if (const uint64_t failed = failed_copy_.exchange(kNoCopy); replica_ && failed == replica_->copy) replica_.reset();
  if (!replica_known_) {
    // The original backup: the next of the job's first servers, while both have run since the
    // job started and no server joined or left (FollowRing sets replica_known_ when one did).
    replica_known_ = true;
    const ClusterView view = node_.view();
    const NodeInfo* self = view.Find(Role::kServer, node_.rank());
    const PsLayout layout = KeyLayout();
    const uint32_t other = BackupRank(Shard(), FixedLayout(layout.base));
    const NodeInfo* b = view.Find(Role::kServer, static_cast<int>(other));
    // Not with durable stores: that backup starts empty and asks for a copy (Copy()).
    if (!IsCopy() && !joined_late_ && !stores_.durable() && self && self->incarnation == 0 && b && b->alive &&
        b->incarnation == 0 && b != self && other == OtherRank()) {
      replica_ = Replica{other, 0, b->address, kNoPeer};
    }
  }
  if (replica_ && replica_->rank != OtherRank()) {
    // A server joined or left: the ring gives the shard another backup, which asks for a copy.
    spdlog::info("replication: shard {}: server {} is no longer its backup under the layout of {} servers",
                 Shard(), replica_->rank, KeyLayout().servers);
    replica_.reset();  // forwards in flight to it complete (its answer no longer matters)
  }
  if (!replica_) return nullptr;
  if (replica_->peer == kNoPeer) {
    auto peer = node_.rpc().Connect(replica_->address);
    if (!peer.ok()) {
      spdlog::error("replication: shard {}: cannot reach its backup at {}: {}; it runs without one", Shard(),
                    replica_->address, peer.status().ToString());
      replica_.reset();
      return nullptr;
    }
    replica_->peer = *peer;
  }
  return &*replica_;
}

void PsServer::Finish(Request& request, Result<Message> reply, std::unique_lock<std::mutex>& lock) {
  if (HasOrigin(request.message())) ++forwards_applied_;  // HandBack's count
  if (!reply.ok()) {
    ++errors_;
    if (HasOrigin(request.message())) {
      if (lock.owns_lock()) lock.unlock();  // nothing is forwarded; DropDivergedCopy takes backup_mu_
      DropDivergedCopy(reply.status());
    }
    request.ReplyError(reply.status());
    return;
  }
  Replica* replica = lock.owns_lock() && RoleNow() == ShardRole::kServing ? ReplicaLocked() : nullptr;
  if (!replica) return request.Reply(std::move(reply).value());
  Message forward = ForwardedCopy(request.message(), Shard());
  const uint64_t bytes = PayloadBytes(forward);
  struct Pending {
    Request request;
    Message reply;
  };
  auto pending = std::make_shared<Pending>(Pending{std::move(request), std::move(reply).value()});
  const uint32_t shard = Shard(), rank = replica->rank, incarnation = replica->incarnation;
  const uint64_t copy = replica->copy;
  ++replica->forwarded;
  // Sent under the lock the update was applied under: forwards leave in apply order (one link,
  // which ZeroMQ keeps in order), and the backup's single worker for the link applies them so.
  // The callback may run before CallAsync returns: it must not take forward_mu_.
  node_.rpc().CallAsync(replica->peer, std::move(forward), [this, pending, bytes, shard, rank, incarnation, copy](Result<Message> ack) {
    if (ack.ok()) {
      ++forwards_;
      replicated_bytes_ += bytes;
      return pending->request.Reply(std::move(pending->reply));
    }
    // The backup died or was replaced meanwhile, or a server joining or leaving made another
    // rank the backup: the shard goes on without it, and the update, applied here, is
    // acknowledged.
    if (!Current(node_.view(), rank, incarnation) || rank != OtherRank()) {
      return pending->request.Reply(std::move(pending->reply));
    }
    ++forward_errors_;
    const Status& s = ack.status();
    if (s.code() == StatusCode::kDeadlineExceeded || s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kCancelled) {
      // The sender retries; the retry is a duplicate here, forwarded again behind this one.
      ++errors_;
      return pending->request.ReplyError(Status::Unavailable("the backup of shard " + std::to_string(shard) + ", server " +
                                                             std::to_string(rank) + ", did not acknowledge the update: " +
                                                             s.message()));
    }
    if (s.code() == StatusCode::kFailedPrecondition && s.message().find(kTookOver) != std::string::npos) {
      // This server was declared dead while it ran, and its backup took the shard over: it must
      // not go on serving it alone. The update applied here was never acknowledged; the sender
      // sends it to the server serving the shard now.
      if (role_.exchange(ShardRole::kEmpty) == ShardRole::kServing) {
        failed_copy_ = copy;
        spdlog::error("replication: shard {}: server {} {} (this server was declared dead): this server stops "
                      "serving it and holds no copy of it until it is registered again", shard, rank, kTookOver);
      }
      ++errors_;
      return pending->request.ReplyError(Status::Unavailable("server " + std::to_string(node_.rank()) + " " +
                                                             std::string(kNotServing) + " " + std::to_string(shard) +
                                                             " any more: server " + std::to_string(rank) + " " +
                                                             std::string(kTookOver)));
    }
    // It refused an update this server applied: its copy is no longer the same; drop it.
    if (failed_copy_.exchange(copy) != copy) {
      spdlog::error("replication: shard {}: its backup, server {}, refused an update: {}; the shard runs without a "
                    "backup from now on", shard, rank, s.ToString());
    }
    pending->request.Reply(std::move(pending->reply));
  });
  lock.unlock();
}

void PsServer::StepDown() {
  if (IsCopy()) return;
  if (options_.replication != Replication::kBackup) {
    spdlog::warn("server {}: declared dead while it ran; without replication no server took its keys meanwhile "
                 "(the trainers waited for it): it keeps every table and serves them again once registered",
                 node_.rank());
    return;
  }
  DropShard();
  if (PsServer* copy = Copy()) copy->DropShard();
}

void PsServer::DropShard() {
  ShardRole was;
  {
    std::lock_guard lock(forward_mu_);
    was = RoleNow();
    role_ = ShardRole::kEmpty;
    // Forwards in flight fail now: Finish's callback answers their senders Unavailable (they were
    // applied here, never acknowledged), and they retry at the shard's other holder.
    if (replica_ && replica_->peer != kNoPeer) {
      node_.rpc().FailCallsTo(replica_->peer, Status::Unavailable("server " + std::to_string(node_.rank()) +
                                                                  " was declared dead: it forwards nothing more"));
    }
    replica_.reset();
    replica_known_ = true;
  }
  // Pulls parked here were sent again to the other holder when the trainers saw this server dead.
  FailParked("server " + std::to_string(node_.rank()) + " " + std::string(kNotServing) + " " +
             std::to_string(Shard()) + " any more (it was declared dead)");
  if (was == ShardRole::kEmpty) return;
  spdlog::warn("replication: shard {}: this server was declared dead while it ran, and the shard's other holder "
               "serves it now: this server stops {} it and asks for a copy once registered again",
               Shard(), was == ShardRole::kServing ? "serving" : "backing up");
}

void PsServer::DropDivergedCopy(const Status& why) {
  const ShardRole was = role_.load();
  if (was != ShardRole::kBackup && !install_forwards_) return;
  install_forwards_ = false;
  installing_ = false;  // the chunks of this copy still on their way are refused
  role_ = ShardRole::kEmpty;
  copy_failed_ = true;  // an ask for this copy in progress asks again
  ++diverged_copies_;
  spdlog::error("replication: shard {}: a forwarded update failed here: {}; this server's copy of the shard is no "
                "longer its state, so it is no backup now and asks server {} for a fresh copy",
                Shard(), why.ToString(), OtherRank());
  if (IsCopy()) {
    parent_->StartCopyRequests(this, /*own=*/false, /*other=*/true);
  } else {
    StartCopyRequests(nullptr, /*own=*/true, /*other=*/false);
  }
}

void PsServer::CameBack() {
  if (options_.replication != Replication::kBackup || IsCopy()) return;
  PsServer* copy = Copy();
  spdlog::info("replication: server {} is registered again: asking the servers serving shards {} and {} for a copy",
               node_.rank(), Shard(), copy ? std::to_string(copy->Shard()) : "-");
  StartCopyRequests(copy, /*own=*/true, /*other=*/copy != nullptr);
}

void PsServer::FailParked(const std::string& why) {
  std::vector<Parked> gone;
  {
    std::lock_guard lock(clock_mu_);
    for (Parked& p : parked_) parked_quota_.Release(p.peer, p.bytes);
    gone.swap(parked_);
  }
  for (Parked& p : gone) p.request.ReplyError(Status::Unavailable(why));
}

void PsServer::OnServerEvent(const NodeEvent& e) {
  if (options_.replication != Replication::kBackup || e.kind == NodeEvent::Kind::kShutdown) return;
  if (PsServer* copy = Copy()) {
    copy->OnNodeEvent(e);  // trainers lost leave the copy's clocks too
    copy->OnHolderEvent(e);
  }
  OnHolderEvent(e);
}

void PsServer::OnHolderEvent(const NodeEvent& e) {
  if (e.kind != NodeEvent::Kind::kDead || e.node.role != Role::kServer) return;
  if (static_cast<uint32_t>(e.node.rank) != OtherRank()) return;
  const uint32_t shard = Shard();
  const NodeInfo* self = e.view.Find(Role::kServer, node_.rank());
  const std::string me = self ? self->Describe() : "server " + std::to_string(node_.rank());
  switch (RoleNow()) {
    case ShardRole::kBackup: {
      {
        std::lock_guard lock(forward_mu_);
        replica_.reset();
        replica_known_ = true;
      }
      role_ = ShardRole::kServing;
      spdlog::warn("replication: take-over of shard {} from {}, dead: {} serves it from its copy from now on, "
                   "without a backup until the dead server comes back", shard, e.node.Describe(), me);
      return;
    }
    case ShardRole::kServing: {
      std::lock_guard lock(forward_mu_);
      replica_known_ = true;
      if (!replica_ || replica_->rank != static_cast<uint32_t>(e.node.rank)) return;
      // Forwards in flight to it complete now; Finish's callback acknowledges them.
      if (replica_->peer != kNoPeer) node_.rpc().FailCallsTo(replica_->peer, Status::Unavailable("the backup is dead"));
      replica_.reset();
      spdlog::warn("replication: shard {} lost its backup, {}: {} serves it without one until that server comes back",
                   shard, e.node.Describe(), me);
      return;
    }
    default:
      spdlog::error("replication: shard {}: {} died before its copy reached {}: no server holds the shard now", shard,
                    e.node.Describe(), me);
  }
}

void PsServer::FollowRing(bool gained) {
  if (options_.replication != Replication::kBackup || IsCopy()) return;
  const uint32_t me = static_cast<uint32_t>(node_.rank());
  const PsLayout layout = KeyLayout();
  if (PsServer* copy = Copy()) {
    const uint32_t shard = RingSize(layout) < 2 ? me : BackedUpShard(me, layout);
    if (shard != copy->Shard()) {
      const uint32_t was = copy->Shard();
      const ShardRole role = copy->role_.exchange(ShardRole::kEmpty);
      if (role == ShardRole::kServing) {
        // RingSettled refuses a join or leave while a copy serves; a holder declared dead during
        // one is the one way here.
        spdlog::error("replication: this server served shard {} (it took it over), and the ring of the new layout "
                      "gives it the backup of shard {}: shard {} has no holder now",
                      was, shard, was);
      }
      copy->DropShard();  // forwards nothing more, parked requests answered
      copy->backup_of_ = static_cast<int>(shard);
      ++copy->ring_moves_;
      if (shard == me) {
        spdlog::info("replication: no other server is left in the layout: this server backs up nothing");
      } else {
        spdlog::info("replication: the ring of the layout of {} servers gives this server the backup of shard {} "
                     "(it held shard {}'s): asking server {} for a copy",
                     layout.servers, shard, was, shard);
      }
    }
    if (shard != me && copy->role_ == ShardRole::kEmpty) StartCopyRequests(copy, /*own=*/false, /*other=*/true);
  }
  std::lock_guard lock(forward_mu_);
  Replica* replica = ReplicaLocked();  // drops a replica the ring no longer names
  replica_known_ = true;  // the original backup is the ring's no more
  if (!gained || !replica || RoleNow() != ShardRole::kServing) return;
  // Rows of a leaving server came in, which the backup never saw: a fresh copy replaces its own.
  const ClusterView view = node_.view();
  const NodeInfo* backup = view.Find(Role::kServer, static_cast<int>(replica->rank));
  if (!backup || !backup->alive) return;
  if (Status s = SendCopyLocked(*backup); !s.ok()) {
    // Its copy lacks the rows that came in: it is no backup of the shard any more.
    replica_.reset();
    spdlog::error("replication: shard {}: a fresh copy for its backup, {}: {}; the shard runs without a backup",
                  Shard(), backup->Describe(), s.ToString());
  }
}

Status PsServer::RingSettled() {
  if (options_.replication != Replication::kBackup) return Status::OK();
  const std::string self = "server " + std::to_string(node_.rank());
  if (RoleNow() != ShardRole::kServing) {
    return Status::FailedPrecondition(
        self + " does not serve its own shard yet (it was declared dead, and its backup serves the shard until "
               "it takes it back): servers join or leave a replicated job only while every shard is served by its "
               "own server");
  }
  std::lock_guard lock(backup_mu_);
  if (backup_ && backup_->role_ == ShardRole::kServing) {
    return Status::FailedPrecondition(self + " serves shard " + std::to_string(backup_->Shard()) +
                                      ", which it took over when that server was declared dead, until that server "
                                      "takes it back: servers join or leave a replicated job only while every shard "
                                      "is served by its own server");
  }
  return Status::OK();
}

}  // namespace strata
