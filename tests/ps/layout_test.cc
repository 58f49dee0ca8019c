// layout_test.cc: PsLayout (ps/layout.h): every key has exactly one owner, a live one; a join
// moves only the keys the new server takes (1/(n+1) of them), a leave only the leaving server's;
// the first servers' layout is SparseServer's.
#include "ps/layout.h"

#include <gtest/gtest.h>

#include <map>

namespace strata {
namespace {

constexpr uint64_t kKeys = 200000;

PsLayout Layout(uint32_t base, uint32_t servers, std::vector<uint32_t> left = {}) {
  PsLayout l;
  l.base = base;
  l.servers = servers;
  for (uint32_t r : left) l.Leave(r);
  return l;
}

// Checks that every key has one live owner in both layouts, that keys move only from `from`
// (any server if kAny) to `to` (any if kAny), and returns the fraction of keys that moved.
constexpr uint32_t kAny = ~0u;
double Moved(const PsLayout& before, const PsLayout& after, uint32_t from, uint32_t to,
             std::map<uint32_t, uint64_t>* received = nullptr) {
  uint64_t moved = 0;
  for (uint64_t i = 0; i < kKeys; ++i) {
    const uint64_t key = i * 0x9e3779b97f4a7c15ull + 12345;  // spread, and sequential ids below
    const uint64_t k = i % 2 ? key : i;
    const uint32_t a = before.SparseOwner(k), b = after.SparseOwner(k);
    EXPECT_LT(b, after.servers) << k;
    EXPECT_FALSE(after.Left(b)) << "key " << k << " is owned by server " << b << ", which left";
    if (a == b) continue;
    ++moved;
    if (from != kAny) {
      EXPECT_EQ(a, from) << "key " << k << " moved from " << a << " to " << b;
    }
    if (to != kAny) {
      EXPECT_EQ(b, to) << "key " << k << " moved from " << a << " to " << b;
    }
    if (received) ++(*received)[b];
  }
  return static_cast<double>(moved) / kKeys;
}

TEST(PsLayout, TheFirstServersPlaceKeysAsSparseServer) {
  const PsLayout l = Layout(3, 3);
  for (uint64_t k = 0; k < 10000; ++k) EXPECT_EQ(l.SparseOwner(k), SparseServer(k, 3)) << k;
  TableSpec spec;
  spec.id = 7;
  spec.kind = TableKind::kDense;
  EXPECT_EQ(l.DenseOwner(spec, 5), DenseServer(spec, 5, 3));
  EXPECT_EQ(DenseServer(spec, 5, 3), (5u + 7u) % 3);  // kPlaceById: the id, as before
}

TEST(PsLayout, AJoinMovesOneShareOfEveryServerToTheNewOneOnly) {
  EXPECT_NEAR(Moved(Layout(2, 2), Layout(2, 3), kAny, 2), 1.0 / 3, 0.01);
  EXPECT_NEAR(Moved(Layout(2, 3), Layout(2, 4), kAny, 3), 1.0 / 4, 0.01);
}

TEST(PsLayout, AJoinedServerLeavingGivesItsKeysBackAsBeforeItJoined) {
  EXPECT_NEAR(Moved(Layout(2, 3), Layout(2, 3, {2}), 2, kAny), 1.0 / 3, 0.01);
  EXPECT_DOUBLE_EQ(Moved(Layout(2, 2), Layout(2, 3, {2}), kAny, kAny), 0.0);
}

TEST(PsLayout, AFirstServerLeavingMovesOnlyItsKeysSpreadOverTheFirstServersLeft) {
  std::map<uint32_t, uint64_t> received;
  // 4 first servers and one joined: each holds 1/5 of the keys.
  EXPECT_NEAR(Moved(Layout(4, 5), Layout(4, 5, {1}), 1, kAny, &received), 0.2, 0.01);
  EXPECT_EQ(received.count(1), 0u);
  EXPECT_EQ(received.count(4), 0u);  // the joined server's share is fixed by its own hash
  for (uint32_t r : {0u, 2u, 3u}) EXPECT_NEAR(static_cast<double>(received[r]) / kKeys, 0.2 / 3, 0.01) << r;
  // A second leave moves only the second server's keys, including those it got from the first.
  EXPECT_NEAR(Moved(Layout(4, 5, {1}), Layout(4, 5, {1, 3}), 3, kAny), 0.2 + 0.2 / 3, 0.01);
}

TEST(PsLayout, AJoinAfterALeaveTakesOnlyFromTheServersThere) {
  EXPECT_NEAR(Moved(Layout(3, 3, {1}), Layout(3, 4, {1}), kAny, 3), 1.0 / 4, 0.01);
}

TEST(PsLayout, LeaveKeepsTheListSortedAndOnce) {
  PsLayout l = Layout(4, 6);
  l.Leave(5);
  l.Leave(2);
  l.Leave(5);
  EXPECT_EQ(l.left, (std::vector<uint32_t>{2, 5}));
  EXPECT_TRUE(l.Left(2));
  EXPECT_FALSE(l.Left(3));
}

}  // namespace
}  // namespace strata
