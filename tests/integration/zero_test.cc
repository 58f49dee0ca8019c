// zero_test.cc: ZeRO-1 and ZeRO-2 end to end (strata-launch, real trainer processes on
// loopback, Gloo): the mlp (SGD with momentum and weight decay, clipped) and gpt (AdamW with
// weight decay, clipped) under zero 1 and 2 on 2 and 4 replicas, ctr on 2, ZeRO-1 under dp 2 x pp 2,
// dp 2 x tp 2 and dp 2 x tp 2 x pp 2, and ZeRO-2 under dp 2 x tp 2 x pp 2 (zb-h1), reproduce the ZeRO-0 run's losses (1e-5 relative at each of 20 steps) and,
// gathered from the checkpoint, its final parameters and optimizer state; a checkpoint written
// under zero 2 on 2 replicas resumes under one process and under zero 1 on 4 replicas,
// continuing the losses; zero with the parameter servers is refused naming the fields; each
// rank prints its memory beside the seeds' arithmetic. ZeRO-3 (parameters sharded too, gathered
// per unit) joins every equivalence above where the layout allows it (pp 1), resumes a ZeRO-2
// checkpoint and writes one that resumes elsewhere, and trains under a budget ZeRO-0 cannot.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/integration/equivalence.h"
#include "tests/test_util.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using testing::Losses;
using testing::MaxRelativeDifference;

// 4 heads and a vocabulary of 256: both split over 2; 2 blocks: 4 units, enough for pp 2.
// Weight decay: the buckets' slices cross decayed and undecayed parameters. The text is the
// test's own (testing::WordCorpus), not a file of the repository that changes: the reduce-scatter sums
// 4 replicas' gradients in another order than Gloo's all-reduce (a few ulps), and AdamW
// magnifies ulps on a token row whose gradient is nearly zero, so which bytes the text holds
// decides whether the final weights agree to 1e-4 (the losses agree to 1e-5 either way).
const char* kGpt =
    "model: {kind: gpt, layers: 2, heads: 4, width: 32, context: 16}\n"
    "data: {kind: text, path: CORPUS, eval_samples: 64}\n"
    "optimizer: {kind: adamw, lr: 0.003, weight_decay: 0.1, clip_norm: 1.0}\n"
    "train: {steps: 20, batch_size: 8, micro_batches: 2, log_every: 1, progress: false}\n"
    "sync: {mode: allreduce}\n";


// Sizes that do not divide by 4 (81 + 9 + ...): the buckets are padded.
const char* kMlp =
    "model: {kind: mlp, mlp_in: 9, mlp_hidden: 27, mlp_out: 5}\n"
    "data: {kind: regression, eval_samples: 64}\n"
    "optimizer: {kind: sgd, lr: 0.05, momentum: 0.9, weight_decay: 0.01, clip_norm: 0.5}\n"
    "train: {steps: 20, batch_size: 16, micro_batches: 2, log_every: 1, progress: false}\n"
    "sync: {mode: allreduce}\n";

class ZeroTest : public testing::EquivalenceTest {
 protected:
  // The gpt job over the test's own text.
  std::string GptJob() {
    const std::string corpus = dir_.File("corpus.txt");
    testing::WriteFile(corpus, testing::WordCorpus());
    std::string text = kGpt;
    text.replace(text.find("CORPUS"), 6, corpus);
    return Job("gpt", text);
  }

  // The gpt job on 2 replicas under `plan` with a checkpoint at step 10; then each resume (a
  // local tag resumes in one process, the others on 4 replicas) continues its losses from there.
  void ExpectCheckpointResumes(const std::string& tag, std::vector<std::string> plan,
                               const std::vector<std::pair<std::string, std::vector<std::string>>>& resumes) {
    const std::string job = GptJob();
    std::string log;
    plan.insert(plan.end(), {"train.metrics_path=" + Metrics(tag), "train.checkpoint_dir=" + dir_.File(tag),
                             "train.checkpoint_every=10"});
    ASSERT_EQ(Launch(job, 0, 2, plan, &log), 0) << log;
    const std::vector<double> base = Losses(Rank(tag, 0));
    ASSERT_EQ(base.size(), 20u) << log;
    const std::vector<double> after(base.begin() + 10, base.end());
    const std::string step10 = dir_.File(tag + "/step-10");
    ASSERT_TRUE(fs::exists(step10)) << log;
    for (const auto& [resume, sets_of] : resumes) {
      const std::string dir = dir_.File("resume-" + resume);
      fs::create_directories(dir);
      fs::copy(step10, dir + "/step-10", fs::copy_options::recursive);
      testing::WriteFile(dir + "/latest", "step-10\n");
      std::vector<std::string> sets = sets_of;
      sets.insert(sets.end(), {"train.metrics_path=" + Metrics(resume), "train.checkpoint_dir=" + dir});
      const bool local = resume.ends_with("local");
      ASSERT_EQ(local ? RunLocal(job, sets, &log) : Launch(job, 0, 4, sets, &log), 0) << log;
      EXPECT_NE(log.find("resumed from"), std::string::npos) << resume << "\n" << log;
      const auto losses = Losses(Rank(resume, 0));
      ASSERT_EQ(losses.size(), after.size()) << resume << "\n" << log;
      EXPECT_LT(MaxRelativeDifference(after, losses), 1e-5) << resume << "\n" << log;
    }
  }

  // The ZeRO-0 run on `trainers` is the reference for the weights; zero 1 and 2 must match it.
  void ExpectStagesMatchZero0(const std::string& job, const std::string& tag, int trainers,
                              std::vector<std::string> sets, std::vector<int> stages = {1, 2, 3}) {
    UseWeightsOf(job, tag + "-zero0", trainers, sets);
    for (int zero : stages) {
      std::vector<std::string> s = sets;
      s.push_back("parallel.zero=" + std::to_string(zero));
      const int shard_files = 1;
      ExpectMatchesReference(job, tag + "-zero" + std::to_string(zero), trainers, shard_files, s);
    }
  }
};

TEST_F(ZeroTest, MlpZero123MatchZero0OnDp2AndDp4) {
  const std::string job = Job("mlp", kMlp);
  RunReference(job);
  ExpectStagesMatchZero0(job, "mlp-dp2", 2, {});
  // Without overlap: reduced in Finish, buckets never re-cut.
  ExpectMatchesReference(job, "mlp-dp2-zero2-no-overlap", 2, 1, {"parallel.zero=2", "sync.overlap=false"});
  // ZeRO-3 without overlap: no prefetch, every reduce-scatter in Finish.
  ExpectMatchesReference(job, "mlp-dp2-zero3-no-overlap", 2, 1, {"parallel.zero=3", "sync.overlap=false"});
  ExpectStagesMatchZero0(job, "mlp-dp4", 4, {});
}

// ctr: its embedding tables (all-reduced as dense tensors under sync.mode allreduce) are sharded
// like the dense part.
TEST_F(ZeroTest, CtrZero123MatchZero0OnDp2) {
  const std::string job = Job("ctr",
      "model: {kind: ctr}\n"
      "data: {kind: click_log, eval_samples: 256}\n"
      "optimizer: {kind: adamw, lr: 0.01, clip_norm: 1.0}\n"
      "train: {steps: 20, batch_size: 64, micro_batches: 2, log_every: 1, progress: false}\n"
      "sync: {mode: allreduce}\n");
  RunReference(job);
  ExpectStagesMatchZero0(job, "ctr-dp2", 2, {});
}

TEST_F(ZeroTest, GptZero123MatchZero0OnDp2) {
  const std::string job = GptJob();
  RunReference(job);
  ExpectStagesMatchZero0(job, "gpt-dp2", 2, {});
}

TEST_F(ZeroTest, GptZero123MatchZero0OnDp4) {
  const std::string job = GptJob();
  RunReference(job);
  ExpectStagesMatchZero0(job, "gpt-dp4", 4, {});
}

TEST_F(ZeroTest, GptZero1UnderDp2Pp2AndDp2Tp2MatchesZero0) {
  const std::string job = GptJob();
  RunReference(job);
  UseWeightsOf(job, "gpt-dp2", 2, {});
  ExpectMatchesReference(job, "gpt-dp2pp2-zero1", 4, 2, {"parallel.pp=2", "parallel.schedule=1f1b", "parallel.zero=1"});
  ExpectMatchesReference(job, "gpt-dp2tp2-zero1", 4, 2, {"parallel.tp=2", "parallel.zero=1"});
}

// ZeRO-3 over the replicas of each tensor-parallel shard, with sequence parallelism and full
// recompute (each block's forward runs again inside its backward, on the gathered parameters),
// and under gpipe (the last unit stays gathered across the micro-batches' forwards).
TEST_F(ZeroTest, GptZero3UnderDp2Tp2AndGpipeMatchesZero0) {
  const std::string job = GptJob();
  RunReference(job);
  UseWeightsOf(job, "gpt-dp2", 2, {});
  ExpectMatchesReference(job, "gpt-dp2tp2-zero3-sp", 4, 2,
                         {"parallel.tp=2", "parallel.zero=3", "parallel.sequence_parallel=true",
                          "parallel.recompute=full"});
  ExpectMatchesReference(job, "gpt-dp2-zero3-gpipe", 2, 1, {"parallel.zero=3", "parallel.schedule=gpipe"});
}

// The seeds' "4D": dp 2 x tp 2 x pp 2 + ZeRO-1 (ZeRO-2 under zb-h1, whose W passes report the
// gradients late).
TEST_F(ZeroTest, GptZeroUnderDp2Tp2Pp2MatchesZero0) {
  const std::string job = GptJob();
  RunReference(job);
  UseWeightsOf(job, "gpt-dp2", 2, {});
  ExpectMatchesReference(job, "gpt-4d-zero1", 8, 4, {"parallel.tp=2", "parallel.pp=2", "parallel.zero=1"});
  ExpectMatchesReference(job, "gpt-4d-zero2-zbh1", 8, 4,
                         {"parallel.tp=2", "parallel.pp=2", "parallel.schedule=zb-h1", "parallel.zero=2"});
}

TEST_F(ZeroTest, CheckpointOfZero2Dp2ResumesUnderOneProcessZero1Dp4AndZero3Dp4) {
  ExpectCheckpointResumes("z2", {"parallel.zero=2"},
                          {{"local", {"sync.mode=local"}}, {"zero1-dp4", {"parallel.zero=1"}}, {"zero3-dp4", {"parallel.zero=3"}}});
}

// ZeRO-3 writes its checkpoint by gathering every unit's parameters (and the optimizer state)
// on every replica for the first to write: the file resumes under one process and under ZeRO-1
// on 4 replicas, continuing the losses.
TEST_F(ZeroTest, CheckpointOfZero3Dp2ResumesUnderOneProcessAndZero1Dp4) {
  ExpectCheckpointResumes("z3", {"parallel.zero=3"}, {{"z3-local", {"sync.mode=local"}}, {"z3-zero1-dp4", {"parallel.zero=1"}}});
}

// As for the all-reduce (TrainTest.AllReduceOverlapsBackwardInTheTimeline): backward hands
// buckets over before it ends, and the communication thread reduce-scatters while it runs.
TEST_F(ZeroTest, ReduceScatterOverlapsBackwardInTheTimeline) {
  const std::string job = Job("mlp", kMlp);
  std::string log;
  const std::string trace = dir_.File("trace-{rank}.json");
  ASSERT_EQ(Launch(job, 0, 2,
                   {"parallel.zero=2", "sync.bucket_mb=0.01", "sync.trace_path=" + trace, "model.mlp_hidden=1024",
                    "model.mlp_in=1024"},
                   &log), 0) << log;
  for (int rank : {0, 1}) {
    const testing::OverlapCount c = testing::CountAllReduceOverlap(dir_.File("trace-" + std::to_string(rank) + ".json"));
    ASSERT_EQ(c.steps, 20) << "rank " << rank;
    EXPECT_GE(c.handed, 19) << "rank " << rank;
    EXPECT_GE(c.started, 1) << "rank " << rank;  // up to the OS on a loaded 2-core machine
  }
}

TEST_F(ZeroTest, ZeroWithTheServersIsRefusedNamingTheFields) {
  std::string log;
  const std::string job = Job("ps", kMlp);
  EXPECT_NE(Launch(job, 1, 2, {"sync.mode=ps", "parallel.zero=1", "optimizer.clip_norm=0"}, &log), 0);
  EXPECT_NE(log.find("parallel.zero"), std::string::npos) << log;
  EXPECT_NE(log.find("sync.mode"), std::string::npos) << log;
}

TEST_F(ZeroTest, Zero3UnderPipeliningOrASplitBackwardIsRefusedNamingTheField) {
  std::string log;
  const std::string job = GptJob();
  EXPECT_NE(Launch(job, 0, 4, {"parallel.zero=3", "parallel.pp=2"}, &log), 0);
  EXPECT_NE(log.find("parallel.zero"), std::string::npos) << log;
  EXPECT_NE(log.find("needs pp 1"), std::string::npos) << log;
  EXPECT_NE(RunLocal(job, {"sync.mode=local", "parallel.zero=3", "parallel.schedule=zb-h1"}, &log), 0);
  EXPECT_NE(log.find("whole (gpipe or 1f1b), not zb-h1"), std::string::npos) << log;
}

// train.memory_limit_mb holds a trainer's tensors to a budget: the seeds' MLP (psi 8.4 M, 16 psi
// = 128 MiB with fp32 AdamW replicated) does not fit 100 MiB, and says which setting it hit; it
// fits 200 MiB.
TEST_F(ZeroTest, MemoryLimitRefusesWhatDoesNotFitNamingTheSetting) {
  const std::string job = Job("mlp-limit",
      "model: {kind: mlp, mlp_in: 1024, mlp_hidden: 4096, mlp_out: 1024}\n"
      "data: {kind: regression, eval_samples: 64}\n"
      "optimizer: {kind: adamw, lr: 0.001}\n"
      "train: {steps: 2, batch_size: 16, log_every: 1, progress: false}\n");
  std::string log;
  EXPECT_NE(RunLocal(job, {"sync.mode=local", "train.memory_limit_mb=100"}, &log), 0) << log;
  EXPECT_NE(log.find("ResourceExhausted"), std::string::npos) << log;
  EXPECT_NE(log.find("train.memory_limit_mb (100 MiB) reached"), std::string::npos) << log;
  EXPECT_EQ(RunLocal(job, {"sync.mode=local", "train.memory_limit_mb=200"}, &log), 0) << log;
}

// A budget the replicated optimizer state does not fit: at dp 4 ZeRO-0 needs 128.9 MiB a rank
// at its peak, ZeRO-1 and ZeRO-2 88.9 MiB from the second step on and 120 MiB in the first (it
// re-lays the buckets in backward's order, one bucket at a time). Under 124 MiB ZeRO-0 is
// refused naming the budget, and ZeRO-1 and ZeRO-2 train.
TEST_F(ZeroTest, Zero1And2TrainUnderABudgetReplicatedStateDoesNotFit) {
  const std::string job = Job("mlp-budget",
      "model: {kind: mlp, mlp_in: 1024, mlp_hidden: 4096, mlp_out: 1024}\n"
      "data: {kind: regression, eval_samples: 64}\n"
      "optimizer: {kind: adamw, lr: 0.001}\n"
      "train: {steps: 3, batch_size: 16, log_every: 1, progress: false, memory_limit_mb: 124}\n"
      "sync: {mode: allreduce}\n");
  std::string log;
  EXPECT_NE(Launch(job, 0, 4, {"parallel.zero=0"}, &log), 0) << log;
  EXPECT_NE(log.find("train.memory_limit_mb (124 MiB) reached"), std::string::npos) << log;
  for (const char* zero : {"parallel.zero=1", "parallel.zero=2"}) {
    EXPECT_EQ(Launch(job, 0, 4, {zero}, &log), 0) << zero << "\n" << log;
  }
}

// ZeRO-3 at dp 4 on the same MLP: 4 psi between steps (32 MiB), and during a step one or two
// units' full values and gradients besides (80.8 MiB at its peak): under 88 MiB ZeRO-0 (128.9
// MiB) and ZeRO-2 (120 MiB in its first step) are refused, and ZeRO-3 trains, evaluation
// (which gathers too) included.
TEST_F(ZeroTest, Zero3TrainsOnFourRanksUnderABudgetZero0AndZero2DoNotFit) {
  const std::string job = Job("mlp-budget3",
      "model: {kind: mlp, mlp_in: 1024, mlp_hidden: 4096, mlp_out: 1024}\n"
      "data: {kind: regression, eval_samples: 64}\n"
      "optimizer: {kind: adamw, lr: 0.001}\n"
      "train: {steps: 3, batch_size: 16, log_every: 1, progress: false, memory_limit_mb: 88}\n"
      "sync: {mode: allreduce}\n");
  std::string log;
  for (const char* zero : {"parallel.zero=0", "parallel.zero=2"}) {
    EXPECT_NE(Launch(job, 0, 4, {zero}, &log), 0) << zero << "\n" << log;
    EXPECT_NE(log.find("train.memory_limit_mb (88 MiB) reached"), std::string::npos) << zero << "\n" << log;
  }
  EXPECT_EQ(Launch(job, 0, 4, {"parallel.zero=3"}, &log), 0) << log;
  EXPECT_NE(log.find("eval loss"), std::string::npos) << log;
}

TEST_F(ZeroTest, MemoryLinesFollowTheSeedsArithmetic) {
  // gpt with AdamW. ZeRO-1 holds the parameters and gradients whole and 8/dp psi of state (the
  // reduced gradient slice is its own slice of the gradient buffer): 12 on 2 replicas, 10 on 4.
  // ZeRO-2 on 2 replicas holds 4 psi of parameters, the gradient shards (2 psi) and the
  // optimizer state's half (4 psi) between steps, within padding of the formula 4 + 12/2 = 10
  // psi; ZeRO-3 holds 16/dp psi: 8 on 2 replicas, 4 on 4.
  struct Case {
    const char* tag;
    int zero, dp;
    double formula, state;
  };
  for (const Case& c : {Case{"mem-z1", 1, 2, 12.0, 4.0}, Case{"mem-z1-dp4", 1, 4, 10.0, 2.0},
                        Case{"mem-z2", 2, 2, 10.0, 4.0}, Case{"mem-z3", 3, 2, 8.0, 4.0},
                        Case{"mem-z3-dp4", 3, 4, 4.0, 2.0}}) {
    std::string log;
    const std::string job = GptJob();
    ASSERT_EQ(Launch(job, 0, c.dp, {"parallel.zero=" + std::to_string(c.zero), "train.steps=2",
                                    "train.metrics_path=" + Metrics(c.tag)}, &log), 0)
        << log;
    EXPECT_NE(log.find("optimizer state"), std::string::npos) << log;
    for (int r = 0; r < c.dp; ++r) {
      nlohmann::json mem;
      std::ifstream in(Rank(c.tag, r));
      for (std::string line; std::getline(in, line);) {
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_object() && j.contains("memory")) mem = j["memory"];
      }
      ASSERT_TRUE(mem.is_object()) << c.tag << " rank " << r << "\n" << log;
      const double psi = mem["psi"].get<double>();
      const double between = mem["param_bytes"].get<double>() + mem["grad_bytes_between"].get<double>() +
                             mem["state_bytes"].get<double>();
      EXPECT_EQ(mem["formula_bytes_per_param"].get<double>(), c.formula) << c.tag;
      EXPECT_NEAR(between / psi, c.formula, 0.1) << c.tag << " " << mem.dump();
      EXPECT_NEAR(mem["state_bytes"].get<double>() / psi, c.state, 0.05) << c.tag << " " << mem.dump();
    }
  }
}

}  // namespace
}  // namespace strata
