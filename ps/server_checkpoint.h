// server_checkpoint.h: a parameter server's shard of every table written into a checkpoint
// directory, and read back re-sharded by key for a cluster of any number of servers.
//
// Under <checkpoint>/ps/, server r of S writes
//   server-<r>-of-<S>.table-<id>.rows   every record of its shard of table <id> (value, optimizer
//                                       state, step count), in the tiered store's export format
//                                       (offload/internal/store_format.h: checksummed)
//   server-<r>-of-<S>.tables            its table specs (ps/table_file.h), written last: a shard
//                                       without it is incomplete
// Server r' of S' reads every old shard and keeps the keys SparseServer / DenseServer assign it
// under S'.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "offload/row_store.h"
#include "ps/table.h"

namespace strata {

// <checkpoint>/ps
std::string ServerTablesDir(const std::string& checkpoint);

struct TableShard {
  const TableSpec* spec;
  RowStore* store;
};

// Writes this server's shard of `tables` (every record its store holds) under `checkpoint`.
// The caller keeps pushes away meanwhile (the trainers wait at a checkpoint).
Status WriteServerShard(const std::string& checkpoint, uint32_t rank, uint32_t servers,
                        const std::vector<TableShard>& tables);

// One table's records that belong to one server of the new cluster.
struct LoadedTable {
  TableSpec spec;
  std::vector<uint64_t> keys;
  std::vector<float> records;  // keys.size() x spec.RecordWidth()
};
struct LoadedShards {
  uint32_t written_by = 0;  // how many servers wrote the checkpoint
  std::vector<LoadedTable> tables;  // by table id
  uint64_t rows = 0;        // records kept, over every table
};

// Reads every shard that the servers of the training cluster wrote under `checkpoint` and keeps
// the records that server `rank` of `servers` holds. NotFound naming the file for a missing
// shard (or the directory, if no server wrote one); InvalidArgument naming both files for shards
// that hold different tables; Corruption naming the file for a damaged one or for a key in the
// wrong shard.
Result<LoadedShards> ReadServerShards(const std::string& checkpoint, uint32_t rank, uint32_t servers);

}  // namespace strata
