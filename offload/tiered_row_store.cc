// tiered_row_store.cc: TieredRowStore: opening, the call path (acquire, fetch, make room, visit,
// write through, release), eviction and expiry. Checkpoints, export and import are in
// tiered_row_store_files.cc, statistics in tiered_row_store_stats.cc.
#include "offload/tiered_row_store.h"

#include <rocksdb/db.h>
#include <rocksdb/filter_policy.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <unordered_map>
#include <unordered_set>

#include "common/check.h"
#include "offload/internal/store_format.h"
#include "offload/internal/tiered_row_store_internal.h"

namespace strata {

using offload_internal::CachedRecord;
using offload_internal::EncodeKey;
using offload_internal::EvictionPolicyKind;

namespace {
constexpr size_t kRecordsPerBlock = 256;
}  // namespace

Status offload_internal::FromRocks(const rocksdb::Status& s, std::string_view context) {
  if (s.ok()) return Status::OK();
  const std::string m = std::string(context) + ": " + s.ToString();
  if (s.IsNotFound()) return Status::NotFound(m);
  if (s.IsCorruption()) return Status::Corruption(m);
  if (s.IsInvalidArgument()) return Status::InvalidArgument(m);
  return Status::IOError(m);
}

TieredRowStore::TieredRowStore(const TieredStoreOptions& options, int width)
    : options_(options),
      width_(width),
      record_bytes_(sizeof(float) * static_cast<uint64_t>(width)),
      footprint_bytes_(record_bytes_ + kRecordOverheadBytes) {
  const size_t n = std::bit_ceil(static_cast<unsigned>(std::max(1, options.shards)));
  shift_ = 64 - std::countr_zero(n);
  const auto kind = options.policy == EvictionPolicy::kLru ? EvictionPolicyKind::kLru
                                                           : EvictionPolicyKind::kLfu;
  for (size_t i = 0; i < n; ++i) shards_.push_back(std::make_unique<Shard>(kind));
  shard_budget_bytes_ = options.dram_budget_bytes / n;
}

TieredRowStore::Shard& TieredRowStore::ShardOf(uint64_t key) {
  return *shards_[shift_ == 64 ? 0 : ShardIndex(key)];
}

Status ValidateTieredStoreOptions(const TieredStoreOptions& o, int width) {
  auto bad = [](const std::string& m) { return Status::InvalidArgument("TieredStoreOptions." + m); };
  if (width <= 0) return Status::InvalidArgument("record width must be > 0, got " + std::to_string(width));
  if (o.path.empty()) return bad("path is empty");
  if (o.shards < 1 || o.shards > 4096) return bad("shards must be in 1..4096, got " + std::to_string(o.shards));
  const uint64_t shards = std::bit_ceil(static_cast<unsigned>(o.shards));
  const uint64_t footprint = 4ull * width + TieredRowStore::kRecordOverheadBytes;
  if (o.dram_budget_bytes < shards * footprint) {
    return bad("dram_budget_bytes (" + std::to_string(o.dram_budget_bytes) +
               ") holds less than one record per shard (" + std::to_string(shards) + " x " +
               std::to_string(footprint) + " bytes)");
  }
  if (o.checkpoints_to_keep < 1) return bad("checkpoints_to_keep must be >= 1");
  if (o.checkpoint_every_clocks > 0 && o.durability != Durability::kCheckpoint) {
    return bad("checkpoint_every_clocks is set but durability is not checkpoint");
  }
  if (o.rocksdb_background_jobs < 1) return bad("rocksdb_background_jobs must be >= 1");
  if (o.rocksdb_bloom_bits_per_key < 0) return bad("rocksdb_bloom_bits_per_key must be >= 0");
  if (o.rocksdb_write_buffer_bytes < (1u << 16)) return bad("rocksdb_write_buffer_bytes must be >= 64 KiB");
  return Status::OK();
}

Result<std::unique_ptr<TieredRowStore>> TieredRowStore::Open(const TieredStoreOptions& options,
                                                             int width) {
  STRATA_RETURN_IF_ERROR(ValidateTieredStoreOptions(options, width));
  std::error_code ec;
  std::filesystem::create_directories(options.path, ec);
  if (ec) return Status::IOError("cannot create store directory " + options.path + ": " + ec.message());
  auto store = std::unique_ptr<TieredRowStore>(new TieredRowStore(options, width));
  STRATA_RETURN_IF_ERROR(store->OpenDb());
  return store;
}

Status TieredRowStore::OpenDb() {
  rocksdb::Options o;
  o.create_if_missing = true;
  o.create_missing_column_families = true;
  o.max_background_jobs = options_.rocksdb_background_jobs;
  o.write_buffer_size = options_.rocksdb_write_buffer_bytes;
  o.compression = options_.rocksdb_compression ? rocksdb::kLZ4Compression : rocksdb::kNoCompression;
  o.keep_log_file_num = 2;
  rocksdb::BlockBasedTableOptions table;
  table.block_cache = rocksdb::NewLRUCache(options_.rocksdb_block_cache_bytes);
  if (options_.rocksdb_bloom_bits_per_key > 0) {
    table.filter_policy.reset(rocksdb::NewBloomFilterPolicy(options_.rocksdb_bloom_bits_per_key));
  }
  o.table_factory.reset(rocksdb::NewBlockBasedTableFactory(table));
  std::vector<rocksdb::ColumnFamilyDescriptor> families = {
      {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions(o)},
      {"strata_clocks", rocksdb::ColumnFamilyOptions(o)},
      {offload_internal::kUpdateIdsFamily, rocksdb::ColumnFamilyOptions(o)}};
  rocksdb::DB* db = nullptr;
  const std::string db_path = options_.path + "/db";
  rocksdb::Status s = rocksdb::DB::Open(o, db_path, families, &cf_handles_, &db);
  if (!s.ok()) return offload_internal::FromRocks(s, "cannot open RocksDB at " + db_path);
  db_.reset(db);
  records_cf_ = cf_handles_[0];
  clocks_cf_ = cf_handles_[1];
  ids_cf_ = cf_handles_[2];
  uint64_t keys = 0;
  db_->GetIntProperty(records_cf_, rocksdb::DB::Properties::kEstimateNumKeys, &keys);
  records_.store(keys);
  return Status::OK();
}

TieredRowStore::~TieredRowStore() {
  Status s = Close();
  if (!s.ok()) std::cerr << "TieredRowStore " << options_.path << ": close failed: " << s.ToString() << "\n";
}

Status TieredRowStore::Close() {
  std::unique_lock barrier(barrier_mu_);
  if (closed_) return Status::OK();
  closed_ = true;
  if (!db_) return Status::OK();  // Open failed
  Status s = FlushDirtyLocked();
  if (s.ok() && options_.durability != Durability::kWal) {
    s = offload_internal::FromRocks(db_->Flush(rocksdb::FlushOptions(), cf_handles_),
                                    "flush RocksDB at " + options_.path);
  }
  for (auto* h : cf_handles_) db_->DestroyColumnFamilyHandle(h).PermitUncheckedError();
  cf_handles_.clear();
  rocksdb::Status cs = db_->Close();
  if (s.ok() && !cs.ok()) s = offload_internal::FromRocks(cs, "close RocksDB at " + options_.path);
  db_.reset();
  return s;
}

// ---------------------------------------------------------------------------------------------
// Records in DRAM

float* TieredRowStore::AllocRecord(Shard& s) {
  if (s.free.empty()) {
    s.blocks.push_back(std::make_unique<float[]>(kRecordsPerBlock * width_));
    for (size_t i = kRecordsPerBlock; i-- > 0;) s.free.push_back(s.blocks.back().get() + i * width_);
  }
  float* p = s.free.back();
  s.free.pop_back();
  return p;
}

void TieredRowStore::EraseRecord(Shard& s, CachedRecord* r) {
  s.order.Remove(r);
  s.free.push_back(r->data);
  s.map.erase(r->key);
}

// ---------------------------------------------------------------------------------------------
// The call path

template <typename V>
Status TieredRowStore::Run(std::span<const uint64_t> keys, const Init& init, bool is_update,
                           const V& visit, UpdateId id) {
  std::shared_lock barrier(barrier_mu_);
  if (closed_) return Status::FailedPrecondition("tiered store " + options_.path + " is closed");
  Call call;
  call.Plan(keys, *this);
  Acquire(call);
  Status s = Fetch(call, init);
  if (s.ok()) s = Evict(call.ShardsWithNewRecords());
  if (!s.ok()) {
    Abandon(call);
    return s;
  }
  const bool wal = options_.durability == Durability::kWal;
  if (wal) call.Backup(width_);
  for (size_t i = 0; i < keys.size(); ++i) {
    const Slot& slot = call.slots[call.slot_of[i]];
    if constexpr (std::is_same_v<V, Visit>) {
      visit(i, std::span<float>(slot.data, width_));
    } else {
      visit(i, std::span<const float>(slot.data, width_));
    }
  }
  if (wal) {
    s = WriteThrough(call, is_update, id);
    if (!s.ok()) {
      call.RestoreBackup(width_);
      Abandon(call);
      return s;
    }
  } else if (id.id != 0) {
    KeepUnwrittenId(id);  // before the barrier is released: a checkpoint sees both or neither
  }
  Release(call, is_update);
  return Status::OK();
}

Status TieredRowStore::Update(std::span<const uint64_t> keys, const Init& init, const Visit& visit) {
  return Run(keys, init, /*is_update=*/true, visit, UpdateId{});
}

Status TieredRowStore::UpdateWithId(std::span<const uint64_t> keys, const Init& init,
                                    const Visit& visit, UpdateId id) {
  return Run(keys, init, /*is_update=*/true, visit, id);
}

Status TieredRowStore::Read(std::span<const uint64_t> keys, const Init& init, const ReadVisit& visit) {
  return Run(keys, init, /*is_update=*/false, visit, UpdateId{});
}

void TieredRowStore::Call::Plan(std::span<const uint64_t> keys_in, TieredRowStore& store) {
  keys = keys_in;
  slot_of.resize(keys.size());
  std::unordered_map<uint64_t, uint32_t> index;
  index.reserve(keys.size());
  slots.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    auto [it, fresh] = index.try_emplace(keys[i], static_cast<uint32_t>(slots.size()));
    if (fresh) {
      Slot slot;
      slot.key = keys[i];
      slot.shard = store.shift_ == 64 ? 0 : store.ShardIndex(keys[i]);
      slots.push_back(slot);
    }
    ++slots[it->second].accesses;
    slot_of[i] = it->second;
  }
  // Counting sort of the slots by shard: shards are visited in ascending order (deadlock-free).
  const size_t n = store.shards_.size();
  shard_begin.assign(n + 1, 0);
  for (const Slot& s : slots) ++shard_begin[s.shard + 1];
  for (size_t i = 0; i < n; ++i) shard_begin[i + 1] += shard_begin[i];
  by_shard.resize(slots.size());
  std::vector<uint32_t> fill(shard_begin.begin(), shard_begin.end() - 1);
  for (uint32_t i = 0; i < slots.size(); ++i) by_shard[fill[slots[i].shard]++] = i;
}

std::vector<uint32_t> TieredRowStore::Call::ShardsWithNewRecords() const {
  std::vector<uint32_t> out;
  for (uint32_t i : misses) {
    if (out.empty() || out.back() != slots[i].shard) out.push_back(slots[i].shard);
  }
  return out;
}

void TieredRowStore::Call::Backup(int width) {
  backup.resize(slots.size() * width);
  for (size_t i = 0; i < slots.size(); ++i) {
    std::memcpy(&backup[i * width], slots[i].data, sizeof(float) * width);
  }
}

void TieredRowStore::Call::RestoreBackup(int width) {
  for (size_t i = 0; i < slots.size(); ++i) {
    std::memcpy(slots[i].data, &backup[i * width], sizeof(float) * width);
  }
}

// Takes ownership of every key's record: residents are marked busy; absent keys get a busy
// placeholder (so concurrent calls on them wait instead of fetching twice). All keys of one
// shard are taken at once, shards in ascending order, so waits cannot form a cycle.
void TieredRowStore::Acquire(Call& call) {
  for (uint32_t sh = 0; sh < shards_.size(); ++sh) {
    const uint32_t begin = call.shard_begin[sh], end = call.shard_begin[sh + 1];
    if (begin == end) continue;
    Shard& s = *shards_[sh];
    std::unique_lock lock(s.mu);
    for (;;) {
      bool blocked = false;
      for (uint32_t j = begin; j < end && !blocked; ++j) {
        auto it = s.map.find(call.slots[call.by_shard[j]].key);
        blocked = it != s.map.end() && it->second.busy;
      }
      if (!blocked) break;
      ++s.waiters;
      s.cv.wait(lock);
      --s.waiters;
    }
    for (uint32_t j = begin; j < end; ++j) {
      Slot& slot = call.slots[call.by_shard[j]];
      auto [it, fresh] = s.map.try_emplace(slot.key);
      CachedRecord& r = it->second;
      if (fresh) {
        r.key = slot.key;
        r.data = AllocRecord(s);
        slot.kind = SlotKind::kFetched;
        call.misses.push_back(call.by_shard[j]);
        if (!call.prefetch) ++s.misses;
      } else {
        slot.kind = SlotKind::kHit;
        if (!call.prefetch) s.hits += slot.accesses;
      }
      r.busy = true;
      slot.record = &r;
      slot.data = r.data;
    }
  }
}

// One MultiGet for every missing key; then the admission filter and the initializer for keys
// RocksDB does not have. Errors before any record is changed.
Status TieredRowStore::Fetch(Call& call, const Init& init) {
  const size_t n = call.misses.size();
  if (n == 0) return Status::OK();
  std::vector<char> key_bytes(8 * n);
  std::vector<rocksdb::Slice> keys(n);
  for (size_t i = 0; i < n; ++i) {
    EncodeKey(call.slots[call.misses[i]].key, &key_bytes[8 * i]);
    keys[i] = rocksdb::Slice(&key_bytes[8 * i], 8);
  }
  std::vector<rocksdb::PinnableSlice> values(n);
  std::vector<rocksdb::Status> statuses(n);
  db_->MultiGet(rocksdb::ReadOptions(), records_cf_, n, keys.data(), values.data(), statuses.data());
  ++multigets_;
  for (size_t i = 0; i < n; ++i) {
    Slot& slot = call.slots[call.misses[i]];
    if (statuses[i].ok()) {
      if (values[i].size() != record_bytes_) {
        return Status::Corruption("tiered store " + options_.path + ": key " +
                                  std::to_string(slot.key) + " has " + std::to_string(values[i].size()) +
                                  " bytes on disk, expected " + std::to_string(record_bytes_));
      }
      std::memcpy(slot.data, values[i].data(), record_bytes_);
    } else if (statuses[i].IsNotFound()) {
      if (call.prefetch) {  // nothing to read ahead: the placeholder is dropped
        slot.kind = SlotKind::kScratch;
        continue;
      }
      if (!init) return Status::NotFound("no record for key " + std::to_string(slot.key));
      slot.kind = SlotKind::kCreated;
    } else {
      return offload_internal::FromRocks(statuses[i], "MultiGet in " + options_.path);
    }
  }
  for (uint32_t i : call.misses) {
    Slot& slot = call.slots[i];
    if (slot.kind != SlotKind::kCreated) continue;
    if (options_.admission_min_count > 1 && !Admit(slot)) slot.kind = SlotKind::kScratch;
    init(slot.key, std::span<float>(slot.data, width_));
  }
  return Status::OK();
}

// Counts one sighting of a new key; true once it was seen admission_min_count times.
bool TieredRowStore::Admit(const Slot& slot) {
  Shard& s = *shards_[slot.shard];
  std::lock_guard lock(s.mu);
  const uint64_t per_shard = std::max<uint64_t>(1, options_.admission_max_candidates / shards_.size());
  if (s.candidates.size() >= per_shard) s.candidates.clear();  // forget old sightings wholesale
  uint32_t& seen = s.candidates[slot.key];
  if (++seen < options_.admission_min_count) return false;
  s.candidates.erase(slot.key);
  return true;
}

// Evicts from each listed shard until its resident records fit its budget, skipping busy
// records; dirty victims are written back in one WriteBatch before they leave DRAM (while
// being written they are busy, so a concurrent miss on them waits instead of reading a stale
// copy). On a failed write the victims stay resident.
Status TieredRowStore::Evict(const std::vector<uint32_t>& shard_ids) {
  struct Victim {
    uint32_t shard;
    CachedRecord* record;
  };
  std::vector<Victim> victims;
  rocksdb::WriteBatch batch;
  const bool expiry = options_.expire_after_clocks > 0;
  char key[8];
  uint64_t dirty = 0;
  for (uint32_t sh : shard_ids) {
    Shard& s = *shards_[sh];
    std::lock_guard lock(s.mu);
    uint64_t resident = s.map.size();
    if (resident * footprint_bytes_ <= shard_budget_bytes_) continue;
    s.order.Scan([&](CachedRecord* r) {
      if (resident * footprint_bytes_ <= shard_budget_bytes_) return false;
      victims.push_back({sh, r});
      --resident;
      return true;
    });
    for (size_t v = victims.size(); v-- > 0 && victims[v].shard == sh;) {
      CachedRecord* r = victims[v].record;
      s.order.Remove(r);
      r->busy = true;
      EncodeKey(r->key, key);
      if (r->dirty) {
        batch.Put(records_cf_, rocksdb::Slice(key, 8),
                  rocksdb::Slice(reinterpret_cast<const char*>(r->data), record_bytes_));
        ++dirty;
      }
      if (expiry) {
        batch.Put(clocks_cf_, rocksdb::Slice(key, 8),
                  rocksdb::Slice(reinterpret_cast<const char*>(&r->last_clock), 8));
      }
    }
  }
  if (victims.empty()) return Status::OK();
  Status s = batch.Count() > 0 ? WriteBatchToDb(batch, false) : Status::OK();
  for (size_t v = 0; v < victims.size();) {
    Shard& sh = *shards_[victims[v].shard];
    {
      std::lock_guard lock(sh.mu);
      for (const uint32_t id = victims[v].shard; v < victims.size() && victims[v].shard == id; ++v) {
        CachedRecord* r = victims[v].record;
        r->busy = false;
        if (s.ok()) {
          EraseRecord(sh, r);
          ++sh.evictions;
        } else {
          sh.order.Insert(r, r->frequency);
        }
      }
    }
    if (sh.waiters) sh.cv.notify_all();
  }
  if (s.ok()) written_back_ += dirty;
  return s.WithContext("write back evicted records");
}

Status TieredRowStore::WriteBatchToDb(rocksdb::WriteBatch& batch, bool sync) {
  rocksdb::WriteOptions wo;
  if (options_.durability == Durability::kWal) {
    wo.sync = sync;
  } else {
    wo.disableWAL = true;
  }
  ++write_batches_;
  const auto start = std::chrono::steady_clock::now();
  rocksdb::Status s = db_->Write(wo, &batch);
  if (wo.sync && s.ok()) {
    wal_sync_seconds_.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return offload_internal::FromRocks(s, "write to RocksDB at " + options_.path);
}

// kWal: the call's changed records (and its update id) go to the synced WAL in one batch before
// the call returns. Concurrent callers' synced writes are grouped into one fsync by RocksDB's
// write leader.
Status TieredRowStore::WriteThrough(Call& call, bool is_update, UpdateId id) {
  rocksdb::WriteBatch batch;
  char key[8];
  for (const Slot& slot : call.slots) {
    const bool changed = slot.kind == SlotKind::kCreated || (is_update && slot.kind != SlotKind::kScratch);
    if (!changed) continue;
    EncodeKey(slot.key, key);
    batch.Put(records_cf_, rocksdb::Slice(key, 8),
              rocksdb::Slice(reinterpret_cast<const char*>(slot.data), record_bytes_));
  }
  if (id.id != 0) PutUpdateId(batch, id);
  if (batch.Count() == 0) return Status::OK();
  return WriteBatchToDb(batch, /*sync=*/true);
}

// The call is over: records become visible to others, in the eviction order, dirty if changed
// and not written through; scratch records are dropped. Shards left over budget (a batch larger
// than a shard's budget) evict now; a failure there only keeps the records resident.
void TieredRowStore::Release(Call& call, bool is_update) {
  const bool wal = options_.durability == Durability::kWal;
  const uint64_t clock = clock_.load(std::memory_order_relaxed);
  std::vector<uint32_t> over;
  for (uint32_t sh = 0; sh < shards_.size(); ++sh) {
    const uint32_t begin = call.shard_begin[sh], end = call.shard_begin[sh + 1];
    if (begin == end) continue;
    Shard& s = *shards_[sh];
    {
      std::lock_guard lock(s.mu);
      for (uint32_t j = begin; j < end; ++j) {
        const Slot& slot = call.slots[call.by_shard[j]];
        CachedRecord* r = slot.record;
        r->busy = false;
        r->last_clock = clock;
        switch (slot.kind) {
          case SlotKind::kScratch:
            s.not_admitted += slot.accesses;
            EraseRecord(s, r);
            continue;
          case SlotKind::kHit:
            s.order.Touch(r, slot.accesses);
            break;
          case SlotKind::kCreated:
            ++s.created;
            records_.fetch_add(1, std::memory_order_relaxed);
            r->dirty = !wal;
            s.order.Insert(r, slot.accesses);
            break;
          case SlotKind::kFetched:
            s.order.Insert(r, slot.accesses);
            break;
        }
        if (is_update && !wal) r->dirty = true;
      }
      if (s.map.size() * footprint_bytes_ > shard_budget_bytes_) over.push_back(sh);
    }
    if (s.waiters) s.cv.notify_all();
  }
  if (!over.empty() && !Evict(over).ok()) ++write_back_errors_;
}

// The call failed: residents are released untouched, placeholders dropped.
void TieredRowStore::Abandon(Call& call) {
  for (uint32_t sh = 0; sh < shards_.size(); ++sh) {
    const uint32_t begin = call.shard_begin[sh], end = call.shard_begin[sh + 1];
    if (begin == end) continue;
    Shard& s = *shards_[sh];
    {
      std::lock_guard lock(s.mu);
      for (uint32_t j = begin; j < end; ++j) {
        const Slot& slot = call.slots[call.by_shard[j]];
        if (!slot.record) continue;
        slot.record->busy = false;
        if (slot.kind != SlotKind::kHit) EraseRecord(s, slot.record);
      }
    }
    if (s.waiters) s.cv.notify_all();
  }
}

// ---------------------------------------------------------------------------------------------
// Clocks, expiry, stats

Status TieredRowStore::AdvanceClock(uint64_t clock) {
  {
    std::unique_lock barrier(barrier_mu_);
    if (closed_) return Status::FailedPrecondition("tiered store " + options_.path + " is closed");
    if (clock < clock_.load()) {
      return Status::InvalidArgument("clock " + std::to_string(clock) + " is before the current clock " +
                                     std::to_string(clock_.load()));
    }
    clock_.store(clock);
    if (options_.expire_after_clocks > 0 && clock > options_.expire_after_clocks) {
      STRATA_RETURN_IF_ERROR(ExpireLocked(clock - options_.expire_after_clocks));
    }
  }
  if (options_.durability == Durability::kCheckpoint && options_.checkpoint_every_clocks > 0 &&
      clock % options_.checkpoint_every_clocks == 0) {
    STRATA_RETURN_IF_ERROR(Checkpoint(AutoCheckpointDir(clock)));
    return PruneCheckpoints();
  }
  return Status::OK();
}

// Deletes rows last seen before `cutoff` from DRAM and RocksDB (exclusive: no call is running,
// so no record is busy and no miss is in flight).
Status TieredRowStore::ExpireLocked(uint64_t cutoff) {
  rocksdb::WriteBatch batch;
  char key[8];
  uint64_t expired = 0;
  std::unordered_set<uint64_t> dropped;  // already expired from DRAM (their clocks on disk are older)
  auto drop_on_disk = [&](uint64_t k) {
    EncodeKey(k, key);
    batch.Delete(records_cf_, rocksdb::Slice(key, 8));
    batch.Delete(clocks_cf_, rocksdb::Slice(key, 8));
  };
  for (auto& sp : shards_) {
    Shard& s = *sp;
    std::lock_guard lock(s.mu);
    std::vector<CachedRecord*> old;
    for (auto& [k, r] : s.map) {
      if (r.last_clock < cutoff) old.push_back(&r);
    }
    for (CachedRecord* r : old) {
      drop_on_disk(r->key);
      dropped.insert(r->key);
      EraseRecord(s, r);
    }
    expired += old.size();
  }
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions(), clocks_cf_));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    if (it->key().size() != 8 || it->value().size() != 8) continue;
    const uint64_t k = offload_internal::DecodeKey(it->key().data());
    uint64_t last = 0;
    std::memcpy(&last, it->value().data(), 8);
    if (last >= cutoff || dropped.count(k)) continue;
    Shard& s = ShardOf(k);
    std::lock_guard lock(s.mu);
    if (s.map.count(k)) continue;  // resident: DRAM's clock is the current one
    drop_on_disk(k);
    ++expired;
  }
  STRATA_RETURN_IF_ERROR(offload_internal::FromRocks(it->status(), "scan row clocks in " + options_.path));
  if (batch.Count() > 0) STRATA_RETURN_IF_ERROR(WriteBatchToDb(batch, true).WithContext("expire rows"));
  expired_ += expired;
  records_.fetch_sub(std::min(expired, records_.load()));
  return Status::OK();
}

}  // namespace strata
