// store_crash_test.cc: a strata-server process with a tiered store killed with SIGKILL and
// restarted with the same command (a scheduler, 1 server, 2 trainers in this process): with
// durability wal every acknowledged push is present afterwards (at least once, trainers retry
// through the outage); with durability checkpoint the state equals the last checkpoint exactly.
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

TEST_F(StoreCrashTest, WalKeepsEveryAcknowledgedPushThroughAKill) {
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
    for (uint32_t j = 0; j < kDim; ++j) {
      EXPECT_GE(-values[k * kDim + j], static_cast<float>(want))
          << "key " << k << " lost acknowledged pushes";
    }
    total_acked += want;
    total_applied += static_cast<uint64_t>(-values[k * kDim]);
  }
  const uint64_t retries = clients_[0]->retries() + clients_[1]->retries();
  std::printf(
      "wal crash: %llu acknowledged key updates, %llu applied (%llu re-applied at least once "
      "or unacknowledged), %llu requests retried, %llu pushes failed\n",
      static_cast<unsigned long long>(total_acked), static_cast<unsigned long long>(total_applied),
      static_cast<unsigned long long>(total_applied - total_acked),
      static_cast<unsigned long long>(retries),
      static_cast<unsigned long long>(failed[0] + failed[1]));
  EXPECT_NE(servers_.back()->Log().find("restored"), std::string::npos) << servers_.back()->Log();
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
