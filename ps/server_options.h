// server_options.h: ServerOptions, the `server` section of the job file (workers, statistics,
// and where each table's shard is stored), bound once by Bind() and handed to PsServer as is.
// Plain copyable values.
#pragma once

#include <cstdint>
#include <string>

#include "offload/tiered_row_store.h"
#include "ps/replication.h"

namespace strata {

namespace config {
class Binder;
}

enum class StoreKind { kMemory, kTiered };

// Where a server keeps its shard of every table (server.store in the job file).
struct ServerStoreOptions {
  // memory: MemoryRowStore, nothing survives the process. tiered: TieredRowStore (DRAM over
  // RocksDB) under `path`, one store per table at <path>/server-<rank>/table-<id>, and the
  // table specs recorded in <path>/server-<rank>/tables, so a restarted server reloads them.
  StoreKind kind = StoreKind::kMemory;
  // Directory of the tiered stores (required for tiered). Servers on one machine may share it.
  std::string path;
  // DRAM budget of each table's resident records, in MiB (fractions allowed, down to 1 KiB).
  // Larger: more hits, fewer disk reads.
  double dram_budget_mb = 256;
  EvictionPolicy policy = EvictionPolicy::kLru;
  // none: a crash loses what was not written back. checkpoint: a restart restores the last
  // checkpoint exactly (taken every checkpoint_every_clocks clocks of the slowest trainer).
  // wal: every acknowledged push survives kill -9, at a synced write per push.
  Durability durability = Durability::kNone;
  uint64_t checkpoint_every_clocks = 0;
};

struct ServerOptions {
  // Threads applying pushes and answering pulls. Requests of one sender go to one thread.
  int workers = 2;
  // How often statistics are logged, at debug level (0: never); the final ones at info.
  int stats_interval_ms = 10000;
  // What one peer (a connection) may have parked at once: BSP/SSP pulls waiting for their
  // clock. A trainer parks at most its pulls of a step or two (one per sparse table, one per
  // dense chunk on this server), far below the defaults; past either bound a pull is refused
  // with ResourceExhausted (counted as parked_refused) and other peers are served as before.
  // Lower bounds what a hostile or broken peer can make a server hold.
  int max_parked_per_peer = 65536;
  int max_parked_mb_per_peer = 256;  // payload bytes (the keys) of those parked pulls
  // The stores behind the tables; read by whoever makes the server's ServerStores
  // (strata-server: TieredStores), not by PsServer itself.
  ServerStoreOptions store;
  // none: a server killed loses its shard unless a durable store reloads it when it restarts.
  // backup: shard r also lives on server (r + 1) % S; every update is applied there before it
  // is acknowledged, and when r dies its backup serves r's keys at once (ps/replication.h). Costs
  // a forward and its acknowledgement per update. Needs 2 or more servers and no BSP tables
  // (checked by the job loader; a BSP createTable is refused). With the tiered store the copy
  // of shard r - 1 keeps tiered stores of its own (<path>/server-<rank>/backup-of-<r - 1>).
  Replication replication = Replication::kNone;
  // Elastic jobs (cluster.elastic): the rows a server hands another when a server joins or
  // leaves travel in chunks of at most this many MiB of keys, records and push ids (fractions
  // allowed, down to 1 KiB; a row larger than that goes alone), one request and reply each, so
  // no message grows with the shard. At most transport.max_message_mb (the job loader refuses a
  // larger value the job sets, and lowers this default to a smaller max_message_mb). Smaller:
  // more round trips (one per chunk); larger: more memory per chunk in flight.
  double migrate_chunk_mb = 16;
  // Not in the job file (strata-server derives it from store.path and its rank): the file
  // recording the spec of every table created (rewritten whole via temp + fsync + rename at each
  // createTable), which RestoreTables() reads back after a restart. Empty: tables are not
  // recorded (a memory store keeps nothing to restore anyway).
  std::string tables_file;
};

void Bind(config::Binder& b, ServerStoreOptions& o);
void Bind(config::Binder& b, ServerOptions& o);

}  // namespace strata
