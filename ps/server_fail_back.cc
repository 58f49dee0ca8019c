// server_fail_back.cc: PsServer's fail-back under replication (ps/replication.h): a server that
// holds a whole copy of its own shard again asks the holder serving it meanwhile to hand it back
// (FailBack), and that holder does (HandBack). See PsServer::StartFailBack.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "common/steady_millis.h"
#include "ps/server.h"

namespace strata {

bool PsServer::ServingLocked(Request& request, std::unique_lock<std::mutex>& lock) {
  if (options_.replication != Replication::kBackup) return true;
  if (HasOrigin(request.message())) return true;  // a forward: Admit checked
  if (RoleNow() == ShardRole::kServing) return true;
  lock.unlock();
  ++errors_;
  request.ReplyError(Status::Unavailable("server " + std::to_string(node_.rank()) + " " + std::string(kNotServing) +
                                         " " + std::to_string(Shard()) + " any more (it handed the shard over)"));
  return false;
}

void PsServer::StartFailBack() {
  if (IsCopy() || options_.replication != Replication::kBackup) return;  // only a server's own shard
  std::lock_guard lock(backup_mu_);
  copy_threads_.emplace_back([this] { FailBack(stop_); });
}

void PsServer::FailBack(const std::atomic<bool>& stop) {
  if (failing_back_.exchange(true)) return;  // one asker
  const uint32_t shard = Shard();
  const Millis timeout(node_.options().transport.request_timeout_ms);
  std::string last;
  while (!stop && role_ == ShardRole::kBackup) {
    const ClusterView view = node_.view();
    const uint32_t other = OtherRank();
    const NodeInfo* holder = view.Find(Role::kServer, static_cast<int>(other));
    auto peer = holder && holder->alive ? node_.rpc().Connect(holder->address) : Result<PeerId>(Status::Unavailable("down"));
    if (peer.ok()) {
      Message m;
      m.set_shard(static_cast<int32_t>(shard));
      m.set_origin(node_.id());  // a hand-back: "to me"
      m.set_op(Op::REPLICA_JOIN);
      auto r = node_.rpc().CallAndWait(*peer, std::move(m), timeout);
      if (r.ok()) {
        uint64_t sent = 0;
        if (r->num_payloads() == 1 && r->payload(0).size() == sizeof(sent)) {
          std::memcpy(&sent, r->payload(0).data(), sizeof(sent));
        }
        // Every update it applied before handing over reaches this server first: its forwards
        // travel on another connection than its answer, so wait for the count it stated.
        const int64_t until = SteadyMillis() + timeout.count();
        while (!stop && forwards_applied_ < sent && SteadyMillis() < until) std::this_thread::sleep_for(Millis(5));
        if (forwards_applied_ < sent) {
          spdlog::warn("replication: shard {}: {} handed it back after {} forwarded updates, {} of them applied here "
                       "after {} ms; serving it anyway (the rest were never acknowledged to a trainer)",
                       shard, holder->Describe(), sent, forwards_applied_.load(), timeout.count());
        }
        {
          std::lock_guard lock(forward_mu_);
          if (role_ != ShardRole::kBackup) break;  // taken over meanwhile (the holder died)
          replica_ = Replica{other, holder->incarnation, holder->address, kNoPeer, /*copy=*/0, 0};
          replica_known_ = true;
          failed_copy_ = kNoCopy;
          role_ = ShardRole::kServing;
        }
        ++fail_backs_;
        spdlog::info("replication: shard {}: {} handed it back ({} updates forwarded meanwhile): this server serves "
                     "it again, with {} as its backup", shard, holder->Describe(), sent, holder->Describe());
        break;
      }
      if (r.status().ToString() != last) {
        last = r.status().ToString();
        spdlog::info("replication: asking {} to hand shard {} back: {}; asking again", holder->Describe(), shard, last);
      }
    }
    std::this_thread::sleep_for(Millis(100));
  }
  failing_back_ = false;
}

void PsServer::HandBack(Request& request) {
  const Message& m = request.message();
  std::unique_lock lock(forward_mu_);
  const uint32_t shard = Shard();
  auto refuse = [&](const std::string& why) {
    lock.unlock();
    ++errors_;
    request.ReplyError(Status::Unavailable("handing shard " + std::to_string(shard) + " back to node " +
                                           std::to_string(m.sender()) + ": " + why));
  };
  // Only the holder that took the shard over hands it back, to the shard's own server.
  if (!IsCopy() || RoleNow() != ShardRole::kServing) return refuse("this server does not serve it for another");
  const ClusterView view = node_.view();
  const NodeInfo* asker = view.Find(m.sender());
  if (!asker || asker->role != Role::kServer || static_cast<uint32_t>(asker->rank) != shard) {
    return refuse("node " + std::to_string(m.sender()) + " is not that shard's server");
  }
  Replica* replica = ReplicaLocked();
  if (!replica || replica->rank != shard || replica->incarnation != asker->incarnation ||
      acked_copy_ != replica->copy) {
    return refuse("its copy of the shard is not complete here yet");
  }
  const uint64_t sent = replica->forwarded;
  role_ = ShardRole::kBackup;  // from here on: trainers are refused, the asker's forwards applied
  replica_.reset();
  replica_known_ = true;
  lock.unlock();
  ++fail_backs_;
  FailParked("server " + std::to_string(node_.rank()) + " " + std::string(kNotServing) + " " + std::to_string(shard) +
             " any more (it handed the shard back to " + asker->Describe() + ")");
  spdlog::info("replication: shard {}: handed back to {} ({} updates forwarded to it since its copy): this server "
               "is its backup again", shard, asker->Describe(), sent);
  Message reply = request.MakeReply();
  reply.AddPayload(DType::kI64, {1}, Buffer::Copy(&sent, sizeof(sent)));
  request.Reply(std::move(reply));
}

}  // namespace strata
