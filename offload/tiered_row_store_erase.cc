// tiered_row_store_erase.cc: TieredRowStore::Erase (row_store.h): records removed from DRAM and
// RocksDB in one synced write, with no call running (a consistent cut, as expiry takes).
#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <unordered_set>

#include "offload/internal/store_format.h"
#include "offload/internal/tiered_row_store_internal.h"
#include "offload/tiered_row_store.h"

namespace strata {

Result<uint64_t> TieredRowStore::Erase(std::span<const uint64_t> keys) {
  std::unique_lock barrier(barrier_mu_);
  if (closed_) return Status::FailedPrecondition("tiered store " + options_.path + " is closed");
  rocksdb::WriteBatch batch;
  std::unordered_set<uint64_t> gone;  // keys that held a record in some tier
  std::vector<uint64_t> resident;
  char key[8];
  std::string value;
  for (uint64_t k : keys) {
    if (gone.count(k)) continue;
    bool held = false;
    {
      Shard& s = ShardOf(k);
      std::lock_guard lock(s.mu);
      held = s.map.count(k) != 0;
    }
    offload_internal::EncodeKey(k, key);
    if (!held) {
      rocksdb::Status st = db_->Get(rocksdb::ReadOptions(), records_cf_, rocksdb::Slice(key, 8), &value);
      if (!st.ok() && !st.IsNotFound()) {
        return offload_internal::FromRocks(st, "erase: read key " + std::to_string(k) + " in " + options_.path);
      }
      held = st.ok();
    } else {
      resident.push_back(k);
    }
    if (!held) continue;
    gone.insert(k);
    batch.Delete(records_cf_, rocksdb::Slice(key, 8));
    batch.Delete(clocks_cf_, rocksdb::Slice(key, 8));
  }
  // Disk first: if the write fails, DRAM still holds every record and nothing changed.
  if (batch.Count() > 0) STRATA_RETURN_IF_ERROR(WriteBatchToDb(batch, true).WithContext("erase rows"));
  for (uint64_t k : resident) {
    Shard& s = ShardOf(k);
    std::lock_guard lock(s.mu);
    if (auto it = s.map.find(k); it != s.map.end()) EraseRecord(s, &it->second);
  }
  const uint64_t erased = gone.size();
  records_.fetch_sub(std::min(erased, records_.load()));
  return erased;
}

}  // namespace strata
