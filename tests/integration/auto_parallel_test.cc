// auto_parallel_test.cc: the seeds' MLP examples from examples/auto/ (placements in the job's
// `auto` section) run as real trainer processes under strata-launch, through the one trainer and
// its parallel plan: each gives the single process's losses within 1e-5 relative at every one of
// 20 steps, and the bytes the derived plan says rank 0 moves (its `auto:` log line) equal the
// all-reduce bytes the trainer's communicators measured (its communication report).
#include <gtest/gtest.h>

#include <map>
#include <regex>
#include <utility>
#include <string>
#include <vector>

#include "tests/integration/equivalence.h"

namespace strata {
namespace {

using testing::Losses;
using testing::MaxRelativeDifference;

std::string Example(const std::string& name) {
  return std::string(STRATA_SOURCE_DIR) + "/examples/auto/" + name;
}

// The bytes per step of `op` on rank 0's `group` ("dp", "tp", "pp") in the communication report
// (0 when there is no such row).
uint64_t Measured(const std::string& log, const std::string& group, const std::string& op) {
  const std::regex row(R"(\[trainer 0\].*trainers/)" + group + R"(/\d+ \(\d+\)\s+)" + op +
                       R"(\s+\d+\s+(\d+))");
  std::smatch m;
  return std::regex_search(log, m, row) ? std::stoull(m[1]) : 0;
}

// What the derived plan says rank 0 moves, by operation: per micro-batch (activations) and per
// step (gradients), from its "auto: rank 0 moves ..." line.
struct Derived {
  bool logged = false;
  std::map<std::string, uint64_t> per_micro_batch, per_step;
};
Derived DerivedBytes(const std::string& log) {
  static const std::regex line(R"(auto: rank 0 moves per micro-batch: ([^;]*); per step: (.*))");
  static const std::regex item(R"((\w+) (\d+))");
  Derived d;
  std::smatch m;
  if (!std::regex_search(log, m, line)) return d;
  d.logged = true;
  auto parse = [&](const std::string& text, std::map<std::string, uint64_t>& out) {
    for (auto it = std::sregex_iterator(text.begin(), text.end(), item);
         it != std::sregex_iterator(); ++it) {
      out[(*it)[1]] = std::stoull((*it)[2]);
    }
  };
  parse(m[1], d.per_micro_batch);
  parse(m[2], d.per_step);
  return d;
}

class AutoParallelTest : public testing::EquivalenceTest {
 protected:
  // `micro_batches`: the example's train.micro_batches. `compare_bytes`: hold the derived bytes
  // to the measured ones (not under ZeRO, which reduce-scatters and all-gathers instead).
  void ExpectMatchesOneProcess(const std::string& example, const std::string& tag, int trainers,
                               const std::string& roles, uint64_t micro_batches = 1,
                               bool compare_bytes = true) {
    const std::string job = Example(example);
    std::string log;
    ASSERT_EQ(RunLocal(job, {"auto.mesh=''", "sync.mode=local", "parallel.zero=0", "train.steps=20",
                             "train.metrics_path=" + Rank(tag + "-local", 0)},
                       &log),
              0)
        << log;
    const std::vector<double> base = Losses(Rank(tag + "-local", 0));
    ASSERT_EQ(base.size(), 20u) << log;
    ASSERT_EQ(Launch(job, 0, trainers,
                     {"train.steps=20", "train.progress=false", "train.metrics_path=" + Metrics(tag)},
                     &log),
              0)
        << log;
    const std::vector<double> losses = Losses(Rank(tag, 0));
    ASSERT_EQ(losses.size(), base.size()) << log;
    EXPECT_LT(MaxRelativeDifference(base, losses), 1e-5) << tag << "\n" << log;
    EXPECT_NE(log.find(roles), std::string::npos) << log;
    if (!compare_bytes) return;
    // The rules' bytes beside the trainer's measured ones, per group: activations' all-reduces
    // on tp and hand-offs on pp once per micro-batch, gradients' all-reduces on dp once a step.
    Derived d = DerivedBytes(log);
    ASSERT_TRUE(d.logged) << log;
    EXPECT_EQ(micro_batches * d.per_micro_batch["all_reduce"], Measured(log, "tp", "all_reduce")) << log;
    EXPECT_EQ(micro_batches * d.per_micro_batch["send"], Measured(log, "pp", "send")) << log;
    EXPECT_EQ(micro_batches * d.per_micro_batch["recv"], Measured(log, "pp", "recv")) << log;
    EXPECT_EQ(d.per_step["all_reduce"], Measured(log, "dp", "all_reduce")) << log;
    EXPECT_EQ(d.per_micro_batch.size() + d.per_step.size(),
              static_cast<size_t>((d.per_micro_batch.count("all_reduce") > 0) +
                                  (d.per_micro_batch.count("send") > 0) +
                                  (d.per_micro_batch.count("recv") > 0) +
                                  (d.per_step.count("all_reduce") > 0)))
        << "an operation the comparison does not cover\n" << log;
  }
};

// Input Shard(0): data parallel, dp 2.
TEST_F(AutoParallelTest, SeedsMlpDataParallelMatchesOneProcess) {
  ExpectMatchesOneProcess("mlp_dp.yaml", "auto-dp", 2,
                          "x dp -> parallel.dp 2 x parallel.tp 1");
}

// w0 Shard(1), w1 Shard(0): Megatron tensor parallel, tp 2.
TEST_F(AutoParallelTest, SeedsMlpTensorParallelMatchesOneProcess) {
  ExpectMatchesOneProcess("mlp_tp.yaml", "auto-tp", 2,
                          "x tp -> parallel.dp 1 x parallel.tp 2");
}

// Both on a 2 x 2 mesh: dp 2 x tp 2.
TEST_F(AutoParallelTest, SeedsMlpHybridMatchesOneProcess) {
  ExpectMatchesOneProcess("mlp_dp_tp.yaml", "auto-dp-tp", 4,
                          "x dp y tp -> parallel.dp 2 x parallel.tp 2");
}

// w0 on mesh 0, w1 on mesh 1: two pipeline stages (one rank each), the activation handed on.
TEST_F(AutoParallelTest, SeedsMlpPipelineMatchesOneProcess) {
  ExpectMatchesOneProcess("mlp_pp.yaml", "auto-pp", 2,
                          "-> parallel.dp 1 x parallel.tp 1 x parallel.pp 2", 2);
}

// The seeds' hybrid as written: two 2 x 2 meshes, 8 trainers (dp 2 x tp 2 x pp 2), the
// optimizer state sharded over dp (ZeRO-1).
TEST_F(AutoParallelTest, SeedsMlpHybridOnTwoMeshesMatchesOneProcess) {
  ExpectMatchesOneProcess("mlp_hybrid.yaml", "auto-hybrid", 8,
                          "x dp y tp -> parallel.dp 2 x parallel.tp 2 x parallel.pp 2", 2, false);
}

// gpt with only every block's qkv and fc1 weights annotated Shard(1): propagation derives
// Megatron's split (tp 2), whose derived all-reduce bytes equal the trainer's measured ones, and
// the losses equal one process's.
TEST_F(AutoParallelTest, GptFromQkvAndFc1AnnotationsIsMegatronTensorParallel) {
  ExpectMatchesOneProcess("gpt_tp.yaml", "auto-gpt-tp", 2, "x tp -> parallel.dp 1 x parallel.tp 2");
}

// The same on a 2 x 2 mesh: x, where no parameter is sharded, is data parallel.
TEST_F(AutoParallelTest, GptOnTwoByTwoIsDataTimesTensorParallel) {
  ExpectMatchesOneProcess("gpt_dp_tp.yaml", "auto-gpt-dp-tp", 4,
                          "x dp y tp -> parallel.dp 2 x parallel.tp 2");
}

// Placements the trainer has no plan for are refused before anything runs, naming them.
TEST_F(AutoParallelTest, UnsupportedPlacementsAreRefused) {
  std::string log;
  EXPECT_EQ(Launch(Example("mlp_dp.yaml"), 0, 2, {"auto.placements=[input=S(1)]"}, &log), 2) << log;
  EXPECT_NE(log.find("on mesh dimension 'x' the placements (input S(1)"), std::string::npos) << log;
  // gpt: a proj split by columns propagates (the rules gather around it) but is not Megatron's.
  EXPECT_EQ(Launch(Example("gpt_tp.yaml"), 0, 2,
                   {"auto.placements=[attn.qkv.weight=S(1),mlp.fc1.weight=S(1),attn.proj.weight=S(1)]"},
                   &log),
            2)
      << log;
  EXPECT_NE(log.find("gpt.block0.attn.proj.weight is S(1) on mesh dimension 'x'"), std::string::npos) << log;
}

}  // namespace
}  // namespace strata
