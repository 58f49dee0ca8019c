// comm_accounting_test.cc: communication accounting end to end (strata-launch, real trainer
// processes on loopback, Gloo): for gpt with dp 2, dp 2 x pp 2 (1f1b and zbv), tp 2, dp 2 x tp 2
// and tp 2 x pp 2 (zbv, full recompute), and for the mlp with tp 2, every trainer's
// communicators count, per group and op, exactly the bytes the analytical model
// (trainer/parallel/comm_model.h) gives for the layout (ZeRO-2, ZeRO-1 under pp, ZeRO-3 under
// two schedules too); the run summary prints the table; and
// the counts agree across the group (what one pipeline rank sends its neighbour receives,
// replicas all-reduce the same bytes, tensor-parallel ranks the same activations).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <tuple>
#include <nlohmann/json.hpp>

#include "tests/integration/launch_fixture.h"
#include "tests/test_util.h"

namespace strata {
namespace {

constexpr int kSteps = 5;

const char* kGpt =
    "model: {kind: gpt, layers: 2, heads: 2, width: 32, context: 16}\n"
    "data: {kind: text, path: " STRATA_SOURCE_DIR
    "/tests/data/corpus.txt, eval_samples: 64}\n"
    "optimizer: {kind: adamw, lr: 0.003, clip_norm: 1.0}\n"
    "train: {steps: 5, batch_size: 8, micro_batches: 4, log_every: 1, progress: false}\n"
    "sync: {mode: allreduce}\n";

// fc1 16 -> 32 (columns), fc2 32 -> 8 (rows): small, so that the run is quick.
const char* kMlp =
    "model: {kind: mlp, mlp_in: 16, mlp_hidden: 32, mlp_out: 8}\n"
    "data: {kind: regression, eval_samples: 64}\n"
    "optimizer: {kind: sgd, lr: 0.05, momentum: 0.9, clip_norm: 1.0}\n"
    "train: {steps: 5, batch_size: 16, micro_batches: 2, log_every: 1, progress: false}\n"
    "sync: {mode: allreduce}\n";

class CommAccountingTest : public testing::LaunchFixture {
 protected:
  // Runs the job on `trainers` with `sets` (small buckets: several all-reduces a step, and a
  // mid-run evaluation, which must not count as training traffic); returns every rank's "comm"
  // metrics object, by rank.
  std::vector<nlohmann::json> Run(const std::string& tag, int trainers,
                                  std::vector<std::string> sets, const char* job = kGpt, int servers = 0) {
    std::string log;
    sets.insert(sets.end(), {"sync.bucket_mb=0.01", "train.eval_every=2",
                             "train.metrics_path=" + Metrics(tag)});
    EXPECT_EQ(Launch(Job(tag, job), servers, trainers, sets, &log), 0) << log;
    EXPECT_NE(log.find("communication per step"), std::string::npos) << log;
    EXPECT_NE(log.find("measured bytes equal the model's for every op"), std::string::npos) << log;
    std::vector<nlohmann::json> out;
    for (int r = 0; r < trainers; ++r) {
      nlohmann::json comm;
      std::ifstream in(Rank(tag, r));
      for (std::string line; std::getline(in, line);) {
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_object() && j.contains("comm")) comm = j["comm"];
      }
      EXPECT_TRUE(comm.is_object()) << tag << ": no comm metrics from trainer " << r << "\n" << log;
      out.push_back(comm);
    }
    return out;
  }

  // The group of `dim` in one rank's metrics (null when it has none).
  static nlohmann::json Group(const nlohmann::json& comm, const std::string& dim) {
    for (const auto& g : comm["groups"]) {
      if (g["dim"] == dim) return g;
    }
    return nullptr;
  }

  // Every op of every group: measured bytes equal the model's; and the ops a layout must
  // show are there (so that an empty report cannot pass).
  static void ExpectMatchesModel(const std::vector<nlohmann::json>& ranks, const std::string& tag) {
    for (size_t r = 0; r < ranks.size(); ++r) {
      ASSERT_EQ(ranks[r]["steps"], kSteps) << tag << " rank " << r;
      for (const auto& g : ranks[r]["groups"]) {
        for (const auto& [op, s] : g["ops"].items()) {
          EXPECT_EQ(s["bytes"], s["model_bytes"])
              << tag << " rank " << r << " " << g["group"] << " " << op;
        }
      }
    }
  }
};

TEST_F(CommAccountingTest, Dp2GptBytesPerStepEqualTheModel) {
  const auto ranks = Run("dp2", 2, {});
  ExpectMatchesModel(ranks, "dp2");
  for (int r = 0; r < 2; ++r) {
    const nlohmann::json dp = Group(ranks[r], "dp");
    ASSERT_TRUE(dp.is_object()) << r;
    EXPECT_EQ(dp["group"], "trainers/dp/0");
    EXPECT_EQ(dp["size"], 2);
    EXPECT_TRUE(Group(ranks[r], "pp").is_null());
    // Every step all-reduces the whole model's gradients in several buckets, and the loss.
    EXPECT_GT(dp["ops"]["all_reduce"]["calls"].get<int>(), kSteps);
    EXPECT_GT(dp["ops"]["all_reduce"]["bytes"].get<int64_t>(), 0);
    EXPECT_EQ(dp["ops"]["host_all_reduce"]["bytes"], kSteps * 8);
    EXPECT_EQ(dp["ops"]["all_reduce"]["bytes"],
              Group(ranks[0], "dp")["ops"]["all_reduce"]["bytes"]);
  }
}

// ZeRO: the gradients are reduce-scattered and the parameters all-gathered in buckets padded
// to a multiple of dp (the same bytes both ways), the shards' squared norms summed over dp; no
// all-reduce of tensors. Under dp 2 x pp 2 each stage's replicas shard its own buckets.
TEST_F(CommAccountingTest, Dp2GptZero2AndDp2TimesPp2Zero1BytesPerStepEqualTheModel) {
  for (const auto& [tag, trainers, sets] :
       {std::tuple{"dp2-zero2", 2, std::vector<std::string>{"parallel.zero=2"}},
        std::tuple{"dp2pp2-zero1", 4, std::vector<std::string>{"parallel.zero=1", "parallel.pp=2"}}}) {
    const auto ranks = Run(tag, trainers, sets);
    ExpectMatchesModel(ranks, tag);
    for (int r = 0; r < trainers; ++r) {
      const nlohmann::json dp = Group(ranks[r], "dp");
      ASSERT_TRUE(dp.is_object()) << tag << " " << r;
      EXPECT_FALSE(dp["ops"].contains("all_reduce")) << tag << " " << dp.dump();
      EXPECT_GT(dp["ops"]["reduce_scatter"]["bytes"].get<int64_t>(), 0) << tag;
      EXPECT_GT(dp["ops"]["all_gather"]["bytes"].get<int64_t>(), 0) << tag;
      // The loss, and the shards' squared norms (two doubles), every step.
      EXPECT_EQ(dp["ops"]["host_all_reduce"]["bytes"], kSteps * 24) << tag;
      const nlohmann::json peer = Group(ranks[trainers == 2 ? 1 - r : r ^ 1], "dp");
      EXPECT_EQ(dp["ops"]["reduce_scatter"]["bytes"], peer["ops"]["reduce_scatter"]["bytes"]) << tag;
    }
  }
}

// ZeRO-3: each unit's parameters are all-gathered whenever it computes with them freed; the
// model walks the schedule's actions with the same rule (gpipe, F F F F B B B B, keeps the last
// unit gathered across the forwards and regathers it for all but the first backward; 1f1b at
// pp 1, F B F B ..., keeps it from each forward to its backward: with 4 units and 4
// micro-batches both gather 28 units a step). Mid-run evaluations (eval_every 2) gather too,
// outside the steps' count.
TEST_F(CommAccountingTest, Dp2GptZero3UnderGpipeAnd1f1bBytesPerStepEqualTheModel) {
  int64_t gathered[2] = {0, 0};
  int i = 0;
  for (const char* schedule : {"gpipe", "1f1b"}) {
    const std::string tag = std::string("dp2-zero3-") + schedule;
    const auto ranks = Run(tag, 2, {"parallel.zero=3", std::string("parallel.schedule=") + schedule});
    ExpectMatchesModel(ranks, tag);
    for (int r = 0; r < 2; ++r) {
      const nlohmann::json dp = Group(ranks[r], "dp");
      ASSERT_TRUE(dp.is_object()) << tag << " " << r;
      EXPECT_FALSE(dp["ops"].contains("all_reduce")) << tag << " " << dp.dump();
      const auto rs = dp["ops"]["reduce_scatter"]["bytes"].get<int64_t>();
      const auto ag = dp["ops"]["all_gather"]["bytes"].get<int64_t>();
      // 4 micro-batches, 4 units: at least every unit once in forward and in backward.
      EXPECT_GT(ag, 2 * rs) << tag;
      EXPECT_EQ(dp["ops"]["host_all_reduce"]["bytes"], kSteps * 24) << tag;
      if (r == 0) gathered[i] = ag;
    }
    ++i;
  }
  EXPECT_EQ(gathered[0], gathered[1]);
}

// Hybrid ctr: the embedding tables live on the servers (each step's rows in compact local
// tables); the replicas all-reduce only the dense part.
TEST_F(CommAccountingTest, HybridCtrDp2BytesPerStepEqualTheModel) {
  const char* ctr =
      "model: {kind: ctr}\n"
      "data: {kind: click_log, eval_samples: 256}\n"
      "optimizer: {kind: sgd, lr: 0.05}\n"
      "train: {steps: 5, batch_size: 64, log_every: 1, progress: false}\n"
      "sync: {mode: hybrid}\n";
  const auto ranks = Run("hybrid-ctr", 2, {"optimizer.clip_norm=0"}, ctr, /*servers=*/1);
  ExpectMatchesModel(ranks, "hybrid-ctr");
  const nlohmann::json dp = Group(ranks[0], "dp");
  ASSERT_TRUE(dp.is_object());
  EXPECT_GT(dp["ops"]["all_reduce"]["bytes"].get<int64_t>(), 0);
}

TEST_F(CommAccountingTest, Dp2TimesPp2GptBytesPerStepEqualTheModel) {
  for (const auto& [schedule, vpp] : {std::pair{"1f1b", 1}, std::pair{"zbv", 2}}) {
    const std::string tag = std::string("dp2pp2-") + schedule;
    const auto ranks = Run(tag, 4,
                           {"parallel.pp=2", std::string("parallel.schedule=") + schedule,
                            "parallel.vpp=" + std::to_string(vpp)});
    ExpectMatchesModel(ranks, tag);
    // Megatron's layout: ranks 0, 1 are pipeline rank 0 of replicas 0, 1; ranks 2, 3 rank 1.
    for (int r = 0; r < 4; ++r) {
      const nlohmann::json pp = Group(ranks[r], "pp"), dp = Group(ranks[r], "dp");
      ASSERT_TRUE(pp.is_object() && dp.is_object()) << tag << " rank " << r;
      EXPECT_EQ(pp["group"], "trainers/pp/" + std::to_string(r % 2)) << tag;
      EXPECT_EQ(dp["group"], "trainers/dp/" + std::to_string(r / 2 * 2)) << tag;
      // What this rank sends its pipeline neighbour, the neighbour receives.
      const int neighbour = (r + 2) % 4;
      EXPECT_GT(pp["ops"]["send"]["bytes"].get<int64_t>(), 0) << tag;
      EXPECT_EQ(pp["ops"]["send"]["bytes"], Group(ranks[neighbour], "pp")["ops"]["recv"]["bytes"])
          << tag;
      EXPECT_EQ(pp["ops"]["host_all_reduce"]["bytes"], kSteps * 16) << tag;  // loss, gradient norm
      // Replicas of a stage all-reduce the same gradients.
      EXPECT_EQ(dp["ops"]["all_reduce"]["bytes"],
                Group(ranks[r ^ 1], "dp")["ops"]["all_reduce"]["bytes"])
          << tag;
    }
  }
}

// Ranks `group` of a tensor-parallel group all-reduce the same activations: the same ops, calls
// and bytes; and each did all-reduce over tp, and summed its gradient norm (one double a step).
void ExpectTpGroupAgrees(const std::vector<nlohmann::json>& tp, const std::string& tag) {
  for (size_t i = 0; i < tp.size(); ++i) {
    ASSERT_TRUE(tp[i].is_object()) << tag << " member " << i << " has no tp group";
    EXPECT_EQ(tp[i]["size"], 2) << tag;
    EXPECT_EQ(tp[i]["group"], tp[0]["group"]) << tag;
    EXPECT_GT(tp[i]["ops"]["all_reduce"]["bytes"].get<int64_t>(), 0) << tag;
    EXPECT_EQ(tp[i]["ops"]["host_all_reduce"]["bytes"], kSteps * 8) << tag;
    EXPECT_EQ(tp[i]["ops"], tp[0]["ops"]) << tag;
  }
}

TEST_F(CommAccountingTest, Tp2GptBytesPerStepEqualTheModel) {
  const auto ranks = Run("gpt-tp2", 2, {"parallel.tp=2"});
  ExpectMatchesModel(ranks, "gpt-tp2");
  ExpectTpGroupAgrees({Group(ranks[0], "tp"), Group(ranks[1], "tp")}, "gpt-tp2");
  EXPECT_EQ(Group(ranks[0], "tp")["group"], "trainers/tp/0");
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(Group(ranks[r], "dp").is_null()) << r;
    EXPECT_TRUE(Group(ranks[r], "pp").is_null()) << r;
  }
  // Per micro-batch (train.batch_size 8 samples of 16 tokens, width 32): 5 all-reduces of
  // [128, 32] forward (embedding, 2 x 2 in the blocks), 5 backward (2 x 2 in the blocks, the
  // head), and the loss's [128] and [2, 128]; 4 micro-batches a step.
  const int64_t per_step = 4 * (10 * 128 * 32 + 3 * 128) * 4;
  EXPECT_EQ(Group(ranks[0], "tp")["ops"]["all_reduce"]["bytes"], kSteps * per_step);
}

TEST_F(CommAccountingTest, Dp2TimesTp2GptBytesPerStepEqualTheModel) {
  const auto ranks = Run("gpt-dp2tp2", 4, {"parallel.tp=2"});
  ExpectMatchesModel(ranks, "gpt-dp2tp2");
  // Megatron's layout: tp fastest, so ranks 0, 1 split replica 0's layers and 2, 3 replica 1's.
  for (int r = 0; r < 4; r += 2) {
    ExpectTpGroupAgrees({Group(ranks[r], "tp"), Group(ranks[r + 1], "tp")}, "gpt-dp2tp2");
  }
  for (int r = 0; r < 4; ++r) {
    const nlohmann::json dp = Group(ranks[r], "dp");
    ASSERT_TRUE(dp.is_object()) << r;
    EXPECT_EQ(dp["group"], "trainers/dp/" + std::to_string(r % 2));
    // The replicas of a shard all-reduce its gradients, which are half the split layers'.
    EXPECT_EQ(dp["ops"]["all_reduce"]["bytes"], Group(ranks[r ^ 2], "dp")["ops"]["all_reduce"]["bytes"]);
    EXPECT_EQ(Group(ranks[r], "tp")["ops"], Group(ranks[r ^ 2], "tp")["ops"]);
  }
}

TEST_F(CommAccountingTest, Tp2TimesPp2GptWithFullRecomputeBytesPerStepEqualTheModel) {
  // ZB-V splits backward (I, then W) and puts the embedding and the head on pipeline rank 0;
  // full recompute runs each unit's forward, and its all-reduces, again in I.
  const auto ranks = Run("gpt-tp2pp2", 4,
                         {"parallel.tp=2", "parallel.pp=2", "parallel.schedule=zbv",
                          "parallel.vpp=2", "parallel.recompute=full"});
  ExpectMatchesModel(ranks, "gpt-tp2pp2");
  for (int r = 0; r < 4; r += 2) {
    ExpectTpGroupAgrees({Group(ranks[r], "tp"), Group(ranks[r + 1], "tp")}, "gpt-tp2pp2");
    EXPECT_TRUE(Group(ranks[r], "dp").is_null());
    EXPECT_EQ(Group(ranks[r], "pp")["group"], "trainers/pp/" + std::to_string(r % 2));
  }
  // Rank 0 (stages 0, 3) all-reduces the embedding's rows twice, the head's dL/dx and the loss;
  // rank 2 (the blocks) 2 x 2 forward, 2 x 2 backward and 2 x 2 again: more.
  EXPECT_LT(Group(ranks[0], "tp")["ops"]["all_reduce"]["bytes"].get<int64_t>(),
            Group(ranks[2], "tp")["ops"]["all_reduce"]["bytes"].get<int64_t>());
}

// Sequence parallelism: the activations' all-reduces become all-gathers and reduce-scatters
// (the same bytes), the norms' and positions' gradients are summed once a step, and a stage
// boundary carries 1/tp of the sequence; with dp 2 x tp 2 x pp 2 every group is counted.
TEST_F(CommAccountingTest, SequenceParallel3DGptBytesPerStepEqualTheModel) {
  const auto ranks = Run("gpt-sp3d", 8,
                         {"parallel.tp=2", "parallel.pp=2", "parallel.dp=2", "parallel.sequence_parallel=true",
                          "parallel.schedule=zb-h1"});
  ExpectMatchesModel(ranks, "gpt-sp3d");
  for (int r = 0; r < 8; r += 2) {
    ExpectTpGroupAgrees({Group(ranks[r], "tp"), Group(ranks[r + 1], "tp")}, "gpt-sp3d");
    const nlohmann::json ops = Group(ranks[r], "tp")["ops"];
    EXPECT_GT(ops["all_gather"]["bytes"].get<int64_t>(), 0);
    EXPECT_EQ(ops["all_gather"]["bytes"], ops["reduce_scatter"]["bytes"]) << "rank " << r;
  }
}

TEST_F(CommAccountingTest, Tp2MlpBytesPerStepEqualTheModel) {
  const auto ranks = Run("mlp-tp2", 2, {"parallel.tp=2"}, kMlp);
  ExpectMatchesModel(ranks, "mlp-tp2");
  ExpectTpGroupAgrees({Group(ranks[0], "tp"), Group(ranks[1], "tp")}, "mlp-tp2");
  // Per micro-batch of 16 samples: fc2's y [16, 8] in forward; fc1 takes the data, so its
  // dL/dx is neither computed nor all-reduced.
  const int64_t per_step = 2 * 16 * 8 * 4;
  EXPECT_EQ(Group(ranks[0], "tp")["ops"]["all_reduce"]["bytes"], kSteps * per_step);
}

}  // namespace
}  // namespace strata
