// chaos_ledger.cc: RunLedger (chaos_ledger.h).
#include "tools/bench/chaos_ledger.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cluster/node.h"
#include "ps/client.h"
#include "tools/bench/chaos_cluster.h"

namespace strata::bench {
namespace {

namespace fs = std::filesystem;
using Millis = std::chrono::milliseconds;

constexpr uint32_t kDim = 4;
constexpr uint64_t kKeys = 64;
constexpr uint64_t kKeysPerPush = 8;

// Push i of trainer t: 8 distinct keys (7j mod 64 differ for j < 8), spread over the table.
std::vector<uint64_t> PushKeys(uint64_t i, int t) {
  std::vector<uint64_t> keys;
  for (uint64_t j = 0; j < kKeysPerPush; ++j) keys.push_back((i * 5 + static_cast<uint64_t>(t) + 7 * j) % kKeys);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

// What one trainer's pushes left in the ledger, by key.
struct Counts {
  std::vector<uint64_t> acked = std::vector<uint64_t>(kKeys, 0);
  std::vector<uint64_t> uncertain = std::vector<uint64_t>(kKeys, 0);  // keys of failed pushes
  uint64_t failed = 0;
};

}  // namespace

// Two in-process trainers push +1 per key per push (SGD, lr 1: a key's value is minus the
// pushes applied to it) while the servers are killed and started again.
LedgerFigures RunLedger(const LedgerOptions& o) {
  LedgerFigures f;
  const fs::path dir = o.work / "ledger";
  fs::create_directories(dir);
  const fs::path job = dir / "job.yaml";
  const int servers = o.replication ? 2 : 1;
  std::ofstream out(job);
  out << "cluster: {heartbeat_interval_ms: 100, heartbeat_timeout_ms: 1500}\n";
  if (o.replication) {
    out << "server: {stats_interval_ms: 0, replication: backup}\n";
  } else {
    out << "server: {stats_interval_ms: 0, store: {kind: tiered, path: " << (dir / "store").string()
        << ", dram_budget_mb: 1, durability: wal}}\n";
  }
  out.close();
  ChaosClusterOptions c;
  c.bin_dir = o.bin_dir;
  c.job = job.string();
  c.work = dir.string();
  c.servers = servers;
  c.trainers = 0;  // in this process
  c.sets = {"cluster.servers=" + std::to_string(servers), "cluster.trainers=2"};
  if (!o.replication) {
    c.server_sets = {"transport.fault.drop_rate=" + std::to_string(o.drop_rate), "transport.fault.seed=11"};
  }
  auto cluster = ChaosCluster::Start(c);
  if (!cluster.ok()) {
    f.error = cluster.status().ToString();
    return f;
  }
  ChaosCluster& cl = **cluster;
  std::atomic<int> rejoins{0};  // outlives the nodes, whose heartbeat threads count into it
  std::vector<std::unique_ptr<Node>> nodes;
  std::vector<std::unique_ptr<PsClient>> clients;
  for (int t = 0; t < 2; ++t) {
    NodeOptions n;
    n.cluster.scheduler = cl.scheduler_address();
    n.cluster.servers = servers;
    n.cluster.trainers = 2;
    n.cluster.heartbeat_interval_ms = 100;
    n.cluster.heartbeat_timeout_ms = 1500;
    n.role = Role::kTrainer;
    n.requested_rank = t;
    nodes.push_back(std::make_unique<Node>(n));
    // As strata-trainer in an ASP ps job: declared dead while it ran (this process starved past
    // the heartbeat timeout on a loaded host), it registers again and goes on. Without this its
    // Node would end, and a push it waited for then would fail though the server applied it.
    nodes.back()->OnDeclaredDead([] {}, [&rejoins] { ++rejoins; });
  }
  std::vector<std::future<Status>> joins;
  for (auto& n : nodes) joins.push_back(std::async(std::launch::async, [&n] { return n->Join(); }));
  for (auto& j : joins) {
    if (Status s = j.get(); !s.ok()) f.error = s.ToString();
  }
  if (!f.error.empty()) return f;
  for (auto& n : nodes) {
    clients.push_back(std::make_unique<PsClient>(*n, Millis(30000),
                                                 o.replication ? Replication::kBackup : Replication::kNone));
  }
  TableSpec spec;
  spec.id = 1;
  spec.name = "ledger";
  spec.kind = TableKind::kSparse;
  spec.dim = kDim;
  spec.optimizer.lr = 1.0f;
  spec.consistency = Consistency::kAsp;
  for (auto& client : clients) {
    if (Status s = client->CreateTable(spec); !s.ok()) f.error = s.ToString();
  }
  if (!f.error.empty()) return f;
  std::vector<Counts> counts(2);
  std::mutex failure_mu;
  std::atomic<bool> stop{false};
  std::vector<std::thread> pushers;
  for (int t = 0; t < 2; ++t) {
    pushers.emplace_back([&, t] {
      const std::vector<float> ones(kKeysPerPush * kDim, 1.0f);
      Counts& mine = counts[t];
      for (uint64_t i = 0; !stop; ++i) {
        const std::vector<uint64_t> keys = PushKeys(i, t);
        PsTicket tk = clients[t]->Push(1, keys, ones.data());
        Status s = clients[t]->Wait(tk);
        for (uint64_t k : keys) ++(s.ok() ? mine.acked : mine.uncertain)[k];
        if (s.ok()) continue;
        ++mine.failed;
        std::lock_guard lock(failure_mu);
        if (f.first_failure.empty()) f.first_failure = "trainer " + std::to_string(t) + ": " + s.ToString();
      }
    });
  }
  for (int k = 0; k < o.cycles; ++k) {
    std::this_thread::sleep_for(Millis(static_cast<int>(o.fault_interval_s * 1000)));
    if (Status s = o.kill_and_restart(cl, o.replication ? k % servers : 0); !s.ok()) {
      f.error = s.ToString();
      break;
    }
    ++f.kills;
  }
  std::this_thread::sleep_for(Millis(static_cast<int>(o.fault_interval_s * 1000)));
  stop = true;
  for (auto& p : pushers) p.join();
  std::vector<uint64_t> keys(kKeys);
  for (uint64_t k = 0; k < kKeys; ++k) keys[k] = k;
  std::vector<float> values(kKeys * kDim);
  PsTicket p = clients[0]->Pull(1, keys, values.data());
  if (Status s = clients[0]->Wait(p); !s.ok()) {
    f.error = s.ToString();
  } else {
    for (uint64_t k = 0; k < kKeys; ++k) {
      const uint64_t want = counts[0].acked[k] + counts[1].acked[k];
      const uint64_t maybe = counts[0].uncertain[k] + counts[1].uncertain[k];
      const auto got = static_cast<uint64_t>(std::llround(-values[k * kDim]));
      f.acknowledged += want;
      f.uncertain += maybe;
      f.applied += got;
      if (got < want) f.lost += want - got;
      if (got > want) f.failed_applied += std::min(got - want, maybe);
      if (got > want + maybe) f.duplicated += got - want - maybe;
    }
  }
  f.retries = clients[0]->retries() + clients[1]->retries();
  f.failed = counts[0].failed + counts[1].failed;
  f.trainer_rejoins = rejoins;
  clients.clear();
  for (auto& n : nodes) (void)n->Leave(Millis(2000));
  (void)cl.Stop(Millis(20000));
  return f;
}

}  // namespace strata::bench
