// serial_queue_test.cc: SerialQueue runs tasks in the order posted, on one thread that is not the
// poster's, starts that thread only when first needed, and runs what is queued before it goes.
#include "common/serial_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace strata {
namespace {

TEST(SerialQueue, RunsTasksInPostedOrderOnOneOtherThread) {
  std::vector<int> order;
  std::set<std::thread::id> threads;
  std::mutex mu;
  {
    SerialQueue q;
    // Posted from two threads: each poster's own tasks keep their order.
    std::thread other([&] {
      for (int i = 1000; i < 1500; ++i) {
        q.Post([&, i] {
          std::lock_guard lock(mu);
          order.push_back(i);
          threads.insert(std::this_thread::get_id());
        });
      }
    });
    for (int i = 0; i < 500; ++i) {
      q.Post([&, i] {
        std::lock_guard lock(mu);
        order.push_back(i);
        threads.insert(std::this_thread::get_id());
      });
    }
    other.join();
  }  // the destructor runs whatever is still queued
  ASSERT_EQ(order.size(), 1000u);
  int last_mine = -1, last_other = 999;
  for (int v : order) {
    int& last = v < 1000 ? last_mine : last_other;
    EXPECT_EQ(v, last + 1);
    last = v;
  }
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_NE(*threads.begin(), std::this_thread::get_id());
}

TEST(SerialQueue, AQueueNeverPostedToStartsNoThreadAndDestroysCleanly) {
  SerialQueue q;  // nothing to check but that this neither hangs nor crashes
}

TEST(SerialQueue, ATaskMayPostAnother) {
  std::atomic<int> ran{0};
  {
    SerialQueue q;
    q.Post([&] {
      ++ran;
      q.Post([&] { ++ran; });
    });
  }
  EXPECT_EQ(ran.load(), 2);
}

}  // namespace
}  // namespace strata
