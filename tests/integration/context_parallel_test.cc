// context_parallel_test.cc: context parallelism end to end (strata-launch, real trainer
// processes on loopback, Gloo rings): every sample's sequence split over cp ranks.
//  - gpt at cp 2, cp 4, dp 2 x cp 2, cp 2 x tp 2 (with sequence parallelism too), cp 2 x pp 2 and
//    cp 2 under ZeRO-1 and ZeRO-3 reproduces the single process's losses at every one of 20
//    steps (1e-5 relative) and its final weights; through the servers (ps, hybrid, offload;
//    BSP) the losses;
//  - the seeds' mlp on [seq, hidden] samples split along seq does too;
//  - each rank's activations saved for backward, beside 1/cp of the single process's;
//  - a context whose activations exceed train.memory_limit_mb on one process trains at cp 4
//    under the same limit;
//  - refusals name the fields.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/integration/equivalence.h"

namespace strata {
namespace {

using testing::Losses;

// context 16: 2 * cp chunks of every sequence for cp up to 4 (and a tp 2 slice of each).
const char* kGpt =
    "model: {kind: gpt, layers: 2, heads: 4, width: 32, context: 16}\n"
    "data: {kind: text, path: " STRATA_SOURCE_DIR "/tests/data/corpus.txt, eval_samples: 512}\n"
    "optimizer: {kind: adamw, lr: 0.003, clip_norm: 1.0}\n"
    "train: {steps: 20, batch_size: 8, micro_batches: 2, log_every: 1, progress: false}\n"
    "sync: {mode: allreduce}\n";

// The seeds' [seq_len, hidden] samples (seed 003's RandomDataset shape) through their MLP,
// narrowed to keep the test fast.
const char* kSeqMlp =
    "model: {kind: mlp, mlp_in: 64, mlp_hidden: 256, mlp_out: 64}\n"
    "data: {kind: regression, seq_len: 8, eval_samples: 32}\n"
    "optimizer: {kind: sgd, lr: 0.05, momentum: 0.9, clip_norm: 5.0}\n"
    "train: {steps: 20, batch_size: 8, log_every: 1, progress: false}\n"
    "sync: {mode: allreduce}\n";

// The ring's online softmax sums each query's keys in another order than one process: the
// weights after 20 AdamW steps agree to 1e-4 + 1e-3 |w| (as tensor parallelism's); losses 1e-5.
class ContextParallelTest : public testing::EquivalenceTest {
 protected:
  void SetUp() override {
    EquivalenceTest::SetUp();
    weight_abs_tol_ = 1e-4f;
    weight_rel_tol_ = 1e-3f;
  }
  // The "memory" metrics line of a run's rank.
  nlohmann::json MemoryLine(const std::string& tag, int rank) {
    std::ifstream in(Rank(tag, rank));
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("memory")) return j["memory"];
    }
    return {};
  }
};

TEST_F(ContextParallelTest, GptCp2Cp4AndDp2Cp2MatchOneProcess) {
  const std::string job = Job("gpt", kGpt);
  RunReference(job);
  ExpectMatchesReference(job, "cp2", 2, 1, {"parallel.cp=2"});
  ExpectMatchesReference(job, "cp4", 4, 1, {"parallel.cp=4"});
  ExpectMatchesReference(job, "dp2cp2", 4, 1, {"parallel.cp=2", "parallel.dp=2"});
  // Saved activations per rank beside 1/cp of one process's: ring attention keeps (out, lse)
  // and never the [T, T] probabilities, so a cp rank keeps less than a 1/cp share.
  const double one = MemoryLine("local", 0).value("saved_activation_bytes", 0.0);
  ASSERT_GT(one, 0);
  for (const auto& [tag, cp] : std::vector<std::pair<std::string, int>>{{"cp2", 2}, {"cp4", 4}}) {
    for (int r = 0; r < cp; ++r) {
      const double mine = MemoryLine(tag, r).value("saved_activation_bytes", 0.0);
      EXPECT_GT(mine, 0) << tag << " rank " << r;
      EXPECT_LE(mine, one / cp) << tag << " rank " << r << ": " << mine << " bytes against one process's " << one;
      std::printf("[ figures  ] %s rank %d saves %.0f bytes of activations; one process %.0f, 1/cp of it %.0f\n",
                  tag.c_str(), r, mine, one, one / cp);
    }
  }
}

TEST_F(ContextParallelTest, GptCp2WithTp2Pp2AndZeroMatchesOneProcess) {
  const std::string job = Job("gpt", kGpt);
  RunReference(job);
  ExpectMatchesReference(job, "cp2tp2", 4, 2, {"parallel.cp=2", "parallel.tp=2"});
  ExpectMatchesReference(job, "cp2tp2-sequence", 4, 2,
                         {"parallel.cp=2", "parallel.tp=2", "parallel.sequence_parallel=true"});
  ExpectMatchesReference(job, "cp2pp2", 4, 2, {"parallel.cp=2", "parallel.pp=2"});
  // ZeRO shards over the dp x cp ranks that average each gradient.
  ExpectMatchesReference(job, "cp2zero1", 2, 1, {"parallel.cp=2", "parallel.zero=1"});
  ExpectMatchesReference(job, "cp2zero3", 2, 1, {"parallel.cp=2", "parallel.zero=3"});
}

// Through the parameter servers (BSP: a clock averages the pushes of every rank holding a shard,
// dp x cp of them): ps and hybrid at cp 2 x tp 2 (at tp 1 gpt's token table is a sparse table,
// which the servers treat differently from one process by design; tensor_parallel_test.cc),
// offload at dp 2 x cp 2 with AdamW.
TEST_F(ContextParallelTest, GptCp2ThroughTheServersMatchesOneProcess) {
  const std::string sgd = Job("gpt-sgd",
      "model: {kind: gpt, layers: 2, heads: 4, width: 32, context: 16}\n"
      "data: {kind: text, path: " STRATA_SOURCE_DIR "/tests/data/corpus.txt, eval_samples: 512}\n"
      "optimizer: {kind: sgd, lr: 0.1, momentum: 0.9}\n"
      "train: {steps: 20, batch_size: 8, log_every: 1, progress: false}\n"
      "sync: {mode: ps, consistency: bsp}\n");
  RunReference(sgd);
  for (const std::string mode : {"ps", "hybrid"}) {
    std::string log;
    const std::string tag = "servers-" + mode;
    ASSERT_EQ(Launch(sgd, 1, 4, {"parallel.cp=2", "parallel.tp=2", "sync.mode=" + mode,
                                 "train.metrics_path=" + Metrics(tag)}, &log), 0)
        << log;
    EXPECT_LT(testing::MaxRelativeDifference(base_, Losses(Rank(tag, 0))), 1e-5) << tag << "\n" << log;
  }
}

TEST_F(ContextParallelTest, GptCp2OffloadMatchesOneProcess) {
  const std::string adam = Job("gpt-offload",
      "model: {kind: gpt, layers: 2, heads: 4, width: 32, context: 16}\n"
      "data: {kind: text, path: " STRATA_SOURCE_DIR "/tests/data/corpus.txt, eval_samples: 512}\n"
      "optimizer: {kind: adamw, lr: 0.003}\n"
      "train: {steps: 20, batch_size: 8, micro_batches: 2, log_every: 1, progress: false}\n"
      "sync: {mode: offload, consistency: bsp}\n");
  RunReference(adam);
  std::string log;
  ASSERT_EQ(Launch(adam, 1, 4, {"parallel.cp=2", "train.metrics_path=" + Metrics("offload")}, &log), 0) << log;
  EXPECT_LT(testing::MaxRelativeDifference(base_, Losses(Rank("offload", 0))), 1e-5) << "offload\n" << log;
}

TEST_F(ContextParallelTest, SeqMlpSplitAlongSeqMatchesOneProcess) {
  const std::string job = Job("mlp", kSeqMlp);
  RunReference(job);
  ExpectMatchesReference(job, "mlp-cp2", 2, 1, {"parallel.cp=2"});
  ExpectMatchesReference(job, "mlp-cp4", 4, 1, {"parallel.cp=4"});
}

TEST_F(ContextParallelTest, ALongContextOverTheMemoryLimitAloneTrainsAtCp4) {
  // context 256: one process keeps [8, 4, 256, 256] probabilities per block (8 MiB each).
  const std::string job = Job("long",
      "model: {kind: gpt, layers: 2, heads: 4, width: 32, context: 256}\n"
      "data: {kind: text, path: " STRATA_SOURCE_DIR "/tests/data/corpus.txt, eval_samples: 2048}\n"
      "optimizer: {kind: adamw, lr: 0.003}\n"
      "train: {steps: 3, batch_size: 8, log_every: 1, progress: false, memory_limit_mb: 24}\n"
      "sync: {mode: allreduce}\n");
  std::string log;
  EXPECT_NE(RunLocal(job, {"sync.mode=local", "train.metrics_path=" + Rank("alone", 0)}, &log), 0) << log;
  EXPECT_NE(log.find("memory_limit_mb"), std::string::npos) << log;
  ASSERT_EQ(Launch(job, 0, 4, {"parallel.cp=4", "train.metrics_path=" + Metrics("long-cp4")}, &log), 0) << log;
  EXPECT_EQ(Losses(Rank("long-cp4", 0)).size(), 3u) << log;
  for (int r = 0; r < 4; ++r) {
    const double peak = MemoryLine("long-cp4", r).value("step_peak_bytes", 0.0);
    EXPECT_GT(peak, 0) << r;
    EXPECT_LE(peak, 24.0 * (1 << 20)) << "rank " << r;
    std::printf("[ figures  ] context 256 at cp 4: rank %d peak %.1f MiB under the 24 MiB limit\n", r, peak / (1 << 20));
  }
}

TEST_F(ContextParallelTest, RefusalsNameTheFields) {
  std::string log;
  const std::string gpt = Job("gpt", kGpt);
  EXPECT_NE(Launch(gpt, 0, 2, {"parallel.cp=2", "model.context=18"}, &log), 0);
  EXPECT_NE(log.find("model.context 18 must be divisible by 2 * cp = 4"), std::string::npos) << log;
  EXPECT_NE(Launch(gpt, 0, 3, {"parallel.cp=2"}, &log), 0);
  EXPECT_NE(log.find("parallel.tp * parallel.pp * parallel.cp = 2"), std::string::npos) << log;
  const std::string ctr = Job("ctr",
      "model: {kind: ctr, fields: 4, field_vocab: 100, embed_dim: 4, ctr_hidden: 8}\n"
      "data: {kind: click_log, eval_samples: 64}\n"
      "train: {steps: 2, batch_size: 8, progress: false}\n"
      "sync: {mode: allreduce}\n");
  EXPECT_NE(Launch(ctr, 0, 2, {"parallel.cp=2"}, &log), 0);
  EXPECT_NE(log.find("ctr's samples have no sequence to split"), std::string::npos) << log;
  EXPECT_NE(Launch(gpt, 1, 2, {"parallel.cp=2", "sync.mode=ps", "sync.consistency=asp"}, &log), 0);
  EXPECT_NE(log.find("parallel.cp 2 with sync.mode ps needs sync.consistency bsp"), std::string::npos) << log;
}

}  // namespace
}  // namespace strata
