// server_transfer.cc: PsServer's state transfer (ps/replication.h): a restarted server asking the
// servers serving its two shards for a copy (Joined), the serving holder's snapshot of a shard
// in chunks of at most server.migrate_chunk_mb (so no message grows with the shard past
// transport.max_message_mb), all sent at once on the link its forwarded updates take (so they
// arrive, in order, before any of them), and installing them one by one, after which the
// restarted server is the shard's backup.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include "common/check.h"
#include "common/steady_millis.h"
#include "ps/server.h"
#include "ps/server_table.h"

namespace strata {
void PsServer::Joined() {
  if (IsCopy()) return;
  if (node_.options().cluster.elastic && !joined_late_) AdoptViewLayout();
  if (options_.replication != Replication::kBackup) return;
  // A server that joined the running job: the shard before it in the ring is its to back up.
  if (joined_late_) return FollowRing(/*gained=*/false);
  PsServer* copy = Copy();
  // A restarted server holds neither shard; an original one with durable stores not its backup.
  const bool own = RoleNow() == ShardRole::kEmpty;
  const bool other = copy && copy->RoleNow() == ShardRole::kEmpty;
  if (!own && !other) return;  // an original server
  if (own) {
    spdlog::info("replication: server {} was restarted: it holds none of shards {} and {}; asking the servers "
                 "serving them for a copy", node_.rank(), Shard(), copy ? std::to_string(copy->Shard()) : "-");
  } else {
    spdlog::info("replication: server {} keeps durable stores: asking the server serving shard {} for a copy "
                 "(nothing on disk is trusted for a backup)", node_.rank(), copy->Shard());
  }
  StartCopyRequests(copy, own, other);
}

void PsServer::StartCopyRequests(PsServer* copy, bool own, bool other) {
  std::lock_guard lock(backup_mu_);
  copy_threads_.emplace_back([this, copy, own, other] {
    if (own) RequestCopy(stop_);
    if (other && copy) copy->RequestCopy(stop_);
  });
}

void PsServer::RequestCopy(const std::atomic<bool>& stop) {
  // One asker per shard (a server declared dead twice before its copy arrived asks once); the
  // role is looked at again after letting go, so a step-down just then is not left unasked.
  while (!stop && role_ == ShardRole::kEmpty) {
    if (requesting_copy_.exchange(true)) return;
    AskForCopy(stop);
    requesting_copy_ = false;
  }
}

void PsServer::AskForCopy(const std::atomic<bool>& stop) {
  const auto silence = Millis(node_.options().transport.request_timeout_ms);
  std::string last;
  while (!stop && role_ == ShardRole::kEmpty) {
    // The ring may give this copy another shard meanwhile (FollowRing): each ask is for the
    // shard of its moment, and a wait for a copy ends when the shard moves.
    const uint32_t shard = Shard();
    const uint64_t moves = ring_moves_;
    const ClusterView view = node_.view();
    const NodeInfo* holder = view.Find(Role::kServer, static_cast<int>(OtherRank()));
    if (holder && holder->alive) {
      auto peer = node_.rpc().Connect(holder->address);
      if (peer.ok()) {
        Message m;
        m.builder().setShard(static_cast<int32_t>(shard));
        m.builder().getBody().setReplicaJoin();
        copy_failed_ = false;  // before the ask: the copy's first chunk may beat its answer here
        install_heard_ms_ = SteadyMillis();
        auto r = node_.rpc().CallAndWait(*peer, std::move(m), Millis(10000));
        if (r.ok()) {
          spdlog::info("replication: {} sends a copy of shard {}", holder->Describe(), shard);
          // Until it is installed: a copy that failed here, or that fell silent (a chunk lost, or
          // its sender gone) for a request timeout, is asked for again, whole.
          while (!stop && role_ == ShardRole::kEmpty && !copy_failed_ && ring_moves_ == moves &&
                 SteadyMillis() - install_heard_ms_ < silence.count()) {
            std::this_thread::sleep_for(Millis(20));
          }
          if (stop || role_ != ShardRole::kEmpty) return;
          if (ring_moves_ != moves) continue;  // asked for a shard this copy holds no more
          ++copy_asks_again_;
          spdlog::warn("replication: the copy of shard {} from {} {}; asking for it again", shard, holder->Describe(),
                       copy_failed_ ? "failed here" : "fell silent for " + std::to_string(silence.count()) + " ms");
          continue;
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
  if (request.message().reader().getOrigin() == request.message().sender()) return HandBack(request);
  std::unique_lock lock(forward_mu_);
  const ClusterView view = node_.view();
  const uint32_t rank = OtherRank();
  const NodeInfo* joiner = view.Find(Role::kServer, static_cast<int>(rank));
  if (RoleNow() != ShardRole::kServing || taking_over_ || !joiner || !joiner->alive) {
    ++errors_;
    return request.ReplyError(Status::Unavailable("server " + std::to_string(node_.rank()) + " " +
                                                  std::string(kNotServing) + " " + std::to_string(Shard()) +
                                                  (taking_over_ ? " yet (it is joining the job)" : "")));
  }
  if (Status s = SendCopyLocked(*joiner); !s.ok()) {
    ++errors_;
    return request.ReplyError(s);
  }
  lock.unlock();
  request.Reply(request.MakeReply());
}

Status PsServer::SendCopyLocked(const NodeInfo& to) {
  const uint32_t rank = static_cast<uint32_t>(to.rank);
  auto peer = node_.rpc().Connect(to.address);
  if (!peer.ok()) return peer.status().WithContext("sending a copy of shard " + std::to_string(Shard()));
  uint64_t rows = 0;
  auto chunks = SnapshotLocked(&rows);
  if (!chunks.ok()) return chunks.status().WithContext("sending a copy of shard " + std::to_string(Shard()));
  const ClusterView view = node_.view();
  uint64_t bytes = 0;
  for (const Message& m : *chunks) bytes += PayloadBytes(m);
  // Numbered so that the joiner starts over on a newer copy and refuses an older one's chunks,
  // and a failure of an older one here drops nothing.
  const NodeInfo* self = view.Find(Role::kServer, node_.rank());
  const uint64_t copy = (uint64_t{self ? self->incarnation : 0u} << 32) | ++copies_sent_;
  for (Message& chunk : *chunks) chunk.builder().getBody().getStateTransfer().setCopy(copy);
  // From this update on, every one is forwarded to the joiner too, after the copy.
  replica_ = Replica{rank, to.incarnation, to.address, *peer, copy};
  replica_known_ = true;
  failed_copy_ = kNoCopy;
  const uint32_t shard = Shard();
  const std::string who = to.Describe();
  struct Progress {
    std::atomic<size_t> acked{0};
    std::atomic<bool> failed{false};
  };
  auto progress = std::make_shared<Progress>();
  const size_t n = chunks->size();
  // All go at once and the receiver installs them in turn: chunk i's answer comes after i + 1
  // installs, so it waits up to i + 1 request timeouts.
  const Millis per_chunk(node_.options().transport.request_timeout_ms);
  for (size_t i = 0; i < n; ++i) {
    Message& chunk = (*chunks)[i];
    node_.rpc().CallAsync(*peer, std::move(chunk), [this, shard, who, rows, bytes, n, progress, copy](Result<Message> ack) {
      if (!ack.ok()) {
        if (progress->failed.exchange(true)) return;
        if (ack.status().code() == StatusCode::kDeadlineExceeded) {
          // Slow, not failed: forwards keep going behind the copy. A copy that stalls there is asked
          // for again; a joiner that died is dropped by its dead event (OnHolderEvent).
          spdlog::warn("replication: shard {}: {} has not answered a chunk of its copy in time: {}", shard, who,
                       ack.status().ToString());
          return;
        }
        failed_copy_ = copy;  // forwards stop at the next update; the joiner asks for a new copy
        spdlog::error("replication: shard {}: the copy sent to {} failed: {}; no backup until it asks again", shard,
                      who, ack.status().ToString());
        return;
      }
      if (++progress->acked != n || progress->failed) return;
      acked_copy_ = copy;  // the backup holds it whole (FailBack may hand the shard to it)
      transferred_rows_ += rows;
      replicated_bytes_ += bytes;
      migrate_chunks_out_ += n;
      spdlog::info("replication: shard {}: {} holds a copy again ({} rows, {:.1f} MiB in {} chunks): it is the backup",
                   shard, who, rows, bytes / 1048576.0, n);
    }, per_chunk * static_cast<int64_t>(i + 1));
  }
  return Status::OK();
}

Result<std::vector<Message>> PsServer::SnapshotLocked(uint64_t* rows) {
  // A migration plan of every row (ps/migration.h), cut into chunks now, under the lock: the
  // rows change with the next update, whose forward must find the whole copy before it.
  MigrationPlan plan;
  std::shared_lock tables_lock(tables_mu_);
  for (const auto& [id, t] : tables_) {
    MigrationPlan::Rows r{t->spec, {}};
    STRATA_RETURN_IF_ERROR(t->store->Scan([&](uint64_t key, std::span<const float>) {
      r.keys.push_back(key);
      return Status::OK();
    }));
    plan.tables.push_back(std::move(r));
  }
  plan.push_ids = push_ids_.Snapshot();
  // Held to the end: a trainer's event applies BSP clocks outside forward_mu_, and the rows read
  // below must be those the BSP state taken here leaves to apply.
  std::lock_guard clocks(clock_mu_);
  for (const auto& [node, clock] : trainer_clock_) plan.clocks.emplace_back(node, clock);
  *rows = plan.rows();
  auto read = [this](const TableSpec& spec, std::span<const uint64_t> keys, std::span<float> out) -> Status {
    const Table& t = *tables_.at(spec.id);
    const size_t width = static_cast<size_t>(spec.RecordWidth());
    return t.store->Read(keys, t.init, [&](size_t j, std::span<const float> record) {
      std::memcpy(out.data() + j * width, record.data(), width * sizeof(float));
    });
  };
  std::vector<Message> chunks;
  std::optional<MigrationCursor> at = plan.Start();
  while (at) {
    Message m;
    m.builder().setShard(static_cast<int32_t>(Shard()));
    STRATA_ASSIGN_OR_RETURN(const ChunkInfo info, BuildMigrationChunk(plan, *at, MigrateChunkBytes(), read, &m,
                                                                      /*state_transfer=*/true));
    chunks.push_back(std::move(m));
    at = info.next;
  }
  if (!chunks.empty()) AddBspStateLocked(&chunks.back());
  return chunks;
}

Status PsServer::ClearForCopy() {
  // First: parked requests point into the tables (and clock_mu_ goes before tables_mu_).
  FailParked("server " + std::to_string(node_.rank()) + " " + std::string(kNotServing) + " " +
             std::to_string(Shard()) + " (it is installing a copy of it)");
  std::unique_lock lock(tables_mu_);
  tables_.clear();  // closes the stores
  // Durable stores: their files go too (RocksDB, checkpoints, the push ids recorded with the
  // updates), those of tables the copy lacks included, and the tables file lists none.
  if (stores_.clear) STRATA_RETURN_IF_ERROR(stores_.clear());
  STRATA_RETURN_IF_ERROR(RecordTablesLocked(nullptr));
  lock.unlock();
  push_ids_.Clear();  // the copy's replace them (the last chunk carries them)
  std::lock_guard clocks(clock_mu_);
  trainer_clock_.clear();
  return Status::OK();
}

Result<Message> PsServer::InstallTransfer(const Request& request) {
  auto chunk = request.message().reader().getBody().getStateTransfer();
  const uint64_t copy = chunk.getCopy();
  // Copies are numbered by their sender: one from another holder (the ring moved this copy to
  // another shard, ps/replication.h) is a fresh one (Admit let only the shard's holder through).
  const bool other_sender = request.message().sender() != install_sender_;
  if (!other_sender && (copy < install_copy_ || (copy == install_copy_ && !installing_))) {
    // Left over from a copy that failed, or was replaced by a newer one: nothing changes.
    return Status::FailedPrecondition(
        "stateTransfer: a chunk of copy " + std::to_string(copy >> 32) + "." + std::to_string(copy & 0xffffffffu) +
        " of shard " + std::to_string(Shard()) + ", but " +
        (copy < install_copy_ ? "copy " + std::to_string(install_copy_ >> 32) + "." +
                                    std::to_string(install_copy_ & 0xffffffffu) + " replaced it"
                              : std::string("that copy is over (installed, or failed)")));
  }
  install_heard_ms_ = SteadyMillis();
  if (other_sender || copy > install_copy_) {  // a fresh copy's first chunk: it replaces whatever this instance held
    install_copy_ = copy;
    install_sender_ = request.message().sender();
    forwards_applied_ = 0;  // the sender counts its forwards after this copy from 0 too
    role_ = ShardRole::kEmpty;  // not a backup again before the whole copy is in
    installing_ = true;
    install_total_ = chunk.getRows();
    install_rows_ = install_chunks_ = 0;
    if (Status s = ClearForCopy(); !s.ok()) {
      installing_ = false;  // RequestCopy asks for a new one, whose first chunk clears again
      copy_failed_ = true;
      return s.WithContext("installing the copy of shard " + std::to_string(Shard()) + " from node " +
                           std::to_string(request.message().sender()));
    }
  }
  const std::string where = "the copy of shard " + std::to_string(Shard()) + " from node " +
                            std::to_string(request.message().sender()) + ", chunk " +
                            std::to_string(install_chunks_ + 1);
  if (chunk.getRows() != install_total_) {
    installing_ = false;
    copy_failed_ = true;
    return Status::InvalidArgument(where + ": stateTransfer.rows says " + std::to_string(chunk.getRows()) +
                                   " rows, the first chunk said " + std::to_string(install_total_));
  }
  uint64_t rows = 0;
  if (Status s = ImportRows(request.message(), OtherRank(), nullptr, &rows); !s.ok()) {
    installing_ = false;  // the holder drops this copy (failed_copy_); RequestCopy asks for a new one
    copy_failed_ = true;
    return s.WithContext(where);
  }
  ++install_chunks_;
  ++migrate_chunks_in_;
  install_rows_ += rows;
  rows_moved_in_ += rows;
  if (chunk.hasNext()) return request.MakeReply();
  installing_ = false;
  if (Status s = InstallBspState(request.message()); !s.ok()) {
    copy_failed_ = true;
    return s.WithContext(where);
  }
  if (install_rows_ != install_total_) {
    copy_failed_ = true;
    return Status::InvalidArgument(where + ": the chunks held " + std::to_string(install_rows_) +
                                   " rows, stateTransfer.rows " + std::to_string(install_total_));
  }
  role_ = ShardRole::kBackup;
  spdlog::info("replication: shard {}: copy received from node {} ({} rows in {} chunks): this server is its backup",
               Shard(), request.message().sender(), install_rows_, install_chunks_);
  StartFailBack();  // this server's own shard: it asks for it back
  return request.MakeReply();
}

}  // namespace strata
