// plan_test.cc: the parallel plan (ResolvePlan's checks, the partitioners) and the models'
// units (what a partition cuts: declared sizes equal what is built; a partial build makes
// only its units' parameters).
#include "trainer/parallel/plan.h"

#include <gtest/gtest.h>

#include "trainer/parallel/groups.h"

namespace strata {
namespace {

TrainJob GptJob(int layers) {
  TrainJob job;
  job.model.kind = ModelOptions::Kind::kGpt;
  job.model.layers = layers;
  job.model.width = 32;
  job.model.heads = 2;
  job.model.context = 16;
  return job;
}

TEST(PartitionTest, BalancedPartitionMinimisesTheLargestStage) {
  auto p = BalancedPartition({1, 1, 1, 1, 1, 1, 1, 1}, 4);
  ASSERT_TRUE(p.ok());
  for (int s = 0; s < 4; ++s) EXPECT_EQ((*p)[s].last - (*p)[s].first, 2);
  // A heavy unit gets a stage of its own.
  p = BalancedPartition({1, 10, 1, 1, 1}, 2);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)[0].first, 0);
  EXPECT_EQ((*p)[0].last, 2);
  EXPECT_EQ((*p)[1].last, 5);
  // The seeds' MLP: fc1 | act, fc2 (ties keep the earliest cut).
  p = BalancedPartition({4198400, 0, 4195328}, 2);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)[0].last, 1);
  EXPECT_EQ(BalancedPartition({1, 1}, 3).status().code(), StatusCode::kInvalidArgument);
}

TEST(PartitionTest, ExplicitCutsAreChecked) {
  auto p = ParsePartition("3,6", 8, 3);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ((*p)[1].first, 3);
  EXPECT_EQ((*p)[2].first, 6);
  EXPECT_EQ((*p)[2].last, 8);
  for (const char* bad : {"3", "3,3", "6,3", "0,3", "3,8", "x,3", "3,6,7"}) {
    auto r = ParsePartition(bad, 8, 3);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().ToString().find("parallel.partition"), std::string::npos) << r.status().ToString();
  }
}

TEST(PlanTest, ResolvesMegatronLayoutAndStages) {
  TrainJob job = GptJob(6);
  job.parallel.pp = 2;
  job.train.micro_batches = 4;
  auto plan = ResolvePlan(job, 4);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->dp, 2);
  EXPECT_EQ(plan->micro_batches, 4);
  ASSERT_EQ(plan->stages.size(), 2u);
  EXPECT_EQ(plan->stages[0].first, 0);
  EXPECT_EQ(plan->stages[1].last, 8);  // embedding, 6 blocks, head
  // Megatron order: tp fastest, then dp, then pp: ranks 0 and 1 are replicas of stage 0.
  EXPECT_EQ(plan->mesh.GroupOf(0, "dp"), (std::vector<int>{0, 1}));
  EXPECT_EQ(plan->mesh.GroupOf(0, "pp"), (std::vector<int>{0, 2}));
}

TEST(PlanTest, BadPlansNameTheirFields) {
  auto expect_error = [](TrainJob job, int world, const std::string& needle) {
    auto plan = ResolvePlan(job, world);
    ASSERT_FALSE(plan.ok()) << needle;
    EXPECT_EQ(plan.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(plan.status().ToString().find(needle), std::string::npos) << plan.status().ToString();
  };
  TrainJob job = GptJob(2);
  job.parallel.pp = 2;
  expect_error(job, 3, "parallel.tp * parallel.pp");
  job.parallel.dp = 3;
  expect_error(job, 4, "must equal the 4 trainers");
  job = GptJob(2);
  job.parallel.pp = 4;
  job.parallel.vpp = 2;
  job.parallel.schedule = "interleaved";
  job.train.micro_batches = 4;
  expect_error(job, 4, "units");  // 8 stages, 4 units
  job = GptJob(2);
  job.parallel.pp = 2;
  job.parallel.schedule = "interleaved";
  expect_error(job, 2, "vpp");
  job.parallel.schedule = "pipedream";
  expect_error(job, 2, "parallel.schedule");
  job = GptJob(2);
  job.train.micro_batches = 4;
  job.parallel.micro_batches = 8;
  expect_error(job, 1, "parallel.micro_batches");
  job = TrainJob();
  job.model.kind = ModelOptions::Kind::kCtr;
  job.parallel.pp = 2;
  expect_error(job, 2, "does not pipeline");
}

TEST(ModelUnitsTest, DeclaredSizesMatchWhatIsBuilt) {
  for (ModelOptions::Kind kind : {ModelOptions::Kind::kMlp, ModelOptions::Kind::kGpt, ModelOptions::Kind::kCtr}) {
    ModelOptions o = GptJob(3).model;
    o.kind = kind;
    o.mlp_in = 16;
    o.mlp_hidden = 24;
    o.mlp_out = 8;
    o.dense = 3;
    auto units = ModelUnits(o);
    ASSERT_TRUE(units.ok());
    int64_t declared = 0;
    for (const UnitSpec& u : *units) declared += u.params;
    auto model = CreateModel(o, ops::Exec::Cpu());
    ASSERT_TRUE(model.ok());
    EXPECT_EQ((*model)->params().NumElements(), declared) << static_cast<int>(kind);
    // Each unit alone builds exactly its declared parameters.
    for (size_t i = 0; i < units->size(); ++i) {
      UnitSelection one(units->size(), false);
      one[i] = true;
      auto part = CreateModel(o, ops::Exec::Cpu(), one);
      ASSERT_TRUE(part.ok());
      EXPECT_EQ((*part)->params().NumElements(), (*units)[i].params) << (*units)[i].name;
      EXPECT_TRUE((*part)->built(static_cast<int>(i)));
    }
  }
}

}  // namespace
}  // namespace strata
