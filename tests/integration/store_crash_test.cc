// store_crash_test.cc: a strata-server process with a tiered store killed with SIGKILL and
// restarted with the same command (a scheduler, 1 server, 2 trainers in this process): with
// durability wal every acknowledged push is applied exactly once afterwards (trainers retry
// through the outage, and the restarted server knows the push ids its WAL recorded, so a push
// applied before the kill is not applied again by its retry); with durability checkpoint the
// state equals the last checkpoint exactly.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <barrier>
#include <cstdio>
#include <fstream>
#include <future>
#include <thread>

#include "ps/client.h"
#include "test_util.h"

namespace strata {
namespace {

using testing::BinPath;
using testing::Subprocess;
using testing::TempDir;
using testing::WaitFor;

constexpr int kTrainers = 2;
constexpr uint32_t kDim = 4;
constexpr uint64_t kKeys = 16;
constexpr Millis kClientTimeout(6000);  // covers detection (2.5 s) + restart, twice over

class StoreCrashTest : public ::testing::Test {
 protected:
  // Starts the scheduler, server rank 0 with `store` settings (server.store.*) and the trainers.
  void Start(const std::vector<std::string>& store) {
    std::vector<std::string> common = {"--set", "cluster.servers=1",
                                       "--set", "cluster.trainers=2",
                                       "--set", "cluster.heartbeat_interval_ms=100",
                                       "--set", "cluster.heartbeat_timeout_ms=2500"};
    std::vector<std::string> sched = {BinPath("strata-scheduler"), "--bind", "tcp://127.0.0.1:0",
                                      "--address-file", dir_.File("addr")};
    sched.insert(sched.end(), common.begin(), common.end());
    scheduler_ = std::make_unique<Subprocess>(sched, dir_.File("scheduler.log"));
    std::string address;
    ASSERT_TRUE(
        WaitFor([&] { return static_cast<bool>(std::ifstream(dir_.File("addr")) >> address); },
                Millis(20000)));
    server_argv_ = {
        BinPath("strata-server"),       "--rank", "0",
        "--stats-interval-ms",          "0",      "--set",
        "cluster.scheduler=" + address, "--set",  "server.store.path=" + dir_.File("store")};
    server_argv_.insert(server_argv_.end(), common.begin(), common.end());
    for (const std::string& s : store) {
      server_argv_.push_back("--set");
      server_argv_.push_back("server.store." + s);
    }
    StartServer();
    ClusterOptions cluster;
    cluster.scheduler = address;
    cluster.servers = 1;
    cluster.trainers = kTrainers;
    cluster.heartbeat_interval_ms = 100;
    cluster.heartbeat_timeout_ms = 2500;
    for (int t = 0; t < kTrainers; ++t) {
      NodeOptions o;
      o.cluster = cluster;
      o.role = Role::kTrainer;
      o.requested_rank = t;
      nodes_.push_back(std::make_unique<Node>(o));
    }
    std::vector<std::future<Status>> joins;
    for (auto& n : nodes_)
      joins.push_back(std::async(std::launch::async, [&n] { return n->Join(); }));
    for (auto& j : joins) ASSERT_TRUE(j.get().ok());
    for (auto& n : nodes_) clients_.push_back(std::make_unique<PsClient>(*n, kClientTimeout));
  }

  void StartServer() {
    const std::string log = dir_.File("server-run" + std::to_string(servers_.size()) + ".log");
    servers_.push_back(std::make_unique<Subprocess>(server_argv_, log));
  }

  // SIGKILL, wait until the scheduler declared the server dead (only then may its rank
  // register again), and start the same command.
  void KillAndRestartServer() {
    servers_.back()->Signal(SIGKILL);
    EXPECT_EQ(servers_.back()->Wait(Millis(10000)), 128 + SIGKILL);
    ASSERT_TRUE(
        WaitFor([&] { return scheduler_->Log().find("declared dead") != std::string::npos; },
                Millis(20000)))
        << scheduler_->Log();
    StartServer();
  }

  void TearDown() override {
    clients_.clear();
    for (auto& n : nodes_) EXPECT_TRUE(n->Leave().ok());
    nodes_.clear();
    if (!scheduler_) return;
    scheduler_->Signal(SIGTERM);  // ends the job: the server is told to shut down
    EXPECT_EQ(scheduler_->Wait(Millis(20000)), 0) << scheduler_->Log();
    EXPECT_EQ(servers_.back()->Wait(Millis(20000)), 0) << servers_.back()->Log();
  }

  TempDir dir_;
  std::vector<std::string> server_argv_;
  std::unique_ptr<Subprocess> scheduler_;
  std::vector<std::unique_ptr<Subprocess>> servers_;  // every run; the last one is current
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<PsClient>> clients_;
};

TableSpec SgdTable(Consistency consistency) {
  TableSpec t;
  t.id = 1;
  t.name = "emb";
  t.kind = TableKind::kSparse;
  t.dim = kDim;
  t.optimizer.lr = 1.0f;  // SGD: value = -(sum of gradients); init zeros
  t.consistency = consistency;
  return t;
}

std::vector<float> PullAll(PsClient& c) {
  std::vector<uint64_t> keys(kKeys);
  for (uint64_t k = 0; k < kKeys; ++k) keys[k] = k;
  std::vector<float> out(kKeys * kDim);
  PsTicket p = c.Pull(1, keys, out.data());
  Status s = c.Wait(p);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

TEST_F(StoreCrashTest, WalAppliesEveryAcknowledgedPushExactlyOnceThroughAKill) {
  Start({"kind=tiered", "durability=wal", "dram_budget_mb=1"});
  for (auto& c : clients_) ASSERT_TRUE(c->CreateTable(SgdTable(Consistency::kAsp)).ok());
  // acked[t][k]: pushes of key k trainer t saw acknowledged.
  std::vector<std::vector<uint64_t>> acked(kTrainers, std::vector<uint64_t>(kKeys, 0));
  std::vector<std::atomic<uint64_t>> pushes(kTrainers);
  std::vector<uint64_t> failed(kTrainers, 0);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kTrainers; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<float> ones(6 * kDim, 1.0f);
      for (uint64_t i = 0; !stop; ++i) {
        std::vector<uint64_t> keys;  // 6 distinct keys, rotating
        for (uint64_t j = 0; j < 6; ++j) keys.push_back((i + t + 3 * j) % kKeys);
        PsTicket tk = clients_[t]->Push(1, keys, ones.data());
        Status s = clients_[t]->Wait(tk);
        if (!s.ok()) {
          ++failed[t];
          ADD_FAILURE() << "trainer " << t << " push " << i << ": " << s.ToString();
          continue;
        }
        for (uint64_t k : keys) ++acked[t][k];
        ++pushes[t];
      }
    });
  }
  auto all_pushed_past = [&](uint64_t n) {
    return WaitFor([&] { return pushes[0] >= n && pushes[1] >= n; }, Millis(60000));
  };
  EXPECT_TRUE(all_pushed_past(30));
  KillAndRestartServer();
  const uint64_t at_restart = std::max(pushes[0].load(), pushes[1].load());
  // The trainers go on after the outage.
  EXPECT_TRUE(all_pushed_past(at_restart + 30));
  stop = true;
  for (auto& th : threads) th.join();

  const std::vector<float> values = PullAll(*clients_[0]);
  uint64_t total_acked = 0, total_applied = 0;
  for (uint64_t k = 0; k < kKeys; ++k) {
    uint64_t want = 0;
    for (int t = 0; t < kTrainers; ++t) want += acked[t][k];
    // Every push is eventually acknowledged (none failed), so any difference is a push lost
    // (fewer) or applied twice (more).
    for (uint32_t j = 0; j < kDim; ++j) {
      EXPECT_EQ(-values[k * kDim + j], static_cast<float>(want))
          << "key " << k << (-values[k * kDim + j] < want ? ": acknowledged pushes lost" : ": pushes applied twice");
    }
    total_acked += want;
    total_applied += static_cast<uint64_t>(-values[k * kDim]);
  }
  const uint64_t retries = clients_[0]->retries() + clients_[1]->retries();
  std::printf(
      "wal crash: %llu acknowledged key updates, %llu applied (%lld extra applications), %llu "
      "requests retried, %llu pushes failed\n",
      static_cast<unsigned long long>(total_acked), static_cast<unsigned long long>(total_applied),
      static_cast<long long>(total_applied) - static_cast<long long>(total_acked),
      static_cast<unsigned long long>(retries),
      static_cast<unsigned long long>(failed[0] + failed[1]));
  EXPECT_NE(servers_.back()->Log().find("restored"), std::string::npos) << servers_.back()->Log();
}

// The deterministic case of the test above: a push applied and logged before the kill is sent
// again, with the same id, to the restarted server (as a trainer retries a push whose reply the
// kill lost): it is answered as a duplicate and not applied; a new id is applied.
TEST_F(StoreCrashTest, APushIdLoggedBeforeAKillIsAppliedOnceByTheRestartedServer) {
  Start({"kind=tiered", "durability=wal"});
  for (auto& c : clients_) ASSERT_TRUE(c->CreateTable(SgdTable(Consistency::kAsp)).ok());
  Node& node = *nodes_[0];
  // A push written by hand, of gradient 1 for keys 0..3, with push id `id`.
  auto raw_push = [&](uint64_t id) -> Status {
    STRATA_ASSIGN_OR_RETURN(ClusterView view, node.RefreshView());
    const NodeInfo* server = view.Find(Role::kServer, 0);
    if (!server || !server->alive) return Status::Unavailable("server 0 is not up");
    STRATA_ASSIGN_OR_RETURN(PeerId peer, node.rpc().Connect(server->address));
    Message m;
    auto b = m.builder().getBody().initPush();
    b.setTable(1);
    b.setPushId(id);
    m.AddPayload(DType::kI64, {4}, Buffer::Take(std::vector<uint64_t>{0, 1, 2, 3}));
    m.AddPayload(DType::kF32, {4, kDim}, Buffer::Take(std::vector<float>(4 * kDim, 1.0f)));
    return node.rpc().CallAndWait(peer, std::move(m)).status();
  };
  const uint64_t id = (static_cast<uint64_t>(node.id()) << 40) | (uint64_t{1} << 39);
  ASSERT_TRUE(raw_push(id).ok());
  EXPECT_EQ(PullAll(*clients_[0])[0], -1.0f);

  KillAndRestartServer();
  EXPECT_EQ(PullAll(*clients_[0])[0], -1.0f);  // the client's retries wait for the restart
  Status again = raw_push(id);
  ASSERT_TRUE(again.ok()) << again.ToString();
  const std::vector<float> after_retry = PullAll(*clients_[0]);
  for (size_t i = 0; i < 4 * kDim; ++i) EXPECT_EQ(after_retry[i], -1.0f) << "float " << i;
  auto stats = clients_[0]->ServerStats(0);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_NE(stats->find("\"duplicate_pushes\":1"), std::string::npos) << *stats;
  ASSERT_TRUE(raw_push(id + 1).ok());
  EXPECT_EQ(PullAll(*clients_[0])[0], -2.0f);
  EXPECT_NE(servers_.back()->Log().find("1 push ids"), std::string::npos) << servers_.back()->Log();
}

TEST_F(StoreCrashTest, CheckpointRestoresTheLastCheckpointExactly) {
  constexpr int kEvery = 3,
                kClocks = 7;  // checkpoints at clocks 3 and 6; clock 6's pushes are lost
  Start({"kind=tiered", "durability=checkpoint",
         "checkpoint_every_clocks=" + std::to_string(kEvery)});
  for (auto& c : clients_) ASSERT_TRUE(c->CreateTable(SgdTable(Consistency::kAsp)).ok());
  // Gradients exact in float, so every sum is exact whatever the order.
  auto grad = [](int t, int clock, uint64_t key) {
    return 0.25f * static_cast<float>((t + 1) * (clock + 1) + key % 5);
  };
  std::barrier sync(kTrainers);
  std::vector<float> at_checkpoint;
  std::vector<std::thread> threads;
  for (int t = 0; t < kTrainers; ++t) {
    threads.emplace_back([&, t] {
      PsClient& c = *clients_[t];
      std::vector<uint64_t> keys(kKeys);
      for (uint64_t k = 0; k < kKeys; ++k) keys[k] = k;
      for (int clock = 0; clock < kClocks; ++clock) {
        std::vector<float> g(kKeys * kDim);
        for (uint64_t k = 0; k < kKeys; ++k) {
          for (uint32_t j = 0; j < kDim; ++j) g[k * kDim + j] = grad(t, clock, k);
        }
        PsTicket tk = c.Push(1, keys, g.data());
        ASSERT_TRUE(c.Wait(tk).ok());
        ASSERT_TRUE(c.Clock().ok());
        // The last trainer's clock reply comes after the checkpoint of the new min clock, and
        // nobody pushes for the next clock before both clocked.
        sync.arrive_and_wait();
        if (t == 0 && clock + 1 == 2 * kEvery) at_checkpoint = PullAll(c);
        sync.arrive_and_wait();
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(at_checkpoint.size(), kKeys * kDim);
  // The state after clocks 0 .. 2*kEvery-1, computed from the update sequence.
  for (uint64_t k = 0; k < kKeys; ++k) {
    float want = 0;
    for (int clock = 0; clock < 2 * kEvery; ++clock) {
      for (int t = 0; t < kTrainers; ++t) want -= grad(t, clock, k);
    }
    for (uint32_t j = 0; j < kDim; ++j) ASSERT_EQ(at_checkpoint[k * kDim + j], want) << "key " << k;
  }
  const std::vector<float> before_kill = PullAll(*clients_[0]);
  ASSERT_NE(before_kill, at_checkpoint);  // clock 6's pushes are applied but not checkpointed

  KillAndRestartServer();
  const std::vector<float> restored = PullAll(*clients_[0]);
  EXPECT_EQ(restored, at_checkpoint);
  EXPECT_NE(servers_.back()->Log().find("restored"), std::string::npos) << servers_.back()->Log();
}

}  // namespace
}  // namespace strata
