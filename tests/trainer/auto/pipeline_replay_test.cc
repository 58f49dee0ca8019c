// pipeline_replay_test.cc: PipelineReplay (a plan's step on this host's cores) on real
// in-process communicators, no timing bounds but the one physics gives: a replay spins each
// action's CPU time and waits for its inputs, so no step can take less than the schedule's
// critical path (the simulator's makespan with a core per rank), however busy the host. Bad
// shapes are refused naming what is wrong. With a ReplayWork, every compute action of the
// schedule reaches it once, in order, and a rank whose work cannot be made fails the replay at
// once; UnitReplayWork runs a gpt plan's real units through a replay.
#include "trainer/auto/pipeline_replay.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <map>
#include <mutex>

#include "trainer/auto/unit_replay.h"
#include "trainer/pipeline/schedules.h"

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

// Records what the replay asks of each rank (a mock of ReplayWork alone).
struct Recorded {
  std::mutex mu;
  std::map<int, std::vector<std::string>> calls;  // by pp rank: "F0.1" (stage 0, micro 1), ...
};

class RecordingWork final : public ReplayWork {
 public:
  RecordingWork(Recorded& r, int rank) : r_(r), rank_(rank) {}
  Status Forward(int stage, int micro) override { return Add("F", stage, micro); }
  Status Backward(int stage, int micro, bool full) override { return Add(full ? "B" : "I", stage, micro); }
  Status BackwardWeight(int stage, int micro) override { return Add("W", stage, micro); }
  Status Update() override { return Add("U", 0, 0); }

 private:
  Status Add(const char* what, int stage, int micro) {
    std::lock_guard<std::mutex> lock(r_.mu);
    r_.calls[rank_].push_back(what + std::to_string(stage) + "." + std::to_string(micro));
    return Status::OK();
  }
  Recorded& r_;
  const int rank_;
};

// The compute actions of `rank`'s schedule, as RecordingWork names them.
std::vector<std::string> ComputeOf(ScheduleKind kind, const pipeline::PipelineShape& shape, int rank) {
  std::vector<std::string> out;
  auto actions = pipeline::BuildActions(kind, shape, rank);
  EXPECT_TRUE(actions.ok());
  for (const pipeline::Action& a : *actions) {
    const char* what = a.kind == pipeline::ActionKind::kForward         ? "F"
                       : a.kind == pipeline::ActionKind::kBackward      ? "B"
                       : a.kind == pipeline::ActionKind::kBackwardInput ? "I"
                       : a.kind == pipeline::ActionKind::kBackwardWeight ? "W"
                                                                          : nullptr;
    if (what) out.push_back(what + std::to_string(a.stage) + "." + std::to_string(a.micro));
  }
  return out;
}

TEST(PipelineReplay, WorkRunsEveryComputeActionOfTheScheduleInOrderAndTheUpdateOnce) {
  auto replay = PipelineReplay::Start(2, 1, 1, 1 << 20);
  ASSERT_TRUE(replay.ok()) << replay.status().ToString();
  for (ScheduleKind kind : {ScheduleKind::kZbH1, ScheduleKind::kZbv}) {
    pipeline::PipelineShape shape;
    shape.pp = 2;
    shape.vpp = kind == ScheduleKind::kZbv ? 2 : 1;
    shape.micro_batches = 4;
    Recorded rec;
    PipelineStepCosts costs = Costs(shape.num_stages());
    costs.scalars = "p";
    auto seconds = (*replay)->Measure(kind, shape, costs, 2, [&rec](int rank, Communicator*) -> Result<std::unique_ptr<ReplayWork>> {
      return std::unique_ptr<ReplayWork>(new RecordingWork(rec, rank));
    });
    ASSERT_TRUE(seconds.ok()) << seconds.status().ToString();
    for (int r = 0; r < 2; ++r) {
      std::vector<std::string> want;
      for (int step = 0; step < 3; ++step) {  // the warm-up and two measured
        for (const std::string& a : ComputeOf(kind, shape, r)) want.push_back(a);
        want.push_back("U0.0");
      }
      EXPECT_EQ(rec.calls[r], want) << pipeline::ScheduleKindName(kind) << " rank " << r;
    }
  }
}

TEST(PipelineReplay, ARankWhoseWorkCannotBeMadeFailsTheReplayAtOnceNamingWhy) {
  auto replay = PipelineReplay::Start(2, 1, 1, 1 << 20);
  ASSERT_TRUE(replay.ok()) << replay.status().ToString();
  pipeline::PipelineShape shape;
  shape.pp = 2;
  shape.micro_batches = 2;
  Recorded rec;
  const auto start = std::chrono::steady_clock::now();
  auto seconds = (*replay)->Measure(ScheduleKind::k1F1B, shape, Costs(2), 2,
                                    [&rec](int rank, Communicator*) -> Result<std::unique_ptr<ReplayWork>> {
                                      if (rank == 1) return Status::ResourceExhausted("no room for stage 1");
                                      return std::unique_ptr<ReplayWork>(new RecordingWork(rec, rank));
                                    });
  ASSERT_FALSE(seconds.ok());
  EXPECT_NE(seconds.status().message().find("no room for stage 1"), std::string::npos) << seconds.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));  // no receive waited out
  EXPECT_TRUE(rec.calls.empty());  // nobody ran a step
}

// The job strata-bench plan's gpt case runs, smaller, on a text of its own.
TrainJob SmallGpt() {
  const std::string text = testing::TempDir() + "/unit_replay_text.txt";
  {
    std::ofstream out(text);
    for (int i = 0; i < 200; ++i) out << "the pipeline replays its stages on shared cores " << i << "\n";
  }
  TrainJob job;
  job.model.kind = ModelOptions::Kind::kGpt;
  job.model.layers = 2;
  job.model.heads = 2;
  job.model.width = 32;
  job.model.context = 16;
  job.model.vocab = 256;
  job.data.kind = DataOptions::Kind::kText;
  job.data.path = text;
  job.data.eval_samples = 256;
  job.optimizer.kind = OptimizerOptions::Kind::kAdamW;
  job.train.batch_size = 8;
  return job;
}

TEST(UnitReplayWork, RunsAPlansRealUnitsThroughAReplay) {
  const TrainJob job = SmallGpt();
  std::vector<PipelineReplayRequest> requests;
  std::vector<PlanChoice> choices;
  for (ScheduleKind kind : {ScheduleKind::kGpipe, ScheduleKind::kZbH1, ScheduleKind::kInterleaved}) {
    PlanChoice c;
    c.pp = 2;
    c.dp = kind == ScheduleKind::kGpipe ? 2 : 1;
    c.tp = kind == ScheduleKind::kZbH1 ? 2 : 1;  // the model's tp collectives over the replay's tp group
    c.vpp = kind == ScheduleKind::kInterleaved ? 2 : 1;
    c.schedule = kind;
    c.micro_batches = 4;
    c.micro_batch = 2;
    c.recompute = kind == ScheduleKind::kZbH1 ? ParallelOptions::Recompute::kFull : ParallelOptions::Recompute::kNone;
    c.partition = kind == ScheduleKind::kInterleaved ? "1,2,3" : "2";
    auto work = UnitReplayWork(job, ops::Exec::Cpu(), c, c.dp * c.tp * c.pp);
    ASSERT_TRUE(work.ok()) << c.ToString() << ": " << work.status().ToString();
    PipelineReplayRequest r;
    r.kind = kind;
    r.shape.pp = 2;
    r.shape.vpp = c.vpp;
    r.shape.micro_batches = c.micro_batches;
    r.dp = c.dp;
    r.tp = c.tp;
    r.costs = Costs(r.shape.num_stages());
    r.costs.scalars = "pdtp";
    if (c.dp > 1) r.costs.grad_bytes.assign(2, 16 << 10);
    r.work = *work;
    requests.push_back(r);
  }
  auto seconds = ReplayPipelines(requests, 1 << 20, 0.02);
  ASSERT_TRUE(seconds.ok()) << seconds.status().ToString();
  for (double s : *seconds) EXPECT_GT(s, 0);
}

TEST(UnitReplayWork, RefusesWhatItCannotReplayNamingIt) {
  TrainJob job = SmallGpt();
  PlanChoice c;
  c.pp = 2;
  c.tp = 2;
  c.micro_batches = 2;
  c.micro_batch = 4;
  job.parallel.cp = 2;
  auto cp = UnitReplayWork(job, ops::Exec::Cpu(), c, 8);
  ASSERT_FALSE(cp.ok());
  EXPECT_NE(cp.status().message().find("context parallelism"), std::string::npos) << cp.status().ToString();
  job.parallel.cp = 1;
  auto tp = UnitReplayWork(job, ops::Exec::Cpu(), c, 4);
  ASSERT_TRUE(tp.ok()) << tp.status().ToString();
  auto lone = (*tp)(0, nullptr);  // a tp 2 plan's rank needs its tp group
  ASSERT_FALSE(lone.ok());
  EXPECT_NE(lone.status().message().find("tp group"), std::string::npos) << lone.status().ToString();
  c.tp = 1;
  auto bad = UnitReplayWork(job, ops::Exec::Cpu(), c, 5);  // 5 trainers: not dp x pp
  ASSERT_FALSE(bad.ok());
}

}  // namespace
}  // namespace strata
