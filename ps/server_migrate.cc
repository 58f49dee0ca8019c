// server_migrate.cc: PsServer's elastic take-over (cluster.elastic): a joined server asks every
// older server for the rows its layout gives it (TakeOver), and an older server switches its
// layout and sends them (HandleMigrate). See PsServer::ExpectTakeOver.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "ps/server.h"
#include "ps/server_table.h"

namespace strata {

PsLayout PsServer::KeyLayout() const {
  const int first = node_.options().cluster.servers;
  PsLayout l;
  l.base = static_cast<uint32_t>(first > 0 ? first : std::max(1, node_.view().Count(Role::kServer)));
  l.servers = std::max(l.base, layout_servers_.load());
  std::lock_guard lock(layout_mu_);
  l.left = layout_left_;
  return l;
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

Status PsServer::EraseRowsNotOwned() {
  std::shared_lock layout_lock(migrate_mu_);  // the layout stays as it is meanwhile
  const PsLayout layout = KeyLayout();
  const uint32_t me = Shard();
  std::shared_lock tables_lock(tables_mu_);
  uint64_t erased = 0;
  for (const auto& [id, t] : tables_) {
    if (t->spec.kind != TableKind::kSparse) continue;
    std::vector<uint64_t> keys;
    STRATA_RETURN_IF_ERROR(t->store->Scan([&](uint64_t key, std::span<const float>) {
      if (layout.SparseOwner(key) != me) keys.push_back(key);
      return Status::OK();
    }).WithContext("erasing moved rows of table \"" + t->spec.name + "\""));
    // Nobody touches these keys here: pushes and pulls of them are refused as moved.
    STRATA_ASSIGN_OR_RETURN(const uint64_t n, t->store->Erase(keys));
    erased += n;
  }
  rows_erased_ += erased;
  spdlog::info("server: erased {} rows that live on other servers now", erased);
  return Status::OK();
}

void PsServer::HandleMigrate(Request& request) {
  auto fail = [&](const Status& s) {
    ++errors_;
    spdlog::warn("server: refused a migrate from node {}: {}", request.message().sender(), s.ToString());
    request.ReplyError(s);
  };
  const auto migrate = request.message().reader().getBody().getMigrate();
  const uint32_t servers = migrate.getServers();
  const uint32_t me = static_cast<uint32_t>(node_.rank());
  const ClusterView view = node_.view();
  const NodeInfo* to = view.Find(Role::kServer, static_cast<int>(servers) - 1);
  if (servers == 0 || !to || to->id != request.message().sender() || servers - 1 <= me) {
    return fail(Status::InvalidArgument("migrate to a layout of " + std::to_string(servers) +
                                        " servers: only the server of the last rank there, which joined after this "
                                        "one, takes keys over"));
  }
  if (!serving_.empty()) return fail(Status::FailedPrecondition("migrate: this server serves a checkpoint read-only"));
  if (leaving_) return fail(Status::FailedPrecondition("migrate: this server is leaving the job; join again after it left"));
  if (migrate.getDone()) {
    // The joining server holds every row it took: the copies here go.
    if (Status s = EraseRowsNotOwned(); !s.ok()) return fail(s);
    return request.Reply(request.MakeReply());
  }
  const std::vector<uint32_t> their_left = SortedRanks(migrate.getLeft());
  // Freeze: no push or pull checks an owner or applies while the layout switches and the moving
  // rows are copied; after it, pushes of those keys are refused with kLayoutMoved.
  std::unique_lock freeze(migrate_mu_);
  if (servers < KeyLayout().servers) {
    return fail(Status::FailedPrecondition("migrate to " + std::to_string(servers) + " servers: this server's layout has " +
                                           std::to_string(KeyLayout().servers) + " already"));
  }
  if (their_left != KeyLayout().left) {  // a leave under way: the joining server asks again
    return fail(Status::Unavailable("migrate: the joining server counts servers " + RankList(their_left) +
                                    " as left, this one " + RankList(KeyLayout().left)));
  }
  std::shared_lock tables_lock(tables_mu_);
  for (const auto& [id, t] : tables_) {
    if (t->spec.consistency == Consistency::kBsp) {
      return fail(Status::FailedPrecondition("a server cannot join: table \"" + t->spec.name +
                                             "\" is BSP (sync.consistency bsp); servers join ASP and SSP jobs only"));
    }
  }
  const uint32_t target = servers - 1;
  // The layout before the joining server (also when it asks again after a lost reply) and with it.
  PsLayout before = KeyLayout();
  const uint32_t servers_before = before.servers;
  before.servers = target;
  layout_servers_ = servers;
  const PsLayout layout = KeyLayout();
  Message reply = request.MakeReply();
  auto rows = reply.builder().getBody().initMigrateRows();
  std::vector<const TableSpec*> specs;
  uint64_t moved = 0, owned = 0;
  for (const auto& [id, tp] : tables_) {
    if (tp->spec.kind != TableKind::kSparse) continue;  // dense chunks stay on the first servers
    auto keys = std::make_shared<std::vector<uint64_t>>();
    auto records = std::make_shared<std::vector<float>>();
    const int width = tp->store->width();
    Status s = tp->store->Scan([&](uint64_t key, std::span<const float> record) {
      // Rows this server gave away earlier and has not erased yet stay out: only its own move on.
      if (before.SparseOwner(key) != me) return Status::OK();
      ++owned;
      if (layout.SparseOwner(key) != target) return Status::OK();
      keys->push_back(key);
      records->insert(records->end(), record.begin(), record.end());
      return Status::OK();
    });
    if (!s.ok()) {
      layout_servers_ = servers_before;  // nothing moved: keep serving every key
      return fail(s.WithContext("migrate: reading table \"" + tp->spec.name + "\""));
    }
    const int64_t n = static_cast<int64_t>(keys->size());
    reply.AddPayload(DType::kI64, {n}, Buffer(keys->data(), keys->size() * sizeof(uint64_t), keys));
    reply.AddPayload(DType::kF32, {n, width}, Buffer(records->data(), records->size() * sizeof(float), records));
    specs.push_back(&tp->spec);
    moved += static_cast<uint64_t>(n);
  }
  auto list = rows.initTables(static_cast<unsigned>(specs.size()));
  for (unsigned i = 0; i < specs.size(); ++i) ToWire(*specs[i], list[i]);
  auto ids = std::make_shared<std::vector<int64_t>>();
  for (const auto& [sender, id] : push_ids_.Snapshot()) {
    ids->push_back(sender);
    ids->push_back(static_cast<int64_t>(id));
  }
  reply.AddPayload(DType::kI64, {static_cast<int64_t>(ids->size() / 2), 2},
                   Buffer(ids->data(), ids->size() * sizeof(int64_t), ids));
  {
    std::lock_guard clocks(clock_mu_);
    auto c = rows.initTrainerClocks(static_cast<unsigned>(trainer_clock_.size()));
    unsigned i = 0;
    for (const auto& [node, clock] : trainer_clock_) {
      c[i].setNode(node);
      c[i++].setClock(clock);
    }
  }
  rows_moved_out_ += moved;  // the same rows again if the joined server asks again (erased at its done)
  spdlog::info("server: layout of {} servers: {} of {} rows of {} sparse tables go to {} (the copies here are "
               "refused from now on)",
               servers, moved, owned, specs.size(), to->Describe());
  request.Reply(std::move(reply));
}

Status PsServer::ImportRows(const Message& reply, uint32_t from, const PsLayout* expect) {
  const std::string where = "taking over rows from server " + std::to_string(from);
  // A replica's copy of a whole shard (ps/server_transfer.cc) has the same layout.
  const bool copy = reply.op() == Op::STATE_TRANSFER;
  if (reply.op() != Op::MIGRATE_ROWS && !copy) {
    return Status::Internal(where + ": answered with " + std::string(OpName(reply.op())));
  }
  auto rows = copy ? reply.reader().getBody().getStateTransfer() : reply.reader().getBody().getMigrateRows();
  const size_t tables = rows.getTables().size();
  if (reply.num_payloads() != 2 * tables + 1) {
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
    STRATA_RETURN_IF_ERROR(t->store->Update(keys, t->init, [&](size_t j, std::span<float> record) {
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
  rows_moved_in_ += imported;
  spdlog::info("server: took over {} rows of {} tables and {} push ids from server {}", imported, tables,
               pairs.size() / 2, from);
  return Status::OK();
}

Status PsServer::TakeOver(Millis timeout) {
  const uint32_t me = static_cast<uint32_t>(node_.rank());
  layout_servers_ = me + 1;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (uint32_t r = 0; r < me; ++r) {
    while (true) {
      const ClusterView view = node_.view();
      // Servers that left hold no keys; the others count them out of the layout as this one does.
      std::vector<uint32_t> left;
      for (const NodeInfo& n : view.WithRole(Role::kServer)) {
        if (n.left && n.rank > 0) left.push_back(static_cast<uint32_t>(n.rank));
      }
      std::sort(left.begin(), left.end());
      SetLayoutLeft(left);
      const NodeInfo* n = view.Find(Role::kServer, static_cast<int>(r));
      if (n && n->left) break;
      Status s = Status::Unavailable("server " + std::to_string(r) + " is down");
      if (n && n->alive) {
        auto peer = node_.rpc().Connect(n->address);
        Message m;
        auto req = m.builder().getBody().initMigrate();
        req.setServers(me + 1);
        auto list = req.initLeft(static_cast<unsigned>(left.size()));
        for (unsigned i = 0; i < left.size(); ++i) list.set(i, left[i]);
        auto reply = peer.ok() ? node_.rpc().CallAndWait(*peer, std::move(m), Millis(node_.options().transport.request_timeout_ms))
                               : Result<Message>(peer.status());
        const PsLayout expect = KeyLayout();
        s = reply.ok() ? ImportRows(*reply, r, &expect) : reply.status();
      }
      if (s.ok()) break;
      const bool retry = s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
      if (!retry || std::chrono::steady_clock::now() > deadline) {
        return s.WithContext("server " + std::to_string(me) + " joining the job: taking over its keys from server " +
                             std::to_string(r));
      }
      std::this_thread::sleep_for(Millis(100));
      (void)node_.RefreshView();
    }
  }
  taking_over_ = false;
  spdlog::info("server: took over {} rows; serving as server {} of {}", rows_moved_in_.load(), me, me + 1);
  // The older servers may erase what they gave now (best effort: a copy left there is refused
  // anyway, and erased at the next sweep).
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
