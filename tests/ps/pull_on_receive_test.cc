// pull_on_receive_test.cc: PsServer answers a pull of fresh dense snapshots on the thread that
// received it (TryPullOnReceive), and that shortcut keeps the order a sender's requests run in:
// a pull sent right behind its sender's push of the same chunk still sees the push, and pulls
// the shortcut must not answer (stale chunks, bf16, a clock not reached) go to the workers.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/dtype.h"
#include "ps_fixture.h"
#include "test_util.h"

namespace strata {
namespace {

class PullOnReceiveTest : public PsTest {
 protected:
  // Pulls answered on the receive thread, over both servers (asked by the last trainer, so that
  // trainer 0's own requests stay the only ones it has in flight).
  uint64_t PullsOnReceive() {
    uint64_t n = 0;
    for (uint32_t s = 0; s < kServers; ++s) {
      auto stats = clients_[kTrainers - 1]->ServerStats(s);
      EXPECT_TRUE(stats.ok()) << stats.status().ToString();
      if (stats.ok()) n += nlohmann::json::parse(*stats).at("pulls_on_receive").get<uint64_t>();
    }
    return n;
  }

  Status PullAndWait(uint32_t table, std::vector<float>& out, bool bf16 = false) {
    PsTicket tk = clients_[0]->PullDense(table, out.data(), bf16);
    return clients_[0]->Wait(tk);
  }

  // Trainer 0 pulls until one of its pulls is answered on the receive thread (one that reaches
  // a server before the worker that answered the last one has let go of it goes to a worker).
  bool PullUntilOneIsAnsweredOnReceive(uint32_t table, std::vector<float>& out) {
    return testing::WaitFor([&] {
      const uint64_t before = PullsOnReceive();
      return PullAndWait(table, out).ok() && PullsOnReceive() > before;
    }, Millis(10000));
  }

  // A dense table of one chunk of `floats` zeros, SGD at lr 1 (a push of -1 adds 1), on every
  // trainer's client.
  TableSpec CreateZeros(uint32_t id, uint32_t floats, Consistency c) {
    OptimizerSpec sgd;
    sgd.lr = 1.0f;
    TableSpec t = Dense(id, floats, floats, c, sgd);
    t.init = {};
    CreateEverywhere(t);
    return t;
  }
};

TEST_F(PullOnReceiveTest, FreshSnapshotsAreAnsweredOnTheReceiveThreadWithTheSameValues) {
  Start();
  OptimizerSpec sgd;
  sgd.lr = 1.0f;
  const TableSpec t = Dense(1, 1000, 128, Consistency::kAsp, sgd);  // 8 chunks on 2 servers
  CreateEverywhere(t);
  std::vector<float> first(t.numel), again(t.numel);
  ASSERT_TRUE(PullAndWait(1, first).ok());  // the chunks' snapshots are made by the workers
  for (uint64_t i = 0; i < t.numel; ++i) {
    const uint64_t chunk = i / t.chunk_floats;
    ASSERT_EQ(first[i], FreshRecord(t, chunk)[i % t.chunk_floats]) << i;
  }
  ASSERT_TRUE(PullUntilOneIsAnsweredOnReceive(1, again));
  EXPECT_EQ(again, first);

  // A push makes its chunks stale: the next pull reads them on a worker, and sees the push.
  std::vector<float> grads(t.numel, 0.5f);
  PsTicket push = clients_[0]->PushDense(1, grads.data());
  ASSERT_TRUE(clients_[0]->Wait(push).ok());
  ASSERT_TRUE(PullAndWait(1, again).ok());
  for (uint64_t i = 0; i < t.numel; ++i) ASSERT_EQ(again[i], first[i] - 0.5f) << i;

  // bf16 is rounded on a worker, never on the receive thread.
  const uint64_t before = PullsOnReceive();
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(PullAndWait(1, again, /*bf16=*/true).ok());
  EXPECT_EQ(PullsOnReceive(), before);
  for (uint64_t i = 0; i < t.numel; ++i) ASSERT_NEAR(again[i], first[i] - 0.5f, 1e-2f * std::abs(first[i] - 0.5f)) << i;
  // Kept in bf16 (PullDenseBf16): the same values, unwidened.
  std::vector<uint16_t> narrow(t.numel);
  PsTicket tk = clients_[0]->PullDenseBf16(1, narrow.data());
  ASSERT_TRUE(clients_[0]->Wait(tk).ok());
  for (uint64_t i = 0; i < t.numel; ++i) ASSERT_EQ(BF16ToFloat(narrow[i]), again[i]) << i;
  EXPECT_EQ(PullsOnReceive(), before);
}

TEST_F(PullOnReceiveTest, APullRightBehindItsSendersPushSeesThePush) {
  // One chunk of 4 Ki floats at zero; every push of -1 (SGD, lr 1) adds 1. Each round pulls
  // first (so the chunk's snapshot is fresh), then sends a push and a pull without waiting in
  // between: the pull must be ordered behind the push, though the snapshot it would find on
  // arrival is still the old one until a worker applies the push.
  Start();
  const TableSpec t = CreateZeros(1, 4096, Consistency::kAsp);
  std::vector<float> out(t.numel), grads(t.numel, -1.0f);
  constexpr int kRounds = 100;
  int wrong = 0;
  for (int round = 1; round <= kRounds; ++round) {
    ASSERT_TRUE(PullAndWait(1, out).ok());
    PsTicket push = clients_[0]->PushDense(1, grads.data());
    PsTicket pull = clients_[0]->PullDense(1, out.data());
    ASSERT_TRUE(clients_[0]->Wait(push).ok());
    ASSERT_TRUE(clients_[0]->Wait(pull).ok());
    if (!std::all_of(out.begin(), out.end(), [&](float x) { return x == static_cast<float>(round); })) ++wrong;
  }
  EXPECT_EQ(wrong, 0) << "of " << kRounds << " pulls missed the push sent just before them";
  EXPECT_GT(PullsOnReceive(), 0u) << "the rounds' first pulls should have taken the shortcut";
}

// The offload step: push, then pull the chunk back. A chunk that pulls read gets its next
// snapshot from the update itself, so the pull after the push finds it fresh.
TEST_F(PullOnReceiveTest, ThePullAfterAPushOfAChunkPullsReadIsAnsweredOnTheReceiveThread) {
  Start();
  for (Consistency c : {Consistency::kAsp, Consistency::kBsp}) {
    const uint32_t id = c == Consistency::kAsp ? 1 : 2;
    const TableSpec t = CreateZeros(id, 4096, c);
    std::vector<float> out(t.numel), grads(t.numel, -1.0f);
    ASSERT_TRUE(PullUntilOneIsAnsweredOnReceive(id, out));
    int answered_on_receive = 0;
    for (int round = 1; round <= 30; ++round) {
      // BSP: every trainer pushes -1 and clocks (the mean is -1); ASP: trainer 0 alone.
      for (int tr = 0; tr < (c == Consistency::kBsp ? kTrainers : 1); ++tr) {
        PsTicket push = clients_[tr]->PushDense(id, grads.data());
        ASSERT_TRUE(clients_[tr]->Wait(push).ok());
        if (c == Consistency::kBsp) {
          ASSERT_TRUE(clients_[tr]->Clock().ok());
        }
      }
      const uint64_t before = PullsOnReceive();
      ASSERT_TRUE(PullAndWait(id, out).ok());
      if (PullsOnReceive() > before) ++answered_on_receive;
      ASSERT_TRUE(std::all_of(out.begin(), out.end(), [&](float x) { return x == static_cast<float>(round); }))
          << "table " << id << " round " << round << ": " << out[0];
    }
    // A pull that reaches the server before the push's worker has let go of its sender goes to
    // a worker; most must not.
    EXPECT_GT(answered_on_receive, 0) << "table " << id;
  }
}

TEST_F(PullOnReceiveTest, APullBeforeItsBspClockStillWaitsForIt) {
  Start();
  const TableSpec t = CreateZeros(1, 256, Consistency::kBsp);
  std::vector<float> out(t.numel), grads(t.numel, -1.0f);
  ASSERT_TRUE(PullUntilOneIsAnsweredOnReceive(1, out));  // clock 0: fresh snapshots from here on
  // Every trainer pushes 1 and clocks, except trainer 2, which only clocks late: trainer 0's
  // pull at clock 1 must wait for the clock, though the chunk's snapshot of clock 0 is fresh.
  for (int tr = 0; tr < 2; ++tr) {
    PsTicket p = clients_[tr]->PushDense(1, grads.data());
    ASSERT_TRUE(clients_[tr]->Wait(p).ok());
    ASSERT_TRUE(clients_[tr]->Clock().ok());
  }
  PsTicket early = clients_[0]->PullDense(1, out.data());
  PsTicket p = clients_[2]->PushDense(1, grads.data());
  ASSERT_TRUE(clients_[2]->Wait(p).ok());
  ASSERT_TRUE(clients_[2]->Clock().ok());
  ASSERT_TRUE(clients_[0]->Wait(early).ok());
  // The mean of three pushes of -1 at lr 1: every value 1.
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](float x) { return x == 1.0f; })) << out[0];
}

}  // namespace
}  // namespace strata
