// migration.cc: MigrationPlan's chunks (the sender's side) and MigrationPuller (the receiver's).
#include "ps/migration.h"

#include <algorithm>
#include <memory>
#include <tuple>

namespace strata {
namespace {

constexpr uint64_t kKeyBytes = sizeof(uint64_t);
constexpr uint64_t kPushIdBytes = 2 * sizeof(int64_t);

// Cursors in the order chunks are sent (tables by id, then the push ids).
std::tuple<bool, uint32_t, uint64_t> Order(const MigrationCursor& c) {
  return {c.push_ids, c.push_ids ? 0 : c.table, c.row};
}

std::string Describe(const MigrationCursor& c) {
  return c.push_ids ? "push id " + std::to_string(c.row)
                    : "table " + std::to_string(c.table) + " row " + std::to_string(c.row);
}

// One table's rows [begin, end) in a chunk.
struct Slice {
  const MigrationPlan::Rows* rows;
  uint64_t begin, end;
};

}  // namespace

uint64_t MigrationPlan::rows() const {
  uint64_t n = 0;
  for (const Rows& t : tables) n += t.keys.size();
  return n;
}

MigrationCursor MigrationPlan::Start() const {
  if (tables.empty()) return MigrationCursor{0, 0, true};
  return MigrationCursor{tables.front().spec.id, 0, false};
}

std::optional<MigrationCursor> ReadCursor(wire::MigrateCursor::Reader in, bool present) {
  if (!present) return std::nullopt;
  return MigrationCursor{in.getTable(), in.getRow(), in.getPushIds()};
}

void WriteCursor(const MigrationCursor& in, wire::MigrateCursor::Builder out) {
  out.setTable(in.table);
  out.setRow(in.row);
  out.setPushIds(in.push_ids);
}

Result<ChunkInfo> BuildMigrationChunk(const MigrationPlan& plan, const MigrationCursor& from, uint64_t budget_bytes,
                                      const ReadRecords& read, Message* reply, bool state_transfer) {
  // Where the chunk starts: a table of the plan (and a row within its moving rows), or an id.
  size_t t = plan.tables.size();
  if (!from.push_ids) {
    auto it = std::find_if(plan.tables.begin(), plan.tables.end(),
                           [&](const MigrationPlan::Rows& r) { return r.spec.id == from.table; });
    if (it == plan.tables.end()) {
      std::string ids;
      for (const auto& r : plan.tables) ids += (ids.empty() ? "" : ", ") + std::to_string(r.spec.id);
      return Status::InvalidArgument("migrate.cursor.table " + std::to_string(from.table) +
                                     ": not a table this migration moves rows of (tables [" + ids + "])");
    }
    if (from.row > it->keys.size()) {
      return Status::InvalidArgument("migrate.cursor.row " + std::to_string(from.row) + " out of range: table \"" +
                                     it->spec.name + "\" moves " + std::to_string(it->keys.size()) + " rows");
    }
    t = static_cast<size_t>(it - plan.tables.begin());
  } else if (from.row > plan.push_ids.size()) {
    return Status::InvalidArgument("migrate.cursor.row " + std::to_string(from.row) + " out of range: " +
                                   std::to_string(plan.push_ids.size()) + " push ids move");
  }

  ChunkInfo info;
  uint64_t items = 0;
  // At least one item per chunk, however small the budget, so every chunk moves on.
  auto room = [&](uint64_t cost) { return items == 0 || info.bytes + cost <= budget_bytes; };
  std::vector<Slice> slices;
  uint64_t row = from.push_ids ? 0 : from.row;
  for (; t < plan.tables.size() && !info.next; ++t, row = 0) {
    const MigrationPlan::Rows& r = plan.tables[t];
    const uint64_t cost = kKeyBytes + sizeof(float) * static_cast<uint64_t>(r.spec.RecordWidth());
    uint64_t end = row;
    for (; end < r.keys.size() && room(cost); ++end, ++items) info.bytes += cost;
    if (end > row || r.keys.empty()) slices.push_back({&r, row, end});
    if (end < r.keys.size()) info.next = MigrationCursor{r.spec.id, end, false};
  }
  uint64_t id_begin = from.push_ids ? from.row : 0, id_end = id_begin;
  if (!info.next) {
    for (; id_end < plan.push_ids.size() && room(kPushIdBytes); ++id_end, ++items) info.bytes += kPushIdBytes;
    if (id_end < plan.push_ids.size()) info.next = MigrationCursor{0, id_end, true};
  }

  auto body = state_transfer ? reply->builder().getBody().initStateTransfer() : reply->builder().getBody().initMigrateRows();
  body.setServers(plan.servers);
  auto left = body.initLeft(static_cast<unsigned>(plan.left.size()));
  for (unsigned i = 0; i < plan.left.size(); ++i) left.set(i, plan.left[i]);
  body.setRows(plan.rows());
  if (info.next) WriteCursor(*info.next, body.initNext());
  auto specs = body.initTables(static_cast<unsigned>(slices.size()));
  for (unsigned i = 0; i < slices.size(); ++i) {
    const Slice& s = slices[i];
    const TableSpec& spec = s.rows->spec;
    ToWire(spec, specs[i]);
    const auto n = static_cast<size_t>(s.end - s.begin);
    const size_t width = static_cast<size_t>(spec.RecordWidth());
    std::vector<uint64_t> keys(s.rows->keys.begin() + static_cast<ptrdiff_t>(s.begin),
                               s.rows->keys.begin() + static_cast<ptrdiff_t>(s.end));
    std::vector<float> records(n * width);
    if (n > 0) {
      STRATA_RETURN_IF_ERROR(read(spec, keys, records).WithContext(
          "migrate: reading rows " + std::to_string(s.begin) + ".." + std::to_string(s.end) + " of table \"" +
          spec.name + "\" for node " + std::to_string(plan.to_node)));
    }
    reply->AddPayload(DType::kI64, {static_cast<int64_t>(n)}, Buffer::Take(std::move(keys)));
    reply->AddPayload(DType::kF32, {static_cast<int64_t>(n), static_cast<int64_t>(width)},
                      Buffer::Take(std::move(records)));
    info.rows += n;
  }
  std::vector<int64_t> ids;
  for (uint64_t i = id_begin; i < id_end; ++i) {
    ids.push_back(plan.push_ids[i].first);
    ids.push_back(static_cast<int64_t>(plan.push_ids[i].second));
  }
  info.push_ids = id_end - id_begin;
  reply->AddPayload(DType::kI64, {static_cast<int64_t>(info.push_ids), 2}, Buffer::Take(std::move(ids)));
  auto clocks = body.initTrainerClocks(static_cast<unsigned>(plan.clocks.size()));
  for (unsigned i = 0; i < plan.clocks.size(); ++i) {
    clocks[i].setNode(plan.clocks[i].first);
    clocks[i].setClock(plan.clocks[i].second);
  }
  // A replica's copy adds its shard's BSP state itself (PsServer::AddBspStateLocked).
  if (!info.next && !state_transfer) WriteBspMoves(plan.bsp, body, reply);
  return info;
}

Status MigrationPuller::Pull(RpcEndpoint& rpc, PeerId peer, Millis call_timeout,
                             const std::function<Status(const Message&)>& import) {
  while (!done_) {
    const std::string where = "migrate: the chunk at " + (cursor_ ? Describe(*cursor_) : std::string("the start"));
    Message ask;
    auto req = ask.builder().getBody().initMigrate();
    req.setServers(servers_);
    auto list = req.initLeft(static_cast<unsigned>(left_.size()));
    for (unsigned i = 0; i < left_.size(); ++i) list.set(i, left_[i]);
    if (cursor_) WriteCursor(*cursor_, req.initCursor());
    STRATA_ASSIGN_OR_RETURN(Message reply, rpc.CallAndWait(peer, std::move(ask), call_timeout));
    if (reply.op() != Op::MIGRATE_ROWS) {
      return Status::InvalidArgument(where + ": answered with " + std::string(OpName(reply.op())));
    }
    auto chunk = reply.reader().getBody().getMigrateRows();
    const std::optional<MigrationCursor> next = ReadCursor(chunk.getNext(), chunk.hasNext());
    if (chunks_ == 0) total_ = chunk.getRows();
    if (chunk.getRows() != total_) {
      return Status::InvalidArgument(where + ": migrateRows.rows says " + std::to_string(chunk.getRows()) +
                                     " rows move, the first chunk said " + std::to_string(total_));
    }
    if (next && cursor_ && Order(*next) <= Order(*cursor_)) {
      return Status::InvalidArgument(where + ": migrateRows.next (" + Describe(*next) + ") does not move on");
    }
    // Per table listed, its keys and records, then the push ids (import checks their shapes),
    // then (the last chunk) one payload of sums per BSP table.
    const size_t tables = chunk.getTables().size();
    if (reply.num_payloads() != 2 * tables + 1 + chunk.getBsp().size()) {
      return Status::InvalidArgument(where + ": " + std::to_string(reply.num_payloads()) + " payloads for " +
                                     std::to_string(tables) + " tables");
    }
    auto count = [&](size_t i) {
      const PayloadInfo p = reply.payload_info(i);
      return p.shape.empty() ? uint64_t{0} : static_cast<uint64_t>(p.shape[0]);
    };
    STRATA_RETURN_IF_ERROR(import(reply));
    uint64_t rows = 0;
    for (size_t i = 0; i < tables; ++i) rows += count(2 * i);
    const uint64_t ids = count(2 * tables);
    if (next && rows + ids == 0) {
      return Status::InvalidArgument(where + ": a chunk with a migrateRows.next holds no row and no push id");
    }
    ++chunks_;
    rows_ += rows;
    cursor_ = next;
    done_ = !next;
    if (rows_ > total_ || (done_ && rows_ != total_)) {
      return Status::InvalidArgument(where + ": the chunks held " + std::to_string(rows_) + " rows, migrateRows.rows " +
                                     std::to_string(total_));
    }
  }
  return Status::OK();
}

}  // namespace strata
