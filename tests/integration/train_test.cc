// train_test.cc: end-to-end training through strata-launch (real processes on loopback: a
// scheduler, strata-server and strata-trainer): every data-parallel split reproduces the
// single-process run, asynchronous training reaches the synchronous AUC, the all-reduce overlaps
// backward in the recorded timelines, and a lost trainer is handled as its sync mode says.
#include <gtest/gtest.h>
#include <signal.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "tests/integration/launch_fixture.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using testing::BinPath;
using testing::Losses;
using testing::MaxRelativeDifference;
using testing::ReadCheckpoint;
using testing::ReadFile;
using testing::Subprocess;
using testing::TempDir;
using testing::WriteFile;
using Millis = std::chrono::milliseconds;

const char* kMlp =
    "model: {kind: mlp, mlp_in: 64, mlp_hidden: 128, mlp_out: 16}\n"
    "data: {kind: regression, eval_samples: 256}\n"
    "optimizer: {kind: sgd, lr: 0.05, momentum: 0.9}\n"
    "train: {steps: 20, batch_size: 64, log_every: 1, progress: false}\n";

const char* kGpt =
    "model: {kind: gpt, layers: 2, heads: 2, width: 32, context: 16}\n"
    "data: {kind: text, path: CORPUS, eval_samples: 512}\n"
    "optimizer: {kind: adamw, lr: 0.003}\n"
    "train: {steps: 20, batch_size: 16, log_every: 1, progress: false}\n";

const char* kCtr =
    "model: {kind: ctr, fields: 8, field_vocab: 300, embed_dim: 8, ctr_hidden: 32}\n"
    "data: {kind: click_log, eval_samples: 20000}\n"
    "optimizer: {kind: adamw, lr: 0.01}\n"
    "train: {steps: 300, batch_size: 256, log_every: 50, progress: false}\n";

class TrainTest : public testing::LaunchFixture {
 protected:
  // The same global batch split over 1, 2 and 4 all-reducing trainers gives the
  // single-process losses at every step, and the same weights at the end.
  void ExpectAllReduceEquivalence(const std::string& job, const std::string& model) {
    std::string log;
    const std::string ckpt = dir_.File("ckpt");
    ASSERT_EQ(RunLocal(job, {"train.metrics_path=" + Rank(model + "-local", 0), "train.checkpoint_every=20",
                             "train.checkpoint_dir=" + ckpt + "/local"},
                       &log), 0) << log;
    const auto base = Losses(Rank(model + "-local", 0));
    ASSERT_EQ(base.size(), 20u) << log;
    const auto base_weights = ReadCheckpoint(ckpt + "/local/step-20");
    ASSERT_FALSE(base_weights.empty());
    for (int trainers : {1, 2, 4}) {
      const std::string tag = model + "-ar" + std::to_string(trainers);
      ASSERT_EQ(Launch(job, 0, trainers,
                       {"sync.mode=allreduce", "sync.bucket_mb=0.01", "train.metrics_path=" + Metrics(tag),
                        "train.checkpoint_every=20", "train.checkpoint_dir=" + ckpt + "/" + tag},
                       &log), 0) << log;
      EXPECT_LT(MaxRelativeDifference(base, Losses(Rank(tag, 0))), 1e-5) << trainers << " trainers";
      const auto weights = ReadCheckpoint(ckpt + "/" + tag + "/step-20");
      ASSERT_EQ(weights.size(), base_weights.size());
      for (const auto& [name, w] : base_weights) {
        const auto& got = weights.at(name);
        ASSERT_EQ(got.size(), w.size()) << name;
        for (size_t i = 0; i < w.size(); ++i) {
          ASSERT_NEAR(got[i], w[i], 1e-5f + 1e-4f * std::abs(w[i]))
              << name << "[" << i << "], " << trainers << " trainers";
        }
      }
    }
  }

};

TEST_F(TrainTest, MlpAllReduceOn1To4TrainersMatchesOneProcess) {
  ExpectAllReduceEquivalence(Job("mlp", kMlp), "mlp");
}

TEST_F(TrainTest, GptAllReduceOn1To4TrainersMatchesOneProcess) {
  // The test's own text (testing::WordCorpus), not a file of the repository that changes.
  const std::string corpus = dir_.File("corpus.txt");
  testing::WriteFile(corpus, testing::WordCorpus());
  std::string text = kGpt;
  text.replace(text.find("CORPUS"), 6, corpus);
  ExpectAllReduceEquivalence(Job("gpt", text), "gpt");
}

// SGD on the servers under BSP (gradients averaged per clock) is the same computation as
// all-reduce + local SGD. In ps mode every trainer reports its own loss: their mean is the
// global one.
TEST_F(TrainTest, PsBspSgdMatchesAllReduceSgd) {
  const std::string job = Job("mlp", kMlp);
  std::string log;
  ASSERT_EQ(Launch(job, 0, 2, {"sync.mode=allreduce", "train.metrics_path=" + Metrics("ar")}, &log), 0) << log;
  ASSERT_EQ(Launch(job, 2, 2, {"sync.mode=ps", "sync.consistency=bsp", "train.metrics_path=" + Metrics("ps")}, &log), 0) << log;
  const auto ar = Losses(Rank("ar", 0));
  const auto ps0 = Losses(Rank("ps", 0)), ps1 = Losses(Rank("ps", 1));
  ASSERT_EQ(ps0.size(), 20u);
  ASSERT_EQ(ps1.size(), 20u);
  std::vector<double> ps(20);
  for (size_t i = 0; i < 20; ++i) ps[i] = (ps0[i] + ps1[i]) / 2;
  EXPECT_LT(MaxRelativeDifference(ar, ps), 1e-5);
}

double Auc(const std::string& log) {
  std::smatch m;
  if (!std::regex_search(log, m, std::regex("auc ([0-9.]+) \\(oracle"))) return -1;
  return std::stod(m[1]);
}

TEST_F(TrainTest, CtrAsynchronousAndBoundedStalenessReachTheSynchronousAuc) {
  const std::string job = Job("ctr", kCtr);
  std::string log;
  ASSERT_EQ(Launch(job, 2, 2, {"sync.mode=ps", "sync.consistency=bsp"}, &log), 0) << log;
  const double bsp = Auc(log);
  ASSERT_GT(bsp, 0.75) << log;  // well above chance: the planted model is learnable
  ASSERT_EQ(Launch(job, 2, 2, {"sync.mode=ps", "sync.consistency=asp"}, &log), 0) << log;
  EXPECT_NEAR(Auc(log), bsp, 0.01) << log;
  ASSERT_EQ(Launch(job, 2, 2, {"sync.mode=ps", "sync.consistency=ssp", "sync.staleness=2"}, &log), 0) << log;
  EXPECT_NEAR(Auc(log), bsp, 0.01) << log;
  ASSERT_EQ(Launch(job, 2, 2, {"sync.mode=hybrid", "sync.consistency=asp"}, &log), 0) << log;
  EXPECT_NEAR(Auc(log), bsp, 0.01) << log;
}

// In each rank's timeline the first buckets' all-reduce starts before that step's backward
// ends: communication overlaps computation rather than following it.
TEST_F(TrainTest, AllReduceOverlapsBackwardInTheTimeline) {
  const std::string job = Job("mlp", std::string(kMlp));
  std::string log;
  const std::string trace = dir_.File("trace-{rank}.json");
  ASSERT_EQ(Launch(job, 0, 2,
                   {"sync.mode=allreduce", "sync.bucket_mb=0.01", "sync.trace_path=" + trace,
                    "model.mlp_hidden=1024", "model.mlp_in=1024"},
                   &log), 0) << log;
  EXPECT_NE(log.find("hidden behind backward"), std::string::npos) << log;
  for (int rank : {0, 1}) {
    const testing::OverlapCount c =
        testing::CountAllReduceOverlap(dir_.File("trace-" + std::to_string(rank) + ".json"));
    ASSERT_EQ(c.steps, 20) << "rank " << rank;
    // Backward hands the first buckets over while it still has the first layer's two large
    // GEMMs to run: in every step once the bucket order is learnt (step 0 uses creation order).
    EXPECT_GE(c.handed, 19) << "rank " << rank;
    // Whether the communication thread then gets a core before backward ends is up to the OS:
    // on a loaded 2-core machine it often does not, so one step must show it, not most.
    EXPECT_GE(c.started, 1) << "rank " << rank;
  }
}

TEST_F(TrainTest, LauncherRefusesALocalJob) {
  std::string log;
  EXPECT_EQ(Launch(Job("mlp", kMlp), 0, 2, {}, &log), 2) << log;
  EXPECT_NE(log.find("sync.mode is local"), std::string::npos) << log;
}

// Kills trainer 2 of 3 (with 2 servers) once training is under way.
int RunAndKillATrainer(const std::string& job, const std::vector<std::string>& sets,
                       const std::string& log_path, std::string* log, std::vector<pid_t>* started,
                       bool keep_going = false) {
  return testing::RunAndKillATrainer(job, 2, 3, 2, sets, log_path, log, started, keep_going);
}

TEST_F(TrainTest, AsynchronousTrainingFinishesWithoutAKilledTrainer) {
  std::string log;
  std::vector<pid_t> started;
  const int code = RunAndKillATrainer(
      Job("ctr", kCtr), {"sync.mode=ps", "sync.consistency=asp", "train.steps=3000", "train.batch_size=255"},
      dir_.File("asp.log"), &log, &started);
  EXPECT_EQ(code, 1) << log;
  EXPECT_NE(log.find("trainer 2 (pid"), std::string::npos) << log;
  EXPECT_NE(log.find("go on without it"), std::string::npos) << log;
  EXPECT_NE(log.find("[trainer 0] "), std::string::npos) << log;
  EXPECT_NE(log.find("done: 3000 steps"), std::string::npos) << log;  // the others finished
  EXPECT_EQ(started.size(), 6u) << log;
  for (pid_t pid : started) EXPECT_NE(kill(pid, 0), 0) << "pid " << pid << " survived";
}

TEST_F(TrainTest, SynchronousTrainingFailsNamingTheKilledTrainer) {
  std::string log;
  std::vector<pid_t> started;
  const int code = RunAndKillATrainer(
      Job("ctr", kCtr),
      {"sync.mode=ps", "sync.consistency=bsp", "train.steps=1000000", "train.batch_size=255",
       "sync.timeout_ms=20000"},
      dir_.File("bsp.log"), &log, &started, /*keep_going=*/true);
  EXPECT_EQ(code, 1) << log;
  // The launcher lets the others run on (--keep-going), so what they do is seen: the servers
  // give up the BSP clock as soon as the scheduler declares the trainer dead, and say which
  // one; the trainers fail with that error, and the launcher stops everything.
  EXPECT_NE(log.find("lost trainer 2"), std::string::npos) << log;
  EXPECT_EQ(started.size(), 6u) << log;
  for (pid_t pid : started) EXPECT_NE(kill(pid, 0), 0) << "pid " << pid << " survived";
}

}  // namespace
}  // namespace strata
