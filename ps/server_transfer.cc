// server_transfer.cc: PsServer's state transfer (ps/replication.h): a restarted server asking the
// servers serving its two shards for a copy (Joined), and the serving holder sending it in
// stateTransfer chunks of at most server.migrate_chunk_mb (so no message grows with the shard
// past transport.max_message_mb), on the link its forwarded updates take, in order with them.
// The copy's head (every table's spec, the BSP tables' rows and state, the push ids) is read at
// one moment and goes ahead of every forward; the other tables' rows stream behind it a few
// chunks at a time (StreamCopy), each chunk read when it goes, so a copy never holds those
// tables whole in memory and the trainers' updates go on meanwhile. The receiver installs the
// chunks one by one, applies the forwards between them once the head is in, and is the
// shard's backup once it holds every row.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
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
  // After a copy that failed here: a wait before the next ask, doubling up to kMaxCopyBackoff
  // while copies keep failing (a disk that stays full), so the holder is not made to read its
  // shard's head again and again.
  Millis backoff(0);
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
        m.set_shard(static_cast<int32_t>(shard));
        m.set_op(Op::REPLICA_JOIN);
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
          backoff = copy_failed_ ? std::min(kMaxCopyBackoff, std::max(Millis(100), 2 * backoff)) : Millis(0);
          spdlog::warn("replication: the copy of shard {} from {} {}; asking for it again in {} ms", shard,
                       holder->Describe(),
                       copy_failed_ ? "failed here" : "fell silent for " + std::to_string(silence.count()) + " ms",
                       backoff.count());
          for (const int64_t until = SteadyMillis() + backoff.count(); !stop && SteadyMillis() < until;) {
            std::this_thread::sleep_for(Millis(20));
          }
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
  if (request.message().origin() == request.message().sender()) return HandBack(request);
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

struct PsServer::CopyProgress {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t sent = 0, acked = 0, bytes = 0;
  bool all_sent = false, failed = false, done = false;
  uint32_t shard = 0;
  uint64_t rows = 0;  // the copy's, head and tail
  std::string to;     // the receiver, described
};

Status PsServer::SendCopyLocked(const NodeInfo& to) {
  const uint32_t rank = static_cast<uint32_t>(to.rank);
  auto peer = node_.rpc().Connect(to.address);
  if (!peer.ok()) return peer.status().WithContext("sending a copy of shard " + std::to_string(Shard()));
  MigrationPlan tail;
  uint64_t head_rows = 0;
  auto head = CopyHeadLocked(&tail, &head_rows);
  if (!head.ok()) return head.status().WithContext("sending a copy of shard " + std::to_string(Shard()));
  const ClusterView view = node_.view();
  // Numbered so that the joiner starts over on a newer copy and refuses an older one's chunks,
  // and a failure of an older one here drops nothing.
  const NodeInfo* self = view.Find(Role::kServer, node_.rank());
  const uint64_t copy = (uint64_t{self ? self->incarnation : 0u} << 32) | ++copies_sent_;
  auto progress = std::make_shared<CopyProgress>();
  progress->shard = Shard();
  progress->to = to.Describe();
  // Every chunk states the rows of the whole copy, head and tail: the receiver has it all when
  // it took that many.
  const uint64_t total = head_rows + tail.rows();
  progress->rows = total;
  // From this update on, every one is forwarded to the joiner too, after the head.
  replica_ = Replica{rank, to.incarnation, to.address, *peer, copy};
  replica_known_ = true;
  failed_copy_ = kNoCopy;
  const bool streams = tail.rows() > 0;
  for (size_t i = 0; i < head->size(); ++i) {
    Message& chunk = (*head)[i];
    auto body = chunk.builder().getBody().getStateTransfer();
    body.setCopy(copy);
    body.setRows(total);
    SendCopyChunkLocked(*peer, std::move(chunk), copy, progress, !streams && i + 1 == head->size());
  }
  if (!streams) return Status::OK();
  std::lock_guard lock(streams_mu_);
  copy_streams_.emplace_back([this, peer = *peer, copy, progress, tail = std::move(tail), total]() mutable {
    StreamCopy(peer, copy, std::move(progress), std::move(tail), total);
  });
  return Status::OK();
}

void PsServer::SendCopyChunkLocked(PeerId peer, Message chunk, uint64_t copy,
                                   const std::shared_ptr<CopyProgress>& progress, bool last) {
  uint64_t ahead = 0;
  {
    std::lock_guard lock(progress->mu);
    ahead = progress->sent - progress->acked;
    ++progress->sent;
    progress->bytes += PayloadBytes(chunk);
    progress->all_sent = last;
  }
  uint64_t seen = copy_window_max_.load();
  while (ahead + 1 > seen && !copy_window_max_.compare_exchange_weak(seen, ahead + 1)) {
  }
  // The receiver installs chunks in turn: this one's answer comes after those ahead of it.
  const Millis timeout(node_.options().transport.request_timeout_ms * static_cast<int64_t>(ahead + 1));
  // The callback may run before CallAsync returns: it must not take forward_mu_.
  node_.rpc().CallAsync(peer, std::move(chunk), [this, progress, copy](Result<Message> ack) {
    CopyProgress& p = *progress;
    if (!ack.ok()) {
      {
        std::lock_guard lock(p.mu);
        if (p.failed) return;
        p.failed = true;
      }
      p.cv.notify_all();
      if (ack.status().code() == StatusCode::kDeadlineExceeded) {
        // Slow, not failed: forwards keep going behind the copy. A copy that stalls there is asked
        // for again; a joiner that died is dropped by its dead event (OnHolderEvent).
        spdlog::warn("replication: shard {}: {} has not answered a chunk of its copy in time: {}", p.shard, p.to,
                     ack.status().ToString());
        return;
      }
      failed_copy_ = copy;  // forwards stop at the next update; the joiner asks for a new copy
      spdlog::error("replication: shard {}: the copy sent to {} failed: {}; no backup until it asks again", p.shard,
                    p.to, ack.status().ToString());
      return;
    }
    bool whole = false;
    uint64_t chunks = 0, bytes = 0;
    {
      std::lock_guard lock(p.mu);
      ++p.acked;
      whole = p.all_sent && p.acked == p.sent && !p.failed && !p.done;
      p.done = p.done || whole;
      chunks = p.sent;
      bytes = p.bytes;
    }
    p.cv.notify_all();
    if (!whole) return;
    acked_copy_ = copy;  // the backup holds it whole (FailBack may hand the shard to it)
    transferred_rows_ += p.rows;
    replicated_bytes_ += bytes;
    migrate_chunks_out_ += chunks;
    spdlog::info("replication: shard {}: {} holds a copy again ({} rows, {:.1f} MiB in {} chunks): it is the backup",
                 p.shard, p.to, p.rows, static_cast<double>(bytes) / 1048576.0, chunks);
  }, timeout);
}

void PsServer::StreamCopy(PeerId peer, uint64_t copy, std::shared_ptr<CopyProgress> progress, MigrationPlan tail,
                          uint64_t total) {
  // Rows as they are when their chunk goes.
  auto read = [this](const TableSpec& spec, std::span<const uint64_t> keys, std::span<float> out) {
    std::shared_lock tables_lock(tables_mu_);
    return ReadForCopyLocked(spec, keys, out);
  };
  std::optional<MigrationCursor> at = tail.Start();
  while (at && !stop_) {
    {
      std::unique_lock lock(progress->mu);
      progress->cv.wait_for(lock, Millis(100), [&] { return progress->failed || progress->sent - progress->acked < kCopyWindow; });
      if (progress->failed) return;
      if (progress->sent - progress->acked >= kCopyWindow) continue;
    }
    std::lock_guard lock(forward_mu_);
    Replica* replica = RoleNow() == ShardRole::kServing ? ReplicaLocked() : nullptr;
    if (!replica || replica->copy != copy) return;  // dropped, replaced by a newer copy, or its holder died
    Message m;
    m.set_shard(static_cast<int32_t>(Shard()));
    auto info = BuildMigrationChunk(tail, *at, MigrateChunkBytes(), read, &m, /*state_transfer=*/true);
    if (!info.ok()) {
      failed_copy_ = copy;  // the next update drops the replica; its holder asks for a new copy
      {
        std::lock_guard progress_lock(progress->mu);
        progress->failed = true;
      }
      spdlog::error("replication: shard {}: the copy for {} failed here: {}; no backup until it asks again", Shard(),
                    progress->to, info.status().ToString());
      return;
    }
    auto body = m.builder().getBody().getStateTransfer();
    body.setCopy(copy);
    body.setRows(total);
    at = info->next;
    SendCopyChunkLocked(peer, std::move(m), copy, progress, !at);
  }
}

Result<std::vector<Message>> PsServer::CopyHeadLocked(MigrationPlan* tail, uint64_t* head_rows) {
  // Two migration plans (ps/migration.h) of every row: the head's, read now, under the lock,
  // and the tail's, whose rows are read chunk by chunk later. A BSP table's rows go in the head
  // with the BSP state: a clock may be applied outside forward_mu_ (a trainer's event), so its
  // rows and the state must be taken at one moment. Any other table's rows change only by the
  // updates forwarded in order with the chunks: a tail chunk overwrites what the forwards before
  // it wrote on the receiver, and those after it apply on top.
  MigrationPlan head;
  std::shared_lock tables_lock(tables_mu_);
  for (const auto& [id, t] : tables_) {
    MigrationPlan::Rows r{t->spec, {}};
    STRATA_RETURN_IF_ERROR(t->store->Scan([&](uint64_t key, std::span<const float>) {
      r.keys.push_back(key);
      return Status::OK();
    }));
    if (t->spec.consistency == Consistency::kBsp) {
      head.tables.push_back(std::move(r));
    } else {
      head.tables.push_back(MigrationPlan::Rows{t->spec, {}});  // listed, so the receiver makes it
      tail->tables.push_back(std::move(r));
    }
  }
  head.push_ids = push_ids_.Snapshot();
  // Held to the end: a trainer's event applies BSP clocks outside forward_mu_, and the rows read
  // below must be those the BSP state taken here leaves to apply.
  std::lock_guard clocks(clock_mu_);
  for (const auto& [node, clock] : trainer_clock_) head.clocks.emplace_back(node, clock);
  *head_rows = head.rows();
  auto read = [this](const TableSpec& spec, std::span<const uint64_t> keys, std::span<float> out) {
    return ReadForCopyLocked(spec, keys, out);
  };
  std::vector<Message> chunks;
  std::optional<MigrationCursor> at = head.Start();
  while (at) {
    Message m;
    m.set_shard(static_cast<int32_t>(Shard()));
    STRATA_ASSIGN_OR_RETURN(const ChunkInfo info, BuildMigrationChunk(head, *at, MigrateChunkBytes(), read, &m,
                                                                      /*state_transfer=*/true));
    chunks.push_back(std::move(m));
    at = info.next;
  }
  AddBspStateLocked(&chunks.back());  // a plan always has a chunk (the push ids', if nothing else)
  return chunks;
}

Status PsServer::ReadForCopyLocked(const TableSpec& spec, std::span<const uint64_t> keys, std::span<float> out) {
  auto it = tables_.find(spec.id);
  if (it == tables_.end()) return Status::NotFound("table \"" + spec.name + "\" is gone");
  const Table& t = *it->second;
  const size_t width = static_cast<size_t>(spec.RecordWidth());
  auto copy_out = [&](size_t j, std::span<const float> record) {
    std::memcpy(out.data() + j * width, record.data(), width * sizeof(float));
  };
  // A key that left the shard since the copy's plan was made (a server joined) reads as its
  // initializer, stored nowhere; the backup never serves it.
  Status s = t.store->Read(keys, nullptr, copy_out);
  return s.IsNotFound() ? t.store->Peek(keys, t.init, copy_out) : s;
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
  // A copy that fails here: RequestCopy asks for a new one (whose first chunk clears again), and
  // the holder, answered this error, drops this one (failed_copy_).
  auto fail = [this](Status s) {
    installing_ = false;
    install_forwards_ = false;
    copy_failed_ = true;
    return s;
  };
  if (other_sender || copy > install_copy_) {  // a fresh copy's first chunk: it replaces whatever this instance held
    install_copy_ = copy;
    install_sender_ = request.message().sender();
    forwards_applied_ = 0;  // the sender counts its forwards after this copy from 0 too
    role_ = ShardRole::kEmpty;  // not a backup again before the whole copy is in
    install_forwards_ = false;  // nor does it apply forwards before the head is in
    installing_ = true;
    install_total_ = chunk.getRows();
    install_rows_ = install_chunks_ = 0;
    if (Status s = ClearForCopy(); !s.ok()) {
      return fail(s.WithContext("installing the copy of shard " + std::to_string(Shard()) + " from node " +
                                std::to_string(request.message().sender())));
    }
  }
  const std::string where = "the copy of shard " + std::to_string(Shard()) + " from node " +
                            std::to_string(request.message().sender()) + ", chunk " +
                            std::to_string(install_chunks_ + 1);
  if (chunk.getRows() != install_total_) {
    return fail(Status::InvalidArgument(where + ": stateTransfer.rows says " + std::to_string(chunk.getRows()) +
                                        " rows, the first chunk said " + std::to_string(install_total_)));
  }
  uint64_t rows = 0;
  if (Status s = ImportRows(request.message(), OtherRank(), nullptr, &rows); !s.ok()) return fail(s.WithContext(where));
  ++install_chunks_;
  ++migrate_chunks_in_;
  install_rows_ += rows;
  rows_moved_in_ += rows;
  if (chunk.hasNext()) return request.MakeReply();
  if (!install_forwards_) {
    // The head's last chunk (its plan ends here): the BSP state as it was when the head was read.
    if (Status s = InstallBspState(request.message()); !s.ok()) return fail(s.WithContext(where));
    install_forwards_ = true;
    // The tail's rows stream behind the forwards from here on.
    if (install_rows_ < install_total_) return request.MakeReply();
  }
  if (install_rows_ != install_total_) {
    return fail(Status::InvalidArgument(where + ": the chunks held " + std::to_string(install_rows_) +
                                        " rows, stateTransfer.rows " + std::to_string(install_total_)));
  }
  installing_ = false;
  role_ = ShardRole::kBackup;
  install_forwards_ = false;
  spdlog::info("replication: shard {}: copy received from node {} ({} rows in {} chunks, {} forwarded updates "
               "applied between them): this server is its backup",
               Shard(), request.message().sender(), install_rows_, install_chunks_, forwards_applied_.load());
  StartFailBack();  // this server's own shard: it asks for it back
  return request.MakeReply();
}

}  // namespace strata
