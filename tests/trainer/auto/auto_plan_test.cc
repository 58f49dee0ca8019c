// auto_plan_test.cc: the plans the seeds' MLP placements derive (pure, no communication): data
// parallel moves only the weights' gradients (all-reduced, as many bytes as the parameters),
// tensor parallel only fc2's output (one all-reduce per micro-batch, none for the weights), the
// 2 x 2 hybrid both on their own dimensions; placements the trainer has no plan for, unknown
// tensors and shard axes past a tensor's rank are refused naming what was wrong; the text forms
// of meshes and placements.
#include "trainer/auto/auto_plan.h"

#include <gtest/gtest.h>

#include "trainer/auto/placement_text.h"

namespace strata {
namespace {

constexpr int64_t kB = 16, kIn = 32, kHidden = 64, kOut = 8;

TrainJob Mlp(std::string mesh, std::vector<std::string> placements) {
  TrainJob job;
  job.model.kind = ModelOptions::Kind::kMlp;
  job.model.mlp_in = kIn;
  job.model.mlp_hidden = kHidden;
  job.model.mlp_out = kOut;
  job.train.batch_size = kB;
  job.auto_parallel.mesh = std::move(mesh);
  job.auto_parallel.placements = std::move(placements);
  return job;
}

uint64_t Bytes(const AutoPlan& plan, bool per_step) {
  uint64_t sum = 0;
  for (const DerivedReshard& r : plan.reshards) {
    if (r.per_step == per_step) sum += r.bytes;
  }
  return sum;
}

std::string Placed(const AutoPlan& plan, const std::string& name) {
  for (const DerivedTensor& t : plan.tensors) {
    if (t.name == name) return ToString(t.placements);
  }
  return "(none)";
}

TEST(AutoPlan, InputShard0IsDataParallel) {
  Result<AutoPlan> plan = DeriveAutoPlan(Mlp("x=2", {"input=S(0)"}));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->dp, 2);
  EXPECT_EQ(plan->tp, 1);
  EXPECT_EQ(plan->roles, std::vector<std::string>{"dp"});
  EXPECT_EQ(Placed(*plan, "mlp.fc2 output"), "[S(0)]");
  EXPECT_EQ(Placed(*plan, "loss"), "[P(sum)]");
  // Activations stay put; every parameter's gradient is a partial sum all-reduced once a step.
  EXPECT_EQ(Bytes(*plan, false), 0u);
  const uint64_t params = kIn * kHidden + kHidden + kHidden * kOut + kOut;
  EXPECT_EQ(Bytes(*plan, true), params * 4);
  for (const DerivedReshard& r : plan->reshards) {
    EXPECT_EQ(r.steps, "all_reduce on x: P(sum) -> R") << r.what;
  }
}

TEST(AutoPlan, W0Shard1W1Shard0IsMegatronTensorParallel) {
  Result<AutoPlan> plan = DeriveAutoPlan(Mlp("x=2", {"w0=S(1)", "w1=S(0)"}));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->dp, 1);
  EXPECT_EQ(plan->tp, 2);
  EXPECT_EQ(Placed(*plan, "mlp.fc1 output"), "[S(1)]");
  EXPECT_EQ(Placed(*plan, "mlp.fc2 x @ w"), "[P(sum)]");
  // fc2's partial output is all-reduced before the loss (per micro-batch); the bias is added to
  // one rank's partial (a local partialize); no weight gradient needs a collective.
  EXPECT_EQ(Bytes(*plan, true), 0u);
  EXPECT_EQ(Bytes(*plan, false), static_cast<uint64_t>(kB * kOut * 4));
  bool all_reduced = false;
  for (const DerivedReshard& r : plan->reshards) {
    if (r.what == "mlp.fc2 output") {
      EXPECT_EQ(r.steps, "all_reduce on x: P(sum) -> R");
      all_reduced = true;
    }
  }
  EXPECT_TRUE(all_reduced);
}

TEST(AutoPlan, HybridOnTwoDimensions) {
  Result<AutoPlan> plan =
      DeriveAutoPlan(Mlp("x=2,y=2", {"input=S(0),R", "w0=R,S(1)", "w1=R,S(0)"}));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->roles, (std::vector<std::string>{"dp", "tp"}));
  EXPECT_EQ(plan->dp, 2);
  EXPECT_EQ(plan->tp, 2);
  // Per micro-batch: fc2's output, [B/2, out], all-reduced over y; per step: each rank's shard of
  // the parameters all-reduced over x (w0 and b0 halves, w1 half, b1 whole).
  EXPECT_EQ(Bytes(*plan, false), static_cast<uint64_t>(kB / 2 * kOut * 4));
  const uint64_t shard = kIn * kHidden / 2 + kHidden / 2 + kHidden / 2 * kOut + kOut;
  EXPECT_EQ(Bytes(*plan, true), shard * 4);
  const std::vector<std::string> lines = plan->Explain();
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines[0].find("x dp y tp"), std::string::npos) << lines[0];
}

// The seeds' pipeline: w0 on mesh 0, w1 on mesh 1. Mesh 0's rank sends its activation [B, hidden]
// forward and receives its gradient, once per micro-batch; with the input sharded over x, its
// share of the rows.
TEST(AutoPlan, TwoMeshesArePipelineStages) {
  TrainJob job = Mlp("x=1", {"w0@0=R", "w1@1=R"});
  job.auto_parallel.meshes = 2;
  Result<AutoPlan> plan = DeriveAutoPlan(job);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->pp, 2);
  EXPECT_EQ(plan->per_micro_batch.at("send"), static_cast<uint64_t>(kB * kHidden * 4));
  EXPECT_EQ(plan->per_micro_batch.at("recv"), static_cast<uint64_t>(kB * kHidden * 4));
  EXPECT_TRUE(plan->per_step.empty());
  ASSERT_TRUE(ApplyAutoPlan(job).ok());
  EXPECT_EQ(job.parallel.pp, 2);
  EXPECT_EQ(job.parallel.partition, "2");
  EXPECT_TRUE(CheckAutoWorld(job, 2).ok());
  EXPECT_FALSE(CheckAutoWorld(job, 1).ok());

  job = Mlp("x=2", {"input=S(0)", "w1@1=R"});
  job.auto_parallel.meshes = 2;
  plan = DeriveAutoPlan(job);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->dp, 2);
  EXPECT_EQ(plan->pp, 2);
  EXPECT_EQ(plan->per_micro_batch.at("send"), static_cast<uint64_t>(kB / 2 * kHidden * 4));
  // Rank 0 is on the first stage: it all-reduces fc1's gradients, not fc2's.
  EXPECT_EQ(plan->per_step.at("all_reduce"), static_cast<uint64_t>(kIn * kHidden + kHidden) * 4);
  EXPECT_EQ(plan->per_micro_batch.count("all_reduce"), 0u);

  // w1 must be on the last mesh, and a mesh index must exist.
  job = Mlp("x=1", {"w0=R"});
  job.auto_parallel.meshes = 2;
  EXPECT_FALSE(DeriveAutoPlan(job).ok());
  job = Mlp("x=1", {"w1@2=R"});
  job.auto_parallel.meshes = 2;
  auto bad = DeriveAutoPlan(job);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("on mesh '2'"), std::string::npos) << bad.status().ToString();
}

TEST(AutoPlan, RefusesWhatTheTrainerDoesNotRun) {
  auto bad = DeriveAutoPlan(Mlp("x=2", {"input=S(1)"}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("mesh dimension 'x'"), std::string::npos)
      << bad.status().ToString();
  bad = DeriveAutoPlan(Mlp("x=2,y=2", {"input=S(0),S(0)"}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("both dp"), std::string::npos) << bad.status().ToString();
  bad = DeriveAutoPlan(Mlp("x=2", {"w2=S(0)"}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'w2'"), std::string::npos);
  bad = DeriveAutoPlan(Mlp("x=2", {"w0=S(2)"}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("mlp.fc1.weight"), std::string::npos);
  EXPECT_NE(bad.status().message().find("axis 2"), std::string::npos);
  bad = DeriveAutoPlan(Mlp("x=2", {"w0=S(1),R"}));
  ASSERT_FALSE(bad.ok());
  TrainJob ctr = Mlp("x=2", {});
  ctr.model.kind = ModelOptions::Kind::kCtr;  // gpt goes through propagation (propagate_test.cc)
  EXPECT_EQ(DeriveAutoPlan(ctr).status().code(), StatusCode::kUnimplemented);
}

TEST(AutoPlan, ApplySetsTheParallelSectionAndChecksTheWorld) {
  TrainJob job = Mlp("x=2,y=2", {"input=S(0),R", "w0=R,S(1)", "w1=R,S(0)"});
  ASSERT_TRUE(ApplyAutoPlan(job).ok());
  EXPECT_EQ(job.parallel.dp, 2);
  EXPECT_EQ(job.parallel.tp, 2);
  EXPECT_TRUE(CheckAutoWorld(job, 4).ok());
  job = Mlp("x=2", {"input=S(0)"});
  const Status world = CheckAutoWorld(job, 4);  // the mesh has 2 ranks
  ASSERT_FALSE(world.ok());
  EXPECT_NE(world.message().find("auto.mesh"), std::string::npos) << world.ToString();
  job.parallel.tp = 2;
  Status s = ApplyAutoPlan(job);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("leave them unset"), std::string::npos) << s.ToString();
}

TEST(PlacementText, MeshesAndPlacements) {
  Result<ProcessMesh> mesh = ParseMesh("x=2, y=3");
  ASSERT_TRUE(mesh.ok()) << mesh.status().ToString();
  EXPECT_EQ(mesh->ToString(), "ProcessMesh(x=2, y=3)");
  EXPECT_FALSE(ParseMesh("x").ok());
  EXPECT_FALSE(ParseMesh("x=0").ok());
  EXPECT_EQ(*ParsePlacement("Shard(1)"), Placement(Shard{1}));
  EXPECT_EQ(*ParsePlacement("S(0)"), Placement(Shard{0}));
  EXPECT_EQ(*ParsePlacement("R"), Placement(Replicate{}));
  EXPECT_EQ(*ParsePlacement("Partial(max)"), Placement(Partial{ReduceOp::kMax}));
  EXPECT_EQ(*ParsePlacement("P"), Placement(Partial{ReduceOp::kSum}));
  EXPECT_FALSE(ParsePlacement("S(-1)").ok());
  EXPECT_FALSE(ParsePlacement("Q").ok());
  auto named = ParseTensorPlacements("w0 = S(1), R", *mesh);
  ASSERT_TRUE(named.ok()) << named.status().ToString();
  EXPECT_EQ(named->name, "w0");
  EXPECT_EQ(ToString(named->placements), "[S(1), R]");
  EXPECT_FALSE(ParseTensorPlacements("w0=S(1)", *mesh).ok());  // one for two dimensions
}

}  // namespace
}  // namespace strata
