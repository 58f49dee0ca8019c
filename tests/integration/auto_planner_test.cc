// auto_planner_test.cc: `parallel.auto: true` (the planner of issue #19) on real trainer
// processes: trainer 0 calibrates, ranks the plans and publishes the top one; both trainers run
// it (the trainer's own "parallel plan" line is the chosen one) and the log says why it won (the
// top three with their predicted times). A memory budget nothing fits is refused naming the field.
#include <gtest/gtest.h>

#include <regex>
#include <string>

#include "tests/integration/launch_fixture.h"

namespace strata {
namespace {

using testing::Losses;

class AutoParallelPlannerTest : public testing::LaunchFixture {};

const std::string kJob = std::string(STRATA_SOURCE_DIR) + "/examples/auto/gpt_planner.yaml";

TEST_F(AutoParallelPlannerTest, TwoTrainersRunTheTopPlanAndSayWhy) {
  std::string log;
  const std::string cache = dir_.File("calibration.json");
  ASSERT_EQ(Launch(kJob, 0, 2,
                   {"train.steps=3", "train.progress=false", "parallel.auto_cache=" + cache,
                    "train.metrics_path=" + Metrics("planner")},
                   &log),
            0)
      << log;
  std::smatch chose;
  ASSERT_TRUE(std::regex_search(log, chose, std::regex(R"(parallel\.auto: chose dp(\d) tp(\d) pp(\d))"))) << log;
  // The top three, ranked, with their predicted step times.
  for (const char* rank : {R"(parallel\.auto:\s+1\s+dp)", R"(parallel\.auto:\s+2\s+dp)", R"(parallel\.auto:\s+3\s+dp)"}) {
    EXPECT_TRUE(std::regex_search(log, std::regex(rank))) << rank << "\n" << log;
  }
  // The trainer runs exactly that plan.
  const std::string plan = "parallel plan: dp=" + chose[1].str() + " tp=" + chose[2].str() + " pp=" + chose[3].str();
  EXPECT_NE(log.find(plan), std::string::npos) << plan << "\n" << log;
  size_t steps = Losses(Rank("planner", 0)).size() + Losses(Rank("planner", 1)).size();
  EXPECT_GE(steps, 3u) << log;
  // The calibration was cached: a second run measures nothing.
  ASSERT_EQ(Launch(kJob, 0, 2, {"train.steps=1", "train.progress=false", "parallel.auto_cache=" + cache}, &log), 0)
      << log;
  EXPECT_EQ(log.find("calibrating"), std::string::npos) << log;
  EXPECT_EQ(log.find("measuring collectives"), std::string::npos) << log;
  EXPECT_NE(log.find(plan), std::string::npos) << log;
}

TEST_F(AutoParallelPlannerTest, AMemoryBudgetNothingFitsIsRefused) {
  std::string log;
  EXPECT_NE(Launch(kJob, 0, 2,
                   {"train.steps=1", "train.progress=false", "train.memory_limit_mb=1",
                    "parallel.auto_cache=" + dir_.File("calibration.json")},
                   &log),
            0)
      << log;
  EXPECT_NE(log.find("fits train.memory_limit_mb 1 MiB"), std::string::npos) << log;
}

}  // namespace
}  // namespace strata
