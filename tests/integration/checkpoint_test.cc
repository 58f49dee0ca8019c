// checkpoint_test.cc: checkpoints across parallel layouts end to end (strata-launch, real
// trainer processes): a checkpoint written by 2 data-parallel replicas resumes under one
// process, a 2-stage pipeline and 4 replicas, and through strata-ckpt's full-model file, each
// run continuing the uninterrupted run's losses (1e-5 relative) at every step after the resume;
// strata-ckpt inspect describes checkpoints and finds a damaged file.
#include <gtest/gtest.h>
#include <stdlib.h>

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
    "data: {kind: text, path: " STRATA_SOURCE_DIR "/README.md, eval_samples: 64}\n"
    "optimizer: {kind: adamw, lr: 0.003, clip_norm: 1.0}\n"
    "train: {steps: 10, batch_size: 8, micro_batches: 2, log_every: 1, progress: false}\n"
    "sync: {mode: allreduce}\n";

constexpr int kSteps = 10, kSplit = 5;

class CheckpointTest : public testing::LaunchFixture {
 protected:
  void SetUp() override {
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    job_ = Job("gpt", kGpt);
    // The uninterrupted run on 2 replicas, checkpointing half way.
    std::string log;
    ASSERT_EQ(Launch(job_, 0, 2, {"train.metrics_path=" + Metrics("dp2"), "train.checkpoint_dir=" + dir_.File("dp2"),
                                  "train.checkpoint_every=" + std::to_string(kSplit)},
                     &log), 0) << log;
    base_ = Losses(Rank("dp2", 0));
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

}  // namespace
}  // namespace strata
