// replication_test.cc: issue #16's replicated servers with real processes on loopback
// (strata-scheduler, two strata-server with server.replication: backup and the memory store):
// a primary killed with SIGKILL mid-stream and not restarted, its backup taking its shard over.
//  - ledger: two in-process trainers push counted increments through the kill: every
//    acknowledged increment is applied exactly once (none lost, none applied twice);
//  - a push the primary forwarded before dying, retried to the backup with its id, is a duplicate;
//  - ctr (ps, ASP) trained by two strata-trainer processes finishes every step.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <future>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "ps/client.h"
#include "tests/integration/process_fixture.h"

namespace strata {
namespace {

using testing::Subprocess;
using testing::WaitFor;

constexpr uint32_t kDim = 4;
constexpr uint64_t kKeys = 64;

class ReplicationTest : public testing::ProcessFixture {
 protected:
  std::vector<std::string> Common(const std::string& job) {
    return {"--config", job, "--set", "cluster.servers=2", "--set", "cluster.trainers=2",
            "--set", "server.replication=backup", "--set", "server.stats_interval_ms=0",
            "--set", "sync.consistency=asp", "--set", "train.metrics_path=" + Metrics("run")};
  }
  // The scheduler and both servers; the trainers are this process's nodes.
  void StartServersAndJoin() {
    const auto common = Common(Job("servers", ""));
    address_ = StartScheduler(common, "tcp://127.0.0.1:0");
    servers_[0] = &Start("strata-server", common, address_, 0);
    servers_[1] = &Start("strata-server", common, address_, 1);
    std::vector<std::future<Status>> joins;
    for (int t = 0; t < 2; ++t) {
      NodeOptions o;
      o.cluster.scheduler = address_;
      o.cluster.servers = 2;
      o.cluster.trainers = 2;
      o.cluster.heartbeat_interval_ms = 200;
      o.cluster.heartbeat_timeout_ms = 2500;
      o.role = Role::kTrainer;
      o.requested_rank = t;
      trainers_.push_back(std::make_unique<Node>(o));
    }
    for (auto& n : trainers_) joins.push_back(std::async(std::launch::async, [&n] { return n->Join(); }));
    for (auto& j : joins) ASSERT_TRUE(j.get().ok());
    for (auto& n : trainers_) clients_.push_back(std::make_unique<PsClient>(*n, Millis(20000), Replication::kBackup));
    TableSpec spec;
    spec.id = 1;
    spec.name = "ledger";
    spec.kind = TableKind::kSparse;
    spec.dim = kDim;
    spec.optimizer.lr = 1.0f;  // SGD from zeros: a key's value is minus the pushes applied to it
    spec.consistency = Consistency::kAsp;
    for (auto& c : clients_) ASSERT_TRUE(c->CreateTable(spec).ok());
  }
  // SIGKILL of server 0, not restarted; waits until server 1 logged the take-over.
  void KillServer0() {
    servers_[0]->Signal(SIGKILL);
    EXPECT_EQ(servers_[0]->Wait(Millis(10000)), 128 + SIGKILL);
    EXPECT_TRUE(WaitFor([&] { return servers_[1]->Log().find("take-over of shard 0") != std::string::npos; },
                        Millis(30000)))
        << servers_[1]->Log();
  }
  std::vector<float> PullAll() {
    std::vector<uint64_t> keys(kKeys);
    for (uint64_t k = 0; k < kKeys; ++k) keys[k] = k;
    std::vector<float> out(kKeys * kDim);
    PsTicket p = clients_[0]->Pull(1, keys, out.data());
    Status s = clients_[0]->Wait(p);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return out;
  }
  void TearDown() override {
    clients_.clear();
    for (auto& n : trainers_) EXPECT_TRUE(n->Leave().ok());
    trainers_.clear();
    if (schedulers_.empty()) return;
    schedulers_[0]->Signal(SIGTERM);  // ends the job: the live server is told to shut down
    EXPECT_EQ(schedulers_[0]->Wait(Millis(20000)), 0) << schedulers_[0]->Log();
    if (servers_[1]) {
      EXPECT_EQ(servers_[1]->Wait(Millis(20000)), 0) << servers_[1]->Log();
    }
  }

  std::string address_;
  Subprocess* servers_[2] = {nullptr, nullptr};
  std::vector<std::unique_ptr<Node>> trainers_;
  std::vector<std::unique_ptr<PsClient>> clients_;
};

TEST_F(ReplicationTest, APrimaryKilledLosesNoAcknowledgedUpdateAndAppliesNoneTwice) {
  StartServersAndJoin();
  std::vector<std::vector<uint64_t>> acked(2, std::vector<uint64_t>(kKeys, 0));
  std::vector<std::atomic<uint64_t>> pushes(2);
  std::vector<uint64_t> failed(2, 0);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      const std::vector<float> ones(8 * kDim, 1.0f);
      for (uint64_t i = 0; !stop; ++i) {
        std::vector<uint64_t> keys;  // 8 distinct keys over both shards, rotating
        for (uint64_t j = 0; j < 8; ++j) keys.push_back((i * 5 + t + 8 * j) % kKeys);
        PsTicket tk = clients_[t]->Push(1, keys, ones.data());
        if (Status s = clients_[t]->Wait(tk); !s.ok()) {
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
  EXPECT_TRUE(all_pushed_past(50));
  KillServer0();
  const uint64_t at_kill = std::max(pushes[0].load(), pushes[1].load());
  EXPECT_TRUE(all_pushed_past(at_kill + 50));  // the backup serves shard 0 now
  stop = true;
  for (auto& th : threads) th.join();

  const std::vector<float> values = PullAll();
  uint64_t acknowledged = 0, applied = 0, lost = 0, twice = 0;
  for (uint64_t k = 0; k < kKeys; ++k) {
    const uint64_t want = acked[0][k] + acked[1][k];
    const auto got = static_cast<uint64_t>(std::llround(-values[k * kDim]));
    acknowledged += want;
    applied += got;
    lost += got < want ? want - got : 0;
    twice += got > want ? got - want : 0;
    for (uint32_t j = 0; j < kDim; ++j) EXPECT_EQ(values[k * kDim + j], values[k * kDim]) << "key " << k;
  }
  EXPECT_EQ(lost, 0u) << "acknowledged updates lost";
  EXPECT_EQ(twice, 0u) << "updates applied twice";
  EXPECT_GT(acknowledged, 0u);
  std::printf("replication ledger: %llu acknowledged key updates, %llu applied, %llu lost, %llu applied twice, "
              "%llu requests retried, %llu pushes failed\n",
              static_cast<unsigned long long>(acknowledged), static_cast<unsigned long long>(applied),
              static_cast<unsigned long long>(lost), static_cast<unsigned long long>(twice),
              static_cast<unsigned long long>(clients_[0]->retries() + clients_[1]->retries()),
              static_cast<unsigned long long>(failed[0] + failed[1]));
  auto stats = clients_[0]->ServerStats(1);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  const auto j = nlohmann::json::parse(*stats);
  EXPECT_GT(j["replicated_bytes"].get<uint64_t>(), 0u) << *stats;  // shard 1's updates, until server 0 died
  EXPECT_GT(j["backup"]["pushes"].get<uint64_t>(), 0u) << *stats;
}

// A push the primary applied and forwarded before it died, retried to the backup with the same
// id (as a trainer does when the reply was lost with the primary): a duplicate there.
TEST_F(ReplicationTest, APushForwardedBeforeTheKillIsADuplicateOnTheBackup) {
  StartServersAndJoin();
  Node& node = *trainers_[0];
  std::vector<uint64_t> keys;  // keys of shard 0
  for (uint64_t k = 0; keys.size() < 4; ++k) {
    if (SparseServer(k, 2) == 0) keys.push_back(k);
  }
  auto raw_push = [&](int to, uint64_t id) -> Status {
    STRATA_ASSIGN_OR_RETURN(ClusterView view, node.RefreshView());
    STRATA_ASSIGN_OR_RETURN(PeerId peer, node.rpc().Connect(view.Find(Role::kServer, to)->address));
    Message m;
    m.builder().setShard(0);
    auto b = m.builder().getBody().initPush();
    b.setTable(1);
    b.setPushId(id);
    m.AddPayload(DType::kI64, {4}, Buffer::Take(std::vector<uint64_t>(keys)));
    m.AddPayload(DType::kF32, {4, kDim}, Buffer::Take(std::vector<float>(4 * kDim, 1.0f)));
    return node.rpc().CallAndWait(peer, std::move(m)).status();
  };
  const uint64_t id = (static_cast<uint64_t>(node.id()) << 40) | (uint64_t{1} << 39);
  ASSERT_TRUE(raw_push(0, id).ok());
  KillServer0();
  Status again = raw_push(1, id);
  ASSERT_TRUE(again.ok()) << again.ToString();
  std::vector<float> values = PullAll();
  for (uint64_t k : keys) EXPECT_EQ(values[k * kDim], -1.0f) << "key " << k;
  auto stats = clients_[0]->ServerStats(1);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(nlohmann::json::parse(*stats)["backup"]["duplicate_pushes"].get<uint64_t>(), 1u) << *stats;
  ASSERT_TRUE(raw_push(1, id + 1).ok());
  values = PullAll();
  for (uint64_t k : keys) EXPECT_EQ(values[k * kDim], -2.0f) << "key " << k;
}

const char* kCtr =
    "model: {kind: ctr, fields: 8, field_vocab: 300, embed_dim: 8, ctr_hidden: 32}\n"
    "data: {kind: click_log, eval_samples: 20000}\n"
    "optimizer: {kind: adamw, lr: 0.01}\n"
    "sync: {mode: ps}\n"
    "train: {steps: 1000, batch_size: 256, log_every: 25, progress: false}\n";

TEST_F(ReplicationTest, CtrTrainsToTheEndWithAPrimaryKilledAndNotRestarted) {
  const auto common = Common(Job("ctr", kCtr));
  address_ = StartScheduler(common, "tcp://127.0.0.1:0");
  servers_[0] = &Start("strata-server", common, address_, 0);
  servers_[1] = &Start("strata-server", common, address_, 1);
  Subprocess& t0 = Start("strata-trainer", common, address_, 0);
  Subprocess& t1 = Start("strata-trainer", common, address_, 1);
  ASSERT_TRUE(WaitFor([&] { return MetricsLines() >= 2; }, Millis(120000))) << t0.Log();
  KillServer0();
  EXPECT_LT(MetricsLines(), 1000u / 25) << "server 0 was killed after training ended: make the job longer";
  for (Subprocess* t : {&t0, &t1}) EXPECT_EQ(t->Wait(Millis(180000)), 0) << t->Log();
  const std::string log = t0.Log();
  EXPECT_NE(log.find("done: 1000 steps"), std::string::npos) << log;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex("auc ([0-9.]+) \\(oracle"))) << log;
  EXPECT_GT(std::stod(m[1]), 0.7) << log;  // the planted model was learnt (chance is 0.5)
  const std::string server1 = servers_[1]->Log();
  EXPECT_NE(server1.find("take-over of shard 0: its primary server 0"), std::string::npos) << server1;
  EXPECT_EQ(server1.find("did not acknowledge"), std::string::npos) << server1;
}

}  // namespace
}  // namespace strata
