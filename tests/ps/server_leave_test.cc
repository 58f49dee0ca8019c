// server_leave_test.cc: a server leaving an elastic job (PsServer::HandOver, ps/server_leave.cc)
// with servers and a trainer as threads in one process: a push the trainer sent on its old
// layout is refused as moved and re-sent by PsClient to the new owner, applied once; push ids
// move with the rows, so a retry reaching the new owner is a duplicate; the rows given away are
// erased; server 0 and a server holding dense chunks are refused, naming why, and go on serving.
// BSP jobs: tests/ps/elastic_bsp_servers_test.cc.
#include <gtest/gtest.h>

#include <optional>
#include <thread>

#include "common/dtype.h"
#include "tests/ps/elastic_fixture.h"

namespace strata {
namespace {

using testing::kDim;
using testing::kTable;

class ServerLeaveTest : public testing::ElasticPsTest {};

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

// A bf16 pull sent on the old layout is refused as moved, sent on to the new owner and answered
// in bf16 as its own server would have: the rows rounded, widened into the caller's floats.
TEST_F(ServerLeaveTest, ABf16PullOnTheOldLayoutComesBackFromTheNewOwnerInBf16) {
  std::vector<uint64_t> keys(64);
  for (uint64_t k = 0; k < keys.size(); ++k) keys[k] = k;
  ASSERT_TRUE(Push(keys).ok());
  const uint64_t late = KeyOf(1);
  std::vector<float> pushed(kDim);
  for (uint32_t j = 0; j < kDim; ++j) pushed[j] = 0.3f + 0.01f * static_cast<float>(j);  // not bf16 values
  PsTicket p = client_->Push(kTable, std::vector<uint64_t>{late}, pushed.data());
  ASSERT_TRUE(client_->Wait(p).ok());
  std::vector<float> narrow(kDim);
  std::optional<PsTicket> in_flight;
  Status left = servers_[1]->HandOver(Millis(5000), [&] {
    const uint64_t before = Stats(1)["requests"];
    in_flight = client_->Pull(kTable, std::vector<uint64_t>{late}, narrow.data(), /*bf16=*/true);
    for (int i = 0; i < 500 && Stats(1)["requests"] == before; ++i) std::this_thread::sleep_for(Millis(2));
  });
  ASSERT_TRUE(left.ok()) << left.ToString();
  ASSERT_TRUE(in_flight.has_value());
  ASSERT_TRUE(client_->Wait(*in_flight).ok());
  EXPECT_EQ(client_->resplits(), 1u);
  std::vector<float> exact(kDim);
  PsTicket q = client_->Pull(kTable, std::vector<uint64_t>{late}, exact.data());
  ASSERT_TRUE(client_->Wait(q).ok());
  for (uint32_t j = 0; j < kDim; ++j) {
    EXPECT_NE(exact[j], BF16ToFloat(FloatToBF16(exact[j]))) << "an fp32 value that bf16 rounds";
    EXPECT_EQ(narrow[j], BF16ToFloat(FloatToBF16(exact[j]))) << j;
  }
}

TEST_F(ServerLeaveTest, PushIdsMoveWithTheRowsSoARetryAtTheNewOwnerIsADuplicate) {
  const uint64_t key = KeyOf(1);
  const uint64_t id = (uint64_t{nodes_[2]->id()} << 40) | 77;
  ASSERT_TRUE(PushWithId("mem://server1", key, id).ok());  // applied; pretend its reply was lost
  ASSERT_TRUE(servers_[1]->HandOver(Millis(5000)).ok());
  ASSERT_TRUE(PushWithId("mem://server0", key, id).ok());  // the retry, at the key's new owner
  EXPECT_EQ(Stats(0)["duplicate_pushes"], 1);
  EXPECT_EQ(Applied({key})[0], 1.0f);
  // And the old owner refuses it as moved now.
  Status s = PushWithId("mem://server1", key, id + 1);
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
