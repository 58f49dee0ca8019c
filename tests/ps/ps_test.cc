// ps_test.cc: parameter servers and clients as threads in one process over the in-process
// transport (2 servers, 3 trainers): BSP equals a single-process computation, ASP applies
// every update exactly once, SSP blocks exactly when a trainer runs too far ahead, bad requests
// change nothing, a request reaching a destroyed server is answered Unavailable, a lost trainer
// fails BSP with an error naming it, stores hear every clock of
// the slowest trainer, and recorded tables are restored by a new server.
#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "cluster/scheduler.h"
#include "common/dtype.h"
#include "common/inproc_transport.h"
#include "offload/memory_row_store.h"
#include "offload/tiered_row_store.h"
#include "ps/client.h"
#include "ps/optimizer.h"
#include "ps/server.h"
#include "test_util.h"
#include "tests/ps/memory_store_wrapper.h"
#include "tests/ps/ps_fixture.h"

namespace strata {
namespace {

float Grad(int trainer, int step, uint64_t key, int j) {
  return std::sin(0.7f * trainer + 1.3f * step + 0.11f * key + 0.5f * j);
}

TEST_F(PsTest, BspEqualsSingleProcess) {
  Start();
  OptimizerSpec adam;
  adam.kind = OptimizerKind::kAdam;
  adam.lr = 0.05f;
  const TableSpec sparse = Sparse(1, 4, Consistency::kBsp, adam);
  const TableSpec dense = Dense(2, 10, 3, Consistency::kBsp, adam);
  CreateEverywhere(sparse);
  CreateEverywhere(dense);
  const int steps = 5;
  auto keys_of = [](int t, int k) { return std::vector<uint64_t>{static_cast<uint64_t>(k % 3), 100u + t, 7, 7}; };

  std::vector<std::thread> threads;
  std::vector<std::vector<float>> final_sparse(kTrainers), final_dense(kTrainers);
  for (int t = 0; t < kTrainers; ++t) {
    threads.emplace_back([&, t] {
      PsClient& c = *clients_[t];
      for (int k = 0; k < steps; ++k) {
        auto keys = keys_of(t, k);
        std::vector<float> g(keys.size() * 4), dg(10);
        for (size_t i = 0; i < keys.size(); ++i) {
          for (int j = 0; j < 4; ++j) g[i * 4 + j] = Grad(t, k, keys[i], j);
        }
        for (int j = 0; j < 10; ++j) dg[j] = Grad(t, k, 1000, j);
        PsTicket a = c.Push(1, keys, g.data());
        PsTicket b = c.PushDense(2, dg.data());
        ASSERT_TRUE(c.Wait(a).ok());
        ASSERT_TRUE(c.Wait(b).ok());
        ASSERT_TRUE(c.Clock().ok());
      }
      std::vector<uint64_t> all = {0, 1, 2, 7, 100, 101, 102};
      final_sparse[t].resize(all.size() * 4);
      final_dense[t].resize(10);
      PsTicket p = c.Pull(1, all, final_sparse[t].data());
      PsTicket d = c.PullDense(2, final_dense[t].data());
      ASSERT_TRUE(c.Wait(p).ok());
      ASSERT_TRUE(c.Wait(d).ok());
    });
  }
  for (auto& th : threads) th.join();

  // The same updates in one process: each clock's gradients summed over trainers, then the mean.
  std::map<uint64_t, std::vector<float>> rows;
  std::map<uint64_t, std::vector<float>> chunks;
  for (int k = 0; k < steps; ++k) {
    std::map<uint64_t, std::vector<float>> sum;
    std::vector<float> dsum(10, 0.0f);
    for (int t = 0; t < kTrainers; ++t) {
      for (uint64_t key : keys_of(t, k)) {
        auto& s = sum[key];
        s.resize(4, 0.0f);
        for (int j = 0; j < 4; ++j) s[j] += Grad(t, k, key, j);
      }
      for (int j = 0; j < 10; ++j) dsum[j] += Grad(t, k, 1000, j);
    }
    for (auto& [key, g] : sum) {
      if (!rows.count(key)) rows[key] = FreshRecord(sparse, key);
      ApplyUpdate(adam, sparse.StateSlots(), rows[key], 4, g.data(), 1.0f / kTrainers);
    }
    for (uint64_t c = 0; c < dense.NumChunks(); ++c) {
      if (!chunks.count(c)) chunks[c] = FreshRecord(dense, c);
      ApplyUpdate(adam, dense.StateSlots(), chunks[c], dense.ChunkLength(c), dsum.data() + c * 3, 1.0f / kTrainers);
    }
  }
  std::vector<uint64_t> all = {0, 1, 2, 7, 100, 101, 102};
  for (int t = 0; t < kTrainers; ++t) {
    for (size_t i = 0; i < all.size(); ++i) {
      for (int j = 0; j < 4; ++j) {
        EXPECT_NEAR(final_sparse[t][i * 4 + j], rows[all[i]][j], 1e-5f) << "key " << all[i];
      }
    }
    for (int e = 0; e < 10; ++e) EXPECT_NEAR(final_dense[t][e], chunks[e / 3][e % 3], 1e-5f) << "elem " << e;
  }
}

TEST_F(PsTest, AspAppliesEveryUpdateExactlyOnce) {
  Start();
  OptimizerSpec sgd;
  sgd.lr = 1.0f;
  TableSpec sparse = Sparse(1, 2, Consistency::kAsp, sgd);
  sparse.init = {};
  TableSpec dense = Dense(2, 50, 7, Consistency::kAsp, sgd);
  dense.init = {};
  CreateEverywhere(sparse);
  CreateEverywhere(dense);
  const int pushes = 60;
  std::vector<uint64_t> keys(20);
  for (int i = 0; i < 20; ++i) keys[i] = i * 7919;
  std::vector<std::thread> threads;
  for (int t = 0; t < kTrainers; ++t) {
    threads.emplace_back([&, t] {
      std::vector<float> g(keys.size() * 2, 1.0f), dg(50, 1.0f);
      std::vector<PsTicket> inflight;
      for (int p = 0; p < pushes; ++p) {
        inflight.push_back(clients_[t]->Push(1, keys, g.data()));
        inflight.push_back(clients_[t]->PushDense(2, dg.data()));
      }
      for (auto& tk : inflight) ASSERT_TRUE(clients_[t]->Wait(tk).ok());
    });
  }
  for (auto& th : threads) th.join();
  std::vector<float> out(keys.size() * 2), dout(50);
  PsTicket a = clients_[0]->Pull(1, keys, out.data());
  PsTicket b = clients_[0]->PullDense(2, dout.data());
  ASSERT_TRUE(clients_[0]->Wait(a).ok());
  ASSERT_TRUE(clients_[0]->Wait(b).ok());
  for (float v : out) EXPECT_EQ(v, -static_cast<float>(kTrainers * pushes));
  for (float v : dout) EXPECT_EQ(v, -static_cast<float>(kTrainers * pushes));
}

TEST_F(PsTest, DuplicateKeysInOnePushAreMerged) {
  StartWithZeroSgdTable(1);
  std::vector<uint64_t> keys = {5, 5, 6, 5};
  std::vector<float> g = {1, 2, 10, 4};
  PsTicket p = clients_[0]->Push(1, keys, g.data());
  ASSERT_TRUE(clients_[0]->Wait(p).ok());
  std::vector<float> out(4);
  PsTicket q = clients_[0]->Pull(1, keys, out.data());
  ASSERT_TRUE(clients_[0]->Wait(q).ok());
  EXPECT_EQ(out, (std::vector<float>{-7, -7, -10, -7}));
}

// Sparse rows in bf16 on the wire: a push's gradients rounded (the servers widen them and keep
// fp32 rows), a pull's values rounded and widened into the caller's floats, half the rows'
// bytes each way (the keys stay 8 bytes), and duplicate keys summed before the rounding.
TEST_F(PsTest, SparseRowsTravelInBf16AndTheServersKeepFp32) {
  StartWithZeroSgdTable(3);
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 40; ++k) keys.push_back(k * 7919);  // on both servers
  keys.push_back(keys[3]);                                      // a duplicate
  std::vector<float> g(keys.size() * 3);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.1f + 0.0137f * static_cast<float>(i);
  PsTicket p = clients_[0]->Push(1, keys, g.data(), /*bf16=*/true);
  ASSERT_TRUE(clients_[0]->Wait(p).ok());
  // fp32 pulls see the servers' fp32 rows: minus the bf16 rounding of each key's summed gradient.
  std::vector<float> exact(keys.size() * 3), narrow(keys.size() * 3);
  PsTicket a = clients_[0]->Pull(1, keys, exact.data());
  PsTicket b = clients_[0]->Pull(1, keys, narrow.data(), /*bf16=*/true);
  ASSERT_TRUE(clients_[0]->Wait(a).ok());
  ASSERT_TRUE(clients_[0]->Wait(b).ok());
  const size_t last = keys.size() - 1;
  for (size_t i = 0; i < keys.size(); ++i) {
    for (size_t j = 0; j < 3; ++j) {
      float sum = g[i * 3 + j];
      if (i == 3 || i == last) sum = g[3 * 3 + j] + g[last * 3 + j];
      const float want = -BF16ToFloat(FloatToBF16(sum));
      EXPECT_EQ(exact[i * 3 + j], want) << "key " << keys[i] << "[" << j << "]";
      EXPECT_EQ(narrow[i * 3 + j], BF16ToFloat(FloatToBF16(want))) << "key " << keys[i] << "[" << j << "]";
    }
  }
  // The rows' bytes: 40 distinct keys of 3 values, in 2 bytes each way (plus the f32 pull's 4).
  uint64_t in = 0, out = 0;
  for (auto& s : servers_) {
    const nlohmann::json j = nlohmann::json::parse(s->StatsJson());
    in += j["bytes_in"].get<uint64_t>();
    out += j["bytes_out"].get<uint64_t>();
  }
  EXPECT_EQ(in, 40u * 3 * 2);
  EXPECT_EQ(out, 40u * 3 * 4 + 40u * 3 * 2);
}

TEST_F(PsTest, SspBlocksOnlyWhenTooFarAhead) {
  Start();
  TableSpec t = Sparse(1, 2, Consistency::kSsp);
  t.staleness = 1;
  CreateEverywhere(t);
  std::vector<uint64_t> keys = {1, 2, 3};
  std::vector<float> out(6);
  PsClient& fast = *clients_[0];
  // One clock ahead of the slow trainers: within the staleness, answered at once.
  ASSERT_TRUE(fast.Clock().ok());
  PsTicket ok = fast.Pull(1, keys, out.data());
  EXPECT_TRUE(fast.Wait(ok, Millis(5000)).ok());
  // Two clocks ahead: the pull waits for the slowest trainer.
  ASSERT_TRUE(fast.Clock().ok());
  auto blocked = std::async(std::launch::async, [&] {
    PsTicket p = fast.Pull(1, keys, out.data());
    return fast.Wait(p, Millis(10000));
  });
  EXPECT_EQ(blocked.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);
  ASSERT_TRUE(clients_[1]->Clock().ok());
  EXPECT_EQ(blocked.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout);  // t2 is still at 0
  ASSERT_TRUE(clients_[2]->Clock().ok());
  ASSERT_EQ(blocked.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(blocked.get().ok());
}

TEST_F(PsTest, BadRequestsChangeNothingAndTheServerKeepsServing) {
  const uint64_t key = StartWithSgdRowOnServer0();
  std::vector<uint64_t> keys = {key};
  std::vector<float> before(4), after(4);
  PsTicket p = clients_[0]->Pull(1, keys, before.data());
  ASSERT_TRUE(clients_[0]->Wait(p).ok());

  auto push = [&](uint32_t table, std::vector<uint64_t> ks, std::vector<int64_t> gshape, size_t gfloats) {
    return RawPush(table, std::move(ks), std::move(gshape), gfloats);
  };
  Status s = push(99, {key}, {1, 4}, 4);
  EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
  s = push(1, {key}, {1, 3}, 3);  // wrong dim
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("gradient payload"), std::string::npos) << s.ToString();
  s = push(1, {key, key}, {1, 4}, 4);  // key count does not match the gradients
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  uint64_t other = key + 1;
  while (SparseServer(other, kServers) != 1) ++other;
  s = push(1, {key, other}, {2, 4}, 8);  // one key belongs to the other server (a client on an older layout)
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("belongs to server 1"), std::string::npos) << s.ToString();
  OptimizerSpec sgd;
  sgd.lr = 1.0f;
  TableSpec clash = Sparse(1, 8, Consistency::kAsp, sgd);  // table 1 as made, but dim 8
  s = clients_[1]->CreateTable(clash);
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(s.message().find("held dim 4 vs 8"), std::string::npos) << s.ToString();  // what differs

  PsTicket q = clients_[0]->Pull(1, keys, after.data());
  ASSERT_TRUE(clients_[0]->Wait(q).ok());
  EXPECT_EQ(before, after);  // nothing was partly applied
  auto stats = clients_[0]->ServerStats(0);
  ASSERT_TRUE(stats.ok());
  // Four bad pushes and the clashing create, all refused by server 0.
  EXPECT_NE(stats->find("\"errors\":5"), std::string::npos) << *stats;
}

// A push sent again with the same id (a retry after its reply was lost) is answered and not
// applied twice; another id with the same gradient is applied.
TEST_F(PsTest, ARetriedPushIdIsAppliedOnce) {
  const uint64_t key = StartWithSgdRowOnServer0();
  std::vector<uint64_t> keys = {key};
  std::vector<float> before(4), after(4);
  PsTicket p = clients_[0]->Pull(1, keys, before.data());
  ASSERT_TRUE(clients_[0]->Wait(p).ok());
  auto push = [&](uint64_t id) { return RawPush(1, {key}, {1, 4}, 4, id); };
  ASSERT_TRUE(push(7).ok());
  ASSERT_TRUE(push(7).ok());  // the retry: answered OK
  PsTicket q = clients_[0]->Pull(1, keys, after.data());
  ASSERT_TRUE(clients_[0]->Wait(q).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(after[i], before[i] - 1.0f) << i;  // one step of lr 1
  ASSERT_TRUE(push(8).ok());
  PsTicket r = clients_[0]->Pull(1, keys, after.data());
  ASSERT_TRUE(clients_[0]->Wait(r).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(after[i], (before[i] - 1.0f) - 1.0f) << i;  // two steps
  auto stats = clients_[0]->ServerStats(0);
  ASSERT_TRUE(stats.ok());
  EXPECT_NE(stats->find("\"duplicate_pushes\":1"), std::string::npos) << *stats;
}

// The trainer's learning-rate schedule rides on its pushes: the update uses the push's lr instead
// of the table's; NaN or infinity is refused and changes nothing, and a BSP clock's pushes of one
// key must agree on it.
TEST_F(PsTest, APushCarriesTheLearningRateItIsAppliedWith) {
  const uint64_t key = StartWithSgdRowOnServer0();
  std::vector<uint64_t> keys = {key};
  std::vector<float> before(4), after(4), g(4, 1.0f);
  PsTicket p = clients_[0]->Pull(1, keys, before.data());
  ASSERT_TRUE(clients_[0]->Wait(p).ok());
  clients_[0]->set_lr(0.25f);
  PsTicket q = clients_[0]->Push(1, keys, g.data());
  ASSERT_TRUE(clients_[0]->Wait(q).ok());
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity()}) {
    Status s = RawPush(1, {key}, {1, 4}, 4, 0, bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("is not a finite number"), std::string::npos) << s.ToString();
  }
  PsTicket r = clients_[0]->Pull(1, keys, after.data());
  ASSERT_TRUE(clients_[0]->Wait(r).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(after[i], before[i] - 0.25f) << i;  // lr 0.25, not the table's 1; once
  clients_[0]->set_lr(-1.0f);  // the table's again
  PsTicket q2 = clients_[0]->Push(1, keys, g.data());
  ASSERT_TRUE(clients_[0]->Wait(q2).ok());
  PsTicket r2 = clients_[0]->Pull(1, keys, after.data());
  ASSERT_TRUE(clients_[0]->Wait(r2).ok());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(after[i], (before[i] - 0.25f) - 1.0f) << i;

  OptimizerSpec sgd;
  sgd.lr = 1.0f;
  CreateEverywhere(Sparse(2, 4, Consistency::kBsp, sgd));
  clients_[0]->set_lr(1.0f);
  clients_[1]->set_lr(0.5f);
  PsTicket a = clients_[0]->Push(2, keys, g.data());
  ASSERT_TRUE(clients_[0]->Wait(a).ok());
  PsTicket b = clients_[1]->Push(2, keys, g.data());
  Status s = clients_[1]->Wait(b);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("carries lr 0.5"), std::string::npos) << s.ToString();
}

TEST_F(PsTest, ARequestArrivingAfterTheServerIsDestroyedIsAnsweredUnavailable) {
  // The node (its transport still taking requests) outlives the server, as in strata-server's
  // main: a trainer pushing while the server shuts down must get an answer, not reach freed
  // memory (under load that hung the exit: StopTest.SigtermStopsAServerWhoseSchedulerIsGone).
  const uint64_t key = StartWithSgdRowOnServer0();
  ASSERT_TRUE(RawPush(1, {key}, {1, 4}, 4).ok());
  servers_[0].reset();
  Status s = RawPush(1, {key}, {1, 4}, 4);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("server 0 is stopping"), std::string::npos) << s.ToString();
}

TEST_F(PsTest, ATableHeldAtAnotherDensePlacementIsRoutedByTheServersPlacement) {
  // As after a restart on a store written under the id layout: the servers hold a dense table
  // whose spec differs only in placement from the one the trainer computes now. The trainer
  // adopts the servers' placement and reads back what was pushed, chunk for chunk.
  Start();
  OptimizerSpec sgd;
  sgd.lr = 1.0f;
  TableSpec old_layout = Dense(2, 300, 32, Consistency::kAsp, sgd);  // placement: by id
  ASSERT_TRUE(clients_[0]->CreateTable(old_layout).ok());
  std::vector<float> grads(300);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(i);
  PsTicket push = clients_[0]->PushDense(2, grads.data());
  ASSERT_TRUE(clients_[0]->Wait(push).ok());
  std::vector<float> want(300), got(300);
  PsTicket a = clients_[0]->PullDense(2, want.data());
  ASSERT_TRUE(clients_[0]->Wait(a).ok());

  TableSpec placed = old_layout;
  placed.placement = 1;
  ASSERT_TRUE(clients_[1]->CreateTable(placed).ok());
  PsTicket b = clients_[1]->PullDense(2, got.data());
  ASSERT_TRUE(clients_[1]->Wait(b).ok());
  EXPECT_EQ(got, want);
  // Another difference than the placement is still refused.
  TableSpec other = old_layout;
  other.numel = 301;
  Status s = clients_[1]->CreateTable(other);
  EXPECT_EQ(s.code(), StatusCode::kAlreadyExists) << s.ToString();
}

TEST_F(PsTest, LostTrainerFailsBspNamingIt) {
  // Trainer 2 registers by hand and never heartbeats.
  std::unique_ptr<RpcEndpoint> silent;
  Ticket reg;
  Start(2, [&] {
    silent = std::make_unique<RpcEndpoint>(std::make_unique<InprocTransport>(&hub_));
    ASSERT_TRUE(silent->Bind("mem://silent").ok());
    Message m;
    auto r = m.builder().getBody().initRegister();
    r.setRole(wire::Role::TRAINER);
    r.setAddress("mem://silent");
    r.setRequestedRank(2);
    reg = silent->Call(*silent->Connect("mem://scheduler"), std::move(m), Millis(10000));
  });
  ASSERT_TRUE(reg.Wait(Millis(5000)).ok());
  TableSpec t = Sparse(1, 2, Consistency::kBsp);
  CreateEverywhere(t);
  ASSERT_TRUE(clients_[0]->Clock().ok());
  std::vector<uint64_t> keys = {1, 2, 3, 4};
  std::vector<float> out(8);
  PsTicket p = clients_[0]->Pull(1, keys, out.data());
  Status s = clients_[0]->Wait(p, Millis(10000));
  EXPECT_EQ(s.code(), StatusCode::kAborted) << s.ToString();
  EXPECT_NE(s.message().find("trainer 2"), std::string::npos) << s.ToString();
}

// A MemoryRowStore that records the clocks it is told about.
class ClockRecordingStore final : public testing::MemoryStoreWrapper {
 public:
  ClockRecordingStore(int width, std::mutex* mu, std::vector<std::vector<uint64_t>>* log)
      : MemoryStoreWrapper(width), mu_(mu), log_(log) {
    std::lock_guard lock(*mu_);
    log_->emplace_back();
    index_ = log_->size() - 1;
  }
  Status AdvanceClock(uint64_t clock) override {
    std::lock_guard lock(*mu_);
    (*log_)[index_].push_back(clock);
    return Status::OK();
  }

 private:
  std::mutex* mu_;
  std::vector<std::vector<uint64_t>>* log_;
  size_t index_ = 0;
};

TEST_F(PsTest, StoresHearEveryClockAndRecordedTablesAreRestored) {
  testing::TempDir dir;
  tables_dir_ = dir.path();
  std::mutex mu;
  std::vector<std::vector<uint64_t>> clocks;  // per store created
  factory_ = [&](const TableSpec& spec) -> Result<std::unique_ptr<RowStore>> {
    return std::unique_ptr<RowStore>(std::make_unique<ClockRecordingStore>(spec.RecordWidth(), &mu, &clocks));
  };
  Start();
  const TableSpec sparse = Sparse(1, 4, Consistency::kAsp);
  const TableSpec dense = Dense(2, 100, 32, Consistency::kBsp);
  CreateEverywhere(sparse);
  CreateEverywhere(dense);
  // Clocks advance only when the slowest trainer finishes one: trainer 0 runs 2 ahead first.
  ASSERT_TRUE(clients_[0]->Clock().ok());
  ASSERT_TRUE(clients_[0]->Clock().ok());
  for (size_t t = 1; t < clients_.size(); ++t) ASSERT_TRUE(clients_[t]->Clock().ok());
  for (size_t t = 1; t < clients_.size(); ++t) ASSERT_TRUE(clients_[t]->Clock().ok());
  {
    std::lock_guard lock(mu);
    ASSERT_EQ(clocks.size(), 2u * kServers);  // 2 tables on each server
    for (const auto& c : clocks) EXPECT_EQ(c, (std::vector<uint64_t>{1, 2}));
  }

  // A new server given server 0's tables file re-creates both tables through the factory.
  auto node = MakeNode(Role::kServer, "restarted", 0);
  PsServer restored(*node, RestoreOptions(tables_dir_ + "/tables-0"), factory_);
  ASSERT_TRUE(restored.RestoreTables().ok());
  const std::string stats = restored.StatsJson();
  EXPECT_NE(stats.find("\"sparse1\""), std::string::npos) << stats;
  EXPECT_NE(stats.find("\"dense2\""), std::string::npos) << stats;

  // No file: nothing to restore. A damaged one: Corruption naming it.
  PsServer fresh(*node, RestoreOptions(dir.File("none")), factory_);
  EXPECT_TRUE(fresh.RestoreTables().ok());
  std::string bytes = testing::ReadFile(tables_dir_ + "/tables-0");
  bytes[bytes.size() / 2] ^= 0x5a;
  testing::WriteFile(dir.File("damaged"), bytes);
  PsServer damaged(*node, RestoreOptions(dir.File("damaged")), factory_);
  Status s = damaged.RestoreTables();
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_NE(s.message().find("damaged"), std::string::npos) << s.ToString();
  // One of an older format version (1: FNV-1a checksums) is refused as such.
  bytes = testing::ReadFile(tables_dir_ + "/tables-0");
  ASSERT_EQ(bytes.rfind("strata-tables 2\n", 0), 0u);
  bytes[bytes.find('2')] = '1';
  testing::WriteFile(dir.File("older"), bytes);
  PsServer older(*node, RestoreOptions(dir.File("older")), factory_);
  s = older.RestoreTables();
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  EXPECT_NE(s.message().find("format version 1"), std::string::npos) << s.ToString();
}

// The servers keep the table in tiered stores whose DRAM budget is a tenth of the table: a
// training run through them must give exactly the values of the same updates in one process.
TEST_F(PsTest, TableTenTimesTheDramBudgetTrainsToTheInMemoryValues) {
  testing::TempDir dir;
  constexpr uint64_t kBudget = 64 << 10;  // per server; the table is ~1.2 MB over 2 servers
  std::atomic<int> stores{0};
  factory_ = [&](const TableSpec& spec) -> Result<std::unique_ptr<RowStore>> {
    TieredStoreOptions o;
    o.path = dir.path() + "/store-" + std::to_string(stores++);
    o.dram_budget_bytes = kBudget;
    o.shards = 2;
    STRATA_ASSIGN_OR_RETURN(auto store, TieredRowStore::Open(o, spec.RecordWidth()));
    return std::unique_ptr<RowStore>(std::move(store));
  };
  Start();
  OptimizerSpec adam;
  adam.kind = OptimizerKind::kAdam;
  adam.lr = 0.01f;
  const TableSpec t = Sparse(1, 16, Consistency::kAsp, adam);
  ASSERT_TRUE(clients_[0]->CreateTable(t).ok());

  std::mt19937_64 rng(11);
  std::map<uint64_t, std::vector<float>> reference;
  for (int batch = 0; batch < 30; ++batch) {
    std::vector<uint64_t> keys(500);
    for (auto& k : keys) k = rng() % 4000;
    std::vector<float> g(keys.size() * 16);
    for (size_t i = 0; i < g.size(); ++i) g[i] = Grad(0, batch, keys[i / 16], static_cast<int>(i % 16));
    PsTicket p = clients_[0]->Push(1, keys, g.data());
    ASSERT_TRUE(clients_[0]->Wait(p).ok());
    // The same update in this process: duplicates summed in order, as the client merges them.
    std::map<uint64_t, std::vector<float>> merged;
    for (size_t i = 0; i < keys.size(); ++i) {
      auto [it, fresh] = merged.try_emplace(keys[i], g.begin() + i * 16, g.begin() + (i + 1) * 16);
      if (!fresh) for (int j = 0; j < 16; ++j) it->second[j] += g[i * 16 + j];
    }
    for (auto& [key, sum] : merged) {
      if (!reference.count(key)) reference[key] = FreshRecord(t, key);
      ApplyUpdate(adam, t.StateSlots(), reference[key], 16, sum.data(), 1.0f);
    }
  }
  std::vector<uint64_t> all;
  for (const auto& [key, r] : reference) all.push_back(key);
  std::vector<float> out(all.size() * 16);
  PsTicket q = clients_[0]->Pull(1, all, out.data());
  ASSERT_TRUE(clients_[0]->Wait(q).ok());
  for (size_t i = 0; i < all.size(); ++i) {
    for (int j = 0; j < 16; ++j) ASSERT_EQ(out[i * 16 + j], reference[all[i]][j]) << "key " << all[i];
  }
  // The stores really were over budget: most records lived in RocksDB, not DRAM.
  for (uint32_t s = 0; s < kServers; ++s) {
    auto stats = clients_[0]->ServerStats(s);
    ASSERT_TRUE(stats.ok());
    const auto table = nlohmann::json::parse(*stats)["tables"][0];
    EXPECT_GT(table["records"].get<uint64_t>() * t.RecordWidth() * sizeof(float),
              5 * table["bytes_in_memory"].get<uint64_t>()) << *stats;
  }
}

}  // namespace
}  // namespace strata
