// propagate_test.cc: sharding propagation over gpt's graph (pure, no communication). Annotating
// only the qkv and fc1 weights Shard(1) on a mesh dimension derives Megatron's whole split (proj
// and fc2 by rows, the token table by vocabulary, the head by columns with the vocab-parallel
// loss), and its collectives carry exactly the bytes the trainer's communication model
// (comm_model.h) counts for the hand-written tensor parallelism, with and without recompute and
// beside a data-parallel dimension; qkv alone derives fc1 by cost; the input alone is data
// parallelism with the trainer's gradient all-reduce bytes; annotations naming nothing, and
// placements the trainer has no plan for, are refused naming the tensor.
#include "trainer/auto/propagate.h"

#include <gtest/gtest.h>

#include "trainer/auto/auto_plan.h"
#include "trainer/parallel/comm_model.h"

namespace strata {
namespace {

// Big enough that the vocab-parallel loss (two all-reduces of a few floats a row) beats
// gathering the logits under LinkCosts' defaults, as it does for examples/auto/gpt_tp.yaml.
constexpr int64_t kBatch = 16, kLayers = 2, kWidth = 32, kContext = 64, kVocab = 256;

TrainJob Gpt(std::string mesh, std::vector<std::string> placements, int64_t micro_batches = 1) {
  TrainJob job;
  job.model.kind = ModelOptions::Kind::kGpt;
  job.model.layers = kLayers;
  job.model.width = kWidth;
  job.model.heads = 4;
  job.model.context = kContext;
  job.model.vocab = kVocab;
  job.train.batch_size = kBatch;
  job.train.micro_batches = micro_batches;
  job.auto_parallel.mesh = std::move(mesh);
  job.auto_parallel.placements = std::move(placements);
  return job;
}

// The hand-written plan's traffic (dp x tp as derived), from the trainer's communication model.
// Unit specs are the unsplit model's, as in comm_model_test: the tp terms depend on widths only.
CommModel HandWritten(TrainJob job, int dp, int tp) {
  job.parallel.dp = dp;
  job.parallel.tp = tp;
  auto plan = ResolvePlan(job, dp * tp);
  EXPECT_TRUE(plan.ok()) << plan.status().ToString();
  auto units = ModelUnits(job.model);
  EXPECT_TRUE(units.ok());
  CommLayout l;
  l.plan = *plan;
  l.units = *units;
  l.micro_batch = {kBatch / dp, kContext};
  l.model = job.model;
  l.recompute = job.parallel.recompute;
  l.dp_all_reduce = dp > 1;
  l.overlap = false;
  return ModelCommTraffic(l);
}

uint64_t Op(const GroupTraffic& g, CommOp op) { return g.per_step[static_cast<size_t>(op)]; }

void ExpectMegatron(const AutoPlan& plan, int d) {
  ASSERT_TRUE(plan.propagation.has_value());
  for (const auto& [name, p] : plan.propagation->parameters) {
    const auto ends = [&](const std::string& s) {
      return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
    };
    std::string want = "R";
    if (ends("qkv.weight") || ends("fc1.weight") || name == "gpt.head.weight") want = "S(1)";
    if (ends("qkv.bias") || ends("fc1.bias") || ends("proj.weight") || ends("fc2.weight") ||
        name == "gpt.tok.weight") {
      want = "S(0)";
    }
    EXPECT_EQ(ToString(p[static_cast<size_t>(d)]), want) << name;
  }
  EXPECT_TRUE(plan.propagation->vocab_parallel_loss);
}

TEST(Propagation, QkvAndFc1Shard1DeriveMegatronsPlanAndBytes) {
  for (int64_t m : {1, 2}) {
    const TrainJob job = Gpt("x=2", {"attn.qkv.weight=S(1)", "mlp.fc1.weight=S(1)"}, m);
    Result<AutoPlan> plan = DeriveAutoPlan(job);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    EXPECT_EQ(plan->tp, 2);
    EXPECT_EQ(plan->dp, 1);
    ExpectMegatron(*plan, 0);
    // Only all-reduces of activations: the embedding's rows, proj's and fc2's outputs forward,
    // qkv's, fc1's and the head's input gradients backward, the loss's three floats a row.
    EXPECT_EQ(plan->per_step.size(), 0u);
    ASSERT_EQ(plan->per_micro_batch.size(), 1u);
    const uint64_t rows = kBatch * kContext;  // train.batch_size is the global micro-batch
    EXPECT_EQ(plan->per_micro_batch.at("all_reduce"),
              rows * 4 * ((1 + 2 * kLayers) * kWidth + (2 * kLayers + 1) * kWidth + 3));
    // The trainer's model of its hand-written tensor parallelism, per step, less the one host
    // all-reduce of the gradients' norm (no placement moves it).
    const CommModel cm = HandWritten(job, 1, 2);
    EXPECT_EQ(static_cast<uint64_t>(m) * plan->per_micro_batch.at("all_reduce"),
              Op(cm.tp, CommOp::kAllReduce));
  }
}

TEST(Propagation, MegatronBytesEqualTheCommunicationModelsWithRecompute) {
  TrainJob job = Gpt("x=2", {"attn.qkv.weight=S(1)", "mlp.fc1.weight=S(1)"});
  job.model.recompute = true;
  Result<AutoPlan> plan = DeriveAutoPlan(job);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->per_micro_batch.at("all_reduce"), Op(HandWritten(job, 1, 2).tp, CommOp::kAllReduce));
  const uint64_t rows = kBatch * kContext;
  EXPECT_EQ(plan->per_micro_batch.at("all_reduce"),
            rows * 4 * ((1 + 4 * kLayers) * kWidth + (2 * kLayers + 1) * kWidth + 3));
}

TEST(Propagation, QkvAloneDerivesTheRestByCost) {
  Result<AutoPlan> plan = DeriveAutoPlan(Gpt("x=2", {"attn.qkv.weight=S(1)"}));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ExpectMegatron(*plan, 0);
  // fc1 was chosen, not given: its line says what each split would cost.
  bool priced = false;
  for (const DerivedTensor& t : plan->tensors) {
    if (t.name == "gpt.block0.mlp.fc1.weight") {
      priced = t.how.find("S(1)") != std::string::npos && t.how.find("(chosen)") != std::string::npos;
    }
  }
  EXPECT_TRUE(priced);
}

TEST(Propagation, InputAloneIsDataParallelWithTheTrainersGradientBytes) {
  const TrainJob job = Gpt("x=2", {"input=S(0)"});
  Result<AutoPlan> plan = DeriveAutoPlan(job);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->dp, 2);
  EXPECT_EQ(plan->tp, 1);
  EXPECT_TRUE(plan->per_micro_batch.empty());
  ASSERT_EQ(plan->per_step.size(), 1u);
  const CommModel cm = HandWritten(job, 2, 1);
  // The comm model's dp all-reduce, less the loss's host all-reduce (its own op).
  EXPECT_EQ(plan->per_step.at("all_reduce"), Op(cm.dp, CommOp::kAllReduce));
  // Unannotated, the input defaults to data parallel too.
  Result<AutoPlan> unannotated = DeriveAutoPlan(Gpt("x=2", {}));
  ASSERT_TRUE(unannotated.ok()) << unannotated.status().ToString();
  EXPECT_EQ(unannotated->per_step, plan->per_step);
}

TEST(Propagation, DataAndTensorParallelOnTwoByTwo) {
  const TrainJob job =
      Gpt("x=2,y=2", {"input=S(0),R", "attn.qkv.weight=R,S(1)", "mlp.fc1.weight=R,S(1)"});
  Result<AutoPlan> plan = DeriveAutoPlan(job);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->roles, (std::vector<std::string>{"dp", "tp"}));
  ExpectMegatron(*plan, 1);
  const CommModel cm = HandWritten(job, 2, 2);
  EXPECT_EQ(plan->per_micro_batch.at("all_reduce"), Op(cm.tp, CommOp::kAllReduce));
  // Every parameter's gradient, as this rank's tp shard holds it, all-reduced over dp.
  const uint64_t c = kWidth;
  const uint64_t shard_floats = kVocab / 2 * c + kContext * c + kLayers * ((12 * c * c + 7 * c) / 2 + 6 * c) +
                 2 * c + c * kVocab / 2;
  EXPECT_EQ(plan->per_step.at("all_reduce"), shard_floats * 4);
  EXPECT_EQ(plan->per_step.size(), 1u);
}

TEST(Propagation, RefusesWhatItCannotPlaceOrRun) {
  Result<AutoPlan> unknown = DeriveAutoPlan(Gpt("x=2", {"attn.qkvv.weight=S(1)"}));
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("no tensor 'attn.qkvv.weight'"), std::string::npos)
      << unknown.status().ToString();
  Result<AutoPlan> rank = DeriveAutoPlan(Gpt("x=2", {"gpt.block0.ln1.weight=S(1)"}));
  ASSERT_FALSE(rank.ok());
  EXPECT_NE(rank.status().message().find("gpt.block0.ln1.weight"), std::string::npos)
      << rank.status().ToString();
  // proj by columns is placeable (the rules gather around it) but is not Megatron's split.
  Result<AutoPlan> proj = DeriveAutoPlan(
      Gpt("x=2", {"attn.qkv.weight=S(1)", "mlp.fc1.weight=S(1)", "gpt.block1.attn.proj.weight=S(1)"}));
  ASSERT_FALSE(proj.ok());
  EXPECT_NE(proj.status().message().find("gpt.block1.attn.proj.weight is S(1) on mesh dimension 'x'"),
            std::string::npos)
      << proj.status().ToString();
}

}  // namespace
}  // namespace strata
