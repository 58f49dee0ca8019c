// pipeline_replay_test.cc: PipelineReplay (a plan's step on this host's cores) on real
// in-process communicators, no timing bounds but the one physics gives: a replay spins each
// action's CPU time and waits for its inputs, so no step can take less than the schedule's
// critical path (the simulator's makespan with a core per rank), however busy the host. Bad
// shapes are refused naming what is wrong.
#include "trainer/auto/pipeline_replay.h"

#include <gtest/gtest.h>

namespace strata {
namespace {

using pipeline::ScheduleKind;

PipelineStepCosts Costs(int stages) {
  PipelineStepCosts c;
  c.compute.f = 2e-3;
  c.compute.b = 4e-3;
  c.compute.i = 2e-3;
  c.compute.w = 2e-3;
  c.boundary_bytes.assign(static_cast<size_t>(stages), 4096);
  return c;
}

TEST(PipelineReplay, AStepIsNeverShorterThanItsCriticalPath) {
  auto replay = PipelineReplay::Start(2, 1, 1, 1 << 20);
  ASSERT_TRUE(replay.ok()) << replay.status().ToString();
  for (ScheduleKind kind : {ScheduleKind::k1F1B, ScheduleKind::kZbH1}) {
    pipeline::PipelineShape shape;
    shape.pp = 2;
    shape.micro_batches = 3;
    PipelineStepCosts costs = Costs(2);
    auto sim = pipeline::Simulate(kind, shape, costs.compute);
    ASSERT_TRUE(sim.ok());
    auto seconds = (*replay)->Measure(kind, shape, costs, 2);
    ASSERT_TRUE(seconds.ok()) << seconds.status().ToString();
    EXPECT_GE(*seconds, 0.99 * sim->makespan) << pipeline::ScheduleKindName(kind);
    // The step's tail as a trainer runs it: two scalar all-reduces, then the optimizer.
    costs.scalars = "pp";
    costs.optimizer_s = 3e-3;
    auto with_tail = (*replay)->Measure(kind, shape, costs, 2);
    ASSERT_TRUE(with_tail.ok()) << with_tail.status().ToString();
    EXPECT_GE(*with_tail, 0.99 * (sim->makespan + 3e-3));
  }
}

TEST(PipelineReplay, ReplaysEveryRequestInOrderAcrossShapes) {
  std::vector<PipelineReplayRequest> requests;
  for (int pp : {1, 2, 3}) {  // pp 1: dp 2 replicas, no pipeline
    PipelineReplayRequest r;
    r.kind = ScheduleKind::kGpipe;
    r.shape.pp = pp;
    r.shape.micro_batches = 2;
    r.costs = Costs(pp);
    r.dp = pp <= 2 ? 2 : 1;
    r.costs.grad_bytes.assign(static_cast<size_t>(pp), 64 << 10);  // dp 2: a sync of 64 KiB a rank
    auto sim = pipeline::Simulate(r.kind, r.shape, r.costs.compute);
    ASSERT_TRUE(sim.ok());
    r.simulated_s = sim->makespan;
    requests.push_back(r);
  }
  auto seconds = ReplayPipelines(requests, 1 << 20, 0.02);
  ASSERT_TRUE(seconds.ok()) << seconds.status().ToString();
  ASSERT_EQ(seconds->size(), 3u);
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_GE((*seconds)[i], 0.99 * requests[i].simulated_s) << i;
}

TEST(PipelineReplay, BadShapesAreRefusedNamingThem) {
  auto one = PipelineReplay::Start(1, 1, 1, 0);
  ASSERT_FALSE(one.ok());
  EXPECT_NE(one.status().message().find("two ranks"), std::string::npos) << one.status().ToString();
  auto replay = PipelineReplay::Start(2, 1, 1, 0);  // over TCP: the replay works on either
  ASSERT_TRUE(replay.ok()) << replay.status().ToString();
  pipeline::PipelineShape shape;
  shape.pp = 3;
  shape.micro_batches = 2;
  auto other = (*replay)->Measure(ScheduleKind::k1F1B, shape, Costs(3), 1);
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("started for pp 2"), std::string::npos) << other.status().ToString();
  shape.pp = 2;
  shape.vpp = 2;  // 1f1b runs one stage a rank
  auto invalid = (*replay)->Measure(ScheduleKind::k1F1B, shape, Costs(4), 1);
  ASSERT_FALSE(invalid.ok());
  EXPECT_NE(invalid.status().message().find("vpp"), std::string::npos) << invalid.status().ToString();
}

}  // namespace
}  // namespace strata
