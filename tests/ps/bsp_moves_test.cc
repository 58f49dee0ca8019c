// bsp_moves_test.cc: BspMoves on the wire (ps/bsp_moves.h): written into a migrateRows chunk and
// read back the same (sums and staged pushes, each table's applied clock and chunks ahead, the
// clocks' records, dead ranks, clipping factors); a hostile chunk (lists of unequal length, an
// entry of a clock applied already, a chunk not ahead, a negative clipping factor, sums of the
// wrong size, a key the receiver refuses) is refused naming the field; and a plan made twice keeps
// the first one's accumulations (Absorb).
#include "ps/bsp_moves.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace strata {
namespace {

BspMoves Sample() {
  BspMoves m;
  BspTableState t{7, 3, {}, {{12, 5}}};  // chunk 12 applied ahead, up to clock 4
  t.entries.push_back({3, 10, 0, 2, 0.5f, {1.0f, 2.0f}});
  t.entries.push_back({3, 11, 5, 1, 0.5f, {3.0f, 4.0f}});  // node 4's push, not folded yet
  t.entries.push_back({4, 10, 0, 1, -1.0f, {5.0f, 6.0f}});
  m.tables.push_back(t);
  m.tables.push_back({8, 0, {}, {}});
  m.clocks.push_back({3, {0, 1}, {1}});
  m.dead_ranks = {2};
  m.grad_scales = {{3, 0.25f}};
  return m;
}

// Two floats an entry, for tables 7 and 8; anything else refused.
Result<uint32_t> TwoFloats(uint32_t table, uint64_t key) {
  if (table != 7 && table != 8) return Status::InvalidArgument("no table " + std::to_string(table) + " here");
  if (key == 99) return Status::InvalidArgument("key 99 belongs to server 1");
  return 2u;
}

Message Written(const BspMoves& m) {
  Message msg;
  WriteBspMoves(m, msg.builder().getBody().initMigrateRows(), &msg);
  return msg;
}

TEST(BspMovesTest, WrittenIntoAChunkAndReadBackTheSame) {
  const BspMoves m = Sample();
  const Message msg = Written(m);
  ASSERT_EQ(msg.num_payloads(), 2u);
  auto back = ReadBspMoves(msg, msg.reader().getBody().getMigrateRows(), 0, TwoFloats);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->tables, m.tables);
  ASSERT_EQ(back->clocks.size(), 1u);
  EXPECT_EQ(back->clocks[0].members, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(back->clocks[0].clocked, (std::vector<uint32_t>{1}));
  EXPECT_EQ(back->dead_ranks, (std::vector<uint32_t>{2}));
  ASSERT_EQ(back->grad_scales.size(), 1u);
  EXPECT_EQ(back->grad_scales[0], (std::pair<int64_t, float>{3, 0.25f}));
  EXPECT_EQ(back->entries(), 3u);
}

TEST(BspMovesTest, AHostileChunkIsRefusedNamingWhatIsWrong) {
  auto refused = [](const Message& msg, size_t first = 0) {
    auto r = ReadBspMoves(msg, msg.reader().getBody().getMigrateRows(), first, TwoFloats);
    EXPECT_FALSE(r.ok());
    return r.ok() ? std::string() : r.status().ToString();
  };
  {
    Message msg = Written(Sample());
    msg.builder().getBody().getMigrateRows().getBsp()[0].initStagedBy(2);
    EXPECT_NE(refused(msg).find("differ in length"), std::string::npos);
  }
  {
    BspMoves m = Sample();
    m.tables[0].entries[0].clock = 2;  // before the table's applied clock 3
    EXPECT_NE(refused(Written(m)).find("an accumulation of clock 2, which is applied already"), std::string::npos);
  }
  {
    BspMoves m = Sample();
    m.tables[0].chunk_next[0].second = 3;  // not ahead of the applied clock
    EXPECT_NE(refused(Written(m)).find("chunk 12 applies clock 3 next, not ahead of appliedClock 3"), std::string::npos);
    m = Sample();
    m.grad_scales[0].second = -1.0f;
    EXPECT_NE(refused(Written(m)).find("migrateRows.gradScales: clock 3"), std::string::npos);
  }
  {
    BspMoves m = Sample();
    m.tables[0].entries[1].sum = {1.0f};  // one float short
    EXPECT_NE(refused(Written(m)).find("its sums are not 6 f32"), std::string::npos);
  }
  {
    BspMoves m = Sample();
    m.tables[0].entries[2].key = 99;
    EXPECT_NE(refused(Written(m)).find("key 99 belongs to server 1"), std::string::npos);
    m = Sample();
    m.tables[1] = {9, 0, {{0, 1, 0, 1, -1.0f, {1.0f, 1.0f}}}, {}};
    EXPECT_NE(refused(Written(m)).find("migrateRows.bsp[1] (table 9): no table 9 here"), std::string::npos);
  }
  EXPECT_NE(refused(Written(Sample()), 1).find("2 tables, but 1 payloads"), std::string::npos);
}

TEST(BspMovesTest, APlanMadeAgainKeepsTheFirstPlansAccumulations) {
  BspMoves first = Sample();
  BspMoves again;
  again.tables.push_back({7, 5, {{5, 12, 0, 1, 0.5f, {7.0f, 8.0f}}}, {}});
  again.clocks.push_back({3, {0, 1}, {0}});
  again.dead_ranks = {3};
  again.Absorb(first);
  ASSERT_EQ(again.tables.size(), 2u);
  EXPECT_EQ(again.tables[0].applied_clock, 3);  // the lower: the first plan's rows lack clocks 3 and 4
  ASSERT_EQ(again.tables[0].entries.size(), 4u);
  EXPECT_EQ(again.tables[0].entries[0].key, 10u);  // sorted by clock, sums first, then key
  EXPECT_EQ(again.tables[0].entries[1].staged_by, 5u);
  EXPECT_EQ(again.tables[0].entries[3].clock, 5);
  ASSERT_EQ(again.clocks.size(), 1u);
  EXPECT_EQ(again.clocks[0].clocked, (std::vector<uint32_t>{1, 0}));
  EXPECT_EQ(again.dead_ranks, (std::vector<uint32_t>{2, 3}));
}

}  // namespace
}  // namespace strata
