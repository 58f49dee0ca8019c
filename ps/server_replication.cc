// server_replication.cc: PsServer's primary-backup replication (ps/replication.h): the backup
// copy of the previous rank's shard, routing requests to it, forwarding state changes from the
// primary, and take-over when the primary dies.
#include <spdlog/spdlog.h>

#include "ps/server.h"
#include "ps/server_table.h"

namespace strata {

PsServer::PsServer(Node& node, ServerOptions options, StoreFactory store_factory, uint32_t shard)
    : node_(node), options_(std::move(options)), backup_of_(static_cast<int>(shard)),
      store_factory_(std::move(store_factory)) {
  // One worker: forwarded requests apply in the order the primary applied them, and a
  // trainer's retry after a take-over never races the forwarded original's duplicate check.
  StartWorkers(1);
}

bool PsServer::RouteToBackup(Request& request) {
  if (backup_of_ >= 0) return true;  // this is the backup copy
  const int32_t shard = request.message().reader().getShard();
  const int rank = node_.rank();
  if (shard < 0 || shard == rank) return true;
  const auto servers = static_cast<uint32_t>(node_.view().Count(Role::kServer));
  const bool replicated = options_.replication == Replication::kBackup && servers >= 2;
  if (!replicated || static_cast<uint32_t>(shard) != BackedUpShard(static_cast<uint32_t>(rank), servers)) {
    ++requests_;
    ++errors_;
    request.ReplyError(Status::InvalidArgument(
        std::string(OpName(request.message().op())) + " for shard " + std::to_string(shard) + " from node " +
        std::to_string(request.message().sender()) + " reached server " + std::to_string(rank) +
        ", which holds shard " + std::to_string(rank) +
        (replicated ? " and the backup of shard " + std::to_string(BackedUpShard(static_cast<uint32_t>(rank), servers))
                    : std::string(" only (server.replication: none)"))));
    return false;
  }
  PsServer* backup = nullptr;
  {
    std::lock_guard lock(backup_mu_);
    if (!backup_) backup_.reset(new PsServer(node_, options_, store_factory_, static_cast<uint32_t>(shard)));
    backup = backup_.get();
  }
  backup->Dispatch(std::move(request));
  return false;
}

bool PsServer::Admit(Request& request) {
  const Message& m = request.message();
  const Op op = m.op();
  if (op == Op::GET_STATS || options_.replication == Replication::kNone) return true;
  const uint32_t origin = m.reader().getOrigin();
  const ClusterView view = node_.view();
  const auto rank = static_cast<uint32_t>(node_.rank());
  auto refuse = [&](const Status& s) {
    ++errors_;
    request.ReplyError(s);
    return false;
  };
  if (backup_of_ < 0) {
    if (origin != kUnassignedNode) {
      return refuse(Status::InvalidArgument("a request forwarded by node " + std::to_string(m.sender()) +
                                            " for shard " + std::to_string(rank) + ": this server is its primary"));
    }
    // A restarted process of a replicated rank holds nothing of its shard: its backup serves it.
    if (!Original(view, rank)) {
      return refuse(Status::Unavailable("server " + std::to_string(rank) +
                                        " was restarted after its backup took its shard over; it holds none of it"));
    }
    return true;
  }
  const NodeInfo* primary = view.Find(Role::kServer, backup_of_);
  if (origin != kUnassignedNode) {  // forwarded: only by the shard's primary
    if (!primary || primary->id != m.sender()) {
      return refuse(Status::InvalidArgument(
          "a request for shard " + std::to_string(backup_of_) + " forwarded by node " + std::to_string(m.sender()) +
          ", which is not that shard's primary (" + (primary ? primary->Describe() : "none in the view") + ")"));
    }
    return true;
  }
  // From a trainer: served only once the primary is gone.
  auto serving = ServingRank(view, static_cast<uint32_t>(backup_of_), options_.replication);
  if (!serving.ok()) return refuse(serving.status());
  if (*serving != rank) {
    return refuse(Status::Unavailable("shard " + std::to_string(backup_of_) + " is served by its primary, " +
                                      (primary ? primary->Describe() : "server " + std::to_string(backup_of_)) +
                                      "; server " + std::to_string(rank) + " holds its backup"));
  }
  return true;
}

std::unique_lock<std::mutex> PsServer::ReplicationLock() {
  if (backup_of_ >= 0 || options_.replication != Replication::kBackup) return {};
  return std::unique_lock(forward_mu_);
}

void PsServer::Finish(Request& request, Result<Message> reply, std::unique_lock<std::mutex>& lock) {
  if (!reply.ok()) {
    ++errors_;
    request.ReplyError(reply.status());
    return;
  }
  if (!lock.owns_lock()) return request.Reply(std::move(reply).value());
  // The primary: forward to the backup while it holds a complete copy.
  const ClusterView view = node_.view();
  const uint32_t shard = Shard();
  const uint32_t backup = BackupRank(shard, static_cast<uint32_t>(view.Count(Role::kServer)));
  const NodeInfo* b = view.Find(Role::kServer, static_cast<int>(backup));
  if (backup == shard || !b || !Original(view, backup)) return request.Reply(std::move(reply).value());
  if (b->address != backup_address_) {
    auto peer = node_.rpc().Connect(b->address);
    if (!peer.ok()) {
      ++errors_;
      return request.ReplyError(peer.status().WithContext("forwarding to the backup of shard " + std::to_string(shard)));
    }
    backup_peer_ = *peer;
    backup_address_ = b->address;
  }
  Message forward = ForwardedCopy(request.message(), shard);
  const uint64_t bytes = PayloadBytes(forward);
  struct Pending {
    Request request;
    Message reply;
  };
  auto pending = std::make_shared<Pending>(Pending{std::move(request), std::move(reply).value()});
  // Sent under the lock the update was applied under: forwards leave in apply order (one link,
  // which ZeroMQ keeps in order), and the backup's single worker applies them in that order.
  node_.rpc().CallAsync(backup_peer_, std::move(forward), [this, pending, bytes, shard, backup](Result<Message> ack) {
    if (ack.ok()) {
      ++forwards_;
      replicated_bytes_ += bytes;
      return pending->request.Reply(std::move(pending->reply));
    }
    // The backup died (or was replaced) meanwhile: the shard goes on without one, and the update,
    // applied here, is acknowledged.
    if (!Original(node_.view(), backup)) return pending->request.Reply(std::move(pending->reply));
    ++forward_errors_;
    ++errors_;
    const Status& s = ack.status();
    const bool transient = s.code() == StatusCode::kDeadlineExceeded || s.code() == StatusCode::kUnavailable ||
                           s.code() == StatusCode::kCancelled;
    // Transient: the sender retries, the retry is a duplicate here and is forwarded again.
    pending->request.ReplyError(
        transient ? Status::Unavailable("the backup of shard " + std::to_string(shard) + ", server " +
                                        std::to_string(backup) + ", did not acknowledge the update: " + s.message())
                  : Status::Internal("the backup of shard " + std::to_string(shard) + ", server " +
                                     std::to_string(backup) + ", refused an update its primary applied: " + s.ToString()));
  });
  lock.unlock();
}

void PsServer::OnServerEvent(const NodeEvent& e) {
  {
    std::lock_guard lock(backup_mu_);
    if (backup_) backup_->OnNodeEvent(e);  // trainers lost leave the backup's clocks too
  }
  if (options_.replication != Replication::kBackup || e.kind == NodeEvent::Kind::kShutdown ||
      e.node.role != Role::kServer) {
    return;
  }
  const auto rank = static_cast<uint32_t>(node_.rank());
  const auto servers = static_cast<uint32_t>(e.view.Count(Role::kServer));
  if (servers < 2 || !Original(e.view, rank)) return;
  const NodeInfo* self = e.view.Find(Role::kServer, static_cast<int>(rank));
  const auto other = static_cast<uint32_t>(e.node.rank);
  if (e.kind == NodeEvent::Kind::kDead && other == BackedUpShard(rank, servers) && !took_over_.exchange(true)) {
    spdlog::warn("replication: take-over of shard {}: its primary {} is dead; {} serves the shard from its backup "
                 "copy from now on, without a backup",
                 other, e.node.Describe(), self ? self->Describe() : "server " + std::to_string(rank));
  }
  if (other == BackupRank(rank, servers)) {
    if (e.kind == NodeEvent::Kind::kDead) {
      spdlog::warn("replication: shard {} lost its backup, {}: it runs without one from now on", rank, e.node.Describe());
    } else {
      spdlog::warn("replication: {} rejoined with none of shard {}: the shard stays without a backup (no state "
                   "transfer; docs/reliability.md)", e.node.Describe(), rank);
    }
    // Forwards in flight to it fail now; Finish's callback then acknowledges them.
    std::lock_guard lock(forward_mu_);
    if (backup_peer_ != kNoPeer) node_.rpc().FailCallsTo(backup_peer_, Status::Unavailable("the backup is gone"));
  }
}

}  // namespace strata
