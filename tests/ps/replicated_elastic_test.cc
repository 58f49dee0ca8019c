// replicated_elastic_test.cc: servers joining and leaving a replicated elastic job (ps/replication.h's
// ring over the layout), servers and a trainer as threads in one process: a joined server's shard
// gets a backup (server 0's copy moves to it) and the shard before it in the ring is backed up on
// the joined server; either survives its holder's death with every push applied once; after a
// leave the ring closes again and the rows that came back are in the backups; a server that took
// another's shard over holds the layout where it is until the shard's own server, started again,
// takes it back (fail-back), after which servers may join again.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/ps/elastic_fixture.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using testing::kTable;
using testing::WaitFor;

class ReplicatedElasticTest : public testing::ElasticPsTest {
 protected:
  ReplicatedElasticTest() { options_.replication = Replication::kBackup; }

  static std::vector<uint64_t> Keys() {
    std::vector<uint64_t> keys(600);
    for (uint64_t k = 0; k < keys.size(); ++k) keys[k] = k * 7919 + 3;
    return keys;
  }
  // Pushes +1 to every key `times` times.
  void PushTimes(const std::vector<uint64_t>& keys, int times) {
    for (int i = 0; i < times; ++i) {
      const Status s = Push(keys);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
  }
  void ExpectApplied(const std::vector<uint64_t>& keys, float times) {
    const std::vector<float> applied = Applied(keys);
    for (size_t i = 0; i < keys.size(); ++i) ASSERT_EQ(applied[i], times) << "key " << keys[i];
  }
  // Server `server`'s copy backs up `shard` and holds it.
  bool Backs(int server, uint32_t shard) {
    const nlohmann::json j = Stats(server);
    return j.contains("backup") && j["backup"]["shard"] == shard && j["backup"]["role"] == "backup";
  }
  // A third server joins (servers_[2], node nodes_[3]) and the ring 0 -> 1 -> 2 -> 0 is backed up.
  void JoinThird() {
    ASSERT_TRUE(AddServer().ok());
    servers_[2]->Joined();
    ASSERT_TRUE(WaitFor([&] { return Backs(0, 2) && Backs(1, 0) && Backs(2, 1); }, Millis(20000)))
        << Stats(0).dump() << "\n" << Stats(1).dump() << "\n" << Stats(2).dump();
  }
  // Stops node `node`'s server as if it died and waits for `heir`'s copy to serve its shard;
  // every key still holds the `applied` pushes, and the next push is applied once.
  void KillAndExpectNothingLost(int node, int heir, const std::vector<uint64_t>& keys, float applied) {
    nodes_[node]->StopWithoutLeaving();
    ASSERT_TRUE(WaitFor([&] { return Stats(heir)["backup"]["role"] == "serving"; }, Millis(20000)))
        << Stats(heir).dump();
    ExpectApplied(keys, applied);
    PushTimes(keys, 1);
    ExpectApplied(keys, applied + 1);
  }
};

// The joined server's own shard is backed up on server 0 (whose copy moved from shard 1 to
// it): after the joined server dies, server 0 serves its keys with every push applied once.
TEST_F(ReplicatedElasticTest, AJoinedServersShardIsBackedUpAndOutlivesIt) {
  const std::vector<uint64_t> keys = Keys();
  PushTimes(keys, 3);
  ASSERT_NO_FATAL_FAILURE(JoinThird());
  PushTimes(keys, 2);  // the new owner's pushes, forwarded to the new backups
  ExpectApplied(keys, 5);
  EXPECT_GT(Stats(2)["forwarded"].get<uint64_t>(), 0u) << Stats(2).dump();
  ASSERT_NO_FATAL_FAILURE(KillAndExpectNothingLost(3, 0, keys, 5));
}

// Shard 1's backup moved from server 0 to the joined server: after server 1 dies, the joined
// server serves shard 1 from its copy. A server serving another's shard can neither leave nor
// let a server join.
TEST_F(ReplicatedElasticTest, TheShardBeforeAJoinedServerIsBackedUpOnItAndATakenOverShardHoldsTheLayout) {
  const std::vector<uint64_t> keys = Keys();
  PushTimes(keys, 2);
  ASSERT_NO_FATAL_FAILURE(JoinThird());
  PushTimes(keys, 2);
  ASSERT_NO_FATAL_FAILURE(KillAndExpectNothingLost(1, 2, keys, 4));
  const Status left = servers_[2]->HandOver(Millis(5000));
  EXPECT_EQ(left.code(), StatusCode::kFailedPrecondition) << left.ToString();
  EXPECT_NE(left.message().find("serves shard 1, which it took over"), std::string::npos) << left.ToString();
  ExpectApplied(keys, 5);
}

// After the joined server leaves, the ring closes (0 -> 1 -> 0): server 0's copy moves back to
// shard 1, and each first server's backup gets a fresh copy holding the rows that came back. Then
// either first server may die and nothing acknowledged is lost.
TEST_F(ReplicatedElasticTest, AfterALeaveTheRingClosesAndTheRowsThatCameBackAreBackedUp) {
  const std::vector<uint64_t> keys = Keys();
  PushTimes(keys, 2);
  ASSERT_NO_FATAL_FAILURE(JoinThird());
  PushTimes(keys, 3);
  const uint64_t copied = Stats(0)["transferred_rows"].get<uint64_t>();
  ASSERT_TRUE(servers_[2]->HandOver(Millis(10000)).ok());
  // A trainer whose view is behind sends shard 2's requests to its old backup, server 0, which
  // backs up shard 1 now: refused as not served there (Unavailable: the trainer looks again and
  // finds the keys on the first servers), not as a bad request.
  {
    Node& trainer = *nodes_[2];
    const PeerId peer = *trainer.rpc().Connect("mem://server0");
    Message m;
    m.set_shard(2);
    auto p = m.builder().getBody().initPush();
    p.setTable(kTable);
    const uint64_t key = keys[0];
    m.AddPayload(DType::kI64, {1}, Buffer::Copy(&key, sizeof(key)));
    const std::vector<float> ones(testing::kDim, 1.0f);
    m.AddPayload(DType::kF32, {1, testing::kDim}, Buffer::Copy(ones.data(), ones.size() * sizeof(float)));
    const Status s = trainer.rpc().CallAndWait(peer, std::move(m), Millis(5000)).status();
    EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
    EXPECT_NE(s.message().find(kNotServing), std::string::npos) << s.ToString();
  }
  // Server 0's fresh copy of shard 0 acknowledged whole by server 1, server 0's copy of shard 1 in.
  ASSERT_TRUE(WaitFor([&] {
    return Stats(0)["transferred_rows"].get<uint64_t>() > copied && Backs(0, 1) && Backs(1, 0);
  }, Millis(20000))) << Stats(0).dump() << "\n" << Stats(1).dump();
  PushTimes(keys, 1);
  ExpectApplied(keys, 6);
  ASSERT_NO_FATAL_FAILURE(KillAndExpectNothingLost(0, 1, keys, 6));
}

// Fail-back: server 1 killed, its shard served by server 0's copy, then started again: it copies
// its shard, takes it back (server 0's copy hands it over and backs it up again), and from then
// on a server may join; the joined server's copy of shard 1 outlives server 1's second death.
TEST_F(ReplicatedElasticTest, ARestartedServerTakesItsShardBackAndThenAServerMayJoin) {
  const std::vector<uint64_t> keys = Keys();
  PushTimes(keys, 3);
  servers_[1].reset();
  nodes_[1]->StopWithoutLeaving();
  ASSERT_TRUE(WaitFor([&] { return Stats(0)["backup"]["role"] == "serving"; }, Millis(20000))) << Stats(0).dump();
  PushTimes(keys, 2);  // shard 1 on server 0 alone
  nodes_[1] = MakeNode(Role::kServer, "server1", 1);
  servers_[1] = std::make_unique<PsServer>(*nodes_[1], options_);
  ASSERT_TRUE(nodes_[1]->Join().ok());
  servers_[1]->Joined();
  ASSERT_TRUE(WaitFor([&] {
    const nlohmann::json j = Stats(1);
    return j["role"] == "serving" && j["fail_backs"] == 1 && Backs(0, 1) && Backs(1, 0);
  }, Millis(30000))) << Stats(0).dump() << "\n" << Stats(1).dump();
  EXPECT_EQ(Stats(0)["backup"]["fail_backs"].get<uint64_t>(), 1u) << Stats(0).dump();
  ExpectApplied(keys, 5);
  PushTimes(keys, 1);  // served by server 1 again, forwarded to server 0's copy
  ExpectApplied(keys, 6);
  ASSERT_NO_FATAL_FAILURE(JoinThird());
  PushTimes(keys, 1);
  ASSERT_NO_FATAL_FAILURE(KillAndExpectNothingLost(1, 2, keys, 7));
}

}  // namespace
}  // namespace strata
