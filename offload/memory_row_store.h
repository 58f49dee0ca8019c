// memory_row_store.h: MemoryRowStore, a RowStore entirely in DRAM: the keys are spread over
// shards (each a hash map under its own mutex), so concurrent pushes to different keys rarely
// contend. Records are stored contiguously per shard in blocks, so a record's address is stable.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "offload/row_store.h"

namespace strata {

class MemoryRowStore final : public RowStore {
 public:
  explicit MemoryRowStore(int width, int shards = 64);

  int width() const override { return width_; }
  Status Update(std::span<const uint64_t> keys, const Init& init, const Visit& visit) override;
  Status Read(std::span<const uint64_t> keys, const Init& init, const ReadVisit& visit) override;
  Status Peek(std::span<const uint64_t> keys, const Init& init, const ReadVisit& visit) override;
  // Copies each shard's records under its lock, then visits them in key order.
  Status Scan(const ScanVisit& visit) override;
  // The freed records are reused by the next records created in their shards.
  Result<uint64_t> Erase(std::span<const uint64_t> keys) override;
  RowStoreStats stats() const override;

 private:
  struct Shard {
    mutable std::mutex mu;
    std::unordered_map<uint64_t, float*> index;
    std::vector<std::unique_ptr<float[]>> blocks;
    std::vector<float*> free;  // erased records, reused first
    size_t used_in_block = 0;  // records used in blocks.back()
    size_t block_records = 0;  // records blocks.back() holds (1, 2, 4, ... records_per_block_)
    size_t allocated = 0;      // records all the blocks hold
    uint64_t hits = 0, created = 0;
  };
  float* Find(Shard& s, uint64_t key, const Init& init);
  // Calls fn(i, record) for every key with its shard locked; the body of Update and Read.
  template <typename Fn>
  Status ForEach(std::span<const uint64_t> keys, const Init& init, Fn&& fn);
  Shard& ShardOf(uint64_t key) { return shards_[(key * 0x9E3779B97F4A7C15ull) >> shift_]; }

  const int width_;
  size_t records_per_block_;
  int shift_;
  std::vector<Shard> shards_;
};

}  // namespace strata
