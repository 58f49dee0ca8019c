// zb_bound_test.cc: no pp 2 schedule with 1F1B's memory beats ZB-H1. Every pair of per-rank
// orders of F, I and W for a few micro-batches (each micro-batch's F before its I before its
// W, each kind in micro-batch order, as gradients must sum in the single process's order; at
// most pp micro-batches alive from F to W on a rank: 1F1B's peak) is simulated; the least
// makespan is ZB-H1's, m (F + I + W) + (pp - 1)(F + I - W) when F >= W. Rank 0 cannot do better:
// before its first I it may run pp forwards and then waits (pp - 1) I for the gradient, and
// after its last forward a chain of (pp - 1)(F + I) + I + W leaves it at most pp (I + W) of
// work, (pp - 1)(F - W) short. So with a weight gradient cheaper than the forward (W / F about
// 0.73 for a transformer block on a CPU core), halving 1F1B's bubble is out of reach of every
// such schedule that keeps 1F1B's memory; with one more micro-batch alive it is not.
#include <gtest/gtest.h>

#include <functional>
#include <limits>

#include "trainer/pipeline/simulate.h"

namespace strata::pipeline {
namespace {

// Every order of one rank's F, I, W for `m` micro-batches of `stage` under the memory cap.
std::vector<std::vector<Action>> Orders(int stage, int m, int cap) {
  std::vector<std::vector<Action>> out;
  std::vector<Action> order;
  std::function<void(int, int, int)> walk = [&](int f, int i, int w) {
    if (w == m) {
      out.push_back(order);
      return;
    }
    auto step = [&](ActionKind kind, int micro, int nf, int ni, int nw) {
      order.push_back({kind, stage, micro});
      walk(nf, ni, nw);
      order.pop_back();
    };
    if (f < m && f - w < cap) step(ActionKind::kForward, f, f + 1, i, w);
    if (i < f) step(ActionKind::kBackwardInput, i, f, i + 1, w);
    if (w < i) step(ActionKind::kBackwardWeight, w, f, i, w + 1);
  };
  walk(0, 0, 0);
  return out;
}

struct Best {
  double makespan = std::numeric_limits<double>::infinity();
  double bubble = 0;
  size_t schedules = 0;
};

// The shortest of every pair of orders with at most `cap` micro-batches alive on a rank.
Best Search(int m, const Costs& costs, int cap = 2) {
  const PipelineShape shape{2, 1, m};
  const auto first = Orders(0, m, cap), second = Orders(1, m, cap);
  Best best;
  for (const auto& a : first) {
    for (const auto& b : second) {
      auto sim = SimulateActions(ScheduleKind::kZbH1, shape, {a, b}, costs);
      if (!sim.ok()) continue;  // a deadlocking pair
      ++best.schedules;
      if (sim->makespan < best.makespan) {
        best.makespan = sim->makespan;
        best.bubble = sim->bubble;
      }
    }
  }
  return best;
}

Costs Of(double f, double i, double w) {
  Costs c;
  c.f = f;
  c.i = i;
  c.w = w;
  c.b = i + w;
  return c;
}

TEST(ZbBoundTest, NoScheduleWith1F1BsMemoryBeatsZbH1) {
  // The zero-bubble paper's unit costs, and stage 0's measured costs of a gpt block on this
  // host (ms; architecture.md), where W is the cheapest of the three.
  for (const Costs& costs : {Of(1, 1, 1), Of(16.7, 17.5, 12.2), Of(2, 1, 1)}) {
    for (int m : {2, 3, 4}) {
      SCOPED_TRACE("m " + std::to_string(m) + " F " + std::to_string(costs.f) + " I " +
                   std::to_string(costs.i) + " W " + std::to_string(costs.w));
      const Best best = Search(m, costs);
      EXPECT_GT(best.schedules, 10u);  // the search saw schedules, not a handful
      auto zb = Simulate(ScheduleKind::kZbH1, {2, 1, m}, costs);
      ASSERT_TRUE(zb.ok()) << zb.status().ToString();
      EXPECT_NEAR(best.makespan, zb->makespan, 1e-9);
      EXPECT_NEAR(zb->makespan, m * (costs.f + costs.i + costs.w) + costs.f + costs.i - costs.w, 1e-9);
    }
  }
}

TEST(ZbBoundTest, WithThisHostsCostsTheLeastBubbleIsMoreThanHalf1F1Bs) {
  const Costs cpu = Of(16.7, 17.5, 12.2);
  const int m = 4;
  const Best best = Search(m, cpu);
  auto one_f_one_b = Simulate(ScheduleKind::k1F1B, {2, 1, m}, cpu);
  ASSERT_TRUE(one_f_one_b.ok());
  // (F + I - W) / (F + I + W) of 1F1B's idle time, over a shorter step: 0.53 at m 4.
  EXPECT_GT(best.bubble / one_f_one_b->bubble, 0.5);
  // Where W = F = I the same search halves it (a third, as the paper says, over a shorter step).
  const Costs unit = Of(1, 1, 1);
  auto unit_1f1b = Simulate(ScheduleKind::k1F1B, {2, 1, m}, unit);
  ASSERT_TRUE(unit_1f1b.ok());
  EXPECT_LT(Search(m, unit).bubble / unit_1f1b->bubble, 0.5);
}

TEST(ZbBoundTest, OneMoreMicroBatchAliveBeatsZbH1AndHalvesTheBubble) {
  // The bound is the memory's: with pp + 1 alive on a rank, rank 0 has more to fill its wait with.
  const Costs cpu = Of(16.7, 17.5, 12.2);
  const int m = 4;
  const Best best = Search(m, cpu, 3);
  auto zb = Simulate(ScheduleKind::kZbH1, {2, 1, m}, cpu);
  auto one_f_one_b = Simulate(ScheduleKind::k1F1B, {2, 1, m}, cpu);
  ASSERT_TRUE(zb.ok() && one_f_one_b.ok());
  EXPECT_LT(best.makespan, zb->makespan - 1);
  EXPECT_LT(best.bubble / one_f_one_b->bubble, 0.5);
}

}  // namespace
}  // namespace strata::pipeline
