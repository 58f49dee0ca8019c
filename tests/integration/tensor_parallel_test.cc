// tensor_parallel_test.cc: tensor parallelism end to end (strata-launch, real trainer
// processes on loopback, Gloo within each tensor-parallel group):
//  - TensorParallelTest: gpt at tp 2 (plain, with full recompute, sequence-parallel), the seeds'
//    MLP at tp 2
//    and dp 2 x tp 2, and the parameter servers (ps, BSP) at tp 2 reproduce the single process's
//    losses at every step and, gathered from the checkpoint's shards, its final weights;
//    models that do not split over tp are refused naming the field.
//  - ThreeDTest: gpt under every (dp, tp, pp) in {1, 2}^3, Megatron's rank order, and 2 x 2 x 2
//    with sequence parallelism.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/integration/equivalence.h"

namespace strata {
namespace {

using testing::Losses;
using testing::MaxRelativeDifference;

// 4 heads and a vocabulary of 256: both split over 2; 2 blocks: 4 units, enough for pp 2.
const char* kGpt =
    "model: {kind: gpt, layers: 2, heads: 4, width: 32, context: 16}\n"
    "data: {kind: text, path: " STRATA_SOURCE_DIR "/tests/data/corpus.txt, eval_samples: 512}\n"
    "optimizer: {kind: adamw, lr: 0.003, clip_norm: 1.0}\n"
    "train: {steps: 20, batch_size: 8, micro_batches: 4, log_every: 1, progress: false}\n"
    "sync: {mode: allreduce}\n";

// The seeds' Paddle example: 1024 -> 4096 -> 1024, w0 split by columns and w1 by rows over tp.
const char* kSeedsMlp =
    "model: {kind: mlp, mlp_in: 1024, mlp_hidden: 4096, mlp_out: 1024}\n"
    "data: {kind: regression, eval_samples: 64}\n"
    "optimizer: {kind: sgd, lr: 0.05, momentum: 0.9, clip_norm: 5.0}\n"
    "train: {steps: 20, batch_size: 16, micro_batches: 2, log_every: 1, progress: false}\n"
    "sync: {mode: allreduce}\n";

// The row-parallel products sum in two parts: the weights after 20 AdamW steps (lr 3e-3) agree
// to 1e-4 + 1e-3 |w|, not to the last bits (see EquivalenceTest::weight_abs_tol_); the losses
// to 1e-5 as everywhere.
class TensorParallelTest : public testing::EquivalenceTest {
 protected:
  void SetUp() override {
    EquivalenceTest::SetUp();
    weight_abs_tol_ = 1e-4f;
    weight_rel_tol_ = 1e-3f;
  }
};
class ThreeDTest : public TensorParallelTest {};

TEST_F(TensorParallelTest, GptTp2MatchesOneProcess) {
  const std::string job = Job("gpt", kGpt);
  RunReference(job);
  ExpectMatchesReference(job, "tp2", 2, 2, {"parallel.tp=2"});
  ExpectMatchesReference(job, "tp2-recompute", 2, 2, {"parallel.tp=2", "parallel.recompute=full"});
  ExpectMatchesReference(job, "tp2-sequence", 2, 2, {"parallel.tp=2", "parallel.sequence_parallel=true"});
}

TEST_F(TensorParallelTest, SeedsMlpTp2AndDp2Tp2MatchOneProcess) {
  const std::string job = Job("mlp", kSeedsMlp);
  RunReference(job);
  ExpectMatchesReference(job, "mlp-tp2", 2, 2, {"parallel.tp=2"});
  UseWeightsOf(job, "mlp-dp2", 2, {});
  ExpectMatchesReference(job, "mlp-dp2tp2", 4, 2, {"parallel.tp=2"});
}

// On the servers each tp shard has tables of its own ("#tp0/2"), shared by its replicas, and
// a shard's table starts as its slice of the unsplit tensor (the servers initialise it from the
// InitSpec's shard): gpt under ps and hybrid at tp 2, and ps at tp 2 x pp 2, computes what one
// process does. (At
// tp 1 gpt's embedding is a sparse table, whose momentum the servers apply lazily, to the rows a
// step touches: with momentum that differs from one process by design.)
TEST_F(TensorParallelTest, OnTheServersTp2MatchesOneProcess) {
  const std::string job = Job("ps",
      "model: {kind: gpt, layers: 2, heads: 4, width: 32, context: 16}\n"
      "data: {kind: text, path: " STRATA_SOURCE_DIR "/tests/data/corpus.txt, eval_samples: 512}\n"
      "optimizer: {kind: sgd, lr: 0.1, momentum: 0.9}\n"
      "train: {steps: 20, batch_size: 8, micro_batches: 2, log_every: 1, progress: false}\n"
      "sync: {mode: ps, consistency: bsp}\n");
  RunReference(job);
  for (const char* mode : {"ps", "hybrid"}) {
    std::string log;
    const std::string tag = std::string(mode) + "-tp2";
    ASSERT_EQ(Launch(job, 2, 2, {"parallel.tp=2", std::string("sync.mode=") + mode, "train.metrics_path=" + Metrics(tag)}, &log), 0) << log;
    EXPECT_LT(MaxRelativeDifference(base_, Losses(Rank(tag, 0))), 1e-5) << tag << "\n" << log;
  }
  {  // tables per (pp, tp) shard: 4 shards of one replica
    std::string log;
    ASSERT_EQ(Launch(job, 2, 4, {"parallel.tp=2", "parallel.pp=2", "train.metrics_path=" + Metrics("ps-tp2pp2")}, &log), 0) << log;
    EXPECT_LT(MaxRelativeDifference(base_, Losses(Rank("ps-tp2pp2", 0))), 1e-5) << log;
  }
  // Replicas of a shard meet on its tables: dp 2 x tp 2 computes what dp 2 does (the seeds' MLP;
  // rank 0 reports its replica's loss, as without tp).
  std::string log;
  const std::vector<std::string> mlp = {"model.kind=mlp", "data.kind=regression"};
  auto with = [&](std::vector<std::string> sets, const std::string& tag) {
    sets.insert(sets.end(), mlp.begin(), mlp.end());
    sets.push_back("train.metrics_path=" + Metrics(tag));
    return sets;
  };
  ASSERT_EQ(Launch(job, 2, 2, with({}, "ps-mlp-dp2"), &log), 0) << log;
  ASSERT_EQ(Launch(job, 2, 4, with({"parallel.tp=2"}, "ps-mlp-dp2tp2"), &log), 0) << log;
  const auto dp2 = Losses(Rank("ps-mlp-dp2", 0));
  ASSERT_EQ(dp2.size(), 20u) << log;
  EXPECT_LT(MaxRelativeDifference(dp2, Losses(Rank("ps-mlp-dp2tp2", 0))), 1e-5) << log;
}

TEST_F(TensorParallelTest, ModelsThatDoNotSplitAreRefusedNamingTheField) {
  std::string log;
  const std::string gpt = Job("gpt", kGpt);
  EXPECT_EQ(Launch(gpt, 0, 3, {"parallel.tp=3"}, &log), 2) << log;
  EXPECT_NE(log.find("model.heads 4 does not split over parallel.tp 3"), std::string::npos) << log;
  EXPECT_EQ(Launch(gpt, 0, 4, {"parallel.tp=4", "model.vocab=258"}, &log), 2) << log;
  EXPECT_NE(log.find("model.vocab 258 does not split over parallel.tp 4"), std::string::npos) << log;
  EXPECT_EQ(Launch(gpt, 0, 4, {"parallel.tp=3"}, &log), 2) << log;
  EXPECT_NE(log.find("parallel.tp * parallel.pp"), std::string::npos) << log;
  EXPECT_EQ(Launch(gpt, 0, 4, {"parallel.tp=4", "model.heads=8", "model.context=18", "parallel.sequence_parallel=true"}, &log), 2) << log;
  EXPECT_NE(log.find("model.context 18 does not split over parallel.tp 4"), std::string::npos) << log;
  EXPECT_EQ(Launch(Job("mlp", kSeedsMlp), 0, 2, {"parallel.tp=2", "parallel.sequence_parallel=true"}, &log), 2) << log;
  EXPECT_NE(log.find("parallel.sequence_parallel splits a sequence: model gpt only"), std::string::npos) << log;
}

// Every layout of 1 to 8 trainers: tp fastest, then dp, then pp. Weights of layouts with dp 2
// are held against dp 2 alone (see EquivalenceTest::UseWeightsOf), the losses against one
// process always.
TEST_F(ThreeDTest, GptEveryLayoutMatchesOneProcess) {
  const std::string job = Job("gpt", kGpt);
  RunReference(job);
  for (int tp : {1, 2}) {
    for (int pp : {1, 2}) {
      if (tp * pp == 1) continue;
      const std::string tag = "dp1-tp" + std::to_string(tp) + "-pp" + std::to_string(pp);
      ExpectMatchesReference(job, tag, tp * pp, tp * pp,
                             {"parallel.tp=" + std::to_string(tp), "parallel.pp=" + std::to_string(pp)});
    }
  }
  // tp 2 x pp 2 under every pipeline schedule (the loop above ran 1f1b).
  const std::pair<const char*, int> schedules[] = {{"gpipe", 1}, {"interleaved", 2}, {"zb-h1", 1}, {"zbv", 2}};
  for (const auto& [schedule, vpp] : schedules) {
    ExpectMatchesReference(job, std::string("dp1-tp2-pp2-") + schedule, 4, 4,
                           {"parallel.tp=2", "parallel.pp=2", std::string("parallel.schedule=") + schedule,
                            "parallel.vpp=" + std::to_string(vpp)});
  }
  UseWeightsOf(job, "dp2", 2, {});
  for (int tp : {1, 2}) {
    for (int pp : {1, 2}) {
      const std::string tag = "dp2-tp" + std::to_string(tp) + "-pp" + std::to_string(pp);
      if (tp * pp == 1) continue;  // the weights' reference itself
      ExpectMatchesReference(job, tag, 2 * tp * pp, tp * pp,
                             {"parallel.dp=2", "parallel.tp=" + std::to_string(tp),
                              "parallel.pp=" + std::to_string(pp), "parallel.schedule=1f1b"});
    }
  }
  // Sequence parallelism in 3D: stage boundaries carry [N, T/2, C], zero-bubble split backward.
  ExpectMatchesReference(job, "dp2-tp2-pp2-sequence", 8, 4,
                         {"parallel.dp=2", "parallel.tp=2", "parallel.pp=2", "parallel.schedule=zb-h1",
                          "parallel.sequence_parallel=true"});
}

}  // namespace
}  // namespace strata
