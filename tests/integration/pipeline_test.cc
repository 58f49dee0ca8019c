// pipeline_test.cc: pipeline parallelism end to end (strata-launch, real trainer processes on
// loopback, Gloo between stages): every schedule, on 2 and 4 pipeline ranks and with 2
// data-parallel replicas of a 2-stage pipeline, reproduces the single-process losses at every
// step and its final weights; the seeds' MLP pipelines on 2 ranks; a pipeline job leaves a
// timeline; a dead stage ends the job with an error naming it and leaves no process.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <regex>
#include <set>
#include <nlohmann/json.hpp>

#include "tests/integration/equivalence.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using testing::Losses;
using testing::MaxRelativeDifference;
using testing::ReadCheckpoint;
using testing::ReadFile;

// 6 blocks: 8 units (embedding, blocks, head), enough for pp 4 x vpp 2.
const char* kGpt =
    "model: {kind: gpt, layers: 6, heads: 2, width: 32, context: 16}\n"
    "data: {kind: text, path: " STRATA_SOURCE_DIR "/tests/data/corpus.txt, eval_samples: 512}\n"
    "optimizer: {kind: adamw, lr: 0.003, clip_norm: 1.0}\n"
    "train: {steps: 20, batch_size: 8, micro_batches: 4, log_every: 1, progress: false}\n"
    "sync: {mode: allreduce}\n";

// The seeds' MLP, 1024 -> 4096 -> 1024.
const char* kSeedsMlp =
    "model: {kind: mlp, mlp_in: 1024, mlp_hidden: 4096, mlp_out: 1024}\n"
    "data: {kind: regression, eval_samples: 64}\n"
    "optimizer: {kind: sgd, lr: 0.05, momentum: 0.9}\n"
    "train: {steps: 20, batch_size: 16, micro_batches: 2, log_every: 1, progress: false}\n"
    "sync: {mode: allreduce}\n";

class PipelineTest : public testing::EquivalenceTest {};

struct Plan {
  const char* schedule;
  int vpp;
};
const Plan kPlans[] = {{"gpipe", 1}, {"1f1b", 1}, {"interleaved", 2}, {"zb-h1", 1}, {"zbv", 2}};

TEST_F(PipelineTest, GptEverySchedulePp2MatchesOneProcess) {
  const std::string job = Job("gpt", kGpt);
  RunReference(job);
  for (const Plan& p : kPlans) {
    ExpectMatchesReference(job, std::string("pp2-") + p.schedule, 2, 2,
                           {"parallel.pp=2", std::string("parallel.schedule=") + p.schedule,
                            "parallel.vpp=" + std::to_string(p.vpp)});
  }
}

// Cut by measured cost (trainer 0 times each unit) or by hand, the pipeline still computes
// what one process does.
TEST_F(PipelineTest, GptMeasuredAndExplicitPartitionsMatchOneProcess) {
  const std::string job = Job("gpt", kGpt);
  RunReference(job);
  ExpectMatchesReference(job, "pp2-cost", 2, 2, {"parallel.pp=2", "parallel.partition=cost"});
  ExpectMatchesReference(job, "pp2-cut1", 2, 2, {"parallel.pp=2", "parallel.partition=1"});
}

TEST_F(PipelineTest, GptEverySchedulePp4MatchesOneProcess) {
  const std::string job = Job("gpt", kGpt);
  RunReference(job);
  for (const Plan& p : kPlans) {
    ExpectMatchesReference(job, std::string("pp4-") + p.schedule, 4, 4,
                           {"parallel.pp=4", std::string("parallel.schedule=") + p.schedule,
                            "parallel.vpp=" + std::to_string(p.vpp)});
  }
}

TEST_F(PipelineTest, GptDp2TimesPp2MatchesOneProcess) {
  const std::string job = Job("gpt", kGpt);
  RunReference(job);
  // The weights' reference is dp 2 without a pipeline. Splitting a batch over replicas rounds
  // differently (two means of 4 samples, not one of 8), and AdamW magnifies that on rows seen
  // rarely (a byte that occurs once); TrainTest holds dp against one process. The pipeline
  // must add nothing to it.
  UseWeightsOf(job, "dp2", 2, {});
  ExpectMatchesReference(job, "dp2pp2-1f1b", 4, 2, {"parallel.pp=2", "parallel.schedule=1f1b"});
  ExpectMatchesReference(job, "dp2pp2-zbh1", 4, 2, {"parallel.pp=2", "parallel.schedule=zb-h1"});
}

TEST_F(PipelineTest, SeedsMlpPp2MatchesOneProcess) {
  const std::string job = Job("mlp", kSeedsMlp);
  RunReference(job);
  ExpectMatchesReference(job, "mlp-pp2-1f1b", 2, 2, {"parallel.pp=2", "parallel.schedule=1f1b"});
  ExpectMatchesReference(job, "mlp-pp2-zbh1", 2, 2, {"parallel.pp=2", "parallel.schedule=zb-h1"});
}

// Each stage's replicas get its gradients while the pipeline's tail still runs: the last
// micro-batch's W (zb-h1) hands buckets to the all-reduce as it finishes them. (Whether the
// reduction then starts before the step ends is the OS's call with four trainers on two cores;
// TrainTest checks that it can.)
TEST_F(PipelineTest, Dp2TimesPp2HandsGradientsToTheAllReduceDuringThePipelinesTail) {
  std::string log;
  const std::string trace = dir_.File("trace-{rank}.json");
  ASSERT_EQ(Launch(Job("gpt", kGpt), 0, 4, {"parallel.pp=2", "parallel.schedule=zb-h1", "sync.bucket_mb=0.01",
                                            "sync.trace_path=" + trace}, &log), 0) << log;
  for (int rank = 0; rank < 4; ++rank) {
    const testing::OverlapCount c =
        testing::CountAllReduceOverlap(dir_.File("trace-" + std::to_string(rank) + ".json"));
    ASSERT_EQ(c.steps, 20) << "rank " << rank;
    EXPECT_GE(c.handed, 19) << "rank " << rank;
  }
}

// With parameters on the servers (ps: every table; hybrid: the embedding), each stage's
// parameters are tables of their own, shared by that stage's replicas: dp 2 x pp 2 computes
// what dp 2 does without the pipeline (SGD, BSP).
TEST_F(PipelineTest, GptDp2TimesPp2OnTheServersMatchesDp2) {
  const std::string job = Job("gpt-sgd",
      "model: {kind: gpt, layers: 2, heads: 2, width: 32, context: 16}\n"
      "data: {kind: text, path: " STRATA_SOURCE_DIR "/tests/data/corpus.txt, eval_samples: 512}\n"
      "optimizer: {kind: sgd, lr: 0.05, momentum: 0.9}\n"
      "train: {steps: 20, batch_size: 8, micro_batches: 4, log_every: 1, progress: false}\n"
      "sync: {mode: ps, consistency: bsp}\n");
  for (const char* mode : {"ps", "hybrid"}) {
    std::string log;
    const std::string flat = std::string(mode) + "-dp2", piped = std::string(mode) + "-dp2pp2";
    ASSERT_EQ(Launch(job, 2, 2, {std::string("sync.mode=") + mode, "train.metrics_path=" + Metrics(flat)}, &log), 0) << log;
    ASSERT_EQ(Launch(job, 2, 4, {std::string("sync.mode=") + mode, "parallel.pp=2", "train.metrics_path=" + Metrics(piped)}, &log), 0) << log;
    const auto a = Losses(Rank(flat, 0)), b = Losses(Rank(piped, 0));  // replica 0's loss
    ASSERT_EQ(a.size(), 20u);
    EXPECT_LT(MaxRelativeDifference(a, b), 1e-5) << mode << "\n" << log;
  }
}

// The timeline of a pipeline run has every rank's F, B and W actions, and the run draws the
// measured timeline beside the planned one.
TEST_F(PipelineTest, PipelineRunWritesItsTimeline) {
  std::string log;
  const std::string trace = dir_.File("trace-{rank}.json");
  ASSERT_EQ(Launch(Job("gpt", kGpt), 0, 2, {"parallel.pp=2", "parallel.schedule=zb-h1", "train.steps=3",
                                            "sync.trace_path=" + trace}, &log), 0) << log;
  for (int rank = 0; rank < 2; ++rank) {
    auto j = nlohmann::json::parse(ReadFile(dir_.File("trace-" + std::to_string(rank) + ".json")));
    int f = 0, i = 0, w = 0;
    for (const auto& e : j["traceEvents"]) {
      const std::string name = e.value("name", "");
      if (name.find('F') != std::string::npos && name.find("SEND") == std::string::npos) ++f;
      if (name.find('I') != std::string::npos && name.find("wait") == std::string::npos) ++i;
      if (name.find('W') != std::string::npos) ++w;
    }
    EXPECT_EQ(f, 3 * 4) << "rank " << rank;  // 3 steps of 4 micro-batches
    EXPECT_EQ(i, 3 * 4) << "rank " << rank;
    EXPECT_EQ(w, 3 * 4) << "rank " << rank;
  }
  EXPECT_TRUE(std::filesystem::exists(dir_.File("trace-pipeline.svg"))) << log;
  auto merged = nlohmann::json::parse(ReadFile(dir_.File("trace-pipeline.json")));
  std::set<int> pids;
  for (const auto& e : merged["traceEvents"]) pids.insert(e["pid"].get<int>());
  EXPECT_EQ(pids.size(), 2u) << "one row per pipeline rank";
}

TEST_F(PipelineTest, BadPlansAreRefusedNamingTheField) {
  std::string log;
  const std::string job = Job("gpt", kGpt);
  EXPECT_EQ(Launch(job, 0, 3, {"parallel.pp=2"}, &log), 2) << log;
  EXPECT_NE(log.find("parallel.tp * parallel.pp"), std::string::npos) << log;
  EXPECT_EQ(Launch(job, 0, 2, {"parallel.pp=2", "parallel.schedule=interleaved"}, &log), 2) << log;
  EXPECT_NE(log.find("vpp"), std::string::npos) << log;
  EXPECT_EQ(Launch(job, 0, 4, {"parallel.pp=4", "parallel.vpp=3", "parallel.schedule=interleaved"}, &log), 2) << log;
  EXPECT_NE(log.find("units"), std::string::npos) << log;
  EXPECT_EQ(Launch(job, 0, 2, {"parallel.pp=2", "parallel.schedule=fastest"}, &log), 2) << log;
  EXPECT_NE(log.find("parallel.schedule"), std::string::npos) << log;
}

// A stage that dies mid-step: its neighbours fail within their timeout naming the rank they
// lost, the launcher exits non-zero and leaves no process behind.
TEST_F(PipelineTest, ADeadStageEndsTheJobNamingIt) {
  std::string log;
  std::vector<pid_t> started;
  const int code = testing::RunAndKillATrainer(
      Job("gpt", kGpt), 0, 3, 1,
      {"parallel.pp=3", "parallel.schedule=1f1b", "train.steps=100000", "sync.timeout_ms=10000"},
      dir_.File("dead-stage.log"), &log, &started, /*keep_going=*/true);
  EXPECT_EQ(code, 1) << log;
  // A survivor's error names the stage and trainer it lost (waiting on it, or sending to it),
  // or the pipeline's trainers when a collective over them failed.
  EXPECT_TRUE(std::regex_search(log, std::regex("\\[trainer [02]\\] .*error.*(stage [0-9] \\(pipeline rank 1, trainer 1\\)|the pipeline of trainers 0 1 2)")))
      << log;
  EXPECT_NE(log.find("trainer 1 (pid"), std::string::npos) << log;
  EXPECT_EQ(started.size(), 4u) << log;  // the scheduler and 3 trainers
  for (pid_t pid : started) EXPECT_NE(kill(pid, 0), 0) << "pid " << pid << " survived";
}

}  // namespace
}  // namespace strata
