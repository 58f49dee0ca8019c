// server_leave_test.cc: a server leaving an elastic job (PsServer::HandOver, ps/server_leave.cc)
// with servers and a trainer as threads in one process: a push the trainer sent on its old
// layout is refused as moved and re-sent by PsClient to the new owner, applied once; push ids
// move with the rows, so a retry reaching the new owner is a duplicate; the rows given away are
// erased; server 0 and a server holding dense chunks are refused, naming why, and go on serving.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "ps/client.h"
#include "ps/layout.h"
#include "ps/server.h"
#include "tests/cluster/scheduler_fixture.h"

namespace strata {
namespace {

constexpr uint32_t kTable = 7;
constexpr uint32_t kDim = 2;

class ServerLeaveTest : public testing::SchedulerTest {
 protected:
  // 2 servers and 1 trainer of an elastic job; a sparse SGD table (lr 1: a row is minus the sum
  // of the gradients applied to it) created by the trainer's client.
  void SetUp() override {
    cluster_.elastic = true;
    StartScheduler(2, 1);
    std::vector<std::unique_ptr<Node>> nodes;
    nodes.push_back(MakeNode(Role::kServer, "server0", 0));
    nodes.push_back(MakeNode(Role::kServer, "server1", 1));
    nodes.push_back(MakeNode(Role::kTrainer, "trainer0", 0));
    ServerOptions o;
    o.workers = 2;
    o.stats_interval_ms = 0;
    for (int s = 0; s < 2; ++s) servers_.push_back(std::make_unique<PsServer>(*nodes[s], o));
    JoinAll(nodes);
    nodes_ = std::move(nodes);
    client_ = std::make_unique<PsClient>(*nodes_[2], Millis(10000));
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

  Status Push(const std::vector<uint64_t>& keys) {
    const std::vector<float> ones(keys.size() * kDim, 1.0f);
    PsTicket t = client_->Push(kTable, keys, ones.data());
    return client_->Wait(t);
  }
  // Minus each key's first float: the pushes applied to it.
  std::vector<float> Applied(const std::vector<uint64_t>& keys) {
    std::vector<float> v(keys.size() * kDim);
    PsTicket t = client_->Pull(kTable, keys, v.data());
    EXPECT_TRUE(client_->Wait(t).ok());
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

  std::vector<std::unique_ptr<Node>> nodes_;  // server 0, server 1, trainer 0
  std::vector<std::unique_ptr<PsServer>> servers_;
  std::unique_ptr<PsClient> client_;
};

TEST_F(ServerLeaveTest, APushOnTheOldLayoutIsRefusedAsMovedResentToTheNewOwnerAndAppliedOnce) {
  std::vector<uint64_t> keys(64);
  for (uint64_t k = 0; k < keys.size(); ++k) keys[k] = k;
  ASSERT_TRUE(Push(keys).ok());
  const uint64_t held = Records(1);
  ASSERT_GT(held, 10u);
  const uint64_t late = KeyOf(1);
  std::optional<PsTicket> in_flight;
  // While server 1 is frozen and still in every view, the trainer pushes a key of server 1 there:
  // the push waits for the freeze, and is then refused as moved.
  Status left = servers_[1]->HandOver(Millis(5000), [&] {
    const uint64_t before = Stats(1)["requests"];
    static const std::vector<float> ones(kDim, 1.0f);
    in_flight = client_->Push(kTable, std::vector<uint64_t>{late}, ones.data());
    for (int i = 0; i < 500 && Stats(1)["requests"] == before; ++i) std::this_thread::sleep_for(Millis(2));
  });
  ASSERT_TRUE(left.ok()) << left.ToString();
  ASSERT_TRUE(in_flight.has_value());
  ASSERT_TRUE(client_->Wait(*in_flight).ok());
  // Server 1 answers the push it held once the freeze ends (the trainer may have seen the view
  // first and moved on): refused as moved, never applied there.
  for (int i = 0; i < 1000 && Stats(1)["moved_refused"] == 0; ++i) std::this_thread::sleep_for(Millis(2));
  EXPECT_EQ(Stats(1)["moved_refused"], 1) << servers_[1]->StatsJson();
  EXPECT_EQ(client_->resplits(), 1u);
  // Every key applied once per acknowledged push, all on server 0 now.
  std::vector<uint64_t> all = keys;
  all.push_back(late);
  const std::vector<float> applied = Applied(all);
  for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(applied[i], 1.0f) << "key " << all[i];
  EXPECT_EQ(Stats(0)["rows_moved_in"], held);
  EXPECT_EQ(Stats(0)["duplicate_pushes"], 0);
  EXPECT_EQ(Stats(1)["rows_erased"], held);
  EXPECT_EQ(Records(1), 0u);
  EXPECT_TRUE(servers_[1]->handed_over());
  // The view shows it left, and clocks go to server 0 only.
  const ClusterView view = nodes_[2]->view();
  const NodeInfo* one = view.Find(Role::kServer, 1);
  ASSERT_NE(one, nullptr);
  EXPECT_TRUE(one->left);
  EXPECT_TRUE(client_->Clock().ok());
}

TEST_F(ServerLeaveTest, PushIdsMoveWithTheRowsSoARetryAtTheNewOwnerIsADuplicate) {
  const uint64_t key = KeyOf(1);
  Node& trainer = *nodes_[2];
  auto push = [&](const std::string& to, uint64_t id) -> Status {
    STRATA_ASSIGN_OR_RETURN(PeerId peer, trainer.rpc().Connect(to));
    Message m;
    auto p = m.builder().getBody().initPush();
    p.setTable(kTable);
    p.setPushId(id);
    m.AddPayload(DType::kI64, {1}, Buffer::Copy(&key, sizeof(key)));
    const std::vector<float> ones(kDim, 1.0f);
    m.AddPayload(DType::kF32, {1, kDim}, Buffer::Copy(ones.data(), ones.size() * sizeof(float)));
    return trainer.rpc().CallAndWait(peer, std::move(m), Millis(5000)).status();
  };
  const uint64_t id = (uint64_t{trainer.id()} << 40) | 77;
  ASSERT_TRUE(push("mem://server1", id).ok());  // applied; pretend its reply was lost
  ASSERT_TRUE(servers_[1]->HandOver(Millis(5000)).ok());
  ASSERT_TRUE(push("mem://server0", id).ok());  // the retry, at the key's new owner
  EXPECT_EQ(Stats(0)["duplicate_pushes"], 1);
  EXPECT_EQ(Applied({key})[0], 1.0f);
  // And the old owner refuses it as moved now.
  Status s = push("mem://server1", id + 1);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find(kLayoutMoved), std::string::npos) << s.ToString();
}

TEST_F(ServerLeaveTest, ServerZeroAndAServerWithDenseChunksAreRefusedNamingWhyAndServeOn) {
  Status s = servers_[0]->HandOver(Millis(2000));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("server 0 cannot leave"), std::string::npos) << s.ToString();
  TableSpec dense;
  dense.id = 9;
  dense.name = "weights";
  dense.kind = TableKind::kDense;
  dense.numel = 64;
  dense.chunk_floats = 16;
  ASSERT_TRUE(client_->CreateTable(dense).ok());
  s = servers_[1]->HandOver(Millis(2000));
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("dense table \"weights\""), std::string::npos) << s.ToString();
  EXPECT_FALSE(servers_[1]->handed_over());
  const uint64_t key = KeyOf(1);
  ASSERT_TRUE(Push({key}).ok());
  EXPECT_EQ(Applied({key})[0], 1.0f);
  EXPECT_EQ(Stats(1)["moved_refused"], 0);
}

}  // namespace
}  // namespace strata
