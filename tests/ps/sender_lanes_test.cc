// sender_lanes_test.cc: SenderLanes: one sender's keyed requests spread over workers and stay in
// order per key; unkeyed ones wait for everything before them and hold back everything after;
// senders are independent; and a threaded run against a reference order.
#include "ps/sender_lanes.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <map>
#include <set>
#include <thread>

namespace strata {
namespace {

using Lanes = SenderLanes<int>;

std::vector<int> Items(const Lanes::Ready& ready) {
  std::vector<int> items;
  for (const auto& [worker, item] : ready) items.push_back(item);
  return items;
}

TEST(SenderLanes, KeyedRequestsOfOneSenderSpreadOverWorkers) {
  Lanes lanes(4);
  std::set<size_t> workers;
  for (int chunk = 0; chunk < 16; ++chunk) {
    auto ready = lanes.Admit(7, LaneKey{1, static_cast<uint64_t>(chunk)}, chunk);
    ASSERT_EQ(ready.size(), 1u) << "a keyed request waits for nothing but earlier unkeyed ones";
    EXPECT_EQ(ready[0].first, lanes.WorkerOf(LaneKey{1, static_cast<uint64_t>(chunk)}));
    workers.insert(ready[0].first);
  }
  EXPECT_GT(workers.size(), 1u);
  // The same key always lands on the same worker (its queue keeps them in order).
  EXPECT_EQ(lanes.WorkerOf(LaneKey{1, 5}), lanes.WorkerOf(LaneKey{1, 5}));
}

TEST(SenderLanes, UnkeyedWaitsForEverythingBeforeAndHoldsBackEverythingAfter) {
  Lanes lanes(2);
  EXPECT_EQ(Items(lanes.Admit(1, LaneKey{0, 0}, 10)), std::vector<int>{10});
  EXPECT_EQ(Items(lanes.Admit(1, LaneKey{0, 1}, 11)), std::vector<int>{11});
  EXPECT_TRUE(lanes.Admit(1, std::nullopt, 12).empty());  // a clock: the pushes run
  EXPECT_TRUE(lanes.Admit(1, LaneKey{0, 2}, 13).empty());  // after the clock
  EXPECT_TRUE(lanes.Done(1, true).empty());                 // 10 done, 11 still running
  auto clock = lanes.Done(1, true);                         // 11 done: the clock goes
  ASSERT_EQ(Items(clock), std::vector<int>{12});
  EXPECT_EQ(clock[0].first, lanes.HomeOf(1));
  EXPECT_TRUE(lanes.Admit(1, LaneKey{0, 3}, 14).empty());  // still behind the clock
  EXPECT_EQ(Items(lanes.Done(1, false)), (std::vector<int>{13, 14}));
  EXPECT_TRUE(lanes.Done(1, true).empty());
  EXPECT_TRUE(lanes.Done(1, true).empty());
  EXPECT_EQ(lanes.senders(), 0u) << "an idle sender's state is dropped";
}

TEST(SenderLanes, ConsecutiveUnkeyedRequestsRunOneAtATime) {
  Lanes lanes(3);
  EXPECT_EQ(Items(lanes.Admit(4, std::nullopt, 1)), std::vector<int>{1});
  EXPECT_TRUE(lanes.Admit(4, std::nullopt, 2).empty());
  EXPECT_EQ(Items(lanes.Done(4, false)), std::vector<int>{2});
  EXPECT_TRUE(lanes.Done(4, false).empty());
}

TEST(SenderLanes, SendersDoNotWaitForEachOther) {
  Lanes lanes(2);
  EXPECT_EQ(Items(lanes.Admit(1, std::nullopt, 1)), std::vector<int>{1});
  EXPECT_TRUE(lanes.Admit(1, LaneKey{0, 0}, 2).empty());
  EXPECT_EQ(Items(lanes.Admit(2, LaneKey{0, 0}, 3)), std::vector<int>{3});
  EXPECT_EQ(Items(lanes.Admit(2, std::nullopt, 4)), std::vector<int>{});  // waits for 3 only
  EXPECT_EQ(Items(lanes.Done(2, true)), std::vector<int>{4});
  EXPECT_EQ(lanes.senders(), 2u);
}

TEST(SenderLanes, ASenderIsIdleOnlyWithNothingRunningOrWaiting) {
  Lanes lanes(2);
  EXPECT_TRUE(lanes.Idle(5));
  EXPECT_EQ(Items(lanes.Admit(5, LaneKey{0, 0}, 1)), std::vector<int>{1});
  EXPECT_FALSE(lanes.Idle(5)) << "a push still running";
  EXPECT_TRUE(lanes.Idle(6)) << "another sender's requests do not count";
  EXPECT_TRUE(lanes.Admit(5, std::nullopt, 2).empty());
  EXPECT_EQ(Items(lanes.Done(5, true)), std::vector<int>{2});
  EXPECT_FALSE(lanes.Idle(5)) << "the clock runs";
  EXPECT_TRUE(lanes.Done(5, false).empty());
  EXPECT_TRUE(lanes.Idle(5));
}

// Workers as threads: every request runs exactly once, per key in order, unkeyed ones alone
// and after everything sent before them.
TEST(SenderLanes, ThreadedRunKeepsTheOrderingGuarantees) {
  constexpr int kWorkers = 4, kSenders = 3, kRequests = 3000;
  struct Item {
    uint32_t sender;
    std::optional<LaneKey> key;
    int seq;
  };
  SenderLanes<Item> lanes(kWorkers);
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::deque<Item>> queues(kWorkers);
  bool stop = false;
  // What ran, per sender: sequence numbers, and for each the count of its sender's requests
  // that had finished when it started.
  std::map<uint32_t, std::vector<std::pair<int, int>>> started;
  std::map<uint32_t, int> finished;
  auto enqueue = [&](SenderLanes<Item>::Ready ready) {
    std::lock_guard lock(mu);
    for (auto& [w, item] : ready) queues[w].push_back(item);
    cv.notify_all();
  };
  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&, w] {
      for (;;) {
        Item item;
        {
          std::unique_lock lock(mu);
          cv.wait(lock, [&] { return stop || !queues[w].empty(); });
          if (queues[w].empty()) return;
          item = queues[w].front();
          queues[w].pop_front();
          started[item.sender].emplace_back(item.seq, finished[item.sender]);
        }
        std::this_thread::yield();
        {
          std::lock_guard lock(mu);
          ++finished[item.sender];
        }
        enqueue(lanes.Done(item.sender, item.key.has_value()));
      }
    });
  }
  std::vector<std::vector<Item>> sent(kSenders);
  for (int i = 0; i < kRequests; ++i) {
    const uint32_t sender = static_cast<uint32_t>(i % kSenders);
    std::optional<LaneKey> key;
    if (i % 11 != 0) key = LaneKey{1, static_cast<uint64_t>(i % 5)};
    Item item{sender, key, static_cast<int>(sent[sender].size())};
    sent[sender].push_back(item);
    enqueue(lanes.Admit(sender, key, item));
  }
  {
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::seconds(60), [&] {
      int done = 0;
      for (auto& [s, n] : finished) done += n;
      return done == kRequests;
    });
    stop = true;
    cv.notify_all();
  }
  for (auto& t : workers) t.join();
  for (uint32_t s = 0; s < kSenders; ++s) {
    const auto& runs = started[s];
    ASSERT_EQ(runs.size(), sent[s].size()) << "sender " << s;
    std::vector<int> start_index(sent[s].size(), -1);
    for (size_t r = 0; r < runs.size(); ++r) {
      ASSERT_EQ(start_index[runs[r].first], -1) << "ran twice";
      start_index[runs[r].first] = static_cast<int>(r);
    }
    int last_unkeyed = -1;
    for (size_t i = 0; i < sent[s].size(); ++i) {
      const Item& item = sent[s][i];
      // Nothing starts before the last unkeyed request before it has finished...
      EXPECT_GE(runs[start_index[i]].second, last_unkeyed + 1) << "sender " << s << " request " << i;
      if (!item.key) {
        // ...and an unkeyed one starts once everything before it has finished.
        EXPECT_EQ(runs[start_index[i]].second, static_cast<int>(i)) << "sender " << s << " request " << i;
        last_unkeyed = static_cast<int>(i);
      }
      for (size_t j = 0; j < i; ++j) {
        const Item& before = sent[s][j];
        const bool ordered = !item.key || !before.key || before.key->key == item.key->key;
        if (ordered) {
          EXPECT_LT(start_index[j], start_index[i]) << "sender " << s << ": " << j << " then " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace strata
