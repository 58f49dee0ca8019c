// tiered_row_store_internal.h: the private parts of TieredRowStore shared by its .cc files: a
// DRAM shard, a call's plan (one slot per distinct key), and the rocksdb::Status conversion.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "offload/internal/eviction_order.h"
#include "offload/tiered_row_store.h"

namespace rocksdb {
class Status;
}

namespace strata {

namespace offload_internal {
// Converts a RocksDB failure into a Status "context: rocksdb message" of the matching code.
Status FromRocks(const rocksdb::Status& s, std::string_view context);
}  // namespace offload_internal

// InvalidArgument naming the field, or OK.
Status ValidateTieredStoreOptions(const TieredStoreOptions& o, int width);

struct TieredRowStore::Shard {
  explicit Shard(offload_internal::EvictionPolicyKind kind) : order(kind) {}

  std::mutex mu;
  std::condition_variable cv;  // a busy record was released
  int waiters = 0;
  std::unordered_map<uint64_t, offload_internal::CachedRecord> map;  // node-based: stable
  offload_internal::EvictionOrder order;
  std::vector<std::unique_ptr<float[]>> blocks;  // record storage, never shrinks
  std::vector<float*> free;
  std::unordered_map<uint64_t, uint32_t> candidates;  // admission: sightings of new keys
  uint64_t hits = 0, misses = 0, created = 0, not_admitted = 0, evictions = 0, prefetched = 0;
};

enum class TieredRowStore::SlotKind : uint8_t {
  kHit,      // was resident
  kFetched,  // loaded from RocksDB by this call
  kCreated,  // made by the initializer, to be kept
  kScratch,  // made by the initializer, dropped at the end (not admitted yet)
};

struct TieredRowStore::Slot {
  uint64_t key = 0;
  uint32_t shard = 0;
  uint32_t accesses = 0;  // occurrences in the call
  SlotKind kind = SlotKind::kHit;
  offload_internal::CachedRecord* record = nullptr;
  float* data = nullptr;
};

struct TieredRowStore::Call {
  void Plan(std::span<const uint64_t> keys, TieredRowStore& store);
  std::vector<uint32_t> ShardsWithNewRecords() const;
  void Backup(int width);
  void RestoreBackup(int width);

  std::span<const uint64_t> keys;
  std::vector<Slot> slots;            // one per distinct key
  std::vector<uint32_t> slot_of;      // key position -> slot
  std::vector<uint32_t> by_shard;     // slots grouped by shard
  std::vector<uint32_t> shard_begin;  // by_shard offsets, one per shard + 1
  std::vector<uint32_t> misses;       // slots not resident at Acquire, in shard order
  std::vector<float> backup;          // kWal: the records before the visits
  bool prefetch = false;              // a read-ahead: Acquire counts no hits or misses
};

}  // namespace strata
