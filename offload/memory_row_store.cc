// memory_row_store.cc: MemoryRowStore.
#include "offload/memory_row_store.h"

#include <algorithm>
#include <bit>

#include "common/check.h"

namespace strata {
namespace {
// Blocks of up to about 1 MiB: small records share a block, a wide one (a dense chunk) gets its
// own. A shard's blocks grow from one record, doubling, so a table of a few records (a dense
// layer norm's one chunk) holds about what it uses, not a megabyte per shard.
constexpr size_t kBlockBytes = 1 << 20;
}

MemoryRowStore::MemoryRowStore(int width, int shards)
    : width_(width), shards_(std::max(2u, std::bit_ceil(static_cast<unsigned>(shards)))) {
  STRATA_CHECK_GT(width, 0);
  records_per_block_ = std::clamp<size_t>(kBlockBytes / (width * sizeof(float)), 1, 1024);
  shift_ = 64 - std::countr_zero(shards_.size());  // the top bits of the hash pick the shard
}

float* MemoryRowStore::Find(Shard& s, uint64_t key, const Init& init) {
  if (auto it = s.index.find(key); it != s.index.end()) {
    ++s.hits;
    return it->second;
  }
  if (!init) return nullptr;
  float* record = nullptr;
  if (!s.free.empty()) {
    record = s.free.back();
    s.free.pop_back();
  } else if (s.blocks.empty() || s.used_in_block == s.block_records) {
    s.block_records = std::min(records_per_block_, s.blocks.empty() ? size_t{1} : 2 * s.block_records);
    // Not zero-filled: `init` writes every float of a record before anyone reads it.
    s.blocks.push_back(std::make_unique_for_overwrite<float[]>(s.block_records * width_));
    s.used_in_block = 0;
    s.allocated += s.block_records;
  }
  if (!record) record = s.blocks.back().get() + s.used_in_block++ * width_;
  init(key, std::span<float>(record, width_));
  s.index.emplace(key, record);
  ++s.created;
  return record;
}

template <typename Fn>
Status MemoryRowStore::ForEach(std::span<const uint64_t> keys, const Init& init, Fn&& fn) {
  if (!init) {
    // Without an initializer every key must exist: check first, so nothing is half-applied.
    for (uint64_t key : keys) {
      Shard& s = ShardOf(key);
      std::lock_guard lock(s.mu);
      if (!s.index.count(key)) return Status::NotFound("no record for key " + std::to_string(key));
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    Shard& s = ShardOf(keys[i]);
    std::lock_guard lock(s.mu);
    fn(i, Find(s, keys[i], init));
  }
  return Status::OK();
}

Status MemoryRowStore::Update(std::span<const uint64_t> keys, const Init& init, const Visit& visit) {
  return ForEach(keys, init, [&](size_t i, float* r) { visit(i, std::span<float>(r, width_)); });
}

Status MemoryRowStore::Read(std::span<const uint64_t> keys, const Init& init, const ReadVisit& visit) {
  return ForEach(keys, init, [&](size_t i, float* r) { visit(i, std::span<const float>(r, width_)); });
}

Status MemoryRowStore::Peek(std::span<const uint64_t> keys, const Init& init, const ReadVisit& visit) {
  std::vector<float> scratch;
  for (size_t i = 0; i < keys.size(); ++i) {
    Shard& s = ShardOf(keys[i]);
    std::unique_lock lock(s.mu);
    if (const float* r = Find(s, keys[i], nullptr)) {
      visit(i, std::span<const float>(r, width_));
      continue;
    }
    lock.unlock();
    scratch.resize(static_cast<size_t>(width_));
    init(keys[i], std::span<float>(scratch));
    visit(i, std::span<const float>(scratch));
  }
  return Status::OK();
}

Status MemoryRowStore::Scan(const ScanVisit& visit) {
  std::vector<std::pair<uint64_t, size_t>> order;  // key, offset in `copy`
  std::vector<float> copy;
  for (Shard& s : shards_) {
    std::lock_guard lock(s.mu);
    for (const auto& [key, record] : s.index) {
      order.emplace_back(key, copy.size());
      copy.insert(copy.end(), record, record + width_);
    }
  }
  std::sort(order.begin(), order.end());
  for (const auto& [key, at] : order) {
    STRATA_RETURN_IF_ERROR(visit(key, std::span<const float>(copy.data() + at, static_cast<size_t>(width_))));
  }
  return Status::OK();
}

Result<uint64_t> MemoryRowStore::Erase(std::span<const uint64_t> keys) {
  uint64_t erased = 0;
  for (uint64_t key : keys) {
    Shard& s = ShardOf(key);
    std::lock_guard lock(s.mu);
    auto it = s.index.find(key);
    if (it == s.index.end()) continue;
    s.free.push_back(it->second);
    s.index.erase(it);
    ++erased;
  }
  return erased;
}

RowStoreStats MemoryRowStore::stats() const {
  RowStoreStats st;
  for (const Shard& s : shards_) {
    std::lock_guard lock(s.mu);
    st.records += s.index.size();
    st.bytes_in_memory += s.allocated * width_ * sizeof(float);
    st.hits += s.hits;
    st.created += s.created;
  }
  st.misses = st.created;
  return st;
}

}  // namespace strata
