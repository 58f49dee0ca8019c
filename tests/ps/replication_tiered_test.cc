// replication_tiered_test.cc: primary-backup replication (ps/replication.h) with the tiered
// store (ps/server_stores.h: TieredStores, real RocksDB in a temporary directory), servers and
// trainers as threads in one process, under a DRAM budget of a few records so most rows live in
// RocksDB. The backup copy's own stores (<path>/server-<r>/backup-of-<r-1>) hold the primary's
// rows and optimizer state bit for bit; a kill of the primary loses no acknowledged update; a
// restarted server whose directory holds stale state (rows, a table, push ids the serving holder
// never had) holds exactly the serving holder's state once its copies are in, and serves both
// shards with nothing lost after the other holder is killed in turn; and BSP clocks survive a
// kill of each holder, with a copy taken in the middle of a clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "cluster/scheduler.h"
#include "common/inproc_transport.h"
#include "mem_node.h"
#include "offload/tiered_row_store.h"
#include "ps/client.h"
#include "ps/layout.h"
#include "ps/replication.h"
#include "ps/server.h"
#include "ps/server_stores.h"
#include "test_util.h"

namespace strata {
namespace {

constexpr uint32_t kDim = 4;
// A few records per table in DRAM: most of each shard lives in RocksDB.
constexpr double kDramMb = 2.0 / 1024;

// key -> record, of the tiered store at `path` (opened after its server stopped).
std::map<uint64_t, std::vector<float>> StoreOnDisk(const std::string& path, int width) {
  TieredStoreOptions o;
  o.path = path;
  std::map<uint64_t, std::vector<float>> out;
  auto store = TieredRowStore::Open(o, width);
  EXPECT_TRUE(store.ok()) << path << ": " << store.status().ToString();
  if (!store.ok()) return out;
  EXPECT_TRUE((*store)->Scan([&](uint64_t key, std::span<const float> r) {
                        out[key].assign(r.begin(), r.end());
                        return Status::OK();
                      }).ok());
  return out;
}

class TieredReplicationTest : public ::testing::TestWithParam<Durability> {
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
    server_nodes_.resize(kServers);
    servers_.resize(kServers);
    for (int s = 0; s < kServers; ++s) ASSERT_NO_FATAL_FAILURE(MakeServer(s));
    std::vector<std::future<Status>> joins;
    for (int t = 0; t < kTrainers; ++t) {
      trainer_nodes_.push_back(testing::MakeMemNode(cluster_, &hub_, Role::kTrainer, "trainer" + std::to_string(t), t));
    }
    for (auto& n : server_nodes_) joins.push_back(std::async(std::launch::async, [&n] { return n->Join(); }));
    for (auto& n : trainer_nodes_) joins.push_back(std::async(std::launch::async, [&n] { return n->Join(); }));
    for (auto& j : joins) ASSERT_TRUE(j.get().ok());
    for (auto& s : servers_) s->Joined();
    for (auto& n : trainer_nodes_) {
      clients_.push_back(std::make_unique<PsClient>(*n, Millis(10000), Replication::kBackup));
    }
    // Durable stores: even at the start each backup takes its shard by state transfer.
    ASSERT_NO_FATAL_FAILURE(WaitForBackups(0));
    ASSERT_NO_FATAL_FAILURE(WaitForBackups(1));
  }

  void TearDown() override {
    clients_.clear();
    for (auto& n : trainer_nodes_) (void)n->Leave();
    servers_.clear();
    trainer_nodes_.clear();
    server_nodes_.clear();
    scheduler_.reset();
  }

  std::string Dir(int s) const { return root_.path() + "/server-" + std::to_string(s); }

  // Server s as strata-server makes it: tiered stores in <root>/server-<s>, its tables file
  // there, the tables it recorded reloaded before it joins.
  void MakeServer(int s) {
    server_nodes_[s] = testing::MakeMemNode(cluster_, &hub_, Role::kServer, "server" + std::to_string(s), s);
    ServerOptions o;
    o.stats_interval_ms = 0;
    o.replication = Replication::kBackup;
    o.migrate_chunk_mb = 1.0 / 256;  // copies of several chunks
    o.store.kind = StoreKind::kTiered;
    o.store.path = root_.path();
    o.store.dram_budget_mb = kDramMb;
    o.store.durability = GetParam();
    if (GetParam() == Durability::kCheckpoint) o.store.checkpoint_every_clocks = 2;
    std::filesystem::create_directories(Dir(s));
    o.tables_file = Dir(s) + "/tables";
    servers_[s] = std::make_unique<PsServer>(*server_nodes_[s], o, TieredStores(o.store, Dir(s)));
    Status restored = servers_[s]->RestoreTables();
    ASSERT_TRUE(restored.ok()) << restored.ToString();
  }

  void Kill(int s) {
    servers_[s].reset();
    server_nodes_[s]->StopWithoutLeaving();
    server_nodes_[s].reset();
    ASSERT_TRUE(testing::WaitUntilServerDead(*trainer_nodes_[0], s, Millis(30000)));
  }

  void Restart(int s) {
    ASSERT_NO_FATAL_FAILURE(MakeServer(s));
    ASSERT_TRUE(server_nodes_[s]->Join().ok());
    servers_[s]->Joined();
  }

  nlohmann::json Stats(int server) {
    auto s = clients_[0]->ServerStats(static_cast<uint32_t>(server));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return nlohmann::json::parse(s.ok() ? *s : "{}");
  }

  // Until server s holds the backup of shard s - 1 (and its own shard in `own` role, if given).
  void WaitForBackups(int s, const char* own = nullptr) {
    nlohmann::json j;
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          j = Stats(s);
          return j.contains("backup") && j["backup"].value("role", "") == "backup" &&
                 (!own || j.value("role", "") == own);
        },
        Millis(30000)))
        << j.dump();
  }

  // Trainer 0 pushes gradient 1 to every key of `keys` `times` times, each acknowledged.
  void PushOnes(const std::vector<uint64_t>& keys, int times) {
    const std::vector<float> ones(keys.size() * kDim, 1.0f);
    for (int i = 0; i < times; ++i) {
      PsTicket t = clients_[0]->Push(1, keys, ones.data());
      ASSERT_TRUE(clients_[0]->Wait(t).ok());
    }
  }

  std::vector<float> Pull(const std::vector<uint64_t>& keys) {
    std::vector<float> values(keys.size() * kDim);
    PsTicket pull = clients_[0]->Pull(1, keys, values.data());
    EXPECT_TRUE(clients_[0]->Wait(pull).ok());
    return values;
  }

  // A push written by hand from trainer 0 to server `to` for shard `shard`: keys `ks`
  // (gradient 1), push id `id`.
  Status RawPush(int to, std::vector<uint64_t> ks, uint64_t id, int32_t shard) {
    Node& node = *trainer_nodes_[0];
    const PeerId peer = *node.rpc().Connect("mem://server" + std::to_string(to));
    Message m;
    m.set_shard(shard);
    auto b = m.builder().getBody().initPush();
    b.setTable(1);
    b.setPushId(id);
    const auto n = static_cast<int64_t>(ks.size());
    m.AddPayload(DType::kI64, {n}, Buffer::Take(std::move(ks)));
    m.AddPayload(DType::kF32, {n, kDim}, Buffer::Take(std::vector<float>(static_cast<size_t>(n) * kDim, 1.0f)));
    return node.rpc().CallAndWait(peer, std::move(m)).status();
  }

  testing::TempDir root_;
  InprocHub hub_;
  ClusterOptions cluster_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Node>> server_nodes_, trainer_nodes_;
  std::vector<std::unique_ptr<PsServer>> servers_;
  std::vector<std::unique_ptr<PsClient>> clients_;
};

TableSpec AdamTable() {
  TableSpec t;
  t.id = 1;
  t.name = "emb";
  t.kind = TableKind::kSparse;
  t.dim = kDim;
  t.optimizer.kind = OptimizerKind::kAdam;
  t.optimizer.lr = 0.1f;
  t.init = InitSpec::Of(InitKind::kNormal, 0.0f, 0.1f, 5);
  t.consistency = Consistency::kSsp;
  t.staleness = 1;
  return t;
}

TableSpec LedgerTable() {  // SGD, lr 1, zeros: a key's value is minus the pushes applied to it
  TableSpec t;
  t.id = 1;
  t.name = "ledger";
  t.kind = TableKind::kSparse;
  t.dim = kDim;
  t.optimizer.lr = 1.0f;
  return t;
}

std::vector<uint64_t> Keys(size_t n) {
  std::vector<uint64_t> keys(n);
  for (uint64_t k = 0; k < n; ++k) keys[k] = k * 7919 + 3;
  return keys;
}

// Adam does not commute: a backup that applied two trainers' pushes of a key in another order
// than its primary would hold other bits. Each backup's own tiered store, spilled to RocksDB,
// must equal its primary's exactly.
TEST_P(TieredReplicationTest, TheBackupsTieredStoreHoldsThePrimarysRowsAndOptimizerStateBitForBit) {
  const TableSpec spec = AdamTable();
  for (auto& c : clients_) ASSERT_TRUE(c->CreateTable(spec).ok());
  const std::vector<uint64_t> keys = Keys(300);
  std::vector<std::thread> threads;
  for (int t = 0; t < kTrainers; ++t) {
    threads.emplace_back([&, t] {
      PsClient& c = *clients_[t];
      for (int step = 0; step < 8; ++step) {
        std::vector<float> g(keys.size() * kDim);
        for (size_t i = 0; i < g.size(); ++i) g[i] = std::sin(0.3f * static_cast<float>(i) + 1.7f * step + t);
        std::vector<float> out(keys.size() * kDim);
        std::vector<PsTicket> inflight;
        for (int k = 0; k < 2; ++k) inflight.push_back(c.Push(1, keys, g.data()));
        inflight.push_back(c.PushPull(1, keys, g.data(), out.data()));
        for (auto& tk : inflight) ASSERT_TRUE(c.Wait(tk).ok());
        ASSERT_TRUE(c.Clock().ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  const uint64_t footprint = 4 * static_cast<uint64_t>(spec.RecordWidth()) + TieredRowStore::kRecordOverheadBytes;
  for (int s = 0; s < kServers; ++s) {
    nlohmann::json j = Stats(s);
    ASSERT_EQ(j["backup"]["tables"].size(), 1u) << j.dump();
    const nlohmann::json& t = j["backup"]["tables"][0];
    EXPECT_GT(t["records"].get<uint64_t>(), 100u) << j.dump();
    EXPECT_LT(t["bytes_in_memory"].get<uint64_t>(), 30 * footprint) << "DRAM holds a few records only: " << j.dump();
    EXPECT_EQ(j["backup"]["trainer_clocks"], Stats((s + 1) % kServers)["trainer_clocks"]);
  }
  // Stopped (each store closed, what DRAM held written back), then read from disk.
  servers_.clear();
  for (int shard = 0; shard < kServers; ++shard) {
    const int backup = (shard + 1) % kServers;
    const auto primary = StoreOnDisk(Dir(shard) + "/table-1", spec.RecordWidth());
    const auto copy = StoreOnDisk(Dir(backup) + "/backup-of-" + std::to_string(shard) + "/table-1", spec.RecordWidth());
    ASSERT_GT(primary.size(), 100u) << "shard " << shard;
    for (const auto& [key, record] : primary) ASSERT_EQ(SparseServer(key, kServers), static_cast<uint32_t>(shard));
    EXPECT_TRUE(primary == copy) << "shard " << shard << ": the backup's records differ from the primary's ("
                                 << primary.size() << " and " << copy.size() << " rows)";
  }
}

// The primary killed: its backup takes the shard over from its tiered store, every update
// acknowledged before the kill in it once, and goes on alone.
TEST_P(TieredReplicationTest, AKillOfThePrimaryLosesNoAcknowledgedUpdate) {
  for (auto& c : clients_) ASSERT_TRUE(c->CreateTable(LedgerTable()).ok()) << c->CreateTable(LedgerTable()).ToString();
  const std::vector<uint64_t> keys = Keys(300);
  ASSERT_NO_FATAL_FAILURE(PushOnes(keys, 3));
  ASSERT_NO_FATAL_FAILURE(Kill(0));
  ASSERT_NO_FATAL_FAILURE(PushOnes(keys, 2));  // server 1 serves shard 0 from its copy
  const std::vector<float> values = Pull(keys);
  for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(values[i], -5.0f) << "key " << keys[i / kDim];
  nlohmann::json j = Stats(1);
  EXPECT_EQ(j["backup"]["role"], "serving") << j.dump();
}

// Server 0 killed; while it is down its stores are left stale (server 1 serves shard 0 and takes
// updates) and more stale state is planted in its directory: a row the serving holder never had
// in each of its stores, a table it never had, a push id it never saw. Restarted, server 0
// reloads that, then its copies replace it whole: none of it survives, the serving holder's push
// ids are known, and after server 1 is killed in turn server 0 serves both shards with every
// acknowledged update applied once.
TEST_P(TieredReplicationTest, ARestartedServerWithStaleStateHoldsExactlyTheServingStateAndSurvivesASecondKill) {
  if (GetParam() == Durability::kCheckpoint) GTEST_SKIP() << "stale rows planted in RocksDB are not restored in checkpoint mode";
  const TableSpec spec = LedgerTable();
  for (auto& c : clients_) ASSERT_TRUE(c->CreateTable(spec).ok());
  const std::vector<uint64_t> keys = Keys(300);
  const uint64_t trainer = trainer_nodes_[0]->id();
  const uint64_t acked_id = (trainer << 40) | 777001, stale_id = (trainer << 40) | 777002;
  std::vector<uint64_t> shard0, shard1;  // keys of each shard the serving holder never had
  for (uint64_t k = 1; shard0.size() < 2 || shard1.size() < 2; k += 2) {
    if (std::find(keys.begin(), keys.end(), k) != keys.end()) continue;
    (SparseServer(k, kServers) == 0 ? shard0 : shard1).push_back(k);
  }
  // A key of shard 0, pushed once more by hand with a push id: acknowledged, so a later retry
  // of it is a duplicate.
  const size_t i0 = static_cast<size_t>(std::find_if(keys.begin(), keys.end(), [](uint64_t k) {
                                          return SparseServer(k, kServers) == 0;
                                        }) - keys.begin());
  ASSERT_LT(i0, keys.size());
  const uint64_t k0 = keys[i0];
  ASSERT_NO_FATAL_FAILURE(PushOnes(keys, 3));
  ASSERT_TRUE(RawPush(0, {k0}, acked_id, 0).ok());
  ASSERT_NO_FATAL_FAILURE(Kill(0));
  ASSERT_NO_FATAL_FAILURE(PushOnes(keys, 2));  // not on server 0's disk
  {
    // The stale state: planted in server 0's stores as a server that applied it would have.
    auto plant = [&](const std::string& path, uint64_t key, UpdateId id) {
      TieredStoreOptions o;
      o.path = path;
      o.durability = GetParam();
      auto store = TieredRowStore::Open(o, spec.RecordWidth());
      ASSERT_TRUE(store.ok()) << store.status().ToString();
      const uint64_t k[1] = {key};
      auto set = [](uint64_t, std::span<float> r) { std::fill(r.begin(), r.end(), 42.0f); };
      ASSERT_TRUE((*store)->UpdateWithId(k, set, [](size_t, std::span<float>) {}, id).ok());
      ASSERT_TRUE((*store)->Close().ok());
    };
    ASSERT_NO_FATAL_FAILURE(plant(Dir(0) + "/table-1", shard0[0], UpdateId{static_cast<uint32_t>(trainer), stale_id}));
    ASSERT_NO_FATAL_FAILURE(plant(Dir(0) + "/backup-of-1/table-1", shard1[0], UpdateId{}));
    ASSERT_NO_FATAL_FAILURE(plant(Dir(0) + "/table-7", shard0[1], UpdateId{}));
  }
  ASSERT_NO_FATAL_FAILURE(Restart(0));
  // It holds copies of shards 0 and 1 again, and took shard 0 back (fail-back).
  ASSERT_NO_FATAL_FAILURE(WaitForBackups(0, "serving"));
  EXPECT_EQ(Stats(0)["fail_backs"].get<uint64_t>(), 1u);
  EXPECT_EQ(Stats(1)["backup"]["role"], "backup") << "server 1 handed shard 0 back and backs it up";
  EXPECT_FALSE(std::filesystem::exists(Dir(0) + "/table-7")) << "a table the serving holder never had";
  ASSERT_NO_FATAL_FAILURE(PushOnes(keys, 2));  // forwarded to server 0's copies
  ASSERT_NO_FATAL_FAILURE(Kill(1));

  // Server 0 serves both shards now, from what its copies and the forwards gave it.
  const std::vector<float> values = Pull(keys);
  for (size_t i = 0; i < values.size(); ++i) {
    const float want = i / kDim == i0 ? -8.0f : -7.0f;
    ASSERT_EQ(values[i], want) << "key " << keys[i / kDim];
  }
  // Rows the serving holder never had: read now, they are new (zeros), not the stale 42s.
  for (uint64_t k : {shard0[0], shard0[1], shard1[0]}) {
    for (float v : Pull({k})) ASSERT_EQ(v, 0.0f) << "stale key " << k << " came back";
  }
  // The copy's push ids, and only those: the acknowledged push's retry is a duplicate, the
  // stale id (never applied by the serving holder) is applied.
  ASSERT_TRUE(RawPush(0, {k0}, acked_id, 0).ok());
  ASSERT_TRUE(RawPush(0, {shard0[0]}, stale_id, 0).ok());
  EXPECT_EQ(Pull({k0})[0], -8.0f) << "the acknowledged push applied twice";
  EXPECT_EQ(Pull({shard0[0]})[0], -1.0f) << "a push id the serving holder never saw was taken for a duplicate";
}

// BSP: a backup sums the forwarded pushes of a clock in the order its serving holder did and
// applies each clock when it does. Server 0 is killed with clock 0's pushes summed, not applied:
// server 1 applies them at the clock messages. Restarted after trainer 0's push of clock 1, server
// 0's copies must carry that sum (stateTransfer.bsp); server 1 is killed after clock 1, and server
// 0 holds the mean of both trainers' pushes of each clock: nothing lost, nothing counted twice.
TEST_P(TieredReplicationTest, BspClocksSurviveAKillOfEachHolderAndACopyTakenMidClock) {
  TableSpec bsp = LedgerTable();
  bsp.consistency = Consistency::kBsp;
  for (auto& c : clients_) ASSERT_TRUE(c->CreateTable(bsp).ok());
  const std::vector<uint64_t> keys = Keys(300);
  auto push = [&](int trainer, float g) {
    const std::vector<float> grads(keys.size() * kDim, g);
    PsTicket p = clients_[trainer]->Push(1, keys, grads.data());
    ASSERT_TRUE(clients_[trainer]->Wait(p).ok());
  };
  auto expect = [&](int trainer, float want) {
    std::vector<float> values(keys.size() * kDim);
    PsTicket pull = clients_[trainer]->Pull(1, keys, values.data());
    ASSERT_TRUE(clients_[trainer]->Wait(pull).ok());
    for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(values[i], want) << "key " << keys[i / kDim];
  };
  ASSERT_NO_FATAL_FAILURE(push(0, 1.0f));
  ASSERT_NO_FATAL_FAILURE(push(1, 3.0f));
  ASSERT_NO_FATAL_FAILURE(Kill(0));
  for (auto& c : clients_) ASSERT_TRUE(c->Clock().ok());
  ASSERT_NO_FATAL_FAILURE(expect(0, -2.0f));  // (1 + 3) / 2

  ASSERT_NO_FATAL_FAILURE(push(0, 5.0f));  // summed on server 1 only
  ASSERT_NO_FATAL_FAILURE(Restart(0));
  ASSERT_NO_FATAL_FAILURE(WaitForBackups(0, "serving"));
  ASSERT_NO_FATAL_FAILURE(push(1, 7.0f));  // forwarded to server 0's copies
  for (auto& c : clients_) ASSERT_TRUE(c->Clock().ok());
  ASSERT_NO_FATAL_FAILURE(Kill(1));
  ASSERT_NO_FATAL_FAILURE(expect(1, -8.0f));  // -2 - (5 + 7) / 2
}

// A BSP table with pushers (offload, global clipping) applies a dense chunk as soon as its two
// pushers pushed it, ahead of the clock messages. Server 0 is killed; on server 1 one chunk of
// shard 0 runs ahead into clock 2 while the other waits for its second push; server 0, restarted
// then, must take that chunk's next clock with its copy (stateTransfer.bsp.chunkNext): once it
// serves both shards (server 1 killed), a second push of that chunk for clock 1 is refused, where
// a copy without it would sum it again. Every value is the mean of both pushers' pushes.
TEST_P(TieredReplicationTest, BspChunksWithPushersSurviveAKillOfEachHolderAndACopyTakenMidClock) {
  TableSpec dense = LedgerTable();
  dense.id = 2;
  dense.name = "dense";
  dense.kind = TableKind::kDense;
  dense.dim = 1;
  dense.numel = 64;
  dense.chunk_floats = 16;
  dense.consistency = Consistency::kBsp;
  dense.pushers = 2;
  for (auto& c : clients_) ASSERT_TRUE(c->CreateTable(dense).ok());
  auto push = [&](int trainer, float g) {
    const std::vector<float> grads(dense.numel, g);
    PsTicket p = clients_[trainer]->PushDense(2, grads.data());
    Status s = clients_[trainer]->Wait(p);
    ASSERT_TRUE(s.ok()) << s.ToString();
  };
  auto expect = [&](int trainer, float want) {
    std::vector<float> values(dense.numel);
    PsTicket pull = clients_[trainer]->PullDense(2, values.data());
    Status s = clients_[trainer]->Wait(pull);
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(values[i], want) << "float " << i;
  };
  PsLayout layout;
  layout.base = layout.servers = kServers;
  // Trainer 1's push of chunk `chunk` for clock 1 to server `to`, for the chunk's shard.
  auto push_chunk = [&](int to, uint64_t chunk, float g) {
    Node& node = *trainer_nodes_[1];
    const PeerId peer = *node.rpc().Connect("mem://server" + std::to_string(to));
    Message m;
    m.set_shard(static_cast<int32_t>(layout.DenseOwner(dense, chunk)));
    auto b = m.builder().getBody().initPush();
    b.setTable(2);
    b.setClock(1);
    b.setLr(-1.0f);
    m.AddPayload(DType::kI64, {1}, Buffer::Take(std::vector<uint64_t>{chunk}));
    m.AddPayload(DType::kF32, {16}, Buffer::Take(std::vector<float>(16, g)));
    return node.rpc().CallAndWait(peer, std::move(m)).status();
  };
  std::vector<uint64_t> shard0;  // the chunks of shard 0
  for (uint64_t c = 0; c < dense.NumChunks(); ++c) {
    if (layout.DenseOwner(dense, c) == 0) shard0.push_back(c);
  }
  ASSERT_EQ(shard0.size(), 2u);

  ASSERT_NO_FATAL_FAILURE(push(0, 1.0f));
  ASSERT_NO_FATAL_FAILURE(Kill(0));
  ASSERT_NO_FATAL_FAILURE(push(1, 3.0f));  // completes every chunk on server 1
  ASSERT_NO_FATAL_FAILURE(expect(0, -2.0f));
  for (auto& c : clients_) ASSERT_TRUE(c->Clock().ok());

  ASSERT_NO_FATAL_FAILURE(push(0, 5.0f));                    // clock 1: trainer 0's every chunk
  ASSERT_TRUE(push_chunk(1, shard0[0], 7.0f).ok());          // trainer 1's first chunk of shard 0: ahead
  ASSERT_NO_FATAL_FAILURE(Restart(0));                       // copies taken now
  ASSERT_NO_FATAL_FAILURE(WaitForBackups(0, "serving"));
  // The rest, to the server serving each chunk's shard (server 0 took shard 0 back), forwarded
  // to the other's copy.
  for (uint64_t c = 0; c < dense.NumChunks(); ++c) {
    if (c != shard0[0]) {
      ASSERT_TRUE(push_chunk(static_cast<int>(layout.DenseOwner(dense, c)), c, 7.0f).ok()) << "chunk " << c;
    }
  }
  ASSERT_NO_FATAL_FAILURE(Kill(1));
  Status again = push_chunk(0, shard0[0], 7.0f);
  EXPECT_EQ(again.code(), StatusCode::kFailedPrecondition) << again.ToString();
  EXPECT_NE(again.message().find("arrived after that clock was applied"), std::string::npos) << again.ToString();
  for (auto& c : clients_) ASSERT_TRUE(c->Clock().ok());
  ASSERT_NO_FATAL_FAILURE(expect(1, -8.0f));  // -2 - (5 + 7) / 2
}

INSTANTIATE_TEST_SUITE_P(Store, TieredReplicationTest,
                         ::testing::Values(Durability::kNone, Durability::kWal, Durability::kCheckpoint),
                         [](const ::testing::TestParamInfo<Durability>& p) {
                           return std::string(p.param == Durability::kNone  ? "None"
                                              : p.param == Durability::kWal ? "Wal"
                                                                            : "Checkpoint");
                         });

}  // namespace
}  // namespace strata
