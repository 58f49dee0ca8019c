// Tests for the training loop: convergence of mlp and ctr, exact resume from checkpoints,
// checkpoint validation, schedules, AUC, and the job file.
#include "trainer/trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/metrics.h"
#include "test_util.h"

namespace strata {
namespace {

std::string TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("strata_trainer_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

TrainJob SmallMlpJob() {
  TrainJob job;
  job.model.kind = ModelOptions::Kind::kMlp;
  job.model.mlp_in = 32;
  job.model.mlp_hidden = 512;
  job.model.mlp_out = 32;
  job.data.kind = DataOptions::Kind::kRegression;
  job.data.latent_dim = 8;  // inputs on a subspace, as in examples/mlp.yaml
  job.data.eval_samples = 512;
  job.optimizer.lr = 0.003;
  job.optimizer.schedule = OptimizerOptions::Schedule::kCosine;
  job.optimizer.warmup_steps = 20;
  job.optimizer.min_lr_ratio = 0.05;
  job.train.steps = 600;
  job.train.batch_size = 128;
  job.train.progress = false;
  job.train.log_every = 100;
  return job;
}

TEST(TrainerTest, MlpRegressionLossFallsHundredfold) {
  auto trainer = Trainer::Create(SmallMlpJob());
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  auto summary = (*trainer)->Run();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  const double first = summary->losses.front(), last = summary->eval.loss;
  std::cout << "mlp: first loss " << first << ", eval loss " << last << ", ratio " << first / last << "\n";
  EXPECT_GE(first / last, 100.0);
}

TEST(TrainerTest, CtrReachesOracleAuc) {
  TrainJob job;
  job.model.kind = ModelOptions::Kind::kCtr;
  job.model.fields = 8;
  job.model.field_vocab = 500;
  job.data.kind = DataOptions::Kind::kClickLog;
  job.data.eval_samples = 50000;
  job.optimizer.lr = 0.01;
  job.optimizer.schedule = OptimizerOptions::Schedule::kCosine;
  job.train.steps = 1000;
  job.train.batch_size = 512;
  job.train.progress = false;
  job.train.log_every = 100;
  auto trainer = Trainer::Create(job);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  auto summary = (*trainer)->Run();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  std::cout << "ctr: auc " << summary->eval.auc << ", oracle auc " << summary->eval.oracle_auc << "\n";
  EXPECT_GT(summary->eval.oracle_auc, 0.75);
  EXPECT_NEAR(summary->eval.auc, summary->eval.oracle_auc, 0.01);
}

// Runs `job` for `steps` steps in one go, and in two runs split at `split` with a checkpoint in
// between (a fresh Trainer resuming from it); the losses must be identical.
void ExpectExactResume(TrainJob job, int64_t steps, int64_t split, const std::string& name) {
  job.train.steps = steps;
  auto full = Trainer::Create(job);
  ASSERT_TRUE(full.ok()) << full.status().ToString();
  auto full_summary = (*full)->Run();
  ASSERT_TRUE(full_summary.ok());

  job.train.checkpoint_dir = TempDir(name);
  job.train.checkpoint_every = split;
  job.train.steps = split;
  auto first = Trainer::Create(job);
  ASSERT_TRUE(first.ok());
  auto first_summary = (*first)->Run();
  ASSERT_TRUE(first_summary.ok());
  job.train.steps = steps;
  auto second = Trainer::Create(job);
  ASSERT_TRUE(second.ok());
  auto second_summary = (*second)->Run();
  ASSERT_TRUE(second_summary.ok()) << second_summary.status().ToString();
  EXPECT_EQ(second_summary->first_step, split);
  std::vector<double> joined = first_summary->losses;
  joined.insert(joined.end(), second_summary->losses.begin(), second_summary->losses.end());
  ASSERT_EQ(joined.size(), full_summary->losses.size());
  for (size_t i = 0; i < joined.size(); ++i) EXPECT_EQ(joined[i], full_summary->losses[i]) << "step " << i;
  EXPECT_EQ(second_summary->eval.loss, full_summary->eval.loss);
  std::filesystem::remove_all(job.train.checkpoint_dir);
}

TEST(TrainerTest, ResumeReproducesLossesExactlyMlpAdamW) {
  TrainJob job = SmallMlpJob();
  job.optimizer.clip_norm = 1.0;
  ExpectExactResume(job, 40, 17, "mlp");
}

// The trainer's /metrics histograms (docs/metrics.md): one step time per step (published every
// log_every steps) and one write time per checkpoint.
TEST(TrainerTest, StepAndCheckpointTimesAreCountedInTheMetrics) {
  TrainJob job = SmallMlpJob();
  job.model.mlp_hidden = 32;
  job.train.steps = 12;
  job.train.log_every = 4;
  job.train.checkpoint_every = 5;
  job.train.checkpoint_dir = TempDir("metrics");
  auto trainer = Trainer::Create(job);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  MetricsRegistry metrics;
  (*trainer)->SetMetrics(&metrics);
  ASSERT_TRUE((*trainer)->Run().ok());
  const std::string text = metrics.Text();
  EXPECT_NE(text.find("# TYPE strata_trainer_step_duration_seconds histogram\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nstrata_trainer_step_duration_seconds_count 12\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nstrata_trainer_step_duration_seconds_bucket{le=\"+Inf\"} 12\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nstrata_trainer_checkpoint_duration_seconds_count 2\n"), std::string::npos) << text;  // steps 5, 10
  std::filesystem::remove_all(job.train.checkpoint_dir);
}

TEST(TrainerTest, ResumeReproducesLossesExactlyCtrSgdMicroBatches) {
  TrainJob job;
  job.model.kind = ModelOptions::Kind::kCtr;
  job.model.field_vocab = 100;
  job.data.kind = DataOptions::Kind::kClickLog;
  job.data.eval_samples = 1000;
  job.optimizer.kind = OptimizerOptions::Kind::kSgd;
  job.optimizer.lr = 0.1;
  job.train.batch_size = 64;
  job.train.micro_batches = 3;
  job.train.progress = false;
  ExpectExactResume(job, 30, 10, "ctr");
}

TEST(TrainerTest, GptLearnsBelowUnigramEntropy) {
  const std::string text = "/usr/share/common-licenses/GPL-3";
  if (!std::filesystem::exists(text)) GTEST_SKIP() << text << " is not installed";
  TrainJob job;
  job.model.kind = ModelOptions::Kind::kGpt;
  job.model.layers = 1;
  job.model.heads = 2;
  job.model.width = 32;
  job.model.context = 32;
  job.model.dropout = 0.1;
  job.data.kind = DataOptions::Kind::kText;
  job.data.path = text;
  job.data.eval_samples = 2048;
  job.optimizer.lr = 0.005;
  job.optimizer.beta2 = 0.95;
  job.optimizer.clip_norm = 1.0;
  job.optimizer.schedule = OptimizerOptions::Schedule::kCosine;
  job.optimizer.warmup_steps = 10;
  job.train.steps = 250;
  job.train.batch_size = 16;
  job.train.progress = false;
  job.train.log_every = 50;
  auto trainer = Trainer::Create(job);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  auto summary = (*trainer)->Run();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  const double entropy = (*trainer)->unigram_entropy();
  std::cout << "gpt: unigram entropy " << entropy << " nats, first loss " << summary->losses.front()
            << ", last train loss " << summary->losses.back() << ", eval loss " << summary->eval.loss << "\n";
  EXPECT_LT(summary->eval.loss, entropy - 0.4);
}

// Running out of memory is a job that asks too much, not a bug: the trainer returns
// ResourceExhausted naming the allocation, whether the model itself does not fit or a step's
// activations do not. (Sizes far beyond any machine's memory, so malloc refuses at once.)
TEST(TrainerTest, OutOfMemoryIsAnErrorNotAnAbort) {
  TrainJob huge_model = SmallMlpJob();
  huge_model.model.mlp_hidden = int64_t{1} << 40;
  auto t = Trainer::Create(huge_model);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kResourceExhausted) << t.status().ToString();
  EXPECT_NE(t.status().message().find("building the model: out of memory allocating"), std::string::npos)
      << t.status().ToString();
  EXPECT_NE(t.status().message().find("1099511627776"), std::string::npos) << t.status().ToString();

  // A context of 2^19 bytes (a 3 MB text file): parameters and the data fit, one head's
  // attention probabilities (T x T floats, 1 TiB) do not.
  const std::string dir = TempDir("oom");
  const std::string text = dir + "/text.txt";
  {
    std::ofstream out(text, std::ios::binary);
    const std::string line = "the quick brown fox jumps over the lazy dog\n";
    for (int64_t n = 0; n < 6 * ((int64_t{1} << 19) + 1); n += line.size()) out << line;
  }
  TrainJob long_context;
  long_context.model.kind = ModelOptions::Kind::kGpt;
  long_context.model.layers = 1;
  long_context.model.heads = 1;
  long_context.model.width = 4;
  long_context.model.context = int64_t{1} << 19;
  long_context.data.kind = DataOptions::Kind::kText;
  long_context.data.path = text;
  long_context.data.eval_samples = (int64_t{1} << 19) + 1;
  long_context.train.steps = 2;
  long_context.train.batch_size = 1;
  long_context.train.progress = false;
  auto trainer = Trainer::Create(long_context);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  auto summary = (*trainer)->Run();
  ASSERT_FALSE(summary.ok());
  EXPECT_EQ(summary.status().code(), StatusCode::kResourceExhausted) << summary.status().ToString();
  EXPECT_NE(summary.status().message().find("training, step 1: out of memory allocating"), std::string::npos)
      << summary.status().ToString();
  EXPECT_EQ((*trainer)->step(), 0);  // no optimizer step ran
  std::filesystem::remove_all(dir);
}

TEST(TrainerTest, CorruptCheckpointIsRejected) {
  TrainJob job = SmallMlpJob();
  job.train.steps = 3;
  job.train.checkpoint_dir = TempDir("corrupt");
  job.train.checkpoint_every = 3;
  auto t = Trainer::Create(job);
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE((*t)->Run().ok());
  const std::string path = job.train.checkpoint_dir + "/step-3";
  {
    std::fstream f(path + "/shard-pp0-tp0.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-100, std::ios::end);
    f.put('\x7f');
  }
  const nn::Parameter& first = *(*t)->model().params().params()[0];
  const std::vector<float> before(first.value.data_as<float>(), first.value.data_as<float>() + first.value.numel());
  Status s = (*t)->LoadCheckpoint(path);
  EXPECT_EQ(s.code(), StatusCode::kCorruption) << s.ToString();
  EXPECT_EQ(std::vector<float>(first.value.data_as<float>(), first.value.data_as<float>() + first.value.numel()), before)
      << "a failed load changed " << first.name;
  TrainJob other = job;
  other.model.mlp_hidden = 64;
  auto t2 = Trainer::Create(other);
  ASSERT_TRUE(t2.ok());
  ASSERT_TRUE((*t)->SaveCheckpoint().ok());
  s = (*t2)->LoadCheckpoint(path);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("global shape"), std::string::npos) << s.ToString();
  std::filesystem::remove_all(job.train.checkpoint_dir);
}

TEST(OptimTest, WarmupCosineSchedule) {
  OptimizerOptions o;
  o.lr = 1.0;
  o.schedule = OptimizerOptions::Schedule::kCosine;
  o.warmup_steps = 10;
  o.min_lr_ratio = 0.1;
  EXPECT_DOUBLE_EQ(LearningRate(o, 0, 110), 0.1);
  EXPECT_DOUBLE_EQ(LearningRate(o, 9, 110), 1.0);
  EXPECT_DOUBLE_EQ(LearningRate(o, 10, 110), 1.0);
  EXPECT_NEAR(LearningRate(o, 109, 110), 0.1, 1e-12);
  EXPECT_LT(LearningRate(o, 60, 110), 0.6);
  o.schedule = OptimizerOptions::Schedule::kConstant;
  EXPECT_DOUBLE_EQ(LearningRate(o, 100, 110), 1.0);
}

TEST(OptimTest, ClipGradNormScalesToMaxNorm) {
  nn::ParameterRegistry reg(ops::Exec::Cpu(), 1);
  nn::Parameter& p = reg.Create("w", {2}, InitSpec::Zeros());
  p.grad.data_as<float>()[0] = 3;
  p.grad.data_as<float>()[1] = 4;
  EXPECT_NEAR(ClipGradNorm(reg, 1.0), 5.0, 1e-9);
  EXPECT_NEAR(GradNorm(reg), 1.0, 1e-5);
  EXPECT_NEAR(ClipGradNorm(reg, 10.0), 1.0, 1e-5);  // below the limit: untouched
}

TEST(DataTest, AucCountsTiesAsHalf) {
  EXPECT_DOUBLE_EQ(Auc({0.1f, 0.2f, 0.3f, 0.4f}, {0, 0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(Auc({0.4f, 0.3f, 0.2f, 0.1f}, {0, 0, 1, 1}), 0.0);
  EXPECT_DOUBLE_EQ(Auc({0.5f, 0.5f}, {0, 1}), 0.5);
  EXPECT_DOUBLE_EQ(Auc({0.1f, 0.5f, 0.5f}, {0, 0, 1}), 0.75);
}

TEST(DataTest, CriteoReaderParsesAndHoldsOut) {
  const std::string dir = TempDir("criteo");
  std::ofstream f(dir + "/day.tsv");
  for (int i = 0; i < 10; ++i) {
    f << (i % 2) << "\t" << i << "\t\t5";
    for (int j = 3; j < 13; ++j) f << "\t" << j;
    for (int j = 0; j < 26; ++j) f << "\t" << (j == 3 ? "" : "a1b2c" + std::to_string((i + j) % 3));
    f << "\n";
  }
  f.close();
  DataOptions d;
  d.kind = DataOptions::Kind::kCriteo;
  d.path = dir + "/day.tsv";
  d.eval_samples = 2;
  ModelOptions m;
  m.kind = ModelOptions::Kind::kCtr;
  m.fields = 26;
  m.dense = 13;
  m.field_vocab = 50;
  auto src = CreateDataSource(d, m, 4);
  ASSERT_TRUE(src.ok()) << src.status().ToString();
  Batch b = (*src)->Next();
  ASSERT_EQ(b.ids.shape(), (Shape{4, 26}));
  ASSERT_EQ(b.x.shape(), (Shape{4, 13}));
  EXPECT_FLOAT_EQ(b.x.data_as<float>()[1 * 13 + 0], std::log1p(1.0f));
  EXPECT_FLOAT_EQ(b.target.data_as<float>()[1], 1.0f);
  for (int64_t i = 0; i < b.ids.numel(); ++i) {
    const int32_t id = b.ids.data_as<int32_t>()[i];
    EXPECT_GE(id, (i % 26) * 50);
    EXPECT_LT(id, (i % 26 + 1) * 50);
  }
  auto eval = (*src)->EvalSet(100);
  ASSERT_EQ(eval.size(), 1u);
  EXPECT_EQ(eval[0].samples, 2);
  std::ofstream bad(dir + "/bad.tsv");
  bad << "1\t2\t3\n";
  bad.close();
  d.path = dir + "/bad.tsv";
  EXPECT_FALSE(CreateDataSource(d, m, 4).ok());
  std::filesystem::remove_all(dir);
}

// The distributed sampler: the shards of every split are disjoint and together are exactly the
// batch one trainer reads, for every synthetic and file source.
TEST(DataTest, ShardsOfEveryBatchTileTheSingleTrainerBatch) {
  ModelOptions mlp;
  mlp.kind = ModelOptions::Kind::kMlp;
  mlp.mlp_in = 5;
  mlp.mlp_out = 3;
  ModelOptions ctr;
  ctr.kind = ModelOptions::Kind::kCtr;
  ctr.fields = 4;
  ctr.field_vocab = 50;
  ModelOptions gpt;
  gpt.kind = ModelOptions::Kind::kGpt;
  gpt.context = 8;
  DataOptions regression, clicks, text;
  clicks.kind = DataOptions::Kind::kClickLog;
  text.kind = DataOptions::Kind::kText;
  text.path = std::string(STRATA_SOURCE_DIR) + "/tests/data/corpus.txt";
  text.eval_samples = 256;
  struct Case {
    DataOptions d;
    ModelOptions m;
  };
  for (const Case& c : {Case{regression, mlp}, Case{clicks, ctr}, Case{text, gpt}}) {
    auto whole = CreateDataSource(c.d, c.m, 8);
    ASSERT_TRUE(whole.ok()) << whole.status().ToString();
    std::vector<Batch> full;
    for (int k = 0; k < 3; ++k) full.push_back((*whole)->Next());
    for (int count : {2, 4}) {
      for (int rank = 0; rank < count; ++rank) {
        auto shard = CreateDataSource(c.d, c.m, 8, {rank, count});
        ASSERT_TRUE(shard.ok()) << shard.status().ToString();
        for (int k = 0; k < 3; ++k) {
          Batch b = (*shard)->Next();
          const int64_t n = 8 / count;
          ASSERT_EQ(b.samples, n);
          for (Tensor Batch::*field : {&Batch::x, &Batch::ids, &Batch::target}) {
            const Tensor& got = b.*field;
            if (!got.defined()) continue;
            const Tensor want = (full[k].*field).Narrow(0, rank * n, n);
            const size_t row = got.nbytes() / n;
            ASSERT_EQ(std::memcmp(got.data(), static_cast<const char*>(want.data()), got.nbytes()), 0)
                << "batch " << k << " shard " << rank << "/" << count << " row bytes " << row;
          }
        }
      }
    }
  }
  EXPECT_FALSE(CreateDataSource(regression, mlp, 6, {0, 4}).ok());  // 6 samples over 4 trainers
  EXPECT_FALSE(CreateDataSource(regression, mlp, 8, {4, 4}).ok());
}

}  // namespace
}  // namespace strata
