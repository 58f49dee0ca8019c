// migration.h: the rows one server hands another when an elastic server joins or leaves
// (MigrationPlan), cut into chunks of at most a byte budget (server.migrate_chunk_mb) that the
// receiver asks for one by one (MigrationPuller): each chunk is a migrateRows reply to a migrate
// request naming where it starts (a cursor), so a chunk whose reply was lost is asked for again
// and comes back the same, and no message grows with the shard. PsServer keeps one plan per
// receiver while it is taken (ps/server_migrate.cc, ps/server_leave.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/message.h"
#include "common/rpc.h"
#include "common/status.h"
#include "ps/bsp_moves.h"
#include "ps/table.h"

namespace strata {

// Where a chunk starts: row `row` of the moving rows of table `table` (its id), or, every row
// sent, push id number `row`.
struct MigrationCursor {
  uint32_t table = 0;
  uint64_t row = 0;
  bool push_ids = false;
  bool operator==(const MigrationCursor&) const = default;
};

// What moves from one server to one other, fixed when the sender switched its layout (under the
// lock pushes take), read-only after: the rows cannot change meanwhile, since the sender refuses
// every push and pull of them from the switch on. A plain value.
struct MigrationPlan {
  struct Rows {
    TableSpec spec;
    std::vector<uint64_t> keys;  // the keys whose rows move, ascending
  };
  uint32_t to_node = 0;        // the receiver's node id
  uint32_t servers = 0;        // the layout the rows move under: its server ranks...
  std::vector<uint32_t> left;  // ...and those that left it (sorted)
  std::vector<Rows> tables;    // every sparse table, by id, also those that move no row
  std::vector<std::pair<uint32_t, uint64_t>> push_ids;  // (sender node, id) the sender remembers
  std::vector<std::pair<uint32_t, int64_t>> clocks;     // trainers' clocks: (node, clock)
  // BSP tables: the moving keys' accumulations not applied yet, which left the sender's tables
  // at the switch, and (a join) the sender's record of its clocks (ps/bsp_moves.h).
  BspMoves bsp;

  uint64_t rows() const;
  // Where the first chunk starts.
  MigrationCursor Start() const;
};

// Reads the records of `keys` of table `spec` into `out` (keys.size() x spec.RecordWidth()).
using ReadRecords =
    std::function<Status(const TableSpec& spec, std::span<const uint64_t> keys, std::span<float> out)>;

// What one chunk held.
struct ChunkInfo {
  uint64_t rows = 0, push_ids = 0, bytes = 0;
  std::optional<MigrationCursor> next;  // where the following chunk starts; none: it was the last
};

// Writes the chunk of `plan` that starts at `from` into `reply` (a migrateRows body, with the
// payloads ImportRows reads: per table listed, its keys and records; then push ids; and the
// trainers' clocks, in every chunk; the last chunk also the plan's BSP moves): rows table after table, then push ids, until the payload
// reaches `budget_bytes` (8 bytes a key plus the record, 16 an id), but at least one row or id
// while any is left, so every chunk moves on. A table moving no row is listed (empty) in the
// chunk that passes it, so the receiver makes every table. InvalidArgument naming
// migrate.cursor.table or migrate.cursor.row for a cursor outside the plan; what `read` fails
// with, in context.
// With `state_transfer`, the body is a stateTransfer (a replica's copy of a whole shard, which
// ps/server_transfer.cc sends in chunks the same way) instead of a migrateRows.
Result<ChunkInfo> BuildMigrationChunk(const MigrationPlan& plan, const MigrationCursor& from, uint64_t budget_bytes,
                                      const ReadRecords& read, Message* reply, bool state_transfer = false);

// A migrate request's cursor (nullopt when it has none: the first chunk), and writing one.
std::optional<MigrationCursor> ReadCursor(wire::MigrateCursor::Reader in, bool present);
void WriteCursor(const MigrationCursor& in, wire::MigrateCursor::Builder out);

// The receiver's side of one migration: asks its sender for chunk after chunk, from where the
// last call stopped, until one has no next. Not thread-safe (one caller).
class MigrationPuller {
 public:
  // `servers` and `left`: the layout the rows move under, sent with every ask.
  MigrationPuller(uint32_t servers, std::vector<uint32_t> left) : servers_(servers), left_(std::move(left)) {}

  // Asks `peer` (through `rpc`, each ask bounded by `call_timeout`) for the chunks from the
  // next one not taken yet, handing each reply to `import`, until the last is imported (OK), or
  // returns the first error: the sender's, a reply that is no chunk or does not move on
  // (InvalidArgument naming the sender's field), or import's. Calling again asks for the chunk
  // that failed again.
  Status Pull(RpcEndpoint& rpc, PeerId peer, Millis call_timeout, const std::function<Status(const Message&)>& import);

  bool done() const { return done_; }
  uint64_t chunks() const { return chunks_; }
  uint64_t rows() const { return rows_; }
  const std::vector<uint32_t>& left() const { return left_; }

 private:
  const uint32_t servers_;
  const std::vector<uint32_t> left_;
  std::optional<MigrationCursor> cursor_;  // the next chunk to ask for (none: the first)
  bool done_ = false;
  uint64_t chunks_ = 0, rows_ = 0;
  uint64_t total_ = 0;  // the rows the first chunk said the migration moves
};

}  // namespace strata
