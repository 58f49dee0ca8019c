// migration_test.cc: MigrationPlan's chunks (ps/migration.h) without servers: from its start,
// chunk after chunk covers every row and push id once, in order, within the byte budget (a row
// larger than it goes alone), lists a table moving no row once, and ends without a next; a
// cursor outside the plan is refused naming the field.
#include "ps/migration.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>

namespace strata {
namespace {

MigrationPlan Plan() {
  MigrationPlan p;
  p.to_node = 9;
  p.servers = 3;
  for (uint32_t id : {1u, 2u, 5u}) {
    MigrationPlan::Rows r;
    r.spec.id = id;
    r.spec.name = "t" + std::to_string(id);
    r.spec.kind = TableKind::kSparse;
    r.spec.dim = id == 5 ? 64 : 2;  // with adam's state, a row of table 5 is larger than the budget
    r.spec.optimizer.kind = OptimizerKind::kAdam;
    const uint64_t n = id == 1 ? 50 : id == 2 ? 0 : 7;
    for (uint64_t k = 0; k < n; ++k) r.keys.push_back(id * 1000 + k);
    p.tables.push_back(r);
  }
  for (uint64_t i = 0; i < 20; ++i) p.push_ids.emplace_back(4, i + 1);
  p.clocks = {{4, 17}};
  return p;
}

// Record float j of key k: k + j / 1000.
Status Read(const TableSpec& spec, std::span<const uint64_t> keys, std::span<float> out) {
  const size_t w = static_cast<size_t>(spec.RecordWidth());
  for (size_t i = 0; i < keys.size(); ++i) {
    for (size_t j = 0; j < w; ++j) out[i * w + j] = static_cast<float>(keys[i]) + static_cast<float>(j) / 1000;
  }
  return Status::OK();
}

TEST(MigrationChunks, CoverEveryRowAndPushIdOnceInOrderWithinTheBudget) {
  const MigrationPlan plan = Plan();
  constexpr uint64_t kBudget = 300;  // a dozen rows of tables 1 and 2, one of table 5
  const uint64_t big = 8 + 4 * static_cast<uint64_t>(plan.tables[2].spec.RecordWidth());
  ASSERT_GT(big, kBudget);
  std::vector<uint64_t> keys;
  std::vector<int64_t> ids;
  std::map<uint32_t, int> listed;
  std::optional<MigrationCursor> at = plan.Start();
  int chunks = 0;
  while (at) {
    Message m;
    auto info = BuildMigrationChunk(plan, *at, kBudget, Read, &m);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    auto decoded = Decode(Encode(m));
    ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
    auto rows = decoded->reader().getBody().getMigrateRows();
    EXPECT_EQ(rows.getRows(), plan.rows());
    EXPECT_EQ(rows.getServers(), 3u);
    ASSERT_EQ(rows.getTrainerClocks().size(), 1u);
    EXPECT_EQ(rows.getTrainerClocks()[0].getClock(), 17);
    ASSERT_EQ(decoded->num_payloads(), 2 * rows.getTables().size() + 1);
    EXPECT_TRUE(info->bytes <= kBudget || info->rows + info->push_ids == 1) << info->bytes;
    uint64_t payload = 0;
    for (unsigned t = 0; t < rows.getTables().size(); ++t) {
      const TableSpec spec = FromWire(rows.getTables()[t]);
      ++listed[spec.id];
      const PayloadInfo k = decoded->payload_info(2 * t), r = decoded->payload_info(2 * t + 1);
      ASSERT_EQ(r.shape.at(1), spec.RecordWidth());
      for (int64_t i = 0; i < k.shape.at(0); ++i) {
        uint64_t key;
        float first;
        std::memcpy(&key, k.buffer->data() + i * 8, 8);
        std::memcpy(&first, r.buffer->data() + i * spec.RecordWidth() * 4, 4);
        keys.push_back(key);
        EXPECT_EQ(first, static_cast<float>(key));
      }
      payload += k.buffer->size() + r.buffer->size();
    }
    const PayloadInfo id = decoded->payload_info(2 * rows.getTables().size());
    ids.resize(ids.size() + id.buffer->size() / 8);
    std::memcpy(ids.data() + ids.size() - id.buffer->size() / 8, id.buffer->data(), id.buffer->size());
    EXPECT_EQ(payload + id.buffer->size(), info->bytes);
    at = ReadCursor(rows.getNext(), rows.hasNext());
    EXPECT_EQ(at, info->next);
    ASSERT_LT(++chunks, 100);
  }
  std::vector<uint64_t> want;
  for (const auto& t : plan.tables) want.insert(want.end(), t.keys.begin(), t.keys.end());
  EXPECT_EQ(keys, want);
  ASSERT_EQ(ids.size(), 2 * plan.push_ids.size());
  for (size_t i = 0; i < plan.push_ids.size(); ++i) EXPECT_EQ(ids[2 * i + 1], static_cast<int64_t>(i + 1));
  EXPECT_EQ(listed[2], 1);  // the table moving no row, once
  EXPECT_GT(listed[1], 2);
  EXPECT_EQ(listed[5], 7);  // a row larger than the budget goes alone
  EXPECT_GT(chunks, 10);
}

TEST(MigrationChunks, ACursorOutsideThePlanIsRefusedNamingTheField) {
  const MigrationPlan plan = Plan();
  auto refused = [&](MigrationCursor c, const std::string& what) {
    Message m;
    auto r = BuildMigrationChunk(plan, c, 1 << 20, Read, &m);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().ToString();
  };
  refused({3, 0, false}, "migrate.cursor.table 3: not a table this migration moves rows of (tables [1, 2, 5])");
  refused({1, 51, false}, "migrate.cursor.row 51 out of range: table \"t1\" moves 50 rows");
  refused({0, 21, true}, "migrate.cursor.row 21 out of range: 20 push ids move");
  // The ends themselves are fine: the rest of the plan from there.
  Message m;
  auto end = BuildMigrationChunk(plan, {0, 20, true}, 1 << 20, Read, &m);
  ASSERT_TRUE(end.ok()) << end.status().ToString();
  EXPECT_EQ(end->rows + end->push_ids, 0u);
  EXPECT_FALSE(end->next.has_value());
}

}  // namespace
}  // namespace strata
