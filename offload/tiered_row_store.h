// tiered_row_store.h: TieredRowStore, a RowStore with a DRAM tier under a byte budget over a
// RocksDB tier on local disk (NVMe), with LRU or LFU eviction, an admission filter for new keys,
// expiry of unseen rows, three durability modes, checkpoints, table export/import, and the ids of
// applied updates recorded with them (RowStore::UpdateWithId; tiered_row_store_ids.cc).
// TieredStoreOptions is its configuration.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "offload/row_store.h"

namespace rocksdb {
class DB;
class ColumnFamilyHandle;
class WriteBatch;
}  // namespace rocksdb

namespace strata {

namespace offload_internal {
struct CachedRecord;  // offload/internal/eviction_order.h
}  // namespace offload_internal

enum class EvictionPolicy { kLru, kLfu };
enum class Durability {
  // Nothing survives a crash beyond what happened to be written back; a clean Close() keeps
  // everything. Fastest: no WAL, dirty records reach RocksDB only when evicted.
  kNone,
  // As kNone between snapshots; Checkpoint() (on request, and every checkpoint_every_clocks
  // clocks) writes a consistent snapshot that OpenFromCheckpoint() restores exactly, the ids of
  // the updates it holds included.
  kCheckpoint,
  // Every Update (and every record a Read creates) is in RocksDB's synced WAL before the call
  // returns, so it survives kill -9; an UpdateWithId's id is in the same write. The DRAM tier is
  // write-through. Concurrent callers' writes
  // are group-committed by RocksDB, so throughput grows with the number of pushing threads.
  kWal,
};

// The configuration of a TieredRowStore: a plain value. Open() validates it.
struct TieredStoreOptions {
  // Directory of the store (created if missing). RocksDB lives in `path`/db, automatic
  // checkpoints in `path`/checkpoints unless checkpoint_dir says otherwise. Required.
  std::string path;

  // DRAM for resident records, counted as records x (4 x width + kRecordOverheadBytes). Split
  // evenly over the shards. Larger: more hits; smaller: more MultiGets and write-backs.
  // A call may exceed it by its own batch while it runs (its records must be resident together).
  uint64_t dram_budget_bytes = 256ull << 20;

  // LRU suits recency (a sliding working set); LFU keeps the popular head of a skewed key
  // distribution even when a scan of cold keys passes through, at O(log distinct counts) per
  // access instead of O(1). Counts start again when a record re-enters DRAM.
  EvictionPolicy policy = EvictionPolicy::kLru;

  // Independent DRAM shards (rounded up to a power of two), each with its own mutex, map and
  // eviction order. More shards: less contention, but each shard's budget is smaller and its
  // eviction order more local (LRU/LFU are per shard, so eviction is approximate globally).
  int shards = 16;

  // A new sparse key (absent from both tiers) becomes a stored row only once it was seen in this
  // many calls (Update or Read with an initializer); before that, each call visits a scratch
  // record freshly made by the initializer and drops it (the visit's effect is not kept).
  // 0 or 1: every key is admitted at once. Filters one-off keys (long-tail ids) out of both tiers.
  uint32_t admission_min_count = 0;
  // Candidates (keys seen but not yet admitted) tracked per store before the counts are reset.
  // Counts are kept outside the DRAM budget (about 40 bytes each).
  uint64_t admission_max_candidates = 1 << 20;

  // Rows not accessed for this many clocks are deleted from both tiers at AdvanceClock().
  // 0: never. Costs a scan of the resident records and of a small per-row clock column in
  // RocksDB at every AdvanceClock; each eviction also writes the row's last clock.
  uint64_t expire_after_clocks = 0;

  Durability durability = Durability::kNone;
  // kCheckpoint: AdvanceClock(c) takes a checkpoint when c is a multiple of this. 0: only on
  // request. Each checkpoint writes every dirty record back and flushes RocksDB's memtable,
  // and blocks all calls meanwhile.
  uint64_t checkpoint_every_clocks = 0;
  // Where automatic checkpoints go ("" = `path`/checkpoints), one directory per clock.
  std::string checkpoint_dir;
  // Automatic checkpoints kept (older ones are deleted after a new one is complete). >= 1.
  int checkpoints_to_keep = 2;

  // RocksDB tuning. Block cache for SST blocks (on top of the DRAM tier; the OS page cache
  // comes on top of both): larger helps a cold path with locality, but it is DRAM the budget
  // above does not count.
  uint64_t rocksdb_block_cache_bytes = 64ull << 20;
  // Memtable size: larger batches up more write-backs before a flush, at more DRAM and a longer
  // recovery replay in kWal mode.
  uint64_t rocksdb_write_buffer_bytes = 64ull << 20;
  // Flush and compaction threads.
  int rocksdb_background_jobs = 2;
  // Bloom filter bits per key (0: none). Misses on keys that were never stored (new rows)
  // are answered without reading a data block.
  int rocksdb_bloom_bits_per_key = 10;
  // LZ4 compression of SST blocks. Off by default: float parameters compress poorly.
  bool rocksdb_compression = false;
};

// Everything TieredRowStore counts (stats() returns the RowStoreStats subset).
struct TieredStoreStats {
  uint64_t records_in_memory = 0;
  uint64_t bytes_in_memory = 0;   // records_in_memory x record footprint
  uint64_t records = 0;           // both tiers: RocksDB's estimate at open + created - expired
  uint64_t hits = 0;              // key occurrences found resident (per distinct key per call)
  uint64_t misses = 0;            // distinct keys per call that were not resident
  uint64_t created = 0;           // records made by the initializer and stored
  uint64_t not_admitted = 0;      // visits on scratch records (admission filter)
  uint64_t evictions = 0;         // records dropped from DRAM to make room
  uint64_t prefetched = 0;        // records read ahead (Prefetch): a later call finds them resident
  uint64_t written_back = 0;      // dirty evicted records written to RocksDB
  uint64_t multigets = 0;         // MultiGet calls (at most one per Update/Read)
  uint64_t write_batches = 0;     // RocksDB writes (eviction, WAL, flush, import)
  uint64_t expired = 0;           // rows deleted by expiry (both tiers)
  uint64_t checkpoints = 0;
  uint64_t write_back_errors = 0; // failed write-backs after a call's visits (records kept)
  uint64_t clock = 0;
};

// DRAM over RocksDB. Safe for concurrent use from any threads: calls on keys of different shards
// run in parallel; a call owns each of its records from lookup to the end of the call, so a record
// is never visited by two calls at once and concurrent calls on the same key run one after the
// other. Checkpoint, Export, Import and Close wait for running calls and block new ones.
class TieredRowStore final : public RowStore {
 public:
  // Footprint counted per resident record on top of its floats (map node, links, flags).
  static constexpr uint64_t kRecordOverheadBytes = 96;

  // Opens (or creates) the store at options.path. InvalidArgument naming the field for bad
  // options; IOError/Corruption naming the path when RocksDB cannot open it.
  static Result<std::unique_ptr<TieredRowStore>> Open(const TieredStoreOptions& options, int width);

  // Replaces the store at options.path with the checkpoint in `checkpoint_dir` (as written by
  // Checkpoint()) and opens it at the checkpoint's clock. NotFound if there is no checkpoint,
  // Corruption if its manifest or files are damaged, InvalidArgument if its width differs,
  // FailedPrecondition if it was written in another format version (store_format.h).
  // The store at options.path is only replaced after the checkpoint checked out.
  static Result<std::unique_ptr<TieredRowStore>> OpenFromCheckpoint(
      const std::string& checkpoint_dir, const TieredStoreOptions& options, int width);
  // The newest complete checkpoint under `dir` (automatic checkpoints), NotFound if none.
  // Damaged ones are passed over; one of another format version is FailedPrecondition.
  static Result<std::string> LatestCheckpoint(const std::string& dir);

  ~TieredRowStore() override;  // Close(), errors logged
  TieredRowStore(const TieredRowStore&) = delete;
  TieredRowStore& operator=(const TieredRowStore&) = delete;

  int width() const override { return width_; }
  // On an I/O error before the visits (a MultiGet, or writing back records evicted to make
  // room) nothing was visited. In kWal mode a failed WAL write after the visits rolls the
  // visited records back, so the call had no effect either.
  Status Update(std::span<const uint64_t> keys, const Init& init, const Visit& visit) override;
  Status Read(std::span<const uint64_t> keys, const Init& init, const ReadVisit& visit) override;
  // kWal: the id goes into the update's synced write. Other modes: it is written with the dirty
  // records (at a checkpoint, an export, Close), so a checkpoint holds exactly its updates' ids.
  Status UpdateWithId(std::span<const uint64_t> keys, const Init& init, const Visit& visit,
                      UpdateId id) override;
  Result<std::vector<UpdateId>> RecordedUpdateIds() const override;
  // Writes dirty records back, then iterates a RocksDB snapshot (calls go on meanwhile).
  Status Scan(const ScanVisit& visit) override;
  // Blocks calls (like expiry) and removes the records from DRAM and RocksDB in one synced write.
  Result<uint64_t> Erase(std::span<const uint64_t> keys) override;
  // One MultiGet for the keys not resident that fit each shard's room left (duplicates once).
  Result<uint64_t> Prefetch(std::span<const uint64_t> keys) override;
  RowStoreStats stats() const override;
  TieredStoreStats detailed_stats() const;

  // Tells the store that `clock` began (clocks only grow). Expires unseen rows and, in
  // kCheckpoint mode, takes the automatic checkpoint when due.
  Status AdvanceClock(uint64_t clock) override;
  uint64_t clock() const override { return clock_.load(); }
  // Opaque bytes stored in every later checkpoint's manifest (table spec, optimizer step
  // counts...) and handed back by checkpoint_metadata() after OpenFromCheckpoint().
  void SetCheckpointMetadata(std::string metadata);
  std::string checkpoint_metadata() const;

  // Writes a consistent snapshot of both tiers into `dir` (which must not exist or be empty):
  // RocksDB checkpoint in dir/db plus the manifest, written last, so a checkpoint without a
  // manifest is incomplete. Blocks calls while dirty records are written back.
  Status Checkpoint(const std::string& dir);

  // Writes every record, in key order, to `path` (format in store_format.h).
  Status Export(const std::string& path);
  // Adds or overwrites the records of an export file. The file is checked whole first.
  Status Import(const std::string& path);

  // Writes dirty records back, flushes and closes RocksDB. Later calls fail with
  // FailedPrecondition. Idempotent.
  Status Close();

 private:
  enum class SlotKind : uint8_t;
  struct Shard;
  struct Slot;
  struct Call;
  TieredRowStore(const TieredStoreOptions& options, int width);
  Status OpenDb();

  template <typename V>
  Status Run(std::span<const uint64_t> keys, const Init& init, bool is_update, const V& visit,
             UpdateId id);
  void Acquire(Call& call);
  Status Fetch(Call& call, const Init& init);
  bool Admit(const Slot& slot);
  Status Evict(const std::vector<uint32_t>& shard_ids);
  Status WriteThrough(Call& call, bool is_update, UpdateId id);
  // Update ids (tiered_row_store_ids.cc): into a batch, or kept until the next write-back.
  void PutUpdateId(rocksdb::WriteBatch& batch, UpdateId id);
  void KeepUnwrittenId(UpdateId id);
  // Puts the kept ids into `batch`; returns how many (cleared by ClearUnwrittenIds after the
  // write). Expects barrier_mu_ held exclusively.
  size_t PutUnwrittenIdsLocked(rocksdb::WriteBatch& batch);
  void ClearUnwrittenIdsLocked();
  void Release(Call& call, bool is_update);
  void Abandon(Call& call);
  Status WriteBatchToDb(rocksdb::WriteBatch& batch, bool sync);
  Status FlushDirtyLocked();
  Status ExpireLocked(uint64_t cutoff);
  Status CheckpointLocked(const std::string& dir);
  std::string AutoCheckpointDir(uint64_t clock) const;
  Status PruneCheckpoints();

  Shard& ShardOf(uint64_t key);
  uint32_t ShardIndex(uint64_t key) const {
    return static_cast<uint32_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  float* AllocRecord(Shard& s);
  void EraseRecord(Shard& s, offload_internal::CachedRecord* r);

  const TieredStoreOptions options_;
  const int width_;
  const uint64_t record_bytes_;     // floats of one record
  const uint64_t footprint_bytes_;  // record_bytes_ + kRecordOverheadBytes
  uint64_t shard_budget_bytes_ = 0;
  int shift_ = 64;
  std::vector<std::unique_ptr<Shard>> shards_;

  // Calls take it shared; Checkpoint/Export/Import/Close/expiry exclusive (a consistent cut).
  mutable std::shared_mutex barrier_mu_;
  bool closed_ = false;  // guarded by barrier_mu_
  std::atomic<uint64_t> clock_{0};
  mutable std::mutex metadata_mu_;
  std::string metadata_;

  std::unique_ptr<rocksdb::DB> db_;
  std::vector<rocksdb::ColumnFamilyHandle*> cf_handles_;  // owned by db_, destroyed in Close()
  rocksdb::ColumnFamilyHandle* records_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* clocks_cf_ = nullptr;
  rocksdb::ColumnFamilyHandle* ids_cf_ = nullptr;
  // Not kWal: ids of applied updates not yet written, by (sender, slot) as on disk.
  mutable std::mutex ids_mu_;
  std::map<std::pair<uint32_t, uint16_t>, uint64_t> unwritten_ids_;

  std::atomic<uint64_t> records_{0}, written_back_{0}, multigets_{0}, write_batches_{0},
      expired_{0}, checkpoints_{0}, write_back_errors_{0};
  Histogram wal_sync_seconds_;    // kWal: each synced RocksDB write
  Histogram checkpoint_seconds_;  // each successful checkpoint, flush to manifest
};

}  // namespace strata
