// clock_members_test.cc: ClockMembers, an elastic BSP server's count of each clock's trainers:
// complete once the stated number of distinct trainers clocked it, a retried message counted
// once, and a message that disagrees on the count (or comes from one trainer too many) refused,
// changing nothing.
#include "ps/clock_members.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

TEST(ClockMembersTest, AClockIsCompleteOnceItsStatedTrainersAllClockedIt) {
  ClockMembers m;
  EXPECT_EQ(m.Complete(0), 0u);  // never stated
  ASSERT_TRUE(m.Add(0, 4, 2).ok());
  EXPECT_EQ(m.Complete(0), 0u);
  ASSERT_TRUE(m.Add(0, 4, 2).ok());  // the same trainer again (a retried message)
  EXPECT_EQ(m.Complete(0), 0u);
  ASSERT_TRUE(m.Add(0, 5, 2).ok());
  EXPECT_EQ(m.Complete(0), 2u);
  // The next clock has a third trainer (joined); clocks may be stated in any order.
  ASSERT_TRUE(m.Add(1, 6, 3).ok());
  ASSERT_TRUE(m.Add(1, 5, 3).ok());
  EXPECT_EQ(m.Complete(1), 0u);
  ASSERT_TRUE(m.Add(1, 4, 3).ok());
  EXPECT_EQ(m.Complete(1), 3u);
  EXPECT_EQ(m.clocks(), 2u);
  m.ForgetBelow(1);
  EXPECT_EQ(m.clocks(), 1u);
  EXPECT_EQ(m.Complete(0), 0u);
  EXPECT_EQ(m.Complete(1), 3u);
}

TEST(ClockMembersTest, DisagreementsAndOneTrainerTooManyAreRefusedChangingNothing) {
  ClockMembers m;
  Status zero = m.Add(0, 4, 0);
  EXPECT_EQ(zero.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(zero.message().find("clock.members"), std::string::npos) << zero.ToString();
  EXPECT_EQ(m.clocks(), 0u);

  ASSERT_TRUE(m.Add(0, 4, 2).ok());
  Status differ = m.Add(0, 5, 3);
  EXPECT_EQ(differ.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(differ.message().find("states 3"), std::string::npos) << differ.ToString();
  EXPECT_NE(differ.message().find("stated 2"), std::string::npos) << differ.ToString();
  EXPECT_EQ(m.Complete(0), 0u);  // node 5 was not counted
  ASSERT_TRUE(m.Add(0, 5, 2).ok());
  EXPECT_EQ(m.Complete(0), 2u);

  Status extra = m.Add(0, 6, 2);
  EXPECT_EQ(extra.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(extra.message().find("node 6 is not in its step's split"), std::string::npos) << extra.ToString();
  EXPECT_EQ(m.Complete(0), 2u);
  ASSERT_TRUE(m.Add(0, 4, 2).ok());  // a member's repeat after completion is still harmless
}

}  // namespace
}  // namespace strata
