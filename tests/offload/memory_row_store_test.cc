// memory_row_store_test.cc: MemoryRowStore: lazy creation, visits, concurrency, missing keys.
#include "offload/memory_row_store.h"

#include <gtest/gtest.h>

#include <thread>

namespace strata {
namespace {

void InitKey(uint64_t key, std::span<float> r) {
  for (size_t j = 0; j < r.size(); ++j) r[j] = static_cast<float>(key) + 0.5f * j;
}

TEST(MemoryRowStore, CreatesLazilyAndKeepsUpdates) {
  MemoryRowStore store(4, 8);
  std::vector<uint64_t> keys = {7, 3, 7};
  ASSERT_TRUE(store.Update(keys, InitKey, [](size_t, std::span<float> r) { r[0] += 1; }).ok());
  std::vector<float> got(3);
  ASSERT_TRUE(store.Read(keys, nullptr, [&](size_t i, std::span<const float> r) { got[i] = r[0]; }).ok());
  EXPECT_EQ(got[0], 9.0f);  // 7 + two visits
  EXPECT_EQ(got[1], 4.0f);
  EXPECT_EQ(store.stats().records, 2u);
  EXPECT_EQ(store.stats().created, 2u);
}

TEST(MemoryRowStore, MissingKeysWithoutInitAreNotFoundAndNothingIsApplied) {
  MemoryRowStore store(2, 1);
  std::vector<uint64_t> one = {1};
  ASSERT_TRUE(store.Update(one, InitKey, [](size_t, std::span<float>) {}).ok());
  std::vector<uint64_t> keys = {1, 2};
  int visits = 0;
  Status s = store.Update(keys, nullptr, [&](size_t, std::span<float>) { ++visits; });
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("key 2"), std::string::npos);
  EXPECT_EQ(visits, 0);
}

TEST(MemoryRowStore, ConcurrentUpdatesAreNotLost) {
  MemoryRowStore store(1, 4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      std::vector<uint64_t> keys(64);
      for (int i = 0; i < 64; ++i) keys[i] = i;
      for (int rep = 0; rep < 200; ++rep) {
        ASSERT_TRUE(store.Update(keys, [](uint64_t, std::span<float> r) { r[0] = 0; },
                                 [](size_t, std::span<float> r) { r[0] += 1; }).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  std::vector<uint64_t> keys(64);
  for (int i = 0; i < 64; ++i) keys[i] = i;
  ASSERT_TRUE(store.Read(keys, nullptr, [](size_t, std::span<const float> r) { EXPECT_EQ(r[0], 800.0f); }).ok());
}

}  // namespace
}  // namespace strata

namespace strata {
namespace {

// A dense chunk is a wide record; blocks must not be sized as if records were small (a 4 MiB
// record once made 4 GiB blocks).
TEST(MemoryRowStore, WideRecordsGetBlocksOfTheirOwn) {
  const int width = (1 << 20) + 1;
  MemoryRowStore store(width, 4);
  std::vector<uint64_t> keys = {0, 1, 2};
  ASSERT_TRUE(store.Update(keys, [](uint64_t, std::span<float> r) { std::fill(r.begin(), r.end(), 1.0f); },
                           [](size_t, std::span<float> r) { r[0] += 1; }).ok());
  EXPECT_EQ(store.stats().records, 3u);
  EXPECT_LE(store.stats().bytes_in_memory, 3u * width * sizeof(float));
}

// A table of one small record (a dense layer norm's chunk: 385 floats with AdamW's state) holds
// that record, not a block of a megabyte; blocks double as a shard fills, to about 1 MiB, so
// a table of many records still lives in few allocations and wastes under half of them.
TEST(MemoryRowStore, BlocksGrowFromOneRecord) {
  const int width = 128 * 3 + 1;
  MemoryRowStore one(width, 4);
  std::vector<uint64_t> key = {0};
  ASSERT_TRUE(one.Update(key, InitKey, [](size_t, std::span<float> r) { r[0] += 1; }).ok());
  EXPECT_EQ(one.stats().bytes_in_memory, width * sizeof(float));
  MemoryRowStore many(width, 2);
  std::vector<uint64_t> keys(5000);
  for (uint64_t k = 0; k < keys.size(); ++k) keys[k] = k;
  ASSERT_TRUE(many.Update(keys, InitKey, [](size_t, std::span<float> r) { r[0] += 1; }).ok());
  const uint64_t used = keys.size() * width * sizeof(float), held = many.stats().bytes_in_memory;
  EXPECT_GE(held, used);
  EXPECT_LT(held, 2 * used);
  ASSERT_TRUE(many.Read(keys, nullptr, [&](size_t i, std::span<const float> r) {
                    EXPECT_EQ(r[0], static_cast<float>(keys[i]) + 1) << keys[i];
                  }).ok());
}

TEST(MemoryRowStore, EraseRemovesRecordsAndTheirSlotsAreReused) {
  MemoryRowStore store(2, 2);
  std::vector<uint64_t> keys = {1, 2, 3, 4};
  ASSERT_TRUE(store.Update(keys, InitKey, [](size_t, std::span<float> r) { r[0] += 100; }).ok());
  std::vector<uint64_t> gone = {2, 4, 4, 9};  // a repeat and an absent key are skipped
  auto erased = store.Erase(gone);
  ASSERT_TRUE(erased.ok()) << erased.status().ToString();
  EXPECT_EQ(*erased, 2u);
  EXPECT_EQ(store.stats().records, 2u);
  std::vector<uint64_t> two = {2};
  EXPECT_TRUE(store.Read(two, nullptr, [](size_t, std::span<const float>) {}).IsNotFound());
  std::vector<uint64_t> kept = {1, 3};
  std::vector<float> got(2);
  ASSERT_TRUE(store.Read(kept, nullptr, [&](size_t i, std::span<const float> r) { got[i] = r[0]; }).ok());
  EXPECT_EQ(got[0], 101.0f);
  EXPECT_EQ(got[1], 103.0f);
  // Created again: from the initializer, not the erased values (the freed slot is reused).
  std::vector<float> again(1);
  ASSERT_TRUE(store.Read(two, InitKey, [&](size_t, std::span<const float> r) { again[0] = r[0]; }).ok());
  EXPECT_EQ(again[0], 2.0f);
  EXPECT_EQ(store.stats().records, 3u);
  uint64_t scanned = 0;
  ASSERT_TRUE(store.Scan([&](uint64_t, std::span<const float>) { ++scanned; return Status::OK(); }).ok());
  EXPECT_EQ(scanned, 3u);
}

}  // namespace
}  // namespace strata
