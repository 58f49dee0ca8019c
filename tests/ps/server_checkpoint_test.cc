// server_checkpoint_test.cc: the servers' shards of their tables written into a checkpoint by 2
// servers and read back by 1 and by 3 (every key once, on the server the hash gives it, with its
// record), the refusals of bad checkpoints naming the file, and MemoryRowStore::Peek (absent
// rows read as the initializer and are not stored).
#include "ps/server_checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "offload/memory_row_store.h"
#include "tests/test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;

TableSpec Sparse() {
  TableSpec s;
  s.id = 3;
  s.name = "embed";
  s.kind = TableKind::kSparse;
  s.dim = 2;
  return s;
}

TableSpec Dense() {
  TableSpec s;
  s.id = 4;
  s.name = "mlp";
  s.kind = TableKind::kDense;
  s.numel = 10;
  s.chunk_floats = 4;  // 3 chunks
  return s;
}

// The record every test expects for `key` of table `id` (width = value floats + 1 step slot).
std::vector<float> Record(uint32_t id, uint64_t key, int width) {
  std::vector<float> r(static_cast<size_t>(width));
  for (int i = 0; i < width; ++i) r[static_cast<size_t>(i)] = static_cast<float>(id * 1000 + key) + 0.25f * i;
  return r;
}

class ServerCheckpointTest : public ::testing::Test {
 protected:
  // Server r of 2 holds its keys of the sparse table (0..199) and its chunks of the dense one;
  // each writes its shard under `ckpt`.
  void WriteTwoShards(const std::string& ckpt, const std::vector<TableSpec>& extra_on_1 = {}) {
    for (uint32_t r = 0; r < 2; ++r) {
      std::vector<std::unique_ptr<MemoryRowStore>> stores;
      std::vector<TableShard> shards;
      std::vector<TableSpec> specs = {sparse_, dense_};
      if (r == 1) specs.insert(specs.end(), extra_on_1.begin(), extra_on_1.end());
      for (const TableSpec& spec : specs) {
        stores.push_back(std::make_unique<MemoryRowStore>(spec.RecordWidth()));
        const uint64_t n = spec.kind == TableKind::kSparse ? 200 : spec.NumChunks();
        for (uint64_t k = 0; k < n; ++k) {
          const uint32_t owner = spec.kind == TableKind::kSparse ? SparseServer(k, 2) : DenseServer(spec, k, 2);
          if (owner != r) continue;
          const uint64_t key[1] = {k};
          const std::vector<float> want = Record(spec.id, k, spec.RecordWidth());
          ASSERT_TRUE(stores.back()
                          ->Update(key, [&](uint64_t, std::span<float> rec) { std::fill(rec.begin(), rec.end(), 0.f); },
                                   [&](size_t, std::span<float> rec) { std::copy(want.begin(), want.end(), rec.begin()); })
                          .ok());
        }
      }
      for (size_t i = 0; i < specs.size(); ++i) shards.push_back({&specs[i], stores[i].get()});
      ASSERT_TRUE(WriteServerShard(ckpt, r, 2, shards).ok());
    }
  }

  testing::TempDir dir_;
  TableSpec sparse_ = Sparse(), dense_ = Dense();
};

TEST_F(ServerCheckpointTest, TwoShardsReadBackByOneAndByThreeServersHoldEveryKeyOnce) {
  const std::string ckpt = dir_.File("step-1");
  WriteTwoShards(ckpt);
  for (uint32_t servers : {1u, 3u}) {
    std::map<std::pair<uint32_t, uint64_t>, int> seen;  // (table, key) -> times loaded
    uint64_t rows = 0;
    for (uint32_t rank = 0; rank < servers; ++rank) {
      auto loaded = ReadServerShards(ckpt, rank, servers);
      ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
      EXPECT_EQ(loaded->written_by, 2u);
      ASSERT_EQ(loaded->tables.size(), 2u);
      rows += loaded->rows;
      for (const LoadedTable& t : loaded->tables) {
        const auto width = static_cast<size_t>(t.spec.RecordWidth());
        ASSERT_EQ(t.records.size(), t.keys.size() * width);
        for (size_t i = 0; i < t.keys.size(); ++i) {
          const uint64_t k = t.keys[i];
          const uint32_t owner = t.spec.kind == TableKind::kSparse ? SparseServer(k, servers) : DenseServer(t.spec, k, servers);
          EXPECT_EQ(owner, rank) << t.spec.name << " key " << k;
          const std::vector<float> got(t.records.begin() + static_cast<std::ptrdiff_t>(i * width),
                                       t.records.begin() + static_cast<std::ptrdiff_t>((i + 1) * width));
          EXPECT_EQ(got, Record(t.spec.id, k, t.spec.RecordWidth())) << t.spec.name << " key " << k;
          ++seen[{t.spec.id, k}];
        }
      }
    }
    EXPECT_EQ(rows, 203u) << servers << " servers";
    EXPECT_EQ(seen.size(), 203u) << servers << " servers";
    for (const auto& [key, times] : seen) EXPECT_EQ(times, 1) << key.first << "/" << key.second;
  }
}

TEST_F(ServerCheckpointTest, BadShardsAreRefusedNamingTheFile) {
  const std::string ckpt = dir_.File("step-1");
  WriteTwoShards(ckpt);
  const std::string ps = ServerTablesDir(ckpt);
  auto expect = [&](const std::string& where, StatusCode code, const std::string& want) {
    auto loaded = ReadServerShards(where, 0, 3);
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.status().code(), code) << loaded.status().ToString();
    EXPECT_NE(loaded.status().message().find(want), std::string::npos) << loaded.status().ToString();
  };
  expect(dir_.File("nothing"), StatusCode::kNotFound, dir_.File("nothing") + "/ps: no server tables there");

  // A damaged rows file: its checksum.
  const std::string copy = dir_.File("corrupt");
  fs::copy(ckpt, copy, fs::copy_options::recursive);
  const std::string rows = ServerTablesDir(copy) + "/server-1-of-2.table-3.rows";
  {
    std::fstream f(rows, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(20);
    f.put('\x5a');
  }
  expect(copy, StatusCode::kCorruption, "export file " + rows + ": ");

  // A missing rows file, then a missing tables file.
  fs::remove(ps + "/server-0-of-2.table-4.rows");
  expect(ckpt, StatusCode::kNotFound, ps + "/server-0-of-2.table-4.rows: missing");
  fs::remove(ps + "/server-1-of-2.tables");
  expect(ckpt, StatusCode::kNotFound, ps + "/server-1-of-2.tables: missing");

  // Shards of different table sets.
  TableSpec extra = Sparse();
  extra.id = 9;
  extra.name = "other";
  const std::string mixed = dir_.File("mixed");
  WriteTwoShards(mixed, {extra});
  expect(mixed, StatusCode::kInvalidArgument, ServerTablesDir(mixed) + "/server-1-of-2.tables holds tables");

  // A key in a shard that does not hold it: server 1's rows file renamed as server 0's.
  const std::string swapped = dir_.File("swapped");
  WriteTwoShards(swapped);
  const std::string sp = ServerTablesDir(swapped);
  fs::rename(sp + "/server-1-of-2.table-3.rows", sp + "/server-0-of-2.table-3.rows");
  fs::copy_file(sp + "/server-0-of-2.table-3.rows", sp + "/server-1-of-2.table-3.rows");
  expect(swapped, StatusCode::kCorruption, sp + "/server-0-of-2.table-3.rows: key ");
}

TEST(MemoryRowStorePeek, AnAbsentRowReadsAsTheInitializerAndIsNotStored) {
  MemoryRowStore store(2);
  const uint64_t present[1] = {7};
  ASSERT_TRUE(store.Update(present, [](uint64_t, std::span<float> r) { std::fill(r.begin(), r.end(), 1.f); },
                           [](size_t, std::span<float>) {}).ok());
  const uint64_t keys[2] = {7, 8};
  std::vector<float> got;
  ASSERT_TRUE(store.Peek(keys, [](uint64_t k, std::span<float> r) { std::fill(r.begin(), r.end(), static_cast<float>(k)); },
                         [&](size_t, std::span<const float> r) { got.insert(got.end(), r.begin(), r.end()); }).ok());
  EXPECT_EQ(got, (std::vector<float>{1, 1, 8, 8}));
  EXPECT_EQ(store.stats().records, 1u);
  std::vector<uint64_t> scanned;
  ASSERT_TRUE(store.Scan([&](uint64_t k, std::span<const float>) {
    scanned.push_back(k);
    return Status::OK();
  }).ok());
  EXPECT_EQ(scanned, std::vector<uint64_t>{7});
}

}  // namespace
}  // namespace strata
