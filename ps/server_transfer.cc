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
namespace {

// A payload as `n` values of T (copied: frames may be unaligned).
template <typename T>
std::vector<T> Values(const Buffer& b) {
  std::vector<T> v(b.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), b.data(), v.size() * sizeof(T));
  return v;
}

}  // namespace

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
  Message m;
  m.builder().setShard(static_cast<int32_t>(Shard()));
  std::shared_lock tables_lock(tables_mu_);
  auto specs = m.builder().getBody().initStateTransfer(static_cast<unsigned>(tables_.size()));
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
    // A memory store's scan does not fail; a partial copy would be refused by its size check.
    STRATA_CHECK(s.ok()) << s.ToString();
    const auto n = static_cast<int64_t>(keys.size());
    *rows += keys.size();
    m.AddPayload(DType::kI64, {n}, Buffer::Take(std::move(keys)));
    m.AddPayload(DType::kF32, {n, static_cast<int64_t>(t->spec.RecordWidth())}, Buffer::Take(std::move(records)));
  }
  std::vector<int64_t> ids;
  for (const auto& [sender, id] : push_ids_.Export()) ids.insert(ids.end(), {sender, static_cast<int64_t>(id)});
  const auto nids = static_cast<int64_t>(ids.size() / 2);
  m.AddPayload(DType::kI64, {nids, 2}, Buffer::Take(std::move(ids)));
  std::vector<int64_t> clocks;
  {
    std::lock_guard lock(clock_mu_);
    for (const auto& [node, c] : trainer_clock_) clocks.insert(clocks.end(), {node, c});
  }
  const auto nclocks = static_cast<int64_t>(clocks.size() / 2);
  m.AddPayload(DType::kI64, {nclocks, 2}, Buffer::Take(std::move(clocks)));
  return m;
}

Result<Message> PsServer::InstallTransfer(const Request& request) {
  const Message& m = request.message();
  const std::string where = "stateTransfer of shard " + std::to_string(Shard()) + " from node " + std::to_string(m.sender());
  auto specs = m.reader().getBody().getStateTransfer();
  const size_t want = 2 * specs.size() + 2;
  if (m.num_payloads() != want) {
    return Status::InvalidArgument(where + ": expected " + std::to_string(want) + " payloads, got " +
                                   std::to_string(m.num_payloads()));
  }
  auto pairs = [&](size_t i, const char* what) -> Result<std::vector<int64_t>> {
    const PayloadInfo p = m.payload_info(i);
    if (p.dtype != DType::kI64 || p.shape.size() != 2 || p.shape[1] != 2) {
      return Status::InvalidArgument(where + ": " + what + " must be i64 [n, 2]");
    }
    return Values<int64_t>(*p.buffer);
  };
  STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> ids, pairs(want - 2, "the push ids"));
  STRATA_ASSIGN_OR_RETURN(std::vector<int64_t> clocks, pairs(want - 1, "the clocks"));
  std::map<uint32_t, std::unique_ptr<Table>> made;
  uint64_t rows = 0;
  {
    std::unique_lock lock(tables_mu_);
    for (unsigned i = 0; i < specs.size(); ++i) {
      const TableSpec spec = FromWire(specs[i]);
      STRATA_RETURN_IF_ERROR(spec.Validate().WithContext(where));
      const PayloadInfo k = m.payload_info(2 * i), r = m.payload_info(2 * i + 1);
      const auto width = static_cast<int64_t>(spec.RecordWidth());
      if (k.dtype != DType::kI64 || k.shape.size() != 1 || r.dtype != DType::kF32 || r.shape.size() != 2 ||
          r.shape[0] != k.shape[0] || r.shape[1] != width) {
        return Status::InvalidArgument(where + ": table \"" + spec.name + "\" needs keys (i64 [n]) and records (f32 [n, " +
                                       std::to_string(width) + "])");
      }
      STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Table> t, MakeTableLocked(spec));
      const std::vector<uint64_t> keys = Values<uint64_t>(*k.buffer);
      const std::vector<float> records = Values<float>(*r.buffer);
      STRATA_RETURN_IF_ERROR(t->store->Update(keys, t->init, [&](size_t j, std::span<float> record) {
        std::copy_n(records.data() + j * static_cast<size_t>(width), static_cast<size_t>(width), record.begin());
      }).WithContext(where));
      rows += keys.size();
      made.emplace(spec.id, std::move(t));
    }
    tables_ = std::move(made);
  }
  for (size_t j = 0; j + 1 < ids.size(); j += 2) push_ids_.Remember(static_cast<uint32_t>(ids[j]), static_cast<uint64_t>(ids[j + 1]));
  {
    std::lock_guard lock(clock_mu_);
    trainer_clock_.clear();
    for (size_t j = 0; j + 1 < clocks.size(); j += 2) trainer_clock_[static_cast<uint32_t>(clocks[j])] = clocks[j + 1];
  }
  role_ = ShardRole::kBackup;
  spdlog::info("replication: shard {}: copy received from node {} ({} tables, {} rows, {} push ids): this server is its "
               "backup", Shard(), m.sender(), specs.size(), rows, ids.size() / 2);
  return request.MakeReply();
}

}  // namespace strata
