// simulate_test.cc: the simulator's clock (latency between ranks only, per-stage costs) and
// its refusals: deadlocks name each rank's stuck action, and lists that run an action twice,
// on the wrong rank, or never are FailedPrecondition.
#include "trainer/pipeline/simulate.h"

#include "trainer/pipeline/measured.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace strata::pipeline {
namespace {

using ::testing::HasSubstr;

std::vector<std::vector<Action>> Lists(std::initializer_list<const char*> texts) {
  std::vector<std::vector<Action>> lists;
  for (const char* text : texts) {
    auto list = ParseActions(text);
    EXPECT_TRUE(list.ok()) << list.status().ToString();
    lists.push_back(*list);
  }
  return lists;
}

const PipelineShape kTwoByTwo{2, 1, 2};

TEST(SimulateTest, OneMicroBatchThroughTwoRanksWithLatency) {
  Costs costs;
  costs.comm = 0.5;
  auto sim = Simulate(ScheduleKind::k1F1B, {2, 1, 1}, costs);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  // 0F0 [0,1), 1F0 [1.5,2.5), 1B0 [2.5,4.5), 0B0 [5,7).
  ASSERT_EQ(sim->ranks[1].size(), 2u);
  EXPECT_DOUBLE_EQ(sim->ranks[1][0].start, 1.5);
  EXPECT_DOUBLE_EQ(sim->ranks[0][1].start, 5);
  EXPECT_DOUBLE_EQ(sim->makespan, 7);
  EXPECT_EQ(sim->busy, (std::vector<double>{3, 3}));
  EXPECT_DOUBLE_EQ(sim->bubble, (14.0 - 6) / 14);
}

TEST(SimulateTest, NoLatencyBetweenStagesOfOneRank) {
  Costs costs;
  costs.comm = 10;
  auto sim = Simulate(ScheduleKind::kInterleaved, {1, 2, 1}, costs);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  EXPECT_DOUBLE_EQ(sim->makespan, 6);
  EXPECT_DOUBLE_EQ(sim->bubble, 0);
}

TEST(SimulateTest, PerStageCosts) {
  Costs costs;
  costs.f_stage = {1, 3};  // the second stage's forward is slow; its backward is the scalar 2
  EXPECT_EQ(costs.F(0), 1);
  EXPECT_EQ(costs.F(1), 3);
  EXPECT_EQ(costs.F(2), costs.f);
  EXPECT_EQ(costs.B(1), 2);
  auto sim = Simulate(ScheduleKind::kGpipe, kTwoByTwo, costs);
  ASSERT_TRUE(sim.ok());
  // Rank 1: F0 [1,4), F1 [4,7), B0 [7,9), B1 [9,11); rank 0's B1 [11,13).
  EXPECT_DOUBLE_EQ(sim->makespan, 13);
}

TEST(SimulateTest, EachActionsOwnDurationOverridesItsStages) {
  Costs costs;
  costs.each[{static_cast<int>(ActionKind::kForward), 1, 1}] = 5;  // 1F1 took 5, the rest 1
  EXPECT_EQ(costs.Of({ActionKind::kForward, 1, 1}), 5);
  EXPECT_EQ(costs.Of({ActionKind::kForward, 1, 0}), 1);
  auto sim = Simulate(ScheduleKind::kGpipe, kTwoByTwo, costs);
  ASSERT_TRUE(sim.ok());
  // Rank 1: F0 [1,2), F1 [2,7), B0 [7,9), B1 [9,11); rank 0's B1 [11,13). Without it: 9.
  EXPECT_DOUBLE_EQ(sim->makespan, 13);
  EXPECT_DOUBLE_EQ(Simulate(ScheduleKind::kGpipe, kTwoByTwo, Costs{})->makespan, 9);
}

TEST(SimulateTest, ActionCostsKeepEachMeasuredDurationBesideTheStageMeans) {
  const std::vector<std::vector<TimedAction>> ranks = {
      {{{ActionKind::kForward, 0, 0}, 0, 2}, {{ActionKind::kForward, 0, 1}, 2, 6}},
      {{{ActionKind::kForward, 1, 0}, 3, 4}, {{ActionKind::kSendF, 1, 0}, 4, 4.5}}};
  const Costs c = ActionCosts(ranks, 2);
  EXPECT_EQ(c.F(0), 3);  // the mean of 2 and 4
  EXPECT_EQ(c.Of({ActionKind::kForward, 0, 0}), 2);
  EXPECT_EQ(c.Of({ActionKind::kForward, 0, 1}), 4);
  EXPECT_EQ(c.Of({ActionKind::kForward, 1, 1}), 1);  // not measured: its stage's mean
  EXPECT_EQ(c.each.size(), 3u);                       // sends are not compute
}

TEST(SimulateTest, SkipsSendsAndReceivesInGivenLists) {
  std::vector<std::vector<Action>> lists;
  for (int r = 0; r < 4; ++r) lists.push_back(*BuildActions(ScheduleKind::kZbH1, {4, 1, 8}, r));
  auto given = SimulateActions(ScheduleKind::kZbH1, {4, 1, 8}, lists, Costs{});
  auto built = Simulate(ScheduleKind::kZbH1, {4, 1, 8}, Costs{});
  ASSERT_TRUE(given.ok() && built.ok()) << given.status().ToString();
  EXPECT_DOUBLE_EQ(given->makespan, built->makespan);
  EXPECT_EQ(given->peak_live, built->peak_live);
}

// Processor sharing (Costs::slots): k ranks computing at once share `slots` processors.
TEST(SimulateSharedTest, AsManySlotsAsRanksIsTheUnsharedClock) {
  for (ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::k1F1B, ScheduleKind::kZbH1}) {
    Costs costs;
    costs.comm = 0.25;
    auto alone = Simulate(kind, {4, 1, 8}, costs);
    costs.slots = 4;
    auto shared = Simulate(kind, {4, 1, 8}, costs);
    ASSERT_TRUE(alone.ok() && shared.ok());
    EXPECT_DOUBLE_EQ(shared->makespan, alone->makespan) << ScheduleKindName(kind);
    EXPECT_EQ(shared->busy, alone->busy) << ScheduleKindName(kind);
  }
}

TEST(SimulateSharedTest, OneRankOnHalfAProcessorTakesTwiceAsLong) {
  Costs costs;
  costs.slots = 0.5;
  auto sim = Simulate(ScheduleKind::k1F1B, {1, 1, 4}, costs);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  EXPECT_DOUBLE_EQ(sim->makespan, 2 * 4 * 3.0);
}

TEST(SimulateSharedTest, ARankAloneInTheBubbleHasAProcessorToItself) {
  // GPipe with one micro-batch: one rank computes at a time, so 2 processors for 4 ranks cost
  // nothing; the unshared clock's 4 ranks x 3 units.
  Costs costs;
  costs.slots = 2;
  auto sim = Simulate(ScheduleKind::kGpipe, {4, 1, 1}, costs);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  EXPECT_DOUBLE_EQ(sim->makespan, 12);
}

TEST(SimulateSharedTest, OneProcessorForTwoBusyRanksRunsTheWholeWorkBackToBack) {
  // 1F1B on 2 ranks always has a rank computing (no latency), so one shared processor finishes
  // exactly when the sum of every action's duration has run; the 2-processor clock is shorter.
  Costs costs;
  costs.slots = 1;
  auto sim = Simulate(ScheduleKind::k1F1B, {2, 1, 8}, costs);
  ASSERT_TRUE(sim.ok()) << sim.status().ToString();
  EXPECT_NEAR(sim->makespan, 2 * 8 * 3.0, 1e-9);
  costs.slots = 0;
  auto alone = Simulate(ScheduleKind::k1F1B, {2, 1, 8}, costs);
  ASSERT_TRUE(alone.ok());
  EXPECT_LT(alone->makespan, sim->makespan);
  // Each action ran at half speed (both computing) or full speed (alone), and some at half.
  bool some_halved = false;
  for (const auto& rank : sim->ranks) {
    for (const TimedAction& t : rank) {
      const double d = t.action.kind == ActionKind::kForward ? 1.0 : 2.0;
      EXPECT_GE(t.end - t.start, d - 1e-9);
      EXPECT_LE(t.end - t.start, 2 * d + 1e-9);
      some_halved = some_halved || t.end - t.start > d + 1e-9;
    }
  }
  EXPECT_TRUE(some_halved);
}

TEST(SimulateSharedTest, DeadlocksAreStillNamed) {
  Costs costs;
  costs.slots = 1;
  auto sim = SimulateActions(ScheduleKind::k1F1B, kTwoByTwo, Lists({"1B0 0F0 0B0 0F1 0B1", "1F0 1F1 1B1"}), costs);
  ASSERT_FALSE(sim.ok());
}

TEST(SimulateTest, DeadlockNamesEachRanksStuckAction) {
  // Rank 0 waits for micro-batch 0's gradient before sending micro-batch 1 forward, while
  // rank 1 wants micro-batch 1's forward before it runs micro-batch 0's backward.
  auto sim = SimulateActions(ScheduleKind::k1F1B, kTwoByTwo,
                             Lists({"0F0 0B0 0F1 0B1", "1F0 1F1 1B0 1B1"}), Costs{});
  EXPECT_EQ(sim.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_THAT(sim.status().message(), HasSubstr("deadlock"));
  EXPECT_THAT(sim.status().message(), HasSubstr("rank 0 at 0B0 waits for 1B0"));
  EXPECT_THAT(sim.status().message(), HasSubstr("rank 1 at 1F1 waits for 0F1"));
}

TEST(SimulateTest, RefusesBrokenLists) {
  const struct {
    std::vector<std::vector<Action>> lists;
    const char* why;
  } cases[] = {
      {Lists({"0F0 0F0 0F1 0B0 0B1", "1F0 1F1 1B0 1B1"}), "rank 0 runs 0F0 twice"},
      {Lists({"0F0 0F1 0B0", "1F0 1F1 1B0 1B1"}), "1 actions run on no rank: 0B1"},
      {Lists({"0F0 0F1 0B0 0B1 1F0", "1F1 1B0 1B1"}), "rank 0 runs 1F0, but stage 1 is on rank 1"},
      {Lists({"0F0 0F1 0I0 0W0 0B1", "1F0 1F1 1B0 1B1"}), "1f1b runs full backward"},
      {Lists({"0F0 0F1 0B0 0B2", "1F0 1F1 1B0 1B1"}), "out of range"},
  };
  for (const auto& c : cases) {
    auto sim = SimulateActions(ScheduleKind::k1F1B, kTwoByTwo, c.lists, Costs{});
    EXPECT_EQ(sim.status().code(), StatusCode::kFailedPrecondition) << c.why;
    EXPECT_THAT(sim.status().message(), HasSubstr(c.why));
  }
  auto split = SimulateActions(ScheduleKind::kZbH1, kTwoByTwo,
                               Lists({"0F0 0F1 0B0 0B1", "1F0 1I0 1W0 1F1 1I1 1W1"}), Costs{});
  EXPECT_THAT(split.status().message(), HasSubstr("zb-h1 splits backward into I and W"));
  auto one_list = SimulateActions(ScheduleKind::k1F1B, kTwoByTwo, Lists({"0F0"}), Costs{});
  EXPECT_EQ(one_list.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace strata::pipeline
