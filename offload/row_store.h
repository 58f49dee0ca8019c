// row_store.h: RowStore, where a server keeps one shard of one table: fixed-width records of
// floats keyed by uint64. A sparse table's record is an embedding row plus its optimizer state;
// a dense table's record is one chunk of the tensor plus its state (key = chunk index). The
// parameter server only talks to this interface; MemoryRowStore (memory_row_store.h) keeps
// everything in DRAM, the tiered store (DRAM over RocksDB) implements the same interface.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "common/metrics.h"
#include "common/status.h"

namespace strata {

struct RowStoreStats {
  uint64_t records = 0;        // records held (all tiers)
  uint64_t bytes_in_memory = 0;
  uint64_t hits = 0;           // lookups served from DRAM
  uint64_t misses = 0;         // lookups that went to a lower tier (or created a record)
  uint64_t created = 0;        // records made by the initializer
  uint64_t prefetched = 0;     // records read ahead into DRAM (Prefetch), not counted as misses
  // Durable stores: seconds of each synced write (durability wal: one per update batch, RocksDB
  // groups concurrent ones into one fsync) and of each checkpoint. Empty (no bounds, count 0)
  // for a store that keeps no such times.
  Histogram::Snapshot wal_sync_seconds;
  Histogram::Snapshot checkpoint_seconds;
};

// Names one update so that a store can tell, even after a restart, that it was applied: the
// sending node's id and the sender's id for that update (a push id, ps/client.h). id 0: unnamed.
struct UpdateId {
  uint32_t sender = 0;
  uint64_t id = 0;
  bool operator==(const UpdateId&) const = default;
};

// Thread-safe: calls on different keys run in parallel; a record is never visited by two
// calls at once.
class RowStore {
 public:
  // Fills a new record: must write every float (value by the table's initializer, state zeroed).
  using Init = std::function<void(uint64_t key, std::span<float> record)>;
  // Visits keys[index]'s record. Mutations are kept.
  using Visit = std::function<void(size_t index, std::span<float> record)>;
  using ReadVisit = std::function<void(size_t index, std::span<const float> record)>;

  virtual ~RowStore() = default;

  // Floats per record.
  virtual int width() const = 0;

  // Visits the record of every key, creating absent ones with `init` first. Duplicate keys are
  // visited once per occurrence, in order. Either every key is visited or (on an I/O failure)
  // the Status says why and no visit was made.
  virtual Status Update(std::span<const uint64_t> keys, const Init& init, const Visit& visit) = 0;

  // Update, and records `id` with it, atomically: whatever state a restarted store recovers
  // (its WAL, its last checkpoint) holds the update if and only if RecordedUpdateIds() lists
  // the id. Stores that keep nothing across a restart (MemoryRowStore) just Update.
  virtual Status UpdateWithId(std::span<const uint64_t> keys, const Init& init, const Visit& visit,
                              [[maybe_unused]] UpdateId id) {
    return Update(keys, init, visit);
  }
  // The ids recorded by UpdateWithId that this store kept: for each sender, at least the ids of
  // its updates within the last kRecordedIdsPerSender id values (ids grow per sender), in no
  // particular order. Read once, at a restart.
  static constexpr uint64_t kRecordedIdsPerSender = 1 << 16;
  virtual Result<std::vector<UpdateId>> RecordedUpdateIds() const { return std::vector<UpdateId>{}; }

  // Reads the record of every key. Absent keys are created with `init` when it is set (a lazily
  // created embedding row is read before it is ever written), else NotFound naming the key.
  virtual Status Read(std::span<const uint64_t> keys, const Init& init, const ReadVisit& visit) = 0;

  // Like Read, but an absent key is visited with a record that `init` filled in scratch memory,
  // and nothing is stored: a read-only server (inference) answers every key and admits no rows.
  // This default reads key by key; stores may do better.
  virtual Status Peek(std::span<const uint64_t> keys, const Init& init, const ReadVisit& visit) {
    std::vector<float> scratch;
    for (size_t i = 0; i < keys.size(); ++i) {
      Status s = Read(keys.subspan(i, 1), nullptr, [&](size_t, std::span<const float> r) { visit(i, r); });
      if (s.ok()) continue;
      if (!s.IsNotFound()) return s;
      scratch.resize(static_cast<size_t>(width()));
      init(keys[i], std::span<float>(scratch));
      visit(i, std::span<const float>(scratch));
    }
    return Status::OK();
  }

  // Visits every record once, in increasing key order, as of one moment (the caller keeps
  // writers away, or accepts that a record updated meanwhile is visited before or after).
  using ScanVisit = std::function<Status(uint64_t key, std::span<const float> record)>;
  virtual Status Scan(const ScanVisit& visit) = 0;

  // Removes the records of `keys` from every tier (absent keys and repeats are skipped); returns
  // how many records it removed. A server erases the rows that moved to another server once the
  // move is in force (ps/server_migrate.cc). All or nothing: on an I/O error nothing was removed.
  // The caller keeps other calls on these keys away.
  virtual Result<uint64_t> Erase(std::span<const uint64_t> keys) = 0;

  virtual RowStoreStats stats() const = 0;

  // A read-ahead: brings the records of `keys` that a lower tier holds into DRAM while they fit
  // without evicting anything, so the calls that touch them next find them resident. Keys
  // already resident, absent from every tier, or past the room left are skipped; nothing is
  // created or changed. Returns the records read. Stores with one tier read nothing.
  virtual Result<uint64_t> Prefetch([[maybe_unused]] std::span<const uint64_t> keys) { return uint64_t{0}; }

  // Tells the store that `clock` (the slowest trainer's) began; clocks only grow. Stores that
  // expire rows or checkpoint on a clock schedule act on it (TieredRowStore); others ignore it.
  virtual Status AdvanceClock([[maybe_unused]] uint64_t clock) { return Status::OK(); }
  // The last clock given to AdvanceClock (a store restored from a checkpoint resumes at the
  // checkpoint's clock). Callers pass only larger clocks.
  virtual uint64_t clock() const { return 0; }
};

}  // namespace strata
