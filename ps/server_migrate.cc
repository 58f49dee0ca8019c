// server_migrate.cc: PsServer's elastic take-over (cluster.elastic): a joined server asks every
// older server for the rows its layout gives it (TakeOver), and an older server switches its
// layout, plans what moves and sends it chunk by chunk (HandleMigrate, ps/migration.h); a server
// taking a leaving one's rows asks for them the same way (ps/server_leave.cc). See
// PsServer::ExpectTakeOver.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>

#include "ps/migration.h"
#include "ps/server.h"
#include "ps/server_table.h"

namespace strata {

PsLayout PsServer::KeyLayout() const {
  if (parent_) return parent_->KeyLayout();  // a copy: the layout of the server holding it
  const int first = node_.options().cluster.servers;
  PsLayout l;
  l.base = static_cast<uint32_t>(first > 0 ? first : std::max(1, node_.view().Count(Role::kServer)));
  l.servers = std::max(l.base, layout_servers_.load());
  std::lock_guard lock(layout_mu_);
  l.left = layout_left_;
  return l;
}

void PsServer::AdoptViewLayout() {
  const ClusterView view = node_.view();
  const NodeInfo* self = view.Find(Role::kServer, node_.rank());
  if (!self || self->incarnation == 0) return;
  uint32_t servers = 0;
  std::vector<uint32_t> left;
  for (const NodeInfo& n : view.WithRole(Role::kServer)) {
    if (n.joining && !n.left) continue;  // its keys have not moved yet
    servers = std::max(servers, static_cast<uint32_t>(n.rank) + 1);
    if (n.left && n.rank > 0) left.push_back(static_cast<uint32_t>(n.rank));
  }
  std::sort(left.begin(), left.end());
  std::unique_lock freeze(migrate_mu_);
  layout_servers_ = std::max(layout_servers_.load(), servers);
  SetLayoutLeft(left);
  const PsLayout now = KeyLayout();
  spdlog::info("server: started again in an elastic job: layout of {} servers, {} of them left", now.servers,
               now.left.size());
}

namespace {

std::vector<uint32_t> SortedRanks(capnp::List<uint32_t>::Reader list) {
  std::vector<uint32_t> ranks;
  for (uint32_t r : list) ranks.push_back(r);
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

std::string RankList(const std::vector<uint32_t>& ranks) {
  std::string out = "[";
  for (uint32_t r : ranks) out += (out.size() > 1 ? ", " : "") + std::to_string(r);
  return out + "]";
}

}  // namespace

Result<std::map<uint32_t, MigrationPlan>> PsServer::PlanMovesLocked(const PsLayout& before, const PsLayout& after,
                                                                    const std::map<uint32_t, uint32_t>& to,
                                                                    uint64_t* owned) {
  const uint32_t me = Shard();
  std::map<uint32_t, MigrationPlan> plans;
  for (const auto& [rank, node] : to) {
    MigrationPlan& p = plans[rank];
    p.to_node = node;
    p.servers = after.servers;
    p.left = after.left;
  }
  std::shared_lock tables_lock(tables_mu_);
  for (const auto& [id, t] : tables_) {
    if (t->spec.kind != TableKind::kSparse) continue;  // dense chunks stay on the first servers
    for (auto& [rank, p] : plans) p.tables.push_back({t->spec, {}});
    Status s = t->store->Scan([&](uint64_t key, std::span<const float>) {
      // Rows this server gave away earlier and has not erased yet stay out: only its own move on.
      if (before.SparseOwner(key) != me) return Status::OK();
      if (owned) ++*owned;
      const uint32_t owner = after.SparseOwner(key);
      if (owner == me) return Status::OK();
      auto p = plans.find(owner);
      if (p == plans.end()) {
        return Status::Internal("key " + std::to_string(key) + " moves to server " + std::to_string(owner) +
                                ", which is not one this server hands rows to");
      }
      p->second.tables.back().keys.push_back(key);  // Scan visits keys in increasing order
      return Status::OK();
    });
    STRATA_RETURN_IF_ERROR(s.WithContext("reading table \"" + t->spec.name + "\""));
  }
  std::vector<std::pair<uint32_t, uint64_t>> ids = push_ids_.Snapshot();
  const std::vector<std::pair<uint32_t, int64_t>> clocks(trainer_clock_.begin(), trainer_clock_.end());
  for (auto& [rank, p] : plans) {
    p.push_ids = ids;
    p.clocks = clocks;
  }
  STRATA_RETURN_IF_ERROR(TakeBspMovesLocked(before, after, &plans));
  return plans;
}

void PsServer::SetOutgoing(uint32_t node, std::shared_ptr<const MigrationPlan> plan) {
  std::lock_guard lock(outgoing_mu_);
  if (plan) {
    outgoing_[node] = std::move(plan);
  } else {
    outgoing_.erase(node);
  }
}

std::shared_ptr<const MigrationPlan> PsServer::Outgoing(uint32_t node) const {
  std::lock_guard lock(outgoing_mu_);
  auto it = outgoing_.find(node);
  return it == outgoing_.end() ? nullptr : it->second;
}

void PsServer::EraseMoved(const std::vector<const MigrationPlan*>& plans) {
  std::shared_lock layout_lock(migrate_mu_);  // the layout stays as it is meanwhile
  uint64_t erased = 0;
  for (const MigrationPlan* plan : plans) {
    for (const MigrationPlan::Rows& r : plan->tables) {
      auto t = FindTable(r.spec.id);
      // Nobody touches these keys here: pushes and pulls of them are refused as moved.
      auto n = t.ok() ? (*t)->store->Erase(r.keys) : Result<uint64_t>(t.status());
      if (!n.ok()) {
        spdlog::warn("server: erasing the rows of table \"{}\" that moved to node {}: {}", r.spec.name, plan->to_node,
                     n.status().ToString());
        continue;
      }
      erased += *n;
    }
  }
  rows_erased_ += erased;
  spdlog::info("server: erased {} rows that live on other servers now", erased);
}

void PsServer::HandleMigrate(Request& request) {
  auto fail = [&](const Status& s) {
    ++errors_;
    spdlog::warn("server: refused a migrate from node {}: {}", request.message().sender(), s.ToString());
    request.ReplyError(s);
  };
  const auto migrate = request.message().reader().getBody().getMigrate();
  const uint32_t from = request.message().sender();
  if (migrate.getDone()) {
    // The joining server holds every row it took: the copies here go (a repeat finds none).
    if (auto plan = Outgoing(from)) {
      SetOutgoing(from, nullptr);
      rows_moved_out_ += plan->rows();
      EraseMoved({plan.get()});
    }
    return request.Reply(request.MakeReply());
  }
  const std::optional<MigrationCursor> cursor = ReadCursor(migrate.getCursor(), migrate.hasCursor());
  std::shared_ptr<const MigrationPlan> plan;
  if (!cursor && !leaving_) {
    // A joining server's first ask (again, if the reply was lost): switch, and plan what moves.
    auto started = StartTakeOver(request);
    if (!started.ok()) return fail(started.status());
    plan = *started;
    FollowRing(/*gained=*/false);  // replication: the ring takes the joining server in
  } else {
    plan = Outgoing(from);
    if (!plan) {
      return fail(leaving_ ? Status::FailedPrecondition("migrate: this server is leaving the job; join again after it left")
                           : Status::FailedPrecondition("migrate.cursor from node " + std::to_string(from) +
                                                        ": no migration to it is under way here (the first ask has "
                                                        "no cursor)"));
    }
  }
  const std::vector<uint32_t> their_left = SortedRanks(migrate.getLeft());
  if (migrate.getServers() != plan->servers || their_left != plan->left) {
    return fail(Status::InvalidArgument("migrate.servers and migrate.left from node " + std::to_string(from) + " (" +
                                        std::to_string(migrate.getServers()) + " servers, left " + RankList(their_left) +
                                        "): its rows move under a layout of " + std::to_string(plan->servers) +
                                        " servers, left " + RankList(plan->left)));
  }
  auto read = [this](const TableSpec& spec, std::span<const uint64_t> keys, std::span<float> out) -> Status {
    STRATA_ASSIGN_OR_RETURN(Table * t, FindTable(spec.id));
    const size_t width = static_cast<size_t>(spec.RecordWidth());
    if (t->store->width() != static_cast<int>(width)) {
      return Status::Internal("table \"" + spec.name + "\" holds records of " + std::to_string(t->store->width()) +
                              " floats, its spec " + std::to_string(width));
    }
    return t->store->Read(keys, nullptr, [&](size_t i, std::span<const float> record) {
      std::memcpy(out.data() + i * width, record.data(), width * sizeof(float));
    });
  };
  Message reply = request.MakeReply();
  auto chunk = BuildMigrationChunk(*plan, cursor.value_or(plan->Start()), MigrateChunkBytes(), read, &reply);
  if (!chunk.ok()) return fail(chunk.status());
  ++migrate_chunks_out_;
  spdlog::debug("server: chunk at {} for node {}: {} rows, {} push ids, {} bytes{}",
                cursor ? std::to_string(cursor->row) : "the start", from, chunk->rows, chunk->push_ids, chunk->bytes,
                chunk->next ? "" : " (the last)");
  request.Reply(std::move(reply));
}

Result<std::shared_ptr<const MigrationPlan>> PsServer::StartTakeOver(const Request& request) {
  const auto migrate = request.message().reader().getBody().getMigrate();
  const uint32_t servers = migrate.getServers();
  const uint32_t me = static_cast<uint32_t>(node_.rank());
  ClusterView view = node_.view();
  const NodeInfo* to = view.Find(Role::kServer, static_cast<int>(servers) - 1);
  if (!to || to->id != request.message().sender()) {
    // The joining server's first ask may come before the scheduler's news of it.
    if (auto fresh = node_.RefreshView(); fresh.ok()) view = std::move(*fresh);
    to = view.Find(Role::kServer, static_cast<int>(servers) - 1);
  }
  if (to && to->left) {
    return Status::FailedPrecondition("migrate: " + to->Describe() +
                                      " left the job (its join was rolled back); start it again with --join");
  }
  if (servers == 0 || !to || to->id != request.message().sender() || servers - 1 <= me) {
    return Status::InvalidArgument("migrate to a layout of " + std::to_string(servers) +
                                   " servers: only the server of the last rank there, which joined after this "
                                   "one, takes keys over");
  }
  if (!serving_.empty()) return Status::FailedPrecondition("migrate: this server serves a checkpoint read-only");
  STRATA_RETURN_IF_ERROR(RingSettled().WithContext("migrate"));
  const std::vector<uint32_t> their_left = SortedRanks(migrate.getLeft());
  // Freeze: no push or pull checks an owner or applies while the layout switches and the moving
  // rows are listed; after it, pushes of those keys are refused with kLayoutMoved, so the rows
  // stay as listed until the joining server has taken them, chunk by chunk.
  std::unique_lock freeze(migrate_mu_);
  if (servers < KeyLayout().servers) {
    return Status::FailedPrecondition("migrate to " + std::to_string(servers) + " servers: this server's layout has " +
                                      std::to_string(KeyLayout().servers) + " already");
  }
  if (their_left != KeyLayout().left) {  // a leave under way: the joining server asks again
    return Status::Unavailable("migrate: the joining server counts servers " + RankList(their_left) +
                               " as left, this one " + RankList(KeyLayout().left));
  }
  // Clock messages see the switch whole: one counted here before it is in the plan's record,
  // one after it is refused if its sender does not count the joining server (Clock).
  std::lock_guard clocks(clock_mu_);
  const uint32_t target = servers - 1;
  // The layout before the joining server (also when it asks again after a lost reply) and with it.
  PsLayout before = KeyLayout();
  const uint32_t servers_before = before.servers;
  before.servers = target;
  layout_servers_ = servers;
  uint64_t owned = 0;
  auto plans = PlanMovesLocked(before, KeyLayout(), {{target, to->id}}, &owned);
  if (!plans.ok()) {
    layout_servers_ = servers_before;  // nothing moved: keep serving every key
    return plans.status().WithContext("migrate");
  }
  MigrationPlan& made = plans->at(target);
  bsp_moved_out_ += made.bsp.entries();
  // Asked again after a lost reply: the first plan took the BSP accumulations out of the tables.
  if (const auto earlier = Outgoing(to->id)) made.bsp.Absorb(earlier->bsp);
  auto plan = std::make_shared<const MigrationPlan>(std::move(made));
  SetOutgoing(to->id, plan);
  spdlog::info("server: layout of {} servers: {} of {} rows of {} sparse tables go to {}, in chunks of at most {} "
               "bytes (the copies here are refused from now on)",
               servers, plan->rows(), owned, plan->tables.size(), to->Describe(), MigrateChunkBytes());
  return plan;
}

Status PsServer::ImportRows(const Message& reply, uint32_t from, const PsLayout* expect, uint64_t* count,
                            BspMoves* bsp_out) {
  const std::string where = "taking over rows from server " + std::to_string(from);
  // A replica's copy of a whole shard (ps/server_transfer.cc) has the same layout.
  const bool copy = reply.op() == Op::STATE_TRANSFER;
  if (reply.op() != Op::MIGRATE_ROWS && !copy) {
    return Status::Internal(where + ": answered with " + std::string(OpName(reply.op())));
  }
  auto rows = copy ? reply.reader().getBody().getStateTransfer() : reply.reader().getBody().getMigrateRows();
  const size_t tables = rows.getTables().size();
  // A last chunk also carries its BSP tables' sums (InstallBspState or the caller reads them).
  const size_t bsp = rows.getBsp().size();
  if (reply.num_payloads() != 2 * tables + 1 + bsp) {
    return Status::InvalidArgument(where + ": " + std::to_string(reply.num_payloads()) + " payloads for " +
                                   std::to_string(tables) + " tables");
  }
  // Everything is checked before anything is added.
  for (size_t i = 0; i < tables; ++i) {
    const TableSpec spec = FromWire(rows.getTables()[static_cast<unsigned>(i)]);
    STRATA_RETURN_IF_ERROR(spec.Validate().WithContext(where));
    const PayloadInfo k = reply.payload_info(2 * i), r = reply.payload_info(2 * i + 1);
    const size_t n = k.shape.empty() ? 0 : static_cast<size_t>(k.shape[0]);
    if (k.dtype != DType::kI64 || k.shape.size() != 1 || r.dtype != DType::kF32 || r.shape.size() != 2 ||
        static_cast<size_t>(r.shape[0]) != n || r.shape[1] != spec.RecordWidth()) {
      return Status::InvalidArgument(where + ": table \"" + spec.name + "\": keys and records do not match its spec");
    }
    if (!expect) continue;
    if (spec.kind != TableKind::kSparse) {
      return Status::InvalidArgument(where + ": table \"" + spec.name + "\" is dense; only sparse rows move");
    }
    const uint32_t me = Shard();
    for (size_t j = 0; j < n; ++j) {
      uint64_t key;
      std::memcpy(&key, k.buffer->data() + j * sizeof(uint64_t), sizeof(key));
      if (const uint32_t owner = expect->SparseOwner(key); owner != me) {
        return Status::InvalidArgument(where + ": table \"" + spec.name + "\": key " + std::to_string(key) +
                                       " belongs to server " + std::to_string(owner) + ", not this one (" +
                                       std::to_string(me) + ")");
      }
    }
  }
  uint64_t imported = 0;
  for (size_t i = 0; i < tables; ++i) {
    const TableSpec spec = FromWire(rows.getTables()[static_cast<unsigned>(i)]);
    const PayloadInfo k = reply.payload_info(2 * i), r = reply.payload_info(2 * i + 1);
    const size_t n = k.shape.empty() ? 0 : static_cast<size_t>(k.shape[0]);
    Table* t = nullptr;
    {
      std::unique_lock lock(tables_mu_);
      auto it = tables_.find(spec.id);
      if (it == tables_.end()) {
        STRATA_ASSIGN_OR_RETURN(std::unique_ptr<Table> made, MakeTableLocked(spec));
        STRATA_RETURN_IF_ERROR(RecordTablesLocked(&spec));
        it = tables_.emplace(spec.id, std::move(made)).first;
      } else if (!(it->second->spec == spec)) {
        return Status::AlreadyExists(where + ": table " + std::to_string(spec.id) + " exists here with another spec");
      }
      t = it->second.get();
    }
    std::vector<uint64_t> keys(n);
    if (n) std::memcpy(keys.data(), k.buffer->data(), n * sizeof(uint64_t));
    std::vector<float> records(n * static_cast<size_t>(spec.RecordWidth()));
    if (!records.empty()) std::memcpy(records.data(), r.buffer->data(), records.size() * sizeof(float));
    const size_t width = static_cast<size_t>(spec.RecordWidth());
    // Through UpdateRecords, the one path that changes records, so that a dense record never
    // changes without its snapshot following (today only sparse rows arrive here: dense chunks
    // do not migrate).
    STRATA_RETURN_IF_ERROR(t->UpdateRecords(keys, [&](size_t j, std::span<float> record) {
      std::memcpy(record.data(), records.data() + j * width, width * sizeof(float));
    }).WithContext(where));
    imported += n;
  }
  const PayloadInfo ids = reply.payload_info(2 * tables);
  if (ids.dtype != DType::kI64 || ids.shape.size() != 2 || ids.shape[1] != 2) {
    return Status::InvalidArgument(where + ": the push ids are not an i64 [n, 2] payload");
  }
  std::vector<int64_t> pairs(static_cast<size_t>(ids.shape[0]) * 2);
  if (!pairs.empty()) std::memcpy(pairs.data(), ids.buffer->data(), pairs.size() * sizeof(int64_t));
  for (size_t i = 0; i < pairs.size(); i += 2) {
    push_ids_.Remember(static_cast<uint32_t>(pairs[i]), static_cast<uint64_t>(pairs[i + 1]));
  }
  {
    std::lock_guard lock(clock_mu_);
    const ClusterView view = node_.view();
    for (auto c : rows.getTrainerClocks()) {
      // A trainer that died or left since the sender counted it holds no clock back here.
      const NodeInfo* n = view.Find(c.getNode());
      if (lost_trainers_.count(c.getNode()) || !n || !n->alive) continue;
      int64_t& mine = trainer_clock_[c.getNode()];
      mine = std::max(mine, c.getClock());
    }
  }
  if (bsp_out && !rows.hasNext()) {
    // The tables are all here by the last chunk (each chunk lists those it passes).
    auto moves = ReadBspMoves(reply, rows, 2 * tables + 1, [&](uint32_t table, uint64_t key) {
      return BspEntryFloats(table, key, expect);
    });
    if (!moves.ok()) return moves.status().WithContext(where);
    *bsp_out = std::move(*moves);
  }
  if (count) *count += imported;
  spdlog::debug("server: took {} rows of {} tables and {} push ids from server {}", imported, tables, pairs.size() / 2,
                from);
  return Status::OK();
}

Status PsServer::PullRows(MigrationPuller& puller, const NodeInfo& from, const PsLayout& expect,
                          std::chrono::steady_clock::time_point deadline, BspMoves* bsp) {
  const uint32_t rank = static_cast<uint32_t>(from.rank);
  const Millis call_timeout(node_.options().transport.request_timeout_ms);
  auto import = [&](const Message& chunk) {
    STRATA_RETURN_IF_ERROR(ImportRows(chunk, rank, &expect, nullptr, bsp));
    ++migrate_chunks_in_;
    return Status::OK();
  };
  while (true) {
    auto peer = node_.rpc().Connect(from.address);
    Status s = peer.ok() ? puller.Pull(node_.rpc(), *peer, call_timeout, import) : peer.status();
    // Once a chunk arrived, the sender holds the plan: a lost or late reply is asked for again
    // (the same rows). Before, the caller decides (the layout to ask under may have changed).
    const bool retry = s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
    if (s.ok() || !retry || puller.chunks() == 0 || std::chrono::steady_clock::now() > deadline) {
      return s.WithContext("taking rows from " + from.Describe() + " (" + std::to_string(puller.chunks()) +
                           " chunks taken)");
    }
    spdlog::info("server: asking {} for a chunk again: {}", from.Describe(), s.ToString());
    ++migrate_asks_again_;
    std::this_thread::sleep_for(Millis(100));
  }
}

void PsServer::RollBackJoin(const NodeInfo& gone) {
  if (!node_.options().cluster.elastic || gone.rank <= 0 || gone.id == node_.id()) return;
  const uint32_t rank = static_cast<uint32_t>(gone.rank);
  std::unique_lock freeze(migrate_mu_);  // as a switch: no push or pull checks an owner meanwhile
  const std::shared_ptr<const MigrationPlan> plan = Outgoing(gone.id);
  SetOutgoing(gone.id, nullptr);
  // (servers n + 1, n left) places every key where (servers n) did: a server the joiner never
  // asked changes nothing, one it asked serves the keys of its plan again.
  PsLayout now = KeyLayout();
  if (now.Left(rank)) return;
  now.Leave(rank);
  layout_servers_ = std::max(layout_servers_.load(), rank + 1);
  SetLayoutLeft(now.left);
  ++joins_rolled_back_;
  if (plan && !plan->bsp.tables.empty()) {
    std::lock_guard clocks(clock_mu_);
    InstallBspMovesLocked(plan->bsp, "the join of " + gone.Describe() + ", rolled back");
  }
  spdlog::warn("server: {} left the job before it finished joining: its join is rolled back{}", gone.Describe(),
               plan ? ", and the " + std::to_string(plan->rows()) + " rows it was taking are served here again"
                    : " (it had taken nothing from this server)");
  freeze.unlock();
  FollowRing(/*gained=*/false);  // replication: the ring without it again
}

Status PsServer::TakeOver(Millis timeout) {
  const uint32_t me = static_cast<uint32_t>(node_.rank());
  layout_servers_ = me + 1;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (uint32_t r = 0; r < me; ++r) {
    std::optional<MigrationPuller> puller;
    while (true) {
      const ClusterView view = node_.view();
      // Servers that left hold no keys; the others count them out of the layout as this one does.
      std::vector<uint32_t> left;
      for (const NodeInfo& n : view.WithRole(Role::kServer)) {
        if (n.left && n.rank > 0) left.push_back(static_cast<uint32_t>(n.rank));
      }
      std::sort(left.begin(), left.end());
      // Once server r sent a chunk, its plan stands: the rest is asked for under the same layout.
      if (!puller || puller->chunks() == 0) {
        SetLayoutLeft(left);
        puller.emplace(me + 1, left);
      }
      const NodeInfo* n = view.Find(Role::kServer, static_cast<int>(r));
      if (n && n->left) break;
      Status s = Status::Unavailable("server " + std::to_string(r) + " is down");
      BspMoves bsp;
      if (n && n->alive) s = PullRows(*puller, *n, KeyLayout(), deadline, &bsp);
      if (s.ok()) {
        {
          std::lock_guard clocks(clock_mu_);
          InstallBspMovesLocked(bsp, n->Describe());
        }
        rows_moved_in_ += puller->rows();
        spdlog::info("server: took {} rows from {} in {} chunks", puller->rows(), n->Describe(), puller->chunks());
        break;
      }
      const bool retry = s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
      if (!retry || std::chrono::steady_clock::now() > deadline) {
        return s.WithContext("server " + std::to_string(me) + " joining the job: taking over its keys from server " +
                             std::to_string(r));
      }
      if (n && n->alive) ++migrate_asks_again_;  // the first ask (its plan) again
      std::this_thread::sleep_for(Millis(100));
      (void)node_.RefreshView();
    }
  }
  // Serve only once the scheduler knows: had it declared this server dead meanwhile, the older
  // servers would have taken its keys back already (RollBackJoin).
  STRATA_RETURN_IF_ERROR(node_.CommitJoin().WithContext("server " + std::to_string(me) + " joining the job"));
  std::vector<Parked> ready;
  {
    // BSP clocks apply from here on, from the least applied clock of the servers that gave rows.
    std::lock_guard clocks(clock_mu_);
    FinishTakeOverBspLocked();
    taking_over_ = false;
    AdvanceLocked(&ready);
  }
  for (Parked& p : ready) HandleParked(p);
  spdlog::info("server: took over {} rows; serving as server {} of {}", rows_moved_in_.load(), me, me + 1);
  // The older servers may erase what they gave now, exactly the rows of their plan (best effort:
  // a copy left there is refused anyway).
  for (uint32_t r = 0; r < me; ++r) {
    const ClusterView view = node_.view();
    const NodeInfo* n = view.Find(Role::kServer, static_cast<int>(r));
    if (!n || !n->alive || n->left) continue;
    auto peer = node_.rpc().Connect(n->address);
    if (!peer.ok()) continue;
    Message m;
    auto req = m.builder().getBody().initMigrate();
    req.setServers(me + 1);
    req.setDone(true);
    auto reply = node_.rpc().CallAndWait(*peer, std::move(m), Millis(node_.options().transport.request_timeout_ms));
    if (!reply.ok()) spdlog::warn("server: server {} did not erase the rows it gave: {}", r, reply.status().ToString());
  }
  return Status::OK();
}

}  // namespace strata
