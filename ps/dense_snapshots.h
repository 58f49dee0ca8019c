// dense_snapshots.h: DenseSnapshots, the values of a dense table's chunks as immutable,
// reference-counted buffers that pull replies hand to the transport as they are (ZeroMQ sends
// them without a copy and lets go of them when written). A buffer is never written once
// published: an update makes the chunk's snapshot stale, and the next pull reads the store into
// a fresh buffer from the pool (copy-on-write, done lazily), so a reply in flight keeps the
// version it was given, and pulls of a chunk that was not updated since cost no copy at all.
// A chunk that pulls read (WasRead) gets its next snapshot from the update itself instead: the
// writer copies the record into a fresh buffer while it holds it, invalidates there, and
// publishes with the version Invalidate returned, so the pull after a push (the offload step)
// finds it fresh.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

namespace strata {

// Thread-safe. Buffers taken from it may outlive it (a reply still in the transport).
class DenseSnapshots {
 public:
  // `chunk_floats`: the length of every buffer; `pool_max`: free buffers kept for reuse.
  DenseSnapshots(uint32_t chunk_floats, size_t pool_max);
  DenseSnapshots(const DenseSnapshots&) = delete;
  DenseSnapshots& operator=(const DenseSnapshots&) = delete;

  struct Lookup {
    std::shared_ptr<const float> values;  // null: stale, read the store and Publish
    uint64_t version = 0;                 // pass to Publish
  };
  Lookup Get(uint64_t chunk);  // a snapshot it returns counts as read (WasRead)
  // The snapshots of every chunk (counted as read), or false, counting none, if any is stale.
  bool GetFresh(std::span<const uint64_t> chunks, std::vector<std::shared_ptr<const float>>* values);
  // Installs `values`, read from the store after Get returned `version`, unless the chunk was
  // updated since (then the next pull reads again; `values` is still a consistent version).
  // `read`: a pull is sending them (it read the store for them), so they count as read.
  void Publish(uint64_t chunk, uint64_t version, std::shared_ptr<const float> values, bool read);
  // The chunk's values changed in the store: drops its snapshot (replies holding it keep it).
  // Returns the chunk's version from now on. A writer that calls it while it still holds the
  // record it changed (so that no read or other write of the record comes between) may Publish
  // its copy of the record with that version.
  uint64_t Invalidate(uint64_t chunk);
  // Whether the chunk's snapshot was handed to a pull since it was published: worth making the
  // next one as the chunk is updated.
  bool WasRead(uint64_t chunk);

  // A buffer of chunk_floats floats, uninitialised; recycled into the pool when released.
  std::shared_ptr<float> Acquire();

  // Buffers made (not recycled) so far, for tests and statistics.
  uint64_t allocated() const;

 private:
  struct Pool;
  struct Entry {
    std::shared_ptr<const float> values;
    uint64_t version = 0;
    bool read = false;  // `values` was handed to a pull
  };

  const uint32_t chunk_floats_;
  std::shared_ptr<Pool> pool_;
  std::mutex mu_;  // guards entries_
  std::unordered_map<uint64_t, Entry> entries_;
};

}  // namespace strata
