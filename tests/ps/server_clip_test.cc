// server_clip_test.cc: global gradient clipping on the servers (ps/server_clip.cc): a clipped
// table holds a clock's pushes until the clock messages, a gradNorm request answers the sum of
// squares of the mean gradients once every pusher's pushes arrived, the clock applies them times
// the clock's gradScale, and a bad or disagreeing gradScale is refused naming it.
#include <gtest/gtest.h>

#include <cmath>
#include <future>
#include <limits>
#include <vector>

#include "tests/ps/ps_fixture.h"

namespace strata {
namespace {

constexpr uint64_t kNumel = 10;  // 3 chunks of 4, 4 and 2 floats: both servers hold some

TableSpec ClippedTable() {
  OptimizerSpec sgd;
  sgd.lr = 1.0f;
  TableSpec t = Dense(1, kNumel, 4, Consistency::kBsp, sgd);
  t.pushers = kTrainers;
  t.clipped = true;
  return t;
}

float G(int trainer, uint64_t i) { return 0.25f * static_cast<float>(trainer + 1) - 0.1f * static_cast<float>(i); }

// A clock message written by hand from `node` to server 0.
Status RawClock(Node& node, int64_t clock, float grad_scale) {
  const PeerId server0 = *node.rpc().Connect("mem://server0");
  Message m;
  auto c = m.builder().getBody().initClock();
  c.setClock(clock);
  c.setGradScale(grad_scale);
  return node.rpc().CallAndWait(server0, std::move(m)).status();
}

class ServerClipTest : public PsTest {
 protected:
  // Trainers [from, to) push their gradients G(t, .) of clock 0.
  void Push(int from, int to) {
    grads_.resize(kTrainers, std::vector<float>(kNumel));
    for (int t = from; t < to; ++t) {
      for (uint64_t i = 0; i < kNumel; ++i) grads_[t][i] = G(t, i);
      PsTicket p = clients_[t]->PushDense(1, grads_[t].data());
      ASSERT_TRUE(clients_[t]->Wait(p).ok());
    }
  }
  std::vector<float> PullAll(int trainer) {
    std::vector<float> out(kNumel);
    PsTicket p = clients_[trainer]->PullDense(1, out.data());
    EXPECT_TRUE(clients_[trainer]->Wait(p).ok());
    return out;
  }
  std::vector<std::vector<float>> grads_;
};

TEST_F(ServerClipTest, HoldsTheClockUntilItsScaleAndAnswersTheNormOfTheMean) {
  Start();
  CreateEverywhere(ClippedTable());
  const std::vector<float> before = PullAll(0);
  // Trainer 0 asks for the norm after its own push: the request parks until every trainer's
  // pushes of clock 0 reached both servers (an early answer would miss trainers 1 and 2's).
  Push(0, 1);
  std::future<Result<double>> early = std::async(std::launch::async, [&] { return clients_[0]->GradSumSquares(); });
  Push(1, kTrainers);
  const auto& grads = grads_;
  double want = 0;
  std::vector<float> mean(kNumel);
  for (uint64_t i = 0; i < kNumel; ++i) {
    mean[i] = (grads[0][i] + grads[1][i] + grads[2][i]) * (1.0f / kTrainers);
    want += static_cast<double>(mean[i]) * mean[i];
  }
  Result<double> got = early.get();
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_NEAR(*got, want, 1e-9 * want);
  for (int t = 1; t < kTrainers; ++t) {
    Result<double> again = clients_[t]->GradSumSquares();
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(*again, *got);  // every trainer gets the same double
  }
  // Complete, yet not applied: a clipped table waits for the clock messages' scale.
  EXPECT_EQ(PullAll(0), before);
  const float scale = 0.375f;
  for (int t = 0; t < kTrainers; ++t) ASSERT_TRUE(clients_[t]->Clock(scale).ok());
  const std::vector<float> after = PullAll(0);  // at clock 1: parked until applied
  for (uint64_t i = 0; i < kNumel; ++i) {
    EXPECT_NEAR(after[i], before[i] - mean[i] * scale, 1e-6f) << i;  // SGD at lr 1
  }
}

TEST_F(ServerClipTest, RefusesABadOrDisagreeingGradScaleNamingIt) {
  Start();
  CreateEverywhere(ClippedTable());
  for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity(), -0.5f}) {
    Status s = RawClock(*trainer_nodes_[0], 0, bad);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
    EXPECT_NE(s.message().find("gradScale"), std::string::npos) << s.ToString();
    EXPECT_NE(s.message().find("not a finite number >= 0"), std::string::npos) << s.ToString();
  }
  Push(0, kTrainers);
  ASSERT_TRUE(RawClock(*trainer_nodes_[0], 0, 0.5f).ok());
  Status s = RawClock(*trainer_nodes_[1], 0, 0.25f);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("carries gradScale 0.25"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("the same global gradient norm"), std::string::npos) << s.ToString();
  // A clipped table needs pushers (the servers must know when a clock's pushes are all in).
  TableSpec no_pushers = ClippedTable();
  no_pushers.pushers = 0;
  Status v = no_pushers.Validate();
  EXPECT_EQ(v.code(), StatusCode::kInvalidArgument) << v.ToString();
  EXPECT_NE(v.ToString().find("clipped"), std::string::npos) << v.ToString();
}

}  // namespace
}  // namespace strata
