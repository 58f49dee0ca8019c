// dense_snapshots_test.cc: DenseSnapshots: a published snapshot is served until the chunk is
// invalidated, a read that raced an update is not installed, a writer's copy is installed with the
// version its invalidation returned (and only then), a lookup of several chunks takes all or
// none, buffers held by a reply survive invalidation and the object itself, and released buffers
// are recycled.
#include "ps/dense_snapshots.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

std::shared_ptr<const float> Filled(DenseSnapshots& s, float v) {
  std::shared_ptr<float> b = s.Acquire();
  std::fill(b.get(), b.get() + 4, v);
  return b;
}

TEST(DenseSnapshots, ServesThePublishedSnapshotUntilInvalidated) {
  DenseSnapshots s(4, 2);
  DenseSnapshots::Lookup l = s.Get(7);
  EXPECT_EQ(l.values, nullptr);
  s.Publish(7, l.version, Filled(s, 1.0f), /*read=*/false);
  DenseSnapshots::Lookup again = s.Get(7);
  ASSERT_NE(again.values, nullptr);
  EXPECT_EQ(again.values.get()[3], 1.0f);
  EXPECT_EQ(s.Get(8).values, nullptr);  // chunks are independent
  s.Invalidate(7);
  EXPECT_EQ(s.Get(7).values, nullptr);
  // The reply that holds the old snapshot still reads it whole.
  EXPECT_EQ(again.values.get()[0], 1.0f);
}

TEST(DenseSnapshots, AReadThatRacedAnUpdateIsNotInstalled) {
  DenseSnapshots s(4, 2);
  DenseSnapshots::Lookup l = s.Get(1);
  s.Invalidate(1);  // an update landed between the lookup and the publish
  s.Publish(1, l.version, Filled(s, 2.0f), /*read=*/false);
  EXPECT_EQ(s.Get(1).values, nullptr);
  DenseSnapshots::Lookup now = s.Get(1);
  s.Publish(1, now.version, Filled(s, 3.0f), /*read=*/false);
  ASSERT_NE(s.Get(1).values, nullptr);
  EXPECT_EQ(s.Get(1).values.get()[0], 3.0f);
}

TEST(DenseSnapshots, AWriterPublishesWithTheVersionItsInvalidateReturned) {
  DenseSnapshots s(4, 2);
  DenseSnapshots::Lookup l = s.Get(3);
  s.Publish(3, l.version, Filled(s, 1.0f), /*read=*/false);
  EXPECT_FALSE(s.WasRead(3)) << "published, not yet handed to a pull";
  EXPECT_NE(s.Get(3).values, nullptr);
  EXPECT_TRUE(s.WasRead(3));
  EXPECT_FALSE(s.WasRead(4));
  s.Publish(4, s.Get(4).version, Filled(s, 1.0f), /*read=*/true);  // what a pull read and sends
  EXPECT_TRUE(s.WasRead(4));
  // A writer holding the record: invalidates, then publishes its copy with that version.
  const uint64_t v = s.Invalidate(3);
  EXPECT_FALSE(s.WasRead(3));
  s.Publish(3, v, Filled(s, 2.0f), /*read=*/false);
  ASSERT_NE(s.Get(3).values, nullptr);
  EXPECT_EQ(s.Get(3).values.get()[1], 2.0f);
  // A later writer's invalidation wins over an earlier writer's publish.
  const uint64_t first = s.Invalidate(3);
  s.Invalidate(3);
  s.Publish(3, first, Filled(s, 3.0f), /*read=*/false);
  EXPECT_EQ(s.Get(3).values, nullptr);
}

TEST(DenseSnapshots, GetFreshTakesEveryChunkOrNoneAndCountsOnlyWhatItTakes) {
  DenseSnapshots s(4, 4);
  s.Publish(1, s.Get(1).version, Filled(s, 1.0f), /*read=*/false);
  s.Publish(2, s.Get(2).version, Filled(s, 2.0f), /*read=*/false);
  std::vector<std::shared_ptr<const float>> values;
  const std::vector<uint64_t> with_stale = {1, 3, 2};
  EXPECT_FALSE(s.GetFresh(with_stale, &values));
  EXPECT_TRUE(values.empty());
  EXPECT_FALSE(s.WasRead(1)) << "a lookup that found a stale chunk counts nothing as read";
  const std::vector<uint64_t> fresh = {2, 1};
  ASSERT_TRUE(s.GetFresh(fresh, &values));
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(values[0].get()[0], 2.0f);
  EXPECT_EQ(values[1].get()[0], 1.0f);
  EXPECT_TRUE(s.WasRead(1));
  EXPECT_TRUE(s.WasRead(2));
}

TEST(DenseSnapshots, ReleasedBuffersAreRecycledAndMayOutliveTheSnapshots) {
  std::shared_ptr<const float> kept;
  {
    DenseSnapshots s(4, 1);
    const float* first = nullptr;
    {
      std::shared_ptr<float> a = s.Acquire();
      first = a.get();
    }
    std::shared_ptr<float> b = s.Acquire();
    EXPECT_EQ(b.get(), first);  // recycled, not allocated again
    EXPECT_EQ(s.allocated(), 1u);
    kept = Filled(s, 5.0f);
    EXPECT_EQ(s.allocated(), 2u);
  }
  EXPECT_EQ(kept.get()[2], 5.0f);  // released later, into a pool nobody else holds
}

}  // namespace
}  // namespace strata
