// log_limiter_test.cc: LogLimiter's per-peer counts and its two bounds, on a clock the test moves.
#include "common/log_limiter.h"

#include <gtest/gtest.h>

#include <string>

namespace strata {
namespace {

using std::chrono::seconds;
using Clock = LogLimiter::Clock;

TEST(LogLimiterTest, EachPeersFirstEventIsLoggedThenOneLinePerIntervalWithItsCount) {
  LogLimiter limiter({seconds(10), 16, 1024});
  const Clock::time_point t0{};
  EXPECT_TRUE(limiter.Count("a", t0 + seconds(1)).log);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(limiter.Count("a", t0 + seconds(2)).log);
  // A flood from "a" does not hide "b"'s first event.
  const LogLimiter::Tick b = limiter.Count("b", t0 + seconds(3));
  EXPECT_TRUE(b.log);
  EXPECT_EQ(b.total, 1u);
  EXPECT_EQ(b.all, 7u);
  EXPECT_EQ(b.peers, 2u);
  // "a"'s next line, an interval after its first, stands for everything since.
  const LogLimiter::Tick a = limiter.Count("a", t0 + seconds(11));
  EXPECT_TRUE(a.log);
  EXPECT_EQ(a.since, 6u);
  EXPECT_EQ(a.total, 7u);
  EXPECT_FALSE(limiter.Count("a", t0 + seconds(12)).log);
  EXPECT_EQ(limiter.Count("a", t0 + seconds(13)).since, 2u);
}

TEST(LogLimiterTest, NoMoreThanMaxLinesPerIntervalOverAllPeersAndAPeerPastTheBudgetKeepsItsCount) {
  LogLimiter limiter({seconds(10), 3, 1024});
  const Clock::time_point t0{};
  int lines = 0;
  for (int p = 0; p < 100; ++p) lines += limiter.Count("peer" + std::to_string(p), t0 + seconds(1)).log;
  EXPECT_EQ(lines, 3);
  // peer50 was not logged: its second event, a new interval later, reports both.
  const LogLimiter::Tick t = limiter.Count("peer50", t0 + seconds(12));
  EXPECT_TRUE(t.log);
  EXPECT_EQ(t.since, 2u);
}

TEST(LogLimiterTest, RemembersAtMostMaxPeersForgettingTheOneLoggedLongestAgo) {
  LogLimiter limiter({seconds(10), 1000, 4});
  const Clock::time_point t0{};
  for (int p = 0; p < 4; ++p) limiter.Count("p" + std::to_string(p), t0 + seconds(p));
  // A fifth peer pushes out p0 (logged at t0), the oldest.
  EXPECT_EQ(limiter.Count("p4", t0 + seconds(5)).peers, 4u);
  EXPECT_FALSE(limiter.Count("p1", t0 + seconds(6)).log);  // still remembered: within its interval
  const LogLimiter::Tick p0 = limiter.Count("p0", t0 + seconds(6));
  EXPECT_TRUE(p0.log);  // forgotten, so new
  EXPECT_EQ(p0.total, 1u);
  for (int p = 5; p < 1000; ++p) EXPECT_LE(limiter.Count("p" + std::to_string(p), t0 + seconds(7)).peers, 4u);
}

}  // namespace
}  // namespace strata
