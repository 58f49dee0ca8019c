// server.cc: PsServer: tables, validation and pushes (pulls in server_pull.cc, workers in
// server_workers.cc, clocks in server_clocks.cc, statistics in server_stats.cc).
#include "ps/server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/check.h"
#include "common/file.h"
#include "offload/memory_row_store.h"
#include "ps/optimizer.h"
#include "ps/server_table.h"
#include "ps/table_file.h"

namespace strata {

namespace {

constexpr size_t kMaxKeysPerRequest = 1 << 24;
// Free snapshot buffers a dense table keeps for reuse (each one chunk).
constexpr size_t kSnapshotPoolBuffers = 8;

RowStore::Init MakeInit(const TableSpec& spec) {
  return [spec](uint64_t key, std::span<float> r) {
    const uint32_t n = spec.RowFloats();
    std::fill(r.begin(), r.end(), 0.0f);
    if (spec.kind == TableKind::kSparse) {
      InitValues(spec.init, key, r.first(n));
    } else {
      InitDenseValues(spec.init, key * spec.chunk_floats, r.first(spec.ChunkLength(key)));
    }
    if (spec.optimizer.kind == OptimizerKind::kAdagrad) {
      std::fill(r.begin() + n, r.begin() + 2 * n, spec.optimizer.initial_accumulator);
    }
    SetRecordStep(r, 0);
  };
}

// Payload floats may sit at any address inside a received frame; copy only when misaligned.
const float* AlignedFloats(const Buffer& b, std::vector<float>* scratch) {
  if (reinterpret_cast<uintptr_t>(b.data()) % alignof(float) == 0) {
    return reinterpret_cast<const float*>(b.data());
  }
  scratch->resize(b.size() / sizeof(float));
  std::memcpy(scratch->data(), b.data(), b.size());
  return scratch->data();
}

// A gradient payload as floats: f32 as it lies (copied if misaligned), bf16 widened to f32 on
// arrival (gradients may travel in bf16; the servers keep and apply fp32).
const float* GradientFloats(const Buffer& b, DType dtype, std::vector<float>* scratch) {
  if (dtype == DType::kBF16) {
    const size_t n = b.size() / sizeof(uint16_t);
    scratch->resize(n);
    const auto* h = reinterpret_cast<const unsigned char*>(b.data());
    for (size_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, h + 2 * i, sizeof(v));
      (*scratch)[i] = BF16ToFloat(v);
    }
    return scratch->data();
  }
  return AlignedFloats(b, scratch);
}

}  // namespace


PsServer::PsServer(Node& node, ServerOptions options, StoreFactory store_factory)
    : PsServer(node, std::move(options), ServerStores{std::move(store_factory), {}, {}}) {}

PsServer::PsServer(Node& node, ServerOptions options, ServerStores stores)
    : node_(node),
      options_(options),
      stores_(std::move(stores)),
      parked_quota_(static_cast<uint64_t>(options.max_parked_per_peer),
                    static_cast<uint64_t>(options.max_parked_mb_per_peer) << 20) {
  if (!stores_.make) {
    stores_.make = [](const TableSpec& spec) -> Result<std::unique_ptr<RowStore>> {
      return std::unique_ptr<RowStore>(std::make_unique<MemoryRowStore>(spec.RecordWidth()));
    };
  }
  StartWorkers(options_.workers);
  node_.SetRequestHandler([this, node = &node_, guard = request_guard_](Request r) {
    std::lock_guard lock(guard->mu);
    if (!guard->alive) return r.ReplyError(Status::Unavailable("server " + std::to_string(node->rank()) + " is stopping"));
    Dispatch(std::move(r));
  });
  node_.OnEvent([this, guard = event_guard_](const NodeEvent& e) {
    std::lock_guard lock(guard->mu);
    if (!guard->alive) return;
    OnNodeEvent(e);
    OnServerEvent(e);
    if (e.kind == NodeEvent::Kind::kLeft && e.node.role == Role::kServer && e.node.joining) {
      std::lock_guard threads_lock(rollback_mu_);
      rollback_threads_.emplace_back([this, gone = e.node] { RollBackJoin(gone); });
    }
  });
  if (options_.stats_interval_ms > 0) {
    stats_thread_ = std::thread([this] {
      std::unique_lock lock(stats_mu_);
      while (!stop_) {
        stats_cv_.wait_for(lock, std::chrono::milliseconds(options_.stats_interval_ms));
        if (!stop_) LogStats();
      }
    });
  }
}

PsServer::~PsServer() {
  {
    // From here on requests are answered Unavailable without touching this server (they used
    // to be queued into it while, and after, it was destroyed: a hang at exit under load).
    std::lock_guard lock(request_guard_->mu);
    request_guard_->alive = false;
  }
  {
    std::lock_guard lock(event_guard_->mu);  // waits out an event being handled
    event_guard_->alive = false;
  }
  {
    std::lock_guard lock(stats_mu_);
    stop_ = true;
    stats_cv_.notify_all();
  }
  for (auto& w : workers_) {
    {
      std::lock_guard lock(w->mu);
      w->cv.notify_all();
    }
    w->thread.join();
  }
  if (stats_thread_.joinable()) stats_thread_.join();
  {
    std::lock_guard lock(rollback_mu_);  // no event adds one any more (event_guard_)
    for (std::thread& t : rollback_threads_) t.join();
  }
  // After the rollbacks: one may start a copy request (FollowRing).
  for (std::thread& t : copy_threads_) t.join();
  {
    std::lock_guard lock(streams_mu_);  // no copy starts any more: the workers are gone
    for (std::thread& t : copy_streams_) t.join();
  }
  // Forwards still in flight complete now, while this server exists (their callbacks use it).
  std::lock_guard lock(forward_mu_);
  if (replica_ && replica_->peer != kNoPeer) node_.rpc().FailCallsTo(replica_->peer, Status::Cancelled("the server is stopping"));
}

void PsServer::Handle(Request& request) {
  ++requests_;
  if (!Admit(request)) return;
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  switch (request.message().op()) {
    case Op::CREATE_TABLE: {
      std::unique_lock lock = ReplicationLock();
      if (!ServingLocked(request, lock)) return;
      return Finish(request, CreateTable(request), lock);
    }
    case Op::PUSH: {
      std::unique_lock lock = ReplicationLock();
      if (!ServingLocked(request, lock)) return;
      Finish(request, Push(request), lock);
      return push_seconds_.Observe(seconds());
    }
    case Op::PULL:
      HandlePull(request);
      return pull_seconds_.Observe(seconds());
    case Op::CLOCK: {
      std::vector<Parked> ready;
      std::unique_lock lock = ReplicationLock();
      if (!ServingLocked(request, lock)) return;
      Finish(request, Clock(request, &ready), lock);
      for (Parked& p : ready) HandleParked(p);  // re-checks and answers (or re-parks)
      return;
    }
    case Op::GRAD_NORM: return HandleGradNorm(request);
    case Op::MIGRATE: return HandleMigrate(request);
    case Op::MIGRATE_ROWS: return HandleHandOver(request);
    case Op::SAVE_TABLES:
      HandleSaveTables(request);
      return save_seconds_.Observe(seconds());
    case Op::REPLICA_JOIN: return HandleReplicaJoin(request);
    case Op::STATE_TRANSFER: {
      std::unique_lock<std::mutex> none;  // installing a copy forwards nothing
      return Finish(request, InstallTransfer(request), none);
    }
    case Op::GET_STATS: {
      Message reply = request.MakeReply();
      reply.builder().getBody().setStats(StatsJson());
      return request.Reply(std::move(reply));
    }
    default:
      ++errors_;
      return request.ReplyError(Status::Unimplemented(
          "the server does not serve " + std::string(OpName(request.message().op())) + " requests"));
  }
}

// ---------------------------------------------------------------------------------------------
// Tables

Result<Message> PsServer::CreateTable(const Request& request) {
  TableSpec spec = FromWire(request.message().reader().getBody().getCreateTable());
  STRATA_RETURN_IF_ERROR(spec.Validate());
  if (!serving_.empty()) {
    // The served spec is the authority: its dense placement, chosen for the servers that
    // trained it, is where these servers hold the chunks now; the trainer routes by it.
    STRATA_ASSIGN_OR_RETURN(const TableSpec served, ServedTable(spec));
    Message reply = request.MakeReply();
    ToWire(served, reply.builder().getBody().initCreateTable());
    return reply;
  }
  std::unique_lock lock(tables_mu_);
  if (auto it = tables_.find(spec.id); it != tables_.end()) {
    // Every trainer creates the tables it uses: the same spec again is fine.
    const TableSpec& held = it->second->spec;
    if (held == spec) return request.MakeReply();
    TableSpec placed = spec;
    placed.placement = held.placement;
    if (!(placed == held)) {
      // Most often a table an earlier job left in this server's store (restored at start).
      const std::string from = options_.tables_file.empty()
                                   ? ""
                                   : "; this server restores the tables recorded in " + options_.tables_file +
                                         " at start: if an earlier job left it there, remove that store's directory "
                                         "or give this job another server.store.path";
      return Status::AlreadyExists("table " + std::to_string(spec.id) + " exists with a different spec (\"" +
                                   held.name + "\": held " + held.Differences(placed) + ")" + from);
    }
    // The same table whose dense chunks sit at another placement: one restored from a store
    // written before byte-balanced placement (which kept the id layout), say. The chunks are
    // where they are; the trainer routes by the placement in this answer (PsClient::CreateTable).
    Message reply = request.MakeReply();
    ToWire(held, reply.builder().getBody().initCreateTable());
    return reply;
  }
  for (const auto& [id, t] : tables_) {
    if (t->spec.name == spec.name) {
      return Status::AlreadyExists("table name \"" + spec.name + "\" is taken by table " + std::to_string(id));
    }
  }
  auto made = MakeTableLocked(spec);
  if (!made.ok()) return made.status().WithContext("creating table \"" + spec.name + "\"");
  if (Status s = RecordTablesLocked(&spec); !s.ok()) return s.WithContext("recording table \"" + spec.name + "\"");
  spdlog::info("server: table {} \"{}\" ({}, {}) created{}", spec.id, spec.name,
               spec.kind == TableKind::kSparse ? "sparse dim " + std::to_string(spec.dim)
                                               : "dense " + std::to_string(spec.numel) + " floats",
               spec.consistency == Consistency::kBsp   ? "bsp"
               : spec.consistency == Consistency::kAsp ? "asp"
                                                       : "ssp " + std::to_string(spec.staleness),
               backup_of_ >= 0 ? " (backup of shard " + std::to_string(backup_of_) + ")" : "");
  tables_.emplace(spec.id, std::move(made).value());
  lock.unlock();
  if (spec.consistency == Consistency::kBsp) StartBspTable(spec.id);
  return request.MakeReply();
}

void PsServer::StartBspTable(uint32_t id) {
  std::vector<Parked> ready;
  {
    // clock_mu_ is taken after tables_mu_ was released (a copy's snapshot takes them the other
    // way round).
    std::lock_guard clocks(clock_mu_);
    auto found = FindTable(id);
    if (!found.ok()) return;  // a copy replaced the tables meanwhile
    {
      // A table created mid-job applies from the first clock whose members this server still
      // knows: those before are gone from clock_members_ (elastic jobs could never complete
      // them), and no trainer pushes for them any more.
      std::lock_guard bsp_lock((*found)->bsp_mu);
      (*found)->applied_clock = std::max((*found)->applied_clock, clocks_forgotten_below_);
    }
    AdvanceLocked(&ready);  // its first clock may be complete already
  }
  for (Parked& p : ready) HandleParked(p);
}

Result<std::unique_ptr<PsServer::Table>> PsServer::MakeTableLocked(const TableSpec& spec) {
  STRATA_ASSIGN_OR_RETURN(std::unique_ptr<RowStore> store, stores_.make(spec));
  auto t = std::make_unique<Table>();
  t->spec = spec;
  t->store = std::move(store);
  t->store_clock = t->store->clock();
  t->init = MakeInit(spec);
  t->slots = spec.StateSlots();
  if (spec.kind == TableKind::kDense) {
    t->snapshots = std::make_unique<DenseSnapshots>(spec.RowFloats(), kSnapshotPoolBuffers);
  }
  return t;
}

Status PsServer::RecordTablesLocked(const TableSpec* extra) const {
  if (options_.tables_file.empty()) return Status::OK();
  std::vector<const TableSpec*> specs;
  for (const auto& [id, t] : tables_) specs.push_back(&t->spec);
  if (extra) specs.push_back(extra);
  return WriteFileDurably(options_.tables_file, EncodeTableSpecs(specs));
}

Status PsServer::RestoreTables() {
  if (options_.tables_file.empty()) return Status::OK();
  auto bytes = ReadWholeFile(options_.tables_file);
  if (!bytes.ok()) return bytes.status().code() == StatusCode::kNotFound ? Status::OK() : bytes.status();
  STRATA_ASSIGN_OR_RETURN(std::vector<TableSpec> specs, DecodeTableSpecs(*bytes, options_.tables_file));
  std::unique_lock lock(tables_mu_);
  std::vector<UpdateId> applied;  // push ids the stores recorded with their updates
  for (const TableSpec& spec : specs) {
    auto made = MakeTableLocked(spec);
    if (!made.ok()) return made.status().WithContext("restoring table \"" + spec.name + "\"");
    const RowStoreStats st = (*made)->store->stats();
    auto ids = (*made)->store->RecordedUpdateIds();
    if (!ids.ok()) return ids.status().WithContext("restoring table \"" + spec.name + "\"");
    spdlog::info("server: table {} \"{}\" restored: {} records, clock {}, {} push ids", spec.id,
                 spec.name, st.records, (*made)->store_clock, ids->size());
    applied.insert(applied.end(), ids->begin(), ids->end());
    tables_.emplace(spec.id, std::move(made).value());
  }
  // Oldest first per sender (ids grow per sender), so RecentIds keeps the newest.
  std::sort(applied.begin(), applied.end(), [](const UpdateId& a, const UpdateId& b) {
    return a.sender != b.sender ? a.sender < b.sender : a.id < b.id;
  });
  for (const UpdateId& u : applied) push_ids_.Remember(u.sender, u.id);
  return Status::OK();
}

Result<PsServer::Table*> PsServer::FindTable(uint32_t id) {
  std::shared_lock lock(tables_mu_);
  auto it = tables_.find(id);
  if (it == tables_.end()) return Status::NotFound("no table " + std::to_string(id) + " on this server");
  return it->second.get();
}

Status PsServer::ValidateKeys(const Table& t, const Message& msg, bool with_grads,
                              std::vector<uint64_t>* keys, size_t* value_floats) {
  const TableSpec& spec = t.spec;
  // Built only for an error: a valid request allocates nothing here.
  auto where = [&] { return std::string(OpName(msg.op())) + " to table \"" + spec.name + "\": "; };
  if (msg.num_payloads() < 1) return Status::InvalidArgument(where() + "no keys");
  const PayloadInfo k = msg.payload_info(0);
  if (k.dtype != DType::kI64 || k.shape.size() != 1) {
    return Status::InvalidArgument(where() + "keys must be a 1-D i64 payload");
  }
  const size_t n = static_cast<size_t>(k.shape[0]);
  if (n > kMaxKeysPerRequest) return Status::InvalidArgument(where() + std::to_string(n) + " keys is too many");
  keys->resize(n);
  if (n) std::memcpy(keys->data(), k.buffer->data(), n * sizeof(uint64_t));
  const PsLayout layout = KeyLayout();
  const uint32_t me = Shard();
  // An update the shard's serving holder applied and forwarded is applied here too, whatever
  // this server's layout says: the two switch layouts at different moments while a server joins
  // or leaves, and a copy that refused what its primary applied would differ from it.
  const bool forwarded = HasOrigin(msg);
  *value_floats = 0;
  for (uint64_t key : *keys) {
    if (spec.kind == TableKind::kSparse) {
      if (const uint32_t owner = layout.SparseOwner(key); owner != me && !forwarded) {
        // FailedPrecondition: a client on an older layout refreshes it and sends the key there.
        ++moved_refused_;
        return Status::FailedPrecondition(where() + "key " + std::to_string(key) + " belongs to server " +
                                          std::to_string(owner) + " of " + std::to_string(layout.servers) +
                                          ", not " + std::to_string(me) + ": " + std::string(kLayoutMoved));
      }
    } else {
      if (key >= spec.NumChunks()) {
        return Status::InvalidArgument(where() + "chunk " + std::to_string(key) + " out of range (" +
                                       std::to_string(spec.NumChunks()) + " chunks)");
      }
      if (layout.DenseOwner(spec, key) != me) {
        return Status::InvalidArgument(where() + "chunk " + std::to_string(key) + " belongs to server " +
                                       std::to_string(layout.DenseOwner(spec, key)));
      }
    }
    *value_floats += t.ValueFloats(key);
  }
  const size_t want = with_grads ? (spec.kind == TableKind::kSparse ? 2 : 1 + n) : 1;
  if (msg.num_payloads() != want) {
    return Status::InvalidArgument(where() + "expected " + std::to_string(want) + " payloads, got " +
                                   std::to_string(msg.num_payloads()));
  }
  if (!with_grads) return Status::OK();
  for (size_t i = 1; i < want; ++i) {
    const PayloadInfo g = msg.payload_info(i);
    const size_t floats = spec.kind == TableKind::kSparse ? n * spec.dim : t.ValueFloats((*keys)[i - 1]);
    const bool f32 = g.dtype == DType::kF32 && g.buffer->size() == floats * sizeof(float);
    const bool bf16 = g.dtype == DType::kBF16 && g.buffer->size() == floats * sizeof(uint16_t);
    if (!f32 && !bf16) {
      return Status::InvalidArgument(where() + "gradient payload " + std::to_string(i) + " must be " +
                                     std::to_string(floats) + " f32 or bf16 values, got " +
                                     std::to_string(g.buffer->size()) + " bytes of " +
                                     std::string(DTypeName(g.dtype)));
    }
  }
  return Status::OK();
}

// ---------------------------------------------------------------------------------------------
// Push

Result<Message> PsServer::Push(const Request& request) {
  const Message& msg = request.message();
  auto push = msg.reader().getBody().getPush();
  const uint32_t sender = SenderOf(msg);
  // Held until the push is applied: a migrate copies rows either before or after it.
  std::shared_lock layout_lock(migrate_mu_);
  if (taking_over_) return TakingOver();
  STRATA_ASSIGN_OR_RETURN(Table * table, FindTable(push.getTable()));
  Table& t = *table;
  std::vector<uint64_t> keys;
  size_t floats = 0;
  STRATA_RETURN_IF_ERROR(ValidateKeys(t, msg, true, &keys, &floats));
  if (!serving_.empty()) {
    return Status::FailedPrecondition("push to table \"" + t.spec.name + "\": this server serves checkpoint " +
                                      serving_ + " read-only (inference pulls only)");
  }
  if (push.getReturnValues() && t.spec.consistency == Consistency::kBsp) {
    return Status::InvalidArgument("push-pull on BSP table \"" + t.spec.name + "\": pull at the next clock instead");
  }
  // A retry of a push this server applied (its reply was lost): answered, not applied again.
  // One sender's requests are handled in order on one worker, so a retry never races the first.
  const uint64_t push_id = push.getPushId();
  if (push_id != 0 && push_ids_.Seen(sender, push_id)) {
    ++duplicates_;
    if (push.getReturnValues()) return PullReply(t, request, keys, floats);
    return request.MakeReply();
  }
  const float lr = push.getLr();
  if (!std::isfinite(lr)) {
    return Status::InvalidArgument("push to table \"" + t.spec.name + "\": lr " + std::to_string(lr) +
                                   " is not a finite number (node " + std::to_string(sender) + ")");
  }
  // Gradient of key i, wherever its payload lives.
  std::vector<std::vector<float>> scratch(msg.num_payloads());
  std::vector<const float*> grad(keys.size());
  if (t.spec.kind == TableKind::kSparse) {
    const float* g = GradientFloats(msg.payload(1), msg.payload_info(1).dtype, &scratch[1]);
    for (size_t i = 0; i < keys.size(); ++i) grad[i] = g + i * t.spec.dim;
  } else {
    for (size_t i = 0; i < keys.size(); ++i) {
      grad[i] = GradientFloats(msg.payload(i + 1), msg.payload_info(i + 1).dtype, &scratch[i + 1]);
    }
  }
  ++pushes_;
  keys_pushed_ += keys.size();
  for (size_t i = 1; i < msg.num_payloads(); ++i) bytes_in_ += msg.payload(i).size();  // as sent (f32 or bf16)
  const auto start = std::chrono::steady_clock::now();

  if (t.spec.consistency == Consistency::kBsp) {
    std::unique_lock lock(t.bsp_mu);
    const int64_t clock = push.getClock();
    for (uint64_t key : keys) {  // every key checked before anything is added
      if (clock < t.NextClockLocked(key)) {
        return Status::FailedPrecondition("push to BSP table \"" + t.spec.name + "\" for clock " +
                                          std::to_string(clock) + " arrived after that clock was applied (node " +
                                          std::to_string(sender) + ")");
      }
    }
    if (t.spec.pushers > 0) {
      for (size_t i = 1; i < keys.size(); ++i) {
        if (std::find(keys.begin(), keys.begin() + i, keys[i]) != keys.begin() + i) {
          return Status::InvalidArgument("push to table \"" + t.spec.name + "\": chunk " + std::to_string(keys[i]) +
                                         " twice in one push");
        }
      }
    }
    // Elastic: a trainer's pushes wait apart until its clock message (server_table.h, staged).
    const bool staged = node_.options().cluster.elastic && t.spec.pushers == 0;
    if (staged && t.dead_pushers.count(sender)) {
      return Status::FailedPrecondition("push to BSP table \"" + t.spec.name + "\" for clock " +
                                        std::to_string(clock) + " from node " + std::to_string(sender) +
                                        ", which was declared dead: its clocks are no longer counted");
    }
    for (uint64_t key : keys) {
      const std::optional<float> other = t.LrLocked(clock, key);
      if (other && *other != lr) {
        return Status::InvalidArgument("push to BSP table \"" + t.spec.name + "\" for clock " + std::to_string(clock) +
                                       " carries lr " + std::to_string(lr) + ", the clock's other pushes " +
                                       std::to_string(*other) + " (node " + std::to_string(sender) + ")");
      }
    }
    auto& acc = staged ? t.staged[clock][sender] : t.pending[clock];
    for (size_t i = 0; i < keys.size(); ++i) {
      const uint32_t len = t.ValueFloats(keys[i]);
      Table::Acc& a = acc[keys[i]];
      if (a.sum.empty()) a.sum.assign(len, 0.0f);
      a.lr = lr;
      for (uint32_t j = 0; j < len; ++j) a.sum[j] += grad[i][j];
      ++a.pushes;
    }
    if (t.spec.clipped) {
      lock.unlock();
      AdvanceEarly(t);  // held for the clock's gradScale; wakes gradNorm requests this completes
    } else if (t.spec.pushers > 0) {
      if (t.my_chunks == 0) {
        t.my_chunks = ChunksOn(t.spec, Shard(), KeyLayout().base);
      }
      for (uint64_t key : keys) t.ApplyCompleteLocked(key);
      const bool advanced = t.ReadyClockLocked() > t.applied_clock;
      lock.unlock();
      if (advanced) AdvanceEarly(t);
    }
  } else {
    OptimizerSpec o = t.spec.optimizer;
    if (lr >= 0) o.lr = lr;
    // The id is recorded with the update (in the WAL of a durable store), so a restarted
    // server still answers a retry of it as a duplicate (RestoreTables).
    auto apply = [&](size_t i, std::span<float> record) {
      ApplyUpdate(o, t.slots, record, static_cast<int>(t.ValueFloats(keys[i])), grad[i], 1.0f);
    };
    const UpdateId id{sender, push_id};
    Status s = t.UpdateRecords(keys, apply, push_id != 0 ? &id : nullptr);
    if (!s.ok()) return s.WithContext("push to table \"" + t.spec.name + "\"");
  }
  apply_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  if (push_id != 0) push_ids_.Remember(sender, push_id);  // applied (or accumulated)
  if (push.getReturnValues()) return PullReply(t, request, keys, floats);
  return request.MakeReply();
}

}  // namespace strata
