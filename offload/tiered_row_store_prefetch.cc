// tiered_row_store_prefetch.cc: TieredRowStore::Prefetch, the read-ahead (row_store.h): the
// records a lower tier holds are read into DRAM ahead of the calls that will touch them, only
// into room the budget has left, so a read-ahead never evicts what is resident.
#include "offload/internal/tiered_row_store_internal.h"
#include "offload/tiered_row_store.h"

namespace strata {

Result<uint64_t> TieredRowStore::Prefetch(std::span<const uint64_t> keys) {
  std::shared_lock barrier(barrier_mu_);
  if (closed_) return Status::FailedPrecondition("tiered store " + options_.path + " is closed");
  std::vector<uint64_t> want;
  std::vector<uint64_t> planned(shards_.size(), 0);
  for (uint64_t key : keys) {
    const uint32_t sh = shift_ == 64 ? 0 : ShardIndex(key);
    Shard& s = *shards_[sh];
    std::lock_guard lock(s.mu);
    if (s.map.count(key) != 0) continue;
    if ((s.map.size() + planned[sh] + 1) * footprint_bytes_ > shard_budget_bytes_) continue;
    ++planned[sh];
    want.push_back(key);
  }
  if (want.empty()) return uint64_t{0};
  Call call;
  call.prefetch = true;
  call.Plan(want, *this);
  Acquire(call);
  if (Status s = Fetch(call, nullptr); !s.ok()) {
    Abandon(call);
    return s;
  }
  const uint64_t clock = clock_.load(std::memory_order_relaxed);
  uint64_t read = 0;
  for (uint32_t sh = 0; sh < shards_.size(); ++sh) {
    const uint32_t begin = call.shard_begin[sh], end = call.shard_begin[sh + 1];
    if (begin == end) continue;
    Shard& s = *shards_[sh];
    {
      std::lock_guard lock(s.mu);
      for (uint32_t j = begin; j < end; ++j) {
        const Slot& slot = call.slots[call.by_shard[j]];
        offload_internal::CachedRecord* r = slot.record;
        r->busy = false;
        if (slot.kind == SlotKind::kScratch) {
          EraseRecord(s, r);
        } else if (slot.kind == SlotKind::kFetched) {
          r->last_clock = clock;
          s.order.Insert(r, 1);
          ++s.prefetched;
          ++read;
        }
      }
    }
    if (s.waiters) s.cv.notify_all();
  }
  return read;
}

}  // namespace strata
