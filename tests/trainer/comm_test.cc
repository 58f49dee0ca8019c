// comm_test.cc: the Gloo communicator with 4 ranks as threads (each a Node whose kv store is
// the scheduler's, over the in-process transport; Gloo's own pairs are TCP on loopback):
// all-reduce (sum, avg, max; small and 1M floats), all-gather, broadcast, barrier, and groups
// from a ProcessMesh.
#include "trainer/comm/gloo_communicator.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "common/inproc_transport.h"
#include "ps/scheduler.h"

namespace strata {
namespace {

constexpr int kRanks = 4;

class CommTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.scheduler = "mem://scheduler";
    cluster_.servers = 0;
    cluster_.trainers = kRanks;
    cluster_.heartbeat_interval_ms = 50;
    cluster_.heartbeat_timeout_ms = 5000;
    scheduler_ = std::make_unique<Scheduler>(SchedulerOptions{cluster_},
                                             std::make_unique<InprocTransport>(&hub_));
    ASSERT_TRUE(scheduler_->Start("mem://scheduler").ok());
    for (int r = 0; r < kRanks; ++r) {
      NodeOptions o;
      o.cluster = cluster_;
      o.role = Role::kTrainer;
      o.bind = "mem://trainer" + std::to_string(r);
      o.requested_rank = r;
      nodes_.push_back(std::make_unique<Node>(o, &hub_));
    }
    std::vector<std::future<Status>> joins;
    for (auto& n : nodes_) joins.push_back(std::async(std::launch::async, [&n] { return n->Join(); }));
    for (auto& j : joins) ASSERT_TRUE(j.get().ok());
  }

  // Runs `body(rank)` on every rank concurrently.
  void OnEveryRank(const std::function<void(int)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < kRanks; ++r) threads.emplace_back(body, r);
    for (auto& t : threads) t.join();
  }

  InprocHub hub_;
  ClusterOptions cluster_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

TEST_F(CommTest, WorldCollectives) {
  OnEveryRank([&](int r) {
    auto comm = MakeGlooCommunicator(*nodes_[r], "world", r, kRanks);
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    Communicator& c = **comm;
    EXPECT_EQ(c.rank(), r);
    EXPECT_EQ(c.size(), kRanks);

    std::vector<float> v = {1.0f + r, 10.0f * r, -1.0f * r};
    ASSERT_TRUE(c.AllReduce(v.data(), v.size(), ReduceOp::kSum).ok());
    EXPECT_EQ(v, (std::vector<float>{10, 60, -6}));
    std::vector<float> avg = {static_cast<float>(r)};
    ASSERT_TRUE(c.AllReduce(avg.data(), 1, ReduceOp::kAvg).ok());
    EXPECT_FLOAT_EQ(avg[0], 1.5f);
    std::vector<float> mx = {static_cast<float>(r * r)};
    ASSERT_TRUE(c.AllReduce(mx.data(), 1, ReduceOp::kMax).ok());
    EXPECT_EQ(mx[0], 9.0f);

    // A large buffer goes through the ring in pieces.
    std::vector<float> big(1 << 20);
    for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 1000) * (r + 1);
    ASSERT_TRUE(c.AllReduce(big.data(), big.size(), ReduceOp::kSum).ok());
    for (size_t i = 0; i < big.size(); i += 4099) ASSERT_EQ(big[i], static_cast<float>(i % 1000) * 10) << i;

    std::vector<float> mine = {static_cast<float>(r), static_cast<float>(-r)}, all(2 * kRanks);
    ASSERT_TRUE(c.AllGather(mine.data(), all.data(), 2).ok());
    for (int k = 0; k < kRanks; ++k) {
      EXPECT_EQ(all[2 * k], k);
      EXPECT_EQ(all[2 * k + 1], -k);
    }
    std::vector<float> b = {r == 2 ? 42.0f : 0.0f, r == 2 ? 7.0f : 0.0f};
    ASSERT_TRUE(c.Broadcast(b.data(), 2, 2).ok());
    EXPECT_EQ(b, (std::vector<float>{42, 7}));
    EXPECT_EQ(c.Broadcast(b.data(), 2, kRanks).code(), StatusCode::kInvalidArgument);
    EXPECT_TRUE(c.Barrier().ok());
  });
}

TEST_F(CommTest, GroupsFromAProcessMesh) {
  auto mesh = ProcessMesh::Megatron(/*pp=*/1, /*dp=*/2, /*tp=*/2);
  ASSERT_TRUE(mesh.ok());
  OnEveryRank([&](int r) {
    // The tensor-parallel group of this rank: {0,1} or {2,3}.
    const std::vector<int> group = mesh->GroupOf(r, "tp");
    const int index = static_cast<int>(std::find(group.begin(), group.end(), r) - group.begin());
    auto comm = MakeGlooCommunicator(*nodes_[r], "tp/" + std::to_string(group[0]), index,
                                     static_cast<int>(group.size()));
    ASSERT_TRUE(comm.ok()) << comm.status().ToString();
    float x = static_cast<float>(r);
    ASSERT_TRUE((*comm)->AllReduce(&x, 1, ReduceOp::kSum).ok());
    EXPECT_EQ(x, static_cast<float>(group[0] + group[1])) << "rank " << r;
  });
}

TEST_F(CommTest, BadArgumentsAreErrors) {
  EXPECT_EQ(MakeGlooCommunicator(*nodes_[0], "x", 4, 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeGlooCommunicator(*nodes_[0], "x", 0, 0).status().code(), StatusCode::kInvalidArgument);
  // A peer that never comes: the rendezvous times out with an error, it does not hang.
  GlooOptions quick;
  quick.timeout = Millis(300);
  auto lonely = MakeGlooCommunicator(*nodes_[0], "lonely", 0, 2, quick);
  EXPECT_FALSE(lonely.ok());
}

}  // namespace
}  // namespace strata
