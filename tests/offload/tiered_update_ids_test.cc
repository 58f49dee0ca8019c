// tiered_update_ids_test.cc: the update ids a TieredRowStore records with its updates
// (RowStore::UpdateWithId): kept across a reopen in every durability mode, held by a checkpoint
// exactly for the updates it holds, one slot per sender and id % kRecordedIdsPerSender, and a
// store written before ids were recorded still opens, with its records and no ids.
#include <gtest/gtest.h>
#include <rocksdb/db.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "offload/tiered_row_store.h"
#include "test_util.h"

namespace strata {
namespace {

using testing::TempDir;

constexpr int kWidth = 4;

void Zero(uint64_t, std::span<float> r) { std::fill(r.begin(), r.end(), 0.0f); }

TieredStoreOptions Options(const std::string& path, Durability d) {
  TieredStoreOptions o;
  o.path = path;
  o.durability = d;
  o.shards = 1;
  o.dram_budget_bytes = 1 << 20;
  o.rocksdb_write_buffer_bytes = 1 << 20;
  return o;
}

// Adds 1 to r[0] of `key`, recorded as (sender, id).
Status Add(TieredRowStore& s, uint64_t key, uint32_t sender, uint64_t id) {
  const uint64_t keys[] = {key};
  return s.UpdateWithId(keys, Zero, [](size_t, std::span<float> r) { r[0] += 1.0f; }, UpdateId{sender, id});
}

float Value(TieredRowStore& s, uint64_t key) {
  const uint64_t keys[] = {key};
  float v = -1;
  EXPECT_TRUE(s.Read(keys, Zero, [&](size_t, std::span<const float> r) { v = r[0]; }).ok());
  return v;
}

std::set<std::pair<uint32_t, uint64_t>> Ids(const TieredRowStore& s) {
  auto ids = s.RecordedUpdateIds();
  EXPECT_TRUE(ids.ok()) << ids.status().ToString();
  std::set<std::pair<uint32_t, uint64_t>> out;
  if (ids.ok()) {
    for (const UpdateId& u : *ids) out.insert({u.sender, u.id});
  }
  return out;
}

TEST(TieredUpdateIds, EveryModeKeepsTheIdsAcrossAReopen) {
  for (Durability d : {Durability::kWal, Durability::kCheckpoint, Durability::kNone}) {
    TempDir dir;
    {
      auto s = TieredRowStore::Open(Options(dir.path(), d), kWidth);
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      ASSERT_TRUE(Add(**s, 1, 7, 100).ok());
      ASSERT_TRUE(Add(**s, 2, 7, 101).ok());
      ASSERT_TRUE(Add(**s, 2, 9, 5).ok());
      const uint64_t keys[] = {3};
      ASSERT_TRUE((*s)->Update(keys, Zero, [](size_t, std::span<float> r) { r[0] += 1; }).ok());  // unnamed
      EXPECT_EQ(Ids(**s), (std::set<std::pair<uint32_t, uint64_t>>{{7, 100}, {7, 101}, {9, 5}}));
    }
    auto s = TieredRowStore::Open(Options(dir.path(), d), kWidth);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(Ids(**s), (std::set<std::pair<uint32_t, uint64_t>>{{7, 100}, {7, 101}, {9, 5}}))
        << "durability " << static_cast<int>(d);
    EXPECT_EQ(Value(**s, 2), 2.0f);
  }
}

// Each sender keeps one id per slot (id % kRecordedIdsPerSender): a later id in the same slot
// replaces the older one, and the slots of different senders are separate.
TEST(TieredUpdateIds, ALaterIdInTheSameSlotReplacesTheOlder) {
  TempDir dir;
  auto s = TieredRowStore::Open(Options(dir.path(), Durability::kWal), kWidth);
  ASSERT_TRUE(s.ok());
  constexpr uint64_t kRing = RowStore::kRecordedIdsPerSender;
  const uint64_t base = (uint64_t{3} << 40) | 17;
  ASSERT_TRUE(Add(**s, 1, 3, base).ok());
  ASSERT_TRUE(Add(**s, 1, 4, base).ok());
  ASSERT_TRUE(Add(**s, 1, 3, base + 1).ok());
  ASSERT_TRUE(Add(**s, 1, 3, base + kRing).ok());
  EXPECT_EQ(Ids(**s), (std::set<std::pair<uint32_t, uint64_t>>{{3, base + 1}, {3, base + kRing}, {4, base}}));
}

// A checkpoint holds the ids of the updates it holds, and only those.
TEST(TieredUpdateIds, ACheckpointHoldsTheIdsOfItsUpdates) {
  TempDir dir;
  TieredStoreOptions o = Options(dir.File("store"), Durability::kCheckpoint);
  {
    auto s = TieredRowStore::Open(o, kWidth);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(Add(**s, 1, 2, 10).ok());
    ASSERT_TRUE((*s)->Checkpoint(dir.File("cp")).ok());
    ASSERT_TRUE(Add(**s, 1, 2, 11).ok());
  }
  auto s = TieredRowStore::OpenFromCheckpoint(dir.File("cp"), o, kWidth);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(Ids(**s), (std::set<std::pair<uint32_t, uint64_t>>{{2, 10}}));
  EXPECT_EQ(Value(**s, 1), 1.0f);
}

// A store made before update ids were recorded (no strata_update_ids column family) opens with
// its records and no ids, and records ids from then on.
TEST(TieredUpdateIds, AStoreWithoutTheIdFamilyOpensWithNoIds) {
  TempDir dir;
  {
    rocksdb::Options o;
    o.create_if_missing = true;
    o.create_missing_column_families = true;
    std::vector<rocksdb::ColumnFamilyDescriptor> families = {
        {rocksdb::kDefaultColumnFamilyName, rocksdb::ColumnFamilyOptions()},
        {"strata_clocks", rocksdb::ColumnFamilyOptions()}};
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, dir.path() + "/db", families, &handles, &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    const char key[8] = {0, 0, 0, 0, 0, 0, 0, 5};  // key 5, big-endian
    const float record[kWidth] = {42.0f, 0, 0, 0};
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), handles[0], rocksdb::Slice(key, 8),
                        rocksdb::Slice(reinterpret_cast<const char*>(record), sizeof(record)))
                    .ok());
    for (auto* h : handles) ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
    ASSERT_TRUE(db->Close().ok());
  }
  auto s = TieredRowStore::Open(Options(dir.path(), Durability::kWal), kWidth);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(Ids(**s).empty());
  EXPECT_EQ(Value(**s, 5), 42.0f);
  ASSERT_TRUE(Add(**s, 5, 1, 1).ok());
  EXPECT_EQ(Ids(**s), (std::set<std::pair<uint32_t, uint64_t>>{{1, 1}}));
  EXPECT_EQ(Value(**s, 5), 43.0f);
}

}  // namespace
}  // namespace strata
