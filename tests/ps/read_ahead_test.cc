// read_ahead_test.cc: ReadAhead (ps/read_ahead.h) over a real tiered store, and its queue with a
// fake store (a unit test of the one class): a cold store's records are read ahead so the
// requests that follow hit DRAM; a store queued twice is read once; the oldest of too many is
// dropped.
#include "ps/read_ahead.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "offload/tiered_row_store.h"
#include "test_util.h"

namespace strata {
namespace {

bool WaitFor(const std::function<bool()>& done) {
  for (int i = 0; i < 500 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return done();
}

TEST(ReadAhead, AColdStoresRecordsAreInDramBeforeTheRequestsAsk) {
  testing::TempDir dir;
  TieredStoreOptions o;
  o.path = dir.path() + "/store";
  o.shards = 1;
  o.dram_budget_bytes = 64 * (4 * 8 + TieredRowStore::kRecordOverheadBytes);
  std::vector<uint64_t> keys(32);
  for (uint64_t k = 0; k < keys.size(); ++k) keys[k] = k;
  {
    auto store = TieredRowStore::Open(o, 8);
    ASSERT_TRUE(store.ok()) << store.status().ToString();
    ASSERT_TRUE((*store)->Update(keys, [](uint64_t k, std::span<float> r) { std::fill(r.begin(), r.end(), float(k)); },
                                 [](size_t, std::span<float>) {}).ok());
  }  // closed: the records are in RocksDB only
  auto store = TieredRowStore::Open(o, 8);
  ASSERT_TRUE(store.ok()) << store.status().ToString();
  {
    ReadAhead ahead;
    ahead.Ask(store->get(), keys);
    ASSERT_TRUE(WaitFor([&] { return ahead.records_read() == keys.size(); })) << ahead.records_read();
    EXPECT_EQ(ahead.errors(), 0u);
  }
  const TieredStoreStats before = (*store)->detailed_stats();
  ASSERT_TRUE((*store)->Read(keys, nullptr, [](size_t i, std::span<const float> r) { EXPECT_EQ(r[0], float(i)); }).ok());
  const TieredStoreStats after = (*store)->detailed_stats();
  EXPECT_EQ(after.hits - before.hits, keys.size());
  EXPECT_EQ(after.misses, before.misses);
}

// Prefetch blocks until released, and records which keys it was asked for.
class GatedStore : public RowStore {
 public:
  int width() const override { return 1; }
  Status Update(std::span<const uint64_t>, const Init&, const Visit&) override { return Status::OK(); }
  Status Read(std::span<const uint64_t>, const Init&, const ReadVisit&) override { return Status::OK(); }
  Status Scan(const ScanVisit&) override { return Status::OK(); }
  Result<uint64_t> Erase(std::span<const uint64_t>) override { return uint64_t{0}; }
  RowStoreStats stats() const override { return {}; }
  Result<uint64_t> Prefetch(std::span<const uint64_t> keys) override {
    std::unique_lock lock(mu);
    asked.push_back(keys[0]);
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
    return uint64_t{keys.size()};
  }
  void Open() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint64_t> asked;
  bool open = false;
};

TEST(ReadAhead, AStoreQueuedTwiceIsReadOnceAndTheOldestOfTooManyIsDropped) {
  GatedStore busy;
  std::vector<GatedStore> stores(ReadAhead::kMaxQueued + 1);
  {
    ReadAhead ahead;
    ahead.Ask(&busy, {100});  // the thread takes it and waits in Prefetch
    {
      std::unique_lock lock(busy.mu);
      ASSERT_TRUE(busy.cv.wait_for(lock, std::chrono::seconds(5), [&] { return !busy.asked.empty(); }));
    }
    for (size_t i = 0; i < stores.size(); ++i) {
      stores[i].Open();
      ahead.Ask(&stores[i], {i});
      ahead.Ask(&stores[i], {i + 1000});  // already queued: not again
    }
    busy.Open();
    ASSERT_TRUE(WaitFor([&] { return ahead.records_read() == 1 + ReadAhead::kMaxQueued; }));
  }
  EXPECT_TRUE(stores[0].asked.empty()) << "the oldest queued was dropped";
  for (size_t i = 1; i < stores.size(); ++i) EXPECT_EQ(stores[i].asked, std::vector<uint64_t>{i});
}

}  // namespace
}  // namespace strata
