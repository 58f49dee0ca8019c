// tiered_row_store_test.cc: TieredRowStore: budget, LRU/LFU order, batched misses, write-back,
// equivalence with MemoryRowStore on a table 10x the budget, admission, expiry, concurrency.
// Durability, checkpoints, export and errors are in tiered_durability_test.cc.
#include "offload/tiered_row_store.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "offload/memory_row_store.h"
#include "test_util.h"

namespace strata {
namespace {

using testing::TempDir;

void InitKey(uint64_t key, std::span<float> r) {
  for (size_t j = 0; j < r.size(); ++j) r[j] = static_cast<float>(key % 1000) + 0.25f * j;
}

uint64_t Footprint(int width) { return 4ull * width + TieredRowStore::kRecordOverheadBytes; }

TieredStoreOptions Small(const TempDir& dir, int width, uint64_t records, int shards = 1) {
  TieredStoreOptions o;
  o.path = dir.path() + "/store";
  o.dram_budget_bytes = records * Footprint(width);
  o.shards = shards;
  o.rocksdb_write_buffer_bytes = 1 << 20;
  o.rocksdb_block_cache_bytes = 1 << 20;
  return o;
}

std::unique_ptr<TieredRowStore> OpenOrDie(const TieredStoreOptions& o, int width) {
  auto r = TieredRowStore::Open(o, width);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

Status Touch(TieredRowStore& s, std::vector<uint64_t> keys) {
  return s.Read(keys, InitKey, [](size_t, std::span<const float>) {});
}

// True if `key` is resident: a Read of it counts a hit.
bool Resident(TieredRowStore& s, uint64_t key) {
  const uint64_t before = s.detailed_stats().hits;
  EXPECT_TRUE(Touch(s, {key}).ok());
  return s.detailed_stats().hits > before;
}

TEST(TieredStore, CreatesLazilyAndKeepsUpdates) {
  TempDir dir;
  auto store = OpenOrDie(Small(dir, 4, 16), 4);
  std::vector<uint64_t> keys = {7, 3, 7};
  ASSERT_TRUE(store->Update(keys, InitKey, [](size_t, std::span<float> r) { r[0] += 1; }).ok());
  std::vector<float> got(3);
  ASSERT_TRUE(store->Read(keys, nullptr, [&](size_t i, std::span<const float> r) { got[i] = r[0]; }).ok());
  EXPECT_EQ(got[0], 9.0f);
  EXPECT_EQ(got[1], 4.0f);
  EXPECT_EQ(store->stats().created, 2u);
}

TEST(TieredStore, MissingKeysWithoutInitAreNotFoundAndNothingIsApplied) {
  TempDir dir;
  auto store = OpenOrDie(Small(dir, 2, 4), 2);
  ASSERT_TRUE(Touch(*store, {1, 2, 3, 4, 5, 6}).ok());  // some of them on disk now
  std::vector<uint64_t> keys = {1, 5, 99};
  int visits = 0;
  Status s = store->Update(keys, nullptr, [&](size_t, std::span<float>) { ++visits; });
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("key 99"), std::string::npos) << s.ToString();
  EXPECT_EQ(visits, 0);
  std::vector<uint64_t> known = {1, 5};
  EXPECT_TRUE(store->Read(known, nullptr, [](size_t, std::span<const float>) {}).ok());
}

TEST(TieredStore, BadOptionsNameTheField) {
  TempDir dir;
  TieredStoreOptions o = Small(dir, 4, 16);
  o.path = "";
  EXPECT_NE(TieredRowStore::Open(o, 4).status().message().find("path"), std::string::npos);
  o = Small(dir, 4, 16);
  o.dram_budget_bytes = 10;
  EXPECT_NE(TieredRowStore::Open(o, 4).status().message().find("dram_budget_bytes"), std::string::npos);
  o = Small(dir, 4, 16);
  o.checkpoint_every_clocks = 3;
  EXPECT_NE(TieredRowStore::Open(o, 4).status().message().find("checkpoint_every_clocks"), std::string::npos);
  EXPECT_EQ(TieredRowStore::Open(Small(dir, 4, 16), 0).status().code(), StatusCode::kInvalidArgument);
}

TEST(TieredStore, BudgetIsNeverExceededByMoreThanOneBatch) {
  TempDir dir;
  const int width = 8;
  const uint64_t budget_records = 64;
  const size_t batch = 16;
  TieredStoreOptions o = Small(dir, width, budget_records, 4);
  auto store = OpenOrDie(o, width);
  std::mt19937_64 rng(1);
  uint64_t peak = 0;
  for (int call = 0; call < 300; ++call) {
    std::vector<uint64_t> keys(batch);
    for (auto& k : keys) k = rng() % 2000;
    ASSERT_TRUE(store->Update(keys, InitKey, [&](size_t, std::span<float> r) {
      r[1] += 1;
      peak = std::max(peak, store->stats().bytes_in_memory);
    }).ok());
    ASSERT_LE(store->stats().bytes_in_memory, o.dram_budget_bytes) << "after call " << call;
  }
  EXPECT_LE(peak, o.dram_budget_bytes + batch * Footprint(width));
  EXPECT_GT(store->detailed_stats().evictions, 0u);
}

TEST(LruOrder, EvictsTheLeastRecentlyUsed) {
  TempDir dir;
  auto store = OpenOrDie(Small(dir, 4, 4), 4);
  for (uint64_t k : {1, 2, 3, 4}) ASSERT_TRUE(Touch(*store, {k}).ok());
  ASSERT_TRUE(Touch(*store, {1}).ok());  // order now 2 3 4 1
  ASSERT_TRUE(Touch(*store, {5}).ok());  // evicts 2
  EXPECT_TRUE(Resident(*store, 3));      // order 4 1 5 3
  ASSERT_TRUE(Touch(*store, {6}).ok());  // evicts 4
  EXPECT_TRUE(Resident(*store, 1));
  EXPECT_TRUE(Resident(*store, 5));
  EXPECT_TRUE(Resident(*store, 6));
  EXPECT_FALSE(Resident(*store, 2));     // brought back, evicts 3
  EXPECT_FALSE(Resident(*store, 4));
}

TEST(LfuOrder, EvictsTheLeastFrequentlyUsed) {
  TempDir dir;
  TieredStoreOptions o = Small(dir, 4, 4);
  o.policy = EvictionPolicy::kLfu;
  auto store = OpenOrDie(o, 4);
  ASSERT_TRUE(Touch(*store, {1, 1, 1, 2, 2, 3, 3, 3, 3, 4}).ok());  // counts 3 2 4 1
  ASSERT_TRUE(Touch(*store, {5}).ok());  // evicts 4 (count 1)
  ASSERT_TRUE(Touch(*store, {6}).ok());  // evicts 5 (count 1, older than 6)
  ASSERT_TRUE(Touch(*store, {6, 6}).ok());  // 6 has count 3 now
  ASSERT_TRUE(Touch(*store, {7}).ok());  // evicts 2 (count 2)
  EXPECT_TRUE(Resident(*store, 1));
  EXPECT_TRUE(Resident(*store, 3));
  EXPECT_TRUE(Resident(*store, 6));
  EXPECT_TRUE(Resident(*store, 7));
  EXPECT_FALSE(Resident(*store, 2));
}

TEST(TieredStore, MissesAreFetchedInOneMultiGetPerCall) {
  TempDir dir;
  auto store = OpenOrDie(Small(dir, 4, 32, 4), 4);
  std::vector<uint64_t> all(1000);
  for (uint64_t k = 0; k < all.size(); ++k) all[k] = k;
  ASSERT_TRUE(store->Update(all, InitKey, [](size_t, std::span<float> r) { r[0] = -1; }).ok());
  const TieredStoreStats before = store->detailed_stats();
  std::vector<uint64_t> cold(all.begin(), all.begin() + 500);
  int visits = 0;
  ASSERT_TRUE(store->Read(cold, nullptr, [&](size_t, std::span<const float> r) {
    EXPECT_EQ(r[0], -1.0f);
    ++visits;
  }).ok());
  const TieredStoreStats after = store->detailed_stats();
  EXPECT_EQ(visits, 500);
  EXPECT_EQ(after.multigets - before.multigets, 1u);
  EXPECT_GE(after.misses - before.misses, 400u);
}

TEST(TieredStore, PrefetchReadsAheadIntoTheRoomLeftWithoutEvictingOrCreating) {
  TempDir dir;
  auto store = OpenOrDie(Small(dir, 4, 8), 4);  // 8 records of DRAM, one shard
  std::vector<uint64_t> all(40);
  for (uint64_t k = 0; k < all.size(); ++k) all[k] = k;
  ASSERT_TRUE(store->Update(all, InitKey, [](size_t, std::span<float> r) { r[0] = -2; }).ok());
  ASSERT_EQ(store->detailed_stats().records_in_memory, 8u);  // keys 32..39 (LRU)
  // Room for none: nothing is read, nothing leaves.
  auto none = store->Prefetch(std::vector<uint64_t>{0, 1, 2});
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_EQ(*none, 0u);
  TieredStoreOptions roomy = Small(dir, 4, 16);
  store.reset();
  store = OpenOrDie(roomy, 4);  // reopened: nothing resident, 16 records of room
  const TieredStoreStats before = store->detailed_stats();
  std::vector<uint64_t> ahead = {3, 5, 5, 7, 1000 /* in no tier */};
  for (uint64_t k = 10; k < 30; ++k) ahead.push_back(k);  // more than the room left
  auto read = store->Prefetch(ahead);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  TieredStoreStats after = store->detailed_stats();
  EXPECT_EQ(*read, after.prefetched - before.prefetched);
  EXPECT_GE(*read, 3u);                           // 3, 5, 7 at least
  EXPECT_LE(after.records_in_memory, 16u);        // never over the budget
  EXPECT_EQ(after.evictions, before.evictions);   // nothing evicted to make room
  EXPECT_EQ(after.created, before.created);       // 1000 was not created
  EXPECT_EQ(after.misses, before.misses);         // a read-ahead is not a miss
  EXPECT_EQ(after.hits, before.hits);
  EXPECT_EQ(after.multigets - before.multigets, 1u);
  // The calls that follow find them resident, with the values written before.
  int visits = 0;
  ASSERT_TRUE(store->Read(std::vector<uint64_t>{3, 5, 7}, nullptr, [&](size_t, std::span<const float> r) {
    EXPECT_EQ(r[0], -2.0f);
    ++visits;
  }).ok());
  EXPECT_EQ(visits, 3);
  EXPECT_EQ(store->detailed_stats().hits - after.hits, 3u);
  EXPECT_EQ(store->detailed_stats().misses, after.misses);
  auto absent = store->Read(std::vector<uint64_t>{1000}, nullptr, [](size_t, std::span<const float>) {});
  EXPECT_TRUE(absent.IsNotFound());
}

TEST(TieredStore, DirtyRecordsAreWrittenBackAndSurviveReopen) {
  TempDir dir;
  TieredStoreOptions o = Small(dir, 4, 8, 2);
  {
    auto store = OpenOrDie(o, 4);
    for (uint64_t k = 0; k < 100; ++k) {
      ASSERT_TRUE(store->Update(std::vector<uint64_t>{k}, InitKey,
                                [&](size_t, std::span<float> r) { r[3] = 1000.0f + k; }).ok());
    }
    EXPECT_GT(store->detailed_stats().written_back, 80u);
    ASSERT_TRUE(store->Close().ok());
  }
  auto store = OpenOrDie(o, 4);
  std::vector<uint64_t> keys(100);
  for (uint64_t k = 0; k < 100; ++k) keys[k] = k;
  ASSERT_TRUE(store->Read(keys, nullptr, [&](size_t i, std::span<const float> r) {
    EXPECT_EQ(r[3], 1000.0f + i);
    EXPECT_EQ(r[0], static_cast<float>(i));
  }).ok());
}

// The same deterministic training-like sequence (an Adam-ish update on value + state) on a
// store whose table is ~10x its DRAM budget and on an all-DRAM store: every record must match
// bit for bit.
void CheckEquivalence(EvictionPolicy policy) {
  TempDir dir;
  const int width = 12;  // 4 value floats + 4 m + 4 v
  const uint64_t keys_total = 4000;
  TieredStoreOptions o = Small(dir, width, keys_total / 10, 4);
  o.policy = policy;
  auto tiered = OpenOrDie(o, width);
  MemoryRowStore memory(width, 8);
  std::mt19937_64 rng(42);
  std::vector<uint64_t> keys(64);
  for (int step = 0; step < 400; ++step) {
    for (auto& k : keys) {
      // Skewed: half the draws from a hot tenth of the keys.
      k = (rng() % 2) ? rng() % (keys_total / 10) : rng() % keys_total;
    }
    const float lr = 0.01f * (1 + step % 7);
    auto visit = [&](size_t i, std::span<float> r) {
      for (int j = 0; j < 4; ++j) {
        const float g = 0.001f * static_cast<float>((keys[i] * 31 + j * 7 + step) % 97) - 0.05f;
        r[4 + j] = 0.9f * r[4 + j] + 0.1f * g;
        r[8 + j] = 0.999f * r[8 + j] + 0.001f * g * g;
        r[j] -= lr * r[4 + j] / (std::sqrt(r[8 + j]) + 1e-8f);
      }
    };
    ASSERT_TRUE(tiered->Update(keys, InitKey, visit).ok());
    ASSERT_TRUE(memory.Update(keys, InitKey, visit).ok());
  }
  EXPECT_LE(tiered->stats().bytes_in_memory, o.dram_budget_bytes);
  EXPECT_GT(tiered->detailed_stats().written_back, 0u);
  std::vector<uint64_t> all(keys_total);
  for (uint64_t k = 0; k < keys_total; ++k) all[k] = k;
  std::vector<float> want(keys_total * width), got(keys_total * width);
  ASSERT_TRUE(memory.Read(all, InitKey, [&](size_t i, std::span<const float> r) {
    std::copy(r.begin(), r.end(), want.begin() + i * width);
  }).ok());
  ASSERT_TRUE(tiered->Read(all, InitKey, [&](size_t i, std::span<const float> r) {
    std::copy(r.begin(), r.end(), got.begin() + i * width);
  }).ok());
  for (uint64_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(want[i], got[i]) << "key " << i / width << " float " << i % width;
  }
}

TEST(TieredStore, TableTenTimesTheBudgetMatchesAllInDramLru) { CheckEquivalence(EvictionPolicy::kLru); }
TEST(TieredStore, TableTenTimesTheBudgetMatchesAllInDramLfu) { CheckEquivalence(EvictionPolicy::kLfu); }

TEST(TieredStore, ConcurrentUpdatesOnOverlappingKeysAreNotLost) {
  TempDir dir;
  auto store = OpenOrDie(Small(dir, 2, 32, 4), 2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      for (int rep = 0; rep < 300; ++rep) {
        std::vector<uint64_t> keys(8);
        for (auto& k : keys) k = rng() % 128;
        ASSERT_TRUE(store->Update(keys, [](uint64_t, std::span<float> r) { r[0] = r[1] = 0; },
                                  [](size_t, std::span<float> r) { r[0] += 1; }).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  std::vector<uint64_t> all(128);
  for (uint64_t k = 0; k < 128; ++k) all[k] = k;
  double total = 0;
  ASSERT_TRUE(store->Read(all, nullptr, [&](size_t, std::span<const float> r) { total += r[0]; }).ok());
  EXPECT_EQ(total, 4 * 300 * 8);
}

TEST(Admission, KeyBecomesARowAfterNSightings) {
  TempDir dir;
  TieredStoreOptions o = Small(dir, 2, 16);
  o.admission_min_count = 3;
  auto store = OpenOrDie(o, 2);
  std::vector<uint64_t> key = {7};
  auto add = [](size_t, std::span<float> r) { r[1] += 10; };
  for (int i = 0; i < 2; ++i) {
    float seen = 0;
    ASSERT_TRUE(store->Update(key, InitKey, [&](size_t j, std::span<float> r) {
      add(j, r);
      seen = r[1];
    }).ok());
    EXPECT_EQ(seen, 17.25f);  // a fresh scratch record every time
    EXPECT_EQ(store->Read(key, nullptr, [](size_t, std::span<const float>) {}).code(),
              StatusCode::kNotFound);
  }
  ASSERT_TRUE(store->Update(key, InitKey, add).ok());  // third sighting: admitted
  float kept = 0;
  ASSERT_TRUE(store->Read(key, nullptr, [&](size_t, std::span<const float> r) { kept = r[1]; }).ok());
  EXPECT_EQ(kept, 17.25f);
  EXPECT_EQ(store->detailed_stats().not_admitted, 2u);
  EXPECT_EQ(store->stats().created, 1u);
}

TEST(Expiry, RowsUnseenForNClocksAreDeletedFromBothTiers) {
  TempDir dir;
  TieredStoreOptions o = Small(dir, 2, 8);
  o.expire_after_clocks = 2;
  auto store = OpenOrDie(o, 2);
  std::vector<uint64_t> old_keys(40), fresh = {1000, 1001};
  for (uint64_t k = 0; k < old_keys.size(); ++k) old_keys[k] = k;
  ASSERT_TRUE(Touch(*store, old_keys).ok());  // clock 0; most go to disk
  ASSERT_TRUE(store->AdvanceClock(1).ok());
  ASSERT_TRUE(store->AdvanceClock(2).ok());
  ASSERT_TRUE(Touch(*store, fresh).ok());  // seen at clock 2
  ASSERT_TRUE(Touch(*store, {5}).ok());    // seen again at clock 2 (from disk)
  ASSERT_TRUE(store->AdvanceClock(3).ok());  // cutoff 1: clock-0 rows expire
  EXPECT_EQ(store->detailed_stats().expired, old_keys.size() - 1);
  for (uint64_t k : old_keys) {
    Status s = store->Read(std::vector<uint64_t>{k}, nullptr, [](size_t, std::span<const float>) {});
    EXPECT_EQ(s.ok(), k == 5) << "key " << k << ": " << s.ToString();
  }
  EXPECT_TRUE(store->Read(fresh, nullptr, [](size_t, std::span<const float>) {}).ok());
  ASSERT_TRUE(store->AdvanceClock(6).ok());  // cutoff 4: everything goes (last seen at 3)
  EXPECT_EQ(store->Read(fresh, nullptr, [](size_t, std::span<const float>) {}).code(),
            StatusCode::kNotFound);
}

// Erase removes a record whichever tier holds it (DRAM only, disk only, both), for good: a
// reopened store does not bring it back, and a key created again starts from the initializer.
TEST(TieredStore, EraseRemovesRecordsFromEveryTierAcrossAReopen) {
  TempDir dir;
  const int width = 2;
  auto o = Small(dir, width, /*records=*/4);
  o.durability = Durability::kWal;
  {
    auto store = OpenOrDie(o, width);
    std::vector<uint64_t> keys(12);
    for (uint64_t k = 0; k < keys.size(); ++k) keys[k] = k;
    for (uint64_t k : keys) {  // 12 records through a 4-record budget: most are on disk only
      std::vector<uint64_t> one = {k};
      ASSERT_TRUE(store->Update(one, InitKey, [](size_t, std::span<float> r) { r[0] += 100; }).ok());
    }
    ASSERT_TRUE(Resident(*store, 11));
    std::vector<uint64_t> gone = {0, 11, 11, 5, 40};  // disk only, DRAM, a repeat, disk only, absent
    auto erased = store->Erase(gone);
    ASSERT_TRUE(erased.ok()) << erased.status().ToString();
    EXPECT_EQ(*erased, 3u);
    EXPECT_EQ(store->stats().records, 9u);
    std::vector<uint64_t> eleven = {11};
    EXPECT_TRUE(store->Read(eleven, nullptr, [](size_t, std::span<const float>) {}).IsNotFound());
    uint64_t scanned = 0;
    ASSERT_TRUE(store->Scan([&](uint64_t key, std::span<const float> r) {
                       EXPECT_TRUE(key != 0 && key != 5 && key != 11) << key;
                       EXPECT_EQ(r[0], static_cast<float>(key) + 100) << key;
                       ++scanned;
                       return Status::OK();
                     }).ok());
    EXPECT_EQ(scanned, 9u);
    ASSERT_TRUE(store->Close().ok());
  }
  auto reopened = OpenOrDie(o, width);
  for (uint64_t k : {0ull, 5ull, 11ull}) {
    std::vector<uint64_t> one = {k};
    EXPECT_TRUE(reopened->Read(one, nullptr, [](size_t, std::span<const float>) {}).IsNotFound()) << k;
    float v = -1;
    ASSERT_TRUE(reopened->Read(one, InitKey, [&](size_t, std::span<const float> r) { v = r[0]; }).ok());
    EXPECT_EQ(v, static_cast<float>(k)) << "key " << k << " came back with its erased value";
  }
  std::vector<uint64_t> seven = {7};
  float v = -1;
  ASSERT_TRUE(reopened->Read(seven, nullptr, [&](size_t, std::span<const float> r) { v = r[0]; }).ok());
  EXPECT_EQ(v, 107.0f);
}

}  // namespace
}  // namespace strata
