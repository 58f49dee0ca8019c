// auto_parallel_test.cc: the seeds' MLP examples from examples/auto/ (placements in the job's
// `auto` section) run as real trainer processes under strata-launch, through the one trainer and
// its parallel plan: each gives the single process's losses within 1e-5 relative at every one of
// 20 steps, and the bytes the derived plan says rank 0 moves (its `auto:` log line) equal the
// all-reduce bytes the trainer's communicators measured (its communication report).
#include <gtest/gtest.h>

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

// The all-reduce bytes per step of rank 0's `group` ("dp" or "tp") in the communication report
// (0 when there is no such group).
uint64_t MeasuredAllReduceBytes(const std::string& log, const std::string& group) {
  const std::regex row(R"(\[trainer 0\].*trainers/)" + group +
                       R"(/\d+ \(\d+\)\s+all_reduce\s+\d+\s+(\d+))");
  std::smatch m;
  return std::regex_search(log, m, row) ? std::stoull(m[1]) : 0;
}

// What the derived plan says rank 0 moves: per micro-batch (activations: the tensor-parallel
// all-reduce) and per step (gradients: the data-parallel all-reduce). -1s when not logged.
std::pair<int64_t, int64_t> DerivedBytes(const std::string& log) {
  static const std::regex line(R"(auto: rank 0 moves (\d+) bytes per micro-batch and (\d+) per step)");
  std::smatch m;
  if (!std::regex_search(log, m, line)) return {-1, -1};
  return {std::stoll(m[1]), std::stoll(m[2])};
}

class AutoParallelTest : public testing::EquivalenceTest {
 protected:
  void ExpectMatchesOneProcess(const std::string& example, const std::string& tag, int trainers,
                               const std::string& roles) {
    const std::string job = Example(example);
    std::string log;
    ASSERT_EQ(RunLocal(job, {"auto.mesh=''", "sync.mode=local", "train.steps=20",
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
    // One micro-batch a step: the rules' bytes are the groups' measured bytes per step.
    const auto [per_micro_batch, per_step] = DerivedBytes(log);
    EXPECT_EQ(per_micro_batch, static_cast<int64_t>(MeasuredAllReduceBytes(log, "tp"))) << log;
    EXPECT_EQ(per_step, static_cast<int64_t>(MeasuredAllReduceBytes(log, "dp"))) << log;
    EXPECT_GT(per_micro_batch + per_step, 0) << log;
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

// Placements the trainer has no plan for are refused before anything runs, naming them.
TEST_F(AutoParallelTest, UnsupportedPlacementsAreRefused) {
  std::string log;
  EXPECT_EQ(Launch(Example("mlp_dp.yaml"), 0, 2, {"auto.placements=[input=S(1)]"}, &log), 2) << log;
  EXPECT_NE(log.find("on mesh dimension 'x' the placements (input S(1)"), std::string::npos) << log;
}

}  // namespace
}  // namespace strata
