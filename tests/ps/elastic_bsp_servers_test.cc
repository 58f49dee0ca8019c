// elastic_bsp_servers_test.cc: servers joining and leaving an elastic BSP job (cluster.elastic,
// sync.consistency bsp), with servers and trainers as threads over the in-process transport.
// A clock's pushes that wait on a server when its rows move (summed after a trainer's clock
// message, or staged before it) move with the rows and are applied once, as the clock's mean,
// by the rows' new server: a joining server completes the clock from the older servers' record
// of it and the clock messages it receives itself (a trainer that does not count it yet is
// refused as moved and clocks again); a server taking a leaving one's rows applies at once the
// accumulations of a clock it already applied. Every value is checked against the arithmetic.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "tests/ps/ps_fixture.h"

namespace strata {
namespace {

class ElasticBspServersTest : public PsTest {
 protected:
  void SetUp() override {
    cluster_.elastic = true;
    cluster_.heartbeat_timeout_ms = 10000;
    Start();
    OptimizerSpec sgd;
    sgd.lr = 1.0f;
    CreateEverywhere(Sparse(1, 1, Consistency::kBsp, sgd));
    for (uint64_t key = 0; key < 96; ++key) keys_.push_back(key);
  }
  std::vector<float> Pull(int trainer) {
    std::vector<float> out(keys_.size());
    PsTicket p = clients_[trainer]->Pull(1, keys_, out.data());
    Status s = clients_[trainer]->Wait(p);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  }
  void Push(int trainer, float g) {
    const std::vector<float> grads(keys_.size(), g);
    PsTicket p = clients_[trainer]->Push(1, keys_, grads.data());
    Status s = clients_[trainer]->Wait(p);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  Status Clock(int trainer) {
    clients_[trainer]->set_members({0, 1});
    return clients_[trainer]->Clock();
  }
  // A clock message of `clock` from trainer `trainer` to one server only, stating `servers`.
  Status RawClock(int trainer, const std::string& to, int64_t clock, uint32_t servers) {
    Node& node = *trainer_nodes_[trainer];
    STRATA_ASSIGN_OR_RETURN(PeerId peer, node.rpc().Connect(to));
    Message m;
    auto c = m.builder().getBody().initClock();
    c.setClock(clock);
    c.setServers(servers);
    c.setMembers(2);
    auto ranks = c.initMemberRanks(2);
    ranks.set(0, 0);
    ranks.set(1, 1);
    return node.rpc().CallAndWait(peer, std::move(m), Millis(5000)).status();
  }
  // A third server joining the running job: it takes its rows from the first two.
  Status AddServer() {
    server_nodes_.push_back(testing::MakeMemNode(cluster_, &hub_, Role::kServer, "server2", -1, /*join=*/true));
    ServerOptions options;
    options.stats_interval_ms = 0;
    servers_.push_back(std::make_unique<PsServer>(*server_nodes_.back(), options));
    servers_.back()->ExpectTakeOver();
    STRATA_RETURN_IF_ERROR(server_nodes_.back()->Join());
    return servers_.back()->TakeOver(Millis(10000));
  }
  nlohmann::json Stats(int server) { return nlohmann::json::parse(servers_[server]->StatsJson()); }
  void ExpectMinus(const std::vector<float>& got, const std::vector<float>& before, float mean) {
    for (size_t i = 0; i < keys_.size(); ++i) EXPECT_NEAR(got[i], before[i] - mean, 1e-6) << "key " << keys_[i];
  }
  // Clock 1, once the servers changed: both trainers push (5 and 7) and clock; trainer `puller`
  // reads every key 6 below `before`.
  void NextClockTakesTheMean(const std::vector<float>& before, int puller) {
    Push(0, 5.0f);
    Push(1, 7.0f);
    ASSERT_TRUE(Clock(0).ok());
    ASSERT_TRUE(Clock(1).ok());
    ExpectMinus(Pull(puller), before, 6.0f);
  }
  std::vector<uint64_t> keys_;
};

TEST_F(ElasticBspServersTest, AServerJoiningMidClockTakesItsPushesAndAppliesTheClockOnce) {
  const std::vector<float> w0 = Pull(0);
  // Clock 0: trainer 0 pushed and clocked (summed on the servers), trainer 1 pushed (staged
  // there) but has not clocked. Then a server joins: both kinds move with its rows.
  Push(0, 1.0f);
  ASSERT_TRUE(Clock(0).ok());
  Push(1, 3.0f);
  Status joined = AddServer();
  ASSERT_TRUE(joined.ok()) << joined.ToString();
  const uint64_t moved = Stats(0)["bsp_moved_out"].get<uint64_t>() + Stats(1)["bsp_moved_out"].get<uint64_t>();
  EXPECT_GT(Stats(2)["rows_moved_in"].get<uint64_t>(), 0u);
  EXPECT_EQ(Stats(2)["bsp_moved_in"].get<uint64_t>(), moved);
  EXPECT_EQ(moved, 2 * Stats(2)["rows_moved_in"].get<uint64_t>());  // one of each trainer per key moved

  // Trainer 1's clock completes clock 0 everywhere, the joined server included.
  ASSERT_TRUE(Clock(1).ok());
  const std::vector<float> w1 = Pull(0);
  ExpectMinus(w1, w0, 2.0f);  // (1 + 3) / 2, once for every key
  ExpectMinus(Pull(1), w0, 2.0f);
  ASSERT_NO_FATAL_FAILURE(NextClockTakesTheMean(w1, 0));  // on three servers as on two

  // A clock message that does not count the joined server is refused as moved, changing
  // nothing; counting it, it is taken.
  Status stale = RawClock(0, "mem://server0", 2, 2);
  EXPECT_EQ(stale.code(), StatusCode::kFailedPrecondition) << stale.ToString();
  EXPECT_NE(stale.message().find(kLayoutMoved), std::string::npos) << stale.ToString();
  EXPECT_NE(stale.message().find("counts 2 servers (clock.servers)"), std::string::npos) << stale.ToString();
  EXPECT_TRUE(RawClock(0, "mem://server0", 2, 3).ok());
  EXPECT_EQ(Stats(2)["dead_trainer_keys_dropped"], 0);
}

TEST_F(ElasticBspServersTest, AServerLeavingMidClockHandsItsPushesToTheServerThatTakesItsRows) {
  const std::vector<float> w0 = Pull(0);
  Push(0, 1.0f);
  ASSERT_TRUE(Clock(0).ok());
  Push(1, 3.0f);
  Status left = servers_[1]->HandOver(Millis(10000));
  ASSERT_TRUE(left.ok()) << left.ToString();
  const uint64_t moved = Stats(1)["bsp_moved_out"];
  EXPECT_EQ(moved, 2 * Stats(1)["rows_moved_out"].get<uint64_t>());
  EXPECT_EQ(Stats(0)["bsp_moved_in"], moved);
  EXPECT_EQ(Stats(0)["bsp_applied_late"], 0);
  ASSERT_TRUE(Clock(1).ok());
  const std::vector<float> w1 = Pull(0);
  ExpectMinus(w1, w0, 2.0f);
  ASSERT_NO_FATAL_FAILURE(NextClockTakesTheMean(w1, 1));
}

TEST_F(ElasticBspServersTest, PushesOfAClockTheTakingServerAppliedAlreadyAreAppliedWithItsMean) {
  // And an Adam table: Adam does not add up, so a key's moved pushes of one clock (trainer 0's
  // summed, trainer 1's staged) must be one update there, not two.
  OptimizerSpec adam;
  adam.kind = OptimizerKind::kAdam;
  adam.lr = 0.1f;
  CreateEverywhere(Sparse(2, 1, Consistency::kBsp, adam));
  auto adam_io = [&](int trainer, float g, std::vector<float>* out) {
    const std::vector<float> grads(keys_.size(), g);
    PsTicket p = out ? clients_[trainer]->Pull(2, keys_, out->data()) : clients_[trainer]->Push(2, keys_, grads.data());
    ASSERT_TRUE(clients_[trainer]->Wait(p).ok());
  };
  std::vector<float> a0(keys_.size()), a1(keys_.size());
  ASSERT_NO_FATAL_FAILURE(adam_io(0, 0.0f, &a0));
  const std::vector<float> w0 = Pull(0);
  Push(0, 1.0f);
  ASSERT_NO_FATAL_FAILURE(adam_io(0, 1.0f, nullptr));
  ASSERT_TRUE(Clock(0).ok());
  Push(1, 3.0f);
  ASSERT_NO_FATAL_FAILURE(adam_io(1, 3.0f, nullptr));
  // Trainer 1's clock message reaches server 0 only: server 0 applies clock 0, server 1 still
  // holds its keys' pushes of it when it leaves.
  ASSERT_TRUE(RawClock(1, "mem://server0", 0, 0).ok());
  Status left = servers_[1]->HandOver(Millis(10000));
  ASSERT_TRUE(left.ok()) << left.ToString();
  const uint64_t moved = Stats(1)["bsp_moved_out"];
  EXPECT_GT(moved, 0u);
  EXPECT_EQ(Stats(0)["bsp_applied_late"], moved);
  ASSERT_TRUE(Clock(1).ok());  // its client's own clock 0 (server 0 counts it once)
  const std::vector<float> w1 = Pull(0);
  ExpectMinus(w1, w0, 2.0f);
  // Adam's first step on the mean gradient 2 moves each weight by lr * 2 / (2 + eps): 0.1.
  ASSERT_NO_FATAL_FAILURE(adam_io(0, 0.0f, &a1));
  for (size_t i = 0; i < keys_.size(); ++i) EXPECT_NEAR(a1[i], a0[i] - 0.1f, 1e-5) << "key " << keys_[i];
  ASSERT_NO_FATAL_FAILURE(NextClockTakesTheMean(w1, 1));
}

}  // namespace
}  // namespace strata
