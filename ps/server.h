// server.h: PsServer, the parameter server. It holds this server's shard of every table in a
// RowStore, applies the table's optimizer on push, and enforces the table's consistency with
// per-trainer clocks:
//   ASP     pushes apply as they arrive; pulls answer at once.
//   SSP(s)  pushes apply as they arrive; a pull at clock c waits until the slowest live
//           trainer has finished clock c - s (s = 0 waits like BSP).
//   BSP     the trainers' pushes of clock c are combined (sum or mean) and applied once, when
//           every trainer has finished c; a pull at clock c waits for that. A dense table with
//           spec.pushers > 0 applies each chunk as soon as that many pushes of it for c arrived,
//           and its pulls at c + 1 are answered once all its chunks here are applied, without
//           waiting for the clock messages. Either way a chunk's pushes are summed in the order
//           they arrived, from zero, then scaled (mean: by 1/pushers, or 1/live trainers when
//           applied at the clock), then applied once: the same floats whichever path applies it.
//   Dense pulls are answered with reference-counted snapshots of the chunks
//           (dense_snapshots.h): no copy for a chunk not updated since its last pull, and never a
//           half-applied update. A chunk pulls read gets its next snapshot from the update that
//           changes it (Table::UpdateRecords), and a pull whose chunks are all fresh is answered
//           on the receive thread (TryPullOnReceive): the pull after a push costs no hop and no
//           copy on the server.
// Requests from one sender are handled in order where it matters (ps/sender_lanes.h): its
// pushes and pulls of one key (a dense chunk) run on several workers at once, key by key in
// order, so the chunks of one dense push are applied in parallel while the next ones arrive;
// anything else (a clock, a push of many keys) waits for everything before it, so a trainer's
// clock message is processed after its pushes. The receive thread only queues. Every request is validated completely before
// anything is applied: a bad one gets an error reply and changes nothing.
//
// Replication (options.replication = backup; ps/replication.h): this server holds shard `rank`
// and, in a second PsServer of its own, the shard before it in the ring (rank - 1 while no
// server joined or left; FollowRing moves it with the layout) (one worker, so forwarded requests apply
// in the order they were applied where the shard is served). Each holds its shard in one role:
// serving (it applies a push, clock or createTable and forwards it to the shard's other holder
// under one lock, so the forwards leave in apply order, and answers the sender once that one
// acknowledged), backup (it applies what the serving holder forwards; it serves the shard once
// that one is dead: take-over, logged) or empty (a restarted server, until the serving holder's
// state transfer arrives; Joined() asks for it).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cluster/node.h"
#include "offload/row_store.h"
#include "ps/bsp_moves.h"
#include "ps/clock_members.h"
#include "ps/parked_quota.h"
#include "ps/layout.h"
#include "ps/migration.h"
#include "ps/read_ahead.h"
#include "ps/recent_ids.h"
#include "ps/replication.h"
#include "ps/sender_lanes.h"
#include "ps/server_options.h"
#include "ps/server_stores.h"
#include "ps/table.h"

namespace strata {

// Thread-safe. Serves through the Node it is given: construct before node.Join().
class PsServer {
 public:
  PsServer(Node& node, ServerOptions options, StoreFactory store_factory = {});
  // With stores that survive the process (TieredStores): a state transfer clears them first,
  // and the copy of another shard (replication) keeps its own (ServerStores::backup).
  PsServer(Node& node, ServerOptions options, ServerStores stores);
  ~PsServer();
  PsServer(const PsServer&) = delete;
  PsServer& operator=(const PsServer&) = delete;

  // Re-creates every table recorded in options.tables_file, opening each store through the
  // StoreFactory (a durable store reloads its shard), and remembers the push ids the stores
  // recorded with their updates, so retries of those pushes are answered as duplicates. Call
  // before node.Join(), so no request sees a table missing. OK if the file does not exist; Corruption if it is damaged;
  // FailedPrecondition if it has another format version (ps/table_file.h).
  Status RestoreTables();

  // Serves checkpoint `checkpoint` read-only (inference): reads the shard of every table that
  // each server of the training cluster wrote into it (ps/server_checkpoint.h) and keeps the
  // keys that server `rank` of `servers` holds. From then on pushes are refused, createTable
  // only matches a loaded table, pulls never wait for a clock, and a pull of a row the
  // checkpoint lacks is answered with the table's initializer without storing it (what the
  // training cluster's own evaluation read for a row it never trained). All or nothing: on an
  // error (naming the file) no table was added. Call before node.Join(), instead of
  // RestoreTables().
  Status LoadCheckpoint(const std::string& checkpoint, uint32_t rank, uint32_t servers);

  // Call after node.Join() (after TakeOver() for a joining server). A server of an elastic job
  // started again takes the layout of the view (AdoptViewLayout). With replication, a server
  // started again after being declared dead holds none of its shards: it asks the servers serving
  // them for a copy each (in the background, until they answer or the server stops) and is their
  // backup once it arrived; a joined server asks for a copy of the shard before it in the ring.
  void Joined();
  // A server the scheduler declared dead while it ran (Node::OnDeclaredDead). StepDown(): with
  // replication the other holders took its shards over meanwhile, so it serves and forwards
  // nothing more and holds no copy (both roles empty; the copy's first chunk clears the rest);
  // without, nothing moved and it keeps everything. CameBack(): registered again, it asks for
  // copies of both shards, as a restarted server does, and is their backup once they arrived.
  void StepDown();
  void CameBack();

  // Elastic jobs (cluster.elastic, ps/server_migrate.cc): a server started with --join calls
  // ExpectTakeOver() before node.Join(), so it answers pushes and pulls with Unavailable (the
  // clients retry) until TakeOver() has brought it the rows of its keys: it asks every older
  // server in turn to switch to a layout that includes it (PsLayout) and to send the rows (with
  // optimizer state), the push ids and the trainers' clocks of the keys that layout gives it.
  // An older server switches and lists the moving keys (its plan) under a lock that pushes and
  // pulls also take, so a push is applied before the switch (and moves with the row) or refused
  // after it (kLayoutMoved: the client sends it to the new server, which knows its id if the
  // first try was applied); the listed rows, frozen so, then travel in chunks of at most
  // options.migrate_chunk_mb that the joining server asks for one after another (ps/migration.h),
  // and the older server erases exactly them at the joining server's done. BSP tables: the
  // moving keys' accumulations of clocks not applied leave the older server's tables at the
  // switch and travel in the last chunk, with that server's record of its clocks; a trainer's
  // clock message that does not count the joining server yet is refused as moved from the switch
  // on (ClockRequest.servers), so it reaches the joining server too. The joining server applies
  // no BSP clock until it holds every older server's part, from the least applied clock among
  // them (ps/server_bsp_moves.cc).
  void ExpectTakeOver() { taking_over_ = joined_late_ = true; }
  Status TakeOver(Millis timeout);

  // Elastic jobs (ps/server_leave.cc): this server leaves the running job. Refused
  // (FailedPrecondition naming why, nothing changed) for server 0, the last live server, a server
  // holding chunks of a dense table (they stay on the first servers), while a server is joining,
  // or while it serves a checkpoint. Otherwise it switches to the layout without itself under
  // the lock pushes and pulls take (from then on it refuses every sparse key as moved), offers
  // every other live server the rows that layout gives it, with optimizer state, every push id it
  // remembers and the trainers' clocks (a migrateRows request each; a receiver asks for them in
  // chunks, as a joining server does, imports them and switches under its own lock, then
  // answers), deregisters (the view then shows it left, so clients place its keys elsewhere),
  // releases the lock and erases the rows it gave away. `timeout` bounds each offer and the
  // retries of each receiver; `while_frozen` (tests) runs just before deregistering. If the
  // first receiver refuses, nothing moved and the leave is undone; a later receiver's failure
  // loses the rows meant for it (logged, named in the error) and the server still leaves.
  Status HandOver(Millis timeout, const std::function<void()>& while_frozen = {});
  // Whether HandOver moved this server's keys away (it deregistered).
  bool handed_over() const { return handed_over_; }

  // Statistics as JSON (also the reply to getStats).
  std::string StatsJson() const;
  // The same, as one line for people: "8200 pulls, 8000 pushes (190/s), 300.6 MiB in, ...".
  std::string StatsLine() const;

  // The times /metrics shows as histograms (docs/metrics.md): a worker's time on each pull and
  // push (from taking it off its queue to its reply, or to parking a pull that waits for its
  // clock; queue wait excluded), and each table's store timings by table name.
  struct Timings {
    Histogram::Snapshot pull_seconds, push_seconds, save_seconds;  // save: saveTables (a trainer checkpoint)
    std::map<std::string, RowStoreStats> tables;
  };
  Timings ReadTimings() const;

 private:
  struct Table;
  struct Parked {  // a pull waiting for its clock, or a gradNorm request for its pushes
    Request request;
    Table* table;  // nullptr: a gradNorm request
    int64_t clock;
    std::string peer;  // its connection, for parked_quota_
    uint64_t bytes;    // its payload bytes, for parked_quota_
  };
  // The sender that counts for a request: the trainer a forwarded request came from.
  static uint32_t SenderOf(const Message& m) {
    const uint32_t origin = m.origin();
    return origin != kUnassignedNode ? origin : m.sender();
  }
  // Whether a request carries an origin: an update the shard's other holder forwarded (or, on a
  // replicaJoin, a fail-back's ask).
  static bool HasOrigin(const Message& m) { return m.origin() != kUnassignedNode; }
  struct Queued {
    Request request;
    uint32_t sender;  // as SenderLanes knows it
    bool keyed;
    bool laned = true;  // false: migrate and migrateRows, on the last worker outside the lanes
    // A parked pull or gradNorm request a node event made ready (ParkedToWorker): answered as
    // HandleParked does, outside the lanes.
    bool parked = false;
  };
  struct Worker {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<Queued> queue;
    std::thread thread;
  };

  enum class ShardRole { kUnknown, kServing, kBackup, kEmpty };  // kUnknown: the node's server before its first request
  // Where the serving holder forwards its updates: the shard's other holder (this incarnation).
  struct Replica {
    uint32_t rank = 0, incarnation = 0;
    std::string address;
    PeerId peer = kNoPeer;
    uint64_t copy = 0;  // the state transfer it was made from (0: the original backup)
    uint64_t forwarded = 0;  // updates forwarded to it since (HandBack)
  };
  static constexpr uint64_t kNoCopy = ~uint64_t{0};
  // A copy's chunks past its head unacknowledged at once (StreamCopy): with the head, all of the
  // shard that a copy holds in memory on its sender.
  static constexpr uint64_t kCopyWindow = 2;
  // The longest wait before asking again for a copy that keeps failing here (AskForCopy).
  static constexpr Millis kMaxCopyBackoff{5000};
  struct CopyProgress;  // a copy being sent: its chunks sent and acknowledged (server_transfer.cc)
  // The copy of shard `shard` held by `parent`, the node's own server (server_replication.cc):
  // no handler of its own on the node, one worker, no statistics thread, the parent's layout.
  PsServer(PsServer& parent, ServerOptions options, ServerStores stores, uint32_t shard, ShardRole role);
  void StartWorkers(int workers);
  void Dispatch(Request request);
  void Enqueue(SenderLanes<Queued>::Ready ready);
  // Hands a parked request made ready off the I/O thread to a worker (its sender's, outside the
  // lanes), which answers it as HandleParked does: a pull may wait there on migrate_mu_, which a
  // leaving server holds while it waits for replies the I/O thread delivers.
  void ParkedToWorker(Parked& parked);
  void RunWorker(Worker& w);
  void Handle(Request& request);
  // The requests that change state: the reply, or the error that changed nothing.
  Result<Message> CreateTable(const Request& request);
  Result<Message> Push(const Request& request);
  Result<Message> Clock(const Request& request, std::vector<Parked>* ready);
  void HandlePull(Request& request);
  // A parked request that became ready (or failed): a pull or a gradNorm request.
  void HandleParked(Parked& parked);
  // A BSP table just created (CreateTable): its first clock, the first this server still knows
  // the members of (clocks_forgotten_below_).
  void StartBspTable(uint32_t id);

  // Global gradient clipping (server_clip.cc). A gradNorm request: answered with the clock's
  // sum of squares over the clipped tables once their pushes are all here, else parked.
  void HandleGradNorm(Request& request);
  // Whether every pusher's pushes of `clock` to this server's chunks of the clipped tables
  // arrived. Expects clock_mu_ held, not tables_mu_. Sets *error if they never will.
  bool GradNormReadyLocked(int64_t clock, Status* error) const;
  // The clipped tables' combined gradients of `clock`, squared and summed (tables by id, chunks
  // in order). Expects clock_mu_ held.
  Message GradNormReplyLocked(const Request& request, int64_t clock) const;
  // Records a clock message's gradScale for `clock`: refused (naming it) if not a finite
  // number >= 0 or unlike the scale another trainer sent for that clock. Expects clock_mu_.
  Status TakeGradScaleLocked(int64_t clock, float scale, uint32_t sender);
  // The factor clipped tables apply `clock`'s gradients with (1: none sent). Expects clock_mu_.
  float GradScaleLocked(int64_t clock) const;

  // Replication (server_replication.cc).
  // The key range this instance holds: its node's rank, or the shard it holds the backup of.
  uint32_t Shard() const {
    const int of = backup_of_.load();
    return of >= 0 ? static_cast<uint32_t>(of) : static_cast<uint32_t>(node_.rank());
  }
  bool IsCopy() const { return parent_ != nullptr; }
  // Routes a request addressed to another shard to the copy. False if it was answered.
  bool RouteToBackup(Request& request);
  // The copy of the shard before this server's rank in the ring (ps/replication.h), made on
  // first use (nullptr without replication).
  PsServer* Copy();
  // Elastic servers in a replicated job (server_replication.cc): after this server's layout
  // changed (a server joined or left), the ring's holders follow it. The copy, when the ring
  // gives this server another shard to back up, drops what it held and asks that shard's server
  // for a copy; this server's own shard stops forwarding to a rank that is no longer its backup
  // (the new one asks for a copy), and when `gained` (rows of a leaving server came in) sends
  // its backup a fresh copy, since the backup holds none of those rows.
  void FollowRing(bool gained);
  // Whether a server joining or leaving may move this server's keys now: with replication, it
  // serves its own shard and its copy serves nothing (no holder took another's shard over).
  Status RingSettled();
  // Whether this request may be handled here; answers it with an error if not.
  bool Admit(Request& request);
  // Held while a state change is applied and its forward sent (with replication).
  std::unique_lock<std::mutex> ReplicationLock();
  // Under ReplicationLock's `lock`: whether a trainer's state change may still be applied here.
  // Admit let it in while this server served the shard; a hand-back or step-down since (they
  // change the role under the lock) means it would be applied here only, and is refused
  // (Unavailable, kNotServing: the trainer retries at the other holder).
  bool ServingLocked(Request& request, std::unique_lock<std::mutex>& lock);
  // Answers a state change: at once, or (serving, with a backup) once the backup acknowledged
  // its forwarded copy. `lock` is ReplicationLock()'s and released here.
  void Finish(Request& request, Result<Message> reply, std::unique_lock<std::mutex>& lock);
  // This shard's role; the node's own server resolves kUnknown from the view at its first use
  // (an original server serves its shard, a restarted one holds none of it).
  ShardRole RoleNow();
  // The rank of this shard's other holder.
  uint32_t OtherRank() const;
  // Serving: the backup to forward to, if any. Expects forward_mu_ held.
  Replica* ReplicaLocked();
  void OnServerEvent(const NodeEvent& e);  // the node's own server: for itself and its copy
  void OnHolderEvent(const NodeEvent& e);  // one shard's: its other holder died
  // State transfer (server_transfer.cc): the serving holder's answer to replicaJoin, the copy
  // of its shard as a stateTransfer message, and installing one.
  void HandleReplicaJoin(Request& request);
  // Fail-back (server_fail_back.cc). A server holding a whole copy of its own shard again (it
  // was declared dead and started again, or came back) asks the holder serving it, the next of
  // the ring, to hand it back: a replicaJoin whose origin is the asker itself. HandBack, there:
  // once the asker acknowledged every chunk of its copy, it stops serving under forward_mu_
  // (from then on it refuses the shard's trainers kNotServing and is its backup) and answers how
  // many updates it forwarded since the copy; the asker serves the shard once it applied that
  // many (forwards_applied_), with the other holder as its backup. Until then both refuse, and
  // the trainers' retries go back and forth between them.
  void StartFailBack();
  void FailBack(const std::atomic<bool>& stop);
  void HandBack(Request& request);
  // Sends `to` (the shard's other holder, up) a fresh copy of this shard and forwards every
  // update after it there: the copy's head now, its tail streamed behind (StreamCopy). Expects
  // forward_mu_ held.
  Status SendCopyLocked(const NodeInfo& to);
  // The copy's head as stateTransfer chunks of at most server.migrate_chunk_mb (the layout of
  // migrateRows chunks: ps/migration.h): every table's spec, the BSP tables' rows, the push ids,
  // the trainers' clocks, and on its last chunk the BSP state, all as of now (*head_rows: the
  // rows it holds); `tail` gets the keys of the other tables' rows, which StreamCopy reads later.
  // Expects forward_mu_ held (no update meanwhile).
  Result<std::vector<Message>> CopyHeadLocked(MigrationPlan* tail, uint64_t* head_rows);
  // Sends one chunk of copy `copy` to `peer`, counted in `progress`; `last`: the copy's last.
  // Expects forward_mu_ held (the chunk goes in order with the forwards).
  void SendCopyChunkLocked(PeerId peer, Message chunk, uint64_t copy, const std::shared_ptr<CopyProgress>& progress,
                           bool last);
  // The copy's tail, on its own thread: a chunk at a time, each read under forward_mu_ when it
  // goes, with at most kCopyWindow chunks unacknowledged; it ends when the copy is dropped,
  // replaced or failed, or the server stops.
  void StreamCopy(PeerId peer, uint64_t copy, std::shared_ptr<CopyProgress> progress, MigrationPlan tail,
                  uint64_t total);
  // Reads the records of `keys` of table `spec` into `out` for a copy; an absent key (one that
  // left the shard) as its initializer. Expects tables_mu_ held.
  Status ReadForCopyLocked(const TableSpec& spec, std::span<const uint64_t> keys, std::span<float> out);
  Result<Message> InstallTransfer(const Request& request);
  // A copy's first chunk: drops every table (and, with durable stores, their files), the push
  // ids and the trainers' clocks this instance held.
  Status ClearForCopy();
  // Joined(): asks the other holder of this shard for a copy until it answers.
  void RequestCopy(const std::atomic<bool>& stop);
  void AskForCopy(const std::atomic<bool>& stop);  // RequestCopy's asking, one thread at a time
  // Joined() and CameBack(): RequestCopy for this shard and/or the copy's, in the background.
  void StartCopyRequests(PsServer* copy, bool own, bool other);
  // StepDown(), for this instance's shard: empty, forwarding nothing.
  void DropShard();
  // A forwarded update that the serving holder applied failed here (`why`: a full disk, or a
  // state that diverged): this instance's copy is not the shard's state any more, and the
  // serving holder drops it as its backup on this answer. So it stops being the backup (or
  // installing that copy), and asks for a fresh copy: a stale backup must never take over.
  void DropDivergedCopy(const Status& why);
  // Answers every parked request Unavailable `why` (the tables they point into are going).
  void FailParked(const std::string& why);
  // The sending side of a take-over or a leave (see TakeOver): a migrate request, answered
  // with the chunk of the asker's plan it names; a joining server's first ask switches the
  // layout and makes its plan (StartTakeOver), its done erases the rows of the plan.
  void HandleMigrate(Request& request);
  Result<std::shared_ptr<const MigrationPlan>> StartTakeOver(const Request& request);
  // A joined server taken out of the job before it committed its join (NodeInfo.joining; it died
  // or gave up): its rank leaves this server's layout too, which gives back the keys it was to
  // take (their rows are still here: a plan's rows are erased only on its done), and its plan goes.
  void RollBackJoin(const NodeInfo& gone);
  // The plans of every server that `before` gives this server's rows and `after` another:
  // per receiver rank in `to` (rank -> node id), its keys of every sparse table, and every push
  // id and trainer clock; the BSP accumulations of its keys leave the tables into its plan
  // (TakeBspMovesLocked). Internal if a row would go to a rank not in `to`. Expects migrate_mu_
  // held exclusively and clock_mu_. `owned`: the rows `before` gives this server.
  Result<std::map<uint32_t, MigrationPlan>> PlanMovesLocked(const PsLayout& before, const PsLayout& after,
                                                            const std::map<uint32_t, uint32_t>& to, uint64_t* owned);
  // The plan being taken by node `node` (nullptr: none); setting nullptr drops it.
  std::shared_ptr<const MigrationPlan> Outgoing(uint32_t node) const;
  void SetOutgoing(uint32_t node, std::shared_ptr<const MigrationPlan> plan);
  // Erases the rows of plans once they live on their receivers (logged, not failed).
  void EraseMoved(const std::vector<const MigrationPlan*>& plans);
  uint64_t MigrateChunkBytes() const { return static_cast<uint64_t>(options_.migrate_chunk_mb * 1048576.0); }
  // A live server's side of another's HandOver: a migrateRows request (server_leave.cc).
  void HandleHandOver(Request& request);
  // Asks server `from` for the chunks `puller` has not taken yet, importing each (every key must
  // be this server's under `expect`); once one arrived, asks again after a lost reply until
  // `deadline`.
  Status PullRows(MigrationPuller& puller, const NodeInfo& from, const PsLayout& expect,
                  std::chrono::steady_clock::time_point deadline, BspMoves* bsp);
  // Adds the rows, push ids and clocks of an older server's migrateRows reply (a chunk, or a
  // replica's stateTransfer), and their number to *count. With `expect`, every key must be this
  // server's under it, checked before anything is added. `bsp`: a migration's last chunk's BSP
  // moves, read (and checked) into it, for the caller to install.
  Status ImportRows(const Message& reply, uint32_t from, const PsLayout* expect = nullptr, uint64_t* count = nullptr,
                    BspMoves* bsp = nullptr);

  // BSP accumulations moving with rows (server_bsp_moves.cc). Takes the accumulations of every
  // key that `before` gives this server and `after` another out of the BSP tables into that
  // receiver's plan (its rows are refused here from now on, so no clock applies them here), with
  // this server's record of its clocks. Expects clock_mu_ and tables_mu_ (shared) held.
  Status TakeBspMovesLocked(const PsLayout& before, const PsLayout& after, std::map<uint32_t, MigrationPlan>* plans);
  // Installs another server's moves (or this server's own, put back by a join rolled back or a
  // leave undone): a joining server still taking over keeps them for the clocks it will apply
  // (its applied clock is the least of its senders', set by FinishTakeOverBspLocked); any other
  // adds each to its clock's sums or staged pushes, applying at once those of a clock it applied
  // already, with that clock's mean. Expects clock_mu_ held.
  void InstallBspMovesLocked(const BspMoves& moves, const std::string& from);
  // The end of a take-over: the BSP tables start from the least applied clock of the servers
  // that gave rows. Expects clock_mu_ held.
  void FinishTakeOverBspLocked();
  // How many floats an entry of `key` holds in BSP table `table` here (its rows moving under
  // `expect`, when given, must be this server's).
  Result<uint32_t> BspEntryFloats(uint32_t table, uint64_t key, const PsLayout* expect);
  // Where keys live now: the job's first servers, and the servers of this server's layout.
  PsLayout KeyLayout() const;
  // A server of an elastic job started again after it died (Joined()): the layout the view shows
  // (every server that finished joining, those that left), which the others switched to while
  // it was down.
  void AdoptViewLayout();
  void SetLayoutLeft(std::vector<uint32_t> left) {
    std::lock_guard lock(layout_mu_);
    layout_left_ = std::move(left);
  }
  // Writes this server's shard of every table into the checkpoint the request names.
  void HandleSaveTables(Request& request);
  // createTable while serving a checkpoint: the served checkpoint's spec of `spec`'s table,
  // when their records agree.
  Result<TableSpec> ServedTable(const TableSpec& spec) const;
  void OnNodeEvent(const NodeEvent& event);
  void LogStats();
  // Makes the table (its store through the factory). Expects tables_mu_ held exclusively.
  Result<std::unique_ptr<Table>> MakeTableLocked(const TableSpec& spec);
  // Writes the specs of tables_ (plus `extra`) to options_.tables_file. Expects tables_mu_ held.
  Status RecordTablesLocked(const TableSpec* extra) const;

  Result<Table*> FindTable(uint32_t id);
  // Checks a push or pull's keys (and gradients) against the table and this shard.
  Status ValidateKeys(const Table& t, const Message& msg, bool with_grads, std::vector<uint64_t>* keys,
                      size_t* value_floats);
  Status AnswerPull(Table& t, Request& request, const std::vector<uint64_t>& keys, size_t floats);
  Result<Message> PullReply(Table& t, const Request& request, const std::vector<uint64_t>& keys, size_t floats);
  Result<Message> DensePullReply(Table& t, const Request& request, const std::vector<uint64_t>& keys, size_t floats);
  // A dense pull's reply from its chunks' snapshots (`values`, by key: consistent versions).
  Message DenseValuesReply(const Table& t, const Request& request, const std::vector<uint64_t>& keys,
                           const std::vector<std::shared_ptr<const float>>& values, size_t floats);
  // Answers on the receive thread a dense f32 pull whose chunks all have fresh snapshots (no
  // hop to a worker, no copy), when nothing of its sender is running or waiting (so the lanes'
  // order holds), its clock allows it and there is no replication; the layout, tables and
  // clock locks are only tried. False: it did nothing; the workers take the request.
  bool TryPullOnReceive(Request& request);
  // After a pull of dense table t: the chunks this server holds of the next dense table (the
  // one the trainer pulls next in forward order) are read ahead into DRAM (ps/read_ahead.h).
  // NextDenseTableLocked (tables_mu_ held) finds it, ReadTableAhead (null: nothing) reads it.
  void ReadNextTableAhead(const Table& t);
  Table* NextDenseTableLocked(const Table& t) const;
  void ReadTableAhead(Table* next);
  // Is a pull of `t` at `clock` allowed now? Expects clock_mu_ held. Sets *error if it never will.
  bool PullReadyLocked(const Table& t, int64_t clock, Status* error) const;
  int64_t MinClockLocked() const;
  // The name of a BSP table this server holds, if any. Takes tables_mu_.
  std::optional<std::string> BspTable() const;
  // The same, 0 with no trainer.
  int64_t MinClockOrZeroLocked() const;
  // Applies BSP accumulations up to the min clock and takes the parked pulls that became ready.
  void AdvanceLocked(std::vector<Parked>* ready);
  void TakeReadyLocked(std::vector<Parked>* ready);
  // A BSP table with pushers finished a clock before the clock messages: answers its pulls.
  void AdvanceEarly(Table& t);
  // State transfer: the BSP tables' applied clocks and accumulations (wire BspState) added to
  // the copy's last chunk (expects clock_mu_ and tables_mu_ held), and installed from it.
  void AddBspStateLocked(Message* last);
  Status InstallBspState(const Message& last);
  // Elastic BSP: `sender`'s staged pushes of `clock` join the clock's sums (it clocked it).
  // Expects clock_mu_ held.
  void FoldStagedLocked(int64_t clock, uint32_t sender);
  // Elastic BSP: `trainer` was declared dead: its clocks go on without it and its staged pushes
  // are dropped. Expects clock_mu_ held.
  // A trainer declared dead that registered again (stalled, or restarted at its rank): in a
  // fixed job it is a live trainer again, at the clock it had when it died (its clock messages
  // were refused since), so SSP bounds the others by it again (elastic: nothing).
  void TrainerCameBack(const NodeInfo& trainer);
  void DropDeadTrainerLocked(const NodeInfo& trainer);

  Node& node_;
  const ServerOptions options_;
  // Replication: the shard this instance is the copy of (-1: it is the node's own server), its
  // role, the copy the node's own server holds (made on first use), the lock ordering applies
  // with their forwards, and what was forwarded.
  PsServer* const parent_ = nullptr;  // a copy's: the node's own server
  std::atomic<int> backup_of_{-1};
  std::atomic<ShardRole> role_{ShardRole::kUnknown};
  mutable std::mutex backup_mu_;
  std::unique_ptr<PsServer> backup_;
  std::mutex forward_mu_;
  // Serving: the backup forwarded to (none: the shard has no backup now); whether the original
  // backup was looked up yet; the copy (Replica::copy) whose transfer or forward failed, dropped
  // at the next update if it is still the replica's (a stale copy's failure drops nothing); the
  // copies sent so far.
  std::optional<Replica> replica_;
  bool replica_known_ = false;
  std::atomic<uint64_t> failed_copy_{kNoCopy};
  uint64_t copies_sent_ = 0;
  std::vector<std::thread> copy_threads_;  // Joined() and CameBack(): RequestCopy
  std::mutex streams_mu_;
  std::vector<std::thread> copy_streams_;  // StreamCopy, a thread per copy sent
  std::atomic<uint64_t> copy_window_max_{0};  // the most chunks of a copy unacknowledged at once
  // A copy being installed, chunk after chunk (the copy's one worker only): which copy
  // (stateTransfer.copy), whether its first chunk arrived, the rows it announced and those taken
  // so far. RequestCopy watches the rest: when a chunk last arrived, whether the copy failed
  // here, and how often it asked again.
  uint64_t install_copy_ = 0;
  uint32_t install_sender_ = kUnassignedNode;  // the node install_copy_ came from
  std::atomic<bool> installing_{false};  // atomic: DropDivergedCopy ends it from any worker
  uint64_t install_total_ = 0, install_rows_ = 0, install_chunks_ = 0;
  // The copy's head is installed (its BSP state included): forwards apply from now on, between
  // the tail's chunks (Admit), each chunk's rows overwriting what forwards wrote before it.
  std::atomic<bool> install_forwards_{false};
  std::atomic<uint64_t> forwards_while_installing_{0};
  std::atomic<uint64_t> diverged_copies_{0};  // copies dropped here for a forward that failed (DropDivergedCopy)
  std::atomic<int64_t> install_heard_ms_{0};
  std::atomic<bool> copy_failed_{false};
  std::atomic<bool> requesting_copy_{false};  // a RequestCopy runs for this shard
  std::atomic<uint64_t> ring_moves_{0};        // a copy: how often FollowRing gave it another shard
  std::atomic<uint64_t> acked_copy_{kNoCopy};   // serving: the last copy its backup acknowledged whole
  std::atomic<uint64_t> forwards_applied_{0};   // a backup: forwarded updates applied since its copy
  std::atomic<bool> failing_back_{false};       // a FailBack runs
  std::atomic<uint64_t> fail_backs_{0};         // shards handed back to their own server (either side)
  std::atomic<uint64_t> copy_asks_again_{0};
  std::atomic<uint64_t> forwards_{0}, replicated_bytes_{0}, forward_errors_{0}, transferred_rows_{0};
  // Set by LoadCheckpoint before the node joins, read-only after: the checkpoint served
  // read-only (empty: training) and how many rows it gave this server.
  std::string serving_;
  uint64_t loaded_rows_ = 0;
  ServerStores stores_;  // stores_.make always set

  mutable std::shared_mutex tables_mu_;
  std::map<uint32_t, std::unique_ptr<Table>> tables_;

  mutable std::mutex clock_mu_;  // guards trainer clocks, BSP state and parked pulls
  std::map<uint32_t, int64_t> trainer_clock_;  // live trainers: clocks finished
  std::map<uint32_t, std::string> lost_trainers_;  // node id -> description
  std::map<uint32_t, int64_t> lost_clocks_;        // their clocks when they died (TrainerCameBack)
  std::vector<Parked> parked_;
  std::map<int64_t, float> grad_scale_;  // clocks not yet applied: their clock messages' gradScale
  // Elastic jobs (cluster.elastic): a BSP clock is applied once the trainers of its step's split
  // all clocked it, as their mean (not at the live trainers' minimum clock).
  ClockMembers clock_members_;
  // The clock below which clock_members_ forgot its records (AdvanceLocked): the clocks every BSP
  // table applied, or with none, that every live trainer finished. A BSP table created later
  // starts here (CreateTable), since it could not complete a clock below.
  int64_t clocks_forgotten_below_ = 0;
  // Elastic BSP: how many trainers' pushes each recent applied clock was the mean of, for the
  // accumulations of a clock applied here that arrive later with moving rows.
  std::map<int64_t, uint32_t> applied_members_;
  // A joining server: per BSP table, the least applied clock of the servers that gave it rows.
  std::map<uint32_t, int64_t> takeover_applied_;
  std::atomic<uint64_t> bsp_moved_in_{0}, bsp_moved_out_{0}, bsp_applied_late_{0};
  std::atomic<uint64_t> bsp_dropped_{0};  // elastic BSP: keys or chunks of dead trainers' pushes dropped
  ParkedQuota parked_quota_;  // per peer, over parked_

  // Elastic: pushes and pulls hold it shared while they check a key's owner and apply; a
  // migrate switches the layout and copies the moving rows holding it exclusively.
  mutable std::shared_mutex migrate_mu_;
  std::atomic<uint32_t> layout_servers_{0};  // 0: the job's first servers
  mutable std::mutex layout_mu_;
  std::vector<uint32_t> layout_left_;  // ranks that left the layout (sorted)
  std::atomic<bool> taking_over_{false};
  std::atomic<bool> joined_late_{false};  // started with --join: no copy or backup from the start
  std::atomic<bool> leaving_{false}, handed_over_{false};
  std::atomic<uint64_t> rows_moved_in_{0}, rows_moved_out_{0}, rows_erased_{0};
  std::atomic<uint64_t> migrate_chunks_in_{0}, migrate_chunks_out_{0};
  std::atomic<uint64_t> migrate_asks_again_{0};  // a joiner's asks repeated after a lost or late reply
  std::atomic<uint64_t> joins_rolled_back_{0};   // RollBackJoin
  // The plans being taken from this server, by receiver node id (a joining server's until its
  // done, the receivers' of a leave until they all answered).
  mutable std::mutex outgoing_mu_;
  std::map<uint32_t, std::shared_ptr<const MigrationPlan>> outgoing_;
  std::atomic<uint64_t> moved_refused_{0};  // requests refused because a key moved (kLayoutMoved)
  // The node's event callbacks outlive this server: they check it is still there (under mu).
  struct EventGuard {
    std::mutex mu;
    bool alive = true;
  };
  std::shared_ptr<EventGuard> event_guard_ = std::make_shared<EventGuard>();
  // The same for the node's request handler: the node (and its I/O thread, which keeps taking
  // requests while this server is destroyed) outlives the server.
  std::shared_ptr<EventGuard> request_guard_ = std::make_shared<EventGuard>();

  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<SenderLanes<Queued>> lanes_;  // which worker runs what, made with workers_
  // Declared after tables_: it stops (and its reads of their stores end) before they go.
  ReadAhead read_ahead_;
  std::atomic<bool> stop_{false};
  std::thread stats_thread_;
  // RollBackJoin runs off the I/O thread that delivers events: it waits for migrate_mu_, which a
  // HandOver holds across calls whose replies that thread receives.
  std::mutex rollback_mu_;
  std::vector<std::thread> rollback_threads_;
  std::mutex stats_mu_;
  std::condition_variable stats_cv_;

  // Statistics (rates: divide by uptime_s, or difference two snapshots).
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::atomic<uint64_t> requests_{0}, pushes_{0}, pulls_{0}, keys_pushed_{0}, keys_pulled_{0};
  std::atomic<uint64_t> pulls_on_receive_{0};  // answered by TryPullOnReceive
  std::atomic<uint64_t> duplicates_{0};  // retried pushes answered without applying them again
  RecentIds push_ids_;
  std::atomic<uint64_t> bytes_in_{0}, bytes_out_{0}, apply_ns_{0}, errors_{0}, queued_{0};
  Histogram pull_seconds_, push_seconds_, save_seconds_;
};

}  // namespace strata
