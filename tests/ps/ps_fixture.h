// ps_fixture.h: PsTest, parameter servers and clients as threads in one process over the
// in-process transport (2 servers, 3 trainers), and the table specs the ps tests share.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "cluster/scheduler.h"
#include "common/inproc_transport.h"
#include "mem_node.h"
#include "ps/client.h"
#include "ps/server.h"

namespace strata {

constexpr int kServers = 2;
constexpr int kTrainers = 3;

// One worker, no statistics, tables recorded in (and restored from) `tables_file`.
inline ServerOptions RestoreOptions(std::string tables_file) {
  ServerOptions o;
  o.workers = 1;
  o.stats_interval_ms = 0;
  o.tables_file = std::move(tables_file);
  return o;
}

inline TableSpec Sparse(uint32_t id, uint32_t dim, Consistency c, OptimizerSpec o = {});  // below

class PsTest : public ::testing::Test {
 protected:
  // Starts the scheduler, the servers and `real_trainers` trainer nodes (the rest of the
  // kTrainers slots may be filled by the test), and joins them all.
  void Start(int real_trainers = kTrainers, std::function<void()> extra_joins = nullptr) {
    cluster_.scheduler = "mem://scheduler";
    cluster_.servers = kServers;
    cluster_.trainers = kTrainers;
    cluster_.heartbeat_interval_ms = 20;
    cluster_.heartbeat_timeout_ms = 2000;  // generous: a loaded CI machine must not fake deaths
    scheduler_ = std::make_unique<Scheduler>(SchedulerOptions{cluster_},
                                             std::make_unique<InprocTransport>(&hub_));
    ASSERT_TRUE(scheduler_->Start("mem://scheduler").ok());
    std::vector<std::future<Status>> joins;
    for (int s = 0; s < kServers; ++s) {
      server_nodes_.push_back(MakeNode(Role::kServer, "server" + std::to_string(s), s));
      ServerOptions options;
      options.stats_interval_ms = 0;
      if (!tables_dir_.empty()) options.tables_file = tables_dir_ + "/tables-" + std::to_string(s);
      servers_.push_back(std::make_unique<PsServer>(*server_nodes_.back(), options, factory_));
    }
    for (int t = 0; t < real_trainers; ++t) {
      trainer_nodes_.push_back(MakeNode(Role::kTrainer, "trainer" + std::to_string(t), t));
    }
    for (auto& n : server_nodes_) joins.push_back(std::async(std::launch::async, [&n] { return n->Join(); }));
    for (auto& n : trainer_nodes_) joins.push_back(std::async(std::launch::async, [&n] { return n->Join(); }));
    if (extra_joins) extra_joins();
    for (auto& j : joins) ASSERT_TRUE(j.get().ok());
    for (auto& n : trainer_nodes_) clients_.push_back(std::make_unique<PsClient>(*n, Millis(10000)));
  }

  std::unique_ptr<Node> MakeNode(Role role, const std::string& name, int rank) {
    return testing::MakeMemNode(cluster_, &hub_, role, name, rank);
  }

  void CreateEverywhere(const TableSpec& spec) {
    for (auto& c : clients_) ASSERT_TRUE(c->CreateTable(spec).ok());
  }

  void TearDown() override {
    clients_.clear();
    for (auto& n : trainer_nodes_) (void)n->Leave();
    servers_.clear();
    trainer_nodes_.clear();
    server_nodes_.clear();
    scheduler_.reset();
  }

  // Starts the cluster with table 1: sparse, `dim` floats a row, ASP, SGD at lr 1, rows from
  // zero (a row is minus the sum of its gradients).
  void StartWithZeroSgdTable(uint32_t dim) {
    Start();
    OptimizerSpec sgd;
    sgd.lr = 1.0f;
    TableSpec t = Sparse(1, dim, Consistency::kAsp, sgd);
    t.init = {};
    CreateEverywhere(t);
  }

  // Starts the cluster with table 1 (sparse, dim 4, ASP, SGD at lr 1) and returns a key that
  // lives on server 0.
  uint64_t StartWithSgdRowOnServer0() {
    Start();
    OptimizerSpec sgd;
    sgd.lr = 1.0f;
    CreateEverywhere(Sparse(1, 4, Consistency::kAsp, sgd));
    uint64_t key = 0;
    while (SparseServer(key, kServers) != 0) ++key;
    return key;
  }

  // A push written by hand (bypassing PsClient's checks) from trainer 0 to server 0: sparse
  // keys `ks` with `gfloats` gradients of 1 shaped `gshape`, push id `id` (0: none) and
  // learning rate `lr` (negative: the table's).
  Status RawPush(uint32_t table, std::vector<uint64_t> ks, std::vector<int64_t> gshape, size_t gfloats,
                 uint64_t id = 0, float lr = -1.0f) {
    Node& node = *trainer_nodes_[0];
    const PeerId server0 = *node.rpc().Connect("mem://server0");
    Message m;
    auto b = m.builder().getBody().initPush();
    b.setTable(table);
    b.setPushId(id);
    b.setLr(lr);
    const auto n = static_cast<int64_t>(ks.size());
    m.AddPayload(DType::kI64, {n}, Buffer::Take(std::move(ks)));
    m.AddPayload(DType::kF32, gshape, Buffer::Take(std::vector<float>(gfloats, 1.0f)));
    return node.rpc().CallAndWait(server0, std::move(m)).status();
  }

  InprocHub hub_;
  ClusterOptions cluster_;
  std::string tables_dir_;  // set: servers record their tables under it
  StoreFactory factory_;    // set: the servers' stores
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::unique_ptr<Node>> server_nodes_, trainer_nodes_;
  std::vector<std::unique_ptr<PsServer>> servers_;
  std::vector<std::unique_ptr<PsClient>> clients_;
};

inline TableSpec Sparse(uint32_t id, uint32_t dim, Consistency c, OptimizerSpec o) {
  TableSpec t;
  t.id = id;
  t.name = "sparse" + std::to_string(id);
  t.kind = TableKind::kSparse;
  t.dim = dim;
  t.optimizer = o;
  t.init = InitSpec::Of(InitKind::kNormal, 0.0f, 0.1f, 9);
  t.consistency = c;
  return t;
}

inline TableSpec Dense(uint32_t id, uint64_t numel, uint32_t chunk, Consistency c, OptimizerSpec o = {}) {
  TableSpec t = Sparse(id, 1, c, o);
  t.name = "dense" + std::to_string(id);
  t.kind = TableKind::kDense;
  t.numel = numel;
  t.chunk_floats = chunk;
  return t;
}

// A record initialised exactly as the server does it.
inline std::vector<float> FreshRecord(const TableSpec& t, uint64_t key) {
  std::vector<float> r(t.RecordWidth(), 0.0f);
  const uint32_t n = t.RowFloats();
  if (t.kind == TableKind::kSparse) {
    InitValues(t.init, key, std::span<float>(r).first(n));
  } else {
    InitDenseValues(t.init, key * t.chunk_floats, std::span<float>(r).first(t.ChunkLength(key)));
  }
  SetRecordStep(r, 0);
  return r;
}

}  // namespace strata
