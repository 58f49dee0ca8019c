// server_stores.h: ServerStores, where a PsServer instance keeps its tables' stores: how it makes
// one per table, how it removes every store it could open again (a durable store's files), and,
// with replication, where the copy of another shard keeps its own. TieredStores() is the tiered
// kind that server.store describes (<path>/server-<rank>/table-<id>, the copy of shard s at
// <path>/server-<rank>/backup-of-<s>/table-<id>).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/status.h"
#include "offload/row_store.h"
#include "ps/server_options.h"
#include "ps/table.h"

namespace strata {

// Makes the store for this server's shard of a table (default: MemoryRowStore).
using StoreFactory = std::function<Result<std::unique_ptr<RowStore>>(const TableSpec& spec)>;

struct ServerStores {
  // Makes a table's store (empty: MemoryRowStore).
  StoreFactory make;
  // Durable stores only (empty: a store keeps nothing once destroyed): removes every store `make`
  // would open again (every table's, whatever its id: RocksDB, checkpoints), so the next `make`
  // of any table starts empty. Called while none of them is open. A state transfer's first chunk
  // calls it (ps/server_transfer.cc): a restarted server's stale rows and push ids must not
  // survive its copy.
  std::function<Status()> clear;
  // Replication: the stores of the copy of shard `shard` this server keeps (in a directory of
  // their own). Empty: the copy uses `make` and `clear` as they are (memory stores, tests).
  std::function<ServerStores(uint32_t shard)> backup;

  // Whether stores survive being destroyed (clear is set): a backup copy then trusts nothing on
  // disk and takes its shard by state transfer, at the job's start too.
  bool durable() const { return static_cast<bool>(clear); }
};

// The tiered stores server.store (kind tiered) describes, in `dir` (<path>/server-<rank>): a
// table's at <dir>/table-<id> with the DRAM budget, policy and durability of `c` (checkpoint
// durability: a table with a checkpoint restores its latest one, one without starts empty, since
// records written back between checkpoints are not a consistent state); clear removes every
// <dir>/table-* directory; the copy of shard s keeps the same kind of stores in
// <dir>/backup-of-<s>.
ServerStores TieredStores(const ServerStoreOptions& c, const std::string& dir);

}  // namespace strata
