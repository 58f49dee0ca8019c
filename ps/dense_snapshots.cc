// dense_snapshots.cc: DenseSnapshots and its buffer pool.
#include "ps/dense_snapshots.h"

namespace strata {

// Free buffers, shared with every buffer handed out so that a buffer released after the
// DenseSnapshots is gone still has somewhere to go (and is freed with the last of them).
struct DenseSnapshots::Pool {
  explicit Pool(size_t max) : max_free(max) {}
  std::mutex mu;
  std::vector<std::unique_ptr<float[]>> free;
  const size_t max_free;
  uint64_t allocated = 0;
};

DenseSnapshots::DenseSnapshots(uint32_t chunk_floats, size_t pool_max)
    : chunk_floats_(chunk_floats), pool_(std::make_shared<Pool>(pool_max)) {}

DenseSnapshots::Lookup DenseSnapshots::Get(uint64_t chunk) {
  std::lock_guard lock(mu_);
  Entry& e = entries_[chunk];
  if (e.values) e.read = true;
  return {e.values, e.version};
}

bool DenseSnapshots::GetFresh(std::span<const uint64_t> chunks, std::vector<std::shared_ptr<const float>>* values) {
  values->clear();
  values->reserve(chunks.size());
  std::lock_guard lock(mu_);
  for (uint64_t chunk : chunks) {
    auto it = entries_.find(chunk);
    if (it == entries_.end() || !it->second.values) {
      values->clear();
      return false;
    }
    values->push_back(it->second.values);
  }
  for (uint64_t chunk : chunks) entries_[chunk].read = true;
  return true;
}

void DenseSnapshots::Publish(uint64_t chunk, uint64_t version, std::shared_ptr<const float> values, bool read) {
  std::shared_ptr<const float> old;  // released after the lock: it may go back to the pool
  std::lock_guard lock(mu_);
  Entry& e = entries_[chunk];
  if (e.version != version) return;
  old.swap(e.values);
  e.values = std::move(values);
  e.read = read;
}

uint64_t DenseSnapshots::Invalidate(uint64_t chunk) {
  std::shared_ptr<const float> old;  // released after the lock: it may go back to the pool
  std::lock_guard lock(mu_);
  Entry& e = entries_[chunk];
  ++e.version;
  old.swap(e.values);
  e.read = false;
  return e.version;
}

bool DenseSnapshots::WasRead(uint64_t chunk) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(chunk);
  return it != entries_.end() && it->second.values && it->second.read;
}

std::shared_ptr<float> DenseSnapshots::Acquire() {
  std::unique_ptr<float[]> buffer;
  {
    std::lock_guard lock(pool_->mu);
    if (!pool_->free.empty()) {
      buffer = std::move(pool_->free.back());
      pool_->free.pop_back();
    } else {
      ++pool_->allocated;
    }
  }
  if (!buffer) buffer = std::make_unique_for_overwrite<float[]>(chunk_floats_);
  float* raw = buffer.release();
  return std::shared_ptr<float>(raw, [pool = pool_](float* p) {
    std::unique_ptr<float[]> owned(p);
    std::lock_guard lock(pool->mu);
    if (pool->free.size() < pool->max_free) pool->free.push_back(std::move(owned));
  });
}

uint64_t DenseSnapshots::allocated() const {
  std::lock_guard lock(pool_->mu);
  return pool_->allocated;
}

}  // namespace strata
