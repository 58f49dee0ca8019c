// offload_test.cc: sync.mode offload through strata-launch (a scheduler, strata-server and
// strata-trainer processes on loopback): the servers hold the fp32 masters and AdamW's state,
// the trainers none. Under BSP it is the same computation as all-reduce + local AdamW (losses
// at every step and the final evaluation); with dp x pp too; the delayed update runs one update
// behind after its warm-up and still learns; ctr keeps its sparse tables; bad settings are
// refused naming the field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "tests/integration/launch_fixture.h"
#include "tests/test_util.h"

namespace strata {
namespace {

using testing::Losses;
using testing::MaxRelativeDifference;

// AdamW with weight decay (at a constant learning rate; GptDp2Pp2 adds a schedule).
const char* kMlp =
    "model: {kind: mlp, mlp_in: 64, mlp_hidden: 128, mlp_out: 16}\n"
    "data: {kind: regression, eval_samples: 256}\n"
    "optimizer: {kind: adamw, lr: 0.003, weight_decay: 0.01}\n"
    "train: {steps: 20, batch_size: 64, log_every: 1, progress: false}\n";

const char* kGpt =
    "model: {kind: gpt, layers: 2, heads: 2, width: 32, context: 16}\n"
    "data: {kind: text, path: CORPUS, eval_samples: 512}\n"
    "optimizer: {kind: adamw, lr: 0.003, beta2: 0.95, weight_decay: 0.01}\n"
    "train: {steps: 20, batch_size: 16, log_every: 1, progress: false}\n";

const char* kCtr =
    "model: {kind: ctr, fields: 8, field_vocab: 300, embed_dim: 8, ctr_hidden: 32}\n"
    "data: {kind: click_log, eval_samples: 20000}\n"
    "optimizer: {kind: adamw, lr: 0.01}\n"
    "train: {steps: 300, batch_size: 256, log_every: 50, progress: false}\n";

double Number(const std::string& log, const std::string& pattern) {
  std::smatch m;
  if (!std::regex_search(log, m, std::regex(pattern))) return -1;
  return std::stod(m[1]);
}

class OffloadTest : public testing::LaunchFixture {
 protected:
  std::string GptJob() {
    std::string text = kGpt;
    text.replace(text.find("CORPUS"), 6, dir_.File("corpus.txt"));
    testing::WriteFile(dir_.File("corpus.txt"), testing::WordCorpus());
    return Job("gpt", text);
  }

  // all-reduce on `trainers` against offload on the same trainers and 2 servers, same plan.
  void ExpectOffloadMatchesAllReduce(const std::string& job, const std::string& tag, int trainers,
                                     const std::vector<std::string>& plan) {
    std::string ar_log, off_log;
    std::vector<std::string> ar = plan, off = plan;
    const std::string ckpt = dir_.File("ckpt-" + tag);
    ar.insert(ar.end(), {"sync.mode=allreduce", "train.metrics_path=" + Metrics(tag + "-ar"),
                         "train.checkpoint_every=20", "train.checkpoint_dir=" + ckpt + "/ar"});
    off.insert(off.end(), {"sync.mode=offload", "train.metrics_path=" + Metrics(tag + "-off"),
                           "train.checkpoint_every=20", "train.checkpoint_dir=" + ckpt + "/off"});
    ASSERT_EQ(Launch(job, 0, trainers, ar, &ar_log), 0) << ar_log;
    ASSERT_EQ(Launch(job, 2, trainers, off, &off_log), 0) << off_log;
    off_log_ = off_log;
    const std::vector<double> a = Losses(Rank(tag + "-ar", 0)), o = Losses(Rank(tag + "-off", 0));
    ASSERT_EQ(a.size(), 20u) << ar_log;
    ASSERT_EQ(o.size(), 20u) << off_log;
    EXPECT_LT(MaxRelativeDifference(a, o), 1e-5) << off_log;
    // The final evaluation reads every weight.
    const double ar_eval = Number(ar_log, "eval loss ([0-9.]+)"), off_eval = Number(off_log, "eval loss ([0-9.]+)");
    ASSERT_GT(ar_eval, 0) << ar_log;
    EXPECT_NEAR(off_eval, ar_eval, 1e-5 * ar_eval) << off_log;
    // The weights at the end: the offload checkpoint holds them (the optimizer state is the
    // servers'), equal to allreduce's.
    const auto ar_weights = testing::ReadCheckpoint(ckpt + "/ar/step-20");
    const auto off_weights = testing::ReadCheckpoint(ckpt + "/off/step-20");
    ASSERT_FALSE(off_weights.empty()) << off_log;
    for (const auto& [name, w] : off_weights) {
      EXPECT_EQ(name.find("adamw."), std::string::npos) << name << ": optimizer state in an offload checkpoint";
      ASSERT_TRUE(ar_weights.contains(name)) << name;
      const std::vector<float>& want = ar_weights.at(name);
      ASSERT_EQ(w.size(), want.size()) << name;
      for (size_t i = 0; i < w.size(); ++i) {
        ASSERT_NEAR(w[i], want[i], 1e-6f + 1e-5f * std::abs(want[i])) << name << "[" << i << "]";
      }
    }
    // No optimizer state on the trainers, and the pipeline's figures in the summary.
    EXPECT_NE(off_log.find("optimizer state 0.000 MiB (0.00 psi), the masters and the optimizer state on the servers"),
              std::string::npos) << off_log;
    EXPECT_GT(Number(off_log, "pushes ([0-9.]+)s and pulls [0-9.]+s in flight"), 0) << off_log;
    EXPECT_GT(Number(off_log, "pushes [0-9.]+s and pulls ([0-9.]+)s in flight"), 0) << off_log;
  }

  // Global clipping at `clip`, low enough to clip most steps: offload clips on the servers by
  // the norm of the averaged gradient over every table of every stage, and matches all-reduce +
  // Trainer::ClipGradients (losses, evaluation, weights); both report the same global norm.
  void ExpectClipsLikeAllReduce(const std::string& job, const std::string& tag, int trainers,
                                std::vector<std::string> plan, double clip) {
    plan.push_back("optimizer.clip_norm=" + std::to_string(clip));
    ExpectOffloadMatchesAllReduce(job, tag, trainers, plan);
    const std::vector<double> a = GradNorms(Rank(tag + "-ar", 0)), o = GradNorms(Rank(tag + "-off", 0));
    ASSERT_EQ(a.size(), 20u);
    ASSERT_EQ(o.size(), 20u) << off_log_;
    EXPECT_LT(MaxRelativeDifference(a, o), 1e-5) << off_log_;
    const auto clipped = std::count_if(a.begin(), a.end(), [&](double n) { return n > clip; });
    EXPECT_GE(clipped, 15) << "clip_norm " << clip << " should clip most of the 20 steps";
  }

  // The "grad_norm" of every line of a metrics file (train.metrics_path) that has one.
  static std::vector<double> GradNorms(const std::string& metrics_path) {
    const std::string text = testing::ReadFile(metrics_path);
    const std::regex field("\"grad_norm\":([-+0-9.eE]+)");
    std::vector<double> out;
    for (auto it = std::sregex_iterator(text.begin(), text.end(), field); it != std::sregex_iterator(); ++it) {
      out.push_back(std::stod((*it)[1]));
    }
    return out;
  }

  // The servers' MiB in (gradients) or out (values), summed over their final stats lines.
  static double ServersMiB(const std::string& log, bool in) {
    double total = 0;
    const std::regex line(in ? "final stats: [^\\n]*?, ([0-9.]+) MiB in /" : "final stats: [^\\n]*?MiB in / ([0-9.]+) MiB out");
    for (auto it = std::sregex_iterator(log.begin(), log.end(), line); it != std::sregex_iterator(); ++it) {
      total += std::stod((*it)[1]);
    }
    return total;
  }
  static void ExpectHalfTheBytes(const std::string& f32_log, const std::string& bf16_log) {
    for (bool in : {true, false}) {
      const double f32 = ServersMiB(f32_log, in), bf16 = ServersMiB(bf16_log, in);
      ASSERT_GT(f32, 0) << f32_log;
      EXPECT_NEAR(bf16 / f32, 0.5, 0.05) << (in ? "in: " : "out: ") << bf16 << " MiB against " << f32;
      std::printf("servers' MiB %s: fp32 %.3f, bf16 %.3f\n", in ? "in" : "out", f32, bf16);
    }
  }
  std::string off_log_;  // the last offload run's
};

TEST_F(OffloadTest, MlpMatchesAllReduceAdamW) {
  ExpectOffloadMatchesAllReduce(Job("mlp", kMlp), "mlp", 2, {});
}

TEST_F(OffloadTest, GptMatchesAllReduceAdamW) {
  const std::string job = GptJob();
  ExpectOffloadMatchesAllReduce(job, "gpt", 2, {});
  // The offload checkpoint serves on one process (infer: eval) with the run's own eval loss.
  std::string log;
  ASSERT_EQ(RunLocal(job, {"infer.mode=eval", "infer.checkpoint=" + dir_.File("ckpt-gpt") + "/off/step-20"}, &log), 0)
      << log;
  const double served = Number(log, "inference done .*: eval loss ([0-9.]+)");
  ASSERT_GT(served, 0) << log;
  EXPECT_NEAR(served, Number(off_log_, "eval loss ([0-9.]+)"), 1e-5 * served) << log;
}

// sync.pull_early (the default): under BSP a unit's next pull goes once backward pushed its
// gradients, stamped with the next clock, and the servers answer it once they applied them:
// every unit but at most those backward did not finish pulls early, and the losses equal,
// bit for bit, those of pulls issued after the clock.
TEST_F(OffloadTest, EarlyPullsBringWhatPullsAfterTheClockBring) {
  const std::string job = GptJob();
  std::string log;
  ASSERT_EQ(Launch(job, 2, 2, {"sync.mode=offload", "train.metrics_path=" + Metrics("early")}, &log), 0) << log;
  ASSERT_EQ(Launch(job, 2, 2, {"sync.mode=offload", "sync.pull_early=false", "train.metrics_path=" + Metrics("late")}, &log),
            0)
      << log;
  const std::vector<double> early = Losses(Rank("early", 0)), late = Losses(Rank("late", 0));
  ASSERT_EQ(early.size(), 20u);
  EXPECT_EQ(early, late);
  auto count = [](const std::string& metrics, const char* field) {
    std::smatch m;
    const std::string text = testing::ReadFile(metrics);
    if (!std::regex_search(text, m, std::regex(std::string("\"") + field + "\":([0-9]+)"))) return int64_t{-1};
    return static_cast<int64_t>(std::stoll(m[1]));
  };
  // gpt's 4 units (embedding, 2 blocks, head): pulled before the first step and during or
  // after each of the 20 (the last ones for the final evaluation), early in every backward.
  const int64_t pulls = count(Rank("early", 0), "unit_pulls"), early_pulls = count(Rank("early", 0), "early_unit_pulls");
  EXPECT_EQ(pulls, 4 * 21) << testing::ReadFile(Rank("early", 0));
  EXPECT_EQ(early_pulls, 4 * 20);
  EXPECT_EQ(count(Rank("late", 0), "early_unit_pulls"), 0);
  EXPECT_EQ(count(Rank("late", 0), "unit_pulls"), 4 * 21);
}

// Each pipeline stage's parameters are its own tables, pushed by its dp replicas. The
// learning-rate schedule (warm-up, then cosine) is the trainers' and rides on every push.
TEST_F(OffloadTest, GptDp2Pp2MatchesAllReduce) {
  ExpectOffloadMatchesAllReduce(GptJob(), "gpt-pp", 4,
                                {"parallel.pp=2", "train.micro_batches=2", "optimizer.schedule=cosine",
                                 "optimizer.warmup_steps=5"});
}

// optimizer.clip_norm under BSP: the servers hold a clock's chunks, answer each trainer the sum
// of squares of the mean gradients, and apply the clock scaled by min(1, clip / norm).
TEST_F(OffloadTest, MlpClipsLikeAllReduce) {
  ExpectClipsLikeAllReduce(Job("mlp", kMlp), "mlp-clip", 2, {}, 0.5);
}

TEST_F(OffloadTest, GptClipsLikeAllReduce) {
  ExpectClipsLikeAllReduce(GptJob(), "gpt-clip", 2, {}, 0.5);
}

// The norm crosses the pipeline stages (all-reduce sums it over the pp group).
TEST_F(OffloadTest, GptDp2Pp2ClipsLikeAllReduce) {
  ExpectClipsLikeAllReduce(GptJob(), "gpt-pp-clip", 4,
                           {"parallel.pp=2", "train.micro_batches=2", "optimizer.schedule=cosine",
                            "optimizer.warmup_steps=5"},
                           0.5);
}

// bf16 on the wire: gradients pushed and weights pulled in bf16, half the bytes each way; the
// servers widen the gradients and keep fp32 masters and state. The bound: a value rounded to
// bf16 is off by at most 2^-9 relative; the loss, a smooth function of the weights, moves by
// about that much or less. Held to 1e-3 relative at every one of 20 steps. The trainers hold
// the weights in bf16 between uses: 2 bytes a parameter, not 4, and no gradients.
TEST_F(OffloadTest, Bf16OnTheWireHalvesTheBytesWithinBf16Tolerance) {
  const std::string job = GptJob();
  std::string f32_log, bf16_log;
  ASSERT_EQ(Launch(job, 2, 2, {"sync.mode=offload", "train.metrics_path=" + Metrics("f32")}, &f32_log), 0) << f32_log;
  // With a checkpoint at the end, which writes the weights the trainers hold in bf16, widened.
  const std::string ckpt = dir_.File("ckpt-bf16");
  ASSERT_EQ(Launch(job, 2, 2,
                   {"sync.mode=offload", "sync.wire=bf16", "train.metrics_path=" + Metrics("bf16"),
                    "train.checkpoint_every=20", "train.checkpoint_dir=" + ckpt},
                   &bf16_log),
            0) << bf16_log;
  EXPECT_TRUE(std::filesystem::exists(ckpt + "/latest")) << bf16_log;
  const std::vector<double> f = Losses(Rank("f32", 0)), b = Losses(Rank("bf16", 0));
  ASSERT_EQ(f.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  EXPECT_NE(f[0], b[0]);  // the first forward already runs on weights rounded to bf16
  EXPECT_LT(MaxRelativeDifference(f, b), 1e-3) << MaxRelativeDifference(f, b);
  ExpectHalfTheBytes(f32_log, bf16_log);
  const std::string weights = "psi [0-9]+ parameters\\): parameters [0-9.]+ MiB \\(([0-9.]+) psi\\)";
  const std::string total = "total ([0-9.]+) psi between steps";
  EXPECT_EQ(Number(f32_log, weights), 4.0) << f32_log;
  EXPECT_EQ(Number(bf16_log, weights), 2.0) << bf16_log;
  // Between steps the weights alone: a unit's gradients live from its backward to its push.
  EXPECT_EQ(Number(f32_log, total), 4.0) << f32_log;
  EXPECT_EQ(Number(bf16_log, total), 2.0) << bf16_log;
  for (const std::string* log : {&f32_log, &bf16_log}) {
    EXPECT_NE(log->find("MiB between steps (0.00 psi)"), std::string::npos) << *log;
    EXPECT_NE(log->find("a unit's exist from its backward until the servers acknowledged their push"), std::string::npos)
        << *log;
  }
  EXPECT_NE(bf16_log.find("are the working weights held in bf16"), std::string::npos) << bf16_log;
}

// Mixed precision through the servers: train.precision bf16 (bf16 matmuls, activations saved in
// bf16) with sync.wire bf16 (gradients and weights in bf16 on the wire, fp32 masters and state on
// the servers). The same bound as the wire's alone, widened to 5e-3: each step's loss moves with
// the roundings of every matmul input as well; the saved activations in about half the bytes.
TEST_F(OffloadTest, Bf16PrecisionAndWireTrackFp32) {
  const std::string job = GptJob();
  std::string f32_log, bf16_log;
  ASSERT_EQ(Launch(job, 2, 2, {"sync.mode=offload", "train.metrics_path=" + Metrics("p32")}, &f32_log), 0) << f32_log;
  ASSERT_EQ(Launch(job, 2, 2,
                   {"sync.mode=offload", "sync.wire=bf16", "train.precision=bf16", "train.metrics_path=" + Metrics("p16")},
                   &bf16_log),
            0)
      << bf16_log;
  const std::vector<double> f = Losses(Rank("p32", 0)), b = Losses(Rank("p16", 0));
  ASSERT_EQ(f.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  EXPECT_LT(MaxRelativeDifference(f, b), 5e-3) << MaxRelativeDifference(f, b);
  EXPECT_GT(MaxRelativeDifference(f, b), 0);
  const std::string saved = "activations saved for backward at most ([0-9.]+) MiB";
  const double f32_saved = Number(f32_log, saved), bf16_saved = Number(bf16_log, saved);
  ASSERT_GT(f32_saved, 0) << f32_log;
  EXPECT_NEAR(bf16_saved / f32_saved, 0.5, 0.05) << bf16_saved << " MiB against " << f32_saved;
  EXPECT_NE(bf16_log.find("(in bf16; matmuls in bf16)"), std::string::npos) << bf16_log;
}

// The delayed update with the weights in bf16 (sync.wire bf16 and the prediction): the pulls
// arriving and the last pull kept as the wire brought them, the prediction rounded to bf16, so
// each of the three copies takes 2 bytes a parameter, not 4; the losses within the wire's bf16
// tolerance of the fp32 run's, widened to 5e-3 (each step's weights rounded once more).
TEST_F(OffloadTest, Bf16WeightsUnderThePredictionTrackFp32) {
  const std::string job = GptJob();
  const std::vector<std::string> common = {"sync.mode=offload", "sync.delayed_update=true", "sync.delayed_warmup=1"};
  auto sets = [&](std::vector<std::string> more) {
    more.insert(more.begin(), common.begin(), common.end());
    return more;
  };
  std::string f32_log, bf16_log;
  ASSERT_EQ(Launch(job, 2, 2, sets({"train.metrics_path=" + Metrics("d32")}), &f32_log), 0) << f32_log;
  ASSERT_EQ(Launch(job, 2, 2, sets({"sync.wire=bf16", "train.metrics_path=" + Metrics("d16")}), &bf16_log), 0)
      << bf16_log;
  const std::vector<double> f = Losses(Rank("d32", 0)), b = Losses(Rank("d16", 0));
  ASSERT_EQ(f.size(), 20u);
  ASSERT_EQ(b.size(), 20u);
  std::printf("delayed, predicted: bf16 against fp32, largest relative difference %.2e\n", MaxRelativeDifference(f, b));
  EXPECT_LT(MaxRelativeDifference(f, b), 5e-3);
  EXPECT_GT(MaxRelativeDifference(f, b), 0);
  EXPECT_LT(b.back(), 0.9 * b.front()) << "learns";
  const std::string total = "total ([0-9.]+) psi between steps";
  EXPECT_EQ(Number(f32_log, total), 12.0) << f32_log;  // the weights, the pulls arriving, the last pull
  EXPECT_EQ(Number(bf16_log, total), 6.0) << bf16_log;
  EXPECT_NE(bf16_log.find("weights predicted"), std::string::npos) << bf16_log;
  EXPECT_NE(bf16_log.find("MiB receive the delayed update's pulls or keep the last one"), std::string::npos) << bf16_log;
}

// The delayed update: the same steps as undelayed through its warm-up (and the one after, which
// runs on the weights of the last undelayed pull), different from then on, and still learning.
// With the weights predicted (the default), the first two delayed steps equal DPU's (nothing to
// extrapolate from yet) and the third differs; the prediction keeps the loss nearer the
// undelayed run's than the stale weights do.
TEST_F(OffloadTest, DelayedUpdateRunsOneUpdateBehindAndStillLearns) {
  const std::string job = GptJob();
  std::string log;
  const std::vector<std::string> common = {"sync.mode=offload", "train.steps=60"};
  auto sets = [&](std::vector<std::string> more) {
    more.insert(more.begin(), common.begin(), common.end());
    return more;
  };
  ASSERT_EQ(Launch(job, 2, 2, sets({"train.metrics_path=" + Metrics("now")}), &log), 0) << log;
  ASSERT_EQ(Launch(job, 2, 2,
                   sets({"sync.delayed_update=true", "sync.delayed_warmup=10", "sync.delayed_predict=false",
                         "train.metrics_path=" + Metrics("dpu")}),
                   &log),
            0) << log;
  EXPECT_NE(log.find("delayed update from step 11"), std::string::npos) << log;
  ASSERT_EQ(Launch(job, 2, 2,
                   sets({"sync.delayed_update=true", "sync.delayed_warmup=10", "train.metrics_path=" + Metrics("pred")}),
                   &log),
            0) << log;
  EXPECT_NE(log.find("delayed update from step 11 (weights predicted)"), std::string::npos) << log;
  const std::vector<double> now = Losses(Rank("now", 0)), dpu = Losses(Rank("dpu", 0)), pred = Losses(Rank("pred", 0));
  ASSERT_EQ(now.size(), 60u);
  ASSERT_EQ(dpu.size(), 60u);
  ASSERT_EQ(pred.size(), 60u);
  for (size_t i = 0; i < 11; ++i) EXPECT_EQ(dpu[i], now[i]) << "step " << i + 1;
  EXPECT_NE(dpu[11], now[11]);  // step 12 runs on the weights before step 11's update
  for (size_t i = 0; i < 12; ++i) EXPECT_EQ(pred[i], dpu[i]) << "step " << i + 1;
  EXPECT_NE(pred[12], dpu[12]);  // step 13 runs on the pull moved on by the update between the last two
  // Learning: the last ten steps' mean well below the first step's loss, and near undelayed.
  // Runs are deterministic (BSP); this one measured 8.7% above undelayed after 60 steps of a
  // small model at a high learning rate. The 2% goal is for examples/gpt_offload.yaml's run
  // (strata-bench offload reports it).
  auto tail = [](const std::vector<double>& l) {
    double s = 0;
    for (size_t i = l.size() - 10; i < l.size(); ++i) s += l[i];
    return s / 10;
  };
  EXPECT_LT(tail(dpu), 0.8 * dpu[0]);
  EXPECT_LT(tail(dpu), 1.15 * tail(now));
  std::printf("last ten steps' mean loss: undelayed %.4f, delayed %.4f, delayed with prediction %.4f\n", tail(now),
              tail(dpu), tail(pred));
  EXPECT_LT(tail(pred) - tail(now), tail(dpu) - tail(now));
  // The second copy of the weights that receives the pulls is counted (memory is logged after
  // the second step: delayed from the second here).
  ASSERT_EQ(Launch(job, 2, 2, sets({"sync.delayed_update=true", "sync.delayed_warmup=1", "train.steps=3"}), &log), 0)
      << log;
  EXPECT_NE(log.find("MiB receive the delayed update's pulls"), std::string::npos) << log;
}

// The servers' DRAM holds a quarter of the fp32 masters and AdamW state at most; the rest lives
// in RocksDB (the tiered store), read back as pushes and pulls touch it: the same losses as a
// run with everything in memory, and the store's hit rate and bytes read in the servers' lines.
TEST_F(OffloadTest, StateFourTimesTheServersDramTrainsToTheSameLosses) {
  const std::string job = GptJob();
  std::string mem_log, tier_log;
  ASSERT_EQ(Launch(job, 2, 2, {"sync.mode=offload", "sync.chunk_kb=2", "model.width=128", "train.metrics_path=" + Metrics("mem")},
                   &mem_log),
            0) << mem_log;
  // A wider model (psi 0.46 M: 5.5 MB of state), 2 KiB chunks (6 KiB records with AdamW's
  // moments) and a DRAM budget of two records per table.
  ASSERT_EQ(Launch(job, 2, 2, {"sync.mode=offload", "sync.chunk_kb=2", "model.width=128",
                               "train.metrics_path=" + Metrics("tier"), "server.store.kind=tiered",
                               "server.store.path=" + dir_.File("stores"), "server.store.dram_budget_mb=0.013"},
                   &tier_log),
            0) << tier_log;
  const std::vector<double> mem = Losses(Rank("mem", 0)), tier = Losses(Rank("tier", 0));
  ASSERT_EQ(mem.size(), 20u);
  ASSERT_EQ(tier.size(), 20u);
  EXPECT_EQ(MaxRelativeDifference(mem, tier), 0.0);
  // State (value, m, v: 12 bytes a parameter) against what both servers held in DRAM.
  const double psi = Number(tier_log, "memory \\(offload, dp 2, psi ([0-9]+) parameters\\)");
  ASSERT_GT(psi, 0) << tier_log;
  const std::regex rate("store hit rate ([0-9.]+)% \\([0-9]+ hits, ([0-9]+) misses\\), ([0-9.]+) MiB read by misses "
                        "\\([0-9.]+ MiB/s over [0-9.]+ s\\), ([0-9]+) bytes resident in DRAM");
  int servers = 0;
  double resident = 0;
  for (auto it = std::sregex_iterator(tier_log.begin(), tier_log.end(), rate); it != std::sregex_iterator(); ++it) {
    ++servers;
    EXPECT_LT(std::stod((*it)[1]), 90.0) << it->str();  // the tier was read
    EXPECT_GT(std::stod((*it)[3]), 0.0) << it->str();
    resident += std::stod((*it)[4]);
  }
  EXPECT_EQ(servers, 2) << tier_log;
  EXPECT_GT(resident, 0) << tier_log;
  EXPECT_GE(12 * psi, 4 * resident) << "psi " << psi;
}

// ctr's hashed embeddings stay sparse tables (rows pulled by the batch), its MLP dense ones in
// the unit pipeline: it learns the planted model as ps mode does. With sync.wire bf16 the rows
// travel in bf16 too: half the bytes each way, the same AUC.
TEST_F(OffloadTest, CtrKeepsSparseTablesAndReachesThePsAuc) {
  const std::string job = Job("ctr", kCtr);
  std::string log, f32_log;
  ASSERT_EQ(Launch(job, 2, 2, {"sync.mode=ps", "sync.consistency=bsp"}, &log), 0) << log;
  const double ps = Number(log, "auc ([0-9.]+) \\(oracle");
  ASSERT_GT(ps, 0.75) << log;
  ASSERT_EQ(Launch(job, 2, 2, {"sync.mode=offload", "sync.consistency=bsp"}, &f32_log), 0) << f32_log;
  EXPECT_NEAR(Number(f32_log, "auc ([0-9.]+) \\(oracle"), ps, 0.01) << f32_log;
  EXPECT_NE(f32_log.find("(sparse"), std::string::npos) << f32_log;  // the servers' table lines
  ASSERT_EQ(Launch(job, 2, 2, {"sync.mode=offload", "sync.consistency=bsp", "sync.wire=bf16"}, &log), 0) << log;
  EXPECT_NEAR(Number(log, "auc ([0-9.]+) \\(oracle"), ps, 0.01) << log;
  std::printf("auc: ps %.4f, offload %.4f, offload with bf16 on the wire %.4f\n", ps,
              Number(f32_log, "auc ([0-9.]+) \\(oracle"), Number(log, "auc ([0-9.]+) \\(oracle"));
  ExpectHalfTheBytes(f32_log, log);
  // hybrid: the rows alone on the servers, in bf16 both ways.
  ASSERT_EQ(Launch(job, 2, 2, {"sync.mode=hybrid"}, &f32_log), 0) << f32_log;
  ASSERT_EQ(Launch(job, 2, 2, {"sync.mode=hybrid", "sync.wire=bf16"}, &log), 0) << log;
  EXPECT_NEAR(Number(log, "auc ([0-9.]+) \\(oracle"), Number(f32_log, "auc ([0-9.]+) \\(oracle"), 0.01) << log;
  ExpectHalfTheBytes(f32_log, log);
}

TEST_F(OffloadTest, RefusesWhatTheServersCannotDo) {
  const std::string job = Job("mlp", kMlp);
  std::string log;
  EXPECT_EQ(Launch(job, 2, 2, {"sync.mode=offload", "sync.consistency=asp", "optimizer.clip_norm=1"}, &log), 1) << log;
  EXPECT_NE(log.find("optimizer.clip_norm (global) with sync.mode: offload needs sync.consistency: bsp, not asp"),
            std::string::npos) << log;
  EXPECT_EQ(Launch(job, 2, 2, {"sync.mode=allreduce", "sync.delayed_update=true"}, &log), 2) << log;
  EXPECT_NE(log.find("delayed_update"), std::string::npos) << log;
  EXPECT_NE(log.find("is only for mode: offload"), std::string::npos) << log;
  EXPECT_EQ(Launch(job, 0, 2, {"sync.mode=offload"}, &log), 2) << log;
  EXPECT_NE(log.find("sync.mode offload needs at least one server"), std::string::npos) << log;
  // An offload checkpoint holds weights, not the servers' optimizer state: not a resume point.
  const std::vector<std::string> ckpt = {"sync.mode=offload", "train.steps=2", "train.checkpoint_every=2",
                                         "train.checkpoint_dir=" + dir_.File("ckpt")};
  ASSERT_EQ(Launch(job, 2, 2, ckpt, &log), 0) << log;
  EXPECT_EQ(Launch(job, 2, 2, ckpt, &log), 1) << log;
  EXPECT_NE(log.find("under sync.mode offload the servers hold the optimizer state"), std::string::npos) << log;
}

}  // namespace
}  // namespace strata
