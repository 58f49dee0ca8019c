// replication_test.cc: primary-backup replication of the servers' shards (ps/replication.h) as
// threads in one process: where a trainer sends a shard under a view, a primary's forwards leave
// its backup with the same rows and optimizer state bit for bit under concurrent pushes (the
// backup applies them in the primary's order), clocks reach the backup, a retried push id is a
// duplicate on the backup too, and requests that do not belong are refused naming why. The
// take-over after a kill -9 and the state transfer to a restarted server run with real processes
// in tests/integration/replication_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <iostream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "cluster/scheduler.h"
#include "common/inproc_transport.h"
#include "mem_node.h"
#include "test_util.h"
#include "offload/memory_row_store.h"
#include "tests/ps/memory_store_wrapper.h"
#include "ps/client.h"
#include "ps/replication.h"
#include "ps/server.h"

namespace strata {
namespace {

ClusterView ViewOf(std::vector<std::pair<bool, uint32_t>> servers) {  // (alive, incarnation) by rank
  ClusterView v;
  for (size_t r = 0; r < servers.size(); ++r) {
    NodeInfo n;
    n.id = static_cast<uint32_t>(r + 1);
    n.role = Role::kServer;
    n.rank = static_cast<int>(r);
    n.address = "mem://server" + std::to_string(r);
    n.alive = servers[r].first;
    n.incarnation = servers[r].second;
    v.nodes.push_back(n);
  }
  return v;
}

TEST(NextHolderTest, TheOtherHolderWhenTheCurrentOneIsDownOrRefuses) {
  const ClusterView all = ViewOf({{true, 0}, {true, 0}, {true, 0}});
  const PsLayout three = FixedLayout(3);
  EXPECT_EQ(BackupRank(2, three), 0u);
  EXPECT_EQ(BackedUpShard(0, three), 2u);
  EXPECT_EQ(OtherHolder(2, 2, three), 0u);
  EXPECT_EQ(OtherHolder(2, 0, three), 2u);
  for (uint32_t s = 0; s < 3; ++s) EXPECT_EQ(NextHolder(all, three, s, s, false, Replication::kBackup), s);
  // Shard 0's server refused it (it holds the backup, or waits for a copy): its other holder.
  EXPECT_EQ(NextHolder(all, three, 0, 0, true, Replication::kBackup), 1u);
  EXPECT_EQ(NextHolder(all, three, 0, 1, true, Replication::kBackup), 0u);
  const ClusterView dead0 = ViewOf({{false, 0}, {true, 0}, {true, 0}});
  EXPECT_EQ(NextHolder(dead0, three, 0, 0, false, Replication::kBackup), 1u);
  EXPECT_EQ(NextHolder(dead0, three, 2, 2, false, Replication::kBackup), 2u);
  // Both holders down: stay (the retry waits for one to come back).
  const ClusterView dead01 = ViewOf({{false, 0}, {false, 0}, {true, 0}});
  EXPECT_EQ(NextHolder(dead01, three, 0, 1, false, Replication::kBackup), 1u);
  // A restarted server is up: it is tried, and refuses until it serves the shard again.
  const ClusterView back0 = ViewOf({{true, 1}, {false, 0}, {true, 0}});
  EXPECT_EQ(NextHolder(back0, three, 0, 1, false, Replication::kBackup), 0u);
  // Without replication a shard always goes to its own rank (which reloads its store on restart).
  EXPECT_EQ(NextHolder(dead0, three, 0, 0, true, Replication::kNone), 0u);
}

// Elastic servers: the ring runs over the ranks still in the layout.
TEST(NextHolderTest, TheRingFollowsServersJoiningAndLeaving) {
  PsLayout l = FixedLayout(2);
  l.servers = 4;  // servers 2 and 3 joined
  EXPECT_EQ(BackupRank(1, l), 2u);
  EXPECT_EQ(BackupRank(3, l), 0u);
  EXPECT_EQ(BackedUpShard(0, l), 3u);
  EXPECT_EQ(BackedUpShard(2, l), 1u);
  l.Leave(2);  // and 2 left again
  EXPECT_EQ(RingSize(l), 3u);
  EXPECT_EQ(BackupRank(1, l), 3u);
  EXPECT_EQ(BackedUpShard(3, l), 1u);
  EXPECT_EQ(OtherHolder(1, 1, l), 3u);
  EXPECT_EQ(OtherHolder(1, 3, l), 1u);
  l.Leave(3);
  l.Leave(1);  // server 0 alone: its own backup, which NextHolder never picks
  EXPECT_EQ(RingSize(l), 1u);
  EXPECT_EQ(BackupRank(0, l), 0u);
  const ClusterView up = ViewOf({{false, 0}, {true, 0}, {true, 0}, {true, 0}});
  EXPECT_EQ(NextHolder(up, l, 0, 0, false, Replication::kBackup), 0u);
  // A holder that left is skipped like a dead one.
  PsLayout three = FixedLayout(2);
  three.servers = 3;
  ClusterView left2 = ViewOf({{true, 0}, {true, 0}, {true, 0}});
  left2.nodes[2].left = true;
  EXPECT_EQ(NextHolder(left2, three, 1, 2, false, Replication::kBackup), 1u);
}

// Every store a server makes, in order (a front's own tables and its backup copy's).
struct StoreLog {
  std::mutex mu;
  std::vector<MemoryRowStore*> stores;
  StoreFactory Factory() {
    return [this](const TableSpec& spec) -> Result<std::unique_ptr<RowStore>> {
      auto s = std::make_unique<MemoryRowStore>(spec.RecordWidth());
      std::lock_guard lock(mu);
      stores.push_back(s.get());
      return std::unique_ptr<RowStore>(std::move(s));
    };
  }
};

// key -> record, of a store.
std::map<uint64_t, std::vector<float>> Contents(RowStore& store) {
  std::map<uint64_t, std::vector<float>> out;
  EXPECT_TRUE(store.Scan([&](uint64_t key, std::span<const float> r) {
                     out[key].assign(r.begin(), r.end());
                     return Status::OK();
                   }).ok());
  return out;
}

class ReplicationTest : public ::testing::Test {
 protected:
  static constexpr int kServers = 2, kTrainers = 2;

  void SetUp() override {
    cluster_.scheduler = "mem://scheduler";
    cluster_.servers = kServers;
    cluster_.trainers = kTrainers;
    cluster_.heartbeat_interval_ms = 20;
    cluster_.heartbeat_timeout_ms = 5000;
    scheduler_ = std::make_unique<Scheduler>(SchedulerOptions{cluster_}, std::make_unique<InprocTransport>(&hub_));
    ASSERT_TRUE(scheduler_->Start("mem://scheduler").ok());
    std::vector<std::future<Status>> joins;
    for (int s = 0; s < kServers; ++s) {
      server_nodes_.push_back(MakeNode(Role::kServer, "server" + std::to_string(s), s));
      servers_.push_back(std::make_unique<PsServer>(*server_nodes_.back(), Options(),
                                                    s == 1 && server1_stores_ ? server1_stores_ : logs_[s].Factory()));
    }
    for (int t = 0; t < kTrainers; ++t) trainer_nodes_.push_back(MakeNode(Role::kTrainer, "trainer" + std::to_string(t), t));
    for (auto& n : server_nodes_) joins.push_back(std::async(std::launch::async, [&n] { return n->Join(); }));
    for (auto& n : trainer_nodes_) joins.push_back(std::async(std::launch::async, [&n] { return n->Join(); }));
    for (auto& j : joins) ASSERT_TRUE(j.get().ok());
    for (auto& n : trainer_nodes_) {
      clients_.push_back(std::make_unique<PsClient>(*n, Millis(10000), Replication::kBackup));
    }
  }

  ServerOptions Options() const {
    ServerOptions o;
    o.stats_interval_ms = 0;
    o.replication = Replication::kBackup;
    o.migrate_chunk_mb = chunk_mb_;
    return o;
  }

  std::unique_ptr<Node> MakeNode(Role role, const std::string& name, int rank) {
    return testing::MakeMemNode(cluster_, &hub_, role, name, rank);
  }

  void TearDown() override {
    clients_.clear();
    for (auto& n : trainer_nodes_) (void)n->Leave();
    servers_.clear();
    trainer_nodes_.clear();
    server_nodes_.clear();
    scheduler_.reset();
  }

  nlohmann::json Stats(int server) {
    auto s = clients_[0]->ServerStats(static_cast<uint32_t>(server));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return nlohmann::json::parse(s.ok() ? *s : "{}");
  }

  // Server `s` gone without leaving (a kill -9), until the trainers see it dead.
  void Kill(int s) {
    servers_[s].reset();
    server_nodes_[s]->StopWithoutLeaving();
    server_nodes_[s].reset();
    ASSERT_TRUE(testing::WaitUntilServerDead(*trainer_nodes_[0], s, Millis(30000)));
  }
  // Until server 0 serves its shard again (the fail-back after its restart) and backs up the other.
  void WaitForServer0Back() {
    nlohmann::json j;
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          j = Stats(0);
          return j.value("role", "") == "serving" && j.contains("backup") && j["backup"].value("role", "") == "backup";
        },
        Millis(30000)))
        << j.dump();
  }

  // Every float of the ledger `keys` (LedgerTable) read back: minus the `pushes` of 1 each.
  void ExpectLedger(const std::vector<uint64_t>& keys, int pushes) {
    std::vector<float> values(keys.size() * 4);
    PsTicket pull = clients_[0]->Pull(1, keys, values.data());
    ASSERT_TRUE(clients_[0]->Wait(pull).ok());
    for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(values[i], -static_cast<float>(pushes)) << "float " << i;
  }

  // A push written by hand from trainer 0 to server `to`: keys `ks` (gradient 1), push id `id`,
  // and the envelope's shard and origin fields.
  Status RawPush(int to, std::vector<uint64_t> ks, uint64_t id, int32_t shard = -1,
                 uint32_t origin = kUnassignedNode) {
    Node& node = *trainer_nodes_[0];
    const PeerId peer = *node.rpc().Connect("mem://server" + std::to_string(to));
    Message m;
    m.set_shard(shard);
    m.set_origin(origin);
    auto b = m.builder().getBody().initPush();
    b.setTable(1);
    b.setPushId(id);
    const auto n = static_cast<int64_t>(ks.size());
    m.AddPayload(DType::kI64, {n}, Buffer::Take(std::move(ks)));
    m.AddPayload(DType::kF32, {n, 4}, Buffer::Take(std::vector<float>(static_cast<size_t>(n) * 4, 1.0f)));
    return node.rpc().CallAndWait(peer, std::move(m)).status();
  }

  double chunk_mb_ = 16;  // the servers' migrate_chunk_mb
  StoreFactory server1_stores_;  // set: server 1's stores (else a MemoryRowStore each)
  InprocHub hub_;
  ClusterOptions cluster_;
  StoreLog logs_[kServers];
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Node>> server_nodes_, trainer_nodes_;
  std::vector<std::unique_ptr<PsServer>> servers_;
  std::vector<std::unique_ptr<PsClient>> clients_;
};

TableSpec AdamTable(Consistency c) {
  TableSpec t;
  t.id = 1;
  t.name = "emb";
  t.kind = TableKind::kSparse;
  t.dim = 4;
  t.optimizer.kind = OptimizerKind::kAdam;
  t.optimizer.lr = 0.1f;
  t.init = InitSpec::Of(InitKind::kNormal, 0.0f, 0.1f, 5);
  t.consistency = c;
  if (c == Consistency::kSsp) t.staleness = 1;
  return t;
}

// SGD, lr 1, from zeros: a key's value is minus the pushes applied to it.
TableSpec LedgerTable() {
  TableSpec spec;
  spec.id = 1;
  spec.name = "ledger";
  spec.kind = TableKind::kSparse;
  spec.dim = 4;
  spec.optimizer.lr = 1.0f;
  return spec;
}

// A MemoryRowStore whose update number `fail_at` (counted from 1 in `*updates`, which several
// stores may share) fails, as a full disk would.
class FailingStore final : public testing::MemoryStoreWrapper {
 public:
  FailingStore(int width, std::atomic<int>* updates, int fail_at)
      : MemoryStoreWrapper(width), updates_(updates), fail_at_(fail_at) {}
  Status Update(std::span<const uint64_t> keys, const Init& init, const Visit& visit) override {
    if (++*updates_ == fail_at_) return Status::ResourceExhausted("no space left on device (the test's store)");
    return inner_.Update(keys, init, visit);
  }

 private:
  std::atomic<int>* updates_;
  const int fail_at_;
};

// Adam does not commute: a backup that applied two trainers' pushes of a key in another order
// than its primary would hold other bits. Each backup must equal its primary exactly.
TEST_F(ReplicationTest, TheBackupHoldsThePrimarysRowsAndOptimizerStateBitForBit) {
  const TableSpec spec = AdamTable(Consistency::kSsp);
  for (auto& c : clients_) ASSERT_TRUE(c->CreateTable(spec).ok());
  std::vector<uint64_t> keys(24);
  for (uint64_t k = 0; k < keys.size(); ++k) keys[k] = k * 977;
  std::vector<std::thread> threads;
  for (int t = 0; t < kTrainers; ++t) {
    threads.emplace_back([&, t] {
      PsClient& c = *clients_[t];
      for (int step = 0; step < 20; ++step) {
        std::vector<float> g(keys.size() * 4);
        for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.3f * static_cast<float>(i) + 1.7f * step + t);
        std::vector<float> out(keys.size() * 4);
        std::vector<PsTicket> inflight;
        for (int k = 0; k < 3; ++k) inflight.push_back(c.Push(1, keys, g.data()));
        inflight.push_back(c.PushPull(1, keys, g.data(), out.data()));
        for (auto& tk : inflight) ASSERT_TRUE(c.Wait(tk).ok());
        ASSERT_TRUE(c.Clock().ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  // Server s's stores: its own shard's table, and the backup copy of shard s - 1's.
  ASSERT_EQ(logs_[0].stores.size(), 2u);
  ASSERT_EQ(logs_[1].stores.size(), 2u);
  for (int shard = 0; shard < kServers; ++shard) {
    const int backup = (shard + 1) % kServers;
    std::map<uint64_t, std::vector<float>> primary, copy;
    for (MemoryRowStore* s : logs_[shard].stores) {
      auto c = Contents(*s);
      if (!c.empty() && SparseServer(c.begin()->first, kServers) == static_cast<uint32_t>(shard)) primary = c;
    }
    for (MemoryRowStore* s : logs_[backup].stores) {
      auto c = Contents(*s);
      if (!c.empty() && SparseServer(c.begin()->first, kServers) == static_cast<uint32_t>(shard)) copy = c;
    }
    ASSERT_FALSE(primary.empty()) << "shard " << shard;
    EXPECT_EQ(primary, copy) << "shard " << shard << ": the backup's records differ from the primary's";
  }
  for (int s = 0; s < kServers; ++s) {
    nlohmann::json j = Stats(s);
    // Per shard: createTable x2, 4 pushes x 20 steps x 2 trainers, 20 clocks x 2 trainers.
    EXPECT_EQ(j["forwarded"].get<uint64_t>(), 2u + 160u + 40u) << j.dump();
    EXPECT_GT(j["replicated_bytes"].get<uint64_t>(), 0u);
    ASSERT_TRUE(j.contains("backup")) << j.dump();
    EXPECT_EQ(j["role"], "serving") << j.dump();
    EXPECT_EQ(j["backup"]["role"], "backup") << j.dump();
    EXPECT_EQ(j["backup"]["trainer_clocks"], j["trainer_clocks"]) << "the backup's clocks follow the primary's";
  }
}

// A push id the primary forwarded is remembered by the backup under the trainer's node id: the
// retry (forwarded again, in order) is a duplicate there too.
TEST_F(ReplicationTest, ARetriedPushIdIsADuplicateOnTheBackup) {
  for (auto& c : clients_) ASSERT_TRUE(c->CreateTable(AdamTable(Consistency::kAsp)).ok());
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; keys.size() < 3; ++k) {
    if (SparseServer(k, kServers) == 0) keys.push_back(k);
  }
  const uint64_t id = (static_cast<uint64_t>(trainer_nodes_[0]->id()) << 40) | 12345;
  ASSERT_TRUE(RawPush(0, keys, id).ok());
  ASSERT_TRUE(RawPush(0, keys, id).ok());
  nlohmann::json j = Stats(1);
  EXPECT_EQ(j["backup"]["duplicate_pushes"].get<uint64_t>(), 1u) << j.dump();
  EXPECT_EQ(j["backup"]["pushes"].get<uint64_t>(), 1u) << j.dump();
}

TEST_F(ReplicationTest, RequestsThatDoNotBelongAreRefusedNamingWhy) {
  for (auto& c : clients_) ASSERT_TRUE(c->CreateTable(AdamTable(Consistency::kAsp)).ok());
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; keys.size() < 2; ++k) {
    if (SparseServer(k, kServers) == 0) keys.push_back(k);
  }
  // A shard this server neither is nor backs up.
  Status s = RawPush(0, keys, 0, /*shard=*/5);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("shard 5"), std::string::npos) << s.ToString();
  // Shard 0's backup while its primary is alive: not served there.
  s = RawPush(1, keys, 0, /*shard=*/0);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find(std::string(kNotServing) + " 0 (it holds its backup)"), std::string::npos) << s.ToString();
  // A forwarded request from a node that is not the shard's primary (a trainer posing as one).
  s = RawPush(1, keys, 0, /*shard=*/0, /*origin=*/trainer_nodes_[1]->id());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("not that shard's other holder"), std::string::npos) << s.ToString();
  // A forwarded request sent to the shard's serving server by a node that is not its other holder.
  s = RawPush(0, keys, 0, /*shard=*/0, /*origin=*/trainer_nodes_[1]->id());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  // Nothing above changed the backup copy.
  nlohmann::json j = Stats(1);
  EXPECT_EQ(j["backup"]["pushes"].get<uint64_t>(), 0u) << j.dump();
}

// A restarted server whose copy of a shard fails to install (its first store cannot be made: a
// full disk) asks for the copy again, whole; the holder numbers its copies, so the new one starts
// over and the old one's failure drops nothing. The backup it ends up with loses nothing: once
// the holder is killed, it serves every update acknowledged before.
TEST_F(ReplicationTest, ACopyThatFailsToInstallIsAskedForAgainAndItsBackupLosesNothing) {
  for (auto& c : clients_) ASSERT_TRUE(c->CreateTable(LedgerTable()).ok());
  std::vector<uint64_t> keys(200);
  for (uint64_t k = 0; k < keys.size(); ++k) keys[k] = k * 7919;
  const std::vector<float> ones(keys.size() * 4, 1.0f);
  int pushes = 0;
  auto push = [&](int times) {
    for (int i = 0; i < times; ++i, ++pushes) {
      PsTicket t = clients_[0]->Push(1, keys, ones.data());
      ASSERT_TRUE(clients_[0]->Wait(t).ok());
    }
  };
  push(3);
  ASSERT_NO_FATAL_FAILURE(Kill(0));
  push(2);  // server 1 serves shard 0 from its copy

  std::atomic<int> made{0};
  StoreFactory full_disk_once = [&](const TableSpec& t) -> Result<std::unique_ptr<RowStore>> {
    if (made++ == 0) return Status::ResourceExhausted("no space left on device (the test's first store)");
    return std::unique_ptr<RowStore>(std::make_unique<MemoryRowStore>(t.RecordWidth()));
  };
  server_nodes_[0] = MakeNode(Role::kServer, "server0", 0);
  servers_[0] = std::make_unique<PsServer>(*server_nodes_[0], Options(), full_disk_once);
  ASSERT_TRUE(server_nodes_[0]->Join().ok());
  servers_[0]->Joined();
  ASSERT_NO_FATAL_FAILURE(WaitForServer0Back());  // both copies in, and shard 0 taken back (fail-back)
  const nlohmann::json j = Stats(0);
  EXPECT_GE(made.load(), 3) << "the first store failed, then both copies' tables were made";
  EXPECT_EQ(j["copy_asks_again"].get<uint64_t>() + j["backup"]["copy_asks_again"].get<uint64_t>(), 1u) << j.dump();
  push(2);  // forwarded to the new backups

  ASSERT_NO_FATAL_FAILURE(Kill(1));
  ASSERT_NO_FATAL_FAILURE(ExpectLedger(keys, pushes));
}

// A backup that fails to apply a forwarded update (a full disk, once) holds a copy that is not
// the shard's state any more. Its serving holder drops it on the error; it drops the copy too
// and asks for a fresh one, so it never takes the shard over with the updates it missed (it
// used to stay a "backup" three pushes behind, and serve that after the holder's kill).
class DivergedBackupTest : public ReplicationTest {
 protected:
  void SetUp() override {
    // Server 1's stores' 4th update, counted over them all, fails: the test pushes keys of shard
    // 0 only, so every update there is a forward to shard 0's copy.
    server1_stores_ = [this](const TableSpec& t) -> Result<std::unique_ptr<RowStore>> {
      return std::unique_ptr<RowStore>(std::make_unique<FailingStore>(t.RecordWidth(), &updates_, 4));
    };
    ReplicationTest::SetUp();
  }
  std::atomic<int> updates_{0};
};

TEST_F(DivergedBackupTest, ABackupThatFailsAForwardedUpdateAsksForAFreshCopyAndLosesNothing) {
  for (auto& c : clients_) ASSERT_TRUE(c->CreateTable(LedgerTable()).ok());
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; keys.size() < 50; ++k) {
    if (SparseServer(k, kServers) == 0) keys.push_back(k);
  }
  const std::vector<float> ones(keys.size() * 4, 1.0f);
  int pushes = 0;
  auto push = [&](int times) {
    for (int i = 0; i < times; ++i, ++pushes) {
      PsTicket t = clients_[0]->Push(1, keys, ones.data());
      ASSERT_TRUE(clients_[0]->Wait(t).ok());  // applied by server 0, acknowledged with or without a backup
    }
  };
  push(6);  // the 4th fails on server 1's copy of shard 0
  nlohmann::json j;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        j = Stats(1);
        return j["backup"]["role"] == "backup" && Stats(0)["transferred_rows"].get<uint64_t>() > 0;
      },
      Millis(30000)))
      << "server 1's copy of shard 0 is a backup again only after a fresh copy from server 0\n" << j.dump();
  EXPECT_EQ(j["backup"]["diverged_copies"].get<uint64_t>(), 1u) << j.dump();
  push(2);  // forwarded to the fresh copy

  ASSERT_NO_FATAL_FAILURE(Kill(0));  // server 1 takes shard 0 over
  ASSERT_NO_FATAL_FAILURE(ExpectLedger(keys, pushes));
}

// A copy's rows stream: the tables that are not BSP go a chunk at a time behind the head, each
// read when it goes, never more than PsServer::kCopyWindow (2) unacknowledged, while a trainer
// goes on pushing (its updates are forwarded between the chunks). The backups the streams make
// lose nothing: once the other holder is killed, every acknowledged push is there exactly.
class StreamedCopyTest : public ReplicationTest {
 protected:
  void SetUp() override {
    chunk_mb_ = 0.001;  // 1 KiB chunks: about 40 ledger rows each, some 25 per shard
    ReplicationTest::SetUp();
  }

  // Server 0 killed and restarted over `stores` while trainer 1 pushes every ledger key in a
  // loop, until it took its shard back; then server 1 killed: every key must equal minus the
  // pushes acknowledged. Sets the two servers' statistics from before server 1's kill.
  void KillAndRestartWhilePushing(const StoreFactory& stores, nlohmann::json* sender, nlohmann::json* receiver) {
    for (auto& c : clients_) ASSERT_TRUE(c->CreateTable(LedgerTable()).ok());
    std::vector<uint64_t> keys(2000);
    for (uint64_t k = 0; k < keys.size(); ++k) keys[k] = k * 7919;
    const std::vector<float> ones(keys.size() * 4, 1.0f);
    std::atomic<int> pushes{0};
    auto push = [&](int times, int trainer = 0) {
      PsClient& c = *clients_[static_cast<size_t>(trainer)];
      for (int i = 0; i < times; ++i) {
        PsTicket t = c.Push(1, keys, ones.data());
        ASSERT_TRUE(c.Wait(t).ok());
        ++pushes;
      }
    };
    push(3);
    ASSERT_NO_FATAL_FAILURE(Kill(0));
    push(2);  // server 1 serves shard 0 from its copy

    server_nodes_[0] = MakeNode(Role::kServer, "server0", 0);
    servers_[0] = std::make_unique<PsServer>(*server_nodes_[0], Options(), stores);
    ASSERT_TRUE(server_nodes_[0]->Join().ok());
    std::atomic<bool> stop{false};
    std::thread pusher([&] {
      while (!stop) push(1, /*trainer=*/1);  // trainer 0's client asks for the statistics meanwhile
    });
    servers_[0]->Joined();  // asks server 1 for both shards' copies, which stream while the pusher pushes
    ASSERT_NO_FATAL_FAILURE(WaitForServer0Back());
    stop = true;
    pusher.join();
    push(1);  // forwarded to the new backups

    *sender = Stats(1);
    *receiver = Stats(0);
    std::cout << "pushes " << pushes << "; forwards applied between the chunks of the copies: shard 0 "
              << (*receiver)["forwards_while_installing"] << ", shard 1 "
              << (*receiver)["backup"]["forwards_while_installing"] << "\n";
    ASSERT_NO_FATAL_FAILURE(Kill(1));
    ASSERT_NO_FATAL_FAILURE(ExpectLedger(keys, pushes));
  }
};

TEST_F(StreamedCopyTest, ACopyStreamsAFewChunksAtATimeWhilePushesGoOnAndItsBackupLosesNothing) {
  nlohmann::json sender, receiver;
  ASSERT_NO_FATAL_FAILURE(KillAndRestartWhilePushing(logs_[0].Factory(), &sender, &receiver));
  // Server 1 sent shard 1's copy (its own server) and shard 0's (its copy, which served it).
  for (const nlohmann::json& j : {sender, sender["backup"]}) {
    EXPECT_GE(j["migrate_chunks_out"].get<uint64_t>(), 10u) << j.dump();
    EXPECT_LE(j["copy_window_max"].get<uint64_t>(), 2u) << "more chunks unacknowledged than the window\n" << j.dump();
  }
  EXPECT_EQ(receiver["copy_asks_again"].get<uint64_t>() + receiver["backup"]["copy_asks_again"].get<uint64_t>(), 0u);
}

// A copy that fails in the middle of its tail (a chunk the restarted server cannot write, after
// forwards were applied between the chunks before it) is dropped by its sender, asked for again
// and sent whole again; the backup it ends with loses nothing.
TEST_F(StreamedCopyTest, ACopyThatFailsInItsTailIsAskedForAgainAndItsBackupLosesNothing) {
  std::atomic<int> made{0}, updates{0};
  // The restarted server's first store fails at its 12th update: the head's (empty) rows, then
  // chunks of the tail and the forwards between them.
  const StoreFactory fails_once = [&](const TableSpec& t) -> Result<std::unique_ptr<RowStore>> {
    if (made++ == 0) return std::unique_ptr<RowStore>(std::make_unique<FailingStore>(t.RecordWidth(), &updates, 12));
    return std::unique_ptr<RowStore>(std::make_unique<MemoryRowStore>(t.RecordWidth()));
  };
  nlohmann::json sender, receiver;
  ASSERT_NO_FATAL_FAILURE(KillAndRestartWhilePushing(fails_once, &sender, &receiver));
  EXPECT_EQ(receiver["copy_asks_again"].get<uint64_t>() + receiver["backup"]["copy_asks_again"].get<uint64_t>(), 1u)
      << receiver.dump();
  EXPECT_GE(made.load(), 3);
}

}  // namespace
}  // namespace strata
