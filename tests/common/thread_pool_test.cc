// thread_pool_test.cc: ThreadPool covers every index once in grain-sized chunks, from one
// thread or many, and runs small loops inline.
#include "common/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

namespace strata {
namespace {

TEST(ThreadPool, CoversEveryIndexOnceInGrainChunks) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.threads(), threads);
    std::vector<std::atomic<int>> hits(1003);
    std::atomic<int> short_chunks{0};
    pool.ParallelFor(1003, 10, [&](int64_t lo, int64_t hi) {
      EXPECT_EQ(lo % 10, 0);
      if (hi - lo != 10) ++short_chunks;
      for (int64_t i = lo; i < hi; ++i) ++hits[i];
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
    EXPECT_EQ(short_chunks.load(), 1);  // only the last
  }
}

TEST(ThreadPool, SmallLoopRunsInlineAndManyCallersQueue) {
  ThreadPool pool(2);
  const auto self = std::this_thread::get_id();
  pool.ParallelFor(5, 10, [&](int64_t lo, int64_t hi) {
    EXPECT_EQ(std::this_thread::get_id(), self);
    EXPECT_EQ(lo, 0);
    EXPECT_EQ(hi, 5);
  });
  std::atomic<int64_t> sum{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      for (int r = 0; r < 20; ++r) {
        pool.ParallelFor(1000, 7, [&](int64_t lo, int64_t hi) { sum += hi - lo; });
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(sum.load(), 4 * 20 * 1000);
}

}  // namespace
}  // namespace strata
