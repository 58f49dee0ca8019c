// elastic_fixture.h: ElasticPsTest, an elastic job's servers and a trainer as threads in one
// process (the in-process transport), shared by the server leave and join tests: 2 servers and
// 1 trainer, a sparse SGD table created by the trainer's client, and helpers to push, read the
// pushes applied back, add a joining server and read the servers' statistics.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ps/client.h"
#include "ps/layout.h"
#include "ps/server.h"
#include "tests/cluster/scheduler_fixture.h"

namespace strata::testing {

inline constexpr uint32_t kTable = 7;
inline constexpr uint32_t kDim = 2;

class ElasticPsTest : public SchedulerTest {
 protected:
  // 2 servers and 1 trainer of an elastic job; a sparse SGD table (lr 1: a row is minus the sum
  // of the gradients applied to it) created by the trainer's client. Set options_ before.
  void SetUp() override {
    cluster_.elastic = true;
    StartScheduler(2, 1);
    std::vector<std::unique_ptr<Node>> nodes;
    nodes.push_back(MakeNode(Role::kServer, "server0", 0, false, &server0_transport_));
    nodes.push_back(MakeNode(Role::kServer, "server1", 1));
    nodes.push_back(MakeNode(Role::kTrainer, "trainer0", 0));
    for (int s = 0; s < 2; ++s) servers_.push_back(std::make_unique<PsServer>(*nodes[s], options_));
    JoinAll(nodes);
    nodes_ = std::move(nodes);
    client_ = std::make_unique<PsClient>(*nodes_[2], Millis(10000), options_.replication);
    TableSpec t;
    t.id = kTable;
    t.name = "rows";
    t.kind = TableKind::kSparse;
    t.dim = kDim;
    t.optimizer.lr = 1.0f;
    t.consistency = Consistency::kAsp;
    ASSERT_TRUE(client_->CreateTable(t).ok());
  }
  void TearDown() override {
    client_.reset();
    for (auto& n : nodes_) (void)n->Leave(Millis(1000));
    servers_.clear();
  }

  // A third server joining the running job (node mem://server2, nodes_[3], servers_[2]): it
  // takes its rows over from the first two (PsServer::TakeOver).
  Status AddServer(Millis take_over_timeout = Millis(10000)) {
    nodes_.push_back(MakeNode(Role::kServer, "server2", -1, /*join=*/true, &joiner_transport_));
    servers_.push_back(std::make_unique<PsServer>(*nodes_.back(), options_));
    servers_.back()->ExpectTakeOver();
    STRATA_RETURN_IF_ERROR(nodes_.back()->Join());
    return servers_.back()->TakeOver(take_over_timeout);
  }

  Status Push(const std::vector<uint64_t>& keys, uint32_t table = kTable, uint32_t dim = kDim) {
    const std::vector<float> ones(keys.size() * dim, 1.0f);
    PsTicket t = client_->Push(table, keys, ones.data());
    return client_->Wait(t);
  }
  // A push of +1 to `key` of table kTable with push id `id`, from the trainer straight to the
  // server at `to` (mem://serverN), without PsClient's routing and retries.
  Status PushWithId(const std::string& to, uint64_t key, uint64_t id) {
    Node& trainer = *nodes_[2];
    STRATA_ASSIGN_OR_RETURN(PeerId peer, trainer.rpc().Connect(to));
    Message m;
    auto p = m.builder().getBody().initPush();
    p.setTable(kTable);
    p.setPushId(id);
    m.AddPayload(DType::kI64, {1}, Buffer::Copy(&key, sizeof(key)));
    const std::vector<float> ones(kDim, 1.0f);
    m.AddPayload(DType::kF32, {1, kDim}, Buffer::Copy(ones.data(), ones.size() * sizeof(float)));
    return trainer.rpc().CallAndWait(peer, std::move(m), Millis(5000)).status();
  }
  // The values of `keys` of a table (dim floats each).
  std::vector<float> Values(const std::vector<uint64_t>& keys, uint32_t table = kTable, uint32_t dim = kDim) {
    std::vector<float> v(keys.size() * dim);
    PsTicket t = client_->Pull(table, keys, v.data());
    EXPECT_TRUE(client_->Wait(t).ok());
    return v;
  }
  // Minus each key's first float: the pushes applied to it.
  std::vector<float> Applied(const std::vector<uint64_t>& keys) {
    const std::vector<float> v = Values(keys);
    std::vector<float> applied;
    for (size_t i = 0; i < keys.size(); ++i) applied.push_back(-v[i * kDim]);
    return applied;
  }
  nlohmann::json Stats(int server) { return nlohmann::json::parse(servers_[server]->StatsJson()); }
  uint64_t Records(int server) {
    uint64_t n = 0;
    const nlohmann::json stats = Stats(server);
    for (const auto& t : stats["tables"]) n += t.value("records", uint64_t{0});
    return n;
  }
  // A key that server `server` holds in the job's first layout.
  static uint64_t KeyOf(uint32_t server) {
    uint64_t k = 1000;
    while (SparseServer(k, 2) != server) ++k;
    return k;
  }

  ServerOptions options_ = [] {
    ServerOptions o;
    o.workers = 2;
    o.stats_interval_ms = 0;
    return o;
  }();
  // Server 0's and AddServer's joining server's transports (faults, timeouts). Set before SetUp.
  TransportOptions server0_transport_ = [] {
    TransportOptions t;
    t.request_timeout_ms = 10000;
    return t;
  }();
  TransportOptions joiner_transport_ = server0_transport_;
  std::vector<std::unique_ptr<Node>> nodes_;  // server 0, server 1, trainer 0 (then a joined server)
  std::vector<std::unique_ptr<PsServer>> servers_;
  std::unique_ptr<PsClient> client_;
};

}  // namespace strata::testing
