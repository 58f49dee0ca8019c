// replication_test.cc: issue #16's replicated servers with real processes on loopback
// (strata-scheduler, two strata-server with server.replication: backup and the memory store, or
// the tiered store for one case): a primary killed with SIGKILL mid-stream, its backup taking its
// shard over.
//  - ledger: two in-process trainers push counted increments through the kill: every
//    acknowledged increment is applied exactly once (none lost, none applied twice); the same
//    with the killed server started again (it copies both shards, by state transfer, in 1 KiB
//    chunks, and takes its own back) and then the other server killed; and that with tiered stores,
//    the restarted server's stale stores on disk replaced by its copies;
//  - a push the primary forwarded before dying, retried to the backup with its id, is a duplicate;
//  - a server declared dead while it runs (SIGSTOP past the heartbeat timeout) registers again
//    by itself: with replication it steps down and takes its shards back as copies, without it
//    it serves its tables again; a trainer of a fixed SSP job declared dead so registers again
//    and trains to the end; one replaced by a new process meanwhile ends when it wakes;
//  - ctr (ps, ASP) trained by two strata-trainer processes finishes every step;
//  - BSP ctr and offload mlp (BSP, dense chunks applied once both trainers pushed them) end
//    exactly as undisturbed after a kill and restart of each server.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <future>
#include <iostream>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>
#include <vector>

#include "ps/client.h"
#include "tests/integration/process_cluster.h"

namespace strata {
namespace {

using testing::Subprocess;
using testing::WaitFor;

constexpr uint32_t kDim = 4;
constexpr uint64_t kKeys = 64;

class Ledger;

class ReplicationTest : public testing::ProcessClusterTest {
 protected:
  std::vector<std::string> Common(const std::string& job) {
    return {"--config", job, "--set", "cluster.servers=2", "--set", "cluster.trainers=2",
            "--set", "server.replication=backup", "--set", "server.stats_interval_ms=0",
            "--set", "sync.consistency=asp", "--set", "train.metrics_path=" + Metrics("run")};
  }
  // The scheduler and both servers; the trainers are this process's nodes.
  // `extra`: --set arguments of the servers' job (the store).
  void StartServersAndJoin(const std::vector<std::string>& extra = {}, Replication replication = Replication::kBackup) {
    common_ = Common(Job("servers", ""));
    common_.insert(common_.end(), extra.begin(), extra.end());
    // State transfers in chunks of 1 KiB: a rejoin's copy takes several.
    common_.insert(common_.end(), {"--set", "server.migrate_chunk_mb=0.001"});
    address_ = StartScheduler(common_, "tcp://127.0.0.1:0");
    servers_[0] = &Start("strata-server", common_, address_, 0);
    servers_[1] = &Start("strata-server", common_, address_, 1);
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
    for (auto& n : trainers_) clients_.push_back(std::make_unique<PsClient>(*n, Millis(20000), replication));
    TableSpec spec;
    spec.id = 1;
    spec.name = "ledger";
    spec.kind = TableKind::kSparse;
    spec.dim = kDim;
    spec.optimizer.lr = 1.0f;  // SGD from zeros: a key's value is minus the pushes applied to it
    spec.consistency = Consistency::kAsp;
    for (auto& c : clients_) ASSERT_TRUE(c->CreateTable(spec).ok());
  }
  // SIGKILL of server `rank`; waits until the other one logged the take-over of `shards` shards.
  void Kill(int rank, size_t shards = 1) {
    Subprocess* other = servers_[1 - rank];
    servers_[rank]->Signal(SIGKILL);
    EXPECT_EQ(servers_[rank]->Wait(Millis(10000)), 128 + SIGKILL);
    servers_[rank] = nullptr;
    const std::string line = "take-over of shard ";
    EXPECT_TRUE(WaitFor([&] { return Count(other->Log(), line) >= shards; }, Millis(30000))) << other->Log();
  }
  // Server 0 killed while the ledger pushes, then started again: waits until it logged the copies
  // of both its shards.
  void KillAndRestartServer0(Ledger& ledger);  // defined after Ledger
  // Server 0 holding copies of both shards again: updates are forwarded to it (it is their
  // backup), and serving its own shard again (fail-back); server 1 killed, it takes shard 1 over;
  // the ledger stopped and checked.
  void BackupThenKillServer1(Ledger& ledger);
  std::pair<Subprocess*, Subprocess*> StartCtr(const std::vector<std::string>& extra = {});
  // `sets`: more of the job's fields (KEY=VALUE), on both runs.
  void ExpectKillsChangeNothing(const std::string& job, size_t steps, const std::regex& ending, const char* what,
                                const std::vector<std::string>& sets = {});
  void ExpectCtrLearnt(Subprocess& t0, Subprocess& t1);
  // Server 0's role for its own shard and for the one it backs up, from its statistics.
  void ExpectServer0Roles(const std::string& own, const std::string& other) {
    auto stats = clients_[0]->ServerStats(0);
    ASSERT_TRUE(stats.ok()) << stats.status().ToString();
    auto j = nlohmann::json::parse(*stats);
    EXPECT_EQ(j["role"], own) << *stats;
    EXPECT_EQ(j["backup"]["role"], other) << *stats;
  }
  static size_t Count(const std::string& text, const std::string& needle) {
    size_t n = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
    return n;
  }
  // A push written by hand from trainer 0 to server `to`: gradient 1 for `keys` (of shard 0), push
  // id `id`, as a trainer's retry sends it.
  Status RawPush(int to, const std::vector<uint64_t>& keys, uint64_t id) {
    Node& node = *trainers_[0];
    STRATA_ASSIGN_OR_RETURN(ClusterView view, node.RefreshView());
    STRATA_ASSIGN_OR_RETURN(PeerId peer, node.rpc().Connect(view.Find(Role::kServer, to)->address));
    Message m;
    m.set_shard(0);
    auto b = m.builder().getBody().initPush();
    b.setTable(1);
    b.setPushId(id);
    const auto n = static_cast<int64_t>(keys.size());
    m.AddPayload(DType::kI64, {n}, Buffer::Take(std::vector<uint64_t>(keys)));
    m.AddPayload(DType::kF32, {n, kDim}, Buffer::Take(std::vector<float>(keys.size() * kDim, 1.0f)));
    return node.rpc().CallAndWait(peer, std::move(m), Millis(10000)).status();
  }
  // A pull of `keys` (of shard 0) written by hand from trainer 1 to server `to`, as a trainer
  // whose view is behind sends it.
  Status RawPull(int to, const std::vector<uint64_t>& keys) {
    Node& node = *trainers_[1];
    const ClusterView view = node.view();
    STRATA_ASSIGN_OR_RETURN(PeerId peer, node.rpc().Connect(view.Find(Role::kServer, to)->address));
    Message m;
    m.set_shard(0);
    m.builder().getBody().initPull().setTable(1);
    const auto n = static_cast<int64_t>(keys.size());
    m.AddPayload(DType::kI64, {n}, Buffer::Take(std::vector<uint64_t>(keys)));
    return node.rpc().CallAndWait(peer, std::move(m), Millis(10000)).status();
  }
  static std::vector<uint64_t> Shard0Keys() {
    std::vector<uint64_t> keys;
    for (uint64_t k = 0; keys.size() < 4; ++k) {
      if (SparseServer(k, 2) == 0) keys.push_back(k);
    }
    return keys;
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
    for (Subprocess* server : servers_) {
      if (!server) continue;
      EXPECT_EQ(server->Wait(Millis(20000)), 0) << server->Log();
    }
  }

  std::vector<std::string> common_;
  std::string address_;
  Subprocess* servers_[2] = {nullptr, nullptr};  // each rank's live process
  std::vector<std::unique_ptr<Node>> trainers_;
  std::vector<std::unique_ptr<PsClient>> clients_;
};

// Two trainers pushing +1 to 8 keys over both shards per push until Stop(); what each saw
// acknowledged, per key.
class Ledger {
 public:
  explicit Ledger(std::vector<std::unique_ptr<PsClient>>& clients) : clients_(clients) {
    for (int t = 0; t < 2; ++t) {
      threads_.emplace_back([this, t] {
        const std::vector<float> ones(8 * kDim, 1.0f);
        for (uint64_t i = 0; !stop_; ++i) {
          std::vector<uint64_t> keys;  // 8 distinct keys, rotating
          for (uint64_t j = 0; j < 8; ++j) keys.push_back((i * 5 + t + 8 * j) % kKeys);
          PsTicket tk = clients_[t]->Push(1, keys, ones.data());
          if (Status s = clients_[t]->Wait(tk); !s.ok()) {
            ++failed_;
            ADD_FAILURE() << "trainer " << t << " push " << i << ": " << s.ToString();
            continue;
          }
          for (uint64_t k : keys) ++acked_[t][k];
          ++pushes_[t];
        }
      });
    }
  }
  ~Ledger() { Stop(); }
  // Waits until both trainers had `more` further pushes acknowledged.
  bool PushMore(uint64_t more) {
    const uint64_t target = std::max(pushes_[0].load(), pushes_[1].load()) + more;
    return WaitFor([&] { return pushes_[0] >= target && pushes_[1] >= target; }, Millis(60000));
  }
  void Stop() {
    stop_ = true;
    for (auto& th : threads_) th.join();
    threads_.clear();
  }
  // After Stop: checks `values` (minus the pushes applied to each key) against the acknowledged.
  void Check(const std::vector<float>& values) {
    uint64_t acknowledged = 0, applied = 0, lost = 0, twice = 0;
    for (uint64_t k = 0; k < kKeys; ++k) {
      const uint64_t want = acked_[0][k] + acked_[1][k];
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
                static_cast<unsigned long long>(failed_.load()));
  }

 private:
  std::vector<std::unique_ptr<PsClient>>& clients_;
  std::vector<std::vector<uint64_t>> acked_ = std::vector<std::vector<uint64_t>>(2, std::vector<uint64_t>(kKeys, 0));
  std::atomic<uint64_t> pushes_[2] = {0, 0};
  std::atomic<uint64_t> failed_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::thread> threads_;
};

void ReplicationTest::KillAndRestartServer0(Ledger& ledger) {
  EXPECT_TRUE(ledger.PushMore(50));
  Kill(0);
  EXPECT_TRUE(ledger.PushMore(30));
  servers_[0] = &Start("strata-server", common_, address_, 0);
  // Copies of both shards, then shard 0 handed back by server 1 (fail-back).
  EXPECT_TRUE(WaitFor([&] {
    const std::string log = servers_[0]->Log();
    return Count(log, "copy received") >= 2 && Count(log, "handed it back") >= 1;
  }, Millis(30000))) << servers_[0]->Log();
}

void ReplicationTest::BackupThenKillServer1(Ledger& ledger) {
  EXPECT_TRUE(WaitFor([&] { return Count(servers_[0]->Log(), "handed it back") >= 1; }, Millis(30000)))
      << servers_[0]->Log();
  EXPECT_TRUE(ledger.PushMore(50));  // shard 0 served by server 0 again, shard 1 forwarded to its copy
  ExpectServer0Roles("serving", "backup");
  Kill(1);  // server 0 takes shard 1 over: it serves both
  EXPECT_TRUE(ledger.PushMore(50));
  ledger.Stop();
  ledger.Check(PullAll());
  ExpectServer0Roles("serving", "serving");
}

TEST_F(ReplicationTest, APrimaryKilledLosesNoAcknowledgedUpdateAndAppliesNoneTwice) {
  StartServersAndJoin();
  Ledger ledger(clients_);
  EXPECT_TRUE(ledger.PushMore(50));
  Kill(0);
  EXPECT_TRUE(ledger.PushMore(50));  // server 1 serves shard 0 now
  ledger.Stop();
  ledger.Check(PullAll());
  auto stats = clients_[0]->ServerStats(1);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  const auto j = nlohmann::json::parse(*stats);
  EXPECT_GT(j["replicated_bytes"].get<uint64_t>(), 0u) << *stats;  // shard 1's updates, until server 0 died
  EXPECT_GT(j["backup"]["pushes"].get<uint64_t>(), 0u) << *stats;
  EXPECT_EQ(j["backup"]["role"], "serving") << *stats;
}

// The killed server started again holds nothing; it asks server 1 for copies of both shards,
// takes its own back once its copy is in (fail-back) and backs up shard 1, so that killing
// server 1 then loses nothing either.
TEST_F(ReplicationTest, ARestartedServerTakesItsShardBackAndASecondKillLosesNothing) {
  StartServersAndJoin();
  Ledger ledger(clients_);
  KillAndRestartServer0(ledger);
  // Each copy came in chunks of at most server.migrate_chunk_mb (1 KiB here).
  const std::string log = servers_[0]->Log();
  std::smatch m;
  std::vector<int> chunks;
  for (auto it = log.cbegin(); std::regex_search(it, log.cend(), m, std::regex("rows in ([0-9]+) chunks"));
       it = m.suffix().first) {
    chunks.push_back(std::stoi(m[1]));
  }
  ASSERT_EQ(chunks.size(), 2u) << log;  // one copy of each shard
  for (int n : chunks) EXPECT_GE(n, 2) << log;
  std::cout << "copies in " << chunks[0] << " and " << chunks[1] << " chunks\n";
  BackupThenKillServer1(ledger);
}

// The same with tiered stores (durability wal, a DRAM budget of a few rows, so both shards and
// their copies live in RocksDB): the restarted server finds its stores and its backup copy's
// stores on disk, stale (server 1 served shard 0 meanwhile); its copies replace them whole.
TEST_F(ReplicationTest, ATieredServerRestartedOverItsStaleStoresRejoinsAndASecondKillLosesNothing) {
  StartServersAndJoin({"--set", "server.store.kind=tiered", "--set", "server.store.path=" + dir_.File("stores"),
                       "--set", "server.store.dram_budget_mb=0.001", "--set", "server.store.durability=wal"});
  // Even at the start, each backup took its shard by state transfer (nothing on disk is trusted).
  for (Subprocess* s : servers_) {
    EXPECT_TRUE(WaitFor([&] { return Count(s->Log(), "copy received") >= 1; }, Millis(30000))) << s->Log();
  }
  Ledger ledger(clients_);
  KillAndRestartServer0(ledger);
  EXPECT_NE(servers_[0]->Log().find("table 1 \"ledger\" restored"), std::string::npos)
      << "server 0 did not find its stale store: " << servers_[0]->Log();
  BackupThenKillServer1(ledger);  // server 0 serves both shards from its tiered copies
}

// A push the primary applied and forwarded before it died, retried to the backup with the same
// id (as a trainer does when the reply was lost with the primary): a duplicate there.
TEST_F(ReplicationTest, APushForwardedBeforeTheKillIsADuplicateOnTheBackup) {
  StartServersAndJoin();
  const std::vector<uint64_t> keys = Shard0Keys();
  const uint64_t id = (static_cast<uint64_t>(trainers_[0]->id()) << 40) | (uint64_t{1} << 39);
  ASSERT_TRUE(RawPush(0, keys, id).ok());
  Kill(0);
  Status again = RawPush(1, keys, id);
  ASSERT_TRUE(again.ok()) << again.ToString();
  std::vector<float> values = PullAll();
  for (uint64_t k : keys) EXPECT_EQ(values[k * kDim], -1.0f) << "key " << k;
  auto stats = clients_[0]->ServerStats(1);
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(nlohmann::json::parse(*stats)["backup"]["duplicate_pushes"].get<uint64_t>(), 1u) << *stats;
  ASSERT_TRUE(RawPush(1, keys, id + 1).ok());
  values = PullAll();
  for (uint64_t k : keys) EXPECT_EQ(values[k * kDim], -2.0f) << "key " << k;
}

// Server 0 stopped (SIGSTOP) past the heartbeat timeout is declared dead while it still runs, and
// server 1 takes its shard over. Resumed, server 0 hears it from its next heartbeat's answer (an
// update it applies before that, its backup refuses: it took the shard over): it steps down,
// registers again as a new incarnation, copies both shards and takes its own back, as a restarted
// server does. Killing server 1 then loses no acknowledged update: what server 0 applied and never
// acknowledged went with its old state, and the trainers' retries were applied once, at server 1.
TEST_F(ReplicationTest, AServerDeclaredDeadWhileRunningComesBackTakesItsShardBackAndLosesNothing) {
  StartServersAndJoin();
  Ledger ledger(clients_);
  EXPECT_TRUE(ledger.PushMore(50));
  servers_[0]->Signal(SIGSTOP);
  EXPECT_TRUE(WaitFor([&] { return Count(servers_[1]->Log(), "take-over of shard 0") >= 1; }, Millis(30000)))
      << servers_[1]->Log();
  EXPECT_TRUE(ledger.PushMore(30));  // server 1 serves both shards
  // A pull of shard 0 from a trainer whose view is behind, waiting in server 0's socket: once
  // resumed, server 0 must not answer it with its stale rows (it may be dead in the job's eyes).
  std::vector<uint64_t> shard0;
  for (uint64_t k = 0; k < kKeys && shard0.size() < 4; ++k) {
    if (SparseServer(k, 2) == 0) shard0.push_back(k);
  }
  std::future<Status> stale = std::async(std::launch::async, [&] { return RawPull(0, shard0); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  servers_[0]->Signal(SIGCONT);
  const Status pulled = stale.get();
  EXPECT_EQ(pulled.code(), StatusCode::kUnavailable) << pulled.ToString();
  EXPECT_TRUE(pulled.message().find("was silent past cluster.heartbeat_timeout_ms") != std::string::npos ||
              pulled.message().find(kNotServing) != std::string::npos)
      << pulled.ToString();
  std::cout << "a pull queued at the stopped server: " << pulled.ToString() << "\n";
  EXPECT_TRUE(WaitFor([&] { return Count(servers_[0]->Log(), "copy received") >= 2; }, Millis(30000)))
      << servers_[0]->Log();
  const std::string log = servers_[0]->Log();
  EXPECT_NE(log.find("no heartbeat for"), std::string::npos) << log;
  EXPECT_NE(log.find(std::string(kDeclaredDead)), std::string::npos) << log;
  EXPECT_NE(log.find("re-registered after being declared dead"), std::string::npos) << log;
  BackupThenKillServer1(ledger);
}

// Server 0 stopped past the heartbeat timeout and replaced: a new process takes rank 0 and copies
// its shards back from server 1. The first process, resumed, is told by its next heartbeat's
// answer that a newer process holds its rank, and ends with that error without deregistering
// (which would take the newer process out of the job); nothing acknowledged is lost.
TEST_F(ReplicationTest, AServerReplacedWhileStoppedEndsWhenItWakesAndTheJobLosesNothing) {
  StartServersAndJoin();
  Ledger ledger(clients_);
  EXPECT_TRUE(ledger.PushMore(50));
  Subprocess* stalled = servers_[0];
  stalled->Signal(SIGSTOP);
  EXPECT_TRUE(WaitFor([&] { return Count(servers_[1]->Log(), "take-over of shard 0") >= 1; }, Millis(30000)))
      << servers_[1]->Log();
  EXPECT_TRUE(ledger.PushMore(30));
  servers_[0] = &Start("strata-server", common_, address_, 0);
  EXPECT_TRUE(WaitFor([&] { return Count(servers_[0]->Log(), "copy received") >= 2; }, Millis(30000)))
      << servers_[0]->Log();
  stalled->Signal(SIGCONT);
  EXPECT_EQ(stalled->Wait(Millis(20000)), 1) << stalled->Log();
  const std::string log = stalled->Log();
  EXPECT_NE(log.find(std::string(kSuperseded) + " (incarnation 1"), std::string::npos) << log;
  EXPECT_NE(log.find("this process ends without touching the job"), std::string::npos) << log;
  EXPECT_EQ(log.find("re-registered"), std::string::npos) << log;
  BackupThenKillServer1(ledger);  // the newer server 0 still serves: the ledger loses nothing
}

// Without replication nobody takes a server's keys: the trainers wait for it. Server 0, declared
// dead while stopped, comes back with every table it held and serves them again at once; no
// acknowledged update is lost and none applied twice (the retries of pushes it had applied are
// duplicates).
TEST_F(ReplicationTest, WithoutReplicationAServerDeclaredDeadWhileRunningServesAgainAndLosesNothing) {
  StartServersAndJoin({"--set", "server.replication=none"}, Replication::kNone);
  Ledger ledger(clients_);
  EXPECT_TRUE(ledger.PushMore(50));
  servers_[0]->Signal(SIGSTOP);
  EXPECT_TRUE(WaitFor([&] {
    const ClusterView view = trainers_[0]->view();
    const NodeInfo* n = view.Find(Role::kServer, 0);
    return n && !n->alive;
  }, Millis(30000)));
  servers_[0]->Signal(SIGCONT);
  EXPECT_TRUE(WaitFor([&] { return servers_[0]->Log().find("re-registered after being declared dead") != std::string::npos; },
                      Millis(30000)))
      << servers_[0]->Log();
  EXPECT_NE(servers_[0]->Log().find("it keeps every table"), std::string::npos) << servers_[0]->Log();
  EXPECT_TRUE(ledger.PushMore(50));
  ledger.Stop();
  ledger.Check(PullAll());
}

const char* kCtr =
    "model: {kind: ctr, fields: 8, field_vocab: 300, embed_dim: 8, ctr_hidden: 32}\n"
    "data: {kind: click_log, eval_samples: 20000}\n"
    "optimizer: {kind: adamw, lr: 0.01}\n"
    "sync: {mode: ps}\n"
    "train: {steps: 1000, batch_size: 256, log_every: 25, progress: false}\n";

// The scheduler, both servers and both trainers of the ctr job (`extra`: more --set arguments);
// returns the trainers once they trained a little.
std::pair<Subprocess*, Subprocess*> ReplicationTest::StartCtr(const std::vector<std::string>& extra) {
  common_ = Common(Job("ctr", kCtr));
  common_.insert(common_.end(), extra.begin(), extra.end());
  address_ = StartScheduler(common_, "tcp://127.0.0.1:0");
  servers_[0] = &Start("strata-server", common_, address_, 0);
  servers_[1] = &Start("strata-server", common_, address_, 1);
  Subprocess& t0 = Start("strata-trainer", common_, address_, 0);
  Subprocess& t1 = Start("strata-trainer", common_, address_, 1);
  EXPECT_TRUE(WaitFor([&] { return MetricsLines("run") >= 2; }, Millis(120000))) << t0.Log();
  return {&t0, &t1};
}

// Both trainers exit 0, and trainer 0 trained every step and learnt the planted model.
void ReplicationTest::ExpectCtrLearnt(Subprocess& t0, Subprocess& t1) {
  for (Subprocess* t : {&t0, &t1}) EXPECT_EQ(t->Wait(Millis(180000)), 0) << t->Log();
  const std::string log = t0.Log();
  EXPECT_NE(log.find("done: 1000 steps"), std::string::npos) << log;
  EXPECT_EQ(log.find("not every trainer finished"), std::string::npos) << log;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, std::regex("auc ([0-9.]+) \\(oracle"))) << log;
  EXPECT_GT(std::stod(m[1]), 0.7) << log;  // the planted model was learnt (chance is 0.5)
}

TEST_F(ReplicationTest, CtrTrainsToTheEndWithAPrimaryKilledAndNotRestarted) {
  auto [t0, t1] = StartCtr();
  Kill(0);
  EXPECT_LT(MetricsLines("run"), 1000u / 25) << "server 0 was killed after training ended: make the job longer";
  ExpectCtrLearnt(*t0, *t1);
  ASSERT_TRUE(servers_[1]) << "server 1 was killed";
  const std::string server1 = servers_[1]->Log();
  EXPECT_NE(server1.find("take-over of shard 0 from server 0"), std::string::npos) << server1;
  EXPECT_EQ(server1.find("did not acknowledge"), std::string::npos) << server1;
}

// A trainer stopped (SIGSTOP) past the heartbeat timeout of a fixed SSP job is declared dead
// while it runs; resumed, it registers again by itself (Node::OnDeclaredDead), the servers count
// its clocks again from the one it had (its clock message, refused Unavailable meanwhile, is
// asked again), and both trainers train to the end.
TEST_F(ReplicationTest, ATrainerDeclaredDeadWhileRunningRegistersAgainAndTrainsToTheEnd) {
  auto [t0, t1] = StartCtr({"--set", "server.replication=none", "--set", "cluster.heartbeat_interval_ms=100", "--set",
                            "cluster.heartbeat_timeout_ms=1500", "--set", "sync.consistency=ssp", "--set",
                            "sync.staleness=4"});
  t1->Signal(SIGSTOP);
  EXPECT_TRUE(WaitFor([&] { return schedulers_[0]->Log().find("trainer 1 (node") != std::string::npos &&
                                   schedulers_[0]->Log().find("declared dead") != std::string::npos; },
                      Millis(30000)))
      << schedulers_[0]->Log();
  t1->Signal(SIGCONT);
  EXPECT_LT(MetricsLines("run"), 1000u / 25) << "trainer 0 ended before trainer 1 came back: make the job longer";
  ExpectCtrLearnt(*t0, *t1);
  EXPECT_NE(t1->Log().find("re-registered after being declared dead"), std::string::npos) << t1->Log();
}

const char* kCtrBsp =
    "model: {kind: ctr, fields: 8, field_vocab: 300, embed_dim: 8, ctr_hidden: 32}\n"
    "data: {kind: click_log, eval_samples: 20000}\n"
    "optimizer: {kind: adamw, lr: 0.01}\n"
    "sync: {mode: ps, consistency: bsp}\n"
    "train: {steps: 3000, batch_size: 256, log_every: 25, progress: false}\n";

// BSP with 2 trainers is deterministic (a clock's sum of two pushes is the same float in either
// order), so a job that loses no acknowledged update and counts none twice ends exactly as the
// undisturbed one does: the same final loss, eval loss (and AUC) to the last printed digit.
// Server 0 is killed mid-run and restarted (its copies are taken in the middle of a clock), then
// server 1. `steps`: the job's, to check the kills came before its end.
void ReplicationTest::ExpectKillsChangeNothing(const std::string& job, size_t steps, const std::regex& ending,
                                               const char* what, const std::vector<std::string>& sets) {
  std::string launched;
  std::vector<std::string> undisturbed = {"server.replication=backup"};
  undisturbed.insert(undisturbed.end(), sets.begin(), sets.end());
  ASSERT_EQ(Launch(job, 2, 2, undisturbed, &launched), 0) << launched;
  std::smatch want;
  ASSERT_TRUE(std::regex_search(launched, want, ending)) << launched;

  common_ = Common(job);
  common_.insert(common_.end(), {"--set", "sync.consistency=bsp", "--set", "cluster.heartbeat_timeout_ms=2000"});
  for (const std::string& s : sets) common_.insert(common_.end(), {"--set", s});
  address_ = StartScheduler(common_, "tcp://127.0.0.1:0");
  servers_[0] = &Start("strata-server", common_, address_, 0);
  servers_[1] = &Start("strata-server", common_, address_, 1);
  Subprocess& t0 = Start("strata-trainer", common_, address_, 0);
  Subprocess& t1 = Start("strata-trainer", common_, address_, 1);
  ASSERT_TRUE(WaitFor([&] { return MetricsLines("run") >= 4; }, Millis(120000))) << t0.Log();
  Kill(0);
  servers_[0] = &Start("strata-server", common_, address_, 0);
  // Copies of both shards, then shard 0 taken back (fail-back).
  ASSERT_TRUE(WaitFor([&] {
    const std::string log = servers_[0]->Log();
    return Count(log, "copy received") >= 2 && Count(log, "handed it back") >= 1;
  }, Millis(60000))) << servers_[0]->Log();
  const size_t before = MetricsLines("run");
  ASSERT_TRUE(WaitFor([&] { return MetricsLines("run") >= before + 4; }, Millis(120000))) << t0.Log();
  Kill(1);  // server 0 serves both shards: its own since the fail-back, shard 1 from its copy
  EXPECT_LT(MetricsLines("run"), steps / 25) << "server 1 was killed after training ended: make the job longer";
  for (Subprocess* t : {&t0, &t1}) EXPECT_EQ(t->Wait(Millis(180000)), 0) << t->Log();
  const std::string log = t0.Log();
  std::smatch got;
  ASSERT_TRUE(std::regex_search(log, got, ending)) << log;
  for (size_t i = 1; i < got.size(); ++i) EXPECT_EQ(got[i], want[i]) << "group " << i << " of " << got[0] << "\n" << log;
  std::cout << what << " with kills: " << got[0] << "; undisturbed: " << want[0] << "\n";
  if (HasFailure()) {  // the servers' replication lines: who served what, when
    const std::regex lines("[^\n]*(replication|take-over)[^\n]*\n");
    for (Subprocess* s : servers_) {
      if (!s) continue;
      const std::string text = s->Log();
      for (std::sregex_iterator it(text.begin(), text.end(), lines), end; it != end; ++it) std::cout << it->str();
    }
  }
}

TEST_F(ReplicationTest, BspCtrEndsExactlyAsUndisturbedAfterAKillAndRestartOfEachServer) {
  ExpectKillsChangeNothing(Job("ctr_bsp", kCtrBsp), 3000,
                           std::regex("final loss ([0-9.]+), eval loss ([0-9.]+), auc ([0-9.]+)"), "bsp ctr");
}

// The same in an elastic job, whose clocks complete once the trainers that split each step all
// clocked it (ps/clock_members.h): a shard's copy carries those records and the pushes staged
// until their sender's clock message (stateTransfer.clockMembers, bsp.stagedBy).
TEST_F(ReplicationTest, ElasticBspCtrEndsExactlyAsUndisturbedAfterAKillAndRestartOfEachServer) {
  ExpectKillsChangeNothing(Job("ctr_bsp", kCtrBsp), 3000,
                           std::regex("final loss ([0-9.]+), eval loss ([0-9.]+), auc ([0-9.]+)"), "elastic bsp ctr",
                           {"cluster.elastic=true"});
}

// Offload under BSP: the servers hold the masters and AdamW state, and apply each dense chunk as
// soon as both trainers pushed it (pushers), ahead of the clock messages; a copy taken mid-clock
// carries the chunks that ran ahead (stateTransfer.bsp.chunkNext).
const char* kMlpOffload =
    "model: {kind: mlp, mlp_in: 64, mlp_hidden: 256, mlp_out: 16}\n"
    "data: {kind: regression, eval_samples: 1024, latent_dim: 16}\n"
    "optimizer: {kind: adamw, lr: 0.001}\n"
    "sync: {mode: offload, consistency: bsp}\n"
    "train: {steps: 8000, batch_size: 64, log_every: 25, progress: false}\n";

TEST_F(ReplicationTest, OffloadBspEndsExactlyAsUndisturbedAfterAKillAndRestartOfEachServer) {
  ExpectKillsChangeNothing(Job("mlp_offload", kMlpOffload), 8000,
                           std::regex("final loss ([0-9.]+), eval loss ([0-9.]+)"), "offload bsp mlp");
}

}  // namespace
}  // namespace strata
