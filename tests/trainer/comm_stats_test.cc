// comm_stats_test.cc: what a Communicator counts (CommStats). The Gloo communicator with 4 ranks
// as threads runs a known sequence of operations and its stats are exactly the calls and
// payload bytes comm_stats.h defines (reduce-scatter its input, all-gather its output, host ops
// apart, ISend/IRecv as send/recv, failed calls not at all); snapshots subtract to one step's
// traffic; the ring's wire bytes per rank.
#include "trainer/comm/comm_stats.h"

#include <gtest/gtest.h>

#include <thread>

#include "tests/trainer/inproc_trainers.h"
#include "trainer/comm/gloo_communicator.h"

namespace strata {
namespace {

constexpr int kRanks = 4;

class CommStatsTest : public InprocTrainersTest {
 protected:
  void SetUp() override { StartTrainers(kRanks); }
};

TEST_F(CommStatsTest, GlooCountsEveryOperationsPayload) {
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      auto made = MakeGlooCommunicator(*nodes_[r], "trainers/dp/0", r, kRanks);
      ASSERT_TRUE(made.ok()) << made.status().ToString();
      Communicator& c = **made;
      EXPECT_EQ(c.name(), "trainers/dp/0");
      EXPECT_EQ(c.stats(), CommStats());

      std::vector<float> v(10, 1.0f);
      ASSERT_TRUE(c.AllReduce(v.data(), 10, ReduceOp::kSum).ok());
      ASSERT_TRUE(c.AllReduce(v.data(), 6, ReduceOp::kAvg).ok());
      std::vector<float> in(kRanks * 3, 1.0f), out(3);
      ASSERT_TRUE(c.ReduceScatter(in.data(), out.data(), 3, ReduceOp::kSum).ok());
      std::vector<float> mine(2, 1.0f), all(kRanks * 2);
      ASSERT_TRUE(c.AllGather(mine.data(), all.data(), 2).ok());
      ASSERT_TRUE(c.Broadcast(v.data(), 5, 1).ok());
      EXPECT_EQ(c.Broadcast(v.data(), 5, kRanks).code(),
                StatusCode::kInvalidArgument);  // not counted
      ASSERT_TRUE(c.Barrier().ok());

      // A ring, blocking (even ranks send first), then posted.
      const int next = (r + 1) % kRanks, prev = (r + kRanks - 1) % kRanks;
      std::vector<float> send(7, static_cast<float>(r)), recv(7);
      if (r % 2 == 0) {
        ASSERT_TRUE(c.Send(send.data(), 7, next, 1).ok());
        ASSERT_TRUE(c.Recv(recv.data(), 7, prev, 1).ok());
      } else {
        ASSERT_TRUE(c.Recv(recv.data(), 7, prev, 1).ok());
        ASSERT_TRUE(c.Send(send.data(), 7, next, 1).ok());
      }
      EXPECT_EQ(c.Send(send.data(), 7, r, 1).code(), StatusCode::kInvalidArgument);  // not counted
      auto is = c.ISend(send.data(), 6, next, 2);
      auto ir = c.IRecv(recv.data(), 6, prev, 2);
      ASSERT_TRUE(is.ok() && ir.ok());
      ASSERT_TRUE((*is)->Wait().ok());
      ASSERT_TRUE((*ir)->Wait().ok());

      const CommStats before_host = c.stats();
      float f[3] = {1, 2, 3};
      double d = 1;
      ASSERT_TRUE(c.AllReduceHost(f, 2, ReduceOp::kSum).ok());
      ASSERT_TRUE(c.AllReduceHost(&d, 1, ReduceOp::kSum).ok());
      ASSERT_TRUE(c.BroadcastHost(f, 3, 0).ok());

      const CommStats& s = c.stats();
      EXPECT_EQ(s[CommOp::kAllReduce], (CommOpStats{2, (10 + 6) * 4}));
      EXPECT_EQ(s[CommOp::kReduceScatter], (CommOpStats{1, kRanks * 3 * 4}));  // the input
      EXPECT_EQ(s[CommOp::kAllGather], (CommOpStats{1, kRanks * 2 * 4}));      // the output
      EXPECT_EQ(s[CommOp::kBroadcast], (CommOpStats{1, 5 * 4}));
      EXPECT_EQ(s[CommOp::kBarrier], (CommOpStats{1, 0}));
      EXPECT_EQ(s[CommOp::kSend], (CommOpStats{2, (7 + 6) * 4}));
      EXPECT_EQ(s[CommOp::kRecv], (CommOpStats{2, (7 + 6) * 4}));
      // Host ops are counted apart from the tensors': floats 4 bytes, doubles 8.
      EXPECT_EQ(s[CommOp::kHostAllReduce], (CommOpStats{2, 2 * 4 + 8}));
      EXPECT_EQ(s[CommOp::kHostBroadcast], (CommOpStats{1, 3 * 4}));
      EXPECT_EQ(s.total_calls(), 13u);
      EXPECT_EQ(s.total_bytes(), 64u + 48 + 32 + 20 + 52 + 52 + 16 + 12);

      // A snapshot's difference is what ran since.
      CommStats host;
      host.Record(CommOp::kHostAllReduce, 8);
      host.Record(CommOp::kHostAllReduce, 8);
      host.Record(CommOp::kHostBroadcast, 12);
      EXPECT_EQ(s - before_host, host);
      CommStats sum = before_host;
      sum += host;
      EXPECT_EQ(sum, s);
    });
  }
  for (auto& t : threads) t.join();
}

// All-to-all transposes blocks across the group and counts its input.
TEST_F(CommStatsTest, GlooAllToAllTransposesBlocksAndCountsItsInput) {
  constexpr size_t kBlock = 3;
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      auto made = MakeGlooCommunicator(*nodes_[r], "trainers/tp/0", r, kRanks);
      ASSERT_TRUE(made.ok()) << made.status().ToString();
      Communicator& c = **made;
      // Element i of block j on rank r is 100 r + 10 j + i.
      std::vector<float> in(kRanks * kBlock), out(kRanks * kBlock, -1.0f);
      for (int j = 0; j < kRanks; ++j) {
        for (size_t i = 0; i < kBlock; ++i) in[j * kBlock + i] = 100.0f * r + 10.0f * j + i;
      }
      ASSERT_TRUE(c.AllToAll(in.data(), out.data(), kBlock).ok());
      for (int j = 0; j < kRanks; ++j) {
        for (size_t i = 0; i < kBlock; ++i) {
          EXPECT_EQ(out[j * kBlock + i], 100.0f * j + 10.0f * r + i) << "rank " << r << " block " << j;
        }
      }
      ASSERT_TRUE(c.AllToAll(in.data(), out.data(), 0).ok());
      EXPECT_EQ(c.stats()[CommOp::kAllToAll], (CommOpStats{2, kRanks * kBlock * 4}));
      EXPECT_EQ(c.stats().total_calls(), 2u);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(CommStats, RingWireBytesPerRank) {
  EXPECT_DOUBLE_EQ(RingWireBytesPerRank(CommOp::kAllReduce, 400, 4), 600);  // 2 (n-1)/n
  EXPECT_DOUBLE_EQ(RingWireBytesPerRank(CommOp::kHostAllReduce, 8, 2), 8);
  EXPECT_DOUBLE_EQ(RingWireBytesPerRank(CommOp::kReduceScatter, 400, 4), 300);  // (n-1)/n
  EXPECT_DOUBLE_EQ(RingWireBytesPerRank(CommOp::kAllGather, 400, 4), 300);
  EXPECT_DOUBLE_EQ(RingWireBytesPerRank(CommOp::kAllToAll, 400, 4), 300);
  EXPECT_DOUBLE_EQ(RingWireBytesPerRank(CommOp::kBroadcast, 400, 4), 400);
  EXPECT_DOUBLE_EQ(RingWireBytesPerRank(CommOp::kSend, 400, 4), 400);
  EXPECT_DOUBLE_EQ(RingWireBytesPerRank(CommOp::kRecv, 400, 4), 0);
  EXPECT_DOUBLE_EQ(RingWireBytesPerRank(CommOp::kAllReduce, 400, 1), 0);
  EXPECT_EQ(CommOpName(CommOp::kHostBroadcast), "host_broadcast");
  EXPECT_EQ(CommOpName(CommOp::kAllReduce), "all_reduce");
  EXPECT_EQ(CommOpName(CommOp::kAllToAll), "all_to_all");
}

}  // namespace
}  // namespace strata
