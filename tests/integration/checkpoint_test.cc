// checkpoint_test.cc: checkpoints across parallel layouts end to end (strata-launch, real
// trainer processes): a checkpoint written by 2 data-parallel replicas resumes under one
// process, a 2-stage pipeline, 4 replicas and tensor parallelism, and through strata-ckpt's
// full-model file; one written by dp 2 x tp 2 resumes under tp 2 x pp 2, tp 4 and 4 replicas
// (the vocab-parallel token table read back as the whole, row-keyed one), and through the
// full-model file under one process and tp 2 x pp 2. Each run continues the uninterrupted run's
// losses (1e-5 relative) at every step after the resume, with the same global batch; strata-ckpt
// inspect describes checkpoints and their tensor-parallel shards and finds a damaged file.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "tests/integration/launch_fixture.h"
#include "tests/test_util.h"
#include "trainer/checkpoint_file.h"

namespace strata {
namespace {

namespace fs = std::filesystem;
using testing::Losses;
using testing::MaxRelativeDifference;

// 2 blocks: 4 units, enough for 2 stages; a global batch of 8 splits over 4 replicas.
const char* kGpt =
    "model: {kind: gpt, layers: 2, heads: 2, width: 32, context: 16}\n"
    "data: {kind: text, path: " STRATA_SOURCE_DIR "/tests/data/corpus.txt, eval_samples: 64}\n"
    "optimizer: {kind: adamw, lr: 0.003, clip_norm: 1.0}\n"
    "train: {steps: 10, batch_size: 8, micro_batches: 2, log_every: 1, progress: false}\n"
    "sync: {mode: allreduce}\n";

// The same with 4 heads (2 per tensor-parallel rank); the vocabulary (256) splits into 2.
const char* kGptTp =
    "model: {kind: gpt, layers: 2, heads: 4, width: 32, context: 16, vocab: 256, dropout: 0}\n"
    "data: {kind: text, path: " STRATA_SOURCE_DIR "/tests/data/corpus.txt, eval_samples: 64}\n"
    "optimizer: {kind: adamw, lr: 0.003, clip_norm: 1.0}\n"
    "train: {steps: 10, batch_size: 8, micro_batches: 2, log_every: 1, progress: false}\n"
    "sync: {mode: allreduce}\n";

constexpr int kSteps = 10, kSplit = 5;

// A job's uninterrupted run, checkpointing half way, and resumes compared with it.
class CheckpointFixture : public testing::LaunchFixture {
 protected:
  // Runs `job_text` on `trainers` with the plan in `sets`; its checkpoints go to dir_/<tag>/.
  void RunUninterrupted(const char* job_text, const std::string& tag, int trainers, std::vector<std::string> sets) {
    job_ = Job("gpt", job_text);
    std::string log;
    sets.insert(sets.end(), {"train.metrics_path=" + Metrics(tag), "train.checkpoint_dir=" + dir_.File(tag),
                             "train.checkpoint_every=" + std::to_string(kSplit)});
    ASSERT_EQ(Launch(job_, 0, trainers, sets, &log), 0) << log;
    base_ = Losses(Rank(tag, 0));
    ASSERT_EQ(base_.size(), static_cast<size_t>(kSteps)) << log;
  }

  // A checkpoint_dir holding only `step_dir` (so that its latest is that step).
  std::string CheckpointDirWith(const std::string& step_dir, const std::string& tag) {
    const std::string dir = dir_.File("resume-" + tag);
    fs::create_directories(dir);
    fs::copy(step_dir, dir + "/" + fs::path(step_dir).filename().string(), fs::copy_options::recursive);
    testing::WriteFile(dir + "/latest", fs::path(step_dir).filename().string() + "\n");
    return dir;
  }

  // Resumes the job from `ckpt_dir` on `trainers` with the plan in `sets` (sync.mode=local:
  // one process) and compares every step after the resume with the uninterrupted run.
  void ExpectResumeContinues(const std::string& ckpt_dir, const std::string& tag, int trainers,
                             std::vector<std::string> sets) {
    std::string log;
    sets.insert(sets.end(), {"train.metrics_path=" + Metrics(tag), "train.checkpoint_dir=" + ckpt_dir,
                             "train.checkpoint_every=" + std::to_string(kSteps)});
    if (trainers == 0) {
      ASSERT_EQ(RunLocal(job_, sets, &log), 0) << log;
    } else {
      ASSERT_EQ(Launch(job_, 0, trainers, sets, &log), 0) << log;
    }
    EXPECT_NE(log.find("resumed from"), std::string::npos) << tag << "\n" << log;
    const auto losses = Losses(Rank(tag, 0));
    ASSERT_EQ(losses.size(), static_cast<size_t>(kSteps - kSplit)) << tag << "\n" << log;
    const std::vector<double> after(base_.begin() + kSplit, base_.end());
    EXPECT_LT(MaxRelativeDifference(after, losses), 1e-5) << tag << "\n" << log;
  }

  // Checkpoints `a` and `b` hold the same tensors, unsplit within `tolerance` of each other.
  void ExpectSameTensors(const std::string& a, const std::string& b, double tolerance) {
    const auto x = testing::ReadCheckpoint(a), y = testing::ReadCheckpoint(b);
    ASSERT_EQ(x.size(), y.size()) << a << " vs " << b;
    double worst = 0;
    std::string where;
    for (const auto& [name, values] : x) {
      auto it = y.find(name);
      ASSERT_NE(it, y.end()) << name << " is in " << a << ", not in " << b;
      ASSERT_EQ(values.size(), it->second.size()) << name;
      for (size_t i = 0; i < values.size(); ++i) {
        const double d = std::abs(static_cast<double>(values[i]) - it->second[i]);
        if (d > worst) {
          worst = d;
          where = name + "[" + std::to_string(i) + "]";
        }
      }
    }
    EXPECT_LT(worst, tolerance) << a << " vs " << b << ": " << where;
  }

  // Runs strata-ckpt; returns its exit code and its output in *out.
  int Ckpt(const std::vector<std::string>& args, std::string* out) {
    std::vector<std::string> argv = {testing::BinPath("strata-ckpt")};
    argv.insert(argv.end(), args.begin(), args.end());
    testing::Subprocess p(argv, dir_.File("ckpt-" + std::to_string(runs_++) + ".log"));
    const int code = p.Wait(Millis(60000));
    *out = p.Log();
    return code;
  }

  std::string job_;
  std::vector<double> base_;
};

// Written by 2 data-parallel replicas (the token table whole: a row-keyed sparse parameter).
class CheckpointTest : public CheckpointFixture {
 protected:
  void SetUp() override { RunUninterrupted(kGpt, "dp2", 2, {}); }
};

// Written by dp 2 x tp 2: 4 trainers, one shard file per tensor-parallel rank (the token table
// split by rows, the vocab-parallel embedding's dense parameter).
class TensorParallelCheckpointTest : public CheckpointFixture {
 protected:
  void SetUp() override { RunUninterrupted(kGptTp, "dp2tp2", 4, {"parallel.tp=2"}); }
};

TEST_F(CheckpointTest, CheckpointOfDp2ResumesUnderOneProcessPp2AndDp4) {
  const std::string step = dir_.File("dp2/step-" + std::to_string(kSplit));
  ExpectResumeContinues(CheckpointDirWith(step, "local"), "local", 0, {"sync.mode=local"});
  ExpectResumeContinues(CheckpointDirWith(step, "pp2"), "pp2", 2, {"parallel.pp=2", "parallel.schedule=zb-h1"});
  ExpectResumeContinues(CheckpointDirWith(step, "dp4"), "dp4", 4, {});
  // The pipeline wrote one shard file per stage; its checkpoint reads back whole.
  std::string out;
  ASSERT_EQ(Ckpt({"inspect", dir_.File("resume-pp2")}, &out), 0) << out;
  EXPECT_NE(out.find("step 10"), std::string::npos) << out;
  EXPECT_NE(out.find("dp=1 tp=1 pp=2"), std::string::npos) << out;
  EXPECT_NE(out.find("shard-pp1-tp0.bin"), std::string::npos) << out;
  EXPECT_EQ(testing::ReadCheckpoint(dir_.File("resume-pp2")).size(), testing::ReadCheckpoint(step).size());
}

TEST_F(CheckpointTest, CheckpointThroughAFullModelFileResumesUnderPp2) {
  const std::string step = dir_.File("dp2/step-" + std::to_string(kSplit));
  std::string out;
  ASSERT_EQ(Ckpt({"inspect", step}, &out), 0) << out;
  EXPECT_NE(out.find("written by dp=2 tp=1 pp=1"), std::string::npos) << out;
  EXPECT_NE(out.find("step 5, optimizer step 5"), std::string::npos) << out;
  EXPECT_NE(out.find("gpt.block0.attn.qkv.weight [32, 96]: shard-pp0-tp0.bin (whole)"), std::string::npos) << out;
  EXPECT_NE(out.find("checksums ok"), std::string::npos) << out;

  const std::string full = dir_.File("full.bin"), back = dir_.File("from-full");
  ASSERT_EQ(Ckpt({"to-full", step, full}, &out), 0) << out;
  ASSERT_EQ(Ckpt({"inspect", full}, &out), 0) << out;
  EXPECT_NE(out.find("full-model file, every tensor's checksum ok"), std::string::npos) << out;
  ASSERT_EQ(Ckpt({"from-full", full, back}, &out), 0) << out;
  EXPECT_EQ(testing::ReadCheckpoint(back), testing::ReadCheckpoint(step));
  ExpectResumeContinues(back, "from-full-pp2", 2, {"parallel.pp=2", "parallel.schedule=1f1b"});

  // A flipped byte: inspect names the file and exits 1; a trainer refuses to resume from it.
  const std::string damaged = CheckpointDirWith(step, "damaged");
  const std::string file = damaged + "/step-" + std::to_string(kSplit) + "/shard-pp0-tp0.bin";
  {
    auto shard = ShardFile::Open(file);
    ASSERT_TRUE(shard.ok()) << shard.status().ToString();
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(shard->entries()[0].offset + 5));
    f.put('\x55');
  }
  EXPECT_EQ(Ckpt({"inspect", damaged}, &out), 1) << out;
  EXPECT_NE(out.find("shard-pp0-tp0.bin"), std::string::npos) << out;
  EXPECT_NE(out.find("CHECKSUM MISMATCH"), std::string::npos) << out;
  std::string log;
  EXPECT_NE(RunLocal(job_, {"sync.mode=local", "train.checkpoint_dir=" + damaged}, &log), 0) << log;
  EXPECT_NE(log.find("checksum mismatch"), std::string::npos) << log;
}

// The other way: the whole token table (sparse, row-keyed) read back as vocab-parallel shards.
TEST_F(CheckpointTest, CheckpointOfDp2ResumesTensorParallelUnderTp2AndDp2Tp2) {
  const std::string step = dir_.File("dp2/step-" + std::to_string(kSplit));
  ExpectResumeContinues(CheckpointDirWith(step, "tp2"), "tp2", 2, {"parallel.tp=2"});
  ExpectResumeContinues(CheckpointDirWith(step, "dp2tp2"), "dp2tp2", 4, {"parallel.tp=2"});
  std::string out;
  ASSERT_EQ(Ckpt({"inspect", dir_.File("resume-dp2tp2")}, &out), 0) << out;
  EXPECT_NE(out.find("dp=2 tp=2 pp=1"), std::string::npos) << out;
  EXPECT_NE(out.find("gpt.tok.weight [256, 32]: 2 parts [128, 32] on axis 0: part 0 in shard-pp0-tp0.bin, "
                     "part 1 in shard-pp0-tp1.bin"), std::string::npos) << out;
}

TEST_F(TensorParallelCheckpointTest, CheckpointOfDp2Tp2ResumesUnderTp2Pp2Tp4AndDp4) {
  const std::string step = dir_.File("dp2tp2/step-" + std::to_string(kSplit));
  // inspect shows each tensor-parallel rank's file and each split tensor's parts.
  std::string out;
  ASSERT_EQ(Ckpt({"inspect", step}, &out), 0) << out;
  EXPECT_NE(out.find("written by dp=2 tp=2 pp=1"), std::string::npos) << out;
  EXPECT_NE(out.find("shard-pp0-tp1.bin  pp rank 0, tp rank 1, "), std::string::npos) << out;
  EXPECT_NE(out.find("gpt.block0.attn.qkv.weight [32, 96]: 2 parts [32, 48] on axis 1 (3 blocks): part 0 in "
                     "shard-pp0-tp0.bin, part 1 in shard-pp0-tp1.bin"), std::string::npos) << out;
  EXPECT_NE(out.find("gpt.tok.weight [256, 32]: 2 parts [128, 32] on axis 0: part 0 in shard-pp0-tp0.bin, "
                     "part 1 in shard-pp0-tp1.bin"), std::string::npos) << out;
  EXPECT_NE(out.find("gpt.ln_f.weight [32]: shard-pp0-tp0.bin (whole)"), std::string::npos) << out;
  EXPECT_NE(out.find("checksums ok"), std::string::npos) << out;

  ExpectResumeContinues(CheckpointDirWith(step, "tp2pp2"), "tp2pp2", 4,
                        {"parallel.tp=2", "parallel.pp=2", "parallel.schedule=1f1b"});
  ExpectResumeContinues(CheckpointDirWith(step, "tp4"), "tp4", 4, {"parallel.tp=4"});  // parts of parts
  // No tensor parallelism: the token table is whole and row-keyed again.
  ExpectResumeContinues(CheckpointDirWith(step, "dp4"), "dp4", 4, {});
  // Each resumed run ends with the uninterrupted run's weights and optimizer state (float
  // rounding of other reduction orders: a few 1e-7).
  const std::string end = "/step-" + std::to_string(kSteps);
  for (const char* tag : {"tp2pp2", "tp4", "dp4"}) {
    ExpectSameTensors(dir_.File("dp2tp2") + end, dir_.File(std::string("resume-") + tag) + end, 1e-5);
  }
  // The pipeline of tensor-parallel stages wrote one file per (pp, tp) rank, every tensor once.
  ASSERT_EQ(Ckpt({"inspect", dir_.File("resume-tp2pp2")}, &out), 0) << out;
  EXPECT_NE(out.find("dp=1 tp=2 pp=2"), std::string::npos) << out;
  EXPECT_NE(out.find("shard-pp1-tp1.bin  pp rank 1, tp rank 1, "), std::string::npos) << out;
  EXPECT_EQ(testing::ReadCheckpoint(dir_.File("resume-tp2pp2")).size(), testing::ReadCheckpoint(step).size());
}

TEST_F(TensorParallelCheckpointTest, CheckpointOfDp2Tp2ThroughAFullModelFileResumesUnderOneProcessAndTp2Pp2) {
  const std::string step = dir_.File("dp2tp2/step-" + std::to_string(kSplit));
  const std::string full = dir_.File("full.bin"), back = dir_.File("from-full");
  std::string out;
  ASSERT_EQ(Ckpt({"to-full", step, full}, &out), 0) << out;
  ASSERT_EQ(Ckpt({"inspect", full}, &out), 0) << out;
  EXPECT_NE(out.find("full-model file, every tensor's checksum ok"), std::string::npos) << out;
  EXPECT_NE(out.find("gpt.tok.weight [256, 32]: full.bin (whole)"), std::string::npos) << out;
  ASSERT_EQ(Ckpt({"from-full", full, back}, &out), 0) << out;
  EXPECT_EQ(testing::ReadCheckpoint(back), testing::ReadCheckpoint(step));

  const std::string back_step = back + "/step-" + std::to_string(kSplit);
  ExpectResumeContinues(CheckpointDirWith(back_step, "full-local"), "full-local", 0, {"sync.mode=local"});
  ExpectResumeContinues(CheckpointDirWith(back_step, "full-tp2pp2"), "full-tp2pp2", 4,
                        {"parallel.tp=2", "parallel.pp=2", "parallel.schedule=zb-h1"});
}

}  // namespace
}  // namespace strata
