// tiered_row_store_stats.cc: TieredRowStore's statistics (detailed_stats, stats).
#include "offload/internal/tiered_row_store_internal.h"
#include "offload/tiered_row_store.h"

namespace strata {

TieredStoreStats TieredRowStore::detailed_stats() const {
  TieredStoreStats st;
  for (const auto& sp : shards_) {
    std::lock_guard lock(sp->mu);
    st.records_in_memory += sp->map.size();
    st.hits += sp->hits;
    st.misses += sp->misses;
    st.created += sp->created;
    st.not_admitted += sp->not_admitted;
    st.evictions += sp->evictions;
    st.prefetched += sp->prefetched;
  }
  st.bytes_in_memory = st.records_in_memory * footprint_bytes_;
  st.records = records_.load();
  st.written_back = written_back_.load();
  st.multigets = multigets_.load();
  st.write_batches = write_batches_.load();
  st.expired = expired_.load();
  st.checkpoints = checkpoints_.load();
  st.write_back_errors = write_back_errors_.load();
  st.clock = clock_.load();
  return st;
}

RowStoreStats TieredRowStore::stats() const {
  const TieredStoreStats d = detailed_stats();
  RowStoreStats st;
  st.records = d.records;
  st.bytes_in_memory = d.bytes_in_memory;
  st.hits = d.hits;
  st.misses = d.misses;
  st.created = d.created;
  st.prefetched = d.prefetched;
  st.wal_sync_seconds = wal_sync_seconds_.Read();
  st.checkpoint_seconds = checkpoint_seconds_.Read();
  return st;
}

}  // namespace strata
