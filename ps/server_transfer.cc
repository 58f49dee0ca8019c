// server_transfer.cc: PsServer's state transfer (ps/replication.h): a restarted server asking the
// servers serving its two shards for a copy (Joined), the serving holder's snapshot of a shard
// sent on the link its forwarded updates take (so it arrives before any of them), and installing
// it, after which the restarted server is the shard's backup.
#include <spdlog/spdlog.h>

#include <cstring>
#include <thread>

#include "common/check.h"
#include "ps/server.h"
#include "ps/server_table.h"

namespace strata {
void PsServer::Joined() {
  if (options_.replication != Replication::kBackup || backup_of_ >= 0) return;
  PsServer* copy = Copy();
  if (RoleNow() != ShardRole::kEmpty) return;  // an original server
  spdlog::info("replication: server {} was restarted: it holds none of shards {} and {}; asking the servers serving "
               "them for a copy", node_.rank(), Shard(), copy ? std::to_string(copy->Shard()) : "-");
  copy_thread_ = std::thread([this, copy] {
    RequestCopy(stop_);
    if (copy) copy->RequestCopy(stop_);
  });
}

void PsServer::RequestCopy(const std::atomic<bool>& stop) {
  const uint32_t shard = Shard();
  std::string last;
  while (!stop && role_ == ShardRole::kEmpty) {
    const ClusterView view = node_.view();
    const NodeInfo* holder = view.Find(Role::kServer, static_cast<int>(OtherRank()));
    if (holder && holder->alive) {
      auto peer = node_.rpc().Connect(holder->address);
      if (peer.ok()) {
        Message m;
        m.builder().setShard(static_cast<int32_t>(shard));
        m.builder().getBody().setReplicaJoin();
        auto r = node_.rpc().CallAndWait(*peer, std::move(m), Millis(10000));
        if (r.ok()) {
          spdlog::info("replication: {} sends a copy of shard {}", holder->Describe(), shard);
          return;
        }
        if (r.status().ToString() != last) {
          last = r.status().ToString();
          spdlog::info("replication: asking {} for a copy of shard {}: {}; asking again", holder->Describe(), shard, last);
        }
      }
    }
    std::this_thread::sleep_for(Millis(200));
  }
}

void PsServer::HandleReplicaJoin(Request& request) {
  std::unique_lock lock(forward_mu_);
  const ClusterView view = node_.view();
  const uint32_t rank = OtherRank();
  const NodeInfo* joiner = view.Find(Role::kServer, static_cast<int>(rank));
  if (RoleNow() != ShardRole::kServing || !joiner || !joiner->alive) {
    ++errors_;
    return request.ReplyError(Status::Unavailable("server " + std::to_string(node_.rank()) + " " +
                                                  std::string(kNotServing) + " " + std::to_string(Shard())));
  }
  auto peer = node_.rpc().Connect(joiner->address);
  if (!peer.ok()) {
    ++errors_;
    return request.ReplyError(peer.status().WithContext("sending a copy of shard " + std::to_string(Shard())));
  }
  uint64_t rows = 0;
  Message transfer = SnapshotLocked(&rows);
  const uint64_t bytes = PayloadBytes(transfer);
  // From this update on, every one is forwarded to the joiner too, after the copy.
  replica_ = Replica{rank, joiner->incarnation, joiner->address, *peer};
  replica_known_ = true;
  replica_failed_ = false;
  const uint32_t shard = Shard();
  const std::string who = joiner->Describe();
  node_.rpc().CallAsync(*peer, std::move(transfer), [this, shard, who, rows, bytes](Result<Message> ack) {
    if (ack.ok()) {
      transferred_rows_ += rows;
      replicated_bytes_ += bytes;
      spdlog::info("replication: shard {}: {} holds a copy again ({} rows, {:.1f} MiB): it is the backup", shard, who,
                   rows, bytes / 1048576.0);
      return;
    }
    replica_failed_ = true;
    spdlog::error("replication: shard {}: the copy sent to {} failed: {}; the shard runs without a backup", shard, who,
                  ack.status().ToString());
  });
  lock.unlock();
  request.Reply(request.MakeReply());
}

Message PsServer::SnapshotLocked(uint64_t* rows) {
  // The layout of migrateRows (ps/server_migrate.cc), every row: ImportRows reads both.
  Message m;
  m.builder().setShard(static_cast<int32_t>(Shard()));
  auto copy = m.builder().getBody().initStateTransfer();
  std::shared_lock tables_lock(tables_mu_);
  auto specs = copy.initTables(static_cast<unsigned>(tables_.size()));
  unsigned i = 0;
  for (const auto& [id, t] : tables_) {
    ToWire(t->spec, specs[i++]);
    std::vector<uint64_t> keys;
    std::vector<float> records;
    Status s = t->store->Scan([&](uint64_t key, std::span<const float> record) {
      keys.push_back(key);
      records.insert(records.end(), record.begin(), record.end());
      return Status::OK();
    });
    // Replication keeps shards in memory stores, whose scan does not fail.
    STRATA_CHECK(s.ok()) << s.ToString();
    const auto n = static_cast<int64_t>(keys.size());
    *rows += keys.size();
    m.AddPayload(DType::kI64, {n}, Buffer::Take(std::move(keys)));
    m.AddPayload(DType::kF32, {n, static_cast<int64_t>(t->spec.RecordWidth())}, Buffer::Take(std::move(records)));
  }
  std::vector<int64_t> ids;
  for (const auto& [sender, id] : push_ids_.Snapshot()) ids.insert(ids.end(), {sender, static_cast<int64_t>(id)});
  const auto nids = static_cast<int64_t>(ids.size() / 2);
  m.AddPayload(DType::kI64, {nids, 2}, Buffer::Take(std::move(ids)));
  std::lock_guard lock(clock_mu_);
  auto clocks = copy.initTrainerClocks(static_cast<unsigned>(trainer_clock_.size()));
  unsigned c = 0;
  for (const auto& [node, clock] : trainer_clock_) {
    clocks[c].setNode(node);
    clocks[c++].setClock(clock);
  }
  return m;
}

Result<Message> PsServer::InstallTransfer(const Request& request) {
  {  // a fresh copy replaces whatever this instance held
    std::unique_lock lock(tables_mu_);
    tables_.clear();
  }
  {
    std::lock_guard lock(clock_mu_);
    trainer_clock_.clear();
  }
  uint64_t rows = 0;
  STRATA_RETURN_IF_ERROR(ImportRows(request.message(), OtherRank(), nullptr, &rows));
  rows_moved_in_ += rows;
  role_ = ShardRole::kBackup;
  spdlog::info("replication: shard {}: copy received from node {}: this server is its backup", Shard(),
               request.message().sender());
  return request.MakeReply();
}

}  // namespace strata
