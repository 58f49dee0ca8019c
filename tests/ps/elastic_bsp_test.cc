// elastic_bsp_test.cc: BSP in an elastic job (cluster.elastic) on the servers, with trainers as
// threads over the in-process transport: each clock is applied once the trainers of its step's
// split all clocked it (ClockRequest.members) and divided by their number, so a trainer joining
// at a clock boundary holds nobody back before it and counts from it, a pull waits for the
// joiner's pushes, a leaver stops counting, and a trainer that disagrees on a clock's count is
// refused naming both counts.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "tests/ps/ps_fixture.h"

namespace strata {
namespace {

class ElasticBspTest : public PsTest {
 protected:
  void SetUp() override {
    cluster_.elastic = true;
    Start();
    OptimizerSpec sgd;
    sgd.lr = 1.0f;
    CreateEverywhere(Sparse(1, 1, Consistency::kBsp, sgd));
    // Keys on both servers, so both count the clocks.
    for (uint64_t key = 0; keys_.size() < 4; ++key) {
      if (SparseServer(key, kServers) == static_cast<uint32_t>(keys_.size() % 2)) keys_.push_back(key);
    }
  }
  std::vector<float> Pull(int trainer) {
    std::vector<float> out(keys_.size());
    PsTicket p = clients_[trainer]->Pull(1, keys_, out.data());
    EXPECT_TRUE(clients_[trainer]->Wait(p).ok());
    return out;
  }
  void Push(int trainer, float g) {
    const std::vector<float> grads(keys_.size(), g);
    PsTicket p = clients_[trainer]->Push(1, keys_, grads.data());
    ASSERT_TRUE(clients_[trainer]->Wait(p).ok());
  }
  Status Clock(int trainer, std::vector<uint32_t> members) {
    clients_[trainer]->set_members(std::move(members));
    return clients_[trainer]->Clock();
  }
  void ExpectMinus(const std::vector<float>& got, const std::vector<float>& before, float mean) {
    for (size_t i = 0; i < keys_.size(); ++i) EXPECT_NEAR(got[i], before[i] - mean, 1e-6) << "key " << keys_[i];
  }
  std::vector<uint64_t> keys_;
};

TEST_F(ElasticBspTest, EachClockWaitsForItsSplitsTrainersAndTakesTheirMean) {
  const std::vector<float> w0 = Pull(0);
  // Clock 0: trainers 0 and 1 split the step; trainer 2 joins from clock 1 and holds nobody back.
  Push(0, 1.0f);
  Push(1, 3.0f);
  ASSERT_TRUE(Clock(0, {0, 1}).ok());
  ASSERT_TRUE(Clock(1, {0, 1}).ok());
  const std::vector<float> w1 = Pull(0);
  ExpectMinus(w1, w0, 2.0f);  // (1 + 3) / 2

  // Clock 1: three trainers. Trainer 0's pull of clock 2 waits for the joiner's pushes.
  clients_[2]->set_clock(1);
  Push(0, 5.0f);
  Push(1, 7.0f);
  ASSERT_TRUE(Clock(0, {0, 1, 2}).ok());
  ASSERT_TRUE(Clock(1, {0, 1, 2}).ok());
  std::vector<float> w2(keys_.size());
  PsTicket early = clients_[0]->Pull(1, keys_, w2.data());
  Push(2, 9.0f);
  ASSERT_TRUE(Clock(2, {0, 1, 2}).ok());
  ASSERT_TRUE(clients_[0]->Wait(early).ok());
  ExpectMinus(w2, w1, 7.0f);  // (5 + 7 + 9) / 3

  // A clock message sent again (a retry after a lost reply) is counted once.
  clients_[1]->set_clock(1);
  ASSERT_TRUE(Clock(1, {0, 1, 2}).ok());

  // Clock 2: trainer 1 left; trainers 0 and 2 split it. A trainer stating another count for the
  // clock is refused, naming both counts, and is not counted.
  Push(0, 2.0f);
  ASSERT_TRUE(Clock(0, {0, 2}).ok());
  Status wrong = Clock(1, {0, 1, 2});
  EXPECT_EQ(wrong.code(), StatusCode::kFailedPrecondition) << wrong.ToString();
  EXPECT_NE(wrong.message().find("states 3 trainers"), std::string::npos) << wrong.ToString();
  EXPECT_NE(wrong.message().find("stated 2"), std::string::npos) << wrong.ToString();
  Push(2, 4.0f);
  ASSERT_TRUE(Clock(2, {0, 2}).ok());
  ExpectMinus(Pull(2), w2, 3.0f);  // (2 + 4) / 2
}

TEST_F(ElasticBspTest, AClockMessageWithoutItsMembersIsRefusedNamingTheField) {
  Push(0, 1.0f);
  Status s = Clock(0, {});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("clock.memberRanks"), std::string::npos) << s.ToString();
}

// Trainer 2 pushes its part of clock 0 and dies before its clock message: the clock goes on
// without it (its pushes dropped, the mean over the two that clocked), as does the next clock,
// whose split was leased with trainer 2 in it; a pull waiting for it is answered, not failed.
TEST_F(ElasticBspTest, ATrainerThatDiesMidStepIsLeftOutOfTheClocksItDidNotFinish) {
  const std::vector<float> w0 = Pull(0);
  Push(0, 1.0f);
  Push(1, 2.0f);
  Push(2, 30.0f);
  ASSERT_TRUE(Clock(0, {0, 1, 2}).ok());
  ASSERT_TRUE(Clock(1, {0, 1, 2}).ok());
  std::vector<float> w1(keys_.size());
  PsTicket waiting = clients_[0]->Pull(1, keys_, w1.data());
  trainer_nodes_[2]->StopWithoutLeaving();  // no heartbeat: declared dead after 2 s
  ASSERT_TRUE(clients_[0]->Wait(waiting).ok());
  ExpectMinus(w1, w0, 1.5f);  // (1 + 2) / 2: trainer 2's 30 dropped
  for (auto& server : servers_) {
    EXPECT_EQ(nlohmann::json::parse(server->StatsJson())["dead_trainer_keys_dropped"], 2u);  // its 2 keys here
  }

  Push(0, 4.0f);
  Push(1, 6.0f);
  ASSERT_TRUE(Clock(0, {0, 1, 2}).ok());  // leased before the death: still names trainer 2
  ASSERT_TRUE(Clock(1, {0, 1, 2}).ok());
  const std::vector<float> w2 = Pull(1);
  ExpectMinus(w2, w1, 5.0f);

  Push(0, 1.0f);
  Push(1, 3.0f);
  ASSERT_TRUE(Clock(0, {0, 1}).ok());
  ASSERT_TRUE(Clock(1, {0, 1}).ok());
  ExpectMinus(Pull(0), w2, 2.0f);
}

// A BSP table created mid-job starts at the clock the servers still know the members of: they
// forget a clock's records once every BSP table applied it, so a table starting at clock 0
// could never complete one (its pulls waited forever).
TEST_F(ElasticBspTest, ABspTableCreatedMidJobAppliesItsClocks) {
  for (int c = 0; c < 3; ++c) {
    Push(0, 1.0f);
    Push(1, 1.0f);
    ASSERT_TRUE(Clock(0, {0, 1}).ok());
    ASSERT_TRUE(Clock(1, {0, 1}).ok());
  }
  ASSERT_EQ(Pull(0).size(), keys_.size());  // clock 2 applied on both servers
  OptimizerSpec sgd;
  sgd.lr = 1.0f;
  CreateEverywhere(Sparse(2, 1, Consistency::kBsp, sgd));
  auto pull2 = [&](int trainer) {
    std::vector<float> out(keys_.size());
    PsTicket p = clients_[trainer]->Pull(2, keys_, out.data());
    Status s = clients_[trainer]->Wait(p);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  };
  auto push2 = [&](int trainer, float g) {
    const std::vector<float> grads(keys_.size(), g);
    PsTicket p = clients_[trainer]->Push(2, keys_, grads.data());
    ASSERT_TRUE(clients_[trainer]->Wait(p).ok());
  };
  const std::vector<float> w0 = pull2(0);
  ASSERT_NO_FATAL_FAILURE(push2(0, 2.0f));
  ASSERT_NO_FATAL_FAILURE(push2(1, 4.0f));
  ASSERT_TRUE(Clock(0, {0, 1}).ok());
  ASSERT_TRUE(Clock(1, {0, 1}).ok());
  ExpectMinus(pull2(0), w0, 3.0f);  // (2 + 4) / 2, applied at clock 3
}

// The same with no BSP table before it: the servers keep the records of a clock some trainers
// already stated (they used to forget every record when no BSP table held one), and the table
// starts at the clock every live trainer finished, so that clock completes with the last one.
class ElasticLateBspTest : public PsTest {
 protected:
  void SetUp() override {
    cluster_.elastic = true;
    Start();
  }
};

TEST_F(ElasticLateBspTest, TheFirstBspTableCompletesTheClockInProgress) {
  for (int c = 0; c < 2; ++c) {
    for (int t = 0; t < 2; ++t) {
      clients_[t]->set_members({0, 1});
      ASSERT_TRUE(clients_[t]->Clock().ok());
    }
  }
  ASSERT_TRUE(clients_[0]->Clock().ok());  // trainer 0 finished clock 2, trainer 1 not yet
  OptimizerSpec sgd;
  sgd.lr = 1.0f;
  CreateEverywhere(Sparse(1, 1, Consistency::kBsp, sgd));
  std::vector<uint64_t> keys;  // one key on each server
  for (uint64_t key = 0; keys.size() < 2; ++key) {
    if (SparseServer(key, kServers) == static_cast<uint32_t>(keys.size())) keys.push_back(key);
  }
  std::vector<float> w0(keys.size());
  PsTicket first = clients_[1]->Pull(1, keys, w0.data());  // trainer 1, at clock 2: no wait
  ASSERT_TRUE(clients_[1]->Wait(first).ok());
  const std::vector<float> grads(keys.size(), 4.0f);
  PsTicket push = clients_[1]->Push(1, keys, grads.data());
  ASSERT_TRUE(clients_[1]->Wait(push).ok());
  std::vector<float> w1(keys.size());
  PsTicket waiting = clients_[0]->Pull(1, keys, w1.data());  // trainer 0, at clock 3: waits
  ASSERT_TRUE(clients_[1]->Clock().ok());
  Status s = clients_[0]->Wait(waiting);
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_NEAR(w1[i], w0[i] - 2.0f, 1e-6) << "key " << keys[i];  // 4 / 2
}

}  // namespace
}  // namespace strata
