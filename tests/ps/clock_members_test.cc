// clock_members_test.cc: ClockMembers, an elastic BSP server's record of each clock's trainers:
// complete once every named member clocked it or was declared dead, a retried message counted
// once, and a message that disagrees on the members (or comes from a trainer outside them, or a
// dead one) refused, changing nothing.
#include "ps/clock_members.h"

#include <gtest/gtest.h>

#include <vector>

namespace strata {
namespace {

using Ranks = std::vector<uint32_t>;

TEST(ClockMembersTest, AClockIsCompleteOnceItsNamedTrainersAllClockedIt) {
  ClockMembers m;
  EXPECT_EQ(m.Complete(0), 0u);  // never stated
  ASSERT_TRUE(m.Add(0, 0, Ranks{0, 1}).ok());
  EXPECT_EQ(m.Complete(0), 0u);
  ASSERT_TRUE(m.Add(0, 0, Ranks{0, 1}).ok());  // the same trainer again (a retried message)
  EXPECT_EQ(m.Complete(0), 0u);
  ASSERT_TRUE(m.Add(0, 1, Ranks{0, 1}).ok());
  EXPECT_EQ(m.Complete(0), 2u);
  // The next clock has a third trainer (joined); clocks may be stated in any order.
  ASSERT_TRUE(m.Add(1, 2, Ranks{0, 1, 2}).ok());
  ASSERT_TRUE(m.Add(1, 1, Ranks{0, 1, 2}).ok());
  EXPECT_EQ(m.Complete(1), 0u);
  ASSERT_TRUE(m.Add(1, 0, Ranks{0, 1, 2}).ok());
  EXPECT_EQ(m.Complete(1), 3u);
  EXPECT_EQ(m.clocks(), 2u);
  m.ForgetBelow(1);
  EXPECT_EQ(m.clocks(), 1u);
  EXPECT_EQ(m.Complete(0), 0u);
  EXPECT_EQ(m.Complete(1), 3u);
}

TEST(ClockMembersTest, ADeadMemberIsNotWaitedForAndMayClockNothingMore) {
  ClockMembers m;
  // Clock 0: trainer 2 clocked it, then died; clock 1: it did not; clock 2 is not stated yet.
  ASSERT_TRUE(m.Add(0, 2, Ranks{0, 1, 2}).ok());
  ASSERT_TRUE(m.Add(0, 0, Ranks{0, 1, 2}).ok());
  ASSERT_TRUE(m.Add(1, 0, Ranks{0, 1, 2}).ok());
  ASSERT_TRUE(m.Add(1, 1, Ranks{0, 1, 2}).ok());
  EXPECT_EQ(m.Complete(1), 0u);
  m.MarkDead(2);
  EXPECT_TRUE(m.Dead(2));
  EXPECT_EQ(m.Complete(0), 0u);  // trainer 1, alive, has not clocked it
  EXPECT_EQ(m.Complete(1), 2u);  // trainers 0 and 1; 2 is dead
  ASSERT_TRUE(m.Add(0, 1, Ranks{0, 1, 2}).ok());
  EXPECT_EQ(m.Complete(0), 3u);  // trainer 2's clock message arrived before it died: it counts
  // A clock stated after the death (leased before it) completes with the live members.
  ASSERT_TRUE(m.Add(2, 1, Ranks{0, 1, 2}).ok());
  EXPECT_EQ(m.Complete(2), 0u);
  ASSERT_TRUE(m.Add(2, 0, Ranks{0, 1, 2}).ok());
  EXPECT_EQ(m.Complete(2), 2u);
  // The dead trainer's late messages are refused and counted nowhere.
  Status late = m.Add(3, 2, Ranks{0, 1, 2});
  EXPECT_EQ(late.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(late.message().find("declared dead"), std::string::npos) << late.ToString();
  EXPECT_EQ(m.Complete(3), 0u);
}

TEST(ClockMembersTest, DisagreementsAndTrainersOutsideTheSplitAreRefusedChangingNothing) {
  ClockMembers m;
  Status none = m.Add(0, 4, Ranks{});
  EXPECT_EQ(none.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(none.message().find("clock.memberRanks"), std::string::npos) << none.ToString();
  Status unsorted = m.Add(0, 4, Ranks{5, 4});
  EXPECT_EQ(unsorted.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(unsorted.message().find("not ascending"), std::string::npos) << unsorted.ToString();
  EXPECT_EQ(m.clocks(), 0u);

  ASSERT_TRUE(m.Add(0, 4, Ranks{4, 5}).ok());
  Status differ = m.Add(0, 5, Ranks{4, 5, 6});
  EXPECT_EQ(differ.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(differ.message().find("states 3"), std::string::npos) << differ.ToString();
  EXPECT_NE(differ.message().find("stated 2 [4, 5]"), std::string::npos) << differ.ToString();
  EXPECT_EQ(m.Complete(0), 0u);  // trainer 5 was not counted
  ASSERT_TRUE(m.Add(0, 5, Ranks{4, 5}).ok());
  EXPECT_EQ(m.Complete(0), 2u);

  Status outside = m.Add(0, 6, Ranks{4, 5});
  EXPECT_EQ(outside.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(outside.message().find("trainer 6 is not in its step's split [4, 5]"), std::string::npos)
      << outside.ToString();
  EXPECT_EQ(m.Complete(0), 2u);
  ASSERT_TRUE(m.Add(0, 4, Ranks{4, 5}).ok());  // a member's repeat after completion is still harmless
}

TEST(ClockMembersTest, AnotherServersRecordsMergeIntoOnesOwnAndADisagreementIsRefused) {
  ClockMembers here;
  ASSERT_TRUE(here.Add(4, 1, Ranks{0, 1}).ok());
  ClockMembers there;
  ASSERT_TRUE(there.Add(4, 0, Ranks{0, 1}).ok());
  ASSERT_TRUE(there.Add(5, 0, Ranks{0, 1}).ok());
  there.MarkDead(2);
  const std::vector<ClockMembers::Record> records = there.Records();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].clock, 4);
  EXPECT_EQ(records[0].clocked, Ranks{0});
  EXPECT_EQ(there.DeadRanks(), Ranks{2});
  for (const auto& r : records) ASSERT_TRUE(here.Merge(r).ok());
  ASSERT_TRUE(here.Merge(records[0]).ok());  // a repeat changes nothing
  EXPECT_EQ(here.Complete(4), 2u);           // trainer 1 here, trainer 0 there
  EXPECT_EQ(here.Complete(5), 0u);
  EXPECT_EQ(here.Records()[0].clocked, (Ranks{1, 0}));
  // Members unlike those recorded, or a clocked rank outside them: refused, nothing taken.
  Status s = here.Merge({5, Ranks{0, 1, 2}, Ranks{1}});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("recorded [0, 1]"), std::string::npos) << s.ToString();
  s = here.Merge({6, Ranks{0, 1}, Ranks{3}});
  EXPECT_NE(s.message().find("trainer 3 clocked it but is not in its split"), std::string::npos) << s.ToString();
  EXPECT_FALSE(here.Merge({6, Ranks{1, 0}, Ranks{}}).ok());
  EXPECT_EQ(here.clocks(), 2u);
  EXPECT_EQ(here.Complete(5), 0u);
}

}  // namespace
}  // namespace strata
